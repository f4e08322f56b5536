//! What the fuzz harnesses of the overlay (`overlay/tests/fuzz.rs`) and the
//! node (`node/tests/fuzz.rs`) share: a counting allocator that measures the
//! peak memory of one decode, the mutations applied to valid encodings, and
//! a runner that tries a decoder on generated inputs and checks each one.
//!
//! A test binary installs the allocator with
//! `#[global_allocator] static ALLOC: fuzz_support::Counting = fuzz_support::Counting;`.
//!
//! Cases per decoder: [`CI_CASES`] by default, `ZORILLA_FUZZ_CASES` to
//! override (the long run in BENCHMARKS.md).

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Instant;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Inputs per decoder and kind (mutated, arbitrary) in an ordinary `cargo
/// test`: together the node's and the overlay's harnesses stay within a
/// minute on a loaded two-core machine.
pub(crate) const CI_CASES: u32 = 3000;

/// The bound on one decode's peak memory: [`BYTES_PER_INPUT_BYTE`] times
/// the input's length plus [`CONSTANT_BYTES`].
pub(crate) const BYTES_PER_INPUT_BYTE: usize = 512;
/// See [`BYTES_PER_INPUT_BYTE`]: room for ciborium's and serde's fixed
/// costs (a 4 KiB scratch buffer lives on the stack, not here).
pub(crate) const CONSTANT_BYTES: usize = 64 * 1024;

/// The most memory a decode of `len` input bytes may allocate at once.
pub(crate) fn bound(len: usize) -> usize {
    len.saturating_mul(BYTES_PER_INPUT_BYTE)
        .saturating_add(CONSTANT_BYTES)
}

/// Cases per decoder and kind: `ZORILLA_FUZZ_CASES`, else [`CI_CASES`].
pub(crate) fn cases() -> u32 {
    std::env::var("ZORILLA_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_CASES)
}

// ----- the counting allocator -----

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static NOW: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// The system allocator, counting the bytes the current thread holds while
/// [`peak_during`] runs.
pub(crate) struct Counting;

fn note(delta: isize) {
    // try_with: the allocator also runs while thread locals are torn down.
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            let now = NOW.get() + delta;
            NOW.set(now);
            PEAK.set(PEAK.get().max(now));
        }
    });
}

#[allow(unsafe_code)]
// SAFETY: every call is passed on to `System` unchanged; only counters of
// this thread change besides.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is System's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Counted as if old and new were held at once, as they may be.
            note(new_size as isize);
            note(-(layout.size() as isize));
        }
        p
    }
}

/// Runs `f` and returns its result with the most bytes this thread held at
/// once meanwhile (beyond what it held before).
pub(crate) fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    NOW.set(0);
    PEAK.set(0);
    TRACKING.set(true);
    let r = f();
    TRACKING.set(false);
    (r, PEAK.get().max(0) as usize)
}

// ----- mutations -----

/// One change to an input.
#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    /// Flip one bit.
    FlipBit(Index, u8),
    /// Insert bytes.
    Insert(Index, Vec<u8>),
    /// Delete up to `n` bytes.
    Delete(Index, usize),
    /// Cut the input short.
    Truncate(Index),
    /// Replace the tail from here with the tail of another valid encoding
    /// (the seed of that one), from its position.
    Splice(Index, u64, Index),
    /// Replace the next CBOR integer header from here by an extreme value.
    ExtremeInt(Index, Extreme),
    /// Make the next string, array or map header from here declare
    /// `len` items (keeping its major type), or insert one of `major`.
    HugeLength(Index, Option<u8>, u64),
    /// Insert `depth` containers that open and never close (or close).
    Nest(Index, Nesting, u16),
}

/// Extreme integers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Extreme {
    /// 2^64 - 1.
    MaxU64,
    /// -2^64.
    MinNeg,
    /// 2^32 - 1.
    MaxU32,
    /// 2^32.
    U32Plus1,
    /// 255 (one byte argument).
    MaxU8,
    /// 0.
    Zero,
}

/// How to nest.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Nesting {
    /// `[[[[...`, definite length 1.
    Arrays,
    /// `[_ [_ [_ ...`, indefinite.
    Indefinite,
    /// `{0: {0: {0: ...`.
    Maps,
    /// Tags on tags.
    Tags,
}

fn extreme() -> impl Strategy<Value = Extreme> {
    prop_oneof![
        Just(Extreme::MaxU64),
        Just(Extreme::MinNeg),
        Just(Extreme::MaxU32),
        Just(Extreme::U32Plus1),
        Just(Extreme::MaxU8),
        Just(Extreme::Zero),
    ]
}

fn huge_len() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(1 << 32),
        Just(u64::from(u32::MAX)),
        Just(1 << 31),
        Just(1 << 20),
        Just(65_536),
        0..100_000u64,
    ]
}

/// Any mutation.
pub(crate) fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::FlipBit(i, b % 8)),
        2 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        2 => (any::<Index>(), 1..64usize).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => (any::<Index>(), any::<u64>(), any::<Index>())
            .prop_map(|(i, s, j)| Mutation::Splice(i, s, j)),
        2 => (any::<Index>(), extreme()).prop_map(|(i, e)| Mutation::ExtremeInt(i, e)),
        2 => (any::<Index>(), prop::option::of(2..6u8), huge_len())
            .prop_map(|(i, m, n)| Mutation::HugeLength(i, m, n)),
        1 => (
            any::<Index>(),
            prop_oneof![
                Just(Nesting::Arrays),
                Just(Nesting::Indefinite),
                Just(Nesting::Maps),
                Just(Nesting::Tags)
            ],
            1..5000u16
        )
            .prop_map(|(i, n, d)| Mutation::Nest(i, n, d)),
    ]
}

/// A CBOR header of major type `major` with argument `arg`, in its
/// shortest form.
pub(crate) fn header(major: u8, arg: u64) -> Vec<u8> {
    let m = major << 5;
    match arg {
        0..=23 => vec![m | arg as u8],
        24..=0xff => vec![m | 24, arg as u8],
        0x100..=0xffff => [&[m | 25][..], &(arg as u16).to_be_bytes()].concat(),
        0x1_0000..=0xffff_ffff => [&[m | 26][..], &(arg as u32).to_be_bytes()].concat(),
        _ => [&[m | 27][..], &arg.to_be_bytes()].concat(),
    }
}

/// The length of the header starting at `buf[0]` (1 + its argument's
/// bytes), if it is a well-formed one.
fn header_len(first: u8) -> Option<usize> {
    match first & 0x1f {
        0..=23 => Some(1),
        24 => Some(2),
        25 => Some(3),
        26 => Some(5),
        27 => Some(9),
        _ => None,
    }
}

/// The first position from `from` on holding a header of one of `majors`.
fn find_header(buf: &[u8], from: usize, majors: &[u8]) -> Option<usize> {
    (from..buf.len()).find(|&p| majors.contains(&(buf[p] >> 5)) && header_len(buf[p]).is_some())
}

/// Applies `m` to `buf`; `other(seed)` is another valid encoding to
/// splice with.
pub(crate) fn apply(buf: &mut Vec<u8>, m: &Mutation, other: &dyn Fn(u64) -> Vec<u8>) {
    let at = |i: &Index, len: usize| if len == 0 { 0 } else { i.index(len + 1) };
    match m {
        Mutation::FlipBit(i, bit) => {
            if !buf.is_empty() {
                let p = i.index(buf.len());
                buf[p] ^= 1 << bit;
            }
        }
        Mutation::Insert(i, bytes) => {
            let p = at(i, buf.len());
            buf.splice(p..p, bytes.iter().copied());
        }
        Mutation::Delete(i, n) => {
            if !buf.is_empty() {
                let p = i.index(buf.len());
                let end = (p + n).min(buf.len());
                buf.drain(p..end);
            }
        }
        Mutation::Truncate(i) => {
            let p = at(i, buf.len());
            buf.truncate(p);
        }
        Mutation::Splice(i, seed, j) => {
            let p = at(i, buf.len());
            let theirs = other(*seed);
            let q = at(j, theirs.len()).min(theirs.len());
            buf.truncate(p);
            buf.extend_from_slice(&theirs[q..]);
        }
        Mutation::ExtremeInt(i, e) => {
            let from = at(i, buf.len());
            let Some(p) = find_header(buf, from, &[0, 1]) else {
                return;
            };
            let new = match e {
                Extreme::MaxU64 => header(0, u64::MAX),
                Extreme::MinNeg => header(1, u64::MAX),
                Extreme::MaxU32 => header(0, u64::from(u32::MAX)),
                Extreme::U32Plus1 => header(0, 1 << 32),
                Extreme::MaxU8 => header(0, 255),
                Extreme::Zero => header(0, 0),
            };
            let old = header_len(buf[p]).unwrap_or(1).min(buf.len() - p);
            buf.splice(p..p + old, new);
        }
        Mutation::HugeLength(i, major, len) => {
            let from = at(i, buf.len());
            match major {
                Some(major) => {
                    buf.splice(from..from, header(*major, *len));
                }
                None => {
                    let Some(p) = find_header(buf, from, &[2, 3, 4, 5]) else {
                        return;
                    };
                    let old = header_len(buf[p]).unwrap_or(1).min(buf.len() - p);
                    let major = buf[p] >> 5;
                    buf.splice(p..p + old, header(major, *len));
                }
            }
        }
        Mutation::Nest(i, nesting, depth) => {
            let p = at(i, buf.len());
            let unit: &[u8] = match nesting {
                Nesting::Arrays => &[0x81],
                Nesting::Indefinite => &[0x9f],
                Nesting::Maps => &[0xa1, 0x00],
                Nesting::Tags => &[0xc6],
            };
            let bytes: Vec<u8> = unit
                .iter()
                .copied()
                .cycle()
                .take(unit.len() * *depth as usize)
                .collect();
            buf.splice(p..p, bytes);
        }
    }
}

// ----- the runner -----

/// Sets the 4-byte big-endian length prefix of a client frame to what
/// follows it, so that the CBOR decoder sees the mutated body.
pub(crate) fn fix_frame_length(buf: &mut [u8]) {
    if buf.len() >= 4 {
        let len = (buf.len() - 4) as u32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
    }
}

/// What one decoder's run found.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Inputs tried.
    pub(crate) inputs: u64,
    /// Inputs that decoded.
    pub(crate) decoded: u64,
    /// The largest peak of one decode, and its input's length.
    pub(crate) max_peak: (usize, usize),
    /// The largest peak over the bound's constant, per input byte.
    pub(crate) max_ratio: f64,
}

/// Tries `decode` on `cases` inputs from `inputs`, checking each one
/// against the memory [`bound`]; a panic or a bound exceeded fails with the
/// (shrunk) input. Prints one line of figures (for BENCHMARKS.md).
pub(crate) fn run(
    name: &str,
    inputs: impl Strategy<Value = Vec<u8>>,
    decode: impl Fn(&[u8]) -> Result<(), String>,
) -> Stats {
    let cases = cases();
    let config = Config {
        cases,
        // A failure is reported with its input; the regression test of it
        // goes into the test file by hand.
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let stats = std::cell::RefCell::new(Stats::default());
    let start = Instant::now();
    let result = runner.run(&inputs, |input| {
        let (result, peak) = peak_during(|| decode(input.as_slice()));
        let mut s = stats.borrow_mut();
        s.inputs += 1;
        s.decoded += u64::from(result.is_ok());
        if peak > s.max_peak.0 {
            s.max_peak = (peak, input.len());
        }
        let ratio = peak.saturating_sub(CONSTANT_BYTES) as f64 / input.len().max(1) as f64;
        s.max_ratio = s.max_ratio.max(ratio);
        if peak > bound(input.len()) {
            return Err(TestCaseError::fail(format!(
                "{name}: decoding {} bytes held {peak} bytes at once (bound {})",
                input.len(),
                bound(input.len())
            )));
        }
        Ok(())
    });
    let stats = stats.into_inner();
    eprintln!(
        "fuzz {name}: {} inputs ({} decoded) in {:.1} s; peak {} bytes for a {}-byte input; \
         at most {:.1} bytes per input byte over {} bytes",
        stats.inputs,
        stats.decoded,
        start.elapsed().as_secs_f64(),
        stats.max_peak.0,
        stats.max_peak.1,
        stats.max_ratio,
        CONSTANT_BYTES,
    );
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    stats
}

/// Valid encodings from `sample(seed)`, each changed by up to eight
/// mutations (a framed one's length prefix fixed up after, mostly).
pub(crate) fn mutated(
    sample: impl Fn(u64) -> Vec<u8> + Clone + 'static,
    framed: bool,
) -> impl Strategy<Value = Vec<u8>> {
    (
        any::<u64>(),
        prop::collection::vec(mutation(), 0..8),
        prop::bool::weighted(0.8),
    )
        .prop_map(move |(seed, mutations, fix)| {
            let buf = sample(seed);
            if framed && fix {
                // Mutate the body, then make the prefix fit it.
                let body_of = |s: u64| sample(s).get(4..).unwrap_or_default().to_vec();
                let mut body = buf.get(4..).unwrap_or_default().to_vec();
                for m in &mutations {
                    apply(&mut body, m, &body_of);
                }
                let mut out = vec![0; 4];
                out.extend(body);
                fix_frame_length(&mut out);
                out
            } else {
                let mut buf = buf;
                for m in &mutations {
                    apply(&mut buf, m, &sample);
                }
                buf
            }
        })
}

/// Arbitrary bytes (with a fitting length prefix for framed decoders,
/// mostly).
pub(crate) fn arbitrary(framed: bool) -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(any::<u8>(), 0..2048),
        prop::bool::weighted(0.8),
    )
        .prop_map(move |(mut bytes, fix)| {
            if framed && fix {
                bytes.splice(0..0, [0; 4]);
                fix_frame_length(&mut bytes);
            }
            bytes
        })
}

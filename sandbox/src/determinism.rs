//! Deterministic workers: a module whose outputs depend only on its inputs,
//! arguments, environment, rank, job size and a seed, bit for bit, on every
//! node (x86_64 or aarch64, any CPU) that runs this build.
//!
//! WebAssembly is deterministic except where its specification lets the
//! engine choose, and except for what the host gives the guest. This module
//! closes both:
//!
//! - **The engine** ([`configure`]): NaN results are canonicalized (a
//!   float operation that makes a NaN makes the same NaN everywhere, not
//!   whatever bits the CPU's instruction gave); relaxed SIMD, whose results
//!   the specification leaves to the CPU, is computed the one deterministic
//!   way; threads (shared memories and atomics across them) are off, as
//!   their interleaving is the scheduler's. Deterministic workers therefore
//!   run on an engine of their own (these settings cost compute: figures
//!   in BENCHMARKS.md), made when a node first runs one.
//! - **The host** ([`Determinism`]): the randomness the guest reads (WASI's
//!   `random_get` and the insecure generator and seed) is ChaCha20 keyed by
//!   SHA-256 of the job's seed and the worker's rank, and the clocks are
//!   virtual: the wall clock starts at 2025-01-01T00:00:00Z and the
//!   monotonic clock at 0, and each advances by exactly one millisecond at
//!   every reading. A program that reads the time sees it move, and
//!   `MPI_Wtime` differences stay positive, but no reading depends on the
//!   machine. Sleeping still takes real time; it changes nothing the guest
//!   sees but the clock's next reading.
//!
//! What remains the caller's: the same module, arguments, environment (the
//! node leaves out everything that differs between runs, such as the job's
//! id) and inputs; a job whose size does not change while it runs; and, for
//! message-passing jobs, a program whose results do not depend on the order
//! in which messages from different senders arrive (see the README, *MPI
//! programs*).

use std::cell::Cell;
use std::time::Duration;

use chacha20::ChaCha20Rng;
use chacha20::rand_core::SeedableRng;
use sha2::{Digest, Sha256};
use wasmtime::Config;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtxBuilder};

/// How a worker computes: the default engine, or the deterministic one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Execution {
    /// As fast as the engine can: the CPU's own NaN bits and relaxed SIMD,
    /// the machine's clocks, random seeds from the operating system.
    #[default]
    Default,
    /// Bit-identical results everywhere (see the module's documentation).
    Deterministic,
}

/// What makes one worker's run repeatable: the job's seed and the worker's
/// rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Determinism {
    /// The job's seed: the same for every worker of the job and every run
    /// that should give the same results.
    pub seed: u64,
    /// The worker's rank, so that ranks draw different random streams.
    pub rank: u32,
}

/// The wall clock's first reading: 2025-01-01T00:00:00Z, in seconds since
/// the Unix epoch.
pub const VIRTUAL_EPOCH_SECS: u64 = 1_735_689_600;

/// How far a virtual clock advances at each reading.
pub const VIRTUAL_TICK: Duration = Duration::from_millis(1);

/// Sets the engine options that make compiled code deterministic.
pub(crate) fn configure(config: &mut Config) {
    config.cranelift_nan_canonicalization(true);
    config.relaxed_simd_deterministic(true);
    config.wasm_threads(false);
}

impl Determinism {
    /// 32 bytes for the generator named `purpose`, from the seed and rank;
    /// a version label keeps streams of a later scheme from repeating these.
    fn key(&self, purpose: &str) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(b"zorilla deterministic worker 1\0");
        hash.update(purpose.as_bytes());
        hash.update(b"\0");
        hash.update(self.seed.to_le_bytes());
        hash.update(self.rank.to_le_bytes());
        hash.finalize().into()
    }

    fn generator(&self, purpose: &str) -> ChaCha20Rng {
        ChaCha20Rng::from_seed(self.key(purpose))
    }

    /// Gives the WASI context the worker's randomness and virtual clocks.
    pub(crate) fn apply(&self, wasi: &mut WasiCtxBuilder) {
        let seed = self.key("insecure seed");
        let mut low = [0u8; 16];
        low.copy_from_slice(&seed[..16]);
        wasi.secure_random(self.generator("random"))
            .insecure_random(self.generator("insecure random"))
            .insecure_random_seed(u128::from_le_bytes(low))
            .wall_clock(VirtualClock::new(Duration::from_secs(VIRTUAL_EPOCH_SECS)))
            .monotonic_clock(VirtualClock::new(Duration::ZERO));
    }
}

/// A clock that reads `start`, then one [`VIRTUAL_TICK`] more at each
/// reading. `Cell`: each worker's WASI context owns its clocks and reads
/// them from one task at a time.
struct VirtualClock {
    next: Cell<Duration>,
}

impl VirtualClock {
    fn new(start: Duration) -> VirtualClock {
        VirtualClock {
            next: Cell::new(start),
        }
    }

    fn read(&self) -> Duration {
        let now = self.next.get();
        self.next.set(now.saturating_add(VIRTUAL_TICK));
        now
    }
}

impl HostWallClock for VirtualClock {
    fn resolution(&self) -> Duration {
        VIRTUAL_TICK
    }

    fn now(&self) -> Duration {
        self.read()
    }
}

impl HostMonotonicClock for VirtualClock {
    fn resolution(&self) -> u64 {
        // A millisecond in nanoseconds.
        1_000_000
    }

    fn now(&self) -> u64 {
        u64::try_from(self.read().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use chacha20::rand_core::Rng;

    use super::*;

    #[test]
    fn the_same_seed_and_rank_give_the_same_stream_and_other_ranks_another() {
        let draw = |seed, rank| {
            let mut bytes = [0u8; 64];
            Determinism { seed, rank }
                .generator("random")
                .fill_bytes(&mut bytes);
            bytes
        };
        assert_eq!(draw(7, 1), draw(7, 1));
        assert_ne!(draw(7, 1), draw(7, 2));
        assert_ne!(draw(7, 1), draw(8, 1));
    }

    #[test]
    fn virtual_clocks_advance_one_tick_per_reading_from_their_start() {
        let wall = VirtualClock::new(Duration::from_secs(VIRTUAL_EPOCH_SECS));
        assert_eq!(
            HostWallClock::now(&wall),
            Duration::from_secs(VIRTUAL_EPOCH_SECS)
        );
        assert_eq!(
            HostWallClock::now(&wall),
            Duration::from_secs(VIRTUAL_EPOCH_SECS) + VIRTUAL_TICK
        );
        let monotonic = VirtualClock::new(Duration::ZERO);
        assert_eq!(HostMonotonicClock::now(&monotonic), 0);
        assert_eq!(HostMonotonicClock::now(&monotonic), 1_000_000);
    }
}

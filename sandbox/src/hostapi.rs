//! The `zorilla` import module: the host API of parallel programs.
//!
//! Guests import these functions (declared for C in
//! `examples/include/zorilla.h`, which documents them for guest authors):
//!
//! | import | signature | does |
//! |---|---|---|
//! | `rank` | `() -> i32` | this worker's rank |
//! | `size` | `() -> i32` | current number of workers |
//! | `send` | `(dest: i32, ptr: i32, len: i32) -> i32` | send `len` bytes at `ptr` to `dest` |
//! | `send_timeout` | `(dest: i32, ptr: i32, len: i32, timeout_ms: i64) -> i32` | the same, giving up (`ETIMEDOUT`, nothing sent) after `timeout_ms` without room; 0 only tries, < 0 waits for ever |
//! | `recv` | `(src_ptr: i32, buf_ptr: i32, cap: i32, timeout_ms: i64) -> i32` | next message: full length, sender stored at `src_ptr`, copied if it fits in `cap` |
//! | `barrier` | `() -> i32` | wait for every worker |
//! | `membership_next` | `(event_ptr: i32) -> i32` | take the oldest membership change: 1 and a 12-byte event, or 0 |
//! | `watch_membership` | `(enable: i32) -> i32` | make blocking `recv` return `EMEMBERSHIP` on a change |
//! | `checkpoint_save` | `(ptr: i32, len: i32) -> i32` | keep `len` bytes at `ptr` as the rank's latest checkpoint: on how many places it is kept (>= 1) |
//! | `checkpoint_save_generation` | `(generation: i64, ptr: i32, len: i32) -> i32` | the same, as checkpoint `generation` (1 to `MAX_GENERATION`, else `EINVAL`) that every rank takes at the same barrier |
//! | `checkpoint_generation` | `() -> i64` | generation of the rank's latest checkpoint (0 if it has none), or `ENOCHECKPOINT` |
//! | `checkpoint_size` | `() -> i32` | size of the rank's latest checkpoint, or `ENOCHECKPOINT` |
//! | `checkpoint_load` | `(ptr: i32, cap: i32) -> i32` | the latest checkpoint: its size, copied to `ptr` if it fits in `cap` |
//!
//! Pointers and lengths are unsigned 32-bit offsets into the guest's exported
//! `memory`; every access is bounds-checked (`EFAULT`), never trusted.
//! Functions that wait are async host functions: while they wait, the
//! worker's task yields to the executor, uses no CPU time, and can still be
//! cancelled or stopped by its wall-clock limit.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Caller, Linker, Memory};

use crate::checkpoint::{Checkpoint, CheckpointError, Checkpoints, MAX_GENERATION};
use crate::transport::{
    Delivery, Lend, MAX_MESSAGE_BYTES, MembershipChange, Rank, Received, RecvBuffer, Transport,
    TransportError,
};

/// The import module name.
pub(crate) const MODULE: &str = "zorilla";

// Status codes, as in zorilla.h.
const OK: i32 = 0;
const ETIMEDOUT: i32 = -1;
const EBADRANK: i32 = -2;
const EFAULT: i32 = -3;
/// zorilla.h's `ZORILLA_ETOOBIG`: larger than allowed (a checkpoint past
/// the store's limit).
pub const ETOOBIG: i32 = -4;
const ECLOSED: i32 = -5;
const EMEMBERSHIP: i32 = -6;
/// zorilla.h's `ZORILLA_ENOCHECKPOINT`: no checkpoint saved for the rank.
pub const ENOCHECKPOINT: i32 = -7;
const ENOTSUP: i32 = -8;
const ECHECKPOINT: i32 = -9;
/// zorilla.h's `ZORILLA_EINVAL`: an argument out of its range (a
/// checkpoint generation).
pub const EINVAL: i32 = -10;

/// Unread membership changes kept per worker; older ones are dropped (a
/// guest that never reads them must not make the host grow without bound).
const MEMBERSHIP_QUEUE: usize = 64;

/// Size of `struct zorilla_membership` in guest memory.
const MEMBERSHIP_EVENT_BYTES: usize = 12;

/// A worker's side of the host API: its transport plus what the host holds
/// between calls.
pub(crate) struct HostNet {
    transport: Box<dyn Transport>,
    /// A message too large for the guest's last buffer, kept for the retry.
    pending: Option<(Rank, Vec<u8>)>,
    membership: VecDeque<MembershipChange>,
    watch_membership: bool,
    /// Where the worker's checkpoints go (`None`: the calls answer
    /// `ENOTSUP`).
    checkpoints: Option<Arc<dyn Checkpoints>>,
    /// The checkpoint fetched by `checkpoint_size` (or by a `checkpoint_load`
    /// into too small a buffer), kept for the load that follows.
    loaded: Option<Checkpoint>,
    /// Whether the worker waits in a receive without a deadline.
    waiting: Waiting,
    /// The memory of the last large message the worker received, kept for
    /// its next large send (see [`SPARE_BYTES`]).
    spare: Vec<u8>,
}

/// A message of at least this many bytes, once the worker has copied it,
/// leaves its memory to the worker's next send of one: glibc hands an
/// allocation this large back to the system when it is freed (its largest
/// threshold for that is 32 MiB), so a fresh one faults in every page
/// again, about as costly as copying it twice (measured at 64 MiB: see
/// `BENCHMARKS.md`, issue 29). A worker keeps at most one such buffer,
/// no larger than [`MAX_MESSAGE_BYTES`], until its next send or its end.
const SPARE_BYTES: usize = 32 * 1024 * 1024;

/// Whether a worker waits in a receive without a deadline (`zorilla_recv`
/// with a negative timeout, as a blocking `MPI_Recv` does), and since when.
/// Its node tells the job's home, which ends a job whose ranks all wait on
/// one another with nothing in flight (see `zorilla_core::stall`). A
/// receive with a deadline does not count: the worker wakes by itself.
/// Cloneable, read from anywhere.
#[derive(Clone, Debug, Default)]
pub struct Waiting(Arc<std::sync::Mutex<Option<Instant>>>);

impl Waiting {
    /// How long the worker has waited in its current receive without a
    /// deadline; `None` if it is not in one.
    pub fn waited(&self) -> Option<Duration> {
        self.since().map(|since| since.elapsed())
    }

    fn since(&self) -> Option<Instant> {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set(&self, since: Option<Instant>) {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = since;
    }

    /// The worker waits from now until the guard is dropped (the receive
    /// returned, or its future was dropped: the worker was cancelled).
    pub(crate) fn begin(&self) -> WaitingGuard {
        self.set(Some(Instant::now()));
        WaitingGuard(self.clone())
    }
}

/// See [`Waiting::begin`].
pub(crate) struct WaitingGuard(Waiting);

impl Drop for WaitingGuard {
    fn drop(&mut self) {
        self.0.set(None);
    }
}

/// What the host functions need of a store's data: the worker's
/// [`HostNet`] (the worker's store data implements it).
pub(crate) trait HostApiState: Send + 'static {
    fn net(&mut self) -> &mut HostNet;
}

fn status(error: TransportError) -> i32 {
    match error {
        TransportError::BadRank { .. } => EBADRANK,
        TransportError::TooLarge { .. } => ETOOBIG,
        TransportError::Closed => ECLOSED,
    }
}

impl HostNet {
    pub(crate) fn new(transport: Box<dyn Transport>) -> Self {
        HostNet {
            transport,
            pending: None,
            membership: VecDeque::new(),
            watch_membership: false,
            checkpoints: None,
            loaded: None,
            waiting: Waiting::default(),
            spare: Vec::new(),
        }
    }

    /// Shows whether the worker waits in a receive without a deadline.
    pub(crate) fn with_waiting(mut self, waiting: Waiting) -> Self {
        self.waiting = waiting;
        self
    }

    /// Gives the worker a checkpoint store.
    pub(crate) fn with_checkpoints(mut self, checkpoints: Option<Arc<dyn Checkpoints>>) -> Self {
        self.checkpoints = checkpoints;
        self
    }

    /// The rank's latest checkpoint: the one fetched before, or a fresh
    /// fetch.
    async fn latest_checkpoint(&mut self) -> Result<Checkpoint, i32> {
        if let Some(loaded) = &self.loaded {
            return Ok(loaded.clone());
        }
        let Some(store) = self.checkpoints.clone() else {
            return Err(ENOTSUP);
        };
        let checkpoint = store.load().await.map_err(checkpoint_status)?;
        self.loaded = Some(checkpoint.clone());
        Ok(checkpoint)
    }

    fn note_membership(&mut self, change: MembershipChange) {
        if self.membership.len() == MEMBERSHIP_QUEUE {
            self.membership.pop_front();
        }
        self.membership.push_back(change);
    }

    /// The next message, waiting at most `timeout` (`None`: for ever),
    /// with `buffer` lent for it if given (see [`Transport::recv_into`]).
    /// Membership changes met on the way are queued for `membership_next`.
    async fn next_message(
        &mut self,
        timeout: Option<Duration>,
        buffer: Option<&RecvBuffer>,
    ) -> Result<Got, i32> {
        if let Some((from, payload)) = self.pending.take() {
            return Ok(Got::Message(from, payload));
        }
        if self.watch_membership && !self.membership.is_empty() {
            return Err(EMEMBERSHIP);
        }
        // A timeout too far away to represent is the same as none.
        let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
        // Only a wait without a deadline can last for ever.
        let _waiting = deadline.is_none().then(|| self.waiting.begin());
        loop {
            let received = match buffer {
                Some(buffer) => within(deadline, false, self.transport.recv_into(buffer)).await,
                // Only a look (a zero timeout, without a timer: see
                // `within`), or no buffer to lend.
                None => within(
                    deadline,
                    timeout == Some(Duration::ZERO),
                    self.transport.recv(),
                )
                .await
                .map(|delivery| delivery.map(Received::Delivery)),
            };
            let received = match received {
                Some(received) => received,
                // A message written into the buffer just as the time ran
                // out was put back when the receive was dropped: it came in
                // time, so it is taken now rather than reported as none.
                None => match poll_once(self.transport.recv()) {
                    Some(delivery) => delivery.map(Received::Delivery),
                    None => return Err(ETIMEDOUT),
                },
            };
            match received.map_err(status)? {
                Received::Written { from, len } => return Ok(Got::Written { from, len }),
                Received::Delivery(Delivery::Message { from, payload }) => {
                    return Ok(Got::Message(from, payload));
                }
                Received::Delivery(Delivery::Membership(change)) => {
                    self.note_membership(change);
                    if self.watch_membership {
                        return Err(EMEMBERSHIP);
                    }
                }
            }
        }
    }
}

/// What [`HostNet::next_message`] got.
enum Got {
    /// A message, to be copied into the guest.
    Message(Rank, Vec<u8>),
    /// A message already in the guest's lent buffer.
    Written { from: Rank, len: usize },
}

/// Runs `future` until `deadline` (`None`: for ever); `None` if the time
/// ran out first. `once`: only one poll, without a timer, which would round
/// the deadline up to tokio's next millisecond tick and make every look
/// (an MPI library's progress loop makes many) cost up to a millisecond.
/// `timeout_at` polls the future once before looking at the clock, so a
/// past deadline still takes what is ready; the transport's `send`,
/// `reserve` and `recv` are cancel-safe, so a timeout loses nothing.
async fn within<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    once: bool,
    future: F,
) -> Option<F::Output> {
    match deadline {
        None => Some(future.await),
        Some(_) if once => poll_once(future),
        Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
    }
}

/// Polls `future` once: its output if it is ready at once. Dropping it
/// after is fine for the transport's cancel-safe `send` and `recv`.
fn poll_once<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// `checkpoint_save` and `checkpoint_save_generation`: keeps `len` bytes at
/// `ptr` as the rank's latest checkpoint.
async fn save_checkpoint<T: HostApiState>(
    caller: &mut Caller<'_, T>,
    ptr: i32,
    len: i32,
    generation: Option<u64>,
) -> i32 {
    let Some(store) = caller.data_mut().net().checkpoints.clone() else {
        return ENOTSUP;
    };
    let len = len as u32 as usize;
    if len as u64 > store.limit() {
        return ETOOBIG;
    }
    let Some(mem) = memory(caller) else {
        return EFAULT;
    };
    let Some(range) = guest_range(caller, mem, ptr, len) else {
        return EFAULT;
    };
    let data = mem.data(&*caller)[range].to_vec();
    // What was fetched before is no longer the latest.
    caller.data_mut().net().loaded = None;
    match store.save(data, generation).await {
        Ok(copies) => i32::try_from(copies.max(1)).unwrap_or(i32::MAX),
        Err(e) => checkpoint_status(e),
    }
}

/// The zorilla.h status of a checkpoint call that failed with `error`
/// (the store's own failure is logged: the status only says it failed).
pub fn checkpoint_status(error: CheckpointError) -> i32 {
    match error {
        CheckpointError::TooLarge { .. } => ETOOBIG,
        CheckpointError::None => ENOCHECKPOINT,
        CheckpointError::Unsupported => ENOTSUP,
        CheckpointError::Store(e) => {
            tracing::warn!("checkpoint: {e}");
            ECHECKPOINT
        }
    }
}

/// A checkpoint's size as the guest sees it (at most
/// [`crate::checkpoint::MAX_CHECKPOINT_BYTES`], so it fits).
fn checkpoint_len(checkpoint: &Checkpoint) -> i32 {
    i32::try_from(checkpoint.data.len()).unwrap_or(i32::MAX)
}

fn memory<T>(caller: &mut Caller<'_, T>) -> Option<Memory> {
    caller
        .get_export("memory")
        .and_then(|export| export.into_memory())
}

/// The guest range `ptr..ptr+len` as host indices, if it lies inside `memory`.
fn guest_range<T>(
    caller: &Caller<'_, T>,
    memory: Memory,
    ptr: i32,
    len: usize,
) -> Option<std::ops::Range<usize>> {
    let start = ptr as u32 as usize;
    let end = start.checked_add(len)?;
    (end <= memory.data_size(caller)).then_some(start..end)
}

/// `send` and `send_timeout`: `timeout_ms` < 0 waits for ever.
async fn send<T: HostApiState>(
    mut caller: Caller<'_, T>,
    dest: i32,
    ptr: i32,
    len: i32,
    timeout_ms: i64,
) -> i32 {
    let len = len as u32 as usize;
    if len > MAX_MESSAGE_BYTES {
        return ETOOBIG;
    }
    if dest < 0 {
        return EBADRANK;
    }
    let Some(mem) = memory(&mut caller) else {
        return EFAULT;
    };
    let Some(range) = guest_range(&caller, mem, ptr, len) else {
        return EFAULT;
    };
    // A deadline too far away to represent is the same as none.
    let deadline = u64::try_from(timeout_ms)
        .ok()
        .and_then(|ms| tokio::time::Instant::now().checked_add(Duration::from_millis(ms)));
    let once = timeout_ms == 0;
    // One copy, straight out of the guest's memory, where the destination
    // can take the bytes directly (a worker of this node).
    let transport = &mut caller.data_mut().net().transport;
    match within(deadline, once, transport.reserve(dest as Rank, len)).await {
        None => return ETIMEDOUT,
        Some(Err(e)) => return status(e),
        Some(Ok(Some(handover))) => {
            return match handover.hand_over(&mem.data(&caller)[range]) {
                Ok(()) => OK,
                Err(e) => status(e),
            };
        }
        Some(Ok(None)) => {}
    }
    let spare = &mut caller.data_mut().net().spare;
    let mut payload = if len >= SPARE_BYTES && spare.capacity() >= len {
        std::mem::take(spare)
    } else {
        Vec::new()
    };
    payload.clear();
    payload.extend_from_slice(&mem.data(&caller)[range]);
    let transport = &mut caller.data_mut().net().transport;
    match within(deadline, once, transport.send(dest as Rank, payload)).await {
        None => ETIMEDOUT,
        Some(Ok(())) => OK,
        Some(Err(e)) => status(e),
    }
}

/// Adds the `zorilla` module to `linker`.
pub(crate) fn add_to_linker<T: HostApiState>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.func_wrap(MODULE, "rank", |mut caller: Caller<'_, T>| -> i32 {
        caller.data_mut().net().transport.rank() as i32
    })?;

    linker.func_wrap(MODULE, "size", |mut caller: Caller<'_, T>| -> i32 {
        i32::try_from(caller.data_mut().net().transport.size()).unwrap_or(i32::MAX)
    })?;

    linker.func_wrap_async(
        MODULE,
        "send",
        |caller: Caller<'_, T>, (dest, ptr, len): (i32, i32, i32)| {
            Box::new(send(caller, dest, ptr, len, -1))
        },
    )?;

    linker.func_wrap_async(
        MODULE,
        "send_timeout",
        |caller: Caller<'_, T>, (dest, ptr, len, timeout_ms): (i32, i32, i32, i64)| {
            Box::new(send(caller, dest, ptr, len, timeout_ms))
        },
    )?;

    linker.func_wrap_async(
        MODULE,
        "recv",
        |mut caller: Caller<'_, T>, (src_ptr, buf_ptr, cap, timeout_ms): (i32, i32, i32, i64)| {
            Box::new(async move {
                let cap = cap as u32 as usize;
                let Some(mem) = memory(&mut caller) else {
                    return EFAULT;
                };
                // Check both ranges before taking a message, so a bad
                // pointer never consumes one. Memory only grows, so the
                // ranges stay valid across the wait.
                let (Some(src), Some(buf)) = (
                    guest_range(&caller, mem, src_ptr, 4),
                    guest_range(&caller, mem, buf_ptr, cap),
                ) else {
                    return EFAULT;
                };
                let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
                // A wait lends the buffer, so that a message can be copied
                // straight into it; a look (timeout 0) takes what is there.
                #[allow(unsafe_code)]
                let lend = (timeout != Some(Duration::ZERO) && cap > 0).then(|| {
                    // SAFETY: `buf` lies inside the memory (checked above),
                    // so the pointer stays in its allocation. For `Lend::new`:
                    // the memory never moves (the engine reserves a 32-bit
                    // memory's whole address space and forbids moving it:
                    // `engine_config`) and never shrinks; the guest does not
                    // run until this call returns, and the host touches
                    // `buf` only through the lend until `lend` is dropped,
                    // below, before anything reads the memory. A worker
                    // cancelled while it waits drops this future (wasmtime
                    // resumes a dropped call's fiber to unwind it), and
                    // `lend` with it, before its store and memory go.
                    unsafe { Lend::new(mem.data_ptr(&caller).add(buf.start), cap) }
                });
                let got = caller
                    .data_mut()
                    .net()
                    .next_message(timeout, lend.as_ref().map(Lend::buffer))
                    .await;
                drop(lend);
                let (from, payload) = match got {
                    Ok(Got::Message(from, payload)) => (from, payload),
                    Ok(Got::Written { from, len }) => {
                        mem.data_mut(&mut caller)[src]
                            .copy_from_slice(&(from as i32).to_le_bytes());
                        return i32::try_from(len).unwrap_or(i32::MAX);
                    }
                    Err(code) => return code,
                };
                let len = i32::try_from(payload.len()).unwrap_or(i32::MAX);
                let data = mem.data_mut(&mut caller);
                data[src].copy_from_slice(&(from as i32).to_le_bytes());
                if payload.len() <= cap {
                    data[buf.start..buf.start + payload.len()].copy_from_slice(&payload);
                    if (SPARE_BYTES..=MAX_MESSAGE_BYTES).contains(&payload.capacity()) {
                        caller.data_mut().net().spare = payload;
                    }
                } else {
                    caller.data_mut().net().pending = Some((from, payload));
                }
                len
            })
        },
    )?;

    linker.func_wrap_async(MODULE, "barrier", |mut caller: Caller<'_, T>, (): ()| {
        Box::new(async move {
            match caller.data_mut().net().transport.barrier().await {
                Ok(()) => OK,
                Err(e) => status(e),
            }
        })
    })?;

    linker.func_wrap(
        MODULE,
        "membership_next",
        |mut caller: Caller<'_, T>, event_ptr: i32| -> i32 {
            if caller.data_mut().net().membership.is_empty() {
                return 0;
            }
            let Some(mem) = memory(&mut caller) else {
                return EFAULT;
            };
            let Some(range) = guest_range(&caller, mem, event_ptr, MEMBERSHIP_EVENT_BYTES) else {
                return EFAULT;
            };
            let Some(change) = caller.data_mut().net().membership.pop_front() else {
                return 0;
            };
            let mut event = [0u8; MEMBERSHIP_EVENT_BYTES];
            event[0..4].copy_from_slice(&change.kind.code().to_le_bytes());
            event[4..8].copy_from_slice(&(change.rank as i32).to_le_bytes());
            event[8..12]
                .copy_from_slice(&i32::try_from(change.size).unwrap_or(i32::MAX).to_le_bytes());
            mem.data_mut(&mut caller)[range].copy_from_slice(&event);
            1
        },
    )?;

    linker.func_wrap(
        MODULE,
        "watch_membership",
        |mut caller: Caller<'_, T>, enable: i32| -> i32 {
            let net = caller.data_mut().net();
            let previous = net.watch_membership;
            net.watch_membership = enable != 0;
            i32::from(previous)
        },
    )?;

    linker.func_wrap_async(
        MODULE,
        "checkpoint_save",
        |mut caller: Caller<'_, T>, (ptr, len): (i32, i32)| {
            Box::new(async move { save_checkpoint(&mut caller, ptr, len, None).await })
        },
    )?;

    linker.func_wrap_async(
        MODULE,
        "checkpoint_save_generation",
        |mut caller: Caller<'_, T>, (generation, ptr, len): (i64, i32, i32)| {
            Box::new(async move {
                match u64::try_from(generation) {
                    Ok(g @ 1..=MAX_GENERATION) => {
                        save_checkpoint(&mut caller, ptr, len, Some(g)).await
                    }
                    _ => EINVAL,
                }
            })
        },
    )?;

    linker.func_wrap_async(
        MODULE,
        "checkpoint_generation",
        |mut caller: Caller<'_, T>, (): ()| {
            Box::new(async move {
                match caller.data_mut().net().latest_checkpoint().await {
                    // At most MAX_GENERATION: it fits.
                    Ok(checkpoint) => checkpoint.generation.map_or(0, |g| g as i64),
                    Err(code) => i64::from(code),
                }
            })
        },
    )?;

    linker.func_wrap_async(
        MODULE,
        "checkpoint_size",
        |mut caller: Caller<'_, T>, (): ()| {
            Box::new(async move {
                match caller.data_mut().net().latest_checkpoint().await {
                    Ok(checkpoint) => checkpoint_len(&checkpoint),
                    Err(code) => code,
                }
            })
        },
    )?;

    linker.func_wrap_async(
        MODULE,
        "checkpoint_load",
        |mut caller: Caller<'_, T>, (ptr, cap): (i32, i32)| {
            Box::new(async move {
                let cap = cap as u32 as usize;
                let Some(mem) = memory(&mut caller) else {
                    return EFAULT;
                };
                // Checked before the fetch; memory only grows, so the
                // range stays valid across the wait.
                let Some(buf) = guest_range(&caller, mem, ptr, cap) else {
                    return EFAULT;
                };
                let checkpoint = match caller.data_mut().net().latest_checkpoint().await {
                    Ok(checkpoint) => checkpoint,
                    Err(code) => return code,
                };
                let len = checkpoint.data.len();
                if len <= cap {
                    mem.data_mut(&mut caller)[buf.start..buf.start + len]
                        .copy_from_slice(&checkpoint.data);
                    // Handed over: the host does not keep a second copy.
                    caller.data_mut().net().loaded = None;
                }
                checkpoint_len(&checkpoint)
            })
        },
    )?;

    Ok(())
}

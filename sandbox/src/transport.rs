//! The transport between the workers of one job, as the sandbox sees it.
//!
//! The host API (`zorilla.send`, `zorilla.recv`, ...) is written against the
//! [`Transport`] trait, one value per worker. The node implements it over the
//! overlay network so that the workers of a job can sit on different
//! machines; [`crate::local`] implements it in-process for tests, benchmarks
//! and single-machine jobs.
//!
//! # Contract for implementations
//!
//! - Messages from one rank to another are delivered in the order they were
//!   sent, at most once.
//! - Every queue is bounded: [`Transport::send`] waits while the receiver's
//!   queue is full instead of buffering without limit.
//! - [`Transport::send`] is cancel-safe: if its future is dropped before it
//!   completes (a guest's send timeout expired), the message was not sent.
//! - [`Transport::recv`] is cancel-safe: if its future is dropped before it
//!   completes (the guest's timeout expired, or the worker was cancelled), no
//!   delivery is lost.
//! - Membership changes are delivered in-band through [`Transport::recv`], so
//!   a worker sees them in order with the messages.
//! - A barrier completes once the current worker of every rank of the job
//!   waits in it (a rank that joins while a barrier waits is waited for
//!   too). An arrival counts only while its [`Transport::barrier`] call is
//!   waiting: if the call's future is dropped before the barrier completes
//!   (the worker was cancelled, or hit a limit, while waiting), the arrival
//!   is taken back; if the rank is replaced, its old worker's arrival is
//!   discarded and the barrier waits for the fresh worker to arrive. A lost
//!   worker therefore never lets a barrier release the others early. (The
//!   fresh worker starts its program from the beginning: the barriers it
//!   meets are matched with whatever barrier the others wait in.)

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// A worker's position in its job, `0..size`.
pub type Rank = u32;

/// A boxed future, so that [`Transport`] stays object-safe (the sandbox keeps
/// a `Box<dyn Transport>` in every worker).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The largest message the host API accepts from a guest (64 MiB; must match
/// `ZORILLA_MAX_MESSAGE` in `examples/include/zorilla.h` and what the node's
/// transport carries, `zorilla_core::channel::MAX_MESSAGE_BYTES`).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// What [`Transport::recv`] hands to a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// A message from another worker (or from this one to itself).
    Message {
        /// The sender's rank.
        from: Rank,
        /// The bytes it sent.
        payload: Vec<u8>,
    },
    /// The job's membership changed.
    Membership(MembershipChange),
}

/// A change in the set of workers of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MembershipChange {
    /// What happened.
    pub kind: ChangeKind,
    /// The rank that joined or was replaced.
    pub rank: Rank,
    /// The number of workers after the change.
    pub size: u32,
}

/// The kinds of [`MembershipChange`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// A new worker joined the job with a new rank (the size grew).
    Joined,
    /// The worker of a rank was lost and a fresh one replaced it; messages in
    /// flight to or from the old one may be lost.
    Replaced,
}

impl ChangeKind {
    /// The code the guest sees (`ZORILLA_JOINED`, `ZORILLA_REPLACED`).
    pub fn code(self) -> i32 {
        match self {
            ChangeKind::Joined => 1,
            ChangeKind::Replaced => 2,
        }
    }
}

/// Why a transport operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The destination rank does not exist.
    #[error("rank {rank} is outside the job (size {size})")]
    BadRank {
        /// The rank asked for.
        rank: Rank,
        /// The job's size at the time.
        size: u32,
    },
    /// The message is larger than the transport carries.
    #[error("message of {len} bytes is larger than the {max} bytes the transport carries")]
    TooLarge {
        /// The message's length.
        len: usize,
        /// The largest length accepted.
        max: usize,
    },
    /// The transport is shut down (the job is over, or the peer is gone).
    #[error("the job's transport is closed")]
    Closed,
}

/// One worker's connection to the other workers of its job.
///
/// See the [module documentation](self) for the contract. All methods take
/// `&mut self`: a worker uses its transport from one task at a time.
pub trait Transport: Send + 'static {
    /// This worker's rank. Never changes.
    fn rank(&self) -> Rank;

    /// The current number of workers in the job.
    fn size(&self) -> u32;

    /// Sends `payload` to `to`, waiting while the destination's queue is full.
    fn send(&mut self, to: Rank, payload: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>>;

    /// Waits for the next delivery (message or membership change).
    /// Must be cancel-safe.
    fn recv(&mut self) -> BoxFuture<'_, Result<Delivery, TransportError>>;

    /// Waits until every worker of the job has entered the barrier (see the
    /// module documentation for arrivals that are dropped or replaced).
    /// Dropping the future before it completes takes this arrival back.
    fn barrier(&mut self) -> BoxFuture<'_, Result<(), TransportError>>;

    /// Waits for the next delivery, as [`Transport::recv`], while `buffer`
    /// (the waiting worker's own memory) is lent for it: a message that
    /// fits may be copied straight into it ([`Received::Written`]), which
    /// saves the copy into a message of its own. Must be cancel-safe like
    /// `recv`: a message written into `buffer` by a call whose future is
    /// dropped is read back out of it and delivered later. By default the
    /// buffer is not used.
    fn recv_into<'a>(
        &'a mut self,
        buffer: &'a RecvBuffer,
    ) -> BoxFuture<'a, Result<Received, TransportError>> {
        let _ = buffer;
        Box::pin(async move { self.recv().await.map(Received::Delivery) })
    }

    /// Waits until a message of `len` bytes to `to` can be handed over at
    /// once, and returns what hands it over, copying it from wherever the
    /// caller has it (the sending worker's memory): one copy for a
    /// destination that can take the bytes directly, such as a worker of
    /// the same node. `None`: no such path to `to`; the caller sends a
    /// message of its own with [`Transport::send`]. Cancel-safe: waiting
    /// takes nothing. By default there is no such path.
    fn reserve(
        &mut self,
        to: Rank,
        len: usize,
    ) -> BoxFuture<'_, Result<Option<Box<dyn Handover>>, TransportError>> {
        let _ = (to, len);
        Box::pin(async { Ok(None) })
    }
}

/// What [`Transport::recv_into`] hands to a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Received {
    /// A message of `len` bytes from `from` is in the lent buffer, at its
    /// start.
    Written {
        /// The sender's rank.
        from: Rank,
        /// The message's length.
        len: usize,
    },
    /// Anything else, as [`Transport::recv`] would have returned it.
    Delivery(Delivery),
}

/// A message of a known length admitted by [`Transport::reserve`], to be
/// handed over now.
pub trait Handover: Send {
    /// Hands over `bytes` (of the length reserved), copying them once.
    fn hand_over(self: Box<Self>, bytes: &[u8]) -> Result<(), TransportError>;
}

/// A range of a waiting worker's memory, lent by the host API for one
/// receive to whoever delivers the worker's next message (see
/// [`Transport::recv_into`]). Cloneable; writing and reading are safe from
/// any thread: once the host API takes the buffer back (its receive
/// returned, or the worker was cancelled) they do nothing, and a copy under
/// way when it does so finishes first.
#[derive(Clone)]
pub struct RecvBuffer(Arc<Lent>);

struct Lent {
    capacity: usize,
    /// The buffer's start while it is lent; `None` once taken back.
    window: Mutex<Option<Window>>,
    /// The memory of a buffer the host owns ([`Lend::owned`]); the window
    /// points into it (a `Vec`'s heap memory does not move with it).
    _owned: Vec<u8>,
}

struct Window(*mut u8);

// SAFETY: the pointer is only dereferenced under `Lent::window`'s lock,
// while the lender guarantees what `Lend::new` requires, from whichever
// thread holds the lock.
#[allow(unsafe_code)]
unsafe impl Send for Window {}

impl RecvBuffer {
    /// How many bytes the buffer holds.
    pub fn capacity(&self) -> usize {
        self.0.capacity
    }

    /// Copies `bytes` into the buffer at `offset`. `false` (nothing
    /// copied) if they do not fit or the buffer was taken back.
    #[allow(unsafe_code)]
    pub fn write_at(&self, offset: usize, bytes: &[u8]) -> bool {
        if offset
            .checked_add(bytes.len())
            .is_none_or(|end| end > self.0.capacity)
        {
            return false;
        }
        let window = lock(&self.0.window);
        let Some(start) = window.as_ref() else {
            return false;
        };
        // SAFETY: lent (`Some`, and the lock held), so `start..start +
        // capacity` is valid for writes and nothing else touches it (see
        // `Lend::new`); `bytes` is not in it (the lender does not read or
        // write it, so no reference to it exists); `offset + bytes.len()`
        // is within the capacity.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), start.0.add(offset), bytes.len()) };
        true
    }

    /// A copy of the buffer's first `len` bytes (a message written into it
    /// by a receive that did not return it); `None` if it was taken back.
    #[allow(unsafe_code)]
    pub fn read(&self, len: usize) -> Option<Vec<u8>> {
        if len > self.0.capacity {
            return None;
        }
        let window = lock(&self.0.window);
        let start = window.as_ref()?;
        // SAFETY: as in `write_at`: lent, locked, `len` within the capacity.
        Some(unsafe { std::slice::from_raw_parts(start.0, len) }.to_vec())
    }
}

impl std::fmt::Debug for RecvBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBuffer")
            .field("capacity", &self.0.capacity)
            .finish_non_exhaustive()
    }
}

/// The lender's side of a [`RecvBuffer`]: the buffer is lent while this
/// lives, and taken back when it is dropped (waiting for a copy under way).
pub struct Lend(RecvBuffer);

impl Lend {
    /// Lends `start..start + capacity`.
    ///
    /// # Safety
    ///
    /// Until the returned `Lend` is dropped, that range must be valid for
    /// reads and writes, must not move, and must not be read or written
    /// other than through the [`RecvBuffer`] (no reference to any of it may
    /// exist).
    #[allow(unsafe_code)]
    pub(crate) unsafe fn new(start: *mut u8, capacity: usize) -> Lend {
        Lend(RecvBuffer(Arc::new(Lent {
            capacity,
            window: Mutex::new(Some(Window(start))),
            _owned: Vec::new(),
        })))
    }

    /// Lends a buffer of `capacity` zero bytes that the host owns (a
    /// receiver outside a guest, and tests).
    pub fn owned(capacity: usize) -> Lend {
        let mut memory = vec![0; capacity];
        let start = memory.as_mut_ptr();
        Lend(RecvBuffer(Arc::new(Lent {
            capacity,
            window: Mutex::new(Some(Window(start))),
            _owned: memory,
        })))
    }

    /// The buffer lent.
    pub fn buffer(&self) -> &RecvBuffer {
        &self.0
    }
}

impl Drop for Lend {
    fn drop(&mut self) {
        *lock(&self.0.0.window) = None;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A copy cannot panic half way in a way that matters: the data is
    // bytes either way.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_buffer_takes_what_fits_until_it_is_taken_back() {
        let lend = Lend::owned(8);
        let buffer = lend.buffer().clone();
        assert_eq!(buffer.capacity(), 8);
        assert!(!buffer.write_at(0, &[1; 9]), "too long");
        assert!(!buffer.write_at(6, &[1; 3]), "too long at its offset");
        assert!(!buffer.write_at(usize::MAX, &[1]), "beyond any buffer");
        assert_eq!(buffer.read(8), Some(vec![0; 8]), "nothing written");
        assert!(buffer.write_at(0, &[1, 2, 3]));
        assert_eq!(buffer.read(3), Some(vec![1, 2, 3]));
        assert!(buffer.write_at(5, &[7, 8, 9]));
        assert_eq!(buffer.read(8), Some(vec![1, 2, 3, 0, 0, 7, 8, 9]));
        assert_eq!(buffer.read(9), None, "beyond the buffer");
        drop(lend);
        // Taken back: a clone kept by a deliverer writes and reads nothing.
        assert!(!buffer.write_at(0, &[4]));
        assert_eq!(buffer.read(1), None);
    }
}

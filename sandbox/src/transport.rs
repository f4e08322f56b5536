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
}

//! The sans-IO core of Zorilla: every scheduling and flooding decision, as
//! pure, deterministic state machines.
//!
//! Nothing in this crate touches a socket, a clock, a thread or a global random
//! number generator. A driver feeds events in together with the current time
//! and executes the actions that come out. Two drivers exist: the real node
//! (`zorilla-node`, over libp2p) and the grid simulator (`zorilla-sim`, the
//! `sim/` crate), which runs thousands of these state machines over a
//! simulated network. Because both run the very same code, what the simulator
//! shows about locality and scale holds for the real grid.
//!
//! The parts:
//! - [`resources`]: cores, memory and disk, and how many workers fit.
//! - [`advert`]: job adverts and the messages nodes exchange about jobs.
//! - [`limits`]: the documented maxima of every value a client or a peer
//!   sets, and the checks that refuse what exceeds them.
//! - [`flood`]: forwarding of flooded adverts (TTL, latency budget, duplicate
//!   cache, per-peer rate limit).
//! - [`neighbours`]: choice of overlay neighbours from measured RTTs, and
//!   the overlay's peer keeping around it ([`neighbours::keeper`]).
//! - [`schedule`]: when the home floods again, and how far.
//! - [`vivaldi`]: network coordinates (Vivaldi with height) learnt from RTT
//!   samples, so that a node can estimate its distance to any other.
//! - [`liveness`]: whether the ranks a home placed still run (nodes that
//!   restarted, forgot ranks, or went silent).
//! - [`stall`]: whether a job's ranks all wait on one another with nothing
//!   in flight (a job that can never go on).
//! - [`allocation`]: the P2P-MPI `spread` and `concentrate` strategies.
//! - [`bounded`]: the rule of every per-peer table that is full.
//! - [`channel`]: exactly-once, in-order, flow-controlled message channels
//!   between the ranks of a job (sequencing, acks, credit).
//! - [`runs`]: replicated execution: a job run several times on distinct
//!   nodes, its runs' results compared by digest, the majority kept and
//!   the nodes that dissented avoided (not [`replica`], which copies a
//!   job's state for failover).
//! - [`replica`]: a job's replicated state: the primary's numbered log,
//!   its copies, the lease and the deterministic choice of a successor.
//! - [`copies`]: which nodes hold copies of a job's replicated state.
//! - [`commit`]: which of a home's words wait until its log is committed
//!   (grants, the acknowledgement of a rank's end).
//! - [`checkpoint`]: which nodes hold a rank's checkpoint, and the home's
//!   index of each rank's latest one.
//! - [`favours`]: a node's Network of Favors ledger: whose waiting jobs
//!   get freed cores first, in proportion to the favours their homes did.
//! - [`node`]: the scheduler of one node, both as the home of jobs and as a
//!   candidate worker node.
//! - [`machine`]: a node's whole part in jobs as one state machine: the
//!   scheduler, rank liveness, replica logs, copy placement and the commit
//!   rule, composed once for the node and the simulator alike.
//!
//! Time is a [`Time`]: the duration since an epoch chosen by the driver (the
//! node's start, or the simulation's). Times never cross the wire: adverts
//! carry durations ("expires in"), so no two nodes need synchronised clocks.

pub mod advert;
pub mod allocation;
pub mod bounded;
pub mod channel;
pub mod checkpoint;
pub mod commit;
pub mod copies;
pub mod favours;
pub mod flood;
pub mod limits;
pub mod liveness;
pub mod machine;
pub mod neighbours;
pub mod node;
pub mod replica;
pub mod resources;
pub mod runs;
pub mod schedule;
pub mod stall;
pub mod vivaldi;

/// A point in time: the duration since an epoch chosen by the driver.
pub type Time = std::time::Duration;

/// A rendezvous score of `peer` for `key` (a job, a rank of a job): the
/// same on every node that computes it, so nodes that rank candidates by it
/// agree, and different keys spread over different peers.
pub(crate) fn rendezvous<K: std::hash::Hash, P: std::hash::Hash>(key: &K, peer: &P) -> u64 {
    use std::hash::Hasher;
    // SipHash with fixed (zero) keys: the same on every node.
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new();
    key.hash(&mut hasher);
    peer.hash(&mut hasher);
    hasher.finish()
}

/// What the core needs of a peer identifier: libp2p's `PeerId` in the real
/// node, a small integer in the simulator.
pub trait PeerKey: Clone + Ord + std::fmt::Debug {}
impl<T: Clone + Ord + std::fmt::Debug> PeerKey for T {}

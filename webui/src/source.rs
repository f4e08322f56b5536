//! The interface between the node and its web interface.
//!
//! The node implements [`StatusSource`]; the web interface only reads through
//! it. The local methods return snapshots and must not block (the node
//! answers them from state it already holds, for example a copy its event
//! loop publishes). Changes are announced on a `tokio::sync::broadcast`
//! channel (bounded by construction) whose receivers [`StatusSource::subscribe`]
//! hands out; the server-sent events endpoint turns each [`Change`] into a
//! fresh rendering of the page a browser has open. A slow browser that misses
//! changes (the channel lags) simply gets the latest state: every update
//! carries the whole view, never a delta.
//!
//! The remote view ("other nodes") goes through [`StatusSource::remote`] and
//! [`StatusSource::remote_job`]: the node asks the peer over the overlay (an
//! rpc) and the peer answers with [`crate::snapshot`] of its own source and
//! [`StatusSource::job`]. The grid view goes through
//! [`StatusSource::remote_summary`], answered with the peer's
//! [`StatusSource::summary`].

use futures::future::BoxFuture;
use tokio::sync::broadcast;

use crate::model::{
    Counters, JobDetail, JobSummary, NodeOverview, NodeSnapshot, NodeSummary, PeerInfo,
    PendingAdvert,
};

/// Something changed on the node; pages that show it update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The overview changed (resources, workers, addresses).
    Node,
    /// A peer appeared, went, or its RTT or link changed.
    Peers,
    /// A job was submitted, changed phase, or ended.
    Jobs,
    /// Something of one job changed (a worker, its log).
    Job(String),
    /// An advert was received or expired.
    Pending,
}

/// Why a remote view could not be shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The node knows no peer of that id.
    #[error("unknown peer")]
    UnknownPeer,
    /// The peer did not answer (timeout, connection lost).
    #[error("peer unreachable: {0}")]
    Unreachable(String),
}

/// What the web interface reads from the node. Object-safe: the server holds
/// an `Arc<dyn StatusSource>`.
pub trait StatusSource: Send + Sync + 'static {
    /// The overview of this node.
    fn overview(&self) -> NodeOverview;
    /// The peers this node knows.
    fn peers(&self) -> Vec<PeerInfo>;
    /// The jobs this node knows, as home or participant.
    fn jobs(&self) -> Vec<JobSummary>;
    /// One job, with its workers and log tail; `None` if unknown here.
    fn job(&self, id: &str) -> Option<JobDetail>;
    /// The adverts this node holds.
    fn pending(&self) -> Vec<PendingAdvert>;
    /// The node's counters.
    fn counters(&self) -> Counters;
    /// A receiver of change notifications (a fresh one per call, from one
    /// `broadcast::Sender` the node keeps).
    fn subscribe(&self) -> broadcast::Receiver<Change>;
    /// Fetch the snapshot of a peer through the overlay. The web interface
    /// bounds the wait with its own timeout too.
    fn remote(&self, peer: &str) -> BoxFuture<'static, Result<NodeSnapshot, RemoteError>>;
    /// Fetch one job as a peer sees it; `Ok(None)` if the peer does not know it.
    fn remote_job(
        &self,
        peer: &str,
        job: &str,
    ) -> BoxFuture<'static, Result<Option<JobDetail>, RemoteError>>;
    /// What this node says about itself in a grid view (its own, and its
    /// answer to a peer's): its name, site, cores and the jobs it runs
    /// workers of.
    fn summary(&self) -> NodeSummary;
    /// Fetch a peer's [`NodeSummary`] through the overlay. The grid view
    /// bounds how many peers it asks, how long it waits and how often
    /// (see [`crate::grid`]).
    fn remote_summary(&self, peer: &str) -> BoxFuture<'static, Result<NodeSummary, RemoteError>>;
}

/// Everything a source shows at once: what a node answers a peer's remote
/// view request with.
pub fn snapshot(source: &dyn StatusSource) -> NodeSnapshot {
    NodeSnapshot {
        overview: source.overview(),
        peers: source.peers(),
        jobs: source.jobs(),
        pending: source.pending(),
        counters: source.counters(),
    }
}

//! [`NodeStatus`], the node's [`StatusSource`]: answers the web server
//! from the latest views the loop ([`super::Publisher`]) and the overlay
//! poller ([`super::poll_overlay`]) published, log tails and old jobs from
//! the store, remote views through the overlay.

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use tokio::sync::{broadcast, watch};
use zorilla_core::advert::JobId;
use zorilla_core::resources::Resources as CoreResources;
use zorilla_overlay::{OverlayHandle, PeerId};
use zorilla_webui::model::{
    Counters, JobDetail, JobRole, JobSummary, LogLine, NodeJob, NodeOverview, NodeSnapshot,
    NodeSummary, PeerInfo, PendingAdvert, Position, Resources, WorkerState,
};
use zorilla_webui::{Change, MAX_LOG_LINES, RemoteError, StatusSource};

use super::convert::{home_entry, hostname, log_lines, parse_job, resources};
use super::remote::{self, answer_from};
use super::view::{LoopView, NetView, coordinates};
use crate::store::{Store, unix_ms};
use crate::wire::PeerReply;
use crate::wire::view::ViewRpc;

/// Change notifications buffered per subscriber; a browser that falls
/// further behind is sent the latest state.
const CHANGES: usize = 64;
/// The most log bytes read for one job page.
const TAIL_BYTES: usize = 256 * 1024;

/// The node's [`StatusSource`]: the latest published views, the database
/// for log tails, the overlay for remote views. Shared by the web server,
/// the overlay poller and the loop's [`Publisher`].
pub(crate) struct NodeStatus {
    pub(super) me: PeerId,
    name: String,
    network: String,
    /// Who may join the grid, as the overview shows it.
    grid: Option<zorilla_webui::model::GridAccess>,
    started: Instant,
    pub(super) started_ms: u64,
    offered: Resources,
    /// How fast its cores are (`cpu_speed`), and where that figure came
    /// from (configured or measured).
    cpu_speed: crate::cpuspeed::CpuSpeed,
    /// The site its operator named (`site`), shown in grid views.
    site: Option<String>,
    pub(super) store: Arc<Store>,
    pub(super) overlay: OverlayHandle,
    pub(super) local: watch::Sender<Arc<LoopView>>,
    pub(super) net: watch::Sender<Arc<NetView>>,
    changes: broadcast::Sender<Change>,
}

impl NodeStatus {
    /// The status of node `overlay.local_peer_id()` in grid `network`, at
    /// `site` if its operator named one, offering `offered` on cores of
    /// `cpu_speed` (with where that figure came from).
    pub(crate) fn new(
        overlay: OverlayHandle,
        network: String,
        grid: Option<crate::protocol::GridInfo>,
        site: Option<String>,
        offered: CoreResources,
        cpu_speed: crate::cpuspeed::CpuSpeed,
        store: Arc<Store>,
    ) -> Arc<NodeStatus> {
        Arc::new(NodeStatus {
            me: overlay.local_peer_id(),
            name: hostname(),
            network,
            grid: Some(match grid {
                None => zorilla_webui::model::GridAccess::Open,
                Some(g) => zorilla_webui::model::GridAccess::Closed {
                    fingerprint: g.fingerprint,
                    expires_unix: g.expires_unix,
                },
            }),
            started: Instant::now(),
            started_ms: unix_ms(),
            offered: resources(offered),
            cpu_speed,
            site,
            store,
            overlay,
            local: watch::Sender::new(Arc::default()),
            net: watch::Sender::new(Arc::default()),
            changes: broadcast::Sender::new(CHANGES),
        })
    }

    pub(super) fn announce(&self, change: Change) {
        // No subscriber (no page open) is not an error.
        let _ = self.changes.send(change);
    }

    /// Whether the overlay knows `peer` (so a failed request means it is
    /// unreachable, not unknown).
    fn knows(&self, peer: &str) -> bool {
        self.net.borrow().peers.iter().any(|p| p.peer_id == peer)
    }

    /// A peer named in a remote-view url, or why not.
    fn peer(&self, peer: &str) -> Result<PeerId, RemoteError> {
        peer.parse::<PeerId>().map_err(|_| RemoteError::UnknownPeer)
    }

    /// The tail of a home job's log, as lines.
    fn log_tail(&self, job: u64, since_ms: u64) -> Vec<LogLine> {
        match self.store.log_tail(job, MAX_LOG_LINES, TAIL_BYTES) {
            Ok(chunks) => log_lines(&chunks, since_ms),
            Err(e) => {
                tracing::warn!(job = %JobId(job), "status page: cannot read the log: {e}");
                vec![LogLine {
                    at_secs: 0.0,
                    worker: None,
                    text: format!("cannot read the log: {e}"),
                }]
            }
        }
    }
}

impl NodeStatus {
    /// The page of a finished home job not in the view (older than the
    /// newest [`super::MAX_JOBS`]), from the store.
    fn stored_job(&self, id: &str) -> Option<JobDetail> {
        let job = parse_job(id)?;
        let record = match self.store.job(job) {
            Ok(record) => record?,
            Err(e) => {
                tracing::warn!(job = %JobId(job), "status page: cannot read the job: {e}");
                return None;
            }
        };
        let entry = home_entry(self.me, None, job, &record, self.started_ms);
        Some(JobDetail {
            summary: entry.summary_at(unix_ms()),
            log_tail: self.log_tail(job, entry.since_ms),
            workers: entry.workers,
        })
    }
}

impl StatusSource for NodeStatus {
    fn overview(&self) -> NodeOverview {
        let local = self.local.borrow().clone();
        let net = self.net.borrow().clone();
        NodeOverview {
            node_id: self.me.to_string(),
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            uptime_secs: self.started.elapsed().as_secs(),
            network: self.network.clone(),
            grid: self.grid.clone(),
            creditors: local.creditors.clone(),
            avoided: local.avoided.clone(),
            listen_addresses: net.listen.clone(),
            addresses: net.addresses.clone(),
            position: net.position.map(|p| Position {
                coordinates: coordinates(&p.coord),
                error: p.error,
            }),
            offered: self.offered,
            cpu_speed: self.cpu_speed.figure,
            cpu_speed_source: Some(self.cpu_speed.source.describe().to_string()),
            in_use: local.in_use,
            workers_running: local.workers_running,
            home_jobs: local
                .jobs
                .iter()
                .filter(|j| j.summary.role == JobRole::Home)
                .map(|j| j.summary.id.clone())
                .collect(),
            problem: local.disk_problem.as_ref().map(|reason| {
                format!(
                    "This node cannot write to its disk ({reason}): it accepts no jobs and \
                     offers no workers until space is freed."
                )
            }),
        }
    }

    fn peers(&self) -> Vec<PeerInfo> {
        self.net.borrow().peers.clone()
    }

    fn jobs(&self) -> Vec<JobSummary> {
        let now = unix_ms();
        let local = self.local.borrow().clone();
        local.jobs.iter().map(|j| j.summary_at(now)).collect()
    }

    fn job(&self, id: &str) -> Option<JobDetail> {
        let local = self.local.borrow().clone();
        let Some(entry) = local.jobs.iter().find(|j| j.summary.id == id) else {
            return self.stored_job(id);
        };
        let log_tail = match entry.summary.role {
            JobRole::Home => self.log_tail(parse_job(id)?, entry.since_ms),
            JobRole::Participant => vec![LogLine {
                at_secs: 0.0,
                worker: None,
                text: "the log is kept by the job's home node".into(),
            }],
        };
        Some(JobDetail {
            summary: entry.summary_at(unix_ms()),
            workers: entry.workers.clone(),
            log_tail,
        })
    }

    fn pending(&self) -> Vec<PendingAdvert> {
        let now = Instant::now();
        let local = self.local.borrow().clone();
        local
            .pending
            .iter()
            .map(|p| PendingAdvert {
                expires_in_secs: p.expires_at.saturating_duration_since(now).as_secs(),
                ..p.advert.clone()
            })
            .collect()
    }

    fn counters(&self) -> Counters {
        let stats = self.net.borrow().stats;
        Counters {
            floods_sent: stats.router.originated,
            floods_forwarded: stats.router.forwarded,
            messages_sent: stats.requests_sent + stats.flood_frames_sent,
            messages_received: stats.requests_received + stats.flood_frames_received,
            workers_started: self.local.borrow().workers_started,
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    fn remote(&self, peer: &str) -> BoxFuture<'static, Result<NodeSnapshot, RemoteError>> {
        let target = match self.peer(peer) {
            Ok(p) => p,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        if target == self.me {
            let snap = zorilla_webui::snapshot(self);
            return Box::pin(std::future::ready(Ok(snap)));
        }
        let known = self.knows(peer);
        let overlay = self.overlay.clone();
        Box::pin(async move { remote::remote_view(&overlay, target, known).await })
    }

    fn summary(&self) -> NodeSummary {
        let me = self.me.to_string();
        let local = self.local.borrow().clone();
        let jobs = local
            .jobs
            .iter()
            .filter_map(|j| {
                let ranks = j
                    .workers
                    .iter()
                    .filter(|w| {
                        w.node == me
                            && matches!(w.state, WorkerState::Starting | WorkerState::Running)
                    })
                    .count() as u32;
                (ranks > 0).then(|| NodeJob {
                    id: j.summary.id.clone(),
                    name: j.summary.name.clone(),
                    home: j.summary.home.clone(),
                    ranks,
                })
            })
            .take(crate::wire::view::MAX_SUMMARY_JOBS)
            .collect();
        NodeSummary {
            name: self.name.clone(),
            site: self.site.clone(),
            offered_cores: self.offered.cores,
            used_cores: local.in_use.cores.min(self.offered.cores),
            workers_running: local.workers_running,
            jobs,
        }
    }

    fn remote_summary(&self, peer: &str) -> BoxFuture<'static, Result<NodeSummary, RemoteError>> {
        let target = match self.peer(peer) {
            Ok(p) => p,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        if target == self.me {
            return Box::pin(std::future::ready(Ok(self.summary())));
        }
        let known = self.knows(peer);
        let overlay = self.overlay.clone();
        Box::pin(async move { remote::remote_summary(&overlay, target, known).await })
    }

    fn remote_job(
        &self,
        peer: &str,
        job: &str,
    ) -> BoxFuture<'static, Result<Option<JobDetail>, RemoteError>> {
        let target = match self.peer(peer) {
            Ok(p) => p,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        if target == self.me {
            return Box::pin(std::future::ready(Ok(self.job(job))));
        }
        let known = self.knows(peer);
        let overlay = self.overlay.clone();
        let job = job.to_owned();
        Box::pin(async move { remote::remote_job(&overlay, target, job, known).await })
    }
}

/// A peer's remote-view or grid-view request, answered from this node's
/// status, cut to
/// [`MAX_REPLY_BYTES`](super::remote::MAX_REPLY_BYTES). Reads the database:
/// run it off the loop.
pub(crate) fn answer(status: &NodeStatus, asked: &ViewRpc) -> PeerReply {
    answer_from(status, asked)
}

//! What the node shows on its status page (`zorilla-webui`), and the remote
//! view's answers to peers.
//!
//! The web server never calls into the event loop, and the loop never waits
//! for the web server:
//! - the loop owns a [`Publisher`]. After an event that may change what the
//!   pages show it marks the publisher ([`Publisher::touch`],
//!   [`Publisher::note_rpc`]); at most every [`PUBLISH_EVERY`] it then
//!   builds a fresh view of its jobs, workers, pending adverts and resources
//!   in use ([`Publisher::publish`]) and swaps it in. Rank-to-rank messages
//!   and file blocks, the chatty part of its traffic, change nothing shown
//!   and mark nothing.
//! - a poller task ([`poll_overlay`]) asks the overlay every [`POLL_EVERY`]
//!   for its peers, RTTs, listen addresses and counters.
//! - [`NodeStatus`], shared with the web server, answers every
//!   [`StatusSource`] call from the latest of both. Log tails come from the
//!   database (redb readers do not wait for the loop's writes).
//! - Which pages changed is found by comparing each new view with the one
//!   before; the changes go out on a bounded broadcast channel. A log chunk
//!   arriving announces its job's page (at most every [`PUBLISH_EVERY`] too).
//!
//! Remote views: [`NodeStatus`]'s [`StatusSource::remote`] and
//! [`StatusSource::remote_job`] send the peer a [`PeerRpc::Status`] or
//! [`PeerRpc::StatusJob`] and wait at most [`REMOTE_TIMEOUT`]. The peer's loop
//! hands such a request to [`answer`] off the loop; the answer is cut to
//! [`MAX_REPLY_BYTES`] (the overlay refuses frames over 1 MiB).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::{broadcast, watch};
use zorilla_core::advert::{JobId, Strategy};
use zorilla_core::neighbours::LinkKind as CoreLink;
use zorilla_core::node::{PendingReport, Scheduler};
use zorilla_core::resources::Resources as CoreResources;
use zorilla_overlay::{OverlayHandle, OverlayStats, PeerId};
use zorilla_webui::model::{
    Counters, JobDetail, JobPhase, JobRole, JobSummary, LinkKind, LogLine, NodeOverview,
    NodeSnapshot, PeerInfo, PendingAdvert, Resources, WorkerInfo, WorkerState,
};
use zorilla_webui::{Change, MAX_LOG_LINE_BYTES, MAX_LOG_LINES, RemoteError, StatusSource};

use crate::protocol::{self, JobRequest};
use crate::store::{JobRecord, Store, unix_ms};
use crate::wire::{PeerReply, PeerRpc, decode, encode};

/// The loop rebuilds the view at most this often.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// The overlay's peers and counters are read this often (RTTs change
/// continually; the peers page follows them at this pace at most).
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(200);
/// How long a remote view waits for the peer (less than the web
/// interface's own bound, so that the page says why).
pub(crate) const REMOTE_TIMEOUT: Duration = Duration::from_secs(8);
/// The largest remote-view answer, encoded: well under the overlay's 1 MiB
/// frame cap.
pub(crate) const MAX_REPLY_BYTES: usize = 768 * 1024;
/// Change notifications buffered per subscriber; a browser that falls
/// further behind is sent the latest state.
const CHANGES: usize = 64;
/// Jobs shown: every job under way first, then the newest ended ones (a
/// home keeps this many finished jobs in memory; older ones are read from
/// the store when their page is asked for).
pub(crate) const MAX_JOBS: usize = 500;
/// Jobs this node ran workers of (and is not home to) that it remembers.
const MAX_PARTICIPATED: usize = 256;
/// Peers listed.
const MAX_PEERS: usize = 1000;
/// The most log bytes read for one job page.
const TAIL_BYTES: usize = 256 * 1024;
/// The longest job name (made from the job's arguments).
const MAX_NAME_BYTES: usize = 80;

/// What the loop publishes.
#[derive(Debug, Clone, Default, PartialEq)]
struct LoopView {
    in_use: Resources,
    workers_running: u32,
    workers_started: u64,
    /// Every job shown: home and participant, those under way first.
    jobs: Vec<JobEntry>,
    pending: Vec<PendingEntry>,
    /// Why the disk cannot be written, while it cannot.
    disk_problem: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
struct JobEntry {
    /// With `age_secs` 0: ages are computed when read.
    summary: JobSummary,
    /// Submitted (home) or first seen (participant), ms since the Unix epoch.
    since_ms: u64,
    workers: Vec<WorkerInfo>,
}

impl JobEntry {
    fn summary_at(&self, now_ms: u64) -> JobSummary {
        JobSummary {
            age_secs: now_ms.saturating_sub(self.since_ms) / 1000,
            ..self.summary.clone()
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct PendingEntry {
    /// With `expires_in_secs` 0: computed when read.
    advert: PendingAdvert,
    expires_at: Instant,
}

/// What the overlay poller publishes.
#[derive(Debug, Clone, Default, PartialEq)]
struct NetView {
    peers: Vec<PeerInfo>,
    listen: Vec<String>,
    stats: OverlayStats,
}

/// The node's [`StatusSource`]: the latest published views, the database
/// for log tails, the overlay for remote views. Shared by the web server,
/// the overlay poller and the loop's [`Publisher`].
pub(crate) struct NodeStatus {
    me: PeerId,
    name: String,
    network: String,
    started: Instant,
    started_ms: u64,
    offered: Resources,
    store: Arc<Store>,
    overlay: OverlayHandle,
    local: watch::Sender<Arc<LoopView>>,
    net: watch::Sender<Arc<NetView>>,
    changes: broadcast::Sender<Change>,
}

impl NodeStatus {
    /// The status of node `overlay.local_peer_id()` in grid `network`,
    /// offering `offered`.
    pub(crate) fn new(
        overlay: OverlayHandle,
        network: String,
        offered: CoreResources,
        store: Arc<Store>,
    ) -> Arc<NodeStatus> {
        Arc::new(NodeStatus {
            me: overlay.local_peer_id(),
            name: hostname(),
            network,
            started: Instant::now(),
            started_ms: unix_ms(),
            offered: resources(offered),
            store,
            overlay,
            local: watch::Sender::new(Arc::default()),
            net: watch::Sender::new(Arc::default()),
            changes: broadcast::Sender::new(CHANGES),
        })
    }

    fn announce(&self, change: Change) {
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
    /// newest [`MAX_JOBS`]), from the store.
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
            listen_addresses: net.listen.clone(),
            offered: self.offered,
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
        Box::pin(async move {
            match ask(&overlay, target, PeerRpc::Status, known).await? {
                PeerReply::Status(snap) => Ok(*snap),
                other => Err(unexpected(&other)),
            }
        })
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
        let rpc = PeerRpc::StatusJob { job: job.into() };
        Box::pin(async move {
            match ask(&overlay, target, rpc, known).await? {
                PeerReply::StatusJob(job) => Ok(job.map(|j| *j)),
                other => Err(unexpected(&other)),
            }
        })
    }
}

/// Sends a status rpc to `peer` and waits at most [`REMOTE_TIMEOUT`].
async fn ask(
    overlay: &OverlayHandle,
    peer: PeerId,
    rpc: PeerRpc,
    known: bool,
) -> Result<PeerReply, RemoteError> {
    let bytes =
        match tokio::time::timeout(REMOTE_TIMEOUT, overlay.request(peer, encode(&rpc))).await {
            Err(_) => {
                return Err(RemoteError::Unreachable(format!(
                    "no answer within {} s",
                    REMOTE_TIMEOUT.as_secs()
                )));
            }
            // A peer the overlay never heard of cannot be dialed.
            Ok(Err(_)) if !known => return Err(RemoteError::UnknownPeer),
            Ok(Err(e)) => return Err(RemoteError::Unreachable(e.to_string())),
            Ok(Ok(bytes)) => bytes,
        };
    match decode::<PeerReply>(&bytes) {
        Ok(PeerReply::Error(e)) => Err(RemoteError::Unreachable(format!("the peer said: {e}"))),
        Ok(reply) => Ok(reply),
        Err(e) => Err(RemoteError::Unreachable(format!(
            "the peer's answer is not readable: {e}"
        ))),
    }
}

fn unexpected(reply: &PeerReply) -> RemoteError {
    let what = match reply {
        PeerReply::Ack => "an acknowledgement",
        PeerReply::Granted { .. } => "a grant's acknowledgement",
        PeerReply::Job(_) => "a job copy",
        PeerReply::Block(_) => "a file block",
        PeerReply::Status(_) => "a node snapshot",
        PeerReply::StatusJob(_) => "a job",
        PeerReply::Ranks { .. } => "a list of ranks",
        PeerReply::Error(_) => "an error",
    };
    RemoteError::Unreachable(format!("the peer answered with {what}"))
}

/// A peer's remote-view request (`job` `None` for the whole node),
/// answered from this node's status, cut to [`MAX_REPLY_BYTES`]. Reads the
/// database: run it off the loop.
pub(crate) fn answer(status: &NodeStatus, job: Option<&str>) -> PeerReply {
    match job {
        None => {
            let mut snap = zorilla_webui::snapshot(status);
            fit_snapshot(&mut snap, MAX_REPLY_BYTES);
            PeerReply::Status(Box::new(snap))
        }
        Some(id) => PeerReply::StatusJob(status.job(id).map(|mut detail| {
            fit_job(&mut detail, MAX_REPLY_BYTES);
            Box::new(detail)
        })),
    }
}

/// Halves the longest list of `snap` until it encodes to at most `max`
/// bytes (the overview's scalars and the counters always stay).
fn fit_snapshot(snap: &mut NodeSnapshot, max: usize) {
    while encode(snap).len() > max {
        let lens = [
            snap.jobs.len(),
            snap.peers.len(),
            snap.pending.len(),
            snap.overview.home_jobs.len(),
            snap.overview.listen_addresses.len(),
        ];
        let (which, &len) = lens
            .iter()
            .enumerate()
            .max_by_key(|(_, l)| **l)
            .expect("five lists");
        if len == 0 {
            return;
        }
        let keep = len / 2;
        match which {
            0 => snap.jobs.truncate(keep),
            1 => snap.peers.truncate(keep),
            2 => snap.pending.truncate(keep),
            3 => snap.overview.home_jobs.truncate(keep),
            _ => snap.overview.listen_addresses.truncate(keep),
        }
    }
}

/// Drops the oldest half of the log (then workers) until `job` encodes to
/// at most `max` bytes.
fn fit_job(job: &mut JobDetail, max: usize) {
    while encode(job).len() > max {
        if !job.log_tail.is_empty() {
            let drop = job.log_tail.len().div_ceil(2);
            job.log_tail.drain(..drop);
        } else if !job.workers.is_empty() {
            job.workers.truncate(job.workers.len() / 2);
        } else {
            return;
        }
    }
}

/// Log chunks (with their arrival times) as lines: a line split over
/// chunks of one rank and stream is joined; a line still open at the end
/// is shown as it is. stderr lines are marked. At most [`MAX_LOG_LINES`],
/// the newest, each cut to [`MAX_LOG_LINE_BYTES`].
fn log_lines(chunks: &[(u64, protocol::LogChunk)], since_ms: u64) -> Vec<LogLine> {
    // (arrival of the line's first piece, rank, stderr, text)
    let mut lines: Vec<(u64, u32, bool, String)> = Vec::new();
    let mut open: BTreeMap<(u32, bool), (u64, String)> = BTreeMap::new();
    for (at, chunk) in chunks {
        let text = String::from_utf8_lossy(&chunk.data);
        let mut rest: &str = &text;
        while !rest.is_empty() {
            let (piece, ends, tail) = match rest.find('\n') {
                Some(i) => (&rest[..i], true, &rest[i + 1..]),
                None => (rest, false, ""),
            };
            let slot = open
                .entry((chunk.rank, chunk.stderr))
                .or_insert_with(|| (*at, String::new()));
            // Pieces past the cut are not kept: bounded per line.
            if slot.1.len() < MAX_LOG_LINE_BYTES {
                slot.1.push_str(piece);
            }
            if ends {
                let (first, text) = open.remove(&(chunk.rank, chunk.stderr)).expect("slot");
                lines.push((first, chunk.rank, chunk.stderr, text));
            }
            rest = tail;
        }
    }
    lines.extend(
        open.into_iter()
            .map(|((rank, stderr), (at, text))| (at, rank, stderr, text)),
    );
    // Lines still open went last; arrival order puts them back in place.
    lines.sort_by_key(|l| l.0);
    let skip = lines.len().saturating_sub(MAX_LOG_LINES);
    lines
        .into_iter()
        .skip(skip)
        .map(|(at, rank, stderr, text)| {
            let text = text.trim_end_matches('\r');
            let text = if stderr {
                format!("stderr: {text}")
            } else {
                text.to_string()
            };
            LogLine {
                at_secs: if at == 0 {
                    0.0
                } else {
                    at.saturating_sub(since_ms) as f64 / 1000.0
                },
                worker: Some(rank),
                text: cut(text, MAX_LOG_LINE_BYTES),
            }
        })
        .collect()
}

fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// A job id as the pages print it ([`JobId`]'s 16 hex digits), back.
fn parse_job(id: &str) -> Option<u64> {
    if id.len() != 16 {
        return None;
    }
    u64::from_str_radix(id, 16).ok()
}

/// The job's name on the pages: the start of its id, then its arguments
/// (jobs have no name of their own).
fn job_name(job: u64, request: Option<&JobRequest>) -> String {
    let id = JobId(job).to_string();
    let mut name = id[..8].to_string();
    if let Some(request) = request
        && !request.args.is_empty()
    {
        name.push(' ');
        name.push_str(&request.args.join(" "));
    }
    cut(name, MAX_NAME_BYTES)
}

fn strategy(request: Option<&JobRequest>) -> String {
    match request.map(|r| r.strategy) {
        Some(Strategy::Spread) => "spread".into(),
        Some(Strategy::Concentrate) => "concentrate".into(),
        None => "unknown".into(),
    }
}

fn phase(phase: protocol::JobPhase) -> JobPhase {
    match phase {
        protocol::JobPhase::Submitted | protocol::JobPhase::Scheduling => JobPhase::Scheduling,
        protocol::JobPhase::Running => JobPhase::Running,
        protocol::JobPhase::Completed => JobPhase::Completed,
        protocol::JobPhase::Cancelled => JobPhase::Cancelled,
        protocol::JobPhase::Failed => JobPhase::Failed,
    }
}

/// A worker whose end was not reported, by its job's phase.
fn state_by_phase(phase: JobPhase) -> WorkerState {
    match phase {
        JobPhase::Scheduling => WorkerState::Starting,
        JobPhase::Running => WorkerState::Running,
        JobPhase::Completed => WorkerState::Exited,
        JobPhase::Cancelled | JobPhase::Failed => WorkerState::Failed,
    }
}

/// A rank's outcome as the home records it (see `supervise` and
/// `JobEvent::WorkersLost` in the loop).
fn outcome_state(outcome: &str) -> (WorkerState, Option<i32>) {
    if let Some(code) = outcome
        .strip_prefix("exited with status ")
        .and_then(|c| c.parse::<i32>().ok())
    {
        let state = if code == 0 {
            WorkerState::Exited
        } else {
            WorkerState::Failed
        };
        return (state, Some(code));
    }
    if outcome.starts_with("lost") {
        return (WorkerState::Lost, None);
    }
    (WorkerState::Failed, None)
}

fn resources(r: CoreResources) -> Resources {
    const MIB: u64 = 1024 * 1024;
    Resources {
        cores: r.cores,
        memory_bytes: r.memory_mib.saturating_mul(MIB),
        disk_bytes: r.disk_mib.saturating_mul(MIB),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "zorilla-node".into())
}

/// A job with workers on this node, as the loop describes it.
pub(crate) struct Member {
    pub(crate) job: u64,
    pub(crate) home: PeerId,
    /// Ranks whose workers run here.
    pub(crate) running: Vec<u32>,
    /// Ranks whose workers are being prepared here.
    pub(crate) starting: Vec<u32>,
    /// Where every rank of the job runs, as far as this node knows.
    pub(crate) ranks: BTreeMap<u32, PeerId>,
}

/// The loop's state that the view is built from.
pub(crate) struct LoopState<'a> {
    pub(crate) epoch: Instant,
    pub(crate) sched: &'a Scheduler<PeerId>,
    /// Home jobs under way.
    pub(crate) jobs: &'a BTreeMap<u64, JobRecord>,
    /// The newest finished home jobs (the rest are in the store).
    pub(crate) finished: &'a VecDeque<JobRecord>,
    pub(crate) members: Vec<Member>,
    /// Why the disk cannot be written, while it cannot.
    pub(crate) disk_problem: Option<String>,
}

/// A job this node runs (or ran) workers of without being its home.
#[derive(Debug, Clone)]
struct Participation {
    home: PeerId,
    request: Option<JobRequest>,
    phase: JobPhase,
    ranks: BTreeMap<u32, PeerId>,
    /// This node's own ranks.
    local: BTreeMap<u32, WorkerState>,
    first_seen_ms: u64,
}

/// The loop's side: remembers what changed and publishes new views. See
/// the [module documentation](self).
pub(crate) struct Publisher {
    status: Arc<NodeStatus>,
    /// The loop's state may have changed since the last view.
    dirty: bool,
    /// Jobs whose log grew since the last announcement.
    logs: BTreeSet<u64>,
    last: Option<Instant>,
    workers_started: u64,
    participated: BTreeMap<u64, Participation>,
}

impl Publisher {
    /// The publisher of `status`; the first view goes out at once.
    pub(crate) fn new(status: Arc<NodeStatus>) -> Publisher {
        Publisher {
            status,
            dirty: true,
            logs: BTreeSet::new(),
            last: None,
            workers_started: 0,
            participated: BTreeMap::new(),
        }
    }

    /// The shared status (for answering remote views).
    pub(crate) fn status(&self) -> Arc<NodeStatus> {
        self.status.clone()
    }

    /// Something the pages show may have changed.
    pub(crate) fn touch(&mut self) {
        self.dirty = true;
    }

    /// A peer's request arrived: marks what it may change.
    pub(crate) fn note_rpc(&mut self, rpc: &PeerRpc) {
        match rpc {
            PeerRpc::Log { job, .. } => {
                self.logs.insert(*job);
            }
            // Nothing shown changes.
            PeerRpc::Barrier { .. }
            | PeerRpc::GetBlock { .. }
            | PeerRpc::GetJob { .. }
            | PeerRpc::Output { .. }
            | PeerRpc::Ping
            | PeerRpc::Ranks { .. }
            | PeerRpc::Status
            | PeerRpc::StatusJob { .. } => {}
            PeerRpc::Sched(_) | PeerRpc::Placement { .. } | PeerRpc::WorkerEnded { .. } => {
                self.dirty = true;
            }
        }
    }

    /// A worker started on this node.
    pub(crate) fn worker_started(&mut self) {
        self.workers_started += 1;
        self.dirty = true;
    }

    /// This node got the copy of a job it runs workers of.
    pub(crate) fn job_copy(
        &mut self,
        job: u64,
        home: PeerId,
        request: &JobRequest,
        job_phase: protocol::JobPhase,
    ) {
        if home == self.status.me {
            return; // A job of our own: its record says it all.
        }
        let p = self.participation(job, home);
        p.request = Some(request.clone());
        p.phase = p.phase.max(phase(job_phase));
        self.dirty = true;
    }

    /// The home pushed a job's phase.
    pub(crate) fn job_phase(&mut self, job: u64, job_phase: protocol::JobPhase) {
        if let Some(p) = self.participated.get_mut(&job) {
            p.phase = p.phase.max(phase(job_phase));
            self.dirty = true;
        }
    }

    fn participation(&mut self, job: u64, home: PeerId) -> &mut Participation {
        if !self.participated.contains_key(&job) && self.participated.len() >= MAX_PARTICIPATED {
            // Forget the oldest ended one (or else the oldest).
            let oldest = self
                .participated
                .iter()
                .min_by_key(|(_, p)| (!p.phase_is_terminal(), p.first_seen_ms))
                .map(|(j, _)| *j);
            if let Some(oldest) = oldest {
                self.participated.remove(&oldest);
            }
        }
        self.participated
            .entry(job)
            .or_insert_with(|| Participation {
                home,
                request: None,
                phase: JobPhase::Running,
                ranks: BTreeMap::new(),
                local: BTreeMap::new(),
                first_seen_ms: unix_ms(),
            })
    }

    /// When [`publish`](Self::publish) is next due, if anything changed.
    pub(crate) fn due(&self) -> Option<Instant> {
        if !self.dirty && self.logs.is_empty() {
            return None;
        }
        Some(match self.last {
            Some(last) => last + PUBLISH_EVERY,
            None => Instant::now(),
        })
    }

    /// Whether [`publish`](Self::publish) is due now.
    pub(crate) fn is_due(&self) -> bool {
        self.due().is_some_and(|at| at <= Instant::now())
    }

    /// Builds the view from the loop's state (if it may have changed),
    /// swaps it in and announces what changed.
    pub(crate) fn publish(&mut self, state: LoopState<'_>) {
        self.last = Some(Instant::now());
        let mut changes = BTreeSet::new();
        if std::mem::take(&mut self.dirty) {
            let view = Arc::new(self.build(state));
            let old = self.status.local.send_replace(view.clone());
            changes = diff(&old, &view);
        }
        for job in std::mem::take(&mut self.logs) {
            changes.insert(ChangeKey::Job(JobId(job).to_string()));
        }
        for change in changes {
            self.status.announce(change.into());
        }
    }

    fn build(&mut self, state: LoopState<'_>) -> LoopView {
        let me = self.status.me;
        let sched = state.sched;
        let mut jobs = Vec::with_capacity(state.jobs.len() + self.participated.len());
        // A home keeps every job it ever had: pick the ones shown before
        // building anything for them.
        let started_ms = self.status.started_ms;
        let records: BTreeMap<u64, &JobRecord> = state
            .finished
            .iter()
            .chain(state.jobs.values())
            .map(|r| (r.id, r))
            .collect();
        let mut home: Vec<(bool, std::cmp::Reverse<u64>, u64)> = records
            .iter()
            .map(|(id, r)| {
                let since = submitted(r, started_ms);
                (r.phase.is_terminal(), std::cmp::Reverse(since), *id)
            })
            .collect();
        if home.len() > MAX_JOBS {
            home.select_nth_unstable(MAX_JOBS);
            home.truncate(MAX_JOBS);
        }
        for (_, _, id) in home {
            let report = sched.report(JobId(id));
            jobs.push(home_entry(me, report, id, records[&id], started_ms));
        }
        // Workers of other homes' jobs. A rank of ours that no longer runs
        // here has ended (how, only its home knows).
        for p in self.participated.values_mut() {
            for s in p.local.values_mut() {
                if matches!(s, WorkerState::Starting | WorkerState::Running) {
                    *s = WorkerState::Exited;
                }
            }
        }
        for member in &state.members {
            if member.home == me {
                continue;
            }
            let p = self.participation(member.job, member.home);
            if !member.ranks.is_empty() {
                p.ranks = member.ranks.clone();
            }
            for rank in &member.starting {
                p.local.insert(*rank, WorkerState::Starting);
            }
            for rank in &member.running {
                p.local.insert(*rank, WorkerState::Running);
            }
        }
        for (id, p) in &mut self.participated {
            if records.contains_key(id) {
                continue;
            }
            if matches!(p.phase, JobPhase::Cancelled | JobPhase::Failed) {
                for s in p.local.values_mut() {
                    if *s == WorkerState::Exited {
                        *s = WorkerState::Failed;
                    }
                }
            }
            jobs.push(p.entry(*id));
        }
        // Jobs under way first, then the newest.
        let key = |j: &JobEntry| {
            (
                j.summary.phase > JobPhase::Running,
                std::cmp::Reverse(j.since_ms),
            )
        };
        jobs.sort_by(|a, b| {
            key(a)
                .cmp(&key(b))
                .then_with(|| a.summary.id.cmp(&b.summary.id))
        });
        jobs.truncate(MAX_JOBS);

        let pending = sched
            .pending()
            .map(|(advert, expires_at)| PendingEntry {
                advert: PendingAdvert {
                    job_id: advert.job.to_string(),
                    job_name: format!(
                        "{} ({}-{} workers of {})",
                        &advert.job.to_string()[..8],
                        advert.workers.min,
                        advert.workers.max,
                        advert.per_worker
                    ),
                    home: advert.home.to_string(),
                    workers_wanted: advert.workers.max,
                    expires_in_secs: 0,
                },
                expires_at: state.epoch + expires_at,
            })
            .collect();
        let offered = sched.config().resources;
        LoopView {
            in_use: resources(offered.saturating_sub(&sched.free())),
            workers_running: state.members.iter().map(|m| m.running.len() as u32).sum(),
            workers_started: self.workers_started,
            jobs,
            pending,
            disk_problem: state.disk_problem,
        }
    }
}

impl Participation {
    fn phase_is_terminal(&self) -> bool {
        self.phase > JobPhase::Running
    }

    fn entry(&self, job: u64) -> JobEntry {
        let request = self.request.as_ref();
        let mut workers: Vec<WorkerInfo> = self
            .ranks
            .iter()
            .map(|(rank, node)| WorkerInfo {
                node: node.to_string(),
                index: *rank,
                state: self
                    .local
                    .get(rank)
                    .copied()
                    .unwrap_or_else(|| state_by_phase(self.phase)),
                exit_code: None,
                ended: None,
            })
            .collect();
        // Ranks of ours the placement does not list (yet).
        for (rank, state) in &self.local {
            if !self.ranks.contains_key(rank) {
                workers.push(WorkerInfo {
                    node: String::new(),
                    index: *rank,
                    state: *state,
                    exit_code: None,
                    ended: None,
                });
            }
        }
        JobEntry {
            summary: JobSummary {
                id: JobId(job).to_string(),
                name: job_name(job, request),
                role: JobRole::Participant,
                phase: self.phase,
                workers_joined: self.ranks.len().max(self.local.len()) as u32,
                workers_needed: request.map_or(0, |r| r.min_workers),
                home: self.home.to_string(),
                strategy: strategy(request),
                flood_radius: 0,
                age_secs: 0,
                pending_reason: None,
            },
            since_ms: self.first_seen_ms,
            workers,
        }
    }
}

fn home_entry(
    me: PeerId,
    report: Option<PendingReport>,
    id: u64,
    record: &JobRecord,
    started_ms: u64,
) -> JobEntry {
    let job_phase = phase(record.phase);
    let workers: Vec<WorkerInfo> = record
        .ranks
        .iter()
        .map(|(rank, status)| {
            let (state, exit_code) = match status.outcome.as_deref() {
                Some(outcome) => outcome_state(outcome),
                None => (state_by_phase(job_phase), None),
            };
            WorkerInfo {
                node: status.node.clone(),
                index: *rank,
                state,
                exit_code,
                ended: status.outcome.clone(),
            }
        })
        .collect();
    let pending_reason = (job_phase == JobPhase::Scheduling).then(|| {
        report
            .as_ref()
            .map_or_else(|| record.reason.clone(), |r| r.explain())
    });
    JobEntry {
        summary: JobSummary {
            id: JobId(id).to_string(),
            name: job_name(id, Some(&record.request)),
            role: JobRole::Home,
            phase: job_phase,
            workers_joined: workers
                .iter()
                .filter(|w| w.state != WorkerState::Lost)
                .count() as u32,
            workers_needed: record.request.min_workers,
            home: me.to_string(),
            strategy: strategy(Some(&record.request)),
            flood_radius: report.map_or(0, |r| r.radius),
            age_secs: 0,
            pending_reason,
        },
        since_ms: submitted(record, started_ms),
        workers,
    }
}

/// When a home job was submitted, in ms since the Unix epoch (its record
/// keeps whole seconds); jobs stored before submission times were kept count
/// from this start of the node.
fn submitted(record: &JobRecord, started_ms: u64) -> u64 {
    if record.submitted_unix == 0 {
        started_ms
    } else {
        record.submitted_unix.saturating_mul(1000)
    }
}

/// A change, ordered so that a set holds each once.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum ChangeKey {
    Node,
    Jobs,
    Job(String),
    Pending,
}

impl From<ChangeKey> for Change {
    fn from(key: ChangeKey) -> Change {
        match key {
            ChangeKey::Node => Change::Node,
            ChangeKey::Jobs => Change::Jobs,
            ChangeKey::Job(id) => Change::Job(id),
            ChangeKey::Pending => Change::Pending,
        }
    }
}

/// What differs between two views, as the pages see it.
fn diff(old: &LoopView, new: &LoopView) -> BTreeSet<ChangeKey> {
    let mut out = BTreeSet::new();
    if old.in_use != new.in_use
        || old.workers_running != new.workers_running
        || old.disk_problem != new.disk_problem
    {
        out.insert(ChangeKey::Node);
    }
    // Compared in place, without copies: a view holds up to MAX_JOBS jobs.
    fn listed(v: &LoopView) -> impl Iterator<Item = (&JobSummary, u64)> {
        v.jobs.iter().map(|j| (&j.summary, j.since_ms))
    }
    fn home(v: &LoopView) -> impl Iterator<Item = &String> {
        v.jobs
            .iter()
            .filter(|j| j.summary.role == JobRole::Home)
            .map(|j| &j.summary.id)
    }
    if !listed(old).eq(listed(new)) {
        out.insert(ChangeKey::Jobs);
        if !home(old).eq(home(new)) {
            out.insert(ChangeKey::Node);
        }
    }
    let before: BTreeMap<&str, &JobEntry> = old
        .jobs
        .iter()
        .map(|j| (j.summary.id.as_str(), j))
        .collect();
    // A job new to the view has no page open yet (its page was a "not
    // found"), so only jobs shown before are announced: the first view of
    // a long history does not flood every subscriber.
    for job in &new.jobs {
        if before
            .get(job.summary.id.as_str())
            .is_some_and(|old| *old != job)
        {
            out.insert(ChangeKey::Job(job.summary.id.clone()));
        }
    }
    if !old
        .pending
        .iter()
        .map(|p| &p.advert)
        .eq(new.pending.iter().map(|p| &p.advert))
    {
        out.insert(ChangeKey::Pending);
    }
    out
}

/// Reads the overlay's peers, addresses and counters every [`POLL_EVERY`]
/// into `status`, announcing changes, until the overlay stops.
pub(crate) async fn poll_overlay(status: Arc<NodeStatus>) {
    let overlay = status.overlay.clone();
    let mut tick = tokio::time::interval(POLL_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (Ok(known), Ok(listen), Ok(stats)) = (
            overlay.known_peers().await,
            overlay.listen_addrs().await,
            overlay.stats().await,
        ) else {
            return; // The overlay stopped.
        };
        let mut peers: Vec<PeerInfo> = known
            .into_iter()
            .map(|p| PeerInfo {
                peer_id: p.peer.to_string(),
                name: None,
                rtt_ms: p.rtt.map(|d| d.as_secs_f64() * 1e3),
                link: match p.kind {
                    Some(CoreLink::Near) => LinkKind::Near,
                    Some(CoreLink::Far) => LinkKind::Far,
                    None => LinkKind::None,
                },
                connected: p.connected,
                coordinates: None,
            })
            .collect();
        // Neighbours first, nearest first.
        peers.sort_by(PeerInfo::display_order);
        peers.truncate(MAX_PEERS);
        let view = NetView {
            peers,
            listen: listen.iter().map(|a| a.to_string()).collect(),
            stats,
        };
        let old = status.net.borrow().clone();
        if old.peers != view.peers {
            status.announce(Change::Peers);
        }
        if old.listen != view.listen {
            status.announce(Change::Node);
        }
        status.net.send_replace(Arc::new(view));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::LogChunk;

    fn chunk(rank: u32, stderr: bool, text: &str) -> LogChunk {
        LogChunk {
            rank,
            stderr,
            data: text.as_bytes().to_vec(),
        }
    }

    /// A node's status over a real (unconnected) overlay, a scheduler with
    /// nothing going on, and `n` stored home jobs: every tenth running (two
    /// ranks), the rest completed (four ranks).
    async fn with_jobs(
        n: u64,
    ) -> (
        Publisher,
        Arc<NodeStatus>,
        Scheduler<PeerId>,
        BTreeMap<u64, JobRecord>,
        tempfile::TempDir,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = zorilla_overlay::OverlayConfig {
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()],
            mdns: false,
            ..zorilla_overlay::OverlayConfig::default()
        };
        let (overlay, _events) = zorilla_overlay::Overlay::start(config).await.unwrap();
        let me = overlay.local_peer_id();
        let store = Arc::new(Store::open(&dir.path().join("state.redb")).unwrap());
        let status = NodeStatus::new(
            overlay,
            "test".into(),
            CoreResources::new(4, 1024, 1024),
            store,
        );
        let sched = Scheduler::new(me, zorilla_core::node::SchedulerConfig::default());
        let jobs = (1..=n)
            .map(|id| {
                let running = id % 10 == 0;
                let ranks = (0..if running { 2 } else { 4 })
                    .map(|r| {
                        let status = protocol::RankStatus {
                            node: me.to_string(),
                            outcome: (!running).then(|| "exited with status 0".to_string()),
                        };
                        (r, status)
                    })
                    .collect();
                let record = JobRecord {
                    id,
                    phase: if running {
                        protocol::JobPhase::Running
                    } else {
                        protocol::JobPhase::Completed
                    },
                    reason: "r".into(),
                    request: JobRequest {
                        args: vec!["arg".into(); 3],
                        ..JobRequest::default()
                    },
                    module: crate::store::FileRef {
                        name: "module.wasm".into(),
                        sha256: "00".into(),
                        size: 1,
                    },
                    inputs: Vec::new(),
                    ranks,
                    submitted_unix: 1_700_000_000 + id,
                };
                (id, record)
            })
            .collect();
        (Publisher::new(status.clone()), status, sched, jobs, dir)
    }

    static NO_JOBS: VecDeque<JobRecord> = VecDeque::new();

    fn state<'a>(
        sched: &'a Scheduler<PeerId>,
        jobs: &'a BTreeMap<u64, JobRecord>,
    ) -> LoopState<'a> {
        LoopState {
            epoch: Instant::now(),
            sched,
            jobs,
            finished: &NO_JOBS,
            members: Vec::new(),
            disk_problem: None,
        }
    }

    #[tokio::test]
    async fn a_long_history_shows_the_jobs_under_way_then_the_newest() {
        let (mut publisher, status, sched, jobs, _dir) = with_jobs(1200).await;
        let mut changes = status.subscribe();
        assert!(publisher.is_due(), "the first view goes out at once");
        publisher.publish(state(&sched, &jobs));
        let shown = status.jobs();
        assert_eq!(shown.len(), MAX_JOBS);
        // 120 running, newest first, then the newest completed.
        assert!(shown[..120].iter().all(|j| j.phase == JobPhase::Running));
        assert_eq!(shown[0].id, JobId(1200).to_string());
        assert_eq!(shown[120].id, JobId(1199).to_string());
        assert!(shown[120..].iter().all(|j| j.phase == JobPhase::Completed));
        assert_eq!(status.overview().home_jobs.len(), MAX_JOBS);
        let job = status.job(&shown[0].id).unwrap();
        assert_eq!(job.workers.len(), 2);
        assert!(job.log_tail.is_empty());
        let mut got = BTreeSet::new();
        while let Ok(change) = changes.try_recv() {
            got.insert(format!("{change:?}"));
        }
        assert_eq!(got, BTreeSet::from(["Jobs".into(), "Node".into()]));

        // Nothing changed: nothing is announced, and nothing is due.
        assert!(!publisher.is_due());
        publisher.touch();
        publisher.publish(state(&sched, &jobs));
        assert!(changes.try_recv().is_err());
        // A log chunk announces its job's page only.
        publisher.note_rpc(&PeerRpc::Log {
            job: 1200,
            chunk: protocol::LogChunk {
                rank: 0,
                stderr: false,
                data: b"x\n".to_vec(),
            },
        });
        assert!(publisher.due().is_some());
        publisher.publish(state(&sched, &jobs));
        assert_eq!(
            changes.try_recv().unwrap(),
            Change::Job(JobId(1200).to_string())
        );
        assert!(changes.try_recv().is_err());
        // The remote view's answer fits.
        match answer(&status, None) {
            PeerReply::Status(snap) => assert_eq!(snap.jobs.len(), MAX_JOBS),
            other => panic!("{other:?}"),
        }
        match answer(&status, Some("nonsense")) {
            PeerReply::StatusJob(None) => {}
            other => panic!("{other:?}"),
        }
    }

    /// A finished home job older than the view's newest is still shown,
    /// from the store (the home does not keep it in memory).
    #[tokio::test]
    async fn an_old_finished_job_is_read_from_the_store() {
        let (mut publisher, status, sched, jobs, _dir) = with_jobs(3).await;
        let mut old = jobs[&1].clone();
        old.id = 0x77;
        status.store.put_job(&old).unwrap();
        status
            .store
            .append_log(0x77, &chunk(0, false, "from the store\n"))
            .unwrap();
        publisher.publish(state(&sched, &jobs));
        let id = JobId(0x77).to_string();
        assert!(status.jobs().iter().all(|j| j.id != id));
        let detail = status.job(&id).expect("read from the store");
        assert_eq!(detail.summary.role, JobRole::Home);
        assert_eq!(detail.summary.phase, JobPhase::Completed);
        assert_eq!(detail.workers.len(), 4);
        assert_eq!(detail.log_tail[0].text, "from the store");
        assert!(status.job(&JobId(0x78).to_string()).is_none());
    }

    /// What a publish costs a home with a long history:
    /// `cargo test -p zorilla-node --lib publish_cost -- --ignored --nocapture`.
    #[tokio::test]
    #[ignore = "a measurement, not a test"]
    async fn publish_cost() {
        for n in [100, 1_000, 10_000] {
            let (mut publisher, status, sched, jobs, _dir) = with_jobs(n).await;
            let rounds = 50;
            let start = Instant::now();
            for _ in 0..rounds {
                publisher.touch();
                publisher.publish(state(&sched, &jobs));
            }
            let publish = start.elapsed() / rounds;
            let start = Instant::now();
            let bytes = encode(&answer(&status, None)).len();
            let remote = start.elapsed();
            println!(
                "{n} stored jobs: publish {:.2} ms; remote-view answer {:.2} ms, {bytes} bytes",
                publish.as_secs_f64() * 1e3,
                remote.as_secs_f64() * 1e3
            );
        }
    }

    #[test]
    fn log_lines_join_pieces_per_rank_and_stream() {
        let chunks = vec![
            (1_000, chunk(0, false, "hel")),
            (1_100, chunk(1, false, "one\ntwo")),
            (1_200, chunk(0, true, "oops\n")),
            (1_300, chunk(0, false, "lo\r\nworld\n")),
            (1_400, chunk(1, false, "!")),
        ];
        let lines = log_lines(&chunks, 500);
        let got: Vec<(f64, Option<u32>, &str)> = lines
            .iter()
            .map(|l| (l.at_secs, l.worker, l.text.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (0.5, Some(0), "hello"),
                (0.6, Some(1), "one"),
                (0.6, Some(1), "two!"),
                (0.7, Some(0), "stderr: oops"),
                (0.8, Some(0), "world"),
            ]
        );
    }

    #[test]
    fn log_lines_are_bounded() {
        let long = "x".repeat(3 * MAX_LOG_LINE_BYTES);
        let mut chunks = vec![(1, chunk(0, false, &format!("{long}\n")))];
        for i in 0..MAX_LOG_LINES + 10 {
            chunks.push((2, chunk(0, false, &format!("{i}\n"))));
        }
        let lines = log_lines(&chunks, 0);
        assert_eq!(lines.len(), MAX_LOG_LINES);
        assert_eq!(lines.last().unwrap().text, (MAX_LOG_LINES + 9).to_string());
        let lines = log_lines(&chunks[..1], 0);
        assert!(lines[0].text.len() <= MAX_LOG_LINE_BYTES);
    }

    #[test]
    fn outcomes_become_worker_states() {
        assert_eq!(
            outcome_state("exited with status 0"),
            (WorkerState::Exited, Some(0))
        );
        assert_eq!(
            outcome_state("exited with status 3"),
            (WorkerState::Failed, Some(3))
        );
        assert_eq!(
            outcome_state("lost: node x failed or left"),
            (WorkerState::Lost, None)
        );
        assert_eq!(outcome_state("Cancelled"), (WorkerState::Failed, None));
    }

    #[test]
    fn job_ids_round_trip_and_bad_ones_are_refused() {
        let id = 0x00ab_cdef_0123_4567;
        assert_eq!(parse_job(&JobId(id).to_string()), Some(id));
        for bad in [
            "",
            "12",
            "zzzzzzzzzzzzzzzz",
            "00abcdef012345670",
            "<script>",
        ] {
            assert_eq!(parse_job(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn names_are_cut_on_a_character_boundary() {
        let request = JobRequest {
            args: vec!["é".repeat(100)],
            ..JobRequest::default()
        };
        let name = job_name(1, Some(&request));
        assert!(name.starts_with("00000000 é"), "{name}");
        assert!(name.len() <= MAX_NAME_BYTES);
        assert_eq!(job_name(1, None), "00000000");
    }

    fn big_snapshot() -> NodeSnapshot {
        let job = |i: usize| JobSummary {
            id: format!("{i:016x}"),
            name: "n".repeat(80),
            role: JobRole::Home,
            phase: JobPhase::Running,
            workers_joined: 1,
            workers_needed: 1,
            home: "h".repeat(52),
            strategy: "spread".into(),
            flood_radius: 1,
            age_secs: 1,
            pending_reason: Some("r".repeat(200)),
        };
        NodeSnapshot {
            overview: NodeOverview {
                home_jobs: (0..5000).map(|i| format!("{i:016x}")).collect(),
                ..NodeOverview::default()
            },
            peers: (0..1000)
                .map(|i| PeerInfo {
                    peer_id: format!("{i:052}"),
                    name: None,
                    rtt_ms: Some(1.5),
                    link: LinkKind::Near,
                    connected: true,
                    coordinates: None,
                })
                .collect(),
            jobs: (0..5000).map(job).collect(),
            pending: Vec::new(),
            counters: Counters::default(),
        }
    }

    #[test]
    fn answers_are_cut_to_the_reply_bound() {
        let mut snap = big_snapshot();
        assert!(encode(&snap).len() > MAX_REPLY_BYTES);
        fit_snapshot(&mut snap, MAX_REPLY_BYTES);
        assert!(encode(&snap).len() <= MAX_REPLY_BYTES);
        assert!(!snap.jobs.is_empty() && !snap.peers.is_empty());

        let mut job = JobDetail {
            summary: big_snapshot().jobs.remove(0),
            workers: Vec::new(),
            log_tail: (0..MAX_LOG_LINES)
                .map(|i| LogLine {
                    at_secs: i as f64,
                    worker: Some(0),
                    text: "y".repeat(MAX_LOG_LINE_BYTES),
                })
                .collect(),
        };
        fit_job(&mut job, 64 * 1024);
        assert!(encode(&job).len() <= 64 * 1024);
        // The newest lines stay.
        assert_eq!(
            job.log_tail.last().unwrap().at_secs,
            (MAX_LOG_LINES - 1) as f64
        );
    }

    #[test]
    fn diffs_name_the_pages_that_changed() {
        let entry = |id: &str, phase: JobPhase| JobEntry {
            summary: JobSummary {
                id: id.into(),
                name: id.into(),
                role: JobRole::Home,
                phase,
                workers_joined: 0,
                workers_needed: 1,
                home: "me".into(),
                strategy: "spread".into(),
                flood_radius: 0,
                age_secs: 0,
                pending_reason: None,
            },
            since_ms: 1,
            workers: Vec::new(),
        };
        let old = LoopView {
            jobs: vec![entry("a", JobPhase::Running)],
            ..LoopView::default()
        };
        assert!(diff(&old, &old).is_empty());
        let mut new = old.clone();
        new.jobs[0].workers.push(WorkerInfo {
            node: "n".into(),
            index: 0,
            state: WorkerState::Running,
            exit_code: None,
            ended: None,
        });
        assert_eq!(
            diff(&old, &new),
            BTreeSet::from([ChangeKey::Job("a".into())])
        );
        new.jobs.push(entry("b", JobPhase::Scheduling));
        new.workers_running = 1;
        assert_eq!(
            diff(&old, &new),
            BTreeSet::from([ChangeKey::Node, ChangeKey::Jobs, ChangeKey::Job("a".into())])
        );
    }
}

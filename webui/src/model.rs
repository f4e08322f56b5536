//! The data the pages show: plain serde structs that the node fills in.
//!
//! Every page, every `/api/...` route and `/metrics` is rendered from these
//! structs only, so the node decides what it shows by what it puts in them,
//! and the JSON API is exactly these structs serialised. Durations are plain
//! numbers with the unit in the field name (`_secs`, `_ms`) so the JSON reads
//! well. Identifiers are strings (a libp2p peer id in its base58 text form, a
//! job id as the node prints it): this crate does not depend on libp2p or on
//! the core.
//!
//! Every string in here may have come from the network or from a job (names,
//! log lines, reasons): the pages escape all of them.

use serde::{Deserialize, Serialize};

/// Resources as the node counts them: offered to the grid, or in use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// CPU cores.
    pub cores: u32,
    /// Memory, in bytes.
    pub memory_bytes: u64,
    /// Disk, in bytes.
    pub disk_bytes: u64,
}

/// The overview page: who this node is and what it does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeOverview {
    /// The node's peer id.
    pub node_id: String,
    /// The node's name, as its operator configured it.
    pub name: String,
    /// The `zorilla-node` version.
    pub version: String,
    /// Seconds since the node started.
    pub uptime_secs: u64,
    /// The name of the grid (network) the node belongs to.
    pub network: String,
    /// The addresses the node listens on (multiaddrs as text).
    pub listen_addresses: Vec<String>,
    /// What the node offers to the grid.
    pub offered: Resources,
    /// How fast a core of the node is (its `cpu_speed`; 1000 is the
    /// reference), as its offers tell homes: among equally near offers a
    /// home prefers idle, then faster nodes.
    #[serde(default = "reference_speed")]
    pub cpu_speed: u32,
    /// Where the node's own figure came from ("configured (cpu_speed)",
    /// "measured at this start", ...); on its own page only, not in the
    /// views peers ask for (nor in their bytes when absent, which stay
    /// those of the model before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_speed_source: Option<String>,
    /// What of that is in use by workers now.
    pub in_use: Resources,
    /// Workers running on this node now, for any job.
    pub workers_running: u32,
    /// Jobs this node is the home of (their ids), newest first.
    pub home_jobs: Vec<String>,
    /// What keeps the node from taking jobs now, in one sentence (its disk
    /// cannot be written), if anything.
    #[serde(default)]
    pub problem: Option<String>,
    /// The node's own addresses (listened on, or seen by peers) with what
    /// it believes of each. Shown for this node only: a remote view leaves
    /// it empty, and empty it is left out (so that the model still encodes
    /// as the remote view's wire type does).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<AddressInfo>,
    /// The node's network coordinate and how sure it is of it. Shown for
    /// this node only, like `addresses`: a remote view has none, and none
    /// is left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
    /// Who may join the node's grid. Shown for this node only, like
    /// `addresses`: a remote view has none, and none is left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid: Option<GridAccess>,
    /// The homes whose waiting jobs this node serves first for the favours
    /// their nodes did its own (its Network of Favors balances), largest
    /// first, at most [`MAX_CREDITORS`]. Shown for this node only, like
    /// `addresses`: a remote view has none, and none is left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub creditors: Vec<Creditor>,
    /// The nodes this node's jobs avoid: each gave results that a majority
    /// of a replicated job's runs disagreed with (see `zorilla_core::runs`),
    /// in peer id order, at most [`MAX_AVOIDED_SHOWN`]. Shown for this node
    /// only, like `addresses`: a remote view has none, and none is left
    /// out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub avoided: Vec<String>,
}

/// The most avoided nodes an overview lists.
pub const MAX_AVOIDED_SHOWN: usize = 64;

/// The most creditors an overview lists.
pub const MAX_CREDITORS: usize = 16;

/// A node that did this node more favours than it got: the core time its
/// workers ran for the jobs homed here (in this machine's core seconds:
/// scaled by the two nodes' core speeds) beyond what this node ran for
/// the jobs homed there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Creditor {
    /// The node's peer id.
    pub node_id: String,
    /// The balance, in this machine's core seconds.
    pub balance_core_secs: u64,
}

/// Who may join a node's grid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GridAccess {
    /// An open grid: anyone who can reach a node may join.
    Open,
    /// A closed grid: only nodes with a credential of its key.
    Closed {
        /// The grid key's fingerprint.
        fingerprint: String,
        /// When this node's credential expires, Unix seconds.
        expires_unix: u64,
    },
}

/// A node's network coordinate: the distance between two nodes'
/// coordinates estimates the RTT between them (Vivaldi with height).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Position {
    /// `[x, y, height]`, in milliseconds (as [`PeerInfo::coordinates`]).
    pub coordinates: Vec<f64>,
    /// The node's relative error estimate: 0 (sure) to 1 (knows nothing
    /// yet).
    pub error: f64,
}

/// The CPU speed of a node that does not say (1000, the reference).
fn reference_speed() -> u32 {
    1000
}

/// One of the node's own addresses: whether the node believes nodes on
/// other hosts can reach it there, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressInfo {
    /// The address (a multiaddr as text).
    pub address: String,
    /// Whether the node believes nodes on other hosts can reach it there
    /// (and tells them about it).
    pub reachable: bool,
    /// Why, in one sentence: loopback (this machine only), link-local (not
    /// passed on), listening but unconfirmed, confirmed by how many peers,
    /// or observed by peers but not confirmed.
    pub why: String,
}

/// Which kind of overlay link a peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    /// A near neighbour (chosen for low RTT).
    Near,
    /// A far (random, long-range) neighbour.
    Far,
    /// Known, but not a neighbour.
    None,
}

impl LinkKind {
    /// The word the pages and metrics use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Near => "near",
            Self::Far => "far",
            Self::None => "none",
        }
    }
}

/// One peer this node knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// The peer's id.
    pub peer_id: String,
    /// The peer's name, if it told us.
    pub name: Option<String>,
    /// Measured round-trip time, in milliseconds, if measured.
    pub rtt_ms: Option<f64>,
    /// Near, far or no link.
    pub link: LinkKind,
    /// Whether a connection is open now.
    pub connected: bool,
    /// The network coordinates the peer last reported (`[x, y, height]`,
    /// in milliseconds), if it did.
    pub coordinates: Option<Vec<f64>>,
}

impl PeerInfo {
    /// The order peers are shown in: neighbours first (near, then far),
    /// nearest first, then by id.
    pub fn display_order(a: &PeerInfo, b: &PeerInfo) -> std::cmp::Ordering {
        a.link
            .cmp(&b.link)
            .then(
                a.rtt_ms
                    .unwrap_or(f64::MAX)
                    .total_cmp(&b.rtt_ms.unwrap_or(f64::MAX)),
            )
            .then(a.peer_id.cmp(&b.peer_id))
    }
}

/// The scheduling phase of a job (the core's `Phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobPhase {
    /// Looking for workers.
    Scheduling,
    /// Workers are running.
    Running,
    /// Done.
    Completed,
    /// Cancelled by the user.
    Cancelled,
    /// Failed.
    Failed,
}

impl JobPhase {
    /// All phases, in order (for metrics: every phase gets a line, even at 0).
    pub const ALL: [JobPhase; 5] = [
        Self::Scheduling,
        Self::Running,
        Self::Completed,
        Self::Cancelled,
        Self::Failed,
    ];

    /// The word the pages and metrics use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduling => "scheduling",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
        }
    }
}

/// This node's part in a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobRole {
    /// The job was submitted here; this node schedules it.
    Home,
    /// This node runs (or ran) workers of the job.
    Participant,
}

/// One job this node knows, as home or as participant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSummary {
    /// The job's id.
    pub id: String,
    /// The job's name, as its submitter gave it.
    pub name: String,
    /// Home or participant.
    pub role: JobRole,
    /// Scheduling phase.
    pub phase: JobPhase,
    /// Workers that joined so far.
    pub workers_joined: u32,
    /// Workers the job needs.
    pub workers_needed: u32,
    /// The id of the job's home node.
    pub home: String,
    /// The user who owns the job (its id, as `zorilla whoami` prints it),
    /// if it has one: anybody may see whose a job is (issue 28).
    #[serde(default)]
    pub owner: Option<String>,
    /// The scheduling strategy, in words (for example `flood` or `latency 20 ms`).
    pub strategy: String,
    /// Radius (TTL, in hops) of the job's last flood.
    pub flood_radius: u8,
    /// Seconds since the job was submitted.
    pub age_secs: u64,
    /// For a job that waits: why, in one sentence.
    pub pending_reason: Option<String>,
}

/// The state of one worker of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    /// Granted, not yet started.
    Starting,
    /// Running.
    Running,
    /// Exited with status 0.
    Exited,
    /// Exited with a non-zero status, trapped or was killed.
    Failed,
    /// Its node is unreachable.
    Lost,
}

impl WorkerState {
    /// The word the pages use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Exited => "exited",
            Self::Failed => "failed",
            Self::Lost => "lost",
        }
    }
}

/// One worker of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// The node the worker runs on.
    pub node: String,
    /// The worker's index within the job.
    pub index: u32,
    /// Its state.
    pub state: WorkerState,
    /// Its exit status, once it ended.
    pub exit_code: Option<i32>,
    /// How it ended, as a sentence about it ("used its CPU-time limit of
    /// 60 s"), once it ended.
    #[serde(default)]
    pub ended: Option<String>,
}

/// One line of a job's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLine {
    /// Seconds since the job was submitted.
    pub at_secs: f64,
    /// The worker index, or `None` for the home's own messages.
    pub worker: Option<u32>,
    /// The text (one line, without its newline).
    pub text: String,
}

/// The job page: a job, its workers per node, and the tail of its log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDetail {
    /// The job.
    pub summary: JobSummary,
    /// Its workers, on whichever nodes they run.
    pub workers: Vec<WorkerInfo>,
    /// The last lines of its log, oldest first. The web interface shows at
    /// most [`crate::MAX_LOG_LINES`] of them, each cut to
    /// [`crate::MAX_LOG_LINE_BYTES`].
    pub log_tail: Vec<LogLine>,
}

/// An advert this node holds: a job looking for workers that this node may
/// still join.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingAdvert {
    /// The job's id.
    pub job_id: String,
    /// The job's name.
    pub job_name: String,
    /// The job's home node.
    pub home: String,
    /// Workers the advert still asks for.
    pub workers_wanted: u32,
    /// Seconds until the advert expires here.
    pub expires_in_secs: u64,
}

/// Counters the node keeps, exported at `/metrics` (all monotonic since start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Floods this node sent as a home.
    pub floods_sent: u64,
    /// Floods this node forwarded for others.
    pub floods_forwarded: u64,
    /// Overlay messages sent.
    pub messages_sent: u64,
    /// Overlay messages received.
    pub messages_received: u64,
    /// Workers started on this node.
    pub workers_started: u64,
}

/// Everything one node shows at once: what a remote view fetches from a peer,
/// and what `/api/snapshot` returns. Job details are fetched one at a time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSnapshot {
    /// The overview.
    pub overview: NodeOverview,
    /// The peers.
    pub peers: Vec<PeerInfo>,
    /// The jobs.
    pub jobs: Vec<JobSummary>,
    /// The pending adverts.
    pub pending: Vec<PendingAdvert>,
    /// The counters.
    pub counters: Counters,
}

/// A job with workers on a node, as that node says in its [`NodeSummary`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeJob {
    /// The job's id.
    pub id: String,
    /// The job's name.
    pub name: String,
    /// The job's home node.
    pub home: String,
    /// Its workers (ranks) running or starting on the node.
    pub ranks: u32,
}

/// What a node says about itself for the grid view: who it is, its cores
/// and the jobs it runs workers of. Small on purpose: a node asks many
/// peers for it at once (see [`crate::grid`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSummary {
    /// The node's name.
    pub name: String,
    /// The site its operator gave it (`site` in its configuration), if any.
    pub site: Option<String>,
    /// Cores it offers to the grid.
    pub offered_cores: u32,
    /// Of those, cores its workers use now.
    pub used_cores: u32,
    /// Workers running on it now.
    pub workers_running: u32,
    /// The jobs it runs workers of now.
    pub jobs: Vec<NodeJob>,
}

impl NodeSummary {
    /// Cores offered and not in use.
    pub fn free_cores(&self) -> u32 {
        self.offered_cores.saturating_sub(self.used_cores)
    }
}

/// How the grid view groups nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Grouping {
    /// By the site each node says it is at.
    Site,
    /// By RTT from this node, in classes (below 1 ms, 1-10, 10-50, over 50).
    Distance,
}

/// One node of the grid view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GridNode {
    /// The node's peer id.
    pub node_id: String,
    /// Whether it is the node showing the view.
    pub this_node: bool,
    /// The RTT this node measured to it, ms (`None` for this node itself,
    /// or if not measured).
    pub rtt_ms: Option<f64>,
    /// What it said about itself, if it answered.
    pub summary: Option<NodeSummary>,
    /// Why it is shown without a summary: it did not answer in time, could
    /// not be reached, or was not asked (more known peers than the view
    /// asks).
    pub no_answer: Option<String>,
    /// With a job shown: how many of its workers are (or were) on this node.
    pub job_ranks: u32,
    /// With a job shown: whether this node is the job's home.
    pub job_home: bool,
}

/// A group of the grid view: a site, or a distance class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GridGroup {
    /// The site's name or the distance class, as shown.
    pub label: String,
    /// Its nodes, nearest first.
    pub nodes: Vec<GridNode>,
}

/// The job whose placement the grid view draws.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GridJob {
    /// The job's id.
    pub id: String,
    /// Its name, if known.
    pub name: String,
    /// Its home node, if known.
    pub home: Option<String>,
    /// Its workers on the nodes of the view.
    pub ranks: u32,
    /// On how many nodes.
    pub nodes: u32,
    /// Where the placement comes from, in words.
    pub source: String,
}

/// The grid as this node sees it: the nodes it knows, grouped, each with
/// what it said about itself (`/grid`, `/api/grid`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GridView {
    /// By site or by distance.
    pub grouped_by: Grouping,
    /// The groups, this node's first.
    pub groups: Vec<GridGroup>,
    /// Peers this node knows.
    pub known_peers: u32,
    /// Of those, how many the view asks at most (the node's
    /// `grid_view_peers`).
    pub limit: u32,
    /// Peers asked for this view (their answers may be a few seconds old:
    /// answers are kept for [`crate::grid::GridSettings::fresh_for`]).
    pub asked: u32,
    /// Peers that answered.
    pub answered: u32,
    /// The job shown, with `?job=ID`.
    pub job: Option<GridJob>,
}

//! The status page's remote view as nodes exchange it ([`super::PeerReply::Status`]
//! and [`super::PeerReply::StatusJob`]): the wire's own types, so that the
//! page's model (`zorilla_webui::model`) can change without changing what
//! nodes say to each other. The node converts between the two in one place
//! (`status::wire_view`).
//!
//! They encode as the model's types did before the wire had its own (the
//! same fields under the same names, in the same order), so nodes of both
//! versions read each other's answers.
//!
//! Every list and text has a documented maximum: the answering node cuts
//! its view to them, and the asking node refuses an answer beyond them
//! (`validate::remote_view`, `validate::remote_job`) before showing it.
//! Texts are whatever the answering node says (names, reasons, log lines):
//! the pages escape them.

use serde::{Deserialize, Serialize};

/// The most jobs a view lists (and home jobs an overview names).
pub(crate) const MAX_JOBS: usize = 500;
/// The most peers a view lists.
pub(crate) const MAX_PEERS: usize = 1000;
/// The most pending adverts a view lists.
pub(crate) const MAX_PENDING: usize = 1024;
/// The most listen addresses an overview names.
pub(crate) const MAX_LISTEN_ADDRESSES: usize = 64;
/// The most network coordinates of a peer.
pub(crate) const MAX_COORDINATES: usize = 16;
/// The most workers of a job page ([`zorilla_core::limits::MAX_WORKERS`]).
pub(crate) const MAX_WORKERS: usize = zorilla_core::limits::MAX_WORKERS as usize;
/// The most log lines of a job page.
pub(crate) const MAX_LOG_LINES: usize = 1000;
/// The longest text (a name, an id, a reason, a log line), in bytes.
pub(crate) const MAX_TEXT_BYTES: usize = 4096;

/// Resources offered or in use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Resources {
    pub(crate) cores: u32,
    pub(crate) memory_bytes: u64,
    pub(crate) disk_bytes: u64,
}

/// Who the node is and what it does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Overview {
    pub(crate) node_id: String,
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) uptime_secs: u64,
    pub(crate) network: String,
    /// At most [`MAX_LISTEN_ADDRESSES`].
    pub(crate) listen_addresses: Vec<String>,
    pub(crate) offered: Resources,
    /// At most [`limits::MAX_SPEED`](zorilla_core::limits::MAX_SPEED); a
    /// node of an earlier version says none (the reference).
    #[serde(default = "reference_speed")]
    pub(crate) cpu_speed: u32,
    pub(crate) in_use: Resources,
    pub(crate) workers_running: u32,
    /// At most [`MAX_JOBS`].
    pub(crate) home_jobs: Vec<String>,
    #[serde(default)]
    pub(crate) problem: Option<String>,
}

fn reference_speed() -> u32 {
    zorilla_core::resources::REFERENCE_SPEED
}

/// Which kind of overlay link a peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Link {
    Near,
    Far,
    None,
}

/// A peer the node knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Peer {
    pub(crate) peer_id: String,
    pub(crate) name: Option<String>,
    pub(crate) rtt_ms: Option<f64>,
    pub(crate) link: Link,
    pub(crate) connected: bool,
    /// At most [`MAX_COORDINATES`].
    pub(crate) coordinates: Option<Vec<f64>>,
}

/// A job's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Phase {
    Scheduling,
    Running,
    Completed,
    Cancelled,
    Failed,
}

/// The node's part in a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    Home,
    Participant,
}

/// A job the node knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JobSummary {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) role: Role,
    pub(crate) phase: Phase,
    pub(crate) workers_joined: u32,
    pub(crate) workers_needed: u32,
    pub(crate) home: String,
    #[serde(default)]
    pub(crate) owner: Option<String>,
    pub(crate) strategy: String,
    pub(crate) flood_radius: u8,
    pub(crate) age_secs: u64,
    pub(crate) pending_reason: Option<String>,
}

/// The state of a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WorkerState {
    Starting,
    Running,
    Exited,
    Failed,
    Lost,
}

/// A worker of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Worker {
    pub(crate) node: String,
    pub(crate) index: u32,
    pub(crate) state: WorkerState,
    pub(crate) exit_code: Option<i32>,
    #[serde(default)]
    pub(crate) ended: Option<String>,
}

/// A line of a job's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LogLine {
    pub(crate) at_secs: f64,
    pub(crate) worker: Option<u32>,
    pub(crate) text: String,
}

/// A job page: the job, its workers, the tail of its log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JobDetail {
    pub(crate) summary: JobSummary,
    /// At most [`MAX_WORKERS`].
    pub(crate) workers: Vec<Worker>,
    /// At most [`MAX_LOG_LINES`], oldest first.
    pub(crate) log_tail: Vec<LogLine>,
}

/// An advert the node holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Advert {
    pub(crate) job_id: String,
    pub(crate) job_name: String,
    pub(crate) home: String,
    pub(crate) workers_wanted: u32,
    pub(crate) expires_in_secs: u64,
}

/// The node's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Counters {
    pub(crate) floods_sent: u64,
    pub(crate) floods_forwarded: u64,
    pub(crate) messages_sent: u64,
    pub(crate) messages_received: u64,
    pub(crate) workers_started: u64,
}

/// Everything a node shows at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Snapshot {
    pub(crate) overview: Overview,
    /// At most [`MAX_PEERS`].
    pub(crate) peers: Vec<Peer>,
    /// At most [`MAX_JOBS`].
    pub(crate) jobs: Vec<JobSummary>,
    /// At most [`MAX_PENDING`].
    pub(crate) pending: Vec<Advert>,
    pub(crate) counters: Counters,
}

/// The most jobs a [`Summary`] lists (a node runs workers of at most its
/// owner's `max_jobs` jobs at once, 16 by default).
pub(crate) const MAX_SUMMARY_JOBS: usize = 64;
/// The longest name or site in a [`Summary`], in bytes.
pub(crate) const MAX_SUMMARY_TEXT_BYTES: usize = 256;
/// The longest id in a [`Summary`] (a job's or a home's), in bytes.
pub(crate) const MAX_SUMMARY_ID_BYTES: usize = 64;

/// A job with workers on the answering node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SummaryJob {
    /// At most [`MAX_SUMMARY_ID_BYTES`].
    pub(crate) id: String,
    /// At most [`MAX_SUMMARY_TEXT_BYTES`].
    pub(crate) name: String,
    /// At most [`MAX_SUMMARY_ID_BYTES`].
    pub(crate) home: String,
    pub(crate) ranks: u32,
}

/// What a node says about itself for a peer's grid view
/// ([`super::PeerReply::Summary`]): a node answers for itself only, so
/// that a view asking dozens of peers costs each a few hundred bytes
/// (at most about 26 KiB by the maxima), not a whole [`Snapshot`] (up to
/// 768 KiB: every peer, job and advert the node knows).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Summary {
    /// At most [`MAX_SUMMARY_TEXT_BYTES`].
    pub(crate) name: String,
    /// At most [`MAX_SUMMARY_TEXT_BYTES`].
    pub(crate) site: Option<String>,
    pub(crate) offered_cores: u32,
    pub(crate) used_cores: u32,
    pub(crate) workers_running: u32,
    /// At most [`MAX_SUMMARY_JOBS`].
    pub(crate) jobs: Vec<SummaryJob>,
}

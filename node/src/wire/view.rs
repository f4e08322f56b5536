//! The status page's remote view as nodes exchange it (`PeerReply::Status`
//! and `PeerReply::StatusJob`): the wire's own types, so that the
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
//! ([`Snapshot::check`], [`JobDetail::check`], [`Summary::check`]) before
//! showing it.
//! Texts are whatever the answering node says (names, reasons, log lines):
//! the pages escape them.

use serde::{Deserialize, Serialize};
use zorilla_core::limits;

use crate::validate::Invalid;

/// A request for the status page's remote view of the receiver.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum ViewRpc {
    /// Everything the receiver shows. Answered with `PeerReply::Status`.
    Node,
    /// One job (its id as the pages print it, at most
    /// [`MAX_JOB_NAME_BYTES`]). Answered with `PeerReply::StatusJob`.
    Job { job: String },
    /// The grid view: what the receiver says about itself. Answered with
    /// `PeerReply::Summary`.
    Summary,
}

impl ViewRpc {
    /// Checks the job name's length.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        if let ViewRpc::Job { job } = self {
            limits::at_most("job name length in bytes", job.len(), MAX_JOB_NAME_BYTES)?;
        }
        Ok(())
    }
}

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
/// (`PeerReply::Summary`): a node answers for itself only, so
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

/// The longest job id a remote status view may name: 64 bytes (ids print
/// as 16 hex digits).
pub(crate) const MAX_JOB_NAME_BYTES: usize = 64;

/// Checks that a text of a remote view is at most [`MAX_TEXT_BYTES`].
fn text(field: &'static str, text: &str) -> Result<(), Invalid> {
    Ok(limits::at_most(field, text.len(), MAX_TEXT_BYTES)?)
}

impl Snapshot {
    /// Checks a peer's answer to `ViewRpc::Node` before it is shown:
    /// every list and text within the maxima of this module.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        let o = &self.overview;
        for (field, value) in [
            ("node id length in bytes", &o.node_id),
            ("node name length in bytes", &o.name),
            ("version length in bytes", &o.version),
            ("network name length in bytes", &o.network),
        ] {
            text(field, value)?;
        }
        text(
            "problem length in bytes",
            o.problem.as_deref().unwrap_or(""),
        )?;
        limits::at_most(
            "listen addresses",
            o.listen_addresses.len(),
            MAX_LISTEN_ADDRESSES,
        )?;
        for a in &o.listen_addresses {
            text("listen address length in bytes", a)?;
        }
        limits::one_to("CPU speed", o.cpu_speed, limits::MAX_SPEED)?;
        limits::at_most("home jobs", o.home_jobs.len(), MAX_JOBS)?;
        for j in &o.home_jobs {
            text("job id length in bytes", j)?;
        }
        limits::at_most("peers", self.peers.len(), MAX_PEERS)?;
        for p in &self.peers {
            text("peer id length in bytes", &p.peer_id)?;
            text("peer name length in bytes", p.name.as_deref().unwrap_or(""))?;
            let coordinates = p.coordinates.as_ref().map_or(0, Vec::len);
            limits::at_most("peer coordinates", coordinates, MAX_COORDINATES)?;
        }
        limits::at_most("jobs", self.jobs.len(), MAX_JOBS)?;
        for j in &self.jobs {
            job_summary(j)?;
        }
        limits::at_most("pending adverts", self.pending.len(), MAX_PENDING)?;
        for a in &self.pending {
            text("job id length in bytes", &a.job_id)?;
            text("job name length in bytes", &a.job_name)?;
            text("home id length in bytes", &a.home)?;
        }
        Ok(())
    }
}

fn job_summary(j: &JobSummary) -> Result<(), Invalid> {
    text("job id length in bytes", &j.id)?;
    text("job name length in bytes", &j.name)?;
    text("home id length in bytes", &j.home)?;
    text("owner id length in bytes", j.owner.as_deref().unwrap_or(""))?;
    text("strategy length in bytes", &j.strategy)?;
    text(
        "pending reason length in bytes",
        j.pending_reason.as_deref().unwrap_or(""),
    )
}

impl JobDetail {
    /// Checks a peer's answer to `ViewRpc::Job` before it is shown:
    /// every list and text within the maxima of this module.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        job_summary(&self.summary)?;
        limits::at_most("workers", self.workers.len(), MAX_WORKERS)?;
        for w in &self.workers {
            text("worker node length in bytes", &w.node)?;
            text(
                "worker end length in bytes",
                w.ended.as_deref().unwrap_or(""),
            )?;
        }
        limits::at_most("log lines", self.log_tail.len(), MAX_LOG_LINES)?;
        for l in &self.log_tail {
            text("log line length in bytes", &l.text)?;
        }
        Ok(())
    }
}

impl Summary {
    /// Checks a peer's answer to `ViewRpc::Summary` before it is shown:
    /// every list and text within the maxima of [`Summary`], and no more
    /// cores in use than offered.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        let short = |field: &'static str, text: &str| {
            limits::at_most(field, text.len(), MAX_SUMMARY_TEXT_BYTES)
        };
        let id = |field: &'static str, text: &str| {
            limits::at_most(field, text.len(), MAX_SUMMARY_ID_BYTES)
        };
        short("node name length in bytes", &self.name)?;
        short("site length in bytes", self.site.as_deref().unwrap_or(""))?;
        limits::at_most(
            "cores in use",
            self.used_cores as usize,
            self.offered_cores as usize,
        )?;
        limits::at_most("jobs", self.jobs.len(), MAX_SUMMARY_JOBS)?;
        for j in &self.jobs {
            id("job id length in bytes", &j.id)?;
            short("job name length in bytes", &j.name)?;
            id("home id length in bytes", &j.home)?;
            limits::at_most("workers of a job", j.ranks as usize, MAX_WORKERS)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_summary_beyond_its_maxima_is_refused() {
        let job = |ranks: u32| SummaryJob {
            id: "0123456789abcdef".into(),
            name: "nqueens 16".into(),
            home: "12D3KooWHome".into(),
            ranks,
        };
        let ok = Summary {
            name: "n".repeat(MAX_SUMMARY_TEXT_BYTES),
            site: Some("amsterdam".into()),
            offered_cores: 4,
            used_cores: 4,
            workers_running: 4,
            jobs: vec![job(4); MAX_SUMMARY_JOBS],
        };
        assert_eq!(ok.check(), Ok(()));
        // At its maxima, a summary is a small answer.
        assert!(super::super::encode(&ok).len() < 32 * 1024);
        let bad = [
            Summary {
                name: "n".repeat(MAX_SUMMARY_TEXT_BYTES + 1),
                ..ok.clone()
            },
            Summary {
                site: Some("s".repeat(MAX_SUMMARY_TEXT_BYTES + 1)),
                ..ok.clone()
            },
            Summary {
                used_cores: 5,
                ..ok.clone()
            },
            Summary {
                jobs: vec![job(1); MAX_SUMMARY_JOBS + 1],
                ..ok.clone()
            },
            Summary {
                jobs: vec![job(MAX_WORKERS as u32 + 1)],
                ..ok.clone()
            },
            Summary {
                jobs: vec![SummaryJob {
                    id: "i".repeat(MAX_SUMMARY_ID_BYTES + 1),
                    ..job(1)
                }],
                ..ok.clone()
            },
        ];
        for s in bad {
            assert!(s.check().is_err(), "{s:?}");
        }
    }
}

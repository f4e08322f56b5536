//! Remote views, both sides: asking a peer for its status page's data
//! ([`remote_view`], [`remote_job`], [`remote_summary`], for
//! [`super::NodeStatus`]'s `remote`, `remote_job` and `remote_summary`),
//! and answering a peer's request ([`answer_from`]).
//! Answers travel as the wire's own types ([`crate::wire::view`]; the
//! conversions are in [`super::wire_view`]), cut to [`MAX_REPLY_BYTES`]
//! when sent and checked against the wire's maxima when received.

use zorilla_overlay::{OverlayHandle, PeerId};
use zorilla_webui::model::{JobDetail, NodeSnapshot, NodeSummary};
use zorilla_webui::{RemoteError, StatusSource};

use crate::validate;
use crate::wire::view::{self, ViewRpc};
use crate::wire::{PeerReply, PeerRpc, decode, encode};

/// How long a remote view waits for the peer (less than the web
/// interface's own bound, so that the page says why).
pub(crate) const REMOTE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(8);
/// The largest remote-view answer, encoded: well under the overlay's 1 MiB
/// frame cap.
pub(crate) const MAX_REPLY_BYTES: usize = 768 * 1024;

/// `peer`'s snapshot, asked through the overlay (`known`: whether the
/// overlay knows the peer, which tells an unknown peer from an unreachable
/// one).
pub(super) async fn remote_view(
    overlay: &OverlayHandle,
    peer: PeerId,
    known: bool,
) -> Result<NodeSnapshot, RemoteError> {
    match ask(overlay, peer, ViewRpc::Node, known).await? {
        PeerReply::Status(snap) => {
            snap.check().map_err(refused)?;
            Ok(NodeSnapshot::from(*snap))
        }
        other => Err(unexpected(&other)),
    }
}

/// What `peer` says about itself for the grid view, asked through the
/// overlay (the grid view bounds how many peers, how long and how often).
pub(super) async fn remote_summary(
    overlay: &OverlayHandle,
    peer: PeerId,
    known: bool,
) -> Result<NodeSummary, RemoteError> {
    match ask(overlay, peer, ViewRpc::Summary, known).await? {
        PeerReply::Summary(summary) => {
            summary.check().map_err(refused)?;
            Ok(NodeSummary::from(*summary))
        }
        other => Err(unexpected(&other)),
    }
}

/// `peer`'s page of `job` (`None`: it does not know the job), asked
/// through the overlay.
pub(super) async fn remote_job(
    overlay: &OverlayHandle,
    peer: PeerId,
    job: String,
    known: bool,
) -> Result<Option<JobDetail>, RemoteError> {
    match ask(overlay, peer, ViewRpc::Job { job }, known).await? {
        PeerReply::StatusJob(None) => Ok(None),
        PeerReply::StatusJob(Some(job)) => {
            job.check().map_err(refused)?;
            Ok(Some(JobDetail::from(*job)))
        }
        other => Err(unexpected(&other)),
    }
}

fn refused(why: validate::Invalid) -> RemoteError {
    RemoteError::Unreachable(format!("the peer's answer is refused: {why}"))
}

/// Sends a view request to `peer` and waits at most [`REMOTE_TIMEOUT`].
async fn ask(
    overlay: &OverlayHandle,
    peer: PeerId,
    rpc: ViewRpc,
    known: bool,
) -> Result<PeerReply, RemoteError> {
    let rpc = encode(&PeerRpc::View(rpc));
    let bytes = match tokio::time::timeout(REMOTE_TIMEOUT, overlay.request(peer, rpc)).await {
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
        Ok(PeerReply::Refused(e)) => Err(RemoteError::Unreachable(format!("the peer said: {e}"))),
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
        PeerReply::Summary(_) => "a node summary",
        PeerReply::Ranks { .. } => "a list of ranks",
        PeerReply::Checkpoint(_) => "a checkpoint answer",
        PeerReply::Home(_) => "a job's home",
        PeerReply::Client(_) => "a client answer",
        PeerReply::Refused(_) => "a refusal",
    };
    RemoteError::Unreachable(format!("the peer answered with {what}"))
}

/// A peer's remote-view or grid-view request, answered from `status`, cut
/// to [`MAX_REPLY_BYTES`] (a summary is cut to the wire's maxima, far
/// below).
///
/// Another node is not its jobs' owners (issue 28): of a job it gets what
/// anybody may see, that the job exists (its id, phase, home and size),
/// never its arguments (which a job's name shows), why it waits, where its
/// workers run or the tail of its log.
pub(super) fn answer_from(status: &impl StatusSource, asked: &ViewRpc) -> PeerReply {
    match asked {
        ViewRpc::Node => {
            let mut snap = view::Snapshot::from(zorilla_webui::snapshot(status));
            snap.jobs.iter_mut().for_each(public_job);
            fit_snapshot(&mut snap, MAX_REPLY_BYTES);
            PeerReply::Status(Box::new(snap))
        }
        ViewRpc::Job { job } => PeerReply::StatusJob(status.job(job).map(|detail| {
            let mut detail = view::JobDetail::from(detail);
            public_job(&mut detail.summary);
            detail.workers.clear();
            detail.log_tail.clear();
            fit_job(&mut detail, MAX_REPLY_BYTES);
            Box::new(detail)
        })),
        ViewRpc::Summary => {
            let mut summary = view::Summary::from(status.summary());
            for job in &mut summary.jobs {
                job.name.clone_from(&job.id);
            }
            PeerReply::Summary(Box::new(summary))
        }
    }
}

/// What anybody may see of a job in another node's view: its name (which
/// carries its arguments) becomes its id, and why it waits goes.
fn public_job(job: &mut view::JobSummary) {
    job.name.clone_from(&job.id);
    job.pending_reason = None;
}

/// Halves the longest list of `snap` until it encodes to at most `max`
/// bytes (the overview's scalars and the counters always stay).
fn fit_snapshot(snap: &mut view::Snapshot, max: usize) {
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
fn fit_job(job: &mut view::JobDetail, max: usize) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use zorilla_webui::model::{
        Counters, JobPhase, JobRole, JobSummary, LinkKind, LogLine, NodeOverview, PeerInfo,
    };
    use zorilla_webui::{MAX_LOG_LINE_BYTES, MAX_LOG_LINES};

    fn big_snapshot() -> NodeSnapshot {
        let job = |i: usize| JobSummary {
            id: format!("{i:016x}"),
            name: "n".repeat(80),
            role: JobRole::Home,
            phase: JobPhase::Running,
            workers_joined: 1,
            workers_needed: 1,
            home: "h".repeat(52),
            owner: None,
            strategy: "spread".into(),
            flood_radius: 1,
            age_secs: 1,
            pending_reason: Some("r".repeat(2000)),
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
        // Cut to the wire's maxima, still over the reply bound.
        let mut snap = view::Snapshot::from(big_snapshot());
        assert!(encode(&snap).len() > MAX_REPLY_BYTES);
        fit_snapshot(&mut snap, MAX_REPLY_BYTES);
        assert!(encode(&snap).len() <= MAX_REPLY_BYTES);
        assert!(!snap.jobs.is_empty() && !snap.peers.is_empty());

        let mut job = view::JobDetail::from(JobDetail {
            summary: big_snapshot().jobs.remove(0),
            workers: Vec::new(),
            log_tail: (0..MAX_LOG_LINES)
                .map(|i| LogLine {
                    at_secs: i as f64,
                    worker: Some(0),
                    text: "y".repeat(MAX_LOG_LINE_BYTES),
                })
                .collect(),
        });
        fit_job(&mut job, 64 * 1024);
        assert!(encode(&job).len() <= 64 * 1024);
        // The newest lines stay.
        assert_eq!(
            job.log_tail.last().unwrap().at_secs,
            (MAX_LOG_LINES - 1) as f64
        );
    }
}

//! Conversion of the node's own types (the store's job records, the
//! client protocol's phases and log chunks, the core's resources) to the
//! status page's model, and the bounds the pages put on what they show.

use std::collections::BTreeMap;

use zorilla_core::advert::{JobId, Strategy};
use zorilla_core::node::PendingReport;
use zorilla_core::resources::Resources as CoreResources;
use zorilla_overlay::PeerId;
use zorilla_webui::model::{
    JobPhase, JobRole, JobSummary, LogLine, Resources, WorkerInfo, WorkerState,
};
use zorilla_webui::{MAX_LOG_LINE_BYTES, MAX_LOG_LINES};

use super::view::JobEntry;
use crate::protocol::{self, JobRequest};
use crate::store::JobRecord;

/// The longest job name (made from the job's arguments).
pub(super) const MAX_NAME_BYTES: usize = 80;

/// Log chunks (with their arrival times) as lines: a line split over
/// chunks of one rank and stream is joined; a line still open at the end
/// is shown as it is. stderr lines are marked. At most [`MAX_LOG_LINES`],
/// the newest, each cut to [`MAX_LOG_LINE_BYTES`].
pub(super) fn log_lines(chunks: &[(u64, protocol::LogChunk)], since_ms: u64) -> Vec<LogLine> {
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

pub(super) fn cut(mut text: String, max: usize) -> String {
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
pub(super) fn parse_job(id: &str) -> Option<u64> {
    if id.len() != 16 {
        return None;
    }
    u64::from_str_radix(id, 16).ok()
}

/// The job's name on the pages: the start of its id, then its arguments
/// (jobs have no name of their own).
pub(super) fn job_name(job: u64, request: Option<&JobRequest>) -> String {
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

pub(super) fn strategy(request: Option<&JobRequest>) -> String {
    match request.map(|r| r.strategy) {
        Some(Strategy::Spread) => "spread".into(),
        Some(Strategy::Concentrate) => "concentrate".into(),
        None => "unknown".into(),
    }
}

/// The client protocol's phase of a job on the pages (the one place the
/// two meet).
impl From<protocol::JobPhase> for JobPhase {
    fn from(phase: protocol::JobPhase) -> Self {
        match phase {
            protocol::JobPhase::Scheduling => JobPhase::Scheduling,
            protocol::JobPhase::Running => JobPhase::Running,
            protocol::JobPhase::Completed => JobPhase::Completed,
            protocol::JobPhase::Cancelled => JobPhase::Cancelled,
            protocol::JobPhase::Failed => JobPhase::Failed,
        }
    }
}

/// A worker whose end was not reported, by its job's phase.
pub(super) fn state_by_phase(phase: JobPhase) -> WorkerState {
    match phase {
        JobPhase::Scheduling => WorkerState::Starting,
        JobPhase::Running => WorkerState::Running,
        JobPhase::Completed => WorkerState::Exited,
        JobPhase::Cancelled | JobPhase::Failed => WorkerState::Failed,
    }
}

/// A rank's state on the pages, from its status at the home: by its
/// outcome's code (never by its sentence), and while it runs (or for a
/// record stored before codes) by its job's phase.
pub(super) fn rank_state<N>(status: &protocol::RankStatus<N>, job_phase: JobPhase) -> WorkerState {
    use protocol::OutcomeCode as C;
    match status.code {
        None => state_by_phase(job_phase),
        Some(C::Exited) if status.exit_status == Some(0) => WorkerState::Exited,
        Some(C::Lost) => WorkerState::Lost,
        Some(
            C::Exited
            | C::Trapped
            | C::OutOfMemory
            | C::CpuLimit
            | C::TimeLimit
            | C::OutputLimit
            | C::DiskLimit
            | C::ProcessLimit
            | C::NotStarted
            | C::Cancelled
            | C::Stopped
            | C::Disputed,
        ) => WorkerState::Failed,
    }
}

pub(super) fn resources(r: CoreResources) -> Resources {
    const MIB: u64 = 1024 * 1024;
    Resources {
        cores: r.cores,
        memory_bytes: r.memory_mib.saturating_mul(MIB),
        disk_bytes: r.disk_mib.saturating_mul(MIB),
    }
}

pub(super) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "zorilla-node".into())
}

pub(super) fn home_entry(
    me: PeerId,
    report: Option<PendingReport>,
    id: u64,
    record: &JobRecord,
    started_ms: u64,
) -> JobEntry {
    let job_phase = JobPhase::from(record.phase);
    let workers: Vec<WorkerInfo> = record
        .ranks
        .iter()
        .map(|(rank, status)| WorkerInfo {
            node: status.node.to_string(),
            index: *rank,
            state: rank_state(status, job_phase),
            exit_code: status.exit_status,
            ended: status.outcome.clone(),
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
            owner: record.owner.map(|owner| owner.to_string()),
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
pub(super) fn submitted(record: &JobRecord, started_ms: u64) -> u64 {
    if record.submitted_unix == 0 {
        started_ms
    } else {
        record.submitted_unix.saturating_mul(1000)
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
    fn outcomes_become_worker_states_by_their_code() {
        use zorilla_core::liveness::LostCause;
        use zorilla_core::node::{Failure, LostReason, RankOutcome};
        let state = |outcome: RankOutcome| {
            let mut status = protocol::RankStatus::running("n".to_string());
            status.ended(&outcome, &"n");
            (rank_state(&status, JobPhase::Running), status.exit_status)
        };
        assert_eq!(
            state(RankOutcome::Exited(0)),
            (WorkerState::Exited, Some(0))
        );
        assert_eq!(
            state(RankOutcome::Exited(3)),
            (WorkerState::Failed, Some(3))
        );
        assert_eq!(
            state(RankOutcome::Lost(LostReason::Liveness(
                LostCause::Restarted
            ))),
            (WorkerState::Lost, None)
        );
        assert_eq!(state(RankOutcome::Cancelled), (WorkerState::Failed, None));
        assert_eq!(
            state(RankOutcome::Failed(Failure::OutOfMemory { limit_mib: 64 })),
            (WorkerState::Failed, None)
        );
        let running = protocol::RankStatus::running("n".to_string());
        assert_eq!(
            rank_state(&running, JobPhase::Running),
            WorkerState::Running
        );
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
}

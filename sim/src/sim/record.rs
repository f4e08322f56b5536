//! What a run reports: the jobs it was given ([`JobPlan`]), what happened
//! to each ([`JobRecord`]), and the run as a whole ([`RunReport`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use zorilla_core::Time;
use zorilla_core::advert::JobId;
use zorilla_core::node::{JobSpec, Phase};

use super::mode::Mode;

/// A job the workload submits.
#[derive(Debug, Clone)]
pub struct JobPlan {
    /// When.
    pub at: Time,
    /// Submitted to which machine.
    pub home: u32,
    /// The job.
    pub spec: JobSpec,
    /// How long its workers run (`None`: for ever).
    pub duration: Option<Duration>,
}

/// What happened to one job.
#[derive(Debug, Clone)]
pub struct JobRecord {
    /// The job.
    pub id: JobId,
    /// Its home machine (the one in charge now: a takeover moves it).
    pub home: u32,
    /// Workers wanted (the job's `max`).
    pub workers: u32,
    /// Workers it needs to start (its `min`; `workers` for a rigid job).
    pub min_workers: u32,
    /// Its tasks, if it is a job array (`workers` of them run at once;
    /// each task is a rank and ends on its own).
    pub tasks: Option<u32>,
    /// Submission time.
    pub submitted: Time,
    /// When it started (got its `min` workers).
    pub started_at: Option<Time>,
    /// Workers it started with (0 until it started).
    pub started_with: u32,
    /// When it got all its workers.
    pub full_at: Option<Time>,
    /// Workers per machine.
    pub placement: BTreeMap<u32, u32>,
    /// Workers granted while a free worker nearer by more than the
    /// within-site RTT existed.
    pub out_of_order: u32,
    /// Messages sent about this job (flood copies and direct messages).
    pub messages: u64,
    /// How it ended, if it did.
    pub ended: Option<(Phase, String)>,
    /// Ranks its home counted as lost (a node failed or left).
    pub lost_ranks: u32,
    /// Lost ranks its home granted again.
    pub replaced_ranks: u32,
    /// Workers a member stopped for a creditor's job (`Output::Preempted`).
    pub preempted_workers: u32,
    /// Core-seconds those workers had run when stopped (each one-core;
    /// lost unless the job can resume: a replacement starts over).
    pub preempted_work_s: f64,
    /// Replica messages sent about this job (failover).
    pub replica_messages: u64,
    /// Times a copy took the job over from its home (failover).
    pub home_moves: u32,
    /// Workers still running.
    pub(super) running: u32,
    pub(super) duration: Option<Duration>,
    /// Memory each worker needs (MiB).
    pub(super) memory_mib: u64,
    /// When it ended, if it did.
    pub ended_at: Option<Time>,
    /// Ranks granted per machine, as the home announced them (less those
    /// it reported lost).
    pub(super) ranks: BTreeMap<u32, BTreeSet<u32>>,
    /// Workers per machine the home granted in the call being executed,
    /// judged against the oracle once the call's outputs are done.
    pub(super) granting: BTreeMap<u32, u32>,
    /// Ranks that started, per machine (a rank granted and not started
    /// yet has its grant on the way).
    pub(super) started: BTreeMap<u32, BTreeSet<u32>>,
    /// Sum of the judged workers' extra RTT over the oracle (µs): each
    /// grant is judged when the home makes it (`Sim::judge_grant`).
    pub judged_extra_us: f64,
    /// Workers judged: every grant's, replacements included.
    pub judged_workers: u32,
    /// Every worker that started, in start order: where, which rank, when,
    /// and how it ended.
    pub runs: Vec<WorkerRun>,
    /// The runs still open, by machine and rank: their index in `runs`.
    pub(super) open_runs: BTreeMap<(u32, u32), usize>,
    /// Of a run with lying nodes ([`Sim::with_liars`](super::Sim::with_liars)),
    /// every end reported to the home, per rank (an array's task), in
    /// report order: the node and whether it lied.
    pub reports: BTreeMap<u32, Vec<(u32, bool)>>,
    /// The nodes a spot check caught, as the job's end says.
    pub caught: Vec<u32>,
}

/// One worker of a job, from its start to its end.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRun {
    /// The machine it ran on.
    pub node: u32,
    /// Its rank (an array's task).
    pub rank: u32,
    /// When it started.
    pub started: Time,
    /// When it ended and how, if it did before the run's end.
    pub ended: Option<(Time, RunEnd)>,
}

/// How a worker's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// It did all its work.
    Completed,
    /// It was stopped first (cancelled, preempted, its machine lost, or an
    /// orphan of a takeover): a task stopped so runs again elsewhere.
    Stopped,
}

impl WorkerRun {
    /// Core-seconds it held its core between `from` and `to` (a run that
    /// never ended held it until `end`, the run's end).
    pub fn core_s(&self, from: Time, to: Time, end: Time) -> f64 {
        let stop = self.ended.map_or(end, |(at, _)| at).min(to);
        stop.saturating_sub(self.started.max(from)).as_secs_f64()
    }
}

impl JobRecord {
    /// Mean extra RTT per worker over the oracle, in microseconds, once
    /// the job got its workers.
    pub fn extra_rtt_us(&self) -> Option<f64> {
        (self.full_at.is_some() && self.judged_workers > 0)
            .then(|| self.judged_extra_us / f64::from(self.judged_workers))
    }

    /// Turnaround: from submission to the end of a job that completed.
    pub fn turnaround(&self) -> Option<Duration> {
        match (&self.ended, self.ended_at) {
            (Some((Phase::Completed, _)), Some(at)) => Some(at.saturating_sub(self.submitted)),
            _ => None,
        }
    }

    /// Whether the job gets all its workers or none.
    pub fn is_rigid(&self) -> bool {
        self.min_workers == self.workers
    }
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Scenario name.
    pub scenario: String,
    /// Mode.
    pub mode: Mode,
    /// Seed.
    pub seed: u64,
    /// Site names.
    pub sites: Vec<String>,
    /// Every job.
    pub jobs: Vec<JobRecord>,
    /// Messages sent in all.
    pub messages: u64,
    /// Messages sent, by kind.
    pub by_kind: BTreeMap<&'static str, u64>,
    /// Floods started by homes.
    pub floods: u64,
    /// Events processed.
    pub events: u64,
    /// Wall-clock time the run took.
    pub wall: Duration,
    /// Simulated time at the end.
    pub end: Time,
    /// Workers running per site over time: `(time, site, change)`.
    pub timeline: Vec<(Time, usize, i64)>,
    /// Every check of invariants that failed (empty when all held).
    pub violations: Vec<String>,
    /// Our overlay's network coordinates at the end: the median relative
    /// error of the RTTs they estimate (see `Sim::coordinate_error`);
    /// `None` for the paper's overlay.
    pub coordinate_error: Option<f64>,
}

/// What is wrong with a job starting with `workers` workers, if anything:
/// a rigid job starts with all its workers, a malleable one with at least
/// `min` and at most `max`, and the ranks granted are exactly `0..workers`.
pub(super) fn start_violation(record: &JobRecord, workers: u32) -> Option<String> {
    let (min, max) = (record.min_workers, record.workers);
    if record.is_rigid() && workers != max {
        return Some(format!("rigid job of {max} started with {workers} workers"));
    }
    if workers < min || workers > max {
        return Some(format!(
            "malleable job of {min}..={max} started with {workers} workers"
        ));
    }
    let mut ranks: Vec<u32> = record.ranks.values().flatten().copied().collect();
    ranks.sort_unstable();
    if !ranks.iter().copied().eq(0..workers) {
        return Some(format!(
            "started with {workers} workers but ranks {ranks:?} granted, not 0..{workers}"
        ));
    }
    None
}

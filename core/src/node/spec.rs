//! What a node is configured with (its resources, owner limits, schedule)
//! and what a job asks for, with the checks of both.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::advert::{Arch, DeclineReason, JobId, Strategy, WorkKind, WorkerCount};
use crate::allocation::SameDistance;
use crate::limits::{self, LimitError};
use crate::resources::{REFERENCE_SPEED, Resources};
use crate::schedule::ScheduleConfig;

/// What the owner of a node allows (the P2P-MPI paper's owner limits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerLimits<P: Ord> {
    /// The most jobs this node runs workers for at once (J).
    pub max_jobs: u32,
    /// The most workers of one job on this node (P).
    pub max_workers_per_job: u32,
    /// Homes whose jobs this node never runs.
    pub deny: BTreeSet<P>,
    /// Whose jobs this node runs, and how much of it each user may have.
    #[serde(default = "UserPolicy::default")]
    pub users: UserPolicy<P>,
    /// Which native jobs this node runs (none by default).
    #[serde(default = "NativePolicy::default")]
    pub native: NativePolicy<P>,
}

/// Which native jobs a node runs: those of the users its owner lists, built
/// for its architecture, and only if it can sandbox them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NativePolicy<P: Ord> {
    /// The users whose native jobs run here; empty: none.
    pub users: BTreeSet<P>,
    /// The node's architecture.
    pub arch: Option<Arch>,
    /// Whether the node can enforce the kernel sandbox of native workers
    /// (every mechanism and limit); without it, no native job runs here.
    pub sandbox: bool,
}

impl<P: Ord> Default for NativePolicy<P> {
    fn default() -> Self {
        NativePolicy {
            users: BTreeSet::new(),
            arch: None,
            sandbox: false,
        }
    }
}

impl<P: Ord> NativePolicy<P> {
    /// Whether a job of `kind` owned by `owner` may run here; why not.
    pub fn check(&self, kind: WorkKind, owner: Option<&P>) -> Result<(), DeclineReason> {
        let WorkKind::Native(arch) = kind else {
            return Ok(());
        };
        if self.users.is_empty() {
            return Err(DeclineReason::NoNativeJobs);
        }
        if !owner.is_some_and(|o| self.users.contains(o)) {
            return Err(DeclineReason::NativeNotThisUser);
        }
        if self.arch != Some(arch) {
            return Err(DeclineReason::OtherArch);
        }
        if !self.sandbox {
            return Err(DeclineReason::NoNativeSandbox);
        }
        Ok(())
    }
}

/// Whose jobs a node runs (a job's owner is the user who signed its
/// submission; the advert names it, and the driver checks the owner's
/// signature before it starts a worker), and how much of the node each
/// user may have at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserPolicy<P: Ord> {
    /// Only these users' jobs run here; `None`: any member's (and jobs
    /// with no owner).
    pub only: Option<BTreeSet<P>>,
    /// What each user may have here at once, unless `named` says.
    pub each: UserLimits,
    /// The limits of particular users.
    pub named: BTreeMap<P, UserLimits>,
    /// The owner's own users: when jobs wait for this node's cores, theirs
    /// are offered the cores that free up before anyone else's.
    #[serde(default = "BTreeSet::new")]
    pub first: BTreeSet<P>,
}

impl<P: Ord> Default for UserPolicy<P> {
    fn default() -> Self {
        UserPolicy {
            only: None,
            each: UserLimits::default(),
            named: BTreeMap::new(),
            first: BTreeSet::new(),
        }
    }
}

impl<P: Ord> UserPolicy<P> {
    /// Whether a job owned by `owner` may run here at all.
    pub fn allows(&self, owner: Option<&P>) -> bool {
        match (&self.only, owner) {
            (None, _) => true,
            (Some(only), Some(owner)) => only.contains(owner),
            (Some(_), None) => false,
        }
    }

    /// Whether `owner` is one of the owner's own users ([`UserPolicy::first`]).
    pub fn comes_first(&self, owner: Option<&P>) -> bool {
        owner.is_some_and(|o| self.first.contains(o))
    }

    /// What `owner` may have here at once (a job with no owner: `each`).
    pub fn limits_of(&self, owner: Option<&P>) -> UserLimits {
        owner
            .and_then(|o| self.named.get(o))
            .copied()
            .unwrap_or(self.each)
    }
}

/// What one user may have on a node at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserLimits {
    /// Cores of the user's workers (running and offered) together.
    pub max_cores: u32,
    /// The user's jobs with workers (running or offered) here.
    pub max_jobs: u32,
}

impl Default for UserLimits {
    /// No limit beyond the node's own.
    fn default() -> Self {
        UserLimits {
            max_cores: u32::MAX,
            max_jobs: u32::MAX,
        }
    }
}

impl<P: Ord> Default for OwnerLimits<P> {
    fn default() -> Self {
        OwnerLimits {
            max_jobs: 16,
            max_workers_per_job: u32::MAX,
            deny: BTreeSet::new(),
            users: UserPolicy::default(),
            native: NativePolicy::default(),
        }
    }
}

/// Configuration of one node's scheduler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerConfig<P: Ord> {
    /// What this node offers to jobs in all.
    pub resources: Resources,
    /// How fast this node's cores are against the reference machine
    /// ([`REFERENCE_SPEED`]): a benchmark score the driver measures or the
    /// owner configures. Offers carry it, with the cores in all and those
    /// busy, so that homes prefer faster nodes among equally near ones.
    pub speed: u32,
    /// As a home: among offers at the same distance, prefer idle, then
    /// faster, then less loaded nodes ([`SameDistance`]); `None`: nearest
    /// first only, as the paper's scheduler.
    pub prefer: Option<SameDistance>,
    /// The owner's limits.
    pub limits: OwnerLimits<P>,
    /// How the home floods the adverts of its jobs.
    pub schedule: ScheduleConfig,
    /// How many adverts the pending queue holds. When it is full, a new
    /// advert takes the place of the queued one that expires soonest if it
    /// expires later than that one, and is dropped otherwise (on a tie the
    /// queued one stays): the adverts kept are those with the most time
    /// left to be served. The home was told `Busy` either way.
    pub pending_capacity: usize,
    /// How long a member holds offered workers without an answer.
    pub hold_timeout: Duration,
    /// How many jobs a member remembers having declined for good.
    pub declined_capacity: usize,
    /// The most workers a job may ask for (never more than
    /// [`limits::MAX_WORKERS`], whatever this says).
    pub max_job_workers: u32,
    /// How many ended jobs the home remembers (phase and report) before it
    /// forgets the oldest; the driver keeps its own durable record.
    pub ended_capacity: usize,
    /// Whether queued jobs take turns by the favours their homes did this
    /// node ([`crate::favours`]); `false`: in queue order (first come,
    /// first served), the baseline the simulator measures fair sharing
    /// against. On by default.
    pub fair_share: bool,
    /// Seeds the home's random picks (which tasks of a spot-checked array
    /// run again elsewhere): a member that could guess it would lie only
    /// where no check follows, so a node draws a fresh one at each start;
    /// the simulator gives a seeded one.
    pub seed: u64,
}

impl<P: Ord> Default for SchedulerConfig<P> {
    fn default() -> Self {
        SchedulerConfig {
            resources: Resources::new(1, 1024, 1024),
            speed: REFERENCE_SPEED,
            prefer: Some(SameDistance::DEFAULT),
            limits: OwnerLimits::default(),
            schedule: ScheduleConfig::default(),
            pending_capacity: 256,
            hold_timeout: Duration::from_secs(30),
            declined_capacity: 1024,
            max_job_workers: limits::MAX_WORKERS,
            ended_capacity: 1024,
            fair_share: true,
            seed: 0,
        }
    }
}

/// What a rigid job does when it loses a worker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LostPolicy {
    /// The job fails.
    #[default]
    Fail,
    /// The home floods for a replacement and the job goes on (the
    /// replacement loads the rank's latest checkpoint, if it has one).
    Replace,
    /// Every rank of the job rolls back together to the latest checkpoint
    /// generation all of them hold (the LBG-SQUARE way, for iterative
    /// codes whose ranks exchange data every step and checkpoint at a
    /// barrier): the home stops the surviving workers, and every rank
    /// gets a fresh worker (the lost ones on replacement nodes found by
    /// flooding) that loads its checkpoint of that generation; with no
    /// common generation, all ranks start over. See
    /// [`crate::checkpoint::CheckpointIndex::common_generation`].
    Rollback,
}

/// What a user asks for when submitting a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// What each worker needs.
    pub per_worker: Resources,
    /// How many workers.
    pub workers: WorkerCount,
    /// Spread or concentrate.
    pub strategy: Strategy,
    /// How long the job may wait for its workers before it expires.
    pub lifetime: Duration,
    /// What a rigid job does when a worker is lost (malleable jobs always
    /// look for a replacement).
    pub on_worker_lost: LostPolicy,
    /// What the job's workers are.
    #[serde(default)]
    pub kind: WorkKind,
    /// Among its owner's jobs waiting for the same cores of a node, higher
    /// goes first (0 by default). It orders one user's jobs only: other
    /// users' jobs keep their turn, whatever their priorities.
    #[serde(default)]
    pub priority: i8,
    /// A job array: this many independent tasks of the job's module, each
    /// a worker of its own numbered by its task index (its rank at the
    /// home), at most `max_running` of them at once. `None`: one job of
    /// `workers` ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TaskArray>,
    /// How many times the job runs, each run on nodes no other run uses,
    /// its results compared at the home ([`crate::runs`]); 1: once, as
    /// jobs always did. `workers` counts the workers of every run (a
    /// rigid job of `workers.max / runs` ranks per run). Left out of the
    /// encoding when 1.
    #[serde(default = "one_run", skip_serializing_if = "is_one_run")]
    pub runs: u8,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

fn one_run() -> u8 {
    1
}

fn is_one_run(runs: &u8) -> bool {
    *runs == 1
}

/// A job array's shape (see [`JobSpec::tasks`]): what HTCondor's
/// `queue N` and Slurm's `--array` give, as one job. The home hands task
/// indices out as nodes offer cores (a task that failed or was lost first
/// again), and keeps counts rather than a record per task (see
/// [`TaskProgress`](super::TaskProgress)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskArray {
    /// How many tasks, numbered from 0 (at most [`limits::MAX_TASKS`]).
    pub count: u32,
    /// The most tasks running at once; the job's `workers` are 1 to this.
    pub max_running: u32,
    /// How often a failed task runs again, each time on whichever node
    /// offers next (at most [`limits::MAX_TASK_RETRIES`]). A task lost
    /// with its node runs again without counting.
    pub retries: u8,
    /// The percentage (0 to 100) of tasks that exited with status 0 that
    /// run once more on another node, their results compared at the home:
    /// spot checks (see [`TaskProgress`](super::TaskProgress)). 0: none.
    /// Left out of the encoding when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spot_checks: u8,
}

impl TaskArray {
    /// The worker count a job array has: from 1 to `max_running`.
    pub fn workers(&self) -> WorkerCount {
        WorkerCount {
            min: 1,
            max: self.max_running,
        }
    }
}

/// Why a job specification was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum SpecError {
    /// `min` was zero.
    #[error("a job needs at least one worker (min was 0)")]
    NoWorkers,
    /// `min > max`.
    #[error("min workers ({min}) is more than max workers ({max})")]
    MinAboveMax {
        /// The minimum.
        min: u32,
        /// The maximum.
        max: u32,
    },
    /// Too many workers.
    #[error("{asked} workers asked for, but this node schedules at most {limit} per job")]
    TooManyWorkers {
        /// What was asked.
        asked: u32,
        /// The limit.
        limit: u32,
    },
    /// Zero lifetime.
    #[error("the job's lifetime must be more than zero")]
    NoLifetime,
    /// A value is beyond its documented maximum (see [`limits`]).
    #[error(transparent)]
    OutOfRange(#[from] LimitError),
    /// A job with this id exists.
    #[error("job {0} already exists")]
    Duplicate(JobId),
    /// A job array whose worker count is not 1 to its `max_running`.
    #[error(
        "a job array runs 1 to max_running ({max_running}) workers at once, not {min} to {max}"
    )]
    ArrayWorkers {
        /// The array's most tasks at once.
        max_running: u32,
        /// The workers' min asked.
        min: u32,
        /// The workers' max asked.
        max: u32,
    },
    /// A job array asked to roll back: its tasks are independent.
    #[error(
        "a job array's tasks are independent: a lost task runs again by itself, so \
         on_worker_lost = \"rollback\" does not apply"
    )]
    ArrayRollback,
    /// A job that runs more than once whose shape does not allow it.
    #[error(
        "a job that runs {runs} times must be of a fixed size, the same in every run \
         ({workers} workers in all), and not a job array"
    )]
    RunsShape {
        /// The runs asked for.
        runs: u8,
        /// The workers in all.
        workers: u32,
    },
}

/// A job spec a scheduler took within its limits
/// ([`Scheduler::admit`](super::Scheduler::admit)): checked once, where it
/// comes in, and passed inward as this type, so that nothing further in
/// checks it again or can be handed one that was not checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted(JobSpec);

impl Admitted {
    /// The spec.
    pub fn spec(&self) -> &JobSpec {
        &self.0
    }

    /// The spec, given back.
    pub fn into_spec(self) -> JobSpec {
        self.0
    }
}

impl<P: Ord> SchedulerConfig<P> {
    /// Admits `spec` if it is within these limits.
    pub fn admit(&self, spec: JobSpec) -> Result<Admitted, SpecError> {
        spec.validate(self)?;
        Ok(Admitted(spec))
    }
}

impl JobSpec {
    /// Checks the spec against the limits of `config`.
    pub fn validate<P: Ord>(&self, config: &SchedulerConfig<P>) -> Result<(), SpecError> {
        self.check(config.max_job_workers)
    }

    /// Checks the spec against the documented [`limits`], with at most
    /// `max_workers` workers (never more than [`limits::MAX_WORKERS`]):
    /// what a client can check before it submits.
    pub fn check(&self, max_workers: u32) -> Result<(), SpecError> {
        let WorkerCount { min, max } = self.workers;
        if min == 0 {
            return Err(SpecError::NoWorkers);
        }
        if min > max {
            return Err(SpecError::MinAboveMax { min, max });
        }
        let limit = max_workers.min(limits::MAX_WORKERS);
        if max > limit {
            return Err(SpecError::TooManyWorkers { asked: max, limit });
        }
        if self.lifetime.is_zero() {
            return Err(SpecError::NoLifetime);
        }
        limits::duration_at_most("lifetime", self.lifetime, limits::MAX_LIFETIME)?;
        limits::check_resources(&self.per_worker)?;
        if let Some(tasks) = &self.tasks {
            limits::one_to("tasks", tasks.count, limits::MAX_TASKS)?;
            limits::one_to("max_running", tasks.max_running, tasks.count.min(limit))?;
            limits::at_most("retries", tasks.retries, limits::MAX_TASK_RETRIES)?;
            limits::at_most("spot_checks", tasks.spot_checks, 100)?;
            if self.workers != tasks.workers() {
                return Err(SpecError::ArrayWorkers {
                    max_running: tasks.max_running,
                    min,
                    max,
                });
            }
            if self.on_worker_lost == LostPolicy::Rollback {
                return Err(SpecError::ArrayRollback);
            }
        }
        limits::one_to("runs", self.runs, crate::runs::MAX_RUNS)?;
        if self.runs > 1 {
            let runs = u32::from(self.runs);
            if self.tasks.is_some() || !self.workers.is_rigid() || max % runs != 0 {
                return Err(SpecError::RunsShape {
                    runs: self.runs,
                    workers: max,
                });
            }
        }
        Ok(())
    }
}

/// Why a job's worker count could not be changed (see
/// [`Scheduler::resize`](super::Scheduler::resize)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResizeError {
    /// This node is not the job's home, or forgot it.
    #[error("this node is not home to job {0}")]
    UnknownJob(JobId),
    /// The job is over.
    #[error("job {0} is over")]
    Ended(JobId),
    /// A rigid job keeps its worker count.
    #[error(
        "job {job} is rigid ({workers} workers); only a malleable job (min < max) can change \
         its worker count"
    )]
    Rigid {
        /// The job.
        job: JobId,
        /// Its worker count.
        workers: u32,
    },
    /// The new maximum is below the job's minimum.
    #[error("max workers ({max}) cannot be below the job's min workers ({min})")]
    BelowMin {
        /// The asked maximum.
        max: u32,
        /// The job's minimum.
        min: u32,
    },
    /// Workers already granted are not taken back.
    #[error(
        "{granted} workers of job {job} are already placed and a placed worker is not stopped \
         to shrink a job: max must be at least {granted}"
    )]
    BelowGranted {
        /// The job.
        job: JobId,
        /// Workers placed.
        granted: u32,
    },
    /// More workers than the home schedules per job.
    #[error("{asked} workers asked for, but this node schedules at most {limit} per job")]
    TooManyWorkers {
        /// What was asked.
        asked: u32,
        /// The limit.
        limit: u32,
    },
}

//! The scheduler of one node: home of the jobs submitted to it, and candidate
//! worker node for everybody's jobs.
//!
//! # Driving contract
//!
//! [`Scheduler`] is a sans-IO state machine. The driver (the real node or the
//! simulator):
//! 1. calls [`Scheduler::handle`] with each [`Input`] and the current time,
//!    and executes every [`Output`] returned, in order;
//! 2. after every call, asks [`Scheduler::next_timeout`] and calls
//!    [`Scheduler::handle_timeout`] once that time has come (calling it early
//!    or more than once is harmless);
//! 3. runs flooded adverts through the overlay's [`FloodRouter`] first: an
//!    [`Output::Flood`] is originated there, and only copies the router
//!    delivers come back in as [`Input::AdvertDelivered`] (so a node always
//!    forwards an advert before it decides whether to join).
//!
//! Time only ever comes in through these calls; no method reads a clock.
//! Any `now` is safe: sums of times and durations saturate.
//!
//! The driver checks what peers send against [`limits`] when it decodes it
//! ([`limits::check_advert`], [`limits::check_message`]) and refuses the
//! sender; an out-of-range advert or message that reaches the scheduler
//! anyway is ignored.
//!
//! # Protocol
//!
//! As a **member**, a node that receives an advert offers as many workers as
//! its free resources and its owner allow ([`Message::Offer`]) and holds
//! them; it starts them on [`Message::Grant`], releases them on
//! [`Message::Refuse`], and gives up the hold by itself after
//! `hold_timeout` (telling the home with [`Message::Withdraw`]), so that a
//! gang that never completes frees its nodes. A node that cannot offer says
//! why once ([`Message::Decline`]) and keeps the advert in its bounded
//! pending queue until it expires; whenever resources free up, it takes the
//! queued adverts it can now serve, oldest first.
//!
//! As a **home**, a node floods the advert of a submitted job on its
//! [`FloodSchedule`], collects offers and maps workers with the job's
//! [`Strategy`] onto the nearest offering nodes. A rigid job starts all its
//! workers at once or none; a malleable one starts with `min` and is granted
//! more as offers come, up to `max`. Before granting, the home lets the
//! current flood settle for about twice the RTT of the farthest node it
//! would choose, so that nearer nodes whose answers are still on their way
//! are not passed over. When a job ends, the offers its home holds are
//! refused with the reason it ended with ([`RefuseReason::Cancelled`],
//! [`RefuseReason::Expired`], [`RefuseReason::Failed`], or
//! [`RefuseReason::JobFull`] once completed), and so is every offer that
//! arrives later.
//!
//! [`FloodRouter`]: crate::flood::FloodRouter

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::advert::{Advert, DeclineReason, JobId, Message, RefuseReason, Strategy, WorkerCount};
use crate::allocation::{Candidate, allocate};
use crate::limits::{self, LimitError};
use crate::resources::Resources;
use crate::schedule::{FloodSchedule, Reach, ScheduleConfig, WaitMode};
use crate::{PeerKey, Time};

/// What the owner of a node allows (the P2P-MPI paper's owner limits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerLimits<P: Ord> {
    /// The most jobs this node runs workers for at once (J).
    pub max_jobs: u32,
    /// The most workers of one job on this node (P).
    pub max_workers_per_job: u32,
    /// Homes whose jobs this node never runs.
    pub deny: BTreeSet<P>,
}

impl<P: Ord> Default for OwnerLimits<P> {
    fn default() -> Self {
        OwnerLimits {
            max_jobs: 16,
            max_workers_per_job: u32::MAX,
            deny: BTreeSet::new(),
        }
    }
}

/// Configuration of one node's scheduler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerConfig<P: Ord> {
    /// What this node offers to jobs in all.
    pub resources: Resources,
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
}

impl<P: Ord> Default for SchedulerConfig<P> {
    fn default() -> Self {
        SchedulerConfig {
            resources: Resources::new(1, 1024, 1024),
            limits: OwnerLimits::default(),
            schedule: ScheduleConfig::default(),
            pending_capacity: 256,
            hold_timeout: Duration::from_secs(30),
            declined_capacity: 1024,
            max_job_workers: limits::MAX_WORKERS,
            ended_capacity: 1024,
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
    /// The home floods for a replacement and the job goes on.
    Replace,
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
        Ok(())
    }
}

/// Why a job's worker count could not be changed (see
/// [`Scheduler::resize`]).
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

/// An event for the scheduler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<P> {
    /// A user submitted a job to this node, which becomes its home.
    Submit {
        /// The job's identity (the driver picks it at random).
        job: JobId,
        /// What the job needs.
        spec: JobSpec,
    },
    /// A user cancelled a job this node is home to.
    Cancel(JobId),
    /// A job this node is home to is done (its workers finished).
    Finish(JobId),
    /// A job this node is home to failed for a reason the driver saw (a
    /// worker exited with an error, a module could not start): its workers
    /// everywhere are stopped and its holds released.
    Fail {
        /// The job.
        job: JobId,
        /// Why, in words.
        reason: String,
    },
    /// The flood router delivered an advert (first copy of a flood).
    AdvertDelivered {
        /// The advert.
        advert: Advert<P>,
        /// This node's estimated RTT to the home.
        distance: Duration,
    },
    /// A direct message from another node.
    Message {
        /// The sender.
        from: P,
        /// The message (never an advert: those come through the router).
        msg: Message<P>,
        /// The driver's own measured RTT to the sender, if it has one.
        rtt: Option<Duration>,
    },
    /// Workers of a job ended on this node; their resources are free again.
    WorkersEnded {
        /// The job.
        job: JobId,
        /// The ranks that ended.
        ranks: Vec<u32>,
    },
    /// A peer failed or left the grid.
    PeerLost(P),
    /// Ranks of a job this node is home to no longer run on `node`,
    /// though the node may still be there (it restarted and forgot them,
    /// or it stopped answering for them: see [`crate::liveness`]). Ranks
    /// not granted to `node` (any more) are ignored, so each loss counts
    /// once.
    RanksLost {
        /// The job.
        job: JobId,
        /// The node the ranks were granted to.
        node: P,
        /// The ranks.
        ranks: Vec<u32>,
        /// Why, in words (the reason a rigid job fails with names it).
        why: String,
    },
}

/// An action for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output<P> {
    /// Send a message directly to a node.
    Send {
        /// The receiver.
        to: P,
        /// The message.
        msg: Message<P>,
    },
    /// Start a flood of this advert (through the flood router's
    /// `originate`).
    Flood(Advert<P>),
    /// Start workers of a job on this node.
    StartWorkers {
        /// The job.
        job: JobId,
        /// Its home.
        home: P,
        /// The ranks to start.
        ranks: Vec<u32>,
        /// Their incarnation (see [`Message::Grant`]).
        incarnation: u32,
    },
    /// Stop every worker of a job on this node.
    StopWorkers {
        /// The job.
        job: JobId,
        /// Why.
        reason: RefuseReason,
    },
    /// Something happened to a job this node is home to.
    Job(JobEvent<P>),
}

/// What happened to a job, as seen by its home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobEvent<P> {
    /// The job was refused.
    Rejected {
        /// The job.
        job: JobId,
        /// Why.
        error: SpecError,
    },
    /// Workers were granted to a node (one event per node and grant).
    Granted {
        /// The job.
        job: JobId,
        /// The node.
        node: P,
        /// The ranks it runs.
        ranks: Vec<u32>,
        /// The grant's number (see [`Message::Grant`]).
        incarnation: u32,
        /// The RTT from the home to the node, as the home knew it.
        rtt: Duration,
    },
    /// The job got its `min` workers and started.
    Started {
        /// The job.
        job: JobId,
        /// Workers it started with.
        workers: u32,
    },
    /// The job has all the workers it can use; flooding stopped.
    Full {
        /// The job.
        job: JobId,
    },
    /// A node running workers of the job was lost.
    WorkersLost {
        /// The job.
        job: JobId,
        /// The node.
        node: P,
        /// The ranks lost.
        ranks: Vec<u32>,
    },
    /// The job ended without running to completion.
    Ended {
        /// The job.
        job: JobId,
        /// How.
        phase: Phase,
        /// Why, in words.
        reason: String,
    },
}

/// The scheduling phase of a job at its home. Phases only move forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Looking for workers.
    Scheduling,
    /// Workers are running.
    Running,
    /// Done.
    Completed,
    /// Cancelled by the user.
    Cancelled,
    /// Failed: expired before it got its workers, or lost a worker.
    Failed,
}

/// Why a job is (or was) waiting: what the home knows of its floods.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingReport {
    /// Floods sent.
    pub floods: u32,
    /// Radius of the last flood.
    pub radius: u8,
    /// Latency budget of the last flood, if latency-bounded.
    pub budget: Option<Duration>,
    /// Nodes that answered (offers and declines).
    pub nodes_answered: u64,
    /// Offers received.
    pub offers: u64,
    /// Workers offered in all.
    pub workers_offered: u64,
    /// Declines received, by reason.
    pub declines: BTreeMap<DeclineReason, u64>,
    /// Offers the home refused, by reason.
    pub refusals: BTreeMap<RefuseReason, u64>,
    /// Workers granted so far.
    pub granted: u32,
    /// Workers the job needs to start (`min`).
    pub needed: u32,
}

impl PendingReport {
    /// One sentence on why the job waits.
    pub fn explain(&self) -> String {
        let reach = match self.budget {
            Some(budget) => format!(
                "{} floods so far, up to {:.1} ms from home",
                self.floods,
                budget.as_secs_f64() * 1e3
            ),
            None => format!("{} floods so far, radius {}", self.floods, self.radius),
        };
        let mut why = format!(
            "{} of {} workers granted; {reach}; {} nodes answered, {} offered {} workers",
            self.granted, self.needed, self.nodes_answered, self.offers, self.workers_offered,
        );
        let lists = [
            ("declined", list(&self.declines)),
            ("offers refused", list(&self.refusals)),
        ];
        for (what, list) in lists {
            if !list.is_empty() {
                write!(why, "; {what}: {list}").ok();
            }
        }
        why
    }
}

/// "2 busy, 1 owner denies ...": counts by reason, in reason order.
fn list<R: std::fmt::Display>(counts: &BTreeMap<R, u64>) -> String {
    counts
        .iter()
        .map(|(reason, n)| format!("{n} {reason}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Workers a member holds for a job (see [`Scheduler::holds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold<'a, P> {
    /// The job.
    pub job: JobId,
    /// Its home, which the offer went to.
    pub home: &'a P,
    /// Workers held.
    pub workers: u32,
    /// When the node offered them.
    pub since: Time,
    /// When the node gives the hold up by itself (and withdraws): at most
    /// `hold_timeout` after `since`, sooner if the advert expires sooner.
    pub until: Time,
}

/// A job this node is home to.
#[derive(Debug, Clone)]
struct HomeJob<P> {
    spec: JobSpec,
    phase: Phase,
    expires_at: Time,
    schedule: FloodSchedule,
    /// `Some` while the home still floods.
    next_flood_at: Option<Time>,
    /// Offers held for us, not yet granted or refused.
    offers: BTreeMap<P, HeldOffer>,
    /// Ranks granted per node.
    granted: BTreeMap<P, Vec<u32>>,
    /// Ranks lost and to be handed out again.
    free_ranks: BTreeSet<u32>,
    next_rank: u32,
    /// Grants sent so far: the next grant's incarnation.
    grants: u32,
    /// Floods of earlier schedules of this job (it floods afresh to grow
    /// or to replace lost workers): flood numbers go on from there, so that
    /// a new flood is never taken for a copy of an old one by the nodes'
    /// duplicate caches.
    earlier_floods: u32,
    /// When the tentative allocation may be granted (settling).
    settle_at: Option<Time>,
    /// Offers in hand suffice; the home only waits for nearer answers.
    settling: bool,
    /// Once the job ended: the reason every offer is refused with (the one
    /// its held offers got when it ended), so that a late offer hears the
    /// same as an early one.
    ended_with: Option<RefuseReason>,
    report: PendingReport,
}

#[derive(Debug, Clone, Copy)]
struct HeldOffer {
    workers: u32,
    rtt: Duration,
}

impl<P> HomeJob<P> {
    fn granted_workers(&self) -> u32 {
        self.granted.values().fold(0u32, |sum, r| {
            sum.saturating_add(u32::try_from(r.len()).unwrap_or(u32::MAX))
        })
    }

    /// Starts a new flood schedule for `workers` workers, its first flood
    /// at `now`, numbered on from the floods sent so far.
    fn flood_afresh(&mut self, now: Time, workers: u32) {
        self.earlier_floods = self.earlier_floods.saturating_add(self.schedule.floods());
        self.schedule = FloodSchedule::new(self.schedule.config().clone(), workers);
        self.next_flood_at = Some(now);
    }
}

/// Workers this node holds (offered) or runs for a job.
#[derive(Debug, Clone)]
struct Engagement<P> {
    home: P,
    per_worker: Resources,
    /// Offered, not yet granted or refused; the hold began at
    /// `held_since` and lasts until `held_until` at the latest.
    held: u32,
    held_since: Time,
    held_until: Time,
    /// The most workers the job asked for, and the node's distance from
    /// its home, from the advert: what a raised offer needs.
    wanted: u32,
    distance: Duration,
    /// Ranks running here.
    running: BTreeSet<u32>,
}

impl<P> Engagement<P> {
    fn uses(&self) -> Resources {
        let running = u32::try_from(self.running.len()).unwrap_or(u32::MAX);
        self.per_worker.times(self.held.saturating_add(running))
    }
}

#[derive(Debug, Clone)]
struct Pending<P> {
    advert: Advert<P>,
    distance: Duration,
    expires_at: Time,
}

/// The scheduler of one node. See the [module documentation](self).
#[derive(Debug, Clone)]
pub struct Scheduler<P: Ord> {
    id: P,
    config: SchedulerConfig<P>,
    home: BTreeMap<JobId, HomeJob<P>>,
    engaged: BTreeMap<JobId, Engagement<P>>,
    pending: VecDeque<Pending<P>>,
    declined: VecDeque<JobId>,
    /// How far the floods of the last job that got all its workers went.
    last_reach: Option<Reach>,
    /// Ended home jobs, oldest first, forgotten beyond `ended_capacity`.
    ended: VecDeque<JobId>,
    /// The driver cannot take workers now (see [`Scheduler::set_paused`]).
    paused: bool,
}

impl<P: PeerKey> Scheduler<P> {
    /// The scheduler of node `id`.
    pub fn new(id: P, config: SchedulerConfig<P>) -> Self {
        Scheduler {
            id,
            config,
            home: BTreeMap::new(),
            engaged: BTreeMap::new(),
            pending: VecDeque::new(),
            declined: VecDeque::new(),
            last_reach: None,
            ended: VecDeque::new(),
            paused: false,
        }
    }

    /// Stops (`true`) or resumes offering workers: a node that cannot take
    /// workers for a while (its disk cannot be written) declines every
    /// advert as busy, which keeps the advert in its pending queue; on
    /// resuming, the queued adverts that have not expired are served.
    /// Workers already offered or running go on. The outputs are what
    /// resuming sets off at once.
    pub fn set_paused(&mut self, now: Time, paused: bool) -> Vec<Output<P>> {
        self.paused = paused;
        let mut out = Vec::new();
        if !paused {
            self.rescan(now, &mut out);
        }
        self.loopback(now, out)
    }

    /// Whether the node offers no workers now (see [`Scheduler::set_paused`]).
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// This node's identity.
    pub fn id(&self) -> &P {
        &self.id
    }

    /// The configuration.
    pub fn config(&self) -> &SchedulerConfig<P> {
        &self.config
    }

    /// Resources not held or used by any job.
    pub fn free(&self) -> Resources {
        self.engaged
            .values()
            .fold(self.config.resources, |free, e| {
                free.saturating_sub(&e.uses())
            })
    }

    /// Workers this node runs, per job.
    pub fn running(&self) -> impl Iterator<Item = (JobId, &BTreeSet<u32>)> {
        self.engaged
            .iter()
            .filter(|(_, e)| !e.running.is_empty())
            .map(|(job, e)| (*job, &e.running))
    }

    /// Workers this node holds for jobs (offered, not yet granted).
    pub fn held_workers(&self) -> u32 {
        self.engaged
            .values()
            .fold(0u32, |sum, e| sum.saturating_add(e.held))
    }

    /// Adverts waiting in the pending queue, oldest first, with when they
    /// expire.
    pub fn pending(&self) -> impl Iterator<Item = (&Advert<P>, Time)> {
        self.pending.iter().map(|p| (&p.advert, p.expires_at))
    }

    /// The holds of this node as a member: workers offered to a job's home
    /// and neither granted nor released yet, in job order.
    pub fn holds(&self) -> impl Iterator<Item = Hold<'_, P>> {
        self.engaged
            .iter()
            .filter(|(_, e)| e.held > 0)
            .map(|(job, e)| Hold {
                job: *job,
                home: &e.home,
                workers: e.held,
                since: e.held_since,
                until: e.held_until,
            })
    }

    /// The offers a home holds for one of its jobs (offering node and
    /// workers offered), neither granted nor refused yet; none for a job
    /// this node is not home to.
    pub fn held_offers(&self, job: JobId) -> impl Iterator<Item = (&P, u32)> {
        self.home
            .get(&job)
            .into_iter()
            .flat_map(|j| j.offers.iter().map(|(node, offer)| (node, offer.workers)))
    }

    /// The phase of a job this node is home to.
    pub fn phase(&self, job: JobId) -> Option<Phase> {
        self.home.get(&job).map(|j| j.phase)
    }

    /// Why a job this node is home to waits (or what its floods found).
    pub fn report(&self, job: JobId) -> Option<PendingReport> {
        self.home.get(&job).map(|j| j.report.clone())
    }

    /// Ranks granted per node for a job this node is home to.
    pub fn placement(&self, job: JobId) -> Option<&BTreeMap<P, Vec<u32>>> {
        self.home.get(&job).map(|j| &j.granted)
    }

    /// Jobs this node is home to.
    pub fn home_jobs(&self) -> impl Iterator<Item = (JobId, Phase)> + '_ {
        self.home.iter().map(|(job, j)| (*job, j.phase))
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    pub fn next_timeout(&self) -> Option<Time> {
        let home = self.home.values().flat_map(|j| {
            let expiry = (j.phase == Phase::Scheduling).then_some(j.expires_at);
            // A settling job floods no more until it has settled.
            let flood = j.next_flood_at.filter(|_| !j.settling);
            [flood, j.settle_at, expiry]
        });
        let holds = self
            .engaged
            .values()
            .filter(|e| e.held > 0)
            .map(|e| Some(e.held_until));
        let pending = self.pending.iter().map(|p| Some(p.expires_at));
        home.chain(holds).chain(pending).flatten().min()
    }

    /// Handles one input at time `now`.
    pub fn handle(&mut self, now: Time, input: Input<P>) -> Vec<Output<P>> {
        let out = self.handle_one(now, input);
        self.loopback(now, out)
    }

    /// The home is a node like any other and may run workers of its own
    /// jobs: messages it addresses to itself are handled at once instead of
    /// going out.
    fn loopback(&mut self, now: Time, mut out: Vec<Output<P>>) -> Vec<Output<P>> {
        let mut done = Vec::with_capacity(out.len());
        while !out.is_empty() {
            let mut next = Vec::new();
            for output in out {
                match output {
                    Output::Send { to, msg } if to == self.id => {
                        let input = Input::Message {
                            from: self.id.clone(),
                            msg,
                            rtt: Some(Duration::ZERO),
                        };
                        next.extend(self.handle_one(now, input));
                    }
                    other => done.push(other),
                }
            }
            out = next;
        }
        done
    }

    fn handle_one(&mut self, now: Time, input: Input<P>) -> Vec<Output<P>> {
        let mut out = Vec::new();
        match input {
            Input::Submit { job, spec } => self.submit(now, job, spec, &mut out),
            Input::Cancel(job) => self.end_job(
                job,
                Phase::Cancelled,
                RefuseReason::Cancelled,
                "cancelled by user",
                &mut out,
            ),
            Input::Finish(job) => self.end_job(
                job,
                Phase::Completed,
                RefuseReason::JobFull,
                "completed",
                &mut out,
            ),
            Input::Fail { job, reason } => {
                self.end_job(job, Phase::Failed, RefuseReason::Failed, &reason, &mut out)
            }
            // The driver refuses out-of-range messages when it decodes
            // them (see `limits`); one that got here anyway is ignored, so
            // that nothing the core sends on can be out of range either.
            Input::AdvertDelivered { advert, distance } => {
                if limits::check_advert(&advert).is_ok() {
                    let distance = distance.min(limits::MAX_RTT);
                    self.advert(now, advert, distance, &mut out);
                }
            }
            Input::Message { from, msg, rtt } => {
                if limits::check_message(&msg).is_ok() {
                    let rtt = rtt.map(|rtt| rtt.min(limits::MAX_RTT));
                    self.message(now, from, msg, rtt, &mut out);
                }
            }
            Input::WorkersEnded { job, ranks } => {
                if let Some(e) = self.engaged.get_mut(&job) {
                    for rank in &ranks {
                        e.running.remove(rank);
                    }
                    if e.running.is_empty() && e.held == 0 {
                        self.engaged.remove(&job);
                    }
                }
                self.rescan(now, &mut out);
            }
            Input::PeerLost(peer) => self.peer_lost(now, peer, &mut out),
            Input::RanksLost {
                job,
                node,
                ranks,
                why,
            } => self.ranks_lost(now, job, node, ranks, Some(&why), &mut out),
        }
        self.step_home_jobs(now, &mut out);
        out
    }

    /// Changes the most workers a malleable job this node is home to can
    /// use. Growing a job that already has all its workers floods again,
    /// with a fresh schedule, for the new ones; shrinking only lowers what
    /// is still sought (workers already placed keep running). The outputs
    /// are what the change sets off at once.
    pub fn resize(
        &mut self,
        now: Time,
        job_id: JobId,
        max: u32,
    ) -> Result<Vec<Output<P>>, ResizeError> {
        let limit = self.config.max_job_workers.min(limits::MAX_WORKERS);
        let job = self
            .home
            .get_mut(&job_id)
            .ok_or(ResizeError::UnknownJob(job_id))?;
        if job.phase > Phase::Running {
            return Err(ResizeError::Ended(job_id));
        }
        let WorkerCount { min, max: old } = job.spec.workers;
        if min == old {
            return Err(ResizeError::Rigid {
                job: job_id,
                workers: min,
            });
        }
        if max < min {
            return Err(ResizeError::BelowMin { max, min });
        }
        let granted = job.granted_workers();
        if max < granted {
            return Err(ResizeError::BelowGranted {
                job: job_id,
                granted,
            });
        }
        if max > limit {
            return Err(ResizeError::TooManyWorkers { asked: max, limit });
        }
        job.spec.workers.max = max;
        let mut out = Vec::new();
        if max > old && granted < max && job.next_flood_at.is_none() {
            // Flooding had stopped (the job was full): start afresh.
            job.flood_afresh(now, max);
        } else if max == granted && job.next_flood_at.is_some() {
            // Shrunk to what it has: it is full now.
            job.next_flood_at = None;
            out.push(Output::Job(JobEvent::Full { job: job_id }));
            for (node, _) in std::mem::take(&mut job.offers) {
                *job.report
                    .refusals
                    .entry(RefuseReason::NotChosen)
                    .or_default() += 1;
                out.push(Output::Send {
                    to: node,
                    msg: Message::Refuse {
                        job: job_id,
                        reason: RefuseReason::NotChosen,
                    },
                });
            }
        }
        self.step_home_jobs(now, &mut out);
        Ok(self.loopback(now, out))
    }

    /// Handles everything due at `now`: floods, settled allocations, expiries
    /// and hold timeouts.
    pub fn handle_timeout(&mut self, now: Time) -> Vec<Output<P>> {
        let mut out = Vec::new();
        // Holds that timed out are withdrawn.
        let timed_out: Vec<JobId> = self
            .engaged
            .iter()
            .filter(|(_, e)| e.held > 0 && e.held_until <= now)
            .map(|(job, _)| *job)
            .collect();
        for job in &timed_out {
            if let Some(e) = self.engaged.get_mut(job) {
                e.held = 0;
                let home = e.home.clone();
                if e.running.is_empty() {
                    self.engaged.remove(job);
                }
                out.push(Output::Send {
                    to: home,
                    msg: Message::Withdraw {
                        job: *job,
                        ranks: Vec::new(),
                    },
                });
            }
        }
        self.pending.retain(|p| p.expires_at > now);
        // Home jobs that expired before they got their workers.
        let expired: Vec<JobId> = self
            .home
            .iter()
            .filter(|(_, j)| j.phase == Phase::Scheduling && j.expires_at <= now)
            .map(|(job, _)| *job)
            .collect();
        for job in expired {
            let why = self.home[&job].report.explain();
            self.end_job(
                job,
                Phase::Failed,
                RefuseReason::Expired,
                &format!("expired before it got its workers: {why}"),
                &mut out,
            );
        }
        if !timed_out.is_empty() {
            self.rescan(now, &mut out);
        }
        self.step_home_jobs(now, &mut out);
        self.loopback(now, out)
    }

    fn submit(&mut self, now: Time, job: JobId, spec: JobSpec, out: &mut Vec<Output<P>>) {
        let error = if self.home.contains_key(&job) {
            Some(SpecError::Duplicate(job))
        } else {
            spec.validate(&self.config).err()
        };
        if let Some(error) = error {
            out.push(Output::Job(JobEvent::Rejected { job, error }));
            return;
        }
        let schedule = FloodSchedule::resume(
            self.config.schedule.clone(),
            spec.workers.max,
            self.last_reach,
        );
        let report = PendingReport {
            needed: spec.workers.min,
            ..PendingReport::default()
        };
        self.home.insert(
            job,
            HomeJob {
                // Saturating: `now` may be large, and the lifetime is
                // bounded by validation only.
                expires_at: now.saturating_add(spec.lifetime),
                spec,
                phase: Phase::Scheduling,
                schedule,
                next_flood_at: Some(now),
                offers: BTreeMap::new(),
                granted: BTreeMap::new(),
                free_ranks: BTreeSet::new(),
                grants: 0,
                next_rank: 0,
                earlier_floods: 0,
                settle_at: None,
                settling: false,
                ended_with: None,
                report,
            },
        );
    }

    /// Sends due floods and grants settled allocations.
    fn step_home_jobs(&mut self, now: Time, out: &mut Vec<Output<P>>) {
        let jobs: Vec<JobId> = self.home.keys().copied().collect();
        for job_id in jobs {
            self.try_allocate(now, job_id, out);
            let Some(job) = self.home.get_mut(&job_id) else {
                continue;
            };
            // While offers enough to start are settling, another flood
            // would only reach farther nodes that will not be chosen.
            if job.next_flood_at.is_some_and(|at| at <= now) && !job.settling {
                let mut header = job.schedule.next_flood(now);
                header.seq = header.seq.saturating_add(job.earlier_floods);
                job.report.floods = job.schedule.floods();
                job.report.radius = header.ttl;
                job.report.budget = header.latency_budget;
                job.next_flood_at = Some(job.schedule.next_flood_at());
                let advert = Advert {
                    job: job_id,
                    home: self.id.clone(),
                    per_worker: job.spec.per_worker,
                    workers: job.spec.workers,
                    strategy: job.spec.strategy,
                    expires_in: job.expires_at.saturating_sub(now),
                    flood: header,
                };
                // The home considers its own machine first (it is the
                // nearest there is), and again at every flood, as any
                // member does, to raise a short offer.
                self.advert(now, advert.clone(), Duration::ZERO, out);
                out.push(Output::Flood(advert));
            }
        }
    }

    /// The home's decision for a job: grant when the offers in hand can
    /// start it (or, once running, grow it) and the flood has settled.
    fn try_allocate(&mut self, now: Time, job_id: JobId, out: &mut Vec<Output<P>>) {
        let Some(job) = self.home.get_mut(&job_id) else {
            return;
        };
        // Recomputed from scratch at every step.
        job.settle_at = None;
        job.settling = false;
        if job.phase > Phase::Running || job.offers.is_empty() {
            return;
        }
        let granted = job.granted_workers();
        let wanted = job.spec.workers.max.saturating_sub(granted);
        if wanted == 0 {
            return;
        }
        let candidates: Vec<Candidate<P>> = job
            .offers
            .iter()
            .map(|(node, offer)| Candidate {
                node: node.clone(),
                rtt: offer.rtt,
                offered: offer.workers,
            })
            .collect();
        let offered = candidates
            .iter()
            .fold(0u32, |sum, c| sum.saturating_add(c.offered));
        let needed_now = match job.phase {
            // Before the start the job needs `min` in all.
            Phase::Scheduling => job.spec.workers.min.saturating_sub(granted),
            // A running (malleable, or rigid replacing) job takes any.
            _ => 1,
        };
        if offered < needed_now {
            return;
        }
        let n = offered.min(wanted);
        let Some(assignments) = allocate(job.spec.strategy, &candidates, n) else {
            return;
        };
        // Spread wants one node per worker: while floods still find new
        // nodes, wait for them rather than doubling up early, until floods
        // stop finding any.
        let flood_due = job.next_flood_at.is_some_and(|at| at <= now);
        let spread_waits = job.spec.strategy == Strategy::Spread
            && (candidates.len() as u32) < n
            && job.next_flood_at.is_some()
            && !(flood_due && job.schedule.exhausted());
        if spread_waits {
            return;
        }
        let farthest = assignments
            .iter()
            .filter_map(|a| job.offers.get(&a.node).map(|o| o.rtt))
            .max()
            .unwrap_or_default();
        let settle_at = match job.schedule.config().wait_mode {
            WaitMode::Doubling => now,
            WaitMode::Adaptive => {
                let sent = job.schedule.last_flood_at().unwrap_or(now);
                // The RTTs come from peers: saturating, never a panic.
                sent.saturating_add(farthest.saturating_mul(2))
                    .saturating_add(job.schedule.config().adaptive_floor / 4)
            }
        };
        if settle_at > now {
            job.settle_at = Some(settle_at);
            job.settling = true;
            return;
        }

        // Grant: ranks in slist order, reusing lost ranks first.
        for assignment in &assignments {
            let Some(offer) = job.offers.remove(&assignment.node) else {
                continue;
            };
            let mut ranks = Vec::with_capacity(assignment.workers as usize);
            for _ in 0..assignment.workers {
                let rank = match job.free_ranks.pop_first() {
                    Some(rank) => rank,
                    None => {
                        job.next_rank += 1;
                        job.next_rank - 1
                    }
                };
                ranks.push(rank);
            }
            let incarnation = job.grants;
            job.grants = job.grants.saturating_add(1);
            job.granted
                .entry(assignment.node.clone())
                .or_default()
                .extend(&ranks);
            out.push(Output::Job(JobEvent::Granted {
                job: job_id,
                node: assignment.node.clone(),
                ranks: ranks.clone(),
                incarnation,
                rtt: offer.rtt,
            }));
            out.push(Output::Send {
                to: assignment.node.clone(),
                msg: Message::Grant {
                    job: job_id,
                    ranks,
                    incarnation,
                },
            });
        }
        let total = job.granted_workers();
        job.report.granted = total;
        if job.phase == Phase::Scheduling {
            job.phase = Phase::Running;
            out.push(Output::Job(JobEvent::Started {
                job: job_id,
                workers: total,
            }));
        }
        if total >= job.spec.workers.max {
            job.next_flood_at = None;
            self.last_reach = job.schedule.reach();
            out.push(Output::Job(JobEvent::Full { job: job_id }));
            // Offers not used are released.
            for (node, _) in std::mem::take(&mut job.offers) {
                *job.report
                    .refusals
                    .entry(RefuseReason::NotChosen)
                    .or_default() += 1;
                out.push(Output::Send {
                    to: node,
                    msg: Message::Refuse {
                        job: job_id,
                        reason: RefuseReason::NotChosen,
                    },
                });
            }
        }
    }

    /// Ends a job at its home: held offers are refused with `refuse`, and
    /// unless it completed, nodes running its workers are told to stop.
    fn end_job(
        &mut self,
        job_id: JobId,
        phase: Phase,
        refuse: RefuseReason,
        reason: &str,
        out: &mut Vec<Output<P>>,
    ) {
        let Some(job) = self.home.get_mut(&job_id) else {
            return;
        };
        if job.phase >= Phase::Completed {
            return;
        }
        job.phase = phase;
        job.ended_with = Some(refuse);
        job.next_flood_at = None;
        job.settle_at = None;
        for (node, _) in std::mem::take(&mut job.offers) {
            *job.report.refusals.entry(refuse).or_default() += 1;
            out.push(Output::Send {
                to: node,
                msg: Message::Refuse {
                    job: job_id,
                    reason: refuse,
                },
            });
        }
        if phase != Phase::Completed {
            for node in job.granted.keys() {
                out.push(Output::Send {
                    to: node.clone(),
                    msg: Message::Refuse {
                        job: job_id,
                        reason: refuse,
                    },
                });
            }
        }
        out.push(Output::Job(JobEvent::Ended {
            job: job_id,
            phase,
            reason: reason.to_string(),
        }));
        self.ended.push_back(job_id);
        while self.ended.len() > self.config.ended_capacity {
            if let Some(old) = self.ended.pop_front() {
                self.home.remove(&old);
            }
        }
    }

    /// A member's view of a delivered advert.
    fn advert(
        &mut self,
        now: Time,
        advert: Advert<P>,
        distance: Duration,
        out: &mut Vec<Output<P>>,
    ) {
        let job = advert.job;
        // `expires_in` comes from a peer: the driver bounds it when it
        // decodes the advert, and the sum saturates whatever it is.
        let expires_at = now.saturating_add(advert.expires_in);
        if let Some(e) = self.engaged.get(&job) {
            if e.home != advert.home {
                return;
            }
            if e.held > 0 {
                // Already offering for this job: a newer flood finds it
                // still short of workers, so offer what has freed up since.
                self.raise_offer(job, out);
                return;
            }
            // A node that only runs workers of it may offer more (a
            // malleable job growing, a lost rank replaced), within the
            // owner's limit per job.
        }
        if let Some(queued) = self.pending.iter_mut().find(|p| p.advert.job == job) {
            // A newer flood of a queued job: keep the freshest copy, and
            // do not decline again.
            queued.expires_at = expires_at;
            queued.distance = queued.distance.min(distance);
            queued.advert = advert;
            return;
        }
        if self.declined.contains(&job) {
            return;
        }
        match self.offer_or_reason(now, &advert, expires_at, distance) {
            Ok(outputs) => out.extend(outputs),
            Err(reason) => {
                let home = advert.home.clone();
                let permanent = matches!(
                    reason,
                    DeclineReason::Denied
                        | DeclineReason::NoWorkersAllowed
                        | DeclineReason::TooLarge
                );
                if permanent {
                    self.remember_declined(job);
                } else {
                    self.enqueue(Pending {
                        advert,
                        distance,
                        expires_at,
                    });
                }
                out.push(Output::Send {
                    to: home,
                    msg: Message::Decline { job, reason },
                });
            }
        }
    }

    /// Offers workers for `advert` if the node can, or says why not.
    fn offer_or_reason(
        &mut self,
        now: Time,
        advert: &Advert<P>,
        expires_at: Time,
        distance: Duration,
    ) -> Result<Vec<Output<P>>, DeclineReason> {
        let limits = &self.config.limits;
        if limits.deny.contains(&advert.home) {
            return Err(DeclineReason::Denied);
        }
        if limits.max_workers_per_job == 0 {
            return Err(DeclineReason::NoWorkersAllowed);
        }
        if self.config.resources.workers_that_fit(&advert.per_worker) == 0 {
            return Err(DeclineReason::TooLarge);
        }
        let running = self
            .engaged
            .get(&advert.job)
            .map_or(0, |e| e.running.len() as u32);
        let joined = self.engaged.contains_key(&advert.job);
        if !joined && self.engaged.len() as u32 >= limits.max_jobs {
            return Err(DeclineReason::TooManyJobs);
        }
        if self.paused {
            return Err(DeclineReason::Busy);
        }
        let free = self.free();
        let workers = free
            .workers_that_fit(&advert.per_worker)
            .min(limits.max_workers_per_job.saturating_sub(running))
            .min(advert.workers.max.saturating_sub(running));
        if workers == 0 {
            return Err(DeclineReason::Busy);
        }
        let residue = free.saturating_sub(&advert.per_worker.times(workers));
        let held_until = now.saturating_add(self.config.hold_timeout).min(expires_at);
        let engagement = self
            .engaged
            .entry(advert.job)
            .or_insert_with(|| Engagement {
                home: advert.home.clone(),
                per_worker: advert.per_worker,
                held: 0,
                held_since: now,
                held_until,
                wanted: advert.workers.max,
                distance,
                running: BTreeSet::new(),
            });
        engagement.wanted = advert.workers.max;
        engagement.distance = distance;
        engagement.held = workers;
        engagement.held_since = now;
        engagement.held_until = held_until;
        Ok(vec![Output::Send {
            to: advert.home.clone(),
            msg: Message::Offer {
                job: advert.job,
                workers,
                distance,
                residue,
            },
        }])
    }

    /// Raises a held offer by the workers that have freed up since it was
    /// made (the job's earlier workers ending here, say), up to what the
    /// job and the owner allow. Without this, a rigid job offered only
    /// part of a node would wait out the whole hold for the rest.
    fn raise_offer(&mut self, job: JobId, out: &mut Vec<Output<P>>) {
        let free = self.free();
        let max_per_job = self.config.limits.max_workers_per_job;
        let Some(e) = self.engaged.get_mut(&job) else {
            return;
        };
        if e.held == 0 {
            return;
        }
        let engaged = e
            .held
            .saturating_add(u32::try_from(e.running.len()).unwrap_or(u32::MAX));
        let extra = free
            .workers_that_fit(&e.per_worker)
            .min(max_per_job.saturating_sub(engaged))
            .min(e.wanted.saturating_sub(engaged));
        if extra == 0 {
            return;
        }
        e.held = e.held.saturating_add(extra);
        let residue = free.saturating_sub(&e.per_worker.times(extra));
        out.push(Output::Send {
            to: e.home.clone(),
            msg: Message::Offer {
                job,
                workers: e.held,
                distance: e.distance,
                residue,
            },
        });
    }

    fn enqueue(&mut self, entry: Pending<P>) {
        if self.pending.len() >= self.config.pending_capacity {
            // Full: the advert that expires soonest makes room, unless the
            // new one expires no later (see `pending_capacity`).
            let soonest = self
                .pending
                .iter()
                .enumerate()
                .min_by_key(|(_, p)| p.expires_at)
                .map(|(i, p)| (i, p.expires_at));
            match soonest {
                Some((i, at)) if at < entry.expires_at => {
                    self.pending.remove(i);
                }
                _ => return,
            }
        }
        self.pending.push_back(entry);
    }

    fn remember_declined(&mut self, job: JobId) {
        if self.declined.len() >= self.config.declined_capacity {
            self.declined.pop_front();
        }
        self.declined.push_back(job);
    }

    /// Resources freed up: take queued adverts that can now be served,
    /// oldest first, while resources last.
    fn rescan(&mut self, now: Time, out: &mut Vec<Output<P>>) {
        // This node's own jobs' offers to itself come first: raising them
        // costs no message. Offers to other homes are raised when a newer
        // flood shows the job still short (see `advert`): raising them here
        // would answer every refusal (which frees cores) with raised
        // offers to other homes, and those with refusals in turn.
        let held: Vec<JobId> = self
            .engaged
            .iter()
            .filter(|(_, e)| e.held > 0 && e.home == self.id)
            .map(|(job, _)| *job)
            .collect();
        for job in held {
            self.raise_offer(job, out);
        }
        self.pending.retain(|p| p.expires_at > now);
        let mut i = 0;
        while i < self.pending.len() {
            let entry = &self.pending[i];
            let advert = entry.advert.clone();
            let distance = entry.distance;
            let expires_in = entry.expires_at.saturating_sub(now);
            let advert = Advert {
                expires_in,
                ..advert
            };
            let expires_at = entry.expires_at;
            match self.offer_or_reason(now, &advert, expires_at, distance) {
                Ok(outputs) => {
                    out.extend(outputs);
                    self.pending.remove(i);
                }
                Err(_) => i += 1,
            }
        }
    }

    fn message(
        &mut self,
        now: Time,
        from: P,
        msg: Message<P>,
        rtt: Option<Duration>,
        out: &mut Vec<Output<P>>,
    ) {
        match msg {
            // Adverts come through the flood router, never directly.
            Message::Advert(_) => {}
            Message::Offer {
                job,
                workers,
                distance,
                ..
            } => self.offer_received(now, from, job, workers, rtt.unwrap_or(distance), out),
            Message::Decline { job, reason } => {
                if let Some(j) = self.home.get_mut(&job) {
                    j.schedule.answer(now);
                    j.report.nodes_answered += 1;
                    *j.report.declines.entry(reason).or_default() += 1;
                }
            }
            Message::Withdraw { job, ranks } => {
                let Some(j) = self.home.get_mut(&job) else {
                    return;
                };
                j.offers.remove(&from);
                // A grant crossed the withdrawal: the ranks it named are
                // lost (ranks the node ran before stay where they are).
                self.ranks_lost(now, job, from, ranks, None, out);
            }
            Message::Grant {
                job,
                ranks,
                incarnation,
            } => self.grant_received(now, from, job, ranks, incarnation, out),
            Message::Refuse { job, reason } => {
                let Some(e) = self.engaged.get_mut(&job) else {
                    return;
                };
                if e.home != from {
                    return;
                }
                e.held = 0;
                if !e.running.is_empty()
                    && matches!(
                        reason,
                        RefuseReason::Cancelled | RefuseReason::Expired | RefuseReason::Failed
                    )
                {
                    e.running.clear();
                    out.push(Output::StopWorkers { job, reason });
                }
                if e.running.is_empty() {
                    self.engaged.remove(&job);
                }
                self.rescan(now, out);
            }
        }
    }

    fn offer_received(
        &mut self,
        now: Time,
        from: P,
        job_id: JobId,
        workers: u32,
        rtt: Duration,
        out: &mut Vec<Output<P>>,
    ) {
        let refuse = match self.home.get_mut(&job_id) {
            None => Some(RefuseReason::UnknownJob),
            Some(job) => {
                job.schedule.answer(now);
                job.report.nodes_answered += 1;
                job.report.offers += 1;
                job.report.workers_offered = job
                    .report
                    .workers_offered
                    .saturating_add(u64::from(workers));
                let reason = match job.ended_with {
                    // Ended: cancelled, expired, failed or completed, the
                    // reason it ended with.
                    Some(reason) => Some(reason),
                    None if job.granted_workers() >= job.spec.workers.max => {
                        Some(RefuseReason::JobFull)
                    }
                    None => None,
                };
                match reason {
                    Some(reason) => {
                        *job.report.refusals.entry(reason).or_default() += 1;
                        Some(reason)
                    }
                    None => {
                        let held = job
                            .offers
                            .entry(from.clone())
                            .or_insert(HeldOffer { workers: 0, rtt });
                        held.workers = held.workers.max(workers);
                        held.rtt = rtt;
                        None
                    }
                }
            }
        };
        if let Some(reason) = refuse {
            out.push(Output::Send {
                to: from,
                msg: Message::Refuse {
                    job: job_id,
                    reason,
                },
            });
        }
    }

    fn grant_received(
        &mut self,
        now: Time,
        from: P,
        job: JobId,
        ranks: Vec<u32>,
        incarnation: u32,
        out: &mut Vec<Output<P>>,
    ) {
        let fits = match self.engaged.get_mut(&job) {
            Some(e) if e.home == from && e.held as usize >= ranks.len() => {
                // The part of the hold not granted is released.
                e.held = 0;
                e.running.extend(&ranks);
                true
            }
            _ => false,
        };
        if fits {
            out.push(Output::StartWorkers {
                job,
                home: from,
                ranks,
                incarnation,
            });
            self.rescan(now, out);
        } else {
            // The hold is gone (timed out): tell the home so that it
            // finds the workers elsewhere.
            out.push(Output::Send {
                to: from,
                msg: Message::Withdraw { job, ranks },
            });
        }
    }

    fn workers_lost(
        &mut self,
        now: Time,
        job_id: JobId,
        node: P,
        ranks: Vec<u32>,
        why: Option<&str>,
        out: &mut Vec<Output<P>>,
    ) {
        let Some(job) = self.home.get_mut(&job_id) else {
            return;
        };
        if job.phase > Phase::Running {
            return;
        }
        out.push(Output::Job(JobEvent::WorkersLost {
            job: job_id,
            node,
            ranks: ranks.clone(),
        }));
        let replace =
            !job.spec.workers.is_rigid() || job.spec.on_worker_lost == LostPolicy::Replace;
        if job.phase == Phase::Running && !replace {
            let reason = match why {
                Some(why) => format!("a worker was lost and the job is rigid: {why}"),
                None => "a worker was lost and the job is rigid".to_string(),
            };
            self.end_job(job_id, Phase::Failed, RefuseReason::Failed, &reason, out);
            return;
        }
        job.free_ranks.extend(ranks);
        job.report.granted = job.granted_workers();
        if job.phase == Phase::Running && job.granted_workers() < job.spec.workers.max {
            // Look for replacements now, with a fresh schedule.
            let max = job.spec.workers.max;
            job.flood_afresh(now, max);
        }
    }

    /// Those of `ranks` that are granted to `node` are lost (the others
    /// were lost before, or never there).
    fn ranks_lost(
        &mut self,
        now: Time,
        job_id: JobId,
        node: P,
        ranks: Vec<u32>,
        why: Option<&str>,
        out: &mut Vec<Output<P>>,
    ) {
        let Some(granted) = self
            .home
            .get_mut(&job_id)
            .and_then(|j| j.granted.get_mut(&node))
        else {
            return;
        };
        let lost: Vec<u32> = ranks
            .into_iter()
            .filter(|rank| {
                let here = granted.contains(rank);
                granted.retain(|r| r != rank);
                here
            })
            .collect();
        if granted.is_empty()
            && let Some(job) = self.home.get_mut(&job_id)
        {
            job.granted.remove(&node);
        }
        if !lost.is_empty() {
            self.workers_lost(now, job_id, node, lost, why, out);
        }
    }

    fn peer_lost(&mut self, now: Time, peer: P, out: &mut Vec<Output<P>>) {
        let jobs: Vec<JobId> = self.home.keys().copied().collect();
        for job_id in jobs {
            let Some(job) = self.home.get_mut(&job_id) else {
                continue;
            };
            job.offers.remove(&peer);
            if let Some(ranks) = job.granted.remove(&peer) {
                self.workers_lost(now, job_id, peer.clone(), ranks, None, out);
            }
        }
        // Holds for a home that is gone are released; its running workers
        // are the node's business (they may finish and report later).
        let gone: Vec<JobId> = self
            .engaged
            .iter()
            .filter(|(_, e)| e.home == peer && e.running.is_empty())
            .map(|(job, _)| *job)
            .collect();
        for job in gone {
            self.engaged.remove(&job);
        }
        self.pending.retain(|p| p.advert.home != peer);
        self.rescan(now, out);
    }
}

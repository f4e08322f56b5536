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
//! pending queue until it expires; whenever resources free up (workers
//! ended, a hold was refused or timed out), it first raises the offers it
//! holds by what freed up, then takes the queued adverts it can now serve,
//! oldest first.
//!
//! As a **home**, a node floods the advert of a submitted job on its
//! [`FloodSchedule`] (the first flood reaching at least as far as the
//! nodes the job needs to start, as far as the driver told the distances
//! of its overlay's peers: [`Scheduler::set_peer_distances`]; past the
//! farthest node it knows of, no faster than the paper's floods), collects
//! offers and maps workers with the job's
//! [`Strategy`] onto the nearest offering nodes. A rigid job starts all its
//! workers at once or none; a malleable one starts with `min` and is granted
//! more as offers come, up to `max`. Before granting, the home lets the
//! current flood settle for about twice the RTT of the farthest node it
//! would choose, so that nearer nodes whose answers are still on their way
//! are not passed over; and after a fresh offer from a node nearer than
//! that one it waits that RTT again, since offers also come in bursts
//! without a flood (a job ended on a site, and its freed cores answer the
//! adverts queued on them together). When a job ends, the offers its home
//! holds are refused with the reason it ended with ([`RefuseReason::Cancelled`],
//! [`RefuseReason::Expired`], [`RefuseReason::Failed`], or
//! [`RefuseReason::JobFull`] once completed), and so is every offer that
//! arrives later.
//!
//! **Direct adverts.** A flood costs several messages per node it reaches
//! (every node passes it to each of its links), and a home floods the
//! same near balls again for every job. So a home remembers the nodes
//! that answered its floods, with the RTT it measured to each (at most
//! [`MAX_KNOWN_NODES`], for [`KNOWLEDGE_KEPT`]). A flood of a job whose
//! ball (budget and radius) an earlier flood of this home covered goes as
//! one [`Message::Advert`] straight to each remembered node inside the
//! budget that this job has not asked yet, instead of through the
//! overlay: the same nodes, nearest first as the budget doubles, at one
//! message each. A step asks at most [`MAX_DIRECT_PER_STEP`] nodes (each
//! may cost a connection), the nearest first; the rest of the ball is
//! asked at the next step, as soon as those had time to answer (twice the
//! farthest one's RTT, at least the schedule's floor). Beyond what earlier
//! floods covered, the home floods
//! ([`ScheduleConfig::direct_adverts`](crate::schedule::ScheduleConfig)).
//! A node whose hold for the job timed out is asked again at the next
//! step. A member takes an advert that comes straight from its home as
//! one the flood delivered.
//!
//! After the grant, the home keeps a [`RankTable`] per job: where each
//! rank runs (node and grant number) and what became of it. The driver
//! reports each worker's end as a node told it ([`Input::RankEnded`]) and
//! ranks that no longer run ([`Input::PeerLost`], [`Input::RanksLost`]);
//! the home decides what that means for the job ([`JobEvent::RankEnded`],
//! [`JobEvent::WorkersLost`], a replacement grant, and at most one
//! [`JobEvent::Ended`] with its [`EndReason`]). See [`ranks`](RankTable)
//! for the rules. The home also keeps the index of its jobs' checkpoints
//! ([`Scheduler::checkpoint_stored`]) and rolls a rigid job back to a
//! checkpoint generation all its ranks hold when it asks for that
//! ([`LostPolicy::Rollback`]).
//!
//! [`FloodRouter`]: crate::flood::FloodRouter

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha12Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use crate::advert::{
    Advert, DeclineReason, FloodHeader, HoldId, JobId, Message, RefuseReason, Strategy, WorkerCount,
};
use crate::allocation::{Candidate, allocate_preferring, reachable_together};
use crate::bounded::make_room;
use crate::checkpoint::CheckpointIndex;
use crate::favours::{Ledger, millis};
use crate::limits;
use crate::resources::{Machine, Reachability, Resources};
use crate::runs::{
    Apart, Avoided, ResultDigest, RunResult, Verdict, allocate_runs, decide, run_of,
};
use crate::schedule::{FloodMode, FloodSchedule, Reach, WaitMode};
use crate::{PeerKey, Time};

mod events;
mod home;
mod joblog;
mod member;
mod outcome;
mod ranks;
mod report;
mod rollback;
mod spec;
mod takeover;
mod tasks;

pub use crate::advert::{Phase, Placed};
pub use events::{CheckpointRefused, Input, JobEvent, Output};
pub use joblog::{JobEntry, JobState};
pub use outcome::{Failure, LostReason, RankOutcome, WorkerEnd};
pub use ranks::{EndReason, Rank, RankTable};
pub use report::{Hold, PendingReport};
pub use spec::{
    Admitted, JobSpec, LostPolicy, NativePolicy, OwnerLimits, ResizeError, SchedulerConfig,
    SpecError, TaskArray, UserLimits, UserPolicy,
};
pub use tasks::{TaskCounts, TaskEnd, TaskProgress};

/// A worker's end as its node reported it (see [`Input::RankEnded`]).
#[derive(Debug, Clone)]
struct RankEnd<P> {
    node: P,
    rank: u32,
    incarnation: u32,
    end: WorkerEnd,
    digest: Option<ResultDigest>,
}

/// A job this node is home to.
#[derive(Debug, Clone)]
struct HomeJob<P> {
    spec: JobSpec,
    /// The user who owns the job (its adverts name it).
    owner: Option<P>,
    phase: Phase,
    expires_at: Time,
    schedule: FloodSchedule,
    /// `Some` while the home still floods.
    next_flood_at: Option<Time>,
    /// Offers held for us, not yet granted or refused.
    offers: BTreeMap<P, HeldOffer>,
    /// The ranks running elsewhere: where, since when, and the speed of
    /// that node's cores (its offer's), for the favour it does this
    /// node (see [`crate::favours`]).
    worked: BTreeMap<u32, (P, Time, u32)>,
    /// The hold each node's last grant used: an offer raising it crossed
    /// that grant, which releases it at the node (no refusal needed, and
    /// one would overtake the grant). At most one entry per node granted.
    granted_holds: BTreeMap<P, HoldId>,
    /// The ranks granted: where they are, what became of them.
    ranks: RankTable<P>,
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
    /// When offers in hand first sufficed for the next grant (cleared by
    /// the grant): the wait for a burst of nearer offers ends at most
    /// twice the farthest chosen RTT after it.
    sufficed_since: Option<Time>,
    /// Once the job ended: the reason every offer is refused with (the one
    /// its held offers got when it ended), so that a late offer hears the
    /// same as an early one.
    ended_with: Option<RefuseReason>,
    report: PendingReport,
    /// [`JobEvent::Checkpointed`] events given for the job so far (at most
    /// [`MAX_LOGGED_CHECKPOINTS`]).
    logged_checkpoints: u32,
    /// Nodes that answered (offered or declined) so far, at most
    /// [`MAX_ANSWERED`]: a later offer of one of them is not a new answer
    /// (see [`HomeJob::new_answer`]).
    answered: BTreeSet<P>,
    /// Nodes sent a direct advert of this search, and when (at most
    /// [`MAX_KNOWN_NODES`]): asked again after [`ASK_AGAIN_AFTER`].
    asked: BTreeMap<P, Time>,
    /// For a native job of several ranks: the kind of node its ranks were
    /// placed on (see [`crate::allocation::reachable_together`]), which
    /// its later ones must reach. Kept by this home only: a home that
    /// takes the job over pins it again at its first grant.
    reach: Option<Reachability>,
}

/// The most nodes a home remembers as having answered one job; beyond it,
/// every answer of a node not remembered counts as new.
pub const MAX_ANSWERED: usize = 16_384;

/// The most nodes a home remembers from the answers to its floods (for
/// direct adverts); the one heard from longest ago makes room.
pub const MAX_KNOWN_NODES: usize = 4096;

/// How long what a flood found stands for its ball: after that the home
/// floods the ball again (nodes join, and leave).
pub const KNOWLEDGE_KEPT: Duration = Duration::from_secs(300);

/// The most a home waits, past twice the farthest chosen RTT, for offers
/// delayed on their way (by processing along the flood's path, in a real
/// node) before it grants.
pub const SETTLE_SLACK: Duration = Duration::from_micros(2500);

/// The most peer distances a scheduler keeps
/// ([`Scheduler::set_peer_distances`]), the nearest.
pub const MAX_PEER_DISTANCES: usize = 4096;

/// How long a node asked for a job (a direct advert) is taken to keep it:
/// after that a step of the job's search asks it again. A member that
/// declined a job as busy keeps its advert in its queue and offers when
/// cores free up, but a full queue pushes adverts out, and nothing tells
/// the home: without asking again, a job whose adverts were pushed out of
/// every queue would wait for ever while cores sit idle (zorilla-sim
/// `--fairshare`: 627 of 1,600 tasks of free riders never started). A
/// member that still holds the advert only refreshes it.
pub const ASK_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// The most direct adverts one step of a job's search sends (the nearest
/// nodes first; the rest at the next step). A direct advert to a node the
/// home is not connected to costs a connection, and a node keeps a bounded
/// number of them (the overlay's default is 128).
pub const MAX_DIRECT_PER_STEP: usize = 32;

/// The most direct adverts a member takes from one home per second (the
/// rest are dropped, as the flood router drops a peer's adverts beyond
/// its rate): a home sends each node one per job, so only a peer making
/// jobs up sends more.
pub const DIRECT_ADVERTS_PER_SEC: u32 = 64;

/// How long a job array's home waits at least for the answer of the node
/// it asked directly for the core a task's end freed, before it floods for
/// it (twice the RTT to the node, if longer).
pub const DIRECT_ANSWER_WAIT: Duration = Duration::from_millis(20);

/// The most nodes whose owners a scheduler keeps (see
/// [`Scheduler::set_owner`]).
pub const MAX_OWNERS: usize = 4096;

/// `node`'s owner in `owners` (see [`Scheduler::set_owner`]), or itself.
fn owner_in<P: Clone + Ord>(owners: &BTreeMap<P, (P, Time)>, node: &P) -> P {
    owners
        .get(node)
        .map_or_else(|| node.clone(), |(owner, _)| owner.clone())
}

/// The most homes whose direct adverts a member counts at once; the one
/// counted longest ago makes room.
pub const MAX_COUNTED_HOMES: usize = 1024;

/// A node that answered a flood of this home.
#[derive(Debug, Clone, Copy)]
struct KnownNode {
    /// The RTT the home measured to it (or the node's own distance).
    rtt: Duration,
    /// When it last answered.
    seen: Time,
}

/// The most [`JobEvent::Checkpointed`] events a job gives (they go into
/// its replicated log, which holds at most [`crate::replica::MAX_LOG`]
/// entries): half the log, so that the job's other events always fit.
/// Beyond it the home still indexes the job's checkpoints, but a home that
/// takes the job over knows only those logged before.
pub const MAX_LOGGED_CHECKPOINTS: u32 = (crate::replica::MAX_LOG / 2) as u32;

/// An offer as it arrives at the home, its RTT the home's measurement.
#[derive(Debug, Clone, Copy)]
struct OfferIn {
    hold: HoldId,
    workers: u32,
    rtt: Duration,
    machine: Machine,
}

#[derive(Debug, Clone, Copy)]
struct HeldOffer {
    hold: HoldId,
    workers: u32,
    rtt: Duration,
    /// What the node's latest offer said of its machine.
    machine: Machine,
    /// When the node's first offer arrived (a later one from the same
    /// node changes it not: see the settling in `try_allocate`).
    since: Time,
}

impl<P: Ord + Clone> HomeJob<P> {
    /// Records an answer from `node` at `now`; it counts as an answer to
    /// the last flood only the first time the node answers this job. A
    /// later offer of a node heard before (its cores freed up, or it raised
    /// its offer) would have come without the last flood: it does not show
    /// that floods still find new nodes, so a spread job that waits for
    /// more nodes than it has offers from stops waiting after three floods
    /// that found nobody new ([`FloodSchedule::exhausted`]) instead of
    /// waiting for ever while the nodes it has keep answering.
    fn new_answer(&mut self, node: &P, now: Time) {
        let known = self.answered.contains(node);
        if !known && self.answered.len() < MAX_ANSWERED {
            self.answered.insert(node.clone());
        }
        if !known {
            self.schedule.answer(now);
        }
    }
}

impl<P> HomeJob<P> {
    /// The job has all the workers it can use: flooding stops, and the
    /// offers not used are released.
    fn full(&mut self, job_id: JobId, out: &mut Vec<Output<P>>) {
        self.next_flood_at = None;
        out.push(Output::Job(JobEvent::Full { job: job_id }));
        for (node, offer) in std::mem::take(&mut self.offers) {
            *self
                .report
                .refusals
                .entry(RefuseReason::NotChosen)
                .or_default() += 1;
            out.push(Output::Send {
                to: node,
                msg: Message::Refuse {
                    job: job_id,
                    hold: Some(offer.hold),
                    reason: RefuseReason::NotChosen,
                },
            });
        }
    }

    /// Tells every node with placed ranks of the job, but those in `skip`,
    /// the job's placement and phase ([`Message::Placement`]).
    fn announce(
        &self,
        job_id: JobId,
        replaced: Vec<u32>,
        skip: &BTreeSet<P>,
        out: &mut Vec<Output<P>>,
    ) where
        P: Clone + Ord,
    {
        let placement = self.ranks.placement();
        for node in self.ranks.nodes() {
            if skip.contains(&node) {
                continue;
            }
            out.push(Output::Send {
                to: node,
                msg: Message::Placement {
                    job: job_id,
                    phase: self.phase,
                    placement: placement.clone(),
                    replaced: replaced.clone(),
                },
            });
        }
    }

    /// Ranks placed and not lost (running or ended); of an array, the
    /// tasks running.
    fn granted_workers(&self) -> u32 {
        self.ranks.placed()
    }

    /// The most workers the job can use now: its `max`; for an array, the
    /// tasks running and those waiting to run, up to its `max_running`.
    fn usable_workers(&self) -> u32 {
        let max = self.spec.workers.max;
        match self.ranks.tasks() {
            Some(tasks) => self
                .granted_workers()
                .saturating_add(tasks.available())
                .min(max),
            None => max,
        }
    }

    /// The job's advert as this home sends it now, with `header`.
    fn advert(&self, job_id: JobId, home: &P, header: FloodHeader, now: Time) -> Advert<P>
    where
        P: Clone,
    {
        Advert {
            job: job_id,
            home: home.clone(),
            per_worker: self.spec.per_worker,
            workers: self.spec.workers,
            strategy: self.spec.strategy,
            expires_in: self.expires_at.saturating_sub(now),
            flood: header,
            owner: self.owner.clone(),
            kind: self.spec.kind,
            priority: self.spec.priority,
            // An array's task starts over elsewhere.
            preemptible: self.spec.on_worker_lost != LostPolicy::Fail || self.is_array(),
        }
    }

    /// Whether the job is a job array (see [`TaskArray`]).
    fn is_array(&self) -> bool {
        self.spec.tasks.is_some()
    }

    /// The ranks of each run of a job that runs more than once (see
    /// [`crate::runs`]); of any other job, all its workers.
    fn run_size(&self) -> u32 {
        self.spec.workers.max / u32::from(self.spec.runs.max(1))
    }

    /// Starts a new flood schedule for `workers` workers, its first flood
    /// at `now`, numbered on from the floods sent so far.
    ///
    /// A running job's search (to grow, or to replace lost ranks) gets the
    /// job's lifetime from now: its adverts tell members how long to queue
    /// them and hold offers, and a job past the lifetime it had to start
    /// would otherwise advertise an expiry of zero, every offer withdrawn
    /// as soon as it is made.
    fn flood_afresh(&mut self, now: Time, workers: u32) {
        if self.phase != Phase::Scheduling {
            self.expires_at = self.expires_at.max(now.saturating_add(self.spec.lifetime));
        }
        self.earlier_floods = self.earlier_floods.saturating_add(self.schedule.floods());
        self.schedule = FloodSchedule::new(self.schedule.config().clone(), workers);
        self.next_flood_at = Some(now);
        // A new search asks every node again.
        self.asked.clear();
    }
}

/// Workers this node holds (offered) or runs for a job.
#[derive(Debug, Clone)]
struct Engagement<P> {
    home: P,
    /// The job's owner, as its advert names it (the owner's limits).
    owner: Option<P>,
    per_worker: Resources,
    /// The number of the hold (the last one if none is held now).
    hold: HoldId,
    /// Offered, not yet granted or refused; the hold began at
    /// `held_since` and lasts until `held_until` at the latest.
    held: u32,
    held_since: Time,
    held_until: Time,
    /// The most workers the job asked for, and the node's distance from
    /// its home, from the advert: what a raised offer needs.
    wanted: u32,
    distance: Duration,
    /// Ranks running here, and when each was granted: the favour this
    /// node does the job's home is counted from then (see
    /// [`crate::favours`]).
    running: BTreeMap<u32, Time>,
    /// Whether they may be stopped for a creditor's job (the advert's
    /// [`Advert::preemptible`]).
    preemptible: bool,
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
    /// Where the checkpoints of the ranks of this node's home jobs are
    /// (see [`Scheduler::checkpoint_stored`]).
    checkpoints: CheckpointIndex<P>,
    /// The number of the next hold this node starts (see [`HoldId`]).
    next_hold: u32,
    /// As a home: the nodes that answered its floods (direct adverts).
    known: BTreeMap<P, KnownNode>,
    /// As a home: the farthest ball (budget, radius) a flood of it
    /// covered, and when.
    flooded: Option<(Reach, Time)>,
    /// As a member: direct adverts taken per home in the current second
    /// (when it began, how many).
    direct_taken: BTreeMap<P, (Time, u32)>,
    /// How far the peers the overlay knows are, nearest first
    /// ([`Scheduler::set_peer_distances`]).
    peer_distances: Vec<Duration>,
    /// How many peers the overlay knew, measured or not, and whether they
    /// are every peer it heard of (see [`Scheduler::set_peer_distances`]).
    peers_known: usize,
    every_peer: bool,
    /// Favours done and received, per consumer (see [`crate::favours`]).
    favours: Ledger<P>,
    /// Where this node can be reached from, as its offers say
    /// ([`Scheduler::set_reachability`]).
    reachability: Reachability,
    /// Nodes that dissented from a majority of a job's runs: granted
    /// nothing by this home from then on (see [`crate::runs`]).
    avoided: Avoided<P>,
    /// The home's random picks (spot checks), from the config's seed.
    rng: ChaCha12Rng,
    /// Who vouches for each node the driver knows it of (see
    /// [`Scheduler::set_owner`]), and since when; at most [`MAX_OWNERS`].
    owners: BTreeMap<P, (P, Time)>,
}

impl<P: PeerKey> Scheduler<P> {
    /// The nodes this home avoids: they dissented from a majority of a
    /// job's runs ([`crate::runs`]).
    pub fn avoided(&self) -> &Avoided<P> {
        &self.avoided
    }

    /// Takes back the nodes a driver kept avoided across a restart, oldest
    /// first (they make room first), as of `now`.
    pub fn restore_avoided(&mut self, nodes: impl IntoIterator<Item = P>, now: Time) {
        for node in nodes {
            self.avoided.insert(node, now);
        }
    }

    /// What this node owes and is owed: its Network of Favors balances
    /// ([`crate::favours`]).
    pub fn favours(&self) -> &Ledger<P> {
        &self.favours
    }

    /// Takes back the favour accounts (consumer, received, given) a driver
    /// kept across a restart (see [`Ledger::accounts`]).
    pub fn restore_favours(&mut self, accounts: impl IntoIterator<Item = (P, u64, u64)>) {
        for (consumer, received, given) in accounts {
            self.favours.restore(&consumer, received, given, Time::ZERO);
        }
    }

    /// The scheduler of node `id`.
    pub fn new(id: P, config: SchedulerConfig<P>) -> Self {
        Scheduler {
            id,
            rng: ChaCha12Rng::seed_from_u64(config.seed),
            config,
            home: BTreeMap::new(),
            engaged: BTreeMap::new(),
            pending: VecDeque::new(),
            declined: VecDeque::new(),
            last_reach: None,
            ended: VecDeque::new(),
            paused: false,
            checkpoints: CheckpointIndex::new(),
            next_hold: 0,
            known: BTreeMap::new(),
            flooded: None,
            direct_taken: BTreeMap::new(),
            peer_distances: Vec::new(),
            reachability: Reachability::Unknown,
            peers_known: 0,
            every_peer: false,
            favours: Ledger::new(),
            avoided: Avoided::default(),
            owners: BTreeMap::new(),
        }
    }

    /// `owner` vouches for `node` (a closed grid's credentials say so: the
    /// member the grid key signed for, which is `node` itself or the
    /// member that invited it). The runs of a job that runs more than once
    /// go to nodes of distinct owners where the offers allow
    /// ([`crate::runs::allocate_runs`]); a node of no known owner is its
    /// own. At most [`MAX_OWNERS`] are kept, the longest known making
    /// room.
    pub fn set_owner(&mut self, node: P, owner: P, now: Time) {
        make_room(&mut self.owners, &node, MAX_OWNERS, |(_, at)| *at);
        self.owners.insert(node, (owner, now));
    }

    /// Who vouches for `node`: its owner as [`Scheduler::set_owner`] said,
    /// or itself.
    pub fn owner_of(&self, node: &P) -> P {
        owner_in(&self.owners, node)
    }

    /// Where this node can be reached from, as the driver's overlay finds
    /// out (its offers say it: see [`Reachability`]).
    pub fn set_reachability(&mut self, reachability: Reachability) {
        self.reachability = reachability;
    }

    /// Where this node can be reached from, as its offers say.
    pub fn reachability(&self) -> Reachability {
        self.reachability
    }

    /// Tells the scheduler how far the peers its overlay knows are (their
    /// measured RTTs, in any order, `None` for a peer known but not
    /// measured; the nearest [`MAX_PEER_DISTANCES`] are kept), and whether
    /// they are every peer the overlay heard of (its table has room).
    ///
    /// Then a home's first flood of a job reaches at least as far as the
    /// nodes the job needs to start, instead of growing there from the
    /// smallest budget one doubling at a time (each doubling floods the
    /// nearer ball again). The overlay measures only some of the peers it
    /// knows, so the measured ones stand for the rest: the job's `n`
    /// nearest nodes are taken to be as far as the `n × measured / known`
    /// nearest measured. That holds only where the overlay knows the whole
    /// grid: in a larger one its table is full, of a few peers of its own
    /// site and its far links, and such a flood would reach far too far
    /// (zorilla-sim `synthetic-10k`: 2,729 messages per job instead of 93),
    /// so there the first flood starts small as before. Either way the
    /// farthest distance is the home's horizon (see [`crate::schedule`]).
    /// The driver tells it again as its overlay learns.
    pub fn set_peer_distances(
        &mut self,
        distances: impl IntoIterator<Item = Option<Duration>>,
        every_peer: bool,
    ) {
        let mut known = 0usize;
        let mut measured: Vec<Duration> = distances
            .into_iter()
            .inspect(|_| known = known.saturating_add(1))
            .flatten()
            .collect();
        measured.sort_unstable();
        measured.truncate(MAX_PEER_DISTANCES);
        self.peer_distances = measured;
        self.peers_known = known;
        self.every_peer = every_peer;
    }

    /// How far the peers the overlay knows are, nearest first, as the
    /// driver last said ([`Scheduler::set_peer_distances`]).
    pub fn peer_distances(&self) -> &[Duration] {
        &self.peer_distances
    }

    /// How far the first flood of a job needing `min` workers of
    /// `per_worker` each must reach: the distance of the last of the
    /// nearest nodes that could hold them, each taking as many as this
    /// node's machine could (it stands for the others; one, if this node
    /// has room for none), this node one of them if it has room. `None`
    /// when this node could hold them all, or it knows no peer.
    fn first_reach(&self, min: u32, per_worker: &Resources) -> Option<Duration> {
        let here = self.config.resources.workers_that_fit(per_worker);
        let others = if here == 0 {
            min
        } else {
            min.div_ceil(here).saturating_sub(1)
        } as usize;
        let measured = self.peer_distances.len();
        if others == 0 || !self.every_peer || measured == 0 {
            return None;
        }
        // The measured peers stand for all those known: the job's nearest
        // `others` are as far as the nearest `others × measured / known`
        // measured ones.
        let nearest = (others as u64)
            .saturating_mul(measured as u64)
            .div_ceil(self.peers_known.max(1) as u64)
            .min(measured as u64) as usize;
        nearest
            .checked_sub(1)
            .and_then(|i| self.peer_distances.get(i))
            .copied()
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

    /// Admits a job `spec` if it is within this scheduler's limits: what
    /// [`Input::Submit`] takes.
    pub fn admit(&self, spec: JobSpec) -> Result<Admitted, SpecError> {
        self.config.admit(spec)
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
    pub fn running(&self) -> impl Iterator<Item = (JobId, impl ExactSizeIterator<Item = &u32>)> {
        self.engaged
            .iter()
            .filter(|(_, e)| !e.running.is_empty())
            .map(|(job, e)| (*job, e.running.keys()))
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

    /// Ranks granted per node for a job this node is home to (lost ones
    /// not counted).
    pub fn placement(&self, job: JobId) -> Option<BTreeMap<P, Vec<u32>>> {
        self.home.get(&job).map(|j| j.ranks.by_node())
    }

    /// The owner the advert of `job` named, as this node took it when it
    /// offered workers (`None`: it holds and runs nothing of the job). A
    /// grant's copy of the job must name the same owner.
    pub fn engaged_owner(&self, job: JobId) -> Option<Option<&P>> {
        self.engaged.get(&job).map(|e| e.owner.as_ref())
    }

    /// The rank table of a job this node is home to: every rank's
    /// placement and outcome.
    pub fn ranks(&self, job: JobId) -> Option<&RankTable<P>> {
        self.home.get(&job).map(|j| &j.ranks)
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
            Input::Submit { job, spec, owner } => self.submit(now, job, spec, owner, &mut out),
            Input::Cancel(job) => self.end_job(
                job,
                Phase::Cancelled,
                RefuseReason::Cancelled,
                EndReason::Cancelled,
                &mut out,
            ),
            Input::RankEnded {
                job,
                node,
                rank,
                incarnation,
                end,
                digest,
            } => {
                let ended = RankEnd {
                    node,
                    rank,
                    incarnation,
                    end,
                    digest,
                };
                self.rank_ended(now, job, ended, &mut out)
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
                        if let Some(at) = e.running.remove(rank)
                            && e.home != self.id
                        {
                            let ms = millis(now.saturating_sub(at));
                            self.favours.gave(&e.home, e.per_worker.cores, ms, now);
                        }
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
                cause,
            } => self.ranks_lost(
                now,
                job,
                node,
                Some(ranks),
                LostReason::Liveness(cause),
                &mut out,
            ),
            Input::Stalled { job, ranks } => self.stalled(job, &ranks, &mut out),
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
        // An array's max_running may change however it was set.
        if min == old && !job.is_array() {
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
        let limit = job.spec.tasks.map_or(limit, |t| t.count.min(limit));
        if max > limit {
            return Err(ResizeError::TooManyWorkers { asked: max, limit });
        }
        job.spec.workers.max = max;
        if let Some(tasks) = &mut job.spec.tasks {
            tasks.max_running = max;
        }
        let mut out = Vec::new();
        if max > old && granted < max && job.next_flood_at.is_none() {
            // Flooding had stopped (the job was full): start afresh.
            job.flood_afresh(now, max);
        } else if max == granted && job.next_flood_at.is_some() {
            // Shrunk to what it has: it is full now.
            job.full(job_id, &mut out);
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
                let hold = e.hold;
                if e.running.is_empty() {
                    self.engaged.remove(job);
                }
                out.push(Output::Send {
                    to: home,
                    msg: Message::Withdraw {
                        job: *job,
                        hold,
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
                EndReason::Expired { why },
                &mut out,
            );
        }
        if !timed_out.is_empty() {
            self.rescan(now, &mut out);
        }
        self.step_home_jobs(now, &mut out);
        self.loopback(now, out)
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
            // Flooded adverts come through the flood router; one sent
            // straight here by its home (direct adverts, see the module
            // documentation) is taken as the flood would deliver it.
            Message::Advert(advert) => {
                if advert.home == from && self.take_direct(&from, now) {
                    let distance = rtt.unwrap_or(advert.flood.path_rtt);
                    self.advert(now, advert, distance, out);
                }
            }
            Message::Offer {
                job,
                hold,
                workers,
                distance,
                machine,
                ..
            } => {
                let offer = OfferIn {
                    hold,
                    workers,
                    rtt: rtt.unwrap_or(distance),
                    machine,
                };
                self.offer_received(now, from, job, offer, out)
            }
            Message::Decline { job, reason } => {
                if let Some(j) = self.home.get_mut(&job) {
                    j.new_answer(&from, now);
                    j.report.nodes_answered += 1;
                    *j.report.declines.entry(reason).or_default() += 1;
                    if let Some(rtt) = rtt {
                        self.know(from, rtt, now);
                    }
                }
            }
            Message::Withdraw { job, hold, ranks } => {
                let Some(j) = self.home.get_mut(&job) else {
                    return;
                };
                // Only the hold withdrawn: a newer offer of the node may
                // have overtaken the withdrawal.
                if j.offers.get(&from).is_some_and(|o| o.hold == hold) {
                    j.offers.remove(&from);
                }
                // It forgot the job: the next step asks it again.
                j.asked.remove(&from);
                // A grant crossed the withdrawal: the ranks it named are
                // lost (ranks the node ran before stay where they are).
                self.ranks_lost(now, job, from, Some(ranks), LostReason::Withdrawn, out);
            }
            Message::Grant {
                job,
                hold,
                ranks,
                incarnation,
                placement,
            } => self.grant_received(now, from, job, hold, ranks, incarnation, placement, out),
            // What to do with the news is the driver's (its workers learn
            // where their peers are; a job that ended stops them). The
            // sender is the home as far as the driver's copy of the job
            // says: the driver checks.
            Message::Placement {
                job,
                phase,
                placement,
                replaced,
            } => out.push(Output::PlacementChanged {
                job,
                home: from,
                phase,
                placement,
                replaced,
            }),
            Message::Refuse { job, hold, reason } => {
                let Some(e) = self.engaged.get_mut(&job) else {
                    return;
                };
                if e.home != from {
                    return;
                }
                let ends = reason.ends_the_job();
                if !ends && hold.is_some_and(|h| h != e.hold) {
                    // A refusal of an earlier hold, come late: the hold
                    // held now is another one (see `HoldId`).
                    return;
                }
                e.held = 0;
                if !e.running.is_empty() && ends {
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
}

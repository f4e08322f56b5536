//! A node's whole part in jobs, as one state machine: the [`Scheduler`]
//! (home of its jobs, candidate worker node for everybody's, rank tables,
//! checkpoint index), the [`RankLiveness`] of the ranks its jobs placed,
//! its [`Replica`]s of jobs' logs with the words each home holds until
//! they are committed ([`Outbox`](crate::commit::Outbox)), the placement of
//! its jobs' copies ([`choose_copies`](crate::copies::choose_copies)), and the loss verdicts a home holds back while it
//! may be the one cut off.
//!
//! Before this, each driver composed those parts itself, each in its own
//! way (the node acknowledged rank ends at once, the simulator sent grants
//! at once), so that the simulator checked a protocol the node did not
//! run. Here every relay between them happens once: a job event goes into
//! the job's log and into liveness; a grant and the acknowledgement of an
//! end wait for the log; a copy that wins an election replays the log
//! into the scheduler; an old home that hears a newer one steps down.
//!
//! # Driving contract
//!
//! Like the [scheduler](crate::node), sans-IO: the driver calls
//! [`JobMachine::handle`] with each [`Input`] and executes every
//! [`Output`] in order; after every call it asks
//! [`JobMachine::next_timeout`] and calls [`JobMachine::handle_timeout`]
//! once that time has come (early or twice is harmless). Time only comes
//! in through these calls.
//!
//! `P` names nodes, `R` is how the driver answers a member's report of a
//! rank's end (the node's reply handle, the simulator's rank and
//! incarnation), and `C` is a job's copy as the driver hands it to the
//! nodes that hold the job's state (what [`Origin`] asks of it: the job's
//! first home, which the driver binds to the job's id).

use std::collections::BTreeSet;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crate::advert::JobId;
use crate::liveness::{Answer, LivenessConfig, Question, RankLiveness};
use crate::node::{Admitted, JobEntry, JobEvent, JobState, Scheduler, SchedulerConfig, WorkerEnd};
use crate::replica::{Msg, Refusal, Replica, Signer, Timing};
use crate::{PeerKey, Time};

mod replicas;
#[cfg(test)]
mod tests;
mod verdicts;

/// What a job's copy proves about the job: the home that accepted it first
/// (the node derives a job's id from that home and a nonce it drew, so a
/// copy that does not make the id proves nothing).
pub trait Origin<P> {
    /// The job's first home, if this copy proves it is `job`'s.
    fn first_home(&self, job: JobId) -> Option<P>;
}

/// How long things are kept and how often replicas tick.
#[derive(Debug, Clone)]
pub struct MachineConfig {
    /// Whether jobs' logs are replicated at all. The node always
    /// replicates; the simulator only where a scenario asks for it (a run
    /// without copies then models a grid whose homes never fail, as the
    /// paper's). Without replication every word goes at once.
    pub replicate: bool,
    /// Whether the home asks the nodes holding its ranks which run (see
    /// [`RankLiveness`]). The node always does; the simulator does where
    /// nodes can fail (a scenario with churn or failover): elsewhere the
    /// questions find nothing and only cost events.
    pub watch_ranks: bool,
    /// Lease and election timing of the replicas.
    pub timing: Timing,
    /// How often replicas are ticked (heartbeats, leases, elections): well
    /// within `timing.heartbeat`.
    pub tick: Duration,
    /// How many copies a job should have besides its home
    /// ([`choose_copies`](crate::copies::choose_copies)'s degree).
    pub degree: usize,
    /// The most jobs this node holds replicas of (a peer cannot make it
    /// hold more).
    pub max_replicas: usize,
    /// The most copies of one job a home remembers as gone; past it, a gone
    /// copy is replaced all the same but may be chosen again.
    pub max_gone: usize,
    /// How long a copy keeps the replica of a job it knows ended (it names
    /// the job's home meanwhile; it holds no election for it).
    pub ended_kept: Duration,
    /// How long a node remembers that a job's primary dropped its copy
    /// (longer than a copy that missed its drop takes to stand and hear so).
    pub dropped_kept: Duration,
    /// How often held loss verdicts are looked at again.
    pub recheck: Duration,
    /// How long a home holds back a verdict that a node is lost while it is
    /// out of touch with most copies of a job that node serves: such a home
    /// may be the one cut off; its copies then elect another home, which
    /// keeps the job's workers. A home whose copies all died decides after
    /// this.
    pub hold_at_most: Duration,
    /// When ranks count as lost.
    pub liveness: LivenessConfig,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            replicate: true,
            watch_ranks: true,
            timing: Timing::default(),
            tick: Duration::from_millis(100),
            degree: crate::copies::DEFAULT_DEGREE,
            max_replicas: 4096,
            max_gone: 64,
            ended_kept: Duration::from_secs(60),
            dropped_kept: Duration::from_secs(60),
            recheck: Duration::from_millis(500),
            hold_at_most: Duration::from_secs(30),
            liveness: LivenessConfig::default(),
        }
    }
}

/// An event for the machine.
#[derive(Debug)]
pub enum Input<P, R, C> {
    /// A user submitted a job to this node, which becomes its home: its log
    /// starts with its spec and its first copies are placed before the
    /// scheduler floods it, so that a job still waiting for its workers
    /// survives its home as well.
    Submit {
        /// The job's identity.
        job: JobId,
        /// What it needs, admitted ([`JobMachine::admit`]).
        spec: Admitted,
        /// Its owner, if any.
        owner: Option<P>,
    },
    /// A scheduling input with nothing to log or acknowledge: a message or
    /// an advert from the overlay, a cancel, workers that ended here, a
    /// stall, a rank's checkpoint. (Submissions, rank ends, lost peers and
    /// lost ranks have inputs of their own.)
    Sched(crate::node::Input<P>),
    /// A member reported how a worker of a job this node is home to ended.
    /// It is answered ([`Output::EndAck`]) once the end is committed, so
    /// that an end the member forgets is never lost with this home; a node
    /// that is not the job's primary answers [`Output::NotHome`].
    EndReported {
        /// The job.
        job: JobId,
        /// The member (the report's sender).
        node: P,
        /// The rank.
        rank: u32,
        /// The worker's incarnation.
        incarnation: u32,
        /// How it ended.
        end: WorkerEnd,
        /// The digest of what it computed (a job that runs more than
        /// once: see [`crate::runs`]).
        digest: Option<crate::runs::ResultDigest>,
        /// How the driver answers the member.
        reply: R,
    },
    /// This node took a grant of `job` from `home` and checked its copy: it
    /// holds a copy of the job's state from now on, from the job's first
    /// epoch.
    Granted {
        /// The job.
        job: JobId,
        /// The home that granted.
        home: P,
        /// The job's copy.
        copy: C,
    },
    /// A replica message, with the job's copy if the sender sent it (a
    /// primary that invites this node to hold a copy does). The driver
    /// checked the copy's fields when it decoded it.
    Replica {
        /// The sender.
        from: P,
        /// The job.
        job: JobId,
        /// The message.
        msg: Msg<P, JobEntry<P>>,
        /// The job's copy, if it came with the message.
        copy: Option<C>,
    },
    /// `peer` answered no probe: the scheduler loses it (unless this node,
    /// as the home of a job it serves, may be the one cut off: then the
    /// verdict waits), copies whose primary it was stand for election, and
    /// homes whose copy it held place another.
    PeerDead(P),
    /// The overlay's neighbours now: candidates for extra copies, with
    /// their distance when known.
    Neighbours(Vec<(P, Option<Duration>)>),
    /// How far the overlay's peers are (see
    /// [`Scheduler::set_peer_distances`]).
    PeerDistances {
        /// Measured RTTs (`None` for a peer known but not measured).
        distances: Vec<Option<Duration>>,
        /// Whether these are every peer the overlay heard of.
        every_peer: bool,
    },
    /// Where this node can be reached from, as its overlay found out
    /// (see [`Scheduler::set_reachability`]).
    Reachability(crate::resources::Reachability),
    /// Who vouches for `node` (a closed grid's credential says it; see
    /// [`Scheduler::set_owner`]).
    Owner {
        /// The node.
        node: P,
        /// Its owner, as far as the grid says.
        owner: P,
    },
    /// A node answered which ranks it runs ([`Output::Ask`]).
    RanksAnswered {
        /// The node.
        node: P,
        /// Its answer.
        answer: Answer,
    },
    /// `node` took a grant in its run `boot` (see [`RankLiveness::booted`]).
    Booted {
        /// The node.
        node: P,
        /// Its boot id.
        boot: u64,
    },
    /// `home` told this member where `job`'s ranks run (`over`: and that the
    /// job is over). If this node's replica follows `home` as the job's
    /// primary, its ranks answer to it; a copy told the job is over holds
    /// no election for it.
    HomeHeard {
        /// The job.
        job: JobId,
        /// The sender.
        home: P,
        /// Whether the job is over.
        over: bool,
    },
}

/// What the machine has to say about itself, for the driver's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice<P> {
    /// An entry could not go into a job's log (it is full).
    NotLogged(JobId),
    /// This node holds replicas of as many jobs as it may: none of `job`.
    TooManyReplicas(JobId),
    /// This node holds a copy of `job`'s state, on `home`'s invitation.
    HoldingCopy {
        /// The job.
        job: JobId,
        /// The home that invited.
        home: P,
    },
    /// A replica message from a node that is not one of the job's: ignored.
    NotOfTheJob {
        /// The job.
        job: JobId,
        /// The sender.
        from: P,
    },
    /// A replica message was refused for a reason that is no misbehaviour.
    Refused {
        /// The job.
        job: JobId,
        /// The sender.
        from: P,
        /// Why.
        why: Refusal,
    },
    /// Entries of this primary, which stepped down, are not in the new
    /// primary's log.
    EntriesDropped {
        /// The job.
        job: JobId,
        /// How many.
        count: usize,
    },
    /// This node took `job` over, but its log lacks the job's spec, or it
    /// holds no copy of the job: nothing to run.
    CannotTakeOver(JobId),
    /// `peer` does not answer, nor do most copies of `job`, which it
    /// serves: this node may be the one cut off, so it waits before
    /// treating `peer` as lost.
    VerdictHeld {
        /// The job.
        job: JobId,
        /// The peer.
        peer: P,
    },
    /// `peer` is treated as lost (`held`: after waiting for most copies of
    /// one of its jobs for [`MachineConfig::hold_at_most`]).
    PeerLost {
        /// The peer.
        peer: P,
        /// Whether the verdict was held first.
        held: bool,
    },
}

/// An action for the driver.
#[derive(Debug)]
pub enum Output<P, R, C> {
    /// What the scheduler said (a grant, and what follows one to its node,
    /// only once a copy holds the grant's entry).
    Sched(crate::node::Output<P>),
    /// Send a replica message; with the job's copy if `with_copy` (the
    /// receiver may not hold the job yet: an extra copy, or one behind).
    Replica {
        /// The receiver.
        to: P,
        /// The job.
        job: JobId,
        /// The message.
        msg: Msg<P, JobEntry<P>>,
        /// Whether the job's copy goes with it.
        with_copy: bool,
    },
    /// Acknowledge a member's report of a rank's end (it is committed).
    EndAck(R),
    /// Answer a member's report of a rank's end: this node is not `job`'s
    /// home (any more); the member reports it to the job's home.
    NotHome {
        /// The job.
        job: JobId,
        /// The answer's handle.
        reply: R,
    },
    /// Ask `node` which of the ranks placed there it runs.
    Ask {
        /// The node.
        node: P,
        /// The ranks, per job.
        question: Question,
    },
    /// Probe `peer`: a verdict held on it is asked again now that most
    /// copies are heard (it may have been only slow).
    Probe(P),
    /// This node won the election for `job`: it is the job's home from
    /// now, in the state its log describes (the scheduler's outputs for
    /// the adopted job follow).
    TookOver {
        /// The job.
        job: JobId,
        /// The term it won.
        term: u64,
        /// The job as the log describes it.
        state: Box<JobState<P>>,
        /// The job's copy.
        copy: C,
        /// The home it ran under, if known.
        old_home: Option<P>,
    },
    /// A newer primary is in charge of `job`: this node is no longer its
    /// home.
    SteppedDown {
        /// The job.
        job: JobId,
        /// The new primary.
        primary: P,
    },
    /// The job's home is `home` now: the ranks here report there.
    HomeMoved {
        /// The job.
        job: JobId,
        /// The home.
        home: P,
    },
    /// This node holds a copy of `job` on `home`'s invitation: it may fetch
    /// the job's files from there, to hand them on if it takes over.
    CopyTaken {
        /// The job.
        job: JobId,
        /// The inviting home.
        home: P,
        /// The job's copy.
        copy: C,
    },
    /// This node's copy of `job` ended or was forgotten: what runs here of
    /// the job need not wait for a next home.
    CopyOver(JobId),
    /// The copies of `job` as this node's replica knows them changed.
    CopiesChanged {
        /// The job.
        job: JobId,
        /// The copies.
        copies: BTreeSet<P>,
    },
    /// `peer` misbehaved.
    Misbehaviour {
        /// The peer.
        peer: P,
        /// What it did, in one sentence.
        what: String,
    },
    /// Something for the log.
    Notice(Notice<P>),
}

/// See the [module docs](self).
pub struct JobMachine<P: Ord, R, C> {
    me: P,
    config: MachineConfig,
    signer: Arc<dyn Signer<P>>,
    sched: Scheduler<P>,
    liveness: RankLiveness<P>,
    replicas: replicas::Replicas<P, R, C>,
    verdicts: verdicts::Verdicts<P>,
    /// When the replicas next tick (while there are any).
    next_tick: Option<Time>,
    /// When held verdicts are next looked at (while any are held).
    next_recheck: Option<Time>,
}

impl<P, R, C> JobMachine<P, R, C>
where
    P: PeerKey + Hash,
    C: Origin<P> + Clone,
{
    /// The machine of node `me`; `signer` signs its votes and checks
    /// others'.
    pub fn new(
        me: P,
        sched: SchedulerConfig<P>,
        config: MachineConfig,
        signer: Arc<dyn Signer<P>>,
    ) -> Self {
        JobMachine {
            sched: Scheduler::new(me.clone(), sched),
            liveness: RankLiveness::new(config.liveness.clone()),
            replicas: replicas::Replicas::default(),
            verdicts: verdicts::Verdicts::default(),
            next_tick: None,
            next_recheck: None,
            me,
            config,
            signer,
        }
    }

    /// The scheduler, to look at.
    pub fn scheduler(&self) -> &Scheduler<P> {
        &self.sched
    }

    /// Takes back the favour accounts a driver kept across a restart (see
    /// [`Scheduler::restore_favours`]).
    pub fn restore_favours(&mut self, accounts: impl IntoIterator<Item = (P, u64, u64)>) {
        self.sched.restore_favours(accounts);
    }

    /// Takes back the nodes a driver kept avoided across a restart (see
    /// [`Scheduler::restore_avoided`]).
    pub fn restore_avoided(&mut self, nodes: impl IntoIterator<Item = P>, now: Time) {
        self.sched.restore_avoided(nodes, now);
    }

    /// The scheduler, to change behind the machine's back: nothing it
    /// decides then is logged, held or watched. Only for tests of a
    /// driver's own checks (that they catch a scheduler that misbehaves).
    #[doc(hidden)]
    pub fn scheduler_behind_the_back(&mut self) -> &mut Scheduler<P> {
        &mut self.sched
    }

    /// Checks a job's spec against this node's limits (see
    /// [`Scheduler::admit`]).
    pub fn admit(&self, spec: crate::node::JobSpec) -> Result<Admitted, crate::node::SpecError> {
        self.sched.admit(spec)
    }

    /// When ranks count as lost.
    pub fn liveness_config(&self) -> &LivenessConfig {
        self.liveness.config()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    pub fn next_timeout(&self) -> Option<Time> {
        [
            self.sched.next_timeout(),
            self.liveness.next_timeout(),
            self.next_tick,
            self.next_recheck,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Handles one input at `now`.
    pub fn handle(&mut self, now: Time, input: Input<P, R, C>) -> Vec<Output<P, R, C>> {
        let mut out = Vec::new();
        match input {
            Input::Submit { job, spec, owner } => {
                self.start_log(now, job, spec.spec().clone(), owner.clone(), &mut out);
                let sched = self
                    .sched
                    .handle(now, crate::node::Input::Submit { job, spec, owner });
                self.sched_outputs(now, sched, &mut out);
            }
            Input::Sched(input) => {
                let sched = self.sched.handle(now, input);
                self.sched_outputs(now, sched, &mut out);
            }
            Input::EndReported {
                job,
                node,
                rank,
                incarnation,
                end,
                digest,
                reply,
            } => {
                let input = crate::node::Input::RankEnded {
                    job,
                    node: node.clone(),
                    rank,
                    incarnation,
                    end,
                    digest,
                };
                let sched = self.sched.handle(now, input);
                self.sched_outputs(now, sched, &mut out);
                self.acknowledge_end(job, node, rank, reply, &mut out);
            }
            Input::Granted { job, home, copy } => {
                self.hold_as_member(now, job, home, copy, &mut out)
            }
            Input::Replica {
                from,
                job,
                msg,
                copy,
            } => self.replica_message(now, from, job, msg, copy, &mut out),
            Input::PeerDead(peer) => {
                self.lose_peer(now, peer.clone(), &mut out);
                self.replicas_peer_gone(now, &peer, &mut out);
            }
            Input::Neighbours(near) => {
                self.replicas.near = near;
                self.neighbours_changed(now, &mut out);
            }
            Input::PeerDistances {
                distances,
                every_peer,
            } => self.sched.set_peer_distances(distances, every_peer),
            Input::Reachability(reach) => self.sched.set_reachability(reach),
            Input::Owner { node, owner } => self.sched.set_owner(node, owner, now),
            Input::RanksAnswered { node, answer } => {
                let lost = self.liveness.answer(now, &node, &answer);
                self.lose_ranks(now, lost, &mut out);
            }
            Input::Booted { node, boot } => self.liveness.booted(now, &node, boot),
            Input::HomeHeard { job, home, over } => {
                if self.primary_of(job) == Some(&home) {
                    self.follow(job, home, &mut out);
                    if over {
                        self.replicas.job_over(now, job);
                    }
                }
            }
        }
        out
    }

    /// Time passed: the scheduler's timers, liveness questions and verdicts,
    /// the replicas' heartbeats, leases and elections, held verdicts.
    pub fn handle_timeout(&mut self, now: Time) -> Vec<Output<P, R, C>> {
        let mut out = Vec::new();
        let sched = self.sched.handle_timeout(now);
        self.sched_outputs(now, sched, &mut out);
        if self.next_recheck.is_some_and(|at| at <= now) {
            self.recheck_verdicts(now, &mut out);
        }
        if self.liveness.next_timeout().is_some_and(|at| at <= now) {
            let lost = self.liveness.check(now);
            self.lose_ranks(now, lost, &mut out);
            for (node, question) in self.liveness.due(now) {
                out.push(Output::Ask { node, question });
            }
        }
        if self.next_tick.is_some_and(|at| at <= now) {
            self.tick_replicas(now, &mut out);
            self.next_tick =
                (!self.replicas.is_empty()).then(|| now.saturating_add(self.config.tick));
        }
        out
    }

    /// Executes the scheduler's outputs: a message waits behind the job's
    /// log where the commit rule says so; a job event goes into the job's
    /// log and into liveness.
    fn sched_outputs(
        &mut self,
        now: Time,
        sched: Vec<crate::node::Output<P>>,
        out: &mut Vec<Output<P, R, C>>,
    ) {
        use crate::node::Output as S;
        for output in sched {
            match output {
                S::Send { to, msg } => {
                    if let Some(msg) = self.replicas.hold_message(to.clone(), msg) {
                        out.push(Output::Sched(S::Send { to, msg }));
                    }
                }
                S::Job(event) => {
                    self.log_event(now, &event, out);
                    self.follow_in_liveness(now, &event);
                    out.push(Output::Sched(S::Job(event)));
                }
                other => out.push(Output::Sched(other)),
            }
        }
    }

    /// Whether the driver can take workers now (see
    /// [`Scheduler::set_paused`]); the outputs are what resuming sets off.
    pub fn set_paused(&mut self, now: Time, paused: bool) -> Vec<Output<P, R, C>> {
        let sched = self.sched.set_paused(now, paused);
        let mut out = Vec::new();
        self.sched_outputs(now, sched, &mut out);
        out
    }

    /// Changes how many workers a job of this home may use (see
    /// [`Scheduler::resize`]).
    pub fn resize(
        &mut self,
        now: Time,
        job: JobId,
        max: u32,
    ) -> Result<Vec<Output<P, R, C>>, crate::node::ResizeError> {
        let sched = self.sched.resize(now, job, max)?;
        let mut out = Vec::new();
        self.sched_outputs(now, sched, &mut out);
        Ok(out)
    }

    /// A worker of a job of this home stored a checkpoint (see
    /// [`Scheduler::checkpoint_stored`]); what the index logs goes into
    /// the job's log.
    pub fn checkpoint_stored(
        &mut self,
        now: Time,
        job: JobId,
        node: &P,
        rank: u32,
        checkpoint: crate::checkpoint::Latest<P>,
    ) -> Result<Vec<Output<P, R, C>>, crate::node::CheckpointRefused> {
        let sched = self.sched.checkpoint_stored(job, node, rank, checkpoint)?;
        let mut out = Vec::new();
        self.sched_outputs(now, sched, &mut out);
        Ok(out)
    }

    /// Forgets where the checkpoints of an ended job are: their holders,
    /// to tell (see [`Scheduler::forget_checkpoints`]).
    pub fn forget_checkpoints(&mut self, job: JobId) -> BTreeSet<P> {
        self.sched.forget_checkpoints(job)
    }

    /// Liveness watches the ranks the home placed on other nodes, until
    /// they end or are lost.
    fn follow_in_liveness(&mut self, now: Time, event: &JobEvent<P>) {
        if !self.config.watch_ranks {
            return;
        }
        match event {
            JobEvent::Granted {
                job, node, ranks, ..
            } if *node != self.me => self.liveness.placed(now, *job, node.clone(), ranks),
            JobEvent::WorkersLost {
                job, node, ranks, ..
            } => self.liveness.forget(*job, node, ranks),
            JobEvent::RankEnded {
                job, node, rank, ..
            } => self.liveness.ended(*job, node, *rank),
            JobEvent::RolledBack { job, stopped, .. } => self.liveness.forget_ranks(*job, stopped),
            JobEvent::Ended { job, .. } => self.liveness.forget_job(*job),
            _ => {}
        }
    }

    /// The job's home is `home` now (this node's ranks answer to it).
    fn follow(&mut self, job: JobId, home: P, out: &mut Vec<Output<P, R, C>>) {
        self.sched.home_moved(job, home.clone());
        out.push(Output::HomeMoved { job, home });
    }

    /// The job's primary as this node's replica knows it.
    pub fn primary_of(&self, job: JobId) -> Option<&P> {
        self.replicas.get(job).map(|h| h.replica.primary_peer())
    }

    /// The primaries of the jobs this node holds copies of (it is not their
    /// primary).
    pub fn primaries(&self) -> impl Iterator<Item = (JobId, &P)> {
        self.replicas
            .iter()
            .filter(|(_, h)| !h.replica.is_primary())
            .map(|(job, h)| (job, h.replica.primary_peer()))
    }

    /// Whether this node holds a live copy of `job` that is not its primary
    /// (its workers wait for the job's next home rather than stop).
    pub fn is_copy(&self, job: JobId) -> bool {
        self.replicas
            .get(job)
            .is_some_and(|h| !h.replica.is_primary() && h.ended_at.is_none())
    }

    /// Whether `peer` is the primary or a copy of a job this node holds a
    /// replica of.
    pub fn shares_replica_with(&self, peer: &P) -> bool {
        self.replicas
            .iter()
            .any(|(_, h)| h.replica.primary_peer() == peer || h.replica.copies().contains(peer))
    }

    /// Whether `peer` is the primary or a copy of `job` as this node's
    /// replica knows it.
    pub fn shares_job_replica(&self, job: JobId, peer: &P) -> bool {
        self.replicas
            .get(job)
            .is_some_and(|h| h.replica.primary_peer() == peer || h.replica.copies().contains(peer))
    }

    /// The job's copy as this node was given it (as a copy; a home has its
    /// own record).
    pub fn copy_of(&self, job: JobId) -> Option<&C> {
        self.replicas.get(job).and_then(|h| h.copy.as_ref())
    }

    /// The jobs this node holds a copy of, with their copies.
    pub fn copies_held(&self) -> impl Iterator<Item = (JobId, &C)> {
        self.replicas
            .iter()
            .filter_map(|(job, h)| h.copy.as_ref().map(|c| (job, c)))
    }

    /// The copies of `job` as this node's replica knows them.
    pub fn copies(&self, job: JobId) -> Option<&BTreeSet<P>> {
        self.replicas.get(job).map(|h| h.replica.copies())
    }

    /// The replica of `job` held here, to look at.
    pub fn replica(&self, job: JobId) -> Option<&Replica<P, JobEntry<P>>> {
        self.replicas.get(job).map(|h| &h.replica)
    }

    /// What tells `peer`, which acts as `job`'s home, of the primary in
    /// charge now, if this node's replica follows another one (it steps
    /// down on hearing it).
    pub fn newer_primary_notice(&self, job: JobId, peer: &P) -> Option<Msg<P, JobEntry<P>>> {
        let held = self.replicas.get(job)?;
        (held.replica.epoch().primary != *peer).then(|| held.replica.alive())
    }

    /// Whether this node is `job`'s home and has not heard most of the
    /// job's copies within the lease (it may be the one cut off).
    pub fn out_of_touch(&self, job: JobId, now: Time) -> bool {
        self.replicas.get(job).is_some_and(|h| {
            h.replica.is_primary() && h.ended_at.is_none() && !h.replica.in_touch(now)
        })
    }

    /// How many jobs this node holds replicas of.
    pub fn replica_count(&self) -> usize {
        self.replicas.len()
    }

    /// Words the homes here hold until their logs are committed.
    pub fn held_words(&self) -> usize {
        self.replicas.iter().map(|(_, h)| h.outbox.len()).sum()
    }

    fn ensure_ticking(&mut self, now: Time) {
        if self.next_tick.is_none() && !self.replicas.is_empty() {
            self.next_tick = Some(now.saturating_add(self.config.tick));
        }
    }
}

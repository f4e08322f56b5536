//! The machine's replicas of jobs' logs: a home logs its job's events for
//! the job's copies, which are the nodes that run its ranks and, while
//! there are fewer than the degree of them, near nodes that run none; a
//! copy that the copies chose when the home fell silent takes the job over;
//! a node that hears of a new primary follows the job there; an old
//! primary that learns of a newer one steps down. A home's grants and its
//! acknowledgements of rank ends wait until a copy holds their entry
//! ([`crate::commit`]).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;
use std::time::Duration;

use super::{JobMachine, Notice, Origin, Output};
use crate::advert::{JobId, Message};
use crate::commit::{Outbox, Word, end_index};
use crate::copies::choose_copies;
use crate::node::{JobEntry, JobEvent, JobSpec, JobState};
use crate::replica::{Action, Msg, Replica};
use crate::{PeerKey, Time};

/// This node's replica of one job.
pub(super) struct Held<P, R, C> {
    pub(super) replica: Replica<P, JobEntry<P>>,
    /// The job's copy as this node was given it (a home has its record).
    pub(super) copy: Option<C>,
    /// When the job ended here (the replica is dropped a while after).
    pub(super) ended_at: Option<Time>,
    /// The primary's extra copies: nodes that run none of the job's ranks.
    extras: BTreeSet<P>,
    /// The primary: copies found gone, which hold no copy of the job again.
    gone: BTreeSet<P>,
    /// The primary's words that wait until a copy holds the log up to
    /// their entry (grants, acknowledgements of rank ends), and what it
    /// said to the same nodes after them.
    pub(super) outbox: Outbox<P, R>,
    /// The copies last told to the driver.
    told: BTreeSet<P>,
}

impl<P: PeerKey + Hash, R, C> Held<P, R, C> {
    fn new(replica: Replica<P, JobEntry<P>>, copy: Option<C>) -> Self {
        Held {
            replica,
            copy,
            ended_at: None,
            extras: BTreeSet::new(),
            gone: BTreeSet::new(),
            outbox: Outbox::default(),
            told: BTreeSet::new(),
        }
    }
}

/// Every replica this node holds, and what it remembers of dropped ones.
pub(super) struct Replicas<P, R, C> {
    jobs: BTreeMap<JobId, Held<P, R, C>>,
    /// Jobs whose primary dropped this node's copy, and when: such a node
    /// does not say it holds none (see [`Msg::Absent`]).
    dropped: BTreeMap<JobId, Time>,
    /// Candidates for extra copies: the overlay's neighbours.
    pub(super) near: Vec<(P, Option<Duration>)>,
}

impl<P, R, C> Default for Replicas<P, R, C> {
    fn default() -> Self {
        Replicas {
            jobs: BTreeMap::new(),
            dropped: BTreeMap::new(),
            near: Vec::new(),
        }
    }
}

impl<P: PeerKey + Hash, R, C> Replicas<P, R, C> {
    pub(super) fn get(&self, job: JobId) -> Option<&Held<P, R, C>> {
        self.jobs.get(&job)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (JobId, &Held<P, R, C>)> {
        self.jobs.iter().map(|(job, h)| (*job, h))
    }

    pub(super) fn len(&self) -> usize {
        self.jobs.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// A scheduling message of a job this node may be primary of: back if
    /// it may go now (see [`Outbox::message`]).
    pub(super) fn hold_message(&mut self, to: P, msg: Message<P>) -> Option<Message<P>> {
        match self.jobs.get_mut(&msg.job()) {
            Some(held) => held.outbox.message(&held.replica, to, msg),
            None => Some(msg),
        }
    }

    /// The job's home said it is over: this node's copy holds no election
    /// for it any more.
    pub(super) fn job_over(&mut self, now: Time, job: JobId) {
        if let Some(held) = self.jobs.get_mut(&job)
            && !held.replica.is_primary()
            && held.ended_at.is_none()
        {
            held.ended_at = Some(now);
        }
    }
}

type Out<P, R, C> = Vec<Output<P, R, C>>;

impl<P, R, C> JobMachine<P, R, C>
where
    P: PeerKey + Hash,
    C: Origin<P> + Clone,
{
    /// A job was submitted here: its log starts with its spec, and its
    /// first copies are placed.
    pub(super) fn start_log(
        &mut self,
        now: Time,
        job: JobId,
        spec: JobSpec,
        owner: Option<P>,
        out: &mut Out<P, R, C>,
    ) {
        if !self.config.replicate {
            return;
        }
        let mut replica = Replica::primary(
            job.0,
            self.me.clone(),
            now,
            self.config.timing,
            self.signer.clone(),
        );
        let mut actions = Vec::new();
        if replica
            .propose(JobEntry::Submitted { spec, owner }, &mut actions)
            .is_err()
        {
            out.push(Output::Notice(Notice::NotLogged(job)));
        }
        self.replicas.jobs.insert(job, Held::new(replica, None));
        self.ensure_ticking(now);
        actions.extend(self.place_copies(job));
        self.replica_actions(now, job, actions, out);
    }

    /// A home job's event goes into its log; a grant or a loss changes
    /// which nodes hold copies.
    pub(super) fn log_event(&mut self, now: Time, event: &JobEvent<P>, out: &mut Out<P, R, C>) {
        let job = event.job();
        let Some(entry) = JobEntry::of(event) else {
            self.replicas.jobs.remove(&job);
            return;
        };
        let Some(held) = self.replicas.jobs.get_mut(&job) else {
            return;
        };
        // A grant still held that the home took back goes nowhere; what
        // waited behind it goes now.
        for (to, msg) in held.outbox.take_back(event) {
            out.push(Output::Sched(crate::node::Output::Send { to, msg }));
        }
        if matches!(event, JobEvent::Ended { .. }) {
            held.ended_at = Some(now);
        }
        let mut actions = Vec::new();
        if held.replica.propose(entry, &mut actions).is_err() {
            out.push(Output::Notice(Notice::NotLogged(job)));
        }
        if matches!(
            event,
            JobEvent::Granted { .. } | JobEvent::WorkersLost { .. }
        ) {
            actions.extend(self.place_copies(job));
        }
        self.replica_actions(now, job, actions, out);
        // A job that ended with no copy has nothing left to replicate.
        if matches!(event, JobEvent::Ended { .. })
            && self
                .replicas
                .jobs
                .get(&job)
                .is_some_and(|h| h.replica.copies().is_empty())
        {
            self.replicas.jobs.remove(&job);
        }
    }

    /// The job's copies: the nodes running its ranks, and near nodes that
    /// run none while those are fewer than the degree ([`choose_copies`]).
    fn place_copies(&mut self, job: JobId) -> Vec<Action<P, JobEntry<P>>> {
        let members: Vec<P> = self
            .sched
            .placement(job)
            .map(|nodes| nodes.into_keys().collect())
            .unwrap_or_default();
        let Some(held) = self.replicas.jobs.get_mut(&job) else {
            return Vec::new();
        };
        let copies = choose_copies(
            job.0,
            &self.me,
            members,
            &held.extras,
            &self.replicas.near,
            |p| !held.gone.contains(p),
            self.config.degree,
        );
        held.extras = copies.extras;
        // Set even when they did not change: the appends that name the
        // copies invite again a copy that lost its replica (it restarted),
        // and the home is in touch with it again.
        held.replica.set_copies(copies.all, 1)
    }

    /// The overlay's neighbours changed: home jobs that have fewer copies
    /// than they should (submitted before this node knew its neighbours, or
    /// whose extra copy went) place them now.
    pub(super) fn neighbours_changed(&mut self, now: Time, out: &mut Out<P, R, C>) {
        let short: Vec<JobId> = self
            .replicas
            .iter()
            .filter(|(_, h)| {
                h.replica.is_primary()
                    && h.ended_at.is_none()
                    && h.replica.copies().len() < self.config.degree
            })
            .map(|(job, _)| job)
            .collect();
        for job in short {
            let actions = self.place_copies(job);
            self.replica_actions(now, job, actions, out);
        }
    }

    /// A worker node took a grant with the job's copy: it holds a copy of
    /// the job's state from now on, starting from the job's first epoch, so
    /// it follows the home that granted only as far as that home's mandate
    /// proves it.
    pub(super) fn hold_as_member(
        &mut self,
        now: Time,
        job: JobId,
        home: P,
        copy: C,
        out: &mut Out<P, R, C>,
    ) {
        if !self.config.replicate || home == self.me || self.replicas.jobs.contains_key(&job) {
            return;
        }
        let Some(first) = copy.first_home(job) else {
            return;
        };
        self.hold_copy(now, job, first, copy, out);
    }

    /// Starts this node's copy of `job`, whose first home is `first`, from
    /// the job's first epoch (unless it holds as many replicas as it may:
    /// then it says so); whether it did.
    fn hold_copy(
        &mut self,
        now: Time,
        job: JobId,
        first: P,
        copy: C,
        out: &mut Out<P, R, C>,
    ) -> bool {
        if self.replicas.len() >= self.config.max_replicas {
            out.push(Output::Notice(Notice::TooManyReplicas(job)));
            return false;
        }
        let replica = Replica::copy(
            job.0,
            self.me.clone(),
            first,
            now,
            self.config.timing,
            self.signer.clone(),
        );
        self.replicas
            .jobs
            .insert(job, Held::new(replica, Some(copy)));
        self.ensure_ticking(now);
        true
    }

    /// A replica message from `from`. Only the job's replicas are heard:
    /// the primary and the copies this node knows of, or, for a job this
    /// node holds no replica of, a primary that sends the job's copy with
    /// its log (it chose this node as an extra copy). Such an invitation is
    /// taken only if the copy's origin gives the job's id: the new replica
    /// starts from the job's first epoch and adopts the inviter's only if
    /// it is that epoch or its mandate proves it (else the replica is
    /// dropped at once, and the inviter reported).
    pub(super) fn replica_message(
        &mut self,
        now: Time,
        from: P,
        job: JobId,
        msg: Msg<P, JobEntry<P>>,
        copy: Option<C>,
        out: &mut Out<P, R, C>,
    ) {
        if !self.config.replicate {
            return;
        }
        let mut invited_now = false;
        if !self.replicas.jobs.contains_key(&job) {
            // Only a primary that names this node among the job's copies
            // invites it (an append that leaves it out tells a dropped copy).
            let invited = matches!(&msg, Msg::Append { epoch, copies: Some(copies), .. }
                if epoch.primary == from && copies.contains(&self.me));
            let Some(copy) = copy.clone().filter(|_| invited) else {
                // A copy that stands for election hears that this node holds
                // none (it was named but never reached, or lost its state);
                // not from a node the primary dropped, whose word would let
                // another dropped copy win.
                let answer =
                    Replica::<P, JobEntry<P>>::answer_without_replica(job.0, &msg, &*self.signer)
                        .filter(|_| !self.replicas.dropped.contains_key(&job));
                if let Some(answer) = answer {
                    out.push(Output::Replica {
                        to: from,
                        job,
                        msg: answer,
                        with_copy: false,
                    });
                }
                return;
            };
            let Some(first) = copy.first_home(job) else {
                out.push(Output::Misbehaviour {
                    peer: from,
                    what: format!(
                        "it invited this node to hold a copy of job {job} without the first home and nonce the job's id was made from"
                    ),
                });
                return;
            };
            if !self.hold_copy(now, job, first, copy, out) {
                return;
            }
            invited_now = true;
        }
        let Some(held) = self.replicas.jobs.get_mut(&job) else {
            return;
        };
        // A primary also hears a replica it dropped, in its epoch: one that
        // missed that it was dropped stands for election (the answer tells
        // it), one that heard acknowledges (the notice stops).
        let dropped_standing = held.replica.is_primary()
            && matches!(msg, Msg::Standing { .. } | Msg::Ack { .. })
            && msg.epoch() == held.replica.epoch();
        // A node that names itself primary of a newer epoch is heard as one
        // of the job's copies, or with the votes that elected it (the core
        // checks them from the epoch this replica knows); the primary of an
        // older one is heard (an old home come back: it is answered with
        // the epoch in charge and its mandate, and steps down).
        let stale_primary = msg.epoch().primary == from && msg.epoch() < held.replica.epoch();
        let newer_primary = msg.epoch().primary == from && msg.epoch() > held.replica.epoch();
        let mandated = matches!(
            &msg,
            Msg::Append {
                mandate: Some(_),
                ..
            } | Msg::Alive {
                mandate: Some(_),
                ..
            }
        );
        let known = from == *held.replica.primary_peer()
            || held.replica.copies().contains(&from)
            || stale_primary
            || dropped_standing
            || (newer_primary && mandated);
        if !known {
            if newer_primary {
                out.push(Output::Misbehaviour {
                    peer: from,
                    what: format!(
                        "it named itself the home of job {job}, of which it holds no part"
                    ),
                });
            } else {
                out.push(Output::Notice(Notice::NotOfTheJob { job, from }));
            }
            if invited_now {
                self.replicas.jobs.remove(&job);
            }
            return;
        }
        if held.copy.is_none()
            && let Some(copy) = copy
        {
            held.copy = Some(copy);
        }
        let before = held.replica.primary_peer().clone();
        let epoch = msg.epoch().clone();
        let actions = held.replica.on_message(now, from.clone(), msg);
        let after = held.replica.primary_peer().clone();
        let primary = held.replica.is_primary();
        if invited_now {
            let taken = (*held.replica.epoch() == epoch)
                .then(|| held.copy.clone())
                .flatten();
            match taken {
                Some(copy) => {
                    out.push(Output::Notice(Notice::HoldingCopy {
                        job,
                        home: from.clone(),
                    }));
                    out.push(Output::CopyTaken {
                        job,
                        home: from,
                        copy,
                    });
                }
                // The inviter's epoch did not prove itself: no copy is kept
                // (the refusal the replica made reports it).
                None => {
                    self.replicas.jobs.remove(&job);
                }
            }
        }
        self.replica_actions(now, job, actions, out);
        if self
            .replicas
            .jobs
            .get(&job)
            .is_some_and(|h| h.replica.is_dropped())
        {
            self.forget_replica(now, job, true, out);
        }
        if before != after && !primary && after != self.me {
            self.follow(job, after, out);
        }
    }

    /// Forgets this node's replica of `job` (`dropped`: its primary dropped
    /// this node's copy, which is remembered for a while).
    fn forget_replica(&mut self, now: Time, job: JobId, dropped: bool, out: &mut Out<P, R, C>) {
        self.replicas.jobs.remove(&job);
        if dropped && self.replicas.dropped.len() < self.config.max_replicas {
            self.replicas.dropped.insert(job, now);
        }
        out.push(Output::CopyOver(job));
    }

    /// Heartbeats, leases and elections of every replica; replicas of jobs
    /// that ended a while ago are dropped.
    pub(super) fn tick_replicas(&mut self, now: Time, out: &mut Out<P, R, C>) {
        // Replicas of jobs long over, the primary's of a job that ended once
        // every copy holds its end, and copies the primary dropped. A
        // primary that forgot an ended job earlier (once one copy held the
        // end) answered a copy that missed the end, and stood for election,
        // as a node holding no replica: that copy then took the finished
        // job over from its live home (seen under churn).
        let kept = self.config.ended_kept;
        let over: Vec<(JobId, bool)> = self
            .replicas
            .iter()
            .filter(|(_, held)| {
                held.ended_at
                    .is_some_and(|at| now.saturating_sub(at) >= kept)
                    || (held.ended_at.is_some()
                        && held.replica.is_primary()
                        && held.replica.held_by_every_copy() >= held.replica.len())
                    || held.replica.is_dropped()
            })
            .map(|(job, held)| (job, held.replica.is_dropped()))
            .collect();
        let dropped_kept = self.config.dropped_kept;
        self.replicas
            .dropped
            .retain(|_, at| now.saturating_sub(*at) < dropped_kept);
        for (job, dropped) in over {
            self.forget_replica(now, job, dropped, out);
        }
        let jobs: Vec<JobId> = self.replicas.jobs.keys().copied().collect();
        for job in jobs {
            let Some(held) = self.replicas.jobs.get_mut(&job) else {
                continue;
            };
            // A copy that knows the job ended holds no election for it.
            if held.ended_at.is_some() && !held.replica.is_primary() {
                continue;
            }
            let actions = held.replica.tick(now);
            self.replica_actions(now, job, actions, out);
        }
    }

    /// `peer` is gone: copies whose primary it was stand for election at
    /// once rather than after the lease, and a home whose copy it held
    /// places another in its stead, if it hears most of its copies. A home
    /// that does not may be the one cut off: it keeps its copies (had it
    /// replaced them all by none, it would forget an ended job at once as
    /// held by every copy, and not step down when the cut heals).
    pub(super) fn replicas_peer_gone(&mut self, now: Time, peer: &P, out: &mut Out<P, R, C>) {
        let jobs: Vec<JobId> = self.replicas.jobs.keys().copied().collect();
        for job in jobs {
            let Some(held) = self.replicas.jobs.get_mut(&job) else {
                continue;
            };
            let replace = held.replica.is_primary()
                && held.ended_at.is_none()
                && held.replica.copies().contains(peer)
                && held.replica.in_touch(now);
            if replace && held.gone.len() < self.config.max_gone {
                held.gone.insert(peer.clone());
            }
            let mut actions = held.replica.peer_gone(now, peer);
            if replace {
                actions.extend(self.place_copies(job));
            }
            self.replica_actions(now, job, actions, out);
        }
    }

    /// Answers a member's report of a rank's end, which the scheduler has
    /// taken: once the end's entry is committed (a copy holds it).
    pub(super) fn acknowledge_end(
        &mut self,
        job: JobId,
        node: P,
        rank: u32,
        reply: R,
        out: &mut Out<P, R, C>,
    ) {
        let Some(held) = self.replicas.jobs.get_mut(&job) else {
            out.push(Output::EndAck(reply));
            return;
        };
        if !held.replica.is_primary() {
            // An old home, or a copy taken for the home: the member hears
            // to report it to the job's home.
            out.push(Output::NotHome { job, reply });
            return;
        }
        // An end not in the log (a stale worker's) is not the job's: it is
        // acknowledged at once.
        let index = end_index(held.replica.entries(), &node, rank).unwrap_or(0);
        if let Some(reply) = held.outbox.end_ack(&held.replica, index, node, reply) {
            out.push(Output::EndAck(reply));
        }
    }

    /// Executes a replica's actions.
    pub(super) fn replica_actions(
        &mut self,
        now: Time,
        job: JobId,
        mut actions: Vec<Action<P, JobEntry<P>>>,
        out: &mut Out<P, R, C>,
    ) {
        // Messages first: a new primary's first appends (sent when it takes
        // over) must not overtake what it said as a copy.
        actions.sort_by_key(|a| match a {
            Action::Send { .. } => 0,
            _ => 1,
        });
        for action in actions {
            match action {
                Action::Send { to, msg } => {
                    if to == self.me {
                        continue;
                    }
                    let with_copy = matches!(
                        &msg,
                        Msg::Append {
                            copies: Some(_),
                            ..
                        }
                    );
                    out.push(Output::Replica {
                        to,
                        job,
                        msg,
                        with_copy,
                    });
                }
                Action::BecamePrimary { epoch } => self.take_over(now, job, epoch.term, out),
                Action::SteppedDown { epoch } => {
                    // Grants not sent are the new primary's to make (and what
                    // waited behind them is stale); members waiting for the
                    // acknowledgement of an end report it to the new home.
                    let unsaid = self
                        .replicas
                        .jobs
                        .get_mut(&job)
                        .map(|h| h.outbox.step_down())
                        .unwrap_or_default();
                    for (_, reply) in unsaid {
                        out.push(Output::NotHome { job, reply });
                    }
                    self.step_down(job, epoch.primary, out);
                }
                Action::Refused { from, why } => {
                    if why.is_misbehaviour() {
                        out.push(Output::Misbehaviour {
                            peer: from,
                            what: format!("a replica message about job {job} was refused: {why}"),
                        });
                    } else {
                        out.push(Output::Notice(Notice::Refused { job, from, why }));
                    }
                }
                Action::Dropped { entries } => {
                    out.push(Output::Notice(Notice::EntriesDropped {
                        job,
                        count: entries.len(),
                    }));
                }
                Action::Appended { entries, .. } => {
                    let ended = entries
                        .iter()
                        .any(|e| matches!(e, JobEntry::Event(JobEvent::Ended { .. })));
                    if ended && let Some(held) = self.replicas.jobs.get_mut(&job) {
                        held.ended_at = Some(now);
                        out.push(Output::CopyOver(job));
                    }
                }
                // Words that waited for a copy to hold their entry go now.
                Action::Committed { index } => {
                    let ready = self
                        .replicas
                        .jobs
                        .get_mut(&job)
                        .map(|h| h.outbox.committed(index))
                        .unwrap_or_default();
                    for (to, word) in ready {
                        out.push(match word {
                            Word::Message(msg) => {
                                Output::Sched(crate::node::Output::Send { to, msg })
                            }
                            Word::EndAck(reply) => Output::EndAck(reply),
                        });
                    }
                }
            }
        }
        if let Some(held) = self.replicas.jobs.get_mut(&job)
            && held.told != *held.replica.copies()
        {
            held.told = held.replica.copies().clone();
            out.push(Output::CopiesChanged {
                job,
                copies: held.told.clone(),
            });
        }
    }

    /// The copies chose this node: it becomes the job's home in the state
    /// the log describes.
    fn take_over(&mut self, now: Time, job: JobId, term: u64, out: &mut Out<P, R, C>) {
        let Some(held) = self.replicas.jobs.get(&job) else {
            return;
        };
        let (Some(state), Some(copy)) =
            (JobState::replay(held.replica.entries()), held.copy.clone())
        else {
            out.push(Output::Notice(Notice::CannotTakeOver(job)));
            return;
        };
        // The home it ran under: the one this node's ranks answered to, or
        // the primary that wrote the log.
        let old_home = self
            .sched
            .home_of(job)
            .filter(|h| **h != self.me)
            .cloned()
            .or_else(|| {
                held.replica
                    .last_epoch()
                    .map(|e| e.primary)
                    .filter(|p| *p != self.me)
            });
        for (node, ranks) in state.ranks.by_node() {
            if node != self.me && self.config.watch_ranks {
                self.liveness.placed(now, job, node, &ranks);
            }
        }
        out.push(Output::TookOver {
            job,
            term,
            state: Box::new(state.clone()),
            copy,
            old_home,
        });
        let sched = self.sched.adopt(now, job, term, state);
        self.follow(job, self.me.clone(), out);
        self.sched_outputs(now, sched, out);
        let actions = self.place_copies(job);
        self.replica_actions(now, job, actions, out);
    }

    /// A newer primary is in charge: this node is no longer the job's home.
    fn step_down(&mut self, job: JobId, primary: P, out: &mut Out<P, R, C>) {
        if !self.sched.step_down(job, primary.clone()) {
            return;
        }
        self.liveness.forget_job(job);
        self.verdicts.forget_job(job);
        out.push(Output::SteppedDown {
            job,
            primary: primary.clone(),
        });
        out.push(Output::HomeMoved { job, home: primary });
    }
}

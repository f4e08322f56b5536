//! Failover (issue 16): every home job's state is replicated, and a home
//! that fails is taken over by one of its copies.
//!
//! With a scenario's `[failover]` (or [`Sim::enable_failover`]), the home
//! of every job holds the primary [`Replica`] of the job's log: the job's
//! spec first ([`JobEntry::Submitted`]), then each of the home's job
//! events as its scheduler outputs them. The copies are the nodes that run
//! the job's ranks, and near nodes of the home that run none while those
//! are fewer than the replication degree (the home's own measured links,
//! nearest first). Replica messages travel through the simulated network
//! with its latencies and are lost to and from failed or isolated nodes;
//! the replicas of a job are ticked every [`TICK`].
//!
//! When a copy wins an election ([`Action::BecamePrimary`]), the simulator
//! replays its log into a [`JobState`] and hands it to that node's
//! scheduler ([`Scheduler::adopt`](zorilla_core::node::Scheduler::adopt)),
//! which tells the job's nodes with a placement; a member whose replica
//! follows the new primary then moves the job's home
//! ([`Scheduler::home_moved`](zorilla_core::node::Scheduler::home_moved)).
//! An old primary that learns of a newer epoch drops the job
//! ([`Scheduler::step_down`](zorilla_core::node::Scheduler::step_down)).
//!
//! A member reports each worker's end to the primary its replica follows
//! and again every [`REPORT_RETRY`] until the primary acknowledges it; the
//! primary acknowledges only once the end is committed (held by a copy),
//! so an acknowledged output is never lost with the home. Its grants, and
//! what follows one to the same node, wait for a copy too. Both are the
//! core's rule ([`zorilla_core::commit::Outbox`]), held as the node holds
//! them.
//!
//! A copy that the primary drops (a near node once the ranks' nodes are
//! copies enough, the old primary after an election) hears so from the
//! primary's append that leaves it out
//! ([`Replica::is_dropped`](zorilla_core::replica::Replica::is_dropped)) and
//! forgets its replica: left alone, two dropped copies would elect one of
//! them when their lease runs out. Copies are placed by the core's
//! [`choose_copies`], as in the node.
//!
//! The checks ([`Sim::check_failover`], after every event through
//! [`Sim::check_invariants`]; [`Sim::check_jobs_ended`] at the end): at
//! most one primary per epoch of a job, every acknowledged rank end in the
//! log of the primary in charge, no worker running [`STOP_BOUND`] after
//! its job ended, and every job ended by the end of the run (unless every
//! node that held its state failed: beyond what a degree covers).

use std::collections::btree_map::Entry as MapEntry;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use zorilla_core::Time;
use zorilla_core::advert::{JobId, Message, Phase, Placed};
use zorilla_core::commit::{Outbox, Word, end_index};
use zorilla_core::copies::choose_copies;
use zorilla_core::liveness::LostCause;
use zorilla_core::node::{Input, JobEntry, JobEvent, JobSpec, JobState, WorkerEnd};
use zorilla_core::replica::{Action, Msg, Replica, StandInSigner};

use super::failover_report::*;
use super::{Event, Sim};

/// How often the replicas of a job are ticked.
pub(super) const TICK: Duration = Duration::from_millis(50);
/// How often a member reports again a worker's end not yet acknowledged.
pub(super) const REPORT_RETRY: Duration = Duration::from_secs(1);
/// What a job's log holds.
pub(super) type Entry = JobEntry<u32>;
/// A replica message between simulated nodes.
pub(super) type ReplicaMsg = Msg<u32, Entry>;
pub(super) type Rep = Replica<u32, Entry>;

/// Node `node`'s signer of its votes: the core's stand-in (every node is
/// played by the simulator, which checks the protocol, not cryptography).
fn signer(node: u32) -> std::sync::Arc<dyn zorilla_core::replica::Signer<u32>> {
    std::sync::Arc::new(StandInSigner::new(node))
}

/// A primary's acknowledgement of a rank's end that waits for its log (see
/// [`zorilla_core::commit`]): the rank and its worker's incarnation.
pub(super) type EndAck = (u32, u32);

/// The replicas of one job, by node.
#[derive(Debug, Default)]
pub(super) struct Replicated {
    pub(super) replicas: BTreeMap<u32, Rep>,
    /// Copies on near nodes that run none of the job's ranks.
    pub(super) extras: BTreeSet<u32>,
    /// Nodes the job's primary was told are gone (until they rejoin).
    pub(super) gone: BTreeSet<u32>,
    /// Each primary's words that wait for its log.
    pub(super) outboxes: BTreeMap<u32, Outbox<u32, EndAck>>,
    /// The primary in charge was lost (failed or cut off): who, when.
    pub(super) lost_at: Option<(u32, Time)>,
    /// The job ended and its end is committed: its replicas tick no more.
    pub(super) retired: bool,
    /// Every node holding its state failed.
    pub(super) orphaned: bool,
    /// Nodes whose copy the primary dropped (they never say they hold
    /// none, see the core's `Msg::Absent`).
    pub(super) dropped: BTreeSet<u32>,
    /// Nodes that failed while the job ran (also those that came back).
    pub(super) failed: BTreeSet<u32>,
    /// When the job ended (as the primary in charge said).
    pub(super) ended_at: Option<Time>,
}

/// The simulator's replication state (see the [module docs](self)).
#[derive(Debug, Default)]
pub(super) struct Failover {
    pub(super) config: FailoverConfig,
    pub(super) jobs: BTreeMap<JobId, Replicated>,
    /// Every (job, term) and its primary, ever seen.
    pub(super) primaries: BTreeMap<(JobId, u64), u32>,
    /// Rank ends acknowledged, per job: (node, rank).
    pub(super) acknowledged: BTreeMap<JobId, BTreeSet<(u32, u32)>>,
    /// Members' worker ends not yet acknowledged: rank -> incarnation.
    pub(super) unacked: BTreeMap<(u32, JobId), BTreeMap<u32, u32>>,
    /// The job's home as each member knows it (from its grant, then moved).
    pub(super) known_home: BTreeMap<(u32, JobId), u32>,
    pub(super) report: FailoverReport,
}

impl Failover {
    pub(super) fn new(config: FailoverConfig) -> Self {
        Failover {
            config,
            ..Failover::default()
        }
    }
}

impl Sim {
    /// Replicates every home job from now on, with `config` (see the
    /// [module docs](self)). Call it before the first event.
    pub fn enable_failover(&mut self, config: FailoverConfig) {
        self.failover = Some(Box::new(Failover::new(config)));
    }

    /// Cuts `node` off from every other node at `at` (a partition: it runs
    /// on, but no message reaches it or leaves it).
    pub fn isolate_at(&mut self, node: u32, at: Time) {
        self.push(at, Event::Isolate { node });
    }

    /// Fails the home of a random running job at `at` (as the scenario's
    /// `home_failures_per_s` does).
    pub fn fail_a_home_at(&mut self, at: Time) {
        self.push(at, Event::FailHome);
    }

    /// Ends the partition of `node` at `at`.
    pub fn heal_at(&mut self, node: u32, at: Time) {
        self.push(at, Event::Heal { node });
    }

    /// What the replication did so far (`None` without failover).
    pub fn failover_report(&self) -> Option<FailoverReport> {
        let f = self.failover.as_ref()?;
        let mut report = f.report.clone();
        report.acknowledged = f.acknowledged.values().map(BTreeSet::len).sum();
        report.orphaned = f
            .jobs
            .iter()
            .filter(|(_, r)| r.orphaned)
            .map(|(job, _)| *job)
            .collect();
        Some(report)
    }

    /// The live primary in charge of `job` (the highest term), if any.
    pub fn primary_of(&self, job: JobId) -> Option<u32> {
        let r = self.failover.as_ref()?.jobs.get(&job)?;
        r.replicas
            .iter()
            .filter(|(n, rep)| rep.is_primary() && self.nodes[**n as usize].alive)
            .max_by_key(|(_, rep)| rep.epoch().term)
            .map(|(n, _)| *n)
    }

    /// The nodes holding a replica of `job` (the primary included).
    pub fn replica_holders(&self, job: JobId) -> Vec<u32> {
        self.failover
            .as_ref()
            .and_then(|f| f.jobs.get(&job))
            .map(|r| r.replicas.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Whether a message from `a` gets to `b`: both up, and neither cut
    /// off (a node always reaches itself).
    pub(super) fn reachable(&self, a: u32, b: u32) -> bool {
        self.nodes[a as usize].alive
            && self.nodes[b as usize].alive
            && (a == b || (!self.isolated.contains(&a) && !self.isolated.contains(&b)))
    }

    /// A job is submitted to `home`: its primary replica logs the spec and
    /// places its first copies.
    pub(super) fn failover_submit(&mut self, home: u32, job: JobId, spec: &JobSpec) {
        let now = self.now;
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        let mut replica = Rep::primary(job.0, home, now, f.config.timing, signer(home));
        let mut out = Vec::new();
        let entry = JobEntry::Submitted {
            spec: spec.clone(),
            owner: None,
        };
        if replica.propose(entry, &mut out).is_err() {
            return;
        }
        let r = f.jobs.entry(job).or_default();
        r.replicas.insert(home, replica);
        f.primaries.insert((job, 0), home);
        self.replica_actions(home, job, out);
        self.place_copies(job);
        self.push(now + TICK, Event::ReplicaTick { job });
    }

    /// A job event a node's scheduler output: the primary logs it. Whether
    /// it is the job's (from the primary in charge) and counts in its
    /// record.
    pub(super) fn replicate_event(&mut self, node: u32, event: &JobEvent<u32>) -> bool {
        let now = self.now;
        let Some(f) = self.failover.as_mut() else {
            return true;
        };
        let Some(entry) = JobEntry::of(event) else {
            return true;
        };
        let job = event.job();
        let Some(r) = f.jobs.get_mut(&job) else {
            return true;
        };
        let in_charge = self.jobs.get(&job).is_some_and(|rec| rec.home == node);
        if !r.replicas.get(&node).is_some_and(|rep| rep.is_primary()) {
            f.report.stale_events += 1;
            return false;
        }
        if !in_charge {
            f.report.stale_events += 1;
        }
        if in_charge && matches!(event, JobEvent::Ended { .. }) {
            r.ended_at.get_or_insert(now);
        }
        // A grant still held that the home took back goes nowhere; what
        // waited behind it goes now (as in the node).
        let now_sent = r
            .outboxes
            .get_mut(&node)
            .map(|o| o.take_back(event))
            .unwrap_or_default();
        let Some(replica) = r.replicas.get_mut(&node) else {
            return false;
        };
        let mut out = Vec::new();
        // A full log (MAX_LOG entries) takes nothing more: the job's later
        // events live at the home only.
        let _ = replica.propose(entry, &mut out);
        for (to, msg) in now_sent {
            self.send_now(node, to, msg);
        }
        self.replica_actions(node, job, out);
        if matches!(
            event,
            JobEvent::Granted { .. } | JobEvent::WorkersLost { .. } | JobEvent::Started { .. }
        ) {
            self.place_copies(job);
        }
        in_charge
    }

    /// The primary in charge of `job` places its copies: the nodes running
    /// its ranks, and near nodes running none while those are fewer than
    /// the degree (those placed before kept first).
    pub(super) fn place_copies(&mut self, job: JobId) {
        let Some(primary) = self.primary_of(job) else {
            return;
        };
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        let degree = f.config.degree;
        let Some(r) = f.jobs.get_mut(&job) else {
            return;
        };
        let node = &self.nodes[primary as usize];
        let members: Vec<u32> = node
            .scheduler
            .placement(job)
            .map(|p| p.keys().copied().collect())
            .unwrap_or_default();
        let near: Vec<(u32, Option<Duration>)> = node
            .neighbours
            .iter()
            .map(|(p, rtt)| (*p, Some(*rtt)))
            .collect();
        let gone = &r.gone;
        let placed = choose_copies(
            job.0,
            &primary,
            members,
            &r.extras,
            &near,
            |p| !gone.contains(p),
            degree,
        );
        r.extras = placed.extras;
        let copies = placed.all;
        let Some(replica) = r.replicas.get_mut(&primary) else {
            return;
        };
        if *replica.copies() == copies {
            return;
        }
        let out = replica.set_copies(copies, 1);
        self.replica_actions(primary, job, out);
    }

    pub(super) fn count_replica_message(&mut self, job: JobId) {
        self.messages += 1;
        *self.by_kind.entry("replica").or_default() += 1;
        if let Some(f) = self.failover.as_mut() {
            f.report.replica_messages += 1;
        }
        if let Some(record) = self.jobs.get_mut(&job) {
            record.replica_messages += 1;
        }
    }

    /// Executes a replica's actions at `node`.
    pub(super) fn replica_actions(
        &mut self,
        node: u32,
        job: JobId,
        actions: Vec<Action<u32, Entry>>,
    ) {
        // A new primary's first appends go out before anything its
        // adoption sends (the copies it places next among them): a copy
        // must learn the copies from the latest append, not an older one.
        let mut became = None;
        for action in actions {
            match action {
                Action::Send { to, msg } => {
                    if to == node {
                        continue;
                    }
                    self.count_replica_message(job);
                    let at = self.now + self.one_way(node, to);
                    self.push(
                        at,
                        Event::Replica {
                            to,
                            from: node,
                            job,
                            msg,
                        },
                    );
                }
                // A copy replays its log only when it takes over.
                Action::Appended { .. } => {}
                Action::Committed { index } => self.committed(node, job, index),
                Action::BecamePrimary { epoch } => became = Some(epoch.term),
                Action::SteppedDown { epoch } => {
                    if let Some(f) = self.failover.as_mut() {
                        f.report.stepped_down += 1;
                        if let Some(r) = f.jobs.get_mut(&job) {
                            // Grants not sent are the new primary's to make;
                            // members report their ends to it again.
                            r.outboxes.remove(&node);
                        }
                    }
                    self.nodes[node as usize]
                        .scheduler
                        .step_down(job, epoch.primary);
                }
                // Entries only an old primary held: job events of a home
                // that was cut off. Nothing of them was acknowledged (none
                // was committed), and the members whose reports they logged
                // report again to the primary in charge.
                Action::Dropped { .. } => {}
                // The simulator's nodes are honest: a refusal of one as
                // misbehaving is a bug of the protocol.
                Action::Refused { from, why } => assert!(
                    !why.is_misbehaviour(),
                    "node {node} refused a replica message of node {from}: {why}"
                ),
            }
        }
        if let Some(term) = became {
            self.became_primary(node, job, term);
        }
    }

    /// A replica message arrives. A node that holds no replica of the job
    /// becomes a copy on the first append it gets.
    pub(super) fn replica_message(&mut self, to: u32, from: u32, job: JobId, msg: ReplicaMsg) {
        if !self.reachable(from, to) {
            return;
        }
        let now = self.now;
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        let timing = f.config.timing;
        // A new copy starts from the job's first home, as the node's does
        // (it knows it from the job's id).
        let Some(&first) = f.primaries.get(&(job, 0)) else {
            return;
        };
        let Some(r) = f.jobs.get_mut(&job) else {
            return;
        };
        let replica = match r.replicas.entry(to) {
            MapEntry::Occupied(e) => e.into_mut(),
            MapEntry::Vacant(e) => {
                if !matches!(msg, Msg::Append { .. }) {
                    // A standing hears that this node holds no replica,
                    // unless the primary dropped this node's copy.
                    let answer = Rep::answer_without_replica(job.0, &msg, &StandInSigner::new(to))
                        .filter(|_| !r.dropped.contains(&to));
                    let send = answer.map(|msg| Action::Send { to: from, msg });
                    self.replica_actions(to, job, send.into_iter().collect());
                    return;
                }
                e.insert(Rep::copy(job.0, to, first, now, timing, signer(to)))
            }
        };
        let out = replica.on_message(now, from, msg);
        if replica.is_dropped() {
            r.replicas.remove(&to);
            r.dropped.insert(to);
        }
        self.replica_actions(to, job, out);
    }

    /// Time passes for the replicas of `job`.
    pub(super) fn replica_tick(&mut self, job: JobId) {
        let now = self.now;
        let Some(r) = self.failover.as_ref().and_then(|f| f.jobs.get(&job)) else {
            return;
        };
        if r.retired {
            return;
        }
        let nodes: Vec<u32> = r
            .replicas
            .keys()
            .copied()
            .filter(|n| self.nodes[*n as usize].alive)
            .collect();
        if nodes.is_empty() {
            return;
        }
        for node in nodes {
            let out = self
                .failover
                .as_mut()
                .and_then(|f| f.jobs.get_mut(&job))
                .and_then(|r| r.replicas.get_mut(&node))
                .map(|rep| rep.tick(now))
                .unwrap_or_default();
            self.replica_actions(node, job, out);
        }
        self.push(now + TICK, Event::ReplicaTick { job });
    }

    /// Entries up to `index` are committed at primary `node`: the rank
    /// ends waiting for them are acknowledged, and a job whose end is
    /// committed retires its replicas.
    pub(super) fn committed(&mut self, node: u32, job: JobId, index: u64) {
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        let Some(r) = f.jobs.get_mut(&job) else {
            return;
        };
        let ready = r
            .outboxes
            .get_mut(&node)
            .map(|o| o.committed(index))
            .unwrap_or_default();
        let ended = r.replicas.get(&node).is_some_and(|rep| {
            rep.entries()
                .take(index as usize)
                .any(|e| matches!(e, JobEntry::Event(JobEvent::Ended { .. })))
        });
        let in_charge = self.jobs.get(&job).is_some_and(|rec| rec.home == node);
        if ended && in_charge {
            r.retired = true;
        }
        self.say(node, job, ready);
    }

    /// The primary at `home` acknowledges a rank's end to its member
    /// (`kept`: its end is in the log; otherwise the worker was stale and
    /// its end is not the job's).
    pub(super) fn acknowledge(
        &mut self,
        home: u32,
        job: JobId,
        member: u32,
        rank: u32,
        incarnation: u32,
        kept: bool,
    ) {
        if kept && let Some(f) = self.failover.as_mut() {
            f.acknowledged
                .entry(job)
                .or_default()
                .insert((member, rank));
        }
        let at = self.now + self.one_way(home, member);
        self.push(
            at,
            Event::RankAck {
                to: member,
                from: home,
                job,
                rank,
                incarnation,
            },
        );
    }

    /// A copy at `node` won the election for `job`: the simulator replays
    /// its log and the node's scheduler adopts the job.
    pub(super) fn became_primary(&mut self, node: u32, job: JobId, term: u64) {
        let now = self.now;
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        if let Some(other) = f.primaries.insert((job, term), node)
            && other != node
        {
            self.violations.push(format!(
                "{now:?}: {job}: two primaries in term {term}: nodes {other} and {node} \
                 (at most one primary per epoch)"
            ));
        }
        let Some(r) = f.jobs.get_mut(&job) else {
            return;
        };
        let lost = r.lost_at.take();
        let from = lost.map_or_else(
            || self.jobs.get(&job).map_or(node, |rec| rec.home),
            |(n, _)| n,
        );
        f.report.takeovers.push(Takeover {
            job,
            from,
            to: node,
            term,
            after: lost.map(|(_, at)| now.saturating_sub(at)),
        });
        let entries: Vec<Entry> = r
            .replicas
            .get(&node)
            .map(|rep| rep.entries().cloned().collect())
            .unwrap_or_default();
        if let Some(record) = self.jobs.get_mut(&job) {
            record.home = node;
            record.home_moves += 1;
        }
        if let Some(state) = JobState::replay(&entries) {
            let out = self.nodes[node as usize]
                .scheduler
                .adopt(now, job, term, state);
            self.resync_record(node, job);
            self.execute(node, out);
            // The log says where ranks run; the new home also knows which
            // of those nodes are gone (the old home among them, most
            // often), as a home does when its connections to them close.
            let gone = self
                .failover
                .as_ref()
                .and_then(|f| f.jobs.get(&job))
                .map(|r| r.gone.clone());
            let placed = self.nodes[node as usize]
                .scheduler
                .placement(job)
                .unwrap_or_default();
            for peer in placed
                .into_keys()
                .filter(|p| gone.as_ref().is_some_and(|g| g.contains(p)))
            {
                self.feed(node, Input::PeerLost(peer));
            }
            // A node that failed and came back since forgot the ranks it
            // ran, and a node whose grant was lost with the old home never
            // started its ranks: the new home's liveness checks find them
            // not running (see the core's `liveness`), modelled here at
            // once.
            self.unrun_ranks_lost(node, job);
        }
        self.place_copies(job);
    }

    /// The new home `home` of `job` learns which ranks placed on live nodes
    /// do not run there: those of nodes that failed and rejoined since
    /// ([`LostCause::Restarted`]), and those whose grant never arrived (the
    /// old home failed with it on its way; [`LostCause::NotRunning`]).
    fn unrun_ranks_lost(&mut self, home: u32, job: JobId) {
        let Some(restarted) = self
            .failover
            .as_ref()
            .and_then(|f| f.jobs.get(&job))
            .map(|r| r.failed.clone())
        else {
            return;
        };
        let mut lost: BTreeMap<(u32, bool), Vec<u32>> = BTreeMap::new();
        if let Some(table) = self.nodes[home as usize].scheduler.ranks(job) {
            for (rank, r) in table.iter() {
                let runs = self
                    .running
                    .get(&(r.node, job))
                    .is_some_and(|ranks| ranks.get(&rank) == Some(&r.incarnation));
                let ever_started = self
                    .jobs
                    .get(&job)
                    .and_then(|record| record.started.get(&r.node))
                    .is_some_and(|ranks| ranks.contains(&rank));
                let alive = self.nodes[r.node as usize].alive;
                let was_restarted = restarted.contains(&r.node);
                if r.outcome.is_none() && alive && !runs && (was_restarted || !ever_started) {
                    lost.entry((r.node, was_restarted)).or_default().push(rank);
                }
            }
        }
        for ((node, was_restarted), ranks) in lost {
            let cause = if was_restarted {
                LostCause::Restarted
            } else {
                LostCause::NotRunning
            };
            self.feed(
                home,
                Input::RanksLost {
                    job,
                    node,
                    ranks,
                    cause,
                },
            );
        }
    }

    /// After a takeover the job is what the new home's log says: grants
    /// and an end the old home made but did not get to a copy are undone
    /// in the simulator's record (the new home grants those ranks again,
    /// and ends the job again).
    pub(super) fn resync_record(&mut self, node: u32, job: JobId) {
        let scheduler = &self.nodes[node as usize].scheduler;
        let phase = scheduler.phase(job);
        let placement = scheduler.placement(job).unwrap_or_default();
        let Some(record) = self.jobs.get_mut(&job) else {
            return;
        };
        record.ranks = placement
            .iter()
            .map(|(n, ranks)| (*n, ranks.iter().copied().collect()))
            .collect();
        record.placement = placement
            .iter()
            .map(|(n, ranks)| (*n, ranks.len() as u32))
            .collect();
        if phase.is_some_and(|p| p <= Phase::Running)
            && record.ended.take().is_some()
            && let Some(f) = self.failover.as_mut()
        {
            f.report.ends_redone += 1;
            if let Some(r) = f.jobs.get_mut(&job) {
                r.ended_at = None;
                r.retired = false;
            }
        }
    }

    /// A member heard a job's placement: from a node its replica follows
    /// as the job's primary, the job's home moves there. Ranks running here
    /// that the new home does not place here were granted by an old home
    /// whose grant was lost with it: they stop.
    pub(super) fn placement_heard(
        &mut self,
        node: u32,
        job: JobId,
        home: u32,
        placement: &BTreeMap<u32, Placed<u32>>,
    ) {
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        let known = f.known_home.get(&(node, job)).copied();
        if known.is_none_or(|k| k == home) {
            return;
        }
        let follows = f
            .jobs
            .get(&job)
            .and_then(|r| r.replicas.get(&node))
            .is_some_and(|rep| *rep.primary_peer() == home);
        if !follows {
            return;
        }
        f.known_home.insert((node, job), home);
        let orphans: Vec<u32> = self
            .running
            .get(&(node, job))
            .map(|ranks| {
                ranks
                    .iter()
                    .filter(|(rank, inc)| {
                        placement
                            .get(rank)
                            .is_none_or(|p| p.node != node || p.incarnation != **inc)
                    })
                    .map(|(rank, _)| *rank)
                    .collect()
            })
            .unwrap_or_default();
        self.nodes[node as usize].scheduler.home_moved(job, home);
        if !orphans.is_empty() {
            if let Some(f) = self.failover.as_mut() {
                f.report.orphan_workers += orphans.len() as u64;
            }
            if let Some(ranks) = self.running.get_mut(&(node, job)) {
                for rank in &orphans {
                    ranks.remove(rank);
                }
                if ranks.is_empty() {
                    self.running.remove(&(node, job));
                }
            }
            self.workers_gone(node, job, orphans.len() as u32);
            self.feed(
                node,
                Input::WorkersEnded {
                    job,
                    ranks: orphans,
                },
            );
        }
    }

    /// A member starts workers of a job granted by `home` (grant
    /// `incarnation`). Checked: a grant to another node reaches it only
    /// once a copy holds its entry (the core's rule,
    /// [`zorilla_core::commit`]), so that a copy that takes the job over
    /// knows of these workers.
    pub(super) fn workers_started(&mut self, node: u32, job: JobId, home: u32, incarnation: u32) {
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        f.known_home.entry((node, job)).or_insert(home);
        let Some(rep) = f.jobs.get(&job).and_then(|r| r.replicas.get(&home)) else {
            return;
        };
        if node == home || !rep.is_primary() {
            return;
        }
        let logged = rep.entries().position(|e| {
            matches!(e, JobEntry::Event(JobEvent::Granted { node: n, incarnation: i, .. })
                if *n == node && *i == incarnation)
        });
        if logged.is_some_and(|at| at as u64 >= rep.committed()) {
            self.violations.push(format!(
                "at {:?}: node {node} started workers of job {} on grant {incarnation} of home {home} before a copy held it",
                self.now, job.0
            ));
        }
    }

    /// Workers of a job ended on `node`: their ends wait to be
    /// acknowledged, reported now and again until they are.
    pub(super) fn failover_workers_ended(
        &mut self,
        node: u32,
        job: JobId,
        ranks: &BTreeMap<u32, u32>,
    ) {
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        f.unacked
            .entry((node, job))
            .or_default()
            .extend(ranks.iter().map(|(r, i)| (*r, *i)));
        self.send_reports(node, job);
    }

    /// A member reports its unacknowledged ends of `job` to the primary it
    /// knows, and again after [`REPORT_RETRY`].
    pub(super) fn send_reports(&mut self, node: u32, job: JobId) {
        let Some(f) = self.failover.as_ref() else {
            return;
        };
        let Some(ranks) = f.unacked.get(&(node, job)).filter(|r| !r.is_empty()) else {
            return;
        };
        let ranks = ranks.clone();
        let target = f
            .jobs
            .get(&job)
            .and_then(|r| r.replicas.get(&node))
            .map(|rep| *rep.primary_peer())
            .or_else(|| f.known_home.get(&(node, job)).copied())
            .or_else(|| self.jobs.get(&job).map(|rec| rec.home));
        if let Some(home) = target {
            let at = self.now + self.one_way(node, home);
            for (rank, incarnation) in ranks {
                self.push(
                    at,
                    Event::RankReport {
                        home,
                        from: node,
                        job,
                        rank,
                        incarnation,
                    },
                );
            }
        }
        self.push(self.now + REPORT_RETRY, Event::ReportRetry { node, job });
    }

    /// A member's retry timer.
    pub(super) fn report_retry(&mut self, node: u32, job: JobId) {
        if self.nodes[node as usize].alive {
            self.send_reports(node, job);
        }
    }

    /// A rank's end reaches `home`. Only the primary takes it; it
    /// acknowledges once the end is committed.
    pub(super) fn report_received(
        &mut self,
        home: u32,
        from: u32,
        job: JobId,
        rank: u32,
        incarnation: u32,
    ) {
        if !self.reachable(from, home) {
            return;
        }
        let primary = |sim: &Sim| {
            sim.failover
                .as_ref()
                .and_then(|f| f.jobs.get(&job))
                .and_then(|r| r.replicas.get(&home))
                .filter(|rep| rep.is_primary())
                .is_some()
        };
        if !primary(self) {
            return;
        }
        let input = Input::RankEnded {
            job,
            node: from,
            rank,
            incarnation,
            end: WorkerEnd::Exited(0),
        };
        self.feed(home, input);
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        let Some(r) = f.jobs.get_mut(&job) else {
            return;
        };
        let Some(rep) = r.replicas.get(&home) else {
            return;
        };
        // An end not in the log (a stale worker's) is not the job's: it is
        // acknowledged at once, and not counted as kept.
        let Some(index) = end_index(rep.entries(), &from, rank) else {
            return self.acknowledge(home, job, from, rank, incarnation, false);
        };
        let outbox = r.outboxes.entry(home).or_default();
        if outbox
            .end_ack(rep, index, from, (rank, incarnation))
            .is_some()
        {
            self.acknowledge(home, job, from, rank, incarnation, true);
        }
    }

    /// A scheduling message of the primary at `node`: a grant goes once a
    /// copy holds it, and what follows it to the same node waits behind
    /// it (the core's rule, as in the node). The message back if it can go
    /// now.
    pub(super) fn hold_message(
        &mut self,
        node: u32,
        to: u32,
        msg: Message<u32>,
    ) -> Option<Message<u32>> {
        let Some(r) = self
            .failover
            .as_mut()
            .and_then(|f| f.jobs.get_mut(&msg.job()))
        else {
            return Some(msg);
        };
        let Some(rep) = r.replicas.get(&node) else {
            return Some(msg);
        };
        r.outboxes.entry(node).or_default().message(rep, to, msg)
    }

    /// The primary at `node` says the words whose time came.
    fn say(&mut self, node: u32, job: JobId, words: Vec<(u32, Word<u32, EndAck>)>) {
        for (to, word) in words {
            match word {
                Word::Message(msg) => self.send_now(node, to, msg),
                Word::EndAck((rank, incarnation)) => {
                    self.acknowledge(node, job, to, rank, incarnation, true)
                }
            }
        }
    }

    /// A member hears that its rank's end is acknowledged.
    pub(super) fn ack_received(
        &mut self,
        to: u32,
        from: u32,
        job: JobId,
        rank: u32,
        incarnation: u32,
    ) {
        if !self.reachable(from, to) {
            return;
        }
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        if let Some(ranks) = f.unacked.get_mut(&(to, job)) {
            if ranks.get(&rank) == Some(&incarnation) {
                ranks.remove(&rank);
            }
            if ranks.is_empty() {
                f.unacked.remove(&(to, job));
            }
        }
    }
}

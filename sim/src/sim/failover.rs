//! Failover (issue 16), as the node runs it: every node is the core's
//! [`JobMachine`], which replicates the jobs it is home to, places their
//! copies, holds a home's grants and acknowledgements of rank ends until a
//! copy holds their entry, has a copy that wins an election take the job
//! over and an old home step down. The simulator only carries the machines'
//! messages through its network, answers their liveness questions from
//! what runs where, and watches.
//!
//! With a scenario's `[failover]`, the machines replicate (the degree and
//! timing of its setup); without, they do not (a grid whose homes never
//! fail, as the paper's), and every word goes at once. Replica messages
//! travel with the network's latencies and are lost to and from failed or
//! isolated nodes.
//!
//! A member reports each worker's end to the primary its replica follows
//! and again every [`REPORT_RETRY`] until the primary acknowledges it (the
//! node's member does the same).
//!
//! The checks ([`Sim::check_failover`], after every event through
//! [`Sim::check_invariants`]; [`Sim::check_jobs_ended`] at the end): at
//! most one primary per epoch of a job, every acknowledged rank end in the
//! log of the primary in charge, no worker running [`STOP_BOUND`] after
//! its job ended, no member starting workers on a grant no copy held, and
//! every job ended by the end of the run (unless every node that held its
//! state failed: beyond what a degree covers).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use zorilla_core::Time;
use zorilla_core::advert::{JobId, Phase, Placed};
use zorilla_core::commit::end_index;
use zorilla_core::liveness::{Answer, Question};
use zorilla_core::machine::{self, JobMachine, MachineConfig, Origin};
use zorilla_core::node::{JobEntry, JobEvent, JobState, WorkerEnd};
use zorilla_core::replica::Msg;

use super::failover_report::*;
use super::{Event, RunEnd, Sim};

/// How often a machine's replicas tick.
const TICK: Duration = Duration::from_millis(50);
/// How often a member reports again a worker's end not yet acknowledged.
pub(super) const REPORT_RETRY: Duration = Duration::from_secs(1);
/// A replica message between simulated nodes.
pub(super) type ReplicaMsg = Msg<u32, JobEntry<u32>>;

/// A job's copy as the simulator hands it on: the job's first home (the
/// node binds it to the job's id; here every node is honest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SimCopy(pub(super) u32);

impl Origin<u32> for SimCopy {
    fn first_home(&self, _job: JobId) -> Option<u32> {
        Some(self.0)
    }
}

/// A member's report of a rank's end, as the home answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct EndAck {
    job: JobId,
    member: u32,
    rank: u32,
    incarnation: u32,
}

/// A simulated node's part in jobs: the same machine the node runs.
pub(super) type Machine = JobMachine<u32, EndAck, SimCopy>;
/// What a machine asks the simulator to do.
pub(super) type MachineOutput = machine::Output<u32, EndAck, SimCopy>;
/// What the simulator tells a machine.
pub(super) type MachineInput = machine::Input<u32, EndAck, SimCopy>;

/// What the simulator watches of one job's replication.
#[derive(Debug, Default)]
pub(super) struct Watched {
    /// The job's first home.
    pub(super) first: u32,
    /// The primary in charge was lost (failed or cut off): who, when.
    pub(super) lost_at: Option<(u32, Time)>,
    /// Every node holding its state failed.
    pub(super) orphaned: bool,
    /// Nodes that failed while the job ran (also those that came back).
    pub(super) failed: BTreeSet<u32>,
    /// When the job ended (as the primary in charge said).
    pub(super) ended_at: Option<Time>,
}

/// The simulator's side of replication (see the [module docs](self)).
#[derive(Debug, Default)]
pub(super) struct Failover {
    pub(super) config: FailoverConfig,
    pub(super) jobs: BTreeMap<JobId, Watched>,
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
    /// [module docs](self)). Call it before the nodes are made.
    pub fn enable_failover(&mut self, config: FailoverConfig) {
        self.failover = Some(Box::new(Failover::new(config)));
    }

    /// The machine's configuration for this run: replication with
    /// `[failover]`, liveness questions where nodes can fail.
    pub(super) fn machine_config(&self) -> MachineConfig {
        let watch_ranks = self.failover.is_some() || self.scenario.churn.is_some();
        match &self.failover {
            Some(f) => MachineConfig {
                replicate: true,
                watch_ranks,
                timing: f.config.timing,
                degree: f.config.degree,
                tick: TICK,
                ..MachineConfig::default()
            },
            None => MachineConfig {
                replicate: false,
                watch_ranks,
                tick: TICK,
                ..MachineConfig::default()
            },
        }
    }

    /// `node`'s links changed: with replication, its machine hears them
    /// (the candidates for its jobs' extra copies, as the node's overlay
    /// tells its neighbours), if they differ from what it heard last.
    pub(super) fn tell_links(&mut self, node: u32) {
        if self.failover.is_none() {
            return;
        }
        let n = &mut self.nodes[node as usize];
        if !n.alive || n.links_told.iter().eq(n.neighbours.iter().map(|(p, _)| p)) {
            return;
        }
        n.links_told = n.neighbours.iter().map(|(p, _)| *p).collect();
        let near = n
            .neighbours
            .iter()
            .map(|(p, rtt)| (*p, Some(*rtt)))
            .collect();
        self.feed_machine(node, MachineInput::Neighbours(near));
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
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.alive)
            .filter_map(|(i, n)| n.machine.replica(job).map(|rep| (i as u32, rep)))
            .filter(|(_, rep)| rep.is_primary())
            .max_by_key(|(_, rep)| rep.epoch().term)
            .map(|(n, _)| n)
    }

    /// The nodes holding a replica of `job` (the primary included).
    pub fn replica_holders(&self, job: JobId) -> Vec<u32> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.alive && n.machine.replica(job).is_some())
            .map(|(i, _)| i as u32)
            .collect()
    }

    /// Whether a message from `a` gets to `b`: both up, and neither cut
    /// off (a node always reaches itself).
    pub(super) fn reachable(&self, a: u32, b: u32) -> bool {
        self.nodes[a as usize].alive
            && self.nodes[b as usize].alive
            && (a == b || (!self.isolated.contains(&a) && !self.isolated.contains(&b)))
    }

    /// A job is submitted to `home` (its machine logs it and places its
    /// copies): the simulator starts watching it.
    pub(super) fn failover_submit(&mut self, home: u32, job: JobId) {
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        f.jobs.insert(
            job,
            Watched {
                first: home,
                ..Watched::default()
            },
        );
        f.primaries.insert((job, 0), home);
    }

    /// A job event of `node`'s scheduler: whether it is the job's (from the
    /// primary in charge) and counts in its record.
    pub(super) fn job_event_seen(&mut self, node: u32, event: &JobEvent<u32>) -> bool {
        let now = self.now;
        let Some(f) = self.failover.as_mut() else {
            return true;
        };
        if JobEntry::of(event).is_none() {
            return true;
        }
        let job = event.job();
        let in_charge = self.jobs.get(&job).is_some_and(|rec| rec.home == node);
        let primary = self.nodes[node as usize]
            .machine
            .replica(job)
            .is_some_and(|rep| rep.is_primary());
        if !primary || !in_charge {
            // The machine of a job ended with no copy forgets the job: its
            // end is the job's all the same.
            let ended_alone = in_charge && matches!(event, JobEvent::Ended { .. });
            if !ended_alone {
                f.report.stale_events += 1;
                return false;
            }
        }
        if matches!(event, JobEvent::Ended { .. })
            && let Some(r) = f.jobs.get_mut(&job)
        {
            r.ended_at.get_or_insert(now);
        }
        true
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

    /// Executes what `node`'s machine said besides the scheduler's words;
    /// a copy that took a job over is returned, for the simulator to look
    /// at once the adoption's outputs are executed.
    pub(super) fn machine_output(&mut self, node: u32, output: MachineOutput) -> Option<JobId> {
        match output {
            MachineOutput::Sched(_) => unreachable!("the scheduler's outputs are executed apart"),
            MachineOutput::Replica {
                to,
                job,
                msg,
                with_copy,
            } => {
                self.count_replica_message(job);
                let first = self
                    .failover
                    .as_ref()
                    .and_then(|f| f.jobs.get(&job))
                    .map(|r| r.first);
                let copy = first.filter(|_| with_copy).map(SimCopy);
                let at = self.now + self.one_way(node, to);
                self.push(
                    at,
                    Event::Replica {
                        to,
                        from: node,
                        job,
                        msg,
                        copy,
                    },
                );
            }
            MachineOutput::EndAck(ack) => self.acknowledge(node, ack),
            // The member reports again, to the primary its replica follows.
            MachineOutput::NotHome { .. } => {}
            MachineOutput::Ask { node: to, question } => {
                self.messages += 1;
                *self.by_kind.entry("liveness").or_default() += 1;
                let at = self.now + self.one_way(node, to);
                self.push(
                    at,
                    Event::RanksAsked {
                        to,
                        from: node,
                        question,
                    },
                );
            }
            // A probe of a node that cannot be reached fails.
            MachineOutput::Probe(peer) => {
                if !self.reachable(node, peer) {
                    self.feed_machine(node, MachineInput::PeerDead(peer));
                }
            }
            MachineOutput::TookOver {
                job, term, state, ..
            } => {
                self.became_primary(node, job, term, &state);
                return Some(job);
            }
            MachineOutput::SteppedDown { .. } => {
                if let Some(f) = self.failover.as_mut() {
                    f.report.stepped_down += 1;
                }
            }
            MachineOutput::HomeMoved { job, home } => {
                if let Some(f) = self.failover.as_mut()
                    && f.known_home.contains_key(&(node, job))
                {
                    f.known_home.insert((node, job), home);
                }
            }
            // The simulator's nodes are honest: a refusal of one as
            // misbehaving is a bug of the protocol.
            MachineOutput::Misbehaviour { peer, what } => self.violations.push(format!(
                "{:?}: node {node} says node {peer} misbehaved: {what}",
                self.now
            )),
            MachineOutput::CopyTaken { .. }
            | MachineOutput::CopyOver(_)
            | MachineOutput::CopiesChanged { .. }
            | MachineOutput::Notice(_) => {}
        }
        None
    }

    /// A replica message arrives.
    pub(super) fn replica_message(
        &mut self,
        to: u32,
        from: u32,
        job: JobId,
        msg: ReplicaMsg,
        copy: Option<SimCopy>,
    ) {
        if self.reachable(from, to) {
            let input = MachineInput::Replica {
                from,
                job,
                msg,
                copy,
            };
            self.feed_machine(to, input);
        }
    }

    /// A home asks `to` which of its ranks run there: `to` answers with
    /// what runs there, its boot id and uptime, as a node does.
    pub(super) fn ranks_asked(&mut self, to: u32, from: u32, question: Question) {
        if !self.reachable(from, to) {
            return;
        }
        let n = &self.nodes[to as usize];
        let answer = Answer {
            boot: n.boot,
            uptime: self.now.saturating_sub(n.since),
            running: question
                .keys()
                .map(|job| {
                    let here = self
                        .running
                        .get(&(to, *job))
                        .map(|ranks| ranks.keys().copied().collect())
                        .unwrap_or_default();
                    (*job, here)
                })
                .collect(),
        };
        self.messages += 1;
        *self.by_kind.entry("liveness").or_default() += 1;
        let at = self.now + self.one_way(to, from);
        self.push(
            at,
            Event::RanksAnswered {
                to: from,
                from: to,
                answer,
            },
        );
    }

    /// The primary at `home` acknowledges a rank's end to its member (once
    /// a copy holds it; at once for an end not in the log, a stale
    /// worker's, which is not counted as kept).
    fn acknowledge(&mut self, home: u32, ack: EndAck) {
        let EndAck {
            job,
            member,
            rank,
            incarnation,
        } = ack;
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        let kept = self.nodes[home as usize]
            .machine
            .replica(job)
            .is_some_and(|rep| end_index(rep.entries(), &member, rank).is_some());
        if kept {
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

    /// A copy at `node` won the election for `job` (its machine adopted the
    /// job in `state`, what its log says): the simulator follows.
    fn became_primary(&mut self, node: u32, job: JobId, term: u64, state: &JobState<u32>) {
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
        let lost = f.jobs.get_mut(&job).and_then(|r| r.lost_at.take());
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
        if let Some(record) = self.jobs.get_mut(&job) {
            record.home = node;
            record.home_moves += 1;
        }
        self.resync_record(job, state);
    }

    /// Once the adoption's outputs are executed: the new home `node` of
    /// `job` hears which of the nodes the log places ranks on are down (a
    /// node's probes of them fail as their connections closed).
    pub(super) fn after_takeover(&mut self, node: u32, job: JobId) {
        let placed = self.nodes[node as usize]
            .machine
            .scheduler()
            .placement(job)
            .unwrap_or_default();
        for peer in placed.into_keys() {
            if !self.nodes[peer as usize].alive {
                self.feed_machine(node, MachineInput::PeerDead(peer));
            }
        }
    }

    /// After a takeover the job is what the new home's log says (`state`,
    /// before the new home acts on it: what it does then comes as its
    /// events): grants and an end the old home made but did not get to a
    /// copy are undone in the simulator's record (the new home grants
    /// those ranks again, and ends the job again).
    fn resync_record(&mut self, job: JobId, state: &JobState<u32>) {
        let placement = state.ranks.by_node();
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
        if state.phase <= Phase::Running
            && record.ended.take().is_some()
            && let Some(f) = self.failover.as_mut()
        {
            f.report.ends_redone += 1;
            if let Some(r) = f.jobs.get_mut(&job) {
                r.ended_at = None;
            }
        }
    }

    /// Whether `job`'s end is committed at its home (or the home forgot the
    /// job, every copy holding its end): its replication is over.
    pub(super) fn retired(&self, job: JobId) -> bool {
        let ended = self
            .failover
            .as_ref()
            .and_then(|f| f.jobs.get(&job))
            .is_some_and(|r| r.ended_at.is_some());
        let Some(home) = self.jobs.get(&job).map(|rec| rec.home).filter(|_| ended) else {
            return false;
        };
        match self.nodes[home as usize].machine.replica(job) {
            None => true,
            Some(rep) => rep
                .entries()
                .take(rep.committed() as usize)
                .any(|e| matches!(e, JobEntry::Event(JobEvent::Ended { .. }))),
        }
    }

    /// A member heard a job's placement from `home` (its machine follows
    /// `home` if its replica does). Ranks running here that a new home does
    /// not place here were granted by an old home whose grant was lost with
    /// it: they stop.
    pub(super) fn placement_heard(
        &mut self,
        node: u32,
        job: JobId,
        home: u32,
        phase: Phase,
        placement: &BTreeMap<u32, Placed<u32>>,
    ) {
        let known = self
            .failover
            .as_ref()
            .and_then(|f| f.known_home.get(&(node, job)).copied());
        self.feed_machine(
            node,
            MachineInput::HomeHeard {
                job,
                home,
                over: phase.is_end(),
            },
        );
        if known.is_none_or(|k| k == home) {
            return;
        }
        let follows = self.nodes[node as usize].machine.primary_of(job) == Some(&home);
        let Some(f) = self.failover.as_mut() else {
            return;
        };
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
            // An array's tasks each end on their own.
            if self.jobs.get(&job).is_some_and(|r| r.tasks.is_some()) {
                for rank in &orphans {
                    self.workers_gone(node, job, &[*rank], Some(*rank), RunEnd::Stopped);
                }
            } else {
                self.workers_gone(node, job, &orphans, None, RunEnd::Stopped);
            }
            self.feed(
                node,
                zorilla_core::node::Input::WorkersEnded {
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
        let Some(rep) = self.nodes[home as usize].machine.replica(job) else {
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
        let target = self.nodes[node as usize]
            .machine
            .primary_of(job)
            .copied()
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

    /// A rank's end reaches `home`: its machine takes it, and acknowledges
    /// it once the end is committed (a node that is not the job's primary
    /// says so, and the member reports again).
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
        let digest = Some(self.result_digest(job, from, rank));
        let input = MachineInput::EndReported {
            digest,
            job,
            node: from,
            rank,
            incarnation,
            end: WorkerEnd::Exited(0),
            reply: EndAck {
                job,
                member: from,
                rank,
                incarnation,
            },
        };
        self.feed_machine(home, input);
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

//! The loop's side of the jobs this node is home to: it executes the
//! core's outputs (a grant goes out with the job's copy, so the member
//! starts without asking) and keeps the job records. What a rank's end or
//! loss means for the job, and whom to tell of a placement, is the core's
//! call.

use std::collections::BTreeMap;
use std::time::Instant;

use zorilla_core::advert::{JobId, Message};
use zorilla_core::flood::FloodId;
use zorilla_core::machine;
use zorilla_core::node::{EndReason, Input, JobEvent, LostReason, Output, Phase, RankOutcome};
use zorilla_overlay::PeerId;
use zorilla_sandbox::{ChangeKind, MembershipChange};

use super::replicas::notice_log;
use super::{Done, MachineOutput, Node, Reply, cbor_advert};
use crate::protocol::{JobPhase, RankStatus, TaskStatus};
use crate::store::StoredPeer;
use crate::wire::job_copy::{JobCopy, Placed};
use crate::wire::replica::ReplicaRpc;
use crate::wire::sched::SchedRpc;
use crate::wire::{PeerReply, PeerRpc, RefusalKind};

impl Node {
    /// Executes what the core's machine said, in order.
    pub(super) fn execute(&mut self, out: Vec<MachineOutput>) {
        let mut primaries = false;
        for output in out {
            match output {
                MachineOutput::Sched(output) => self.execute_sched(output),
                MachineOutput::Replica {
                    to,
                    job,
                    msg,
                    with_copy,
                } => {
                    // A copy that may not hold the job yet gets it with the
                    // log (an extra copy, or one that is behind).
                    let copy = with_copy
                        .then(|| self.replica_copy(job.0))
                        .flatten()
                        .map(Box::new);
                    let rpc = PeerRpc::Replica(ReplicaRpc {
                        job: job.0,
                        msg: Box::new(msg),
                        copy,
                    });
                    if self.replica_delay.is_zero() {
                        self.send(to, rpc);
                    } else {
                        self.send_late(to, rpc, self.replica_delay);
                    }
                }
                MachineOutput::EndAck(reply) => self.reply(reply, PeerReply::Ack),
                MachineOutput::NotHome { job, reply } => self.reply(
                    reply,
                    PeerReply::refused(
                        RefusalKind::NotHere,
                        format!("this node is not the home of job {job}"),
                    ),
                ),
                MachineOutput::Ask { node, question } => self.ask_ranks(node, question),
                MachineOutput::Probe(peer) => self.maybe_probe(peer),
                MachineOutput::TookOver {
                    job,
                    term,
                    state,
                    copy,
                    old_home,
                } => {
                    self.took_over(job.0, term, &state, copy, old_home);
                    primaries = true;
                }
                MachineOutput::SteppedDown { job, primary } => self.stepped_down(job.0, primary),
                MachineOutput::HomeMoved { job, home } => {
                    self.home_moved(job.0, home);
                    primaries = true;
                }
                MachineOutput::CopyTaken { job, home, copy } => {
                    self.fetch_job_files(job.0, home, &copy);
                    primaries = true;
                }
                MachineOutput::CopyOver(job) => {
                    self.forget_idle_member(job.0);
                    primaries = true;
                }
                MachineOutput::CopiesChanged { job, copies } => self.publish_copies(job.0, copies),
                MachineOutput::Misbehaviour { peer, what } => {
                    self.overlay.report_misbehaviour(peer, what);
                }
                MachineOutput::Notice(notice) => notice_log(notice),
            }
        }
        if primaries {
            self.publish_primaries();
        }
    }

    /// Executes one of the scheduler's outputs (a grant, and what follows
    /// one to its node, only once a copy holds it: the machine held it
    /// until then).
    fn execute_sched(&mut self, output: Output<PeerId>) {
        match output {
            Output::Send { to, msg } => self.send_now(to, msg),
            Output::Flood(advert) => {
                self.messages_sent += 1;
                let overlay = self.overlay.clone();
                let id = FloodId {
                    job: advert.job,
                    seq: advert.flood.seq,
                };
                let header = advert.flood;
                let payload = cbor_advert(&advert);
                self.tasks.spawn(async move {
                    if let Err(e) = overlay.flood(id, header, payload).await {
                        tracing::warn!("flood failed: {e}");
                    }
                    Done::Nothing
                });
            }
            Output::StartWorkers {
                job,
                home,
                ranks,
                incarnation,
                placement,
            } => self.start_workers(job.0, home, ranks, incarnation, placement, None),
            Output::StopWorkers { job, reason } => {
                tracing::info!(job = %job, "stopping workers: {reason}");
                self.stop_workers(job.0);
            }
            Output::Preempted { job, for_job } => {
                tracing::info!(
                    job = %job,
                    %for_job,
                    "stopping workers: their cores go to a job of a node this one owes \
                     favours; their home places them elsewhere"
                );
                self.stop_workers(job.0);
            }
            Output::PlacementChanged {
                job,
                home,
                phase,
                placement,
                replaced,
            } => self.placement_changed(job.0, home, phase.into(), placement, replaced),
            Output::Job(event) => self.job_event(event),
        }
    }

    /// Hands the machine an input and executes what comes out.
    pub(super) fn feed(&mut self, input: machine::Input<PeerId, Reply, JobCopy>) {
        let out = self.machine.handle(self.now(), input);
        self.execute(out);
    }

    /// Hands the scheduler an input (through the machine) and executes what
    /// comes out.
    pub(super) fn feed_sched(&mut self, input: Input<PeerId>) {
        self.feed(machine::Input::Sched(input));
    }

    /// Sends a scheduling message now (a grant with the job's copy).
    pub(super) fn send_now(&mut self, to: PeerId, msg: Message<PeerId>) {
        let rpc = match msg {
            Message::Grant { job, .. } => match self.job_copy(job.0) {
                Some(copy) => PeerRpc::Sched(SchedRpc::Grant {
                    grant: msg,
                    copy: Box::new(copy),
                }),
                // The record is written before the job is submitted to the
                // core, so this does not happen; the member's hold times
                // out and it withdraws.
                None => {
                    tracing::warn!(job = %job, "no record of the job to grant workers of");
                    return;
                }
            },
            msg => PeerRpc::Sched(SchedRpc::Message(msg)),
        };
        self.send(to, rpc);
    }

    /// What a member needs of a job of ours to start its workers.
    pub(super) fn job_copy(&self, job: u64) -> Option<JobCopy> {
        let record = self.jobs.under_way(job)?;
        Some(JobCopy {
            request: record.request.clone(),
            module: record.module.clone(),
            inputs: record.inputs.clone(),
            submitted_unix: record.submitted_unix,
            owner: record.owner,
            owner_proof: record.owner_proof.clone(),
            origin: record.origin,
        })
    }

    /// Executes an event of a home job (the decisions are the core's: see
    /// [`zorilla_core::node::RankTable`]; the machine logged it and its
    /// liveness follows it): the record is kept and stored.
    pub(super) fn job_event(&mut self, event: JobEvent<PeerId>) {
        match &event {
            JobEvent::Granted { job, .. }
            | JobEvent::WorkersLost { job, .. }
            | JobEvent::RankEnded { job, .. }
            | JobEvent::RolledBack { job, .. } => self.stall.changed(self.now(), *job),
            JobEvent::Ended { job, .. } => self.stall.forget_job(*job),
            _ => {}
        }
        match event {
            JobEvent::Rejected { job, error } => {
                self.end_home_job(job.0, JobPhase::Failed, format!("rejected: {error}"));
            }
            JobEvent::Granted {
                job, node, ranks, ..
            } => {
                tracing::info!(job = %job, %node, ?ranks, "workers granted");
                if let Some(record) = self.jobs.under_way_mut(job.0) {
                    for rank in &ranks {
                        record
                            .ranks
                            .insert(*rank, RankStatus::running(StoredPeer(node)));
                    }
                    let record = record.clone();
                    self.persist(&record);
                }
                if self.is_array(job.0) {
                    self.sync_tasks(job.0);
                }
            }
            JobEvent::Started { job, workers } => {
                if let Some(record) = self.jobs.under_way_mut(job.0)
                    && record.advance(JobPhase::Running, format!("running with {workers} workers"))
                {
                    let record = record.clone();
                    self.persist(&record);
                }
            }
            JobEvent::Full { .. } => {}
            JobEvent::WorkersLost {
                job,
                node,
                ranks,
                reason,
            } => {
                let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
                let plural = if ranks.len() == 1 { "" } else { "s" };
                let why = format!("node {node} {reason} (rank{plural} {})", list.join(", "));
                // "ranks lost" is what the liveness checks found (tests
                // and operators count these), "workers lost" a node that
                // failed, left or gave its ranks back.
                match reason {
                    LostReason::Liveness(_) => tracing::warn!(job = %job, "ranks lost: {why}"),
                    _ => tracing::warn!(job = %job, "workers lost: {why}"),
                }
                if self.is_array(job.0) {
                    // The tasks run again elsewhere.
                    self.sync_tasks(job.0);
                } else {
                    self.record_outcomes(job.0, &node, &ranks, &RankOutcome::Lost(reason));
                }
            }
            JobEvent::RankEnded {
                job,
                node,
                rank,
                outcome,
                ..
            } => {
                if self.is_array(job.0) {
                    if !outcome.is_success() {
                        tracing::info!(job = %job, task = rank, "task {rank} on {node}: {}", outcome.display(&node));
                    }
                    self.sync_tasks(job.0);
                } else {
                    self.record_outcomes(job.0, &node, &[rank], &outcome);
                }
            }
            JobEvent::Checkpointed {
                job,
                rank,
                checkpoint,
            } => {
                tracing::debug!(
                    job = %job,
                    rank,
                    generation = ?checkpoint.generation,
                    "checkpoint logged"
                );
            }
            JobEvent::RolledBack {
                job,
                generation,
                stopped,
            } => {
                match generation {
                    Some(generation) => tracing::warn!(
                        job = %job,
                        generation,
                        "the job rolls back: every rank restarts from checkpoint generation \
                         {generation}, the latest all of them hold"
                    ),
                    None => tracing::warn!(
                        job = %job,
                        "the job rolls back to its start: its ranks hold no checkpoint \
                         generation in common (none was saved by every rank, or the holders \
                         were lost)"
                    ),
                }
                // The stopped workers' nodes, as the record knows them.
                let mut by_node: BTreeMap<PeerId, Vec<u32>> = BTreeMap::new();
                if let Some(record) = self.jobs.under_way(job.0) {
                    for rank in &stopped {
                        if let Some(r) = record.ranks.get(rank) {
                            by_node.entry(*r.node).or_default().push(*rank);
                        }
                    }
                }
                let outcome = RankOutcome::Lost(LostReason::RolledBack);
                for (node, ranks) in by_node {
                    self.record_outcomes(job.0, &node, &ranks, &outcome);
                }
            }
            JobEvent::Ended { job, phase, reason } => {
                // The runs' verdict: the kept run's outputs are the job's.
                if let EndReason::RunsKept { kept, .. } = &reason
                    && let Some(record) = self.jobs.under_way_mut(job.0)
                {
                    record.kept_run = Some(*kept);
                }
                if phase.is_end() {
                    self.end_home_job(job.0, phase.into(), reason.to_string());
                }
            }
        }
    }

    /// Whether home job `job` is a job array.
    fn is_array(&self, job: u64) -> bool {
        self.jobs
            .under_way(job)
            .is_some_and(|record| record.request.tasks.is_some())
    }

    /// A job array's record follows the core's table: the counts, the
    /// failed tasks, and only the running tasks among its ranks (the
    /// array's record does not grow with its tasks).
    fn sync_tasks(&mut self, job: u64) {
        let Some(table) = self.machine.scheduler().ranks(JobId(job)) else {
            return;
        };
        let Some(tasks) = TaskStatus::of(table, |node| StoredPeer(*node)) else {
            return;
        };
        let running = table.running();
        let Some(record) = self.jobs.under_way_mut(job) else {
            return;
        };
        record.ranks.retain(|task, _| running.contains_key(task));
        record.tasks = Some(tasks);
        let record = record.clone();
        self.persist(&record);
    }

    /// Writes what became of ranks on `node` into their job's record
    /// (under way or finished): the sentence users read and its code
    /// ([`RankStatus::ended`]).
    fn record_outcomes(&mut self, job: u64, node: &PeerId, ranks: &[u32], outcome: &RankOutcome) {
        let Some(mut record) = self.record(job) else {
            return;
        };
        for rank in ranks {
            if let Some(status) = record.ranks.get_mut(rank) {
                status.ended(outcome, node);
            }
        }
        self.persist(&record);
        self.update(record);
    }

    pub(super) fn end_home_job(&mut self, job: u64, phase: JobPhase, reason: String) {
        if let Some(record) = self.jobs.under_way_mut(job)
            && record.advance(phase, reason.clone())
        {
            tracing::info!(job = %JobId(job), ?phase, "job ended: {reason}");
            // Ranks still running were stopped with the job (`advance`);
            // their nodes do not report back for a job that is over.
            let record = record.clone();
            self.persist(&record);
            // Finished: out of memory (but for the newest few).
            self.jobs.finish(job);
            self.ended_since_release = true;
        }
    }

    /// Whether `peer` holds ranks (not lost) of a job of ours under way.
    pub(super) fn runs_ours(&self, peer: &PeerId) -> bool {
        let sched = self.machine.scheduler();
        sched
            .home_jobs()
            .filter(|(_, phase)| *phase <= Phase::Running)
            .filter_map(|(job, _)| sched.placement(job))
            .any(|nodes| nodes.contains_key(peer))
    }

    /// The home of a job this node runs workers of told where its ranks
    /// run now, and its phase (or this node asked it, see
    /// `refresh_stale_copies`): the workers here learn of their peers, and
    /// stop if the job was cancelled or failed. Word from another node
    /// than the job's home is ignored.
    pub(super) fn placement_changed(
        &mut self,
        job: u64,
        home: PeerId,
        phase: JobPhase,
        ranks: BTreeMap<u32, Placed>,
        replaced: Vec<u32>,
    ) {
        self.status.job_phase(job, home, phase);
        // A copy told the job is over by its home need not wait for the
        // end in the log to stop watching the home.
        self.feed(machine::Input::HomeHeard {
            job: JobId(job),
            home,
            over: phase.is_terminal(),
        });
        let Some(member) = self.members.get_mut(&job) else {
            return;
        };
        if member.home != home {
            return;
        }
        member.heard = Instant::now();
        member.net.set_ranks(ranks);
        let size = member.net.size.load(std::sync::atomic::Ordering::SeqCst);
        for rank in replaced {
            let change = MembershipChange {
                kind: ChangeKind::Replaced,
                rank,
                size,
            };
            for worker in member.workers.keys() {
                if let Some(inbox) = member.net.inbox(*worker) {
                    inbox.push_membership(change);
                }
            }
        }
        if phase == JobPhase::Cancelled || phase == JobPhase::Failed {
            self.stop_workers(job);
        }
    }
}

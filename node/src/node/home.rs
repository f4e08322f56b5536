//! The loop's side of the jobs this node is home to: it executes the
//! core's outputs (a grant goes out with the job's copy, so the member
//! starts without asking) and keeps the job records. What a rank's end or
//! loss means for the job, and whom to tell of a placement, is the core's
//! call.

use super::*;

impl Node {
    pub(super) fn execute(&mut self, out: Vec<Output<PeerId>>) {
        for output in out {
            match output {
                Output::Send { to, msg } => self.send_msg(to, msg),
                Output::Flood(advert) => {
                    self.messages_sent += 1;
                    let overlay = self.overlay.clone();
                    let id = FloodId {
                        job: advert.job,
                        seq: advert.flood.seq,
                    };
                    let header = advert.flood;
                    let payload = cbor_advert(&advert);
                    tokio::spawn(async move {
                        if let Err(e) = overlay.flood(id, header, payload).await {
                            tracing::warn!("flood failed: {e}");
                        }
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
    }

    /// Sends a scheduling message of the core; a grant goes once a copy
    /// holds it, and what follows it to the same node after it
    /// ([`Node::hold_message`]), with the job's copy (see
    /// [`PeerRpc::Grant`]).
    fn send_msg(&mut self, to: PeerId, msg: Message<PeerId>) {
        if let Some(msg) = self.hold_message(to, msg) {
            self.send_now(to, msg);
        }
    }

    /// Sends a scheduling message now (a grant with the job's copy).
    pub(super) fn send_now(&mut self, to: PeerId, msg: Message<PeerId>) {
        let rpc = match msg {
            Message::Grant { job, .. } => match self.job_copy(job.0) {
                Some(copy) => PeerRpc::Grant {
                    grant: msg,
                    copy: Box::new(copy),
                },
                // The record is written before the job is submitted to the
                // core, so this does not happen; the member's hold times
                // out and it withdraws.
                None => {
                    tracing::warn!(job = %job, "no record of the job to grant workers of");
                    return;
                }
            },
            msg => PeerRpc::Sched(msg),
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
    /// [`zorilla_core::node::RankTable`]): the record is kept and stored,
    /// liveness follows the placement.
    pub(super) fn job_event(&mut self, event: JobEvent<PeerId>) {
        self.replicate_event(&event);
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
                if node != self.me {
                    self.liveness.placed(self.now(), job, node, &ranks);
                }
                if let Some(record) = self.jobs.under_way_mut(job.0) {
                    for rank in &ranks {
                        record
                            .ranks
                            .insert(*rank, RankStatus::running(StoredPeer(node)));
                    }
                    let record = record.clone();
                    self.persist(&record);
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
                self.liveness.forget(job, &node, &ranks);
                self.record_outcomes(job.0, &node, &ranks, &RankOutcome::Lost(reason));
            }
            JobEvent::RankEnded {
                job,
                node,
                rank,
                outcome,
            } => {
                self.liveness.ended(job, &node, rank);
                self.record_outcomes(job.0, &node, &[rank], &outcome);
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
                    self.liveness.forget(job, &node, &ranks);
                    self.record_outcomes(job.0, &node, &ranks, &outcome);
                }
            }
            JobEvent::Ended { job, phase, reason } => {
                self.liveness.forget_job(job);
                if phase.is_end() {
                    self.end_home_job(job.0, phase.into(), reason.to_string());
                }
            }
        }
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
        self.sched
            .home_jobs()
            .filter(|(_, phase)| *phase <= Phase::Running)
            .filter_map(|(job, _)| self.sched.placement(job))
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
        if self.primary_of(job) == Some(home) {
            self.follow(job, home);
            if phase.is_terminal() {
                // The home says the job is over: the copy here need not
                // wait for the end in the log to stop watching the home.
                self.replica_job_over(job);
            }
        }
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

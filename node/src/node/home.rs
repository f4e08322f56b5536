//! The loop's side of the jobs this node is home to: it executes the
//! core's outputs, keeps the job records, pushes placements to the nodes
//! of a job and takes in the ranks' ends.

use super::*;

impl Node {
    pub(super) fn execute(&mut self, out: Vec<Output<PeerId>>) {
        let mut changed = BTreeSet::new();
        for output in out {
            match output {
                Output::Send { to, msg } => self.send(to, PeerRpc::Sched(msg)),
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
                } => self.start_workers(job.0, home, ranks, incarnation),
                Output::StopWorkers { job, reason } => {
                    tracing::info!(job = %job, "stopping workers: {reason}");
                    self.stop_workers(job.0);
                }
                Output::Job(event) => {
                    if let Some(job) = self.job_event(event) {
                        changed.insert(job);
                    }
                }
            }
        }
        for job in changed {
            self.push_placement(job, Vec::new());
        }
    }

    /// Applies an event of a home job; returns the job if its placement or
    /// phase changed.
    pub(super) fn job_event(&mut self, event: JobEvent<PeerId>) -> Option<u64> {
        match event {
            JobEvent::Rejected { job, error } => {
                self.end_home_job(job.0, JobPhase::Failed, format!("rejected: {error}"));
                None
            }
            JobEvent::Granted {
                job,
                node,
                ranks,
                incarnation,
                ..
            } => {
                tracing::info!(job = %job, %node, ?ranks, "workers granted");
                if node != self.me {
                    self.liveness.placed(self.now(), job, node, &ranks);
                }
                let replaced: Vec<u32> = {
                    let lost = self.lost_ranks.entry(job.0).or_default();
                    ranks.iter().copied().filter(|r| lost.remove(r)).collect()
                };
                let placement = self.placement.entry(job.0).or_default();
                for rank in &ranks {
                    placement.insert(*rank, Placed { node, incarnation });
                }
                if let Some(record) = self.jobs.get_mut(&job.0) {
                    for rank in &ranks {
                        record.ranks.insert(
                            *rank,
                            RankStatus {
                                node: node.to_string(),
                                outcome: None,
                            },
                        );
                    }
                    let record = record.clone();
                    self.persist(&record);
                }
                if !replaced.is_empty() {
                    self.push_placement(job.0, replaced);
                    return None;
                }
                Some(job.0)
            }
            JobEvent::Started { job, workers } => {
                if let Some(record) = self.jobs.get_mut(&job.0)
                    && record.advance(JobPhase::Running, format!("running with {workers} workers"))
                {
                    let record = record.clone();
                    self.persist(&record);
                }
                Some(job.0)
            }
            JobEvent::Full { .. } => None,
            JobEvent::WorkersLost { job, node, ranks } => {
                tracing::warn!(job = %job, %node, ?ranks, "workers lost");
                self.liveness.forget(job, &node, &ranks);
                if let Some(placement) = self.placement.get_mut(&job.0) {
                    for rank in &ranks {
                        placement.remove(rank);
                    }
                }
                self.lost_ranks.entry(job.0).or_default().extend(&ranks);
                if let Some(record) = self.jobs.get_mut(&job.0) {
                    for rank in &ranks {
                        if let Some(r) = record.ranks.get_mut(rank) {
                            // The loop may have said how (`liveness`).
                            r.outcome
                                .get_or_insert_with(|| format!("lost: node {node} failed or left"));
                        }
                    }
                    let record = record.clone();
                    self.persist(&record);
                }
                Some(job.0)
            }
            JobEvent::Ended { job, phase, reason } => {
                self.liveness.forget_job(job);
                let phase = match phase {
                    Phase::Scheduling | Phase::Running => return None,
                    Phase::Completed => JobPhase::Completed,
                    Phase::Cancelled => JobPhase::Cancelled,
                    Phase::Failed => JobPhase::Failed,
                };
                self.end_home_job(job.0, phase, reason);
                Some(job.0)
            }
        }
    }

    pub(super) fn end_home_job(&mut self, job: u64, phase: JobPhase, reason: String) {
        if let Some(record) = self.jobs.get_mut(&job)
            && record.advance(phase, reason.clone())
        {
            tracing::info!(job = %JobId(job), ?phase, "job ended: {reason}");
            // Ranks still running were stopped with the job (`advance`);
            // their nodes do not report back for a job that is over.
            let record = record.clone();
            self.persist(&record);
            // Finished: out of memory (but for the newest few).
            self.jobs.remove(&job);
            self.output_bytes.remove(&job);
            self.finished.add(record);
            self.ended_since_release = true;
        }
    }

    /// Sends the job's current placement and phase to every node with one
    /// of its ranks (the copies).
    pub(super) fn push_placement(&mut self, job: u64, replaced: Vec<u32>) {
        let Some(phase) = self
            .jobs
            .get(&job)
            .or_else(|| self.finished.recent(job))
            .map(|r| r.phase)
        else {
            return;
        };
        let ranks = if phase.is_terminal() {
            // The last push of a finished job: its placement is not kept.
            self.lost_ranks.remove(&job);
            self.placement.remove(&job).unwrap_or_default()
        } else {
            self.placement.get(&job).cloned().unwrap_or_default()
        };
        let nodes: BTreeSet<PeerId> = ranks.values().map(|p| p.node).collect();
        for node in nodes {
            let rpc = PeerRpc::Placement {
                job,
                phase,
                ranks: ranks.clone(),
                replaced: replaced.clone(),
            };
            if node == self.me {
                self.placement_pushed(job, phase, ranks.clone(), replaced.clone());
            } else {
                self.send(node, rpc);
            }
        }
    }

    pub(super) fn placement_pushed(
        &mut self,
        job: u64,
        phase: JobPhase,
        ranks: BTreeMap<u32, Placed>,
        replaced: Vec<u32>,
    ) {
        self.status.job_phase(job, phase);
        let Some(member) = self.members.get_mut(&job) else {
            return;
        };
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

    /// A rank ended on some node: record it, and end the job when every rank
    /// is done (or one failed).
    pub(super) fn worker_ended(
        &mut self,
        from: PeerId,
        job: u64,
        rank: u32,
        success: bool,
        outcome: String,
    ) {
        let Some(mut record) = self.record(job) else {
            return;
        };
        let Some(status) = record.ranks.get_mut(&rank) else {
            return;
        };
        if status.node != from.to_string() {
            return; // A replaced worker's late report.
        }
        self.liveness.ended(JobId(job), &from, rank);
        status.outcome = Some(outcome.clone());
        self.persist(&record);
        self.update(record.clone());
        if record.phase.is_terminal() {
            return;
        }
        if !success {
            if outcome == Outcome::Cancelled.to_string() {
                return;
            }
            let reason = format!("rank {rank} on {from}: {outcome}");
            self.end_home_job(job, JobPhase::Failed, reason.clone());
            let out = self.sched.handle(
                self.now(),
                Input::Fail {
                    job: JobId(job),
                    reason,
                },
            );
            self.execute(out);
            self.push_placement(job, Vec::new());
            return;
        }
        let all_done = record
            .ranks
            .values()
            .all(|r| r.outcome.as_deref() == Some("exited with status 0"));
        let running = self.sched.phase(JobId(job)) == Some(Phase::Running);
        let enough = record.ranks.len() as u32 >= record.request.min_workers;
        if all_done && running && enough {
            let n = record.ranks.len();
            self.end_home_job(
                job,
                JobPhase::Completed,
                format!("all {n} workers exited with status 0"),
            );
            let out = self.sched.handle(self.now(), Input::Finish(JobId(job)));
            self.execute(out);
        }
    }
}

//! The loop's side of the jobs this node is home to: it executes the
//! core's outputs, keeps the job records (a rank's outcome in words, from
//! the core's [`RankOutcome`]) and pushes placements to the nodes of a
//! job. What a rank's end or loss means for the job is the core's call.

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

    /// Executes an event of a home job (the decisions are the core's: see
    /// [`zorilla_core::node::RankTable`]): the record is kept and stored,
    /// liveness follows the placement. Returns the job if its placement
    /// or phase changed (its copies are told).
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
                replaced,
                ..
            } => {
                tracing::info!(job = %job, %node, ?ranks, "workers granted");
                if node != self.me {
                    self.liveness.placed(self.now(), job, node, &ranks);
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
                Some(job.0)
            }
            JobEvent::RankEnded {
                job,
                node,
                rank,
                outcome,
            } => {
                self.liveness.ended(job, &node, rank);
                self.record_outcomes(job.0, &node, &[rank], &outcome);
                None
            }
            JobEvent::Ended { job, phase, reason } => {
                self.liveness.forget_job(job);
                let phase = match phase {
                    Phase::Scheduling | Phase::Running => return None,
                    Phase::Completed => JobPhase::Completed,
                    Phase::Cancelled => JobPhase::Cancelled,
                    Phase::Failed => JobPhase::Failed,
                };
                self.end_home_job(job.0, phase, reason.to_string());
                Some(job.0)
            }
        }
    }

    /// Writes what became of ranks on `node` into their job's record
    /// (under way or finished), in the words users read: the one place
    /// the core's [`RankOutcome`] becomes the client protocol's words.
    fn record_outcomes(&mut self, job: u64, node: &PeerId, ranks: &[u32], outcome: &RankOutcome) {
        let Some(mut record) = self.record(job) else {
            return;
        };
        let words = outcome.display(node).to_string();
        for rank in ranks {
            if let Some(status) = record.ranks.get_mut(rank) {
                status.outcome = Some(words.clone());
            }
        }
        self.persist(&record);
        self.update(record);
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

    /// Where the ranks of a job this node is home to run (lost ones not
    /// listed), as copies see it.
    pub(super) fn placement(&self, job: u64) -> BTreeMap<u32, Placed> {
        let Some(table) = self.sched.ranks(JobId(job)) else {
            return BTreeMap::new();
        };
        table
            .iter()
            .filter(|(_, r)| !matches!(r.outcome, Some(RankOutcome::Lost(_))))
            .map(|(rank, r)| {
                let placed = Placed {
                    node: r.node,
                    incarnation: r.incarnation,
                };
                (rank, placed)
            })
            .collect()
    }

    /// Whether `peer` holds ranks (not lost) of a job of ours under way.
    pub(super) fn runs_ours(&self, peer: &PeerId) -> bool {
        self.sched
            .home_jobs()
            .filter(|(_, phase)| *phase <= Phase::Running)
            .filter_map(|(job, _)| self.sched.placement(job))
            .any(|nodes| nodes.contains_key(peer))
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
        let ranks = self.placement(job);
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
}

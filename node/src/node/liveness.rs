//! The loop's side of rank liveness (the decisions are the core's
//! [`zorilla_core::liveness`]): as a home, asking every node that holds
//! ranks of its jobs which it runs, and giving up the ranks that count as
//! lost; as a member, answering that truthfully (a node that restarted
//! knows none) and stopping workers of ranks the home no longer places
//! here (it took them for lost and gave them to another node).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use zorilla_core::advert::JobId;
use zorilla_core::liveness::{Answer, Lost};
use zorilla_core::node::Input;
use zorilla_overlay::PeerId;

use super::{Done, NoRanks, Node};
use crate::wire::{MAX_ASKED_JOBS, PeerReply, PeerRpc};

/// How often the loop looks for questions due and silent nodes: well
/// within the core's two seconds between questions.
pub(super) const CHECK: Duration = Duration::from_millis(500);

impl Node {
    /// Ranks of silent nodes are lost; nodes due a question get one.
    pub(super) fn check_ranks(&mut self) {
        let now = self.now();
        let lost = self.liveness.check(now);
        self.lose_ranks(lost);
        let wait = self.liveness.config().silence;
        for (peer, question) in self.liveness.due(now) {
            let jobs: BTreeMap<u64, Vec<u32>> = question
                .into_iter()
                .map(|(job, ranks)| (job.0, ranks))
                .collect();
            let net = self.net.clone();
            self.messages_sent += 1;
            self.tasks.spawn(async move {
                let call = net.call_ok(peer, PeerRpc::Ranks { jobs });
                let answer = match tokio::time::timeout(wait, call).await {
                    Ok(Ok(PeerReply::Ranks {
                        boot,
                        uptime_ms,
                        running,
                    })) => Ok(Answer {
                        boot,
                        uptime: Duration::from_millis(uptime_ms),
                        running: running
                            .into_iter()
                            .map(|(job, ranks)| (JobId(job), ranks.into_iter().collect()))
                            .collect(),
                    }),
                    Ok(Ok(_)) => Err(NoRanks::NotRanks),
                    Ok(Err(e)) => Err(NoRanks::Call(e)),
                    Err(_) => Err(NoRanks::Timeout(wait)),
                };
                Done::RanksAnswered { peer, answer }
            });
        }
    }

    /// A node answered which ranks it runs (or did not answer: then its
    /// silence decides, and a probe looks whether it is there at all).
    pub(super) fn ranks_answered(&mut self, peer: PeerId, answer: Result<Answer, NoRanks>) {
        match answer {
            Ok(answer) => {
                let lost = self.liveness.answer(self.now(), &peer, &answer);
                self.lose_ranks(lost);
            }
            Err(e) => {
                tracing::debug!(%peer, "no answer about its ranks: {e}");
                self.maybe_probe(peer);
            }
        }
    }

    /// Gives up ranks that count as lost: the scheduler replaces them or
    /// fails the job (and says so in its events).
    fn lose_ranks(&mut self, lost: Vec<Lost<PeerId>>) {
        for Lost {
            job,
            node,
            ranks,
            cause,
        } in lost
        {
            // The core loses only ranks it still counts as running
            // there, so one lost by other means since (a probe, a
            // withdrawal) or ended is not lost twice.
            let input = Input::RanksLost {
                job,
                node,
                ranks,
                cause,
            };
            let out = self.sched.handle(self.now(), input);
            self.execute(out);
        }
    }

    /// A home asks which of its ranks run here: the ranks of the asked
    /// jobs that run or are starting here. Workers of that home's jobs it
    /// no longer places here, given to this node more than the grace ago
    /// (a younger one may be a grant the question crossed), are stopped.
    pub(super) fn ranks_asked(&mut self, from: PeerId, jobs: BTreeMap<u64, Vec<u32>>) -> PeerReply {
        if jobs.len() > MAX_ASKED_JOBS {
            return PeerReply::Error(format!(
                "asked about {} jobs; at most {MAX_ASKED_JOBS} at once",
                jobs.len()
            ));
        }
        let grace = self.liveness.config().grace;
        let mut running = BTreeMap::new();
        for (job, member) in self.members.iter_mut().filter(|(_, m)| m.home == from) {
            let placed: BTreeSet<u32> = jobs
                .get(job)
                .map(|ranks| ranks.iter().copied().collect())
                .unwrap_or_default();
            let stale: BTreeSet<u32> = member
                .workers
                .keys()
                .filter(|&&rank| {
                    !placed.contains(&rank)
                        && member
                            .born
                            .get(&rank)
                            .is_none_or(|at| at.elapsed() >= grace)
                })
                .copied()
                .collect();
            for rank in &stale {
                if let Some(worker) = member.workers.get(rank) {
                    tracing::warn!(
                        job = %JobId(*job),
                        rank,
                        "the home no longer places this rank here; stopping its worker"
                    );
                    worker.cancel();
                }
            }
            if jobs.contains_key(job) {
                let here: BTreeSet<u32> = member
                    .workers
                    .keys()
                    .chain(member.pending.keys())
                    .filter(|&&rank| !stale.contains(&rank))
                    .copied()
                    .collect();
                running.insert(*job, here.into_iter().collect());
            }
        }
        // Jobs whose home this node knows to be another node now (the job
        // moved while the asker was cut off): their ranks run all the
        // same, and the asker is told of the newer primary, so that it
        // steps down rather than take them for lost (nothing is stopped).
        let moved: Vec<u64> = jobs
            .keys()
            .filter(|job| !running.contains_key(*job))
            .copied()
            .collect();
        for job in &moved {
            let Some(member) = self.members.get(job).filter(|m| m.home != from) else {
                continue;
            };
            let here: Vec<u32> = member
                .workers
                .keys()
                .chain(member.pending.keys())
                .copied()
                .collect::<BTreeSet<u32>>()
                .into_iter()
                .collect();
            running.insert(*job, here);
            self.tell_newer_primary(*job, from);
        }
        PeerReply::Ranks {
            boot: self.boot,
            uptime_ms: u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX),
            running,
        }
    }
}

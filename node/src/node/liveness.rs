//! The loop's side of rank liveness (the decisions are the core's
//! [`zorilla_core::liveness`], driven by its [`zorilla_core::machine`]): as
//! a home, asking the nodes the machine names which ranks they run, and
//! whether its jobs' ranks all wait on one another; as a member, answering that truthfully (a node that restarted
//! knows none) and stopping workers of ranks the home no longer places
//! here (it took them for lost and gave them to another node).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use zorilla_core::advert::JobId;
use zorilla_core::liveness::{Answer, Question};
use zorilla_core::machine;
use zorilla_core::node::Input;
use zorilla_core::node::Phase;
use zorilla_core::stall::{MAX_WAIT, Waits};
use zorilla_overlay::PeerId;

use super::{Done, NoRanks, Node};
use crate::wire::liveness::{MAX_ASKED_JOBS, RanksRpc};
use crate::wire::{PeerReply, PeerRpc, RefusalKind};

/// How often the loop looks whether its home jobs' ranks all wait on one
/// another (the ranks here are asked then).
pub(super) const CHECK: Duration = Duration::from_millis(500);

impl Node {
    /// Asks `peer` which of the ranks placed there it runs (the machine's
    /// question; the answer comes back as [`Done::RanksAnswered`]).
    pub(super) fn ask_ranks(&mut self, peer: PeerId, question: Question) {
        let now = self.now();
        let wait = self.machine.liveness_config().silence;
        let jobs: BTreeMap<u64, Vec<u32>> = question
            .into_iter()
            .map(|(job, ranks)| (job.0, ranks))
            .collect();
        let net = self.net.clone();
        self.messages_sent += 1;
        self.tasks.spawn(async move {
            let call = net.call_ok(peer, PeerRpc::Ranks(RanksRpc { jobs: jobs.clone() }));
            let answer = match tokio::time::timeout(wait, call).await {
                Ok(Ok(PeerReply::Ranks {
                    boot,
                    uptime_ms,
                    running,
                    waits,
                })) => Ok((
                    Answer {
                        boot,
                        uptime: Duration::from_millis(uptime_ms),
                        running: running
                            .into_iter()
                            .map(|(job, ranks)| (JobId(job), ranks.into_iter().collect()))
                            .collect(),
                    },
                    asked_waits(&jobs, waits),
                )),
                Ok(Ok(_)) => Err(NoRanks::NotRanks),
                Ok(Err(e)) => Err(NoRanks::Call(e)),
                Err(_) => Err(NoRanks::Timeout(wait)),
            };
            Done::RanksAnswered {
                peer,
                answer,
                asked: now,
            }
        });
    }

    /// Ends the home jobs whose running ranks all wait with nothing in
    /// flight (the core decides: see [`zorilla_core::stall`]). The ranks
    /// on this node are asked here and now.
    pub(super) fn check_stalls(&mut self) {
        let now = self.now();
        let running: Vec<JobId> = self
            .machine
            .scheduler()
            .home_jobs()
            .filter(|(_, phase)| *phase == Phase::Running)
            .map(|(job, _)| job)
            .collect();
        for job in running {
            let Some(table) = self.machine.scheduler().ranks(job) else {
                continue;
            };
            let ranks = table.running();
            if ranks.values().any(|node| *node == self.me) {
                let waits = self.waits_here(job.0);
                self.stall.heard(now, now, job, self.me, waits);
            }
            if self.stall.stalled(job, &ranks) {
                tracing::warn!(
                    job = %job,
                    "every running rank waits for a message, with none in flight: the job \
                     cannot go on"
                );
                self.feed_sched(Input::Stalled { job, ranks });
            }
        }
    }

    /// What this node says of `job`'s workers here (see
    /// [`zorilla_core::stall`]).
    fn waits_here(&self, job: u64) -> Waits {
        let Some(member) = self.members.get(&job) else {
            return Waits::default();
        };
        Waits {
            ranks: member
                .workers
                .iter()
                .filter_map(|(rank, worker)| {
                    let waited = worker.waiting.waited()?;
                    Some((*rank, waited.min(MAX_WAIT)))
                })
                .collect(),
            quiet: self.net.links.quiet(job).map(|quiet| quiet.min(MAX_WAIT)),
        }
    }

    /// A node answered which ranks it runs (or did not answer: then its
    /// silence decides, and a probe looks whether it is there at all).
    pub(super) fn ranks_answered(
        &mut self,
        peer: PeerId,
        answer: Result<(Answer, BTreeMap<u64, Waits>), NoRanks>,
        asked: Duration,
    ) {
        match answer {
            Ok((answer, waits)) => {
                let now = self.now();
                for (job, waits) in waits {
                    self.stall.heard(now, asked, JobId(job), peer, waits);
                }
                self.feed(machine::Input::RanksAnswered { node: peer, answer });
            }
            Err(e) => {
                tracing::debug!(%peer, "no answer about its ranks: {e}");
                self.maybe_probe(peer);
            }
        }
    }

    /// A home asks which of its ranks run here: the ranks of the asked
    /// jobs that run or are starting here. Workers of that home's jobs it
    /// no longer places here, given to this node more than the grace ago
    /// (a younger one may be a grant the question crossed), are stopped.
    pub(super) fn ranks_asked(&mut self, from: PeerId, jobs: BTreeMap<u64, Vec<u32>>) -> PeerReply {
        if jobs.len() > MAX_ASKED_JOBS {
            return PeerReply::refused(
                RefusalKind::Malformed,
                format!(
                    "asked about {} jobs; at most {MAX_ASKED_JOBS} at once",
                    jobs.len()
                ),
            );
        }
        let grace = self.machine.liveness_config().grace;
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
        let waits = running
            .keys()
            .map(|job| (*job, self.waits_here(*job)))
            .collect();
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
            waits,
        }
    }
}

/// The waits of an answer, kept only for the jobs and ranks asked about
/// (a peer cannot make the home keep anything else).
fn asked_waits(
    asked: &BTreeMap<u64, Vec<u32>>,
    waits: BTreeMap<u64, Waits>,
) -> BTreeMap<u64, Waits> {
    waits
        .into_iter()
        .filter_map(|(job, mut waits)| {
            let ranks = asked.get(&job)?;
            waits.ranks.retain(|rank, _| ranks.contains(rank));
            Some((job, waits))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's answer keeps, at the home, only the waits of the jobs and
    /// ranks the home asked it about: a peer naming other jobs or ranks
    /// makes the home hold nothing more.
    #[test]
    fn a_peers_waits_are_kept_only_for_what_it_was_asked() {
        let asked: BTreeMap<u64, Vec<u32>> = [(1, vec![0, 2])].into();
        let waits = |ranks: &[u32]| Waits {
            ranks: ranks.iter().map(|r| (*r, Duration::from_secs(5))).collect(),
            quiet: Some(Duration::from_secs(5)),
        };
        let said: BTreeMap<u64, Waits> = [(1, waits(&[0, 1, 2, 3])), (9, waits(&[0]))].into();
        let kept = asked_waits(&asked, said);
        assert_eq!(kept, [(1, waits(&[0, 2]))].into());
    }
}

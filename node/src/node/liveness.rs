//! The loop's side of rank liveness (the decisions are the core's
//! [`zorilla_core::liveness`]): as a home, asking every node that holds
//! ranks of its jobs which it runs, and giving up the ranks that count as
//! lost; as a member, answering that truthfully (a node that restarted
//! knows none) and stopping workers of ranks the home no longer places
//! here (it took them for lost and gave them to another node).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use zorilla_core::advert::JobId;
use zorilla_core::advert::Phase;
use zorilla_core::liveness::{Answer, Lost};
use zorilla_core::node::Input;
use zorilla_core::stall::{MAX_WAIT, Waits};
use zorilla_overlay::PeerId;

use super::{Done, NoRanks, Node};
use crate::wire::{MAX_ASKED_JOBS, PeerReply, PeerRpc, RefusalKind};

/// How often the loop looks for questions due and silent nodes: well
/// within the core's two seconds between questions.
pub(super) const CHECK: Duration = Duration::from_millis(500);

/// How long a home holds back a verdict that a node is lost while it is
/// out of touch with most copies of a job that node serves (see
/// [`zorilla_core::replica::Replica::in_touch`]). Such a home may be the
/// one cut off: its copies then elect another home, which keeps the job's
/// workers, and it hears so and steps down once the partition heals. Had it
/// decided alone, it would have failed (or restarted elsewhere) a job that
/// runs on. A home whose copies all died decides after this.
pub(super) const HOLD_AT_MOST: Duration = Duration::from_secs(30);

/// At most this many verdicts are held; beyond, they are delivered.
const MAX_HELD: usize = 1024;

/// Loss verdicts a home holds back while it is out of touch with most of
/// the copies of a job they concern (see [`HOLD_AT_MOST`]).
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Nodes that answered no probe, since when held.
    dead: BTreeMap<PeerId, Instant>,
    /// Ranks of silent nodes, since when held.
    lost: Vec<(Lost<PeerId>, Instant)>,
}

impl Held {
    /// Holds the verdict that `peer` is dead (since the first time it was
    /// held); false when too many are held already.
    fn hold_dead(&mut self, peer: PeerId, now: Instant) -> bool {
        if self.dead.len() + self.lost.len() >= MAX_HELD && !self.dead.contains_key(&peer) {
            return false;
        }
        self.dead.entry(peer).or_insert(now);
        true
    }

    /// Holds the verdict that ranks are lost; false when too many are held.
    fn hold_lost(&mut self, lost: Lost<PeerId>, now: Instant) -> Result<(), Lost<PeerId>> {
        if self.dead.len() + self.lost.len() >= MAX_HELD {
            return Err(lost);
        }
        self.lost.push((lost, now));
        Ok(())
    }

    /// Whether nothing is held.
    fn is_empty(&self) -> bool {
        self.dead.is_empty() && self.lost.is_empty()
    }
}

impl Node {
    /// Ranks of silent nodes are lost; nodes due a question get one.
    pub(super) fn check_ranks(&mut self) {
        let now = self.now();
        self.recheck_held();
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
                let call = net.call_ok(peer, PeerRpc::Ranks { jobs: jobs.clone() });
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
        self.check_stalls();
    }

    /// Ends the home jobs whose running ranks all wait with nothing in
    /// flight (the core decides: see [`zorilla_core::stall`]). The ranks
    /// on this node are asked here and now.
    fn check_stalls(&mut self) {
        let now = self.now();
        let running: Vec<JobId> = self
            .sched
            .home_jobs()
            .filter(|(_, phase)| *phase == Phase::Running)
            .map(|(job, _)| job)
            .collect();
        for job in running {
            let Some(table) = self.sched.ranks(job) else {
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
                let out = self.sched.handle(now, Input::Stalled { job, ranks });
                self.execute(out);
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
                let lost = self.liveness.answer(now, &peer, &answer);
                self.lose_ranks(lost);
            }
            Err(e) => {
                tracing::debug!(%peer, "no answer about its ranks: {e}");
                self.maybe_probe(peer);
            }
        }
    }

    /// A home job of this node that `peer` serves (runs ranks of, or holds
    /// a copy of) whose copies this node is out of touch with.
    fn cut_off_over(&self, peer: &PeerId) -> Option<u64> {
        let now = self.now();
        self.sched
            .home_jobs()
            .map(|(job, _)| job.0)
            .filter(|job| self.out_of_touch(*job, now))
            .find(|job| {
                self.sched
                    .placement(JobId(*job))
                    .is_some_and(|nodes| nodes.contains_key(peer))
                    || self.shares_job_replica(*job, peer)
            })
    }

    /// `peer` answered no probe: the scheduler loses it, unless this node
    /// is out of touch with most copies of a job it serves (then the
    /// verdict waits; see [`HOLD_AT_MOST`]).
    pub(super) fn lose_peer(&mut self, peer: PeerId) {
        if let Some(job) = self.cut_off_over(&peer)
            && self.held.hold_dead(peer, Instant::now())
        {
            tracing::warn!(
                job = %JobId(job),
                %peer,
                "peer does not answer, nor do most copies of a job it serves: this node may be the one cut off, so it waits before treating it as lost"
            );
            return;
        }
        tracing::warn!(%peer, "peer does not answer; treating it as lost");
        let out = self.sched.handle(self.now(), Input::PeerLost(peer));
        self.execute(out);
    }

    /// Held verdicts: delivered once held for [`HOLD_AT_MOST`]; asked
    /// again once this node hears most of the job's copies (the partition
    /// healed, or it was only slow); dropped once it is no longer the
    /// job's home (the home the copies elected decides).
    fn recheck_held(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let now = self.now();
        let at = Instant::now();
        let expired = |since: Instant| at.saturating_duration_since(since) >= HOLD_AT_MOST;
        let held = std::mem::take(&mut self.held);
        for (peer, since) in held.dead {
            if expired(since) {
                tracing::warn!(%peer, "peer does not answer, nor do most copies of a job it serves, for {HOLD_AT_MOST:?}: treating it as lost");
                let out = self.sched.handle(now, Input::PeerLost(peer));
                self.execute(out);
            } else if self.cut_off_over(&peer).is_none() {
                // A fresh probe decides, now that the copies are heard.
                self.maybe_probe(peer);
            } else {
                self.held.dead.insert(peer, since);
            }
        }
        for (lost, since) in held.lost {
            let job = lost.job;
            if expired(since) {
                self.deliver_lost(lost);
            } else if !self.sched.home_jobs().any(|(j, _)| j == job) {
                // Another home took the job over: it decides.
            } else if !self.out_of_touch(job.0, now) {
                // Asked again, now that the copies are heard.
                self.liveness.placed(now, job, lost.node, &lost.ranks);
            } else {
                self.held.lost.push((lost, since));
            }
        }
    }

    /// Gives up ranks that count as lost: the scheduler replaces them or
    /// fails the job (and says so in its events); held back for jobs whose
    /// copies this node is out of touch with (see [`HOLD_AT_MOST`]).
    fn lose_ranks(&mut self, lost: Vec<Lost<PeerId>>) {
        let now = self.now();
        for lost in lost {
            if self.out_of_touch(lost.job.0, now) {
                match self.held.hold_lost(lost, Instant::now()) {
                    Ok(()) => continue,
                    Err(lost) => self.deliver_lost(lost),
                }
            } else {
                self.deliver_lost(lost);
            }
        }
    }

    fn deliver_lost(&mut self, lost: Lost<PeerId>) {
        {
            let Lost {
                job,
                node,
                ranks,
                cause,
            } = lost;
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
            return PeerReply::refused(
                RefusalKind::Malformed,
                format!(
                    "asked about {} jobs; at most {MAX_ASKED_JOBS} at once",
                    jobs.len()
                ),
            );
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

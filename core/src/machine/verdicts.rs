//! Loss verdicts a home holds back while it is out of touch with most of
//! the copies of a job they concern: such a home may be the one cut off.
//! Its copies then elect another home, which keeps the job's workers, and
//! it hears so and steps down once the partition heals; had it decided
//! alone, it would have failed (or restarted elsewhere) a job that runs on.

use std::collections::BTreeMap;
use std::hash::Hash;

use super::{JobMachine, Notice, Origin, Output};
use crate::advert::JobId;
use crate::liveness::Lost;
use crate::node::Input as SchedInput;
use crate::{PeerKey, Time};

/// At most this many verdicts are held; beyond, they are delivered.
pub(super) const MAX_HELD: usize = 1024;

/// The verdicts held, and since when.
pub(super) struct Verdicts<P> {
    /// Nodes that answered no probe.
    dead: BTreeMap<P, Time>,
    /// Ranks that count as lost.
    lost: Vec<(Lost<P>, Time)>,
}

impl<P> Default for Verdicts<P> {
    fn default() -> Self {
        Verdicts {
            dead: BTreeMap::new(),
            lost: Vec::new(),
        }
    }
}

impl<P: PeerKey> Verdicts<P> {
    /// Holds the verdict that `peer` is dead (since the first time it was
    /// held); false when too many are held already.
    fn hold_dead(&mut self, peer: P, now: Time) -> bool {
        if self.len() >= MAX_HELD && !self.dead.contains_key(&peer) {
            return false;
        }
        self.dead.entry(peer).or_insert(now);
        true
    }

    /// Holds the verdict that ranks are lost; back when too many are held.
    fn hold_lost(&mut self, lost: Lost<P>, now: Time) -> Result<(), Lost<P>> {
        if self.len() >= MAX_HELD {
            return Err(lost);
        }
        self.lost.push((lost, now));
        Ok(())
    }

    fn len(&self) -> usize {
        self.dead.len() + self.lost.len()
    }

    fn is_empty(&self) -> bool {
        self.dead.is_empty() && self.lost.is_empty()
    }

    /// This node is not `job`'s home any more: the home the copies elected
    /// decides about its ranks.
    pub(super) fn forget_job(&mut self, job: JobId) {
        self.lost.retain(|(lost, _)| lost.job != job);
    }
}

type Out<P, R, C> = Vec<Output<P, R, C>>;

impl<P, R, C> JobMachine<P, R, C>
where
    P: PeerKey + Hash,
    C: Origin<P> + Clone,
{
    /// A home job of this node that `peer` serves (runs ranks of, or holds
    /// a copy of) whose copies this node is out of touch with.
    fn cut_off_over(&self, now: Time, peer: &P) -> Option<JobId> {
        self.sched
            .home_jobs()
            .map(|(job, _)| job)
            .filter(|job| self.out_of_touch(*job, now))
            .find(|job| {
                self.sched
                    .placement(*job)
                    .is_some_and(|nodes| nodes.contains_key(peer))
                    || self.shares_job_replica(*job, peer)
            })
    }

    /// `peer` answered no probe: the scheduler loses it, unless this node
    /// is out of touch with most copies of a job it serves.
    pub(super) fn lose_peer(&mut self, now: Time, peer: P, out: &mut Out<P, R, C>) {
        if let Some(job) = self.cut_off_over(now, &peer)
            && self.verdicts.hold_dead(peer.clone(), now)
        {
            out.push(Output::Notice(Notice::VerdictHeld { job, peer }));
            self.schedule_recheck(now);
            return;
        }
        out.push(Output::Notice(Notice::PeerLost {
            peer: peer.clone(),
            held: false,
        }));
        let sched = self.sched.handle(now, SchedInput::PeerLost(peer));
        self.sched_outputs(now, sched, out);
    }

    /// Gives up ranks that count as lost: the scheduler replaces them or
    /// fails the job; held back for jobs whose copies this node is out of
    /// touch with.
    pub(super) fn lose_ranks(&mut self, now: Time, lost: Vec<Lost<P>>, out: &mut Out<P, R, C>) {
        for lost in lost {
            if self.out_of_touch(lost.job, now) {
                match self.verdicts.hold_lost(lost, now) {
                    Ok(()) => self.schedule_recheck(now),
                    Err(lost) => self.deliver_lost(now, lost, out),
                }
            } else {
                self.deliver_lost(now, lost, out);
            }
        }
    }

    fn deliver_lost(&mut self, now: Time, lost: Lost<P>, out: &mut Out<P, R, C>) {
        let Lost {
            job,
            node,
            ranks,
            cause,
        } = lost;
        // The scheduler loses only ranks it still counts as running there,
        // so one lost by other means since (a probe, a withdrawal) or ended
        // is not lost twice.
        let input = SchedInput::RanksLost {
            job,
            node,
            ranks,
            cause,
        };
        let sched = self.sched.handle(now, input);
        self.sched_outputs(now, sched, out);
    }

    fn schedule_recheck(&mut self, now: Time) {
        if self.next_recheck.is_none() {
            self.next_recheck = Some(now.saturating_add(self.config.recheck));
        }
    }

    /// Held verdicts: delivered once held for
    /// [`MachineConfig::hold_at_most`](super::MachineConfig::hold_at_most);
    /// asked again once this node hears most of the job's copies (the
    /// partition healed, or it was only slow); dropped once it is no longer
    /// the job's home.
    pub(super) fn recheck_verdicts(&mut self, now: Time, out: &mut Out<P, R, C>) {
        self.next_recheck = None;
        let most = self.config.hold_at_most;
        let expired = |since: Time| now.saturating_sub(since) >= most;
        let held = std::mem::take(&mut self.verdicts);
        for (peer, since) in held.dead {
            if expired(since) {
                out.push(Output::Notice(Notice::PeerLost {
                    peer: peer.clone(),
                    held: true,
                }));
                let sched = self.sched.handle(now, SchedInput::PeerLost(peer));
                self.sched_outputs(now, sched, out);
            } else if self.cut_off_over(now, &peer).is_none() {
                // A fresh probe decides, now that the copies are heard.
                out.push(Output::Probe(peer));
            } else {
                self.verdicts.dead.insert(peer, since);
            }
        }
        for (lost, since) in held.lost {
            let job = lost.job;
            if expired(since) {
                self.deliver_lost(now, lost, out);
            } else if !self.sched.home_jobs().any(|(j, _)| j == job) {
                // Another home took the job over: it decides.
            } else if !self.out_of_touch(job, now) {
                // Asked again, now that the copies are heard.
                self.liveness.placed(now, job, lost.node, &lost.ranks);
            } else {
                self.verdicts.lost.push((lost, since));
            }
        }
        if !self.verdicts.is_empty() {
            self.schedule_recheck(now);
        }
    }
}

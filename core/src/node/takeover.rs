//! A job changing home (issue 16): the scheduler's three moves in a
//! takeover, from the home's state rebuilt from its log (the log's entries,
//! [`JobEntry`], and that state, [`JobState`], are
//! `joblog`'s):
//!
//! - a copy that became the job's primary **adopts** it
//!   ([`Scheduler::adopt`]) and tells the job's nodes that it is their home
//!   now (a [`Message::Placement`] from it);
//! - an old primary that learnt it is a copy **steps down**
//!   ([`Scheduler::step_down`]): it forgets the job as home, sending
//!   nothing and ending nothing, since the job is the new primary's;
//! - a node that runs ranks of the job **follows it** to its new home
//!   ([`Scheduler::home_moved`]), so that its reports and offers go there.
//!
//! Which node is primary is [`crate::replica`]'s decision; this module only
//! turns a log into a home and back. The log holds the home's own
//! [`JobEvent`]s: they are the decisions the rank table is made of (a
//! grant, a loss, an end), so replaying them rebuilds the table exactly,
//! and a successor decides from there as the old home would have.

use super::joblog::JobState;
use super::*;

/// Flood numbers of a home of term `t` start at `t` times this, so that a
/// new home's floods are never taken for copies of an older home's by the
/// nodes' duplicate caches (a home sends far fewer floods than this).
const FLOODS_PER_TERM: u32 = 1 << 20;

impl<P: PeerKey> Scheduler<P> {
    /// This node becomes the home of `job` (it took over as its primary in
    /// `term`), in the state its log describes. The job's nodes are told
    /// that this node is their home now, with the placement and phase; a
    /// job still short of workers floods again (its lifetime counted anew
    /// from now); a job that ended stays ended (its nodes hear so again,
    /// in case the old home died before telling them). Nothing happens if
    /// this node is the job's home already.
    pub fn adopt(
        &mut self,
        now: Time,
        job_id: JobId,
        term: u64,
        state: JobState<P>,
    ) -> Vec<Output<P>> {
        let mut out = Vec::new();
        if self.home.contains_key(&job_id) {
            return out;
        }
        let JobState {
            spec,
            owner,
            phase,
            ranks,
            grants,
            full,
            checkpoints,
            logged_checkpoints,
        } = state;
        self.checkpoints.absorb(checkpoints);
        let ended_with = match phase {
            Phase::Scheduling | Phase::Running => None,
            Phase::Completed => Some(RefuseReason::JobFull),
            Phase::Cancelled => Some(RefuseReason::Cancelled),
            Phase::Failed => Some(RefuseReason::Failed),
        };
        let granted = ranks.placed();
        let floods = ended_with.is_none() && !full && granted < spec.workers.max;
        let schedule = FloodSchedule::resume(
            self.config.schedule.clone(),
            spec.workers.max.saturating_sub(granted).max(1),
            self.last_reach,
        );
        let term = u32::try_from(term).unwrap_or(u32::MAX);
        let job = HomeJob {
            expires_at: now.saturating_add(spec.lifetime),
            phase,
            schedule,
            next_flood_at: floods.then_some(now),
            offers: BTreeMap::new(),
            worked: BTreeMap::new(),
            // The holds the old home's grants used are not logged; offers
            // to this home are made afresh.
            granted_holds: BTreeMap::new(),
            ranks,
            grants,
            earlier_floods: term.saturating_mul(FLOODS_PER_TERM),
            settle_at: None,
            settling: false,
            sufficed_since: None,
            ended_with,
            logged_checkpoints,
            report: PendingReport {
                needed: spec.workers.min,
                granted,
                ..PendingReport::default()
            },
            answered: BTreeSet::new(),
            asked: BTreeMap::new(),
            reach: None,
            spec,
            owner,
        };
        job.announce(job_id, Vec::new(), &BTreeSet::new(), &mut out);
        self.home.insert(job_id, job);
        if ended_with.is_some() {
            self.ended.push_back(job_id);
        }
        // Ranks this node runs answer to itself now.
        let me = self.id.clone();
        self.home_moved(job_id, me);
        // A log that holds every rank's successful end but not the job's
        // (the home that decided it died, or stepped down, before a copy
        // held its decision): the job completes here, as it would have
        // there. Without it the job would wait for ends that came already.
        self.complete_if_all_succeeded(job_id, &mut out);
        self.step_home_jobs(now, &mut out);
        self.loopback(now, out)
    }

    /// This node is no longer the home of `job`: another node took over as
    /// its primary (`new_home`). The job is forgotten as home without a
    /// word to anyone (its offers lapse at the nodes that hold them), and
    /// ranks this node runs of it answer to the new home. Returns whether
    /// this node was its home.
    pub fn step_down(&mut self, job: JobId, new_home: P) -> bool {
        let was = self.home.remove(&job).is_some();
        self.ended.retain(|j| *j != job);
        // The checkpoints are the new home's to keep (and to drop).
        drop(self.checkpoints.take_job(job.0));
        self.home_moved(job, new_home);
        was
    }

    /// The ranks this node runs or holds of `job` answer to `home` from
    /// now on (the job changed home).
    pub fn home_moved(&mut self, job: JobId, home: P) {
        if let Some(e) = self.engaged.get_mut(&job) {
            e.home = home;
        }
    }

    /// The home of `job` as this node's ranks of it know it.
    pub fn home_of(&self, job: JobId) -> Option<&P> {
        if self.home.contains_key(&job) {
            return Some(&self.id);
        }
        self.engaged.get(&job).map(|e| &e.home)
    }
}

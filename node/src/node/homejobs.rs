//! The jobs this node is home to, as the loop keeps them in memory: the
//! records of those under way, the newest finished ones (at most the
//! configured number), how many finished in each phase, and the output
//! bytes each job under way has taken. The store holds every record; this
//! is what the loop answers from without reading it, and the one place
//! that moves a job from under way to finished.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::protocol::JobPhase;
use crate::store::JobRecord;

/// See the [module docs](self).
pub(super) struct HomeJobs {
    /// Jobs under way, by id.
    under_way: BTreeMap<u64, JobRecord>,
    /// The newest finished jobs, oldest first, at most `capacity`.
    finished: VecDeque<JobRecord>,
    /// How many jobs finished in each phase (all of them, not only those
    /// kept).
    counts: BTreeMap<JobPhase, u64>,
    /// `Config::finished_in_memory` (at least one).
    capacity: usize,
    /// Output bytes taken per job under way (see [`HomeJobs::take_output`]).
    output_bytes: HashMap<u64, u64>,
}

impl HomeJobs {
    /// No jobs; at most `capacity` finished ones kept.
    pub(super) fn new(capacity: usize) -> HomeJobs {
        HomeJobs {
            under_way: BTreeMap::new(),
            finished: VecDeque::new(),
            counts: BTreeMap::new(),
            capacity: capacity.max(1),
            output_bytes: HashMap::new(),
        }
    }

    /// A job under way, by id.
    pub(super) fn under_way(&self, id: u64) -> Option<&JobRecord> {
        self.under_way.get(&id)
    }

    /// A job under way, to change (the caller persists it).
    pub(super) fn under_way_mut(&mut self, id: u64) -> Option<&mut JobRecord> {
        self.under_way.get_mut(&id)
    }

    /// Whether `id` is under way here.
    pub(super) fn is_under_way(&self, id: u64) -> bool {
        self.under_way.contains_key(&id)
    }

    /// The jobs under way, by id.
    pub(super) fn all_under_way(&self) -> &BTreeMap<u64, JobRecord> {
        &self.under_way
    }

    /// The newest finished jobs kept, oldest first.
    pub(super) fn finished(&self) -> &VecDeque<JobRecord> {
        &self.finished
    }

    /// A job accepted here, or taken over, under way.
    pub(super) fn start(&mut self, record: JobRecord) {
        self.under_way.insert(record.id, record);
    }

    /// A job that finished (here, before a restart, or at the home this
    /// node took it over from): counted, and kept among the newest.
    pub(super) fn add_finished(&mut self, record: JobRecord) {
        *self.counts.entry(record.phase).or_default() += 1;
        while self.finished.len() >= self.capacity {
            self.finished.pop_front();
        }
        self.finished.push_back(record);
    }

    /// Job `id` under way finished: out of memory but for the newest few,
    /// its output count gone. Its record, if it was under way.
    pub(super) fn finish(&mut self, id: u64) -> Option<&JobRecord> {
        let record = self.under_way.remove(&id)?;
        self.output_bytes.remove(&id);
        self.add_finished(record);
        self.finished.back()
    }

    /// Job `id` is under way here no more (another node is its home): its
    /// record, if it was.
    pub(super) fn remove(&mut self, id: u64) -> Option<JobRecord> {
        self.output_bytes.remove(&id);
        self.under_way.remove(&id)
    }

    /// Job `id` as kept in memory: under way, or among the newest
    /// finished.
    pub(super) fn get(&self, id: u64) -> Option<&JobRecord> {
        self.under_way
            .get(&id)
            .or_else(|| self.finished.iter().rev().find(|j| j.id == id))
    }

    /// Puts a changed record back where it is kept in memory (nowhere if
    /// it is not: the store has it).
    pub(super) fn update(&mut self, record: JobRecord) {
        if let Some(job) = self.under_way.get_mut(&record.id) {
            *job = record;
        } else if let Some(job) = self.finished.iter_mut().rev().find(|j| j.id == record.id) {
            *job = record;
        }
    }

    /// How many jobs are in each phase: those finished and those under
    /// way.
    pub(super) fn counts(&self) -> BTreeMap<JobPhase, u64> {
        self.under_way
            .values()
            .fold(self.counts.clone(), |mut by, job| {
                *by.entry(job.phase).or_insert(0) += 1;
                by
            })
    }

    /// How many jobs finished.
    pub(super) fn finished_count(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Takes `len` more output bytes for job `id` if its outputs stay
    /// within `room`; `stored` says what it had before this run of the
    /// node (asked once). The bytes it would reach if not.
    pub(super) fn take_output(
        &mut self,
        id: u64,
        len: u64,
        room: u64,
        stored: impl FnOnce() -> u64,
    ) -> Result<(), u64> {
        let used = self.output_bytes.entry(id).or_insert_with(stored);
        let after = used.saturating_add(len);
        if after > room {
            return Err(after);
        }
        *used = after;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::job;

    #[test]
    fn a_finished_job_leaves_the_jobs_under_way_and_only_the_newest_are_kept() {
        let mut jobs = HomeJobs::new(2);
        for id in 1..=3 {
            jobs.start(job(id, JobPhase::Running));
        }
        jobs.take_output(1, 10, 100, || 0).unwrap();
        for id in 1..=3 {
            jobs.under_way_mut(id).unwrap().phase = JobPhase::Completed;
            assert_eq!(jobs.finish(id).map(|j| j.id), Some(id));
        }
        assert!(jobs.finish(3).is_none(), "finished once");
        assert!(!jobs.is_under_way(1));
        assert!(jobs.get(1).is_none(), "the oldest finished went");
        assert_eq!(jobs.get(3).map(|j| j.phase), Some(JobPhase::Completed));
        assert_eq!(jobs.finished_count(), 3, "all counted");
        assert_eq!(jobs.counts()[&JobPhase::Completed], 3);
        // A job's output count goes with it: a job of that id starts anew.
        jobs.start(job(1, JobPhase::Running));
        assert_eq!(jobs.take_output(1, 100, 100, || 0), Ok(()));
    }

    #[test]
    fn counts_take_in_the_jobs_under_way() {
        let mut jobs = HomeJobs::new(4);
        jobs.add_finished(job(1, JobPhase::Failed));
        jobs.start(job(2, JobPhase::Scheduling));
        let counts = jobs.counts();
        assert_eq!(counts[&JobPhase::Failed], 1);
        assert_eq!(counts[&JobPhase::Scheduling], 1);
        assert_eq!(jobs.finished_count(), 1);
    }

    #[test]
    fn an_update_goes_where_the_job_is_kept() {
        let mut jobs = HomeJobs::new(4);
        jobs.start(job(1, JobPhase::Running));
        jobs.add_finished(job(2, JobPhase::Completed));
        let mut one = job(1, JobPhase::Running);
        one.reason = "under way".into();
        jobs.update(one);
        let mut two = job(2, JobPhase::Completed);
        two.reason = "moved".into();
        jobs.update(two);
        jobs.update(job(3, JobPhase::Running));
        assert_eq!(jobs.get(1).unwrap().reason, "under way");
        assert_eq!(jobs.get(2).unwrap().reason, "moved");
        assert!(jobs.get(3).is_none(), "not kept: the store has it");
    }

    #[test]
    fn outputs_are_taken_within_the_room_counting_what_was_stored() {
        let mut jobs = HomeJobs::new(4);
        jobs.start(job(1, JobPhase::Running));
        let mut asked = 0;
        assert_eq!(
            jobs.take_output(1, 40, 100, || {
                asked += 1;
                50
            }),
            Ok(())
        );
        assert_eq!(jobs.take_output(1, 11, 100, || unreachable!()), Err(101));
        assert_eq!(jobs.take_output(1, 10, 100, || unreachable!()), Ok(()));
        assert_eq!(asked, 1, "the store is asked once");
        assert_eq!(
            jobs.take_output(1, u64::MAX, u64::MAX - 1, || 0),
            Err(u64::MAX)
        );
        assert!(jobs.remove(1).is_some());
        assert!(!jobs.is_under_way(1));
    }
}

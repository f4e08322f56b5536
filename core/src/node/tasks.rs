//! A job array's progress at its home: which task index goes to the next
//! node that offers, and what became of the tasks that ended, kept as
//! counts (see [`TaskArray`]). Only the tasks that run have records in the
//! [`RankTable`](super::RankTable) (a task's index is its rank there); the
//! others are a cursor, counts, the tasks that wait to run again, and the
//! failed ones with how they failed (which `zorilla status` lists).
//!
//! The rules: a task whose worker exits with status 0 is done; one that
//! fails (another status, a trap, a limit) runs again up to the array's
//! `retries` times, then counts as failed; one lost with its node, or
//! cancelled by it (the node stopped), runs again without counting. A task
//! to run again goes first to whichever node offers next, but not to the
//! node it failed on while any other task can start there ("elsewhere",
//! as far as the grid allows: on a grid of one node it runs there again).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::outcome::RankOutcome;
use super::spec::TaskArray;

/// What became of one task's worker, as [`TaskProgress::ended`] decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEnd {
    /// It exited with status 0.
    Done,
    /// It failed and runs again (this was its `attempt`th failure).
    Retry {
        /// Failures so far, 1 for the first.
        attempt: u8,
    },
    /// It failed once more than its retries allow.
    Failed,
    /// It was lost or cancelled with its node: it runs again, uncounted.
    Again,
}

/// How many tasks of an array are in each phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCounts {
    /// Tasks in all.
    pub count: u32,
    /// Not started yet, or waiting to run again.
    pub waiting: u32,
    /// Running (or starting) now.
    pub running: u32,
    /// Exited with status 0.
    pub done: u32,
    /// Failed for good.
    pub failed: u32,
}

/// A job array's progress (see the module's docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskProgress<P> {
    array: TaskArray,
    /// Every task below this was handed out at least once.
    next: u32,
    done: u32,
    /// Tasks to run again, each with the node it last failed on (`None`
    /// when it was lost, not failed).
    again: BTreeMap<u32, Option<P>>,
    /// Failures so far of the tasks not over yet that failed before.
    attempts: BTreeMap<u32, u8>,
    /// Tasks that failed for good, with the node and how (their last
    /// attempt's).
    failed: BTreeMap<u32, (P, RankOutcome)>,
}

impl<P> TaskProgress<P> {
    /// The progress of a fresh array.
    pub fn new(array: TaskArray) -> Self {
        TaskProgress {
            array,
            next: 0,
            done: 0,
            again: BTreeMap::new(),
            attempts: BTreeMap::new(),
            failed: BTreeMap::new(),
        }
    }

    /// The array's shape.
    pub fn array(&self) -> TaskArray {
        self.array
    }

    /// Tasks that could start now: waiting to run again, or never started.
    pub fn available(&self) -> u32 {
        let fresh = self.array.count.saturating_sub(self.next);
        u32::try_from(self.again.len())
            .unwrap_or(u32::MAX)
            .saturating_add(fresh)
    }

    /// Whether every task is done or failed for good.
    pub fn over(&self) -> bool {
        let ended = u32::try_from(self.failed.len())
            .unwrap_or(u32::MAX)
            .saturating_add(self.done);
        ended >= self.array.count
    }

    /// The counts by phase, with `running` tasks running.
    pub fn counts(&self, running: u32) -> TaskCounts {
        TaskCounts {
            count: self.array.count,
            waiting: self.available(),
            running,
            done: self.done,
            failed: u32::try_from(self.failed.len()).unwrap_or(u32::MAX),
        }
    }

    /// The tasks that failed for good, lowest first, with where and how.
    pub fn failed(&self) -> impl Iterator<Item = (u32, &P, &RankOutcome)> {
        self.failed
            .iter()
            .map(|(t, (node, outcome))| (*t, node, outcome))
    }

    /// Failed tasks so far (their failed attempts) of the tasks not over.
    pub fn attempts(&self, task: u32) -> u8 {
        self.attempts.get(&task).copied().unwrap_or(0)
    }
}

impl<P: Clone + Eq> TaskProgress<P> {
    /// The next task for `node`, taken out of those that wait: one to run
    /// again that did not fail on `node`, else a fresh one, else one that
    /// did (see the module's docs); `None` if no task waits.
    pub(crate) fn take(&mut self, node: &P) -> Option<u32> {
        let elsewhere = self
            .again
            .iter()
            .find(|(_, failed_on)| failed_on.as_ref() != Some(node))
            .map(|(task, _)| *task);
        if let Some(task) = elsewhere {
            self.again.remove(&task);
            return Some(task);
        }
        if self.next < self.array.count {
            let task = self.next;
            self.next += 1;
            return Some(task);
        }
        self.again.pop_first().map(|(task, _)| task)
    }

    /// Task `task`, handed out before, is handed out again as a grant the
    /// log recorded did (see [`JobState`](super::JobState)'s replay).
    pub(crate) fn restore(&mut self, task: u32) {
        self.again.remove(&task);
        self.next = self.next.max(task.saturating_add(1)).min(self.array.count);
    }

    /// Task `task`'s worker on `node` ended with `outcome`; what that
    /// makes of the task.
    pub(crate) fn ended(&mut self, task: u32, node: &P, outcome: RankOutcome) -> TaskEnd {
        match outcome {
            RankOutcome::Exited(0) => {
                self.attempts.remove(&task);
                self.done = self.done.saturating_add(1);
                TaskEnd::Done
            }
            RankOutcome::Cancelled | RankOutcome::Lost(_) => {
                self.again.insert(task, None);
                TaskEnd::Again
            }
            outcome => {
                let attempt = self
                    .attempts
                    .get(&task)
                    .copied()
                    .unwrap_or(0)
                    .saturating_add(1);
                if attempt <= self.array.retries {
                    self.attempts.insert(task, attempt);
                    self.again.insert(task, Some(node.clone()));
                    TaskEnd::Retry { attempt }
                } else {
                    self.attempts.remove(&task);
                    self.failed.insert(task, (node.clone(), outcome));
                    TaskEnd::Failed
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::outcome::{Failure, LostReason};

    fn array(count: u32, retries: u8) -> TaskProgress<u32> {
        TaskProgress::new(TaskArray {
            count,
            max_running: count,
            retries,
        })
    }

    #[test]
    fn tasks_go_out_in_order_and_the_array_is_over_when_each_is_done_or_failed() {
        let mut p = array(3, 0);
        assert_eq!(p.take(&1), Some(0));
        assert_eq!(p.take(&1), Some(1));
        assert_eq!(p.take(&2), Some(2));
        assert_eq!(p.take(&2), None);
        assert_eq!(p.ended(0, &1, RankOutcome::Exited(0)), TaskEnd::Done);
        assert_eq!(p.ended(1, &1, RankOutcome::Exited(0)), TaskEnd::Done);
        assert!(!p.over());
        assert_eq!(p.ended(2, &2, RankOutcome::Exited(4)), TaskEnd::Failed);
        assert!(p.over());
        assert_eq!(
            p.counts(0),
            TaskCounts {
                count: 3,
                waiting: 0,
                running: 0,
                done: 2,
                failed: 1
            }
        );
        assert_eq!(
            p.failed().collect::<Vec<_>>(),
            vec![(2, &2, &RankOutcome::Exited(4))]
        );
    }

    #[test]
    fn a_failed_task_runs_again_elsewhere_up_to_its_retries() {
        let mut p = array(3, 2);
        assert_eq!(p.take(&1), Some(0));
        let crash = RankOutcome::Failed(Failure::Trapped("unreachable".into()));
        assert_eq!(p.ended(0, &1, crash.clone()), TaskEnd::Retry { attempt: 1 });
        // Node 1 gets a fresh task, not the one that failed on it.
        assert_eq!(p.take(&1), Some(1));
        // Node 2 gets the failed one first.
        assert_eq!(p.take(&2), Some(0));
        assert_eq!(p.ended(0, &2, crash.clone()), TaskEnd::Retry { attempt: 2 });
        assert_eq!(p.attempts(0), 2);
        assert_eq!(p.take(&3), Some(0));
        assert_eq!(p.ended(0, &3, crash.clone()), TaskEnd::Failed);
        assert_eq!(p.failed().map(|(t, ..)| t).collect::<Vec<_>>(), vec![0]);
        assert_eq!(p.attempts(0), 0);
    }

    #[test]
    fn on_a_grid_of_one_node_a_failed_task_runs_there_again_once_nothing_else_waits() {
        let mut p = array(2, 1);
        assert_eq!(p.take(&1), Some(0));
        p.ended(0, &1, RankOutcome::Exited(1));
        assert_eq!(p.take(&1), Some(1), "a fresh task first");
        assert_eq!(p.take(&1), Some(0), "then the one that failed here");
    }

    #[test]
    fn a_lost_or_cancelled_task_runs_again_without_counting_a_failure() {
        let mut p = array(1, 0);
        assert_eq!(p.take(&1), Some(0));
        assert_eq!(
            p.ended(0, &1, RankOutcome::Lost(LostReason::Left)),
            TaskEnd::Again
        );
        assert_eq!(p.available(), 1);
        assert_eq!(p.take(&1), Some(0), "lost, not failed: node 1 may have it");
        assert_eq!(p.ended(0, &1, RankOutcome::Cancelled), TaskEnd::Again);
        assert_eq!(p.take(&2), Some(0));
        assert_eq!(p.ended(0, &2, RankOutcome::Exited(0)), TaskEnd::Done);
        assert!(p.over());
    }
}

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
//!
//! **Spot checks** (issue 34, item 3): of an array whose spec asks for
//! them, the home picks some tasks that exited with status 0, at random
//! and after the fact (so that a member cannot know which of its results
//! will be checked), and runs each once more on another node. The
//! member's [`ResultDigest`] of each run is compared:
//! - the same: the task is done, and checked;
//! - different: it runs a third time, on a node that ran neither; the
//!   result two of the three agree on is the task's, and the node(s) that
//!   gave another are **caught**: every task they did that was not checked
//!   runs again elsewhere, and nothing they report for the array counts
//!   any more (the home avoids them too);
//! - three different results: the task failed ([`RankOutcome::Disputed`]).
//!
//! A check never runs on a node that already gave a result for the task,
//! however long the array waits for another node.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::outcome::RankOutcome;
use super::spec::TaskArray;
use crate::runs::ResultDigest;

/// The most results a checked task gathers: a first, a check and, if
/// those differ, a referee.
const MAX_RESULTS: usize = 3;

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
    /// It was lost or cancelled with its node (or it ran on a node caught
    /// lying): it runs again, uncounted.
    Again,
    /// It exited with status 0 and was picked for a spot check: it runs
    /// once more on another node before it counts as done.
    Checking,
    /// Its results so far differ: it runs once more on a node that gave
    /// none of them, to settle which is right.
    Disputed,
    /// A check settled it: done (or failed, if the agreeing runs failed),
    /// and any node whose result differed is caught.
    Checked,
}

/// One run's result of a task under a spot check.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TaskResult<P> {
    node: P,
    digest: Option<ResultDigest>,
    outcome: RankOutcome,
}

impl<P> TaskResult<P> {
    /// Whether two runs gave the same result (a run without a digest
    /// agrees with none).
    fn agrees(&self, other: &TaskResult<P>) -> bool {
        self.digest.is_some() && self.digest == other.digest
    }
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
    /// Of the done or failed ones, those a spot check settled.
    #[serde(default)]
    pub checked: u32,
    /// Waiting for a spot check (or its referee) to settle them.
    #[serde(default)]
    pub checking: u32,
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
    /// Whether the array is spot-checked (see the module's docs): then
    /// the three fields below are kept.
    spot: bool,
    /// Tasks under a spot check, with the results they gave so far.
    checking: BTreeMap<u32, Vec<TaskResult<P>>>,
    /// Of those, the ones waiting for a node to run the next check.
    to_check: BTreeSet<u32>,
    /// Done tasks no check settled, with the node that did them: they
    /// run again if that node is caught.
    unchecked: BTreeMap<u32, P>,
    /// Tasks a check settled.
    checked: u32,
    /// Nodes whose result differed from two agreeing others'.
    caught: BTreeSet<P>,
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
            spot: array.spot_checks > 0,
            checking: BTreeMap::new(),
            to_check: BTreeSet::new(),
            unchecked: BTreeMap::new(),
            checked: 0,
            caught: BTreeSet::new(),
        }
    }

    /// The array's shape.
    pub fn array(&self) -> TaskArray {
        self.array
    }

    /// Tasks that could start now: waiting to run again (or to be
    /// checked), or never started.
    pub fn available(&self) -> u32 {
        let fresh = self.array.count.saturating_sub(self.next);
        len(self.again.len())
            .saturating_add(len(self.to_check.len()))
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
            failed: len(self.failed.len()),
            checked: self.checked,
            checking: len(self.checking.len()),
        }
    }

    /// The nodes caught giving a result two others disagreed with.
    pub fn caught(&self) -> &BTreeSet<P> {
        &self.caught
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

fn len(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl<P: Clone + Ord> TaskProgress<P> {
    /// Whether a task waits that `node` may take: a fresh one, one to run
    /// again, or a check it gave no result for.
    pub fn waits_for(&self, node: &P) -> bool {
        self.next < self.array.count
            || !self.again.is_empty()
            || self.to_check.iter().any(|task| self.may_check(*task, node))
    }

    /// Whether `node` may run `task`'s next check: it gave no result for
    /// it yet.
    fn may_check(&self, task: u32, node: &P) -> bool {
        self.checking
            .get(&task)
            .is_none_or(|results| results.iter().all(|r| r.node != *node))
    }

    /// The next task for `node`, taken out of those that wait: a check
    /// `node` gave no result for, else one to run again that did not fail
    /// on `node`, else a fresh one, else one that did (see the module's
    /// docs); `None` if no task waits.
    pub(crate) fn take(&mut self, node: &P) -> Option<u32> {
        let check = self
            .to_check
            .iter()
            .copied()
            .find(|task| self.may_check(*task, node));
        if let Some(task) = check {
            self.to_check.remove(&task);
            return Some(task);
        }
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
        self.to_check.remove(&task);
        self.next = self.next.max(task.saturating_add(1)).min(self.array.count);
    }

    /// Task `task`'s worker on `node` ended with `outcome`, its result
    /// digest `digest`; `check`: whether the home picked this end for a
    /// spot check (it counts only for a first success of a spot-checked
    /// array). What that makes of the task.
    pub(crate) fn ended(
        &mut self,
        task: u32,
        node: &P,
        outcome: RankOutcome,
        digest: Option<ResultDigest>,
        check: bool,
    ) -> TaskEnd {
        let lost = matches!(outcome, RankOutcome::Cancelled | RankOutcome::Lost(_));
        if self.caught.contains(node) {
            // Nothing a caught node says counts: its task runs elsewhere.
            if self.checking.contains_key(&task) {
                self.to_check.insert(task);
            } else {
                self.again.insert(task, Some(node.clone()));
            }
            return TaskEnd::Again;
        }
        if self.checking.contains_key(&task) {
            if lost {
                self.to_check.insert(task);
                return TaskEnd::Again;
            }
            let result = TaskResult {
                node: node.clone(),
                digest,
                outcome,
            };
            if let Some(results) = self.checking.get_mut(&task) {
                results.push(result);
            }
            return self.settle(task);
        }
        match outcome {
            RankOutcome::Exited(0) if check && self.spot => {
                self.attempts.remove(&task);
                let first = TaskResult {
                    node: node.clone(),
                    digest,
                    outcome,
                };
                self.checking.insert(task, vec![first]);
                self.to_check.insert(task);
                TaskEnd::Checking
            }
            RankOutcome::Exited(0) => {
                self.attempts.remove(&task);
                self.done = self.done.saturating_add(1);
                if self.spot {
                    self.unchecked.insert(task, node.clone());
                }
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

    /// Task `task` runs again, from scratch (not on `not_on` while another
    /// task can start there).
    fn requeue(&mut self, task: u32, not_on: Option<P>) {
        self.checking.remove(&task);
        self.to_check.remove(&task);
        self.again.insert(task, not_on);
    }

    /// Task `task` under a check has one more result: settled if two
    /// agree, checked once more if they do not and a referee can still
    /// run, failed otherwise.
    fn settle(&mut self, task: u32) -> TaskEnd {
        let Some(results) = self.checking.get(&task) else {
            return TaskEnd::Again;
        };
        let majority = results
            .iter()
            .find(|r| results.iter().filter(|o| r.agrees(o)).count() >= 2)
            .cloned();
        let Some(kept) = majority else {
            if results.len() < MAX_RESULTS {
                self.to_check.insert(task);
                return TaskEnd::Disputed;
            }
            let last = results.last().map(|r| r.node.clone());
            self.checking.remove(&task);
            self.checked = self.checked.saturating_add(1);
            if let Some(node) = last {
                self.failed.insert(task, (node, RankOutcome::Disputed));
            }
            return TaskEnd::Failed;
        };
        let liars: Vec<P> = results
            .iter()
            .filter(|r| !r.agrees(&kept))
            .map(|r| r.node.clone())
            .collect();
        self.checking.remove(&task);
        self.checked = self.checked.saturating_add(1);
        if kept.outcome.is_success() {
            self.done = self.done.saturating_add(1);
        } else {
            self.failed.insert(task, (kept.node.clone(), kept.outcome));
        }
        for liar in liars {
            self.catch(liar);
        }
        TaskEnd::Checked
    }

    /// `node` gave a result two others disagreed with: each task it did
    /// that no check settled runs again, elsewhere, and its results of
    /// tasks under a check no longer count (a task left with none and not
    /// running starts afresh; one running a check has that run's result
    /// checked in turn).
    fn catch(&mut self, node: P) {
        let redo: Vec<u32> = self
            .unchecked
            .iter()
            .filter(|(_, by)| **by == node)
            .map(|(task, _)| *task)
            .collect();
        for task in redo {
            self.unchecked.remove(&task);
            self.done = self.done.saturating_sub(1);
            self.requeue(task, Some(node.clone()));
        }
        let mut afresh = Vec::new();
        for (task, results) in &mut self.checking {
            results.retain(|r| r.node != node);
            if results.is_empty() && self.to_check.contains(task) {
                afresh.push(*task);
            }
        }
        for task in afresh {
            self.requeue(task, Some(node.clone()));
        }
        self.caught.insert(node);
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
            spot_checks: 0,
        })
    }

    #[test]
    fn tasks_go_out_in_order_and_the_array_is_over_when_each_is_done_or_failed() {
        let mut p = array(3, 0);
        assert_eq!(p.take(&1), Some(0));
        assert_eq!(p.take(&1), Some(1));
        assert_eq!(p.take(&2), Some(2));
        assert_eq!(p.take(&2), None);
        assert_eq!(
            p.ended(0, &1, RankOutcome::Exited(0), None, false),
            TaskEnd::Done
        );
        assert_eq!(
            p.ended(1, &1, RankOutcome::Exited(0), None, false),
            TaskEnd::Done
        );
        assert!(!p.over());
        assert_eq!(
            p.ended(2, &2, RankOutcome::Exited(4), None, false),
            TaskEnd::Failed
        );
        assert!(p.over());
        assert_eq!(
            p.counts(0),
            TaskCounts {
                count: 3,
                waiting: 0,
                running: 0,
                done: 2,
                failed: 1,
                checked: 0,
                checking: 0,
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
        assert_eq!(
            p.ended(0, &1, crash.clone(), None, false),
            TaskEnd::Retry { attempt: 1 }
        );
        // Node 1 gets a fresh task, not the one that failed on it.
        assert_eq!(p.take(&1), Some(1));
        // Node 2 gets the failed one first.
        assert_eq!(p.take(&2), Some(0));
        assert_eq!(
            p.ended(0, &2, crash.clone(), None, false),
            TaskEnd::Retry { attempt: 2 }
        );
        assert_eq!(p.attempts(0), 2);
        assert_eq!(p.take(&3), Some(0));
        assert_eq!(p.ended(0, &3, crash.clone(), None, false), TaskEnd::Failed);
        assert_eq!(p.failed().map(|(t, ..)| t).collect::<Vec<_>>(), vec![0]);
        assert_eq!(p.attempts(0), 0);
    }

    #[test]
    fn on_a_grid_of_one_node_a_failed_task_runs_there_again_once_nothing_else_waits() {
        let mut p = array(2, 1);
        assert_eq!(p.take(&1), Some(0));
        p.ended(0, &1, RankOutcome::Exited(1), None, false);
        assert_eq!(p.take(&1), Some(1), "a fresh task first");
        assert_eq!(p.take(&1), Some(0), "then the one that failed here");
    }

    #[test]
    fn a_lost_or_cancelled_task_runs_again_without_counting_a_failure() {
        let mut p = array(1, 0);
        assert_eq!(p.take(&1), Some(0));
        assert_eq!(
            p.ended(0, &1, RankOutcome::Lost(LostReason::Left), None, false),
            TaskEnd::Again
        );
        assert_eq!(p.available(), 1);
        assert_eq!(p.take(&1), Some(0), "lost, not failed: node 1 may have it");
        assert_eq!(
            p.ended(0, &1, RankOutcome::Cancelled, None, false),
            TaskEnd::Again
        );
        assert_eq!(p.take(&2), Some(0));
        assert_eq!(
            p.ended(0, &2, RankOutcome::Exited(0), None, false),
            TaskEnd::Done
        );
        assert!(p.over());
    }

    fn checked_array(count: u32) -> TaskProgress<u32> {
        TaskProgress::new(TaskArray {
            count,
            max_running: count,
            retries: 0,
            spot_checks: 100,
        })
    }

    fn ok(digest: u8) -> (RankOutcome, Option<ResultDigest>) {
        (RankOutcome::Exited(0), Some(ResultDigest([digest; 32])))
    }

    fn end(p: &mut TaskProgress<u32>, task: u32, node: u32, digest: u8, check: bool) -> TaskEnd {
        let (outcome, digest) = ok(digest);
        p.ended(task, &node, outcome, digest, check)
    }

    #[test]
    fn a_picked_task_is_done_only_once_another_node_gave_the_same_result() {
        let mut p = checked_array(2);
        assert_eq!(p.take(&1), Some(0));
        assert_eq!(end(&mut p, 0, 1, 7, true), TaskEnd::Checking);
        assert_eq!(p.counts(0).done, 0);
        assert_eq!(p.counts(0).checking, 1);
        // Node 1 is not given its own task's check: a fresh task instead.
        assert_eq!(p.take(&1), Some(1));
        assert_eq!(end(&mut p, 1, 1, 9, false), TaskEnd::Done);
        assert_eq!(p.take(&1), None, "only the check waits, and not for node 1");
        assert_eq!(p.available(), 1);
        assert_eq!(p.take(&2), Some(0));
        assert_eq!(end(&mut p, 0, 2, 7, false), TaskEnd::Checked);
        assert!(p.over());
        let counts = p.counts(0);
        assert_eq!((counts.done, counts.checked, counts.checking), (2, 1, 0));
        assert!(p.caught().is_empty());
    }

    #[test]
    fn a_difference_is_settled_by_a_third_node_and_the_liars_other_tasks_run_again() {
        let mut p = checked_array(3);
        // Node 1 does tasks 0 and 1 (lying on both); task 1 is not picked.
        assert_eq!(p.take(&1), Some(0));
        assert_eq!(p.take(&1), Some(1));
        assert_eq!(end(&mut p, 1, 1, 66, false), TaskEnd::Done);
        assert_eq!(end(&mut p, 0, 1, 66, true), TaskEnd::Checking);
        // Node 2 checks task 0 and differs.
        assert_eq!(p.take(&2), Some(0));
        assert_eq!(end(&mut p, 0, 2, 7, false), TaskEnd::Disputed);
        // Neither node 1 nor node 2 referees it.
        assert_eq!(p.take(&2), Some(2), "a fresh task, not task 0 again");
        assert_eq!(end(&mut p, 2, 2, 8, false), TaskEnd::Done);
        assert_eq!(p.take(&1), None);
        assert_eq!(p.take(&3), Some(0));
        assert_eq!(end(&mut p, 0, 3, 7, false), TaskEnd::Checked);
        assert_eq!(p.caught().iter().copied().collect::<Vec<_>>(), vec![1]);
        // Task 1, done unchecked by node 1, runs again.
        assert!(!p.over());
        assert_eq!(p.counts(0).done, 2);
        assert_eq!(p.take(&3), Some(1));
        assert_eq!(end(&mut p, 1, 3, 5, false), TaskEnd::Done);
        assert!(p.over());
        assert_eq!(p.counts(0).checked, 1);
    }

    #[test]
    fn nothing_a_caught_node_reports_counts() {
        let mut p = checked_array(3);
        p.take(&1);
        p.take(&1);
        assert_eq!(end(&mut p, 0, 1, 66, true), TaskEnd::Checking);
        p.take(&2);
        assert_eq!(end(&mut p, 0, 2, 7, false), TaskEnd::Disputed);
        p.take(&3);
        assert_eq!(end(&mut p, 0, 3, 7, false), TaskEnd::Checked);
        // Node 1's task 1 was running when it was caught.
        assert_eq!(end(&mut p, 1, 1, 5, false), TaskEnd::Again);
        assert_eq!(p.counts(0).done, 1);
        assert_eq!(p.take(&2), Some(1));
    }

    #[test]
    fn three_different_results_fail_the_task_and_blame_no_one() {
        let mut p = checked_array(1);
        p.take(&1);
        assert_eq!(end(&mut p, 0, 1, 1, true), TaskEnd::Checking);
        p.take(&2);
        assert_eq!(end(&mut p, 0, 2, 2, false), TaskEnd::Disputed);
        p.take(&3);
        assert_eq!(end(&mut p, 0, 3, 3, false), TaskEnd::Failed);
        assert!(p.over());
        assert!(p.caught().is_empty());
        assert_eq!(
            p.failed().collect::<Vec<_>>(),
            vec![(0, &3, &RankOutcome::Disputed)]
        );
    }

    #[test]
    fn a_lost_check_waits_for_another_node_and_a_failed_one_is_a_different_result() {
        let mut p = checked_array(1);
        p.take(&1);
        assert_eq!(end(&mut p, 0, 1, 7, true), TaskEnd::Checking);
        p.take(&2);
        assert_eq!(
            p.ended(0, &2, RankOutcome::Lost(LostReason::Left), None, false),
            TaskEnd::Again
        );
        assert_eq!(p.take(&1), None, "still not node 1's to check");
        assert_eq!(p.take(&2), Some(0));
        let trap = RankOutcome::Failed(Failure::Trapped("unreachable".into()));
        let digest = Some(ResultDigest([9; 32]));
        assert_eq!(p.ended(0, &2, trap, digest, false), TaskEnd::Disputed);
        p.take(&3);
        assert_eq!(end(&mut p, 0, 3, 7, false), TaskEnd::Checked);
        assert_eq!(p.caught().iter().copied().collect::<Vec<_>>(), vec![2]);
        assert_eq!(p.counts(0).done, 1);
    }

    #[test]
    fn an_unpicked_end_or_an_unchecked_array_is_done_at_once() {
        let mut p = checked_array(1);
        p.take(&1);
        assert_eq!(end(&mut p, 0, 1, 7, false), TaskEnd::Done);
        let mut q = array(1, 0);
        q.take(&1);
        assert_eq!(
            end(&mut q, 0, 1, 7, true),
            TaskEnd::Done,
            "no spot checks asked"
        );
    }
}

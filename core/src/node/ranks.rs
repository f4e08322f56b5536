//! The home's table of a job's ranks after the grant: where each rank is
//! placed (node and incarnation), what became of it ([`RankOutcome`]), and
//! which lost ranks wait to be handed out again; and how a job ends
//! ([`EndReason`]).
//!
//! The rules the scheduler applies with it (see `Scheduler::rank_ended`):
//! a rank whose worker exits with status 0 is done; a rank that fails
//! fails its job (once: phases only move forward) unless it was
//! cancelled; a lost rank of a job that replaces lost workers waits in the
//! table for a new grant, a rigid job that rolls back counts every rank
//! lost ([`LostReason::RolledBack`]) and has them all granted again, and a
//! rigid job that loses one otherwise fails; the job
//! completes once every placed rank exited with status 0 and at least its
//! `min` workers were placed. A report from a worker the table no longer
//! places (another node, or an older incarnation on the same node) is
//! ignored, and so is a second report of the same worker. A job that runs
//! more than once (`JobSpec::runs`) has every run's workers here, each end
//! with its result digest; no single end fails or completes it: its runs
//! are compared once none runs (see [`crate::runs`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::outcome::{LostReason, RankOutcome};
use super::spec::JobSpec;
use super::tasks::{TaskEnd, TaskProgress};
use crate::advert::Placed;
use crate::runs::{ResultDigest, RunEnd};

/// Why a job ended, as its home decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason<P> {
    /// Every placed rank exited with status 0.
    Completed {
        /// The ranks it had.
        workers: u32,
    },
    /// The user cancelled it.
    Cancelled,
    /// It did not get its `min` workers within its lifetime.
    Expired {
        /// What the home's floods found, in words
        /// ([`PendingReport::explain`](super::PendingReport::explain)).
        why: String,
    },
    /// A rank's worker failed.
    RankFailed {
        /// The rank.
        rank: u32,
        /// The node it ran on.
        node: P,
        /// How it ended.
        outcome: RankOutcome,
    },
    /// A rigid job lost workers it cannot do without.
    WorkersLost {
        /// The node they were placed on.
        node: P,
        /// The ranks.
        ranks: Vec<u32>,
        /// Why they count as lost.
        reason: LostReason,
    },
    /// Every task of a job array exited with status 0.
    TasksDone {
        /// The array's tasks.
        tasks: u32,
        /// How many of them a spot check settled.
        #[serde(default, skip_serializing_if = "is_zero")]
        checked: u32,
        /// The nodes a spot check caught giving results that two other
        /// nodes' runs disagreed with: their tasks ran again elsewhere,
        /// and this home avoids them from now on.
        #[serde(default = "Vec::new", skip_serializing_if = "Vec::is_empty")]
        caught: Vec<P>,
    },
    /// Every task of a job array ended, and some failed for good (after
    /// their retries).
    TasksFailed {
        /// The array's tasks.
        tasks: u32,
        /// How many failed.
        failed: u32,
        /// The first of them (`zorilla status` lists them all): the task.
        task: u32,
        /// The node it last ran on.
        node: P,
        /// How it ended there.
        outcome: RankOutcome,
    },
    /// Every rank still running waited for a message with nothing in
    /// flight, so none could ever go on (see [`crate::stall`]).
    Stalled {
        /// The ranks that waited (every rank that had not ended).
        waiting: Vec<u32>,
        /// Those of them whose worker had replaced a lost one: it started
        /// the program over, and what was sent to the lost one is gone.
        replaced: Vec<u32>,
    },
    /// A job that ran more than once kept one run's results: a majority
    /// of its complete runs gave them, or only that run completed (see
    /// [`crate::runs`]). The job completed if every rank of that run
    /// exited with status 0, and failed otherwise.
    RunsKept {
        /// The runs asked for.
        runs: u8,
        /// The run kept.
        kept: u32,
        /// The complete runs that gave its results (itself included).
        agreed: u32,
        /// The runs that completed (none of their workers lost).
        completed: u32,
        /// The nodes of the complete runs that gave other results: this
        /// home avoids them from now on.
        dissenters: Vec<P>,
        /// Of the kept run, the first rank that did not exit with status
        /// 0 (its rank within the run), its node and how it ended.
        failed: Option<(u32, P, RankOutcome)>,
    },
    /// A job that ran more than once had no majority among its complete
    /// runs: no result is kept, and nobody is blamed.
    RunsDisagreed {
        /// The runs asked for.
        runs: u8,
        /// Every complete run: its nodes and the digest of its first rank.
        ends: Vec<RunEnd<P>>,
    },
    /// A job that ran more than once lost a worker of every run.
    RunsLost {
        /// The runs asked for.
        runs: u8,
    },
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// "node A" or "nodes A, B and C".
fn nodes_in_words<P: fmt::Display>(nodes: &[P]) -> String {
    let list: Vec<String> = nodes.iter().map(ToString::to_string).collect();
    match list.split_last() {
        None => "no node".to_string(),
        Some((only, [])) => format!("node {only}"),
        Some((last, rest)) => format!("nodes {} and {last}", rest.join(", ")),
    }
}

/// "rank 3" or "ranks 0, 1 and 2".
fn ranks_in_words(ranks: &[u32]) -> String {
    let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
    match list.split_last() {
        None => "no rank".to_string(),
        Some((only, [])) => format!("rank {only}"),
        Some((last, rest)) => format!("ranks {} and {last}", rest.join(", ")),
    }
}

impl<P: fmt::Display> fmt::Display for EndReason<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndReason::Completed { workers } => {
                write!(f, "all {workers} workers exited with status 0")
            }
            EndReason::TasksDone {
                tasks,
                checked,
                caught,
            } => {
                write!(f, "all {tasks} tasks exited with status 0")?;
                if *checked > 0 {
                    write!(f, "; {checked} of them checked on another node")?;
                }
                if !caught.is_empty() {
                    write!(
                        f,
                        "; {} gave results that two other nodes' runs disagreed with: \
                         {} tasks ran again elsewhere, and {} avoided from now on",
                        nodes_in_words(caught),
                        if caught.len() == 1 { "its" } else { "their" },
                        if caught.len() == 1 {
                            "it is"
                        } else {
                            "they are"
                        },
                    )?;
                }
                Ok(())
            }
            EndReason::TasksFailed {
                tasks,
                failed,
                task,
                node,
                outcome,
            } => write!(
                f,
                "{failed} of {tasks} tasks failed after their retries; the first, task {task} \
                 on {node}: {}",
                outcome.display(node)
            ),
            EndReason::Cancelled => f.write_str("cancelled by user"),
            EndReason::Expired { why } => write!(f, "expired before it got its workers: {why}"),
            EndReason::RankFailed {
                rank,
                node,
                outcome,
            } => write!(f, "rank {rank} on {node}: {}", outcome.display(node)),
            EndReason::WorkersLost {
                node,
                ranks,
                reason,
            } => {
                let plural = if ranks.len() == 1 { "" } else { "s" };
                let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
                write!(
                    f,
                    "a worker was lost and the job is rigid: node {node} {reason} \
                     (rank{plural} {})",
                    list.join(", ")
                )
            }
            EndReason::RunsKept {
                runs,
                kept,
                agreed,
                completed,
                dissenters,
                failed,
            } => {
                if *completed == 1 {
                    write!(
                        f,
                        "only run {kept} of {runs} completed (the others lost a worker): its \
                         results were kept unchecked"
                    )?;
                } else if agreed == completed && *completed == u32::from(*runs) {
                    write!(f, "all {runs} runs gave the same results (run {kept} kept)")?;
                } else {
                    write!(
                        f,
                        "{agreed} of {completed} complete runs (of {runs}) gave the same results \
                         (run {kept} kept)"
                    )?;
                }
                if !dissenters.is_empty() {
                    write!(
                        f,
                        "; {} disagreed with the majority and {} avoided from now on",
                        nodes_in_words(dissenters),
                        if dissenters.len() == 1 { "is" } else { "are" }
                    )?;
                }
                if let Some((rank, node, outcome)) = failed {
                    write!(f, "; rank {rank} on {node}: {}", outcome.display(node))?;
                }
                Ok(())
            }
            EndReason::RunsDisagreed { runs, ends } => {
                write!(
                    f,
                    "the runs gave different results and no majority ({} of {runs} complete):",
                    ends.len()
                )?;
                for (i, end) in ends.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ";" };
                    write!(f, "{sep} run {} on {}", end.run, nodes_in_words(&end.nodes))?;
                    if let Some(digest) = end.digest {
                        write!(f, " gave {digest}")?;
                    }
                }
                f.write_str("; no result was kept")
            }
            EndReason::RunsLost { runs } => {
                write!(f, "every one of its {runs} runs lost a worker")
            }
            EndReason::Stalled { waiting, replaced } => {
                let (them, they) = if waiting.len() == 1 {
                    (ranks_in_words(waiting), "it waited")
                } else {
                    (format!("all of {}", ranks_in_words(waiting)), "they waited")
                };
                write!(
                    f,
                    "stalled: {they} for a message that no rank would ever send ({them} \
                     waited in a receive, with no message in flight)"
                )?;
                if !replaced.is_empty() {
                    let verb = if replaced.len() == 1 { "was" } else { "were" };
                    write!(
                        f,
                        "; {} {verb} replaced after a loss and started over, and what \
                         was sent to the lost worker is gone: a job whose ranks \
                         exchange messages needs on_worker_lost = \"rollback\" with \
                         checkpoints, not \"replace\"",
                        ranks_in_words(replaced)
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// One rank in the home's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rank<P> {
    /// The node it is (or was last) placed on.
    pub node: P,
    /// The grant that placed it there (see [`crate::advert::Message::Grant`]).
    pub incarnation: u32,
    /// What became of it; `None` while its worker runs (or starts).
    pub outcome: Option<RankOutcome>,
    /// The digest of what its worker computed, as its node reported with
    /// its end (a job that runs more than once: see [`crate::runs`]).
    pub digest: Option<ResultDigest>,
}

impl<P> Rank<P> {
    fn is_lost(&self) -> bool {
        matches!(self.outcome, Some(RankOutcome::Lost(_)))
    }
}

/// The ranks of one job at its home. Ranks are numbered from 0 in the
/// order they are first granted; a lost rank keeps its number and its
/// last placement (with a [`RankOutcome::Lost`] outcome) until it is
/// granted again.
#[derive(Debug, Clone)]
pub struct RankTable<P> {
    ranks: BTreeMap<u32, Rank<P>>,
    /// Ranks lost and waiting to be handed out again, lowest first.
    lost: BTreeSet<u32>,
    /// Of those, the ones lost on their own (not in a rollback of every
    /// rank).
    lost_alone: BTreeSet<u32>,
    /// Ranks whose current worker replaced one lost on its own: it started
    /// over while the others went on.
    replaced: BTreeSet<u32>,
    /// A job array's progress (its running tasks are the ranks above,
    /// numbered by task index, and nothing is ever lost here: a lost task
    /// waits in the progress to run again); `None` for a job of ranks.
    tasks: Option<TaskProgress<P>>,
}

impl<P> Default for RankTable<P> {
    fn default() -> Self {
        RankTable {
            ranks: BTreeMap::new(),
            lost: BTreeSet::new(),
            lost_alone: BTreeSet::new(),
            replaced: BTreeSet::new(),
            tasks: None,
        }
    }
}

impl<P> RankTable<P> {
    /// The empty table of a job of `spec`: of ranks, or of a job array's
    /// tasks.
    pub fn for_spec(spec: &JobSpec) -> Self {
        RankTable {
            tasks: spec.tasks.map(TaskProgress::new),
            ..RankTable::default()
        }
    }

    /// A job array's progress; `None` for a job of ranks.
    pub fn tasks(&self) -> Option<&TaskProgress<P>> {
        self.tasks.as_ref()
    }

    /// Ranks placed and not lost (running or ended).
    pub fn placed(&self) -> u32 {
        let n = self.ranks.len().saturating_sub(self.lost.len());
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Every rank, lowest first, lost ones included.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Rank<P>)> {
        self.ranks.iter().map(|(r, rank)| (*r, rank))
    }

    /// One rank.
    pub fn get(&self, rank: u32) -> Option<&Rank<P>> {
        self.ranks.get(&rank)
    }

    /// The ranks whose workers run (or start): placed, neither ended nor
    /// lost, each with its node.
    pub fn running(&self) -> BTreeMap<u32, P>
    where
        P: Clone,
    {
        self.ranks
            .iter()
            .filter(|(_, rank)| rank.outcome.is_none())
            .map(|(r, rank)| (*r, rank.node.clone()))
            .collect()
    }

    /// Ranks lost and not granted again yet, lowest first.
    pub fn lost(&self) -> impl Iterator<Item = u32> + '_ {
        self.lost.iter().copied()
    }

    /// Ranks whose current worker replaced one that was lost on its own
    /// (not in a rollback of the whole job), lowest first: such a worker
    /// started its program over while the others went on.
    pub fn replaced(&self) -> impl Iterator<Item = u32> + '_ {
        self.replaced.iter().copied()
    }

    /// Whether every rank was placed and exited with status 0 (none is
    /// running, and none waits to be replaced); of an array, whether every
    /// task is done.
    pub fn all_succeeded(&self) -> bool {
        if let Some(tasks) = &self.tasks {
            return tasks.over() && tasks.failed().next().is_none();
        }
        !self.ranks.is_empty()
            && self
                .ranks
                .values()
                .all(|r| r.outcome.as_ref().is_some_and(RankOutcome::is_success))
    }
}

impl<P: Clone + Ord> RankTable<P> {
    /// Places `count` ranks on `node` with grant number `incarnation`:
    /// lost ranks first (lowest first), then new ones. Returns the ranks,
    /// and which of them replace lost ones.
    ///
    /// Of a job array, the next `count` tasks for `node` (fewer if fewer
    /// wait; see [`TaskProgress`]), none of them a replacement.
    pub(crate) fn place(&mut self, node: &P, incarnation: u32, count: u32) -> (Vec<u32>, Vec<u32>) {
        let mut ranks = Vec::with_capacity(count.min(1024) as usize);
        let mut replaced = Vec::new();
        for _ in 0..count {
            if let Some(tasks) = &mut self.tasks {
                let Some(task) = tasks.take(node) else {
                    break;
                };
                self.insert_placed(node, incarnation, task);
                ranks.push(task);
                continue;
            }
            let rank = match self.lost.pop_first() {
                Some(rank) => {
                    replaced.push(rank);
                    rank
                }
                None => self
                    .ranks
                    .last_key_value()
                    .map_or(0, |(r, _)| r.saturating_add(1)),
            };
            self.restore(node, incarnation, &[rank]);
            ranks.push(rank);
        }
        (ranks, replaced)
    }

    /// Places `ranks` on `node` with grant number `incarnation`, as a
    /// grant the table's log recorded did (see
    /// [`JobState::replay`](super::JobState::replay)).
    pub(crate) fn restore(&mut self, node: &P, incarnation: u32, ranks: &[u32]) {
        for &rank in ranks {
            if let Some(tasks) = &mut self.tasks {
                tasks.restore(rank);
            }
            self.insert_placed(node, incarnation, rank);
        }
    }

    fn insert_placed(&mut self, node: &P, incarnation: u32, rank: u32) {
        self.lost.remove(&rank);
        if self.lost_alone.remove(&rank) {
            self.replaced.insert(rank);
        }
        self.ranks.insert(
            rank,
            Rank {
                node: node.clone(),
                incarnation,
                outcome: None,
                digest: None,
            },
        );
    }

    /// Nodes with placed (not lost) ranks.
    pub(crate) fn nodes(&self) -> BTreeSet<P>
    where
        P: Ord,
    {
        self.ranks
            .values()
            .filter(|r| !r.is_lost())
            .map(|r| r.node.clone())
            .collect()
    }

    /// Those of `ranks` (all if `None`) whose workers still run on `node`
    /// as far as the home knows become lost for `reason`; returns them.
    /// A rank that already ended (or was lost) stays as it is.
    /// A job array's lost tasks leave the table and wait to run again.
    pub(crate) fn lose(&mut self, node: &P, ranks: Option<&[u32]>, reason: LostReason) -> Vec<u32> {
        let mut lost = Vec::new();
        for (r, rank) in &mut self.ranks {
            let named = ranks.is_none_or(|named| named.contains(r));
            if named && rank.node == *node && rank.outcome.is_none() {
                rank.outcome = Some(RankOutcome::Lost(reason));
                lost.push(*r);
            }
        }
        if let Some(tasks) = &mut self.tasks {
            for task in &lost {
                self.ranks.remove(task);
                tasks.ended(*task, node, RankOutcome::Lost(reason), None, false);
            }
            return lost;
        }
        self.lost.extend(&lost);
        self.lost_alone.extend(&lost);
        lost
    }

    /// Every rank not lost yet, running or ended, becomes lost for
    /// `reason` (the job rolls back: every rank gets a fresh worker);
    /// returns them.
    pub(crate) fn lose_all(&mut self, reason: LostReason) -> Vec<u32> {
        if self.tasks.is_some() {
            // An array's tasks do not roll back together (its spec cannot
            // ask to); each running one is lost by itself.
            let running: Vec<(u32, P)> = self.running().into_iter().collect();
            let mut lost = Vec::new();
            for (task, node) in running {
                lost.extend(self.lose(&node, Some(&[task]), reason));
            }
            return lost;
        }
        let mut lost = Vec::new();
        for (r, rank) in &mut self.ranks {
            if !rank.is_lost() {
                rank.outcome = Some(RankOutcome::Lost(reason));
                lost.push(*r);
            }
        }
        self.lost.extend(&lost);
        // Every rank starts again from the same generation: none is behind
        // the others.
        self.lost_alone.clear();
        self.replaced.clear();
        lost
    }

    /// Records the end of `rank`'s worker on `node`, incarnation
    /// `incarnation`: `false` (and nothing changes) if the table places
    /// no such worker, or it already ended.
    ///
    /// A job array's task leaves the table as it ends (see
    /// [`RankTable::end_task`]); `check` is the home's pick of it for a
    /// spot check.
    pub(crate) fn end(
        &mut self,
        node: &P,
        rank: u32,
        incarnation: u32,
        outcome: RankOutcome,
        digest: Option<ResultDigest>,
        check: bool,
    ) -> bool {
        if self.tasks.is_some() {
            return self
                .end_task(node, rank, incarnation, outcome, digest, check)
                .is_some();
        }
        match self.ranks.get_mut(&rank) {
            Some(r) if r.node == *node && r.incarnation == incarnation && r.outcome.is_none() => {
                r.outcome = Some(outcome);
                r.digest = digest;
                true
            }
            _ => false,
        }
    }

    /// Records the end of job array task `task`'s worker on `node`,
    /// incarnation `incarnation`, with its result `digest`, picked for a
    /// spot check if `check`: the task leaves the table, and the progress
    /// says what becomes of it; `None` (and nothing changes) if the table
    /// places no such worker, or this is no array.
    pub(crate) fn end_task(
        &mut self,
        node: &P,
        task: u32,
        incarnation: u32,
        outcome: RankOutcome,
        digest: Option<ResultDigest>,
        check: bool,
    ) -> Option<TaskEnd> {
        let tasks = self.tasks.as_mut()?;
        match self.ranks.get(&task) {
            Some(r) if r.node == *node && r.incarnation == incarnation && r.outcome.is_none() => {
                self.ranks.remove(&task);
                Some(tasks.ended(task, node, outcome, digest, check))
            }
            _ => None,
        }
    }

    /// Where every placed (not lost) rank runs, as the home tells the
    /// job's nodes ([`Message::Grant`](crate::advert::Message::Grant),
    /// [`Message::Placement`](crate::advert::Message::Placement)).
    pub fn placement(&self) -> BTreeMap<u32, Placed<P>> {
        self.ranks
            .iter()
            .filter(|(_, rank)| !rank.is_lost())
            .map(|(r, rank)| {
                let placed = Placed {
                    node: rank.node.clone(),
                    incarnation: rank.incarnation,
                };
                (*r, placed)
            })
            .collect()
    }

    /// Ranks per node, placed and not lost.
    pub fn by_node(&self) -> BTreeMap<P, Vec<u32>>
    where
        P: Ord,
    {
        let mut nodes: BTreeMap<P, Vec<u32>> = BTreeMap::new();
        for (r, rank) in &self.ranks {
            if !rank.is_lost() {
                nodes.entry(rank.node.clone()).or_default().push(*r);
            }
        }
        nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::liveness::LostCause;
    use crate::node::outcome::Failure;

    #[test]
    fn lost_ranks_are_placed_again_first_and_keep_their_number() {
        let mut t = RankTable::default();
        assert_eq!(t.place(&1u32, 0, 3), (vec![0, 1, 2], vec![]));
        assert_eq!(t.lose(&1, Some(&[2, 0, 9]), LostReason::Left), vec![0, 2]);
        assert_eq!(t.placed(), 1);
        assert_eq!(t.place(&2, 1, 3), (vec![0, 2, 3], vec![0, 2]));
        assert_eq!(
            t.by_node(),
            BTreeMap::from([(1, vec![1]), (2, vec![0, 2, 3])])
        );
    }

    #[test]
    fn only_the_worker_placed_now_can_end_a_rank_and_only_once() {
        let mut t = RankTable::default();
        t.place(&1u32, 0, 1);
        t.lose(&1, None, LostReason::Left);
        t.place(&1, 1, 1);
        assert!(
            !t.end(&1, 0, 0, RankOutcome::Exited(0), None, false),
            "old incarnation"
        );
        assert!(
            !t.end(&2, 0, 1, RankOutcome::Exited(0), None, false),
            "other node"
        );
        assert!(t.end(&1, 0, 1, RankOutcome::Exited(3), None, false));
        assert!(
            !t.end(&1, 0, 1, RankOutcome::Exited(0), None, false),
            "second report"
        );
        assert_eq!(t.get(0).unwrap().outcome, Some(RankOutcome::Exited(3)));
        // An ended rank is not lost with its node.
        assert_eq!(t.lose(&1, None, LostReason::Left), Vec::<u32>::new());
    }

    #[test]
    fn outcomes_and_ends_read_as_before() {
        let lost = RankOutcome::Lost(LostReason::Liveness(LostCause::Restarted));
        assert_eq!(
            lost.display(&"N").to_string(),
            "lost: node N restarted and forgot it"
        );
        assert_eq!(
            RankOutcome::Lost(LostReason::Left)
                .display(&"N")
                .to_string(),
            "lost: node N failed or left"
        );
        assert_eq!(
            RankOutcome::Exited(0).display(&"N").to_string(),
            "exited with status 0"
        );
        let failed = EndReason::RankFailed {
            rank: 2,
            node: "N",
            outcome: RankOutcome::Failed(Failure::DiskLimit { limit_mib: 10 }),
        };
        assert_eq!(
            failed.to_string(),
            "rank 2 on N: stopped: wrote more than its 10 MiB disk limit"
        );
        let rigid = EndReason::WorkersLost {
            node: "N",
            ranks: vec![1],
            reason: LostReason::Liveness(LostCause::NotRunning),
        };
        assert_eq!(
            rigid.to_string(),
            "a worker was lost and the job is rigid: node N does not run it (rank 1)"
        );
        assert_eq!(
            EndReason::<&str>::Completed { workers: 3 }.to_string(),
            "all 3 workers exited with status 0"
        );
    }
}

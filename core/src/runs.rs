//! Replicated execution: a job that asks for `runs` > 1 runs that many
//! times, each run on nodes of its own, and its home compares the runs'
//! results by digest (issue 34, item 2). Not to be confused with
//! [`crate::replica`], which copies a job's *state* for failover.
//!
//! A job of `size` ranks that runs `r` times has `size * r` workers in the
//! home's [`RankTable`](crate::node::RankTable): worker `w` is rank
//! `w % size` of run `w / size` ([`run_of`]). Each run is a world of its
//! own (its workers see ranks `0..size`), and no node takes part in two
//! runs ([`allocate_runs`]), so one node that lies spoils at most one run.
//!
//! The member that ran a worker reports a [`ResultDigest`] of what it
//! computed with its end (the node says what goes in: exit status, output
//! streams and output files). Once no worker of the job runs, the home
//! decides with [`decide`]:
//! - the runs whose every worker ended (none lost) are *complete*;
//! - the complete runs with the same digests for every rank form groups;
//!   a group of at least two that holds more than half of the complete
//!   runs is the **majority**: the job ends with its results (its lowest
//!   run is kept), and the nodes of every other complete run **dissented**
//!   (the home remembers and avoids them: [`Avoided`]);
//! - one complete run alone (the others lost) is kept unverified: a lost
//!   copy does not stop the job while another runs on;
//! - complete runs with no majority (two that differ, three all
//!   different) **disagree**: the job fails, naming every run's nodes, and
//!   nobody is remembered (the home cannot tell who lied);
//! - no complete run: the job failed as a rigid job that lost its workers.
//!
//! Everything here is pure: no clock but the `now` passed in, ordered
//! maps, bounded memory.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::advert::Strategy;
use crate::allocation::{Assignment, Candidate, SameDistance, allocate_preferring};
use crate::bounded::make_room;
use crate::{PeerKey, Time};

/// The most runs a job may ask for: three decide by majority; more cost
/// cores without telling more of one liar.
pub const MAX_RUNS: u8 = 3;

/// The most dissenting nodes a home remembers; the one remembered longest
/// ago makes room.
pub const MAX_AVOIDED: usize = 1024;

/// A digest (SHA-256, computed by the member) of what a worker computed:
/// equal for two runs of a deterministic rank that did the same work.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResultDigest(pub [u8; 32]);

impl fmt::Display for ResultDigest {
    /// The first 8 bytes in hex: enough to tell results apart in words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in &self.0[..8] {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ResultDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ResultDigest({self})")
    }
}

/// The run worker `worker` belongs to, of a job of `size` ranks per run.
pub fn run_of(worker: u32, size: u32) -> u32 {
    worker / size.max(1)
}

/// What one run gave, as the home saw it end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult<P> {
    /// The run (0 to `runs - 1`).
    pub run: u32,
    /// The nodes its workers ran on.
    pub nodes: BTreeSet<P>,
    /// Each rank's digest in rank order; `None` if a worker of the run was
    /// lost (or ended without a digest): the run is not complete.
    pub digests: Option<Vec<ResultDigest>>,
}

/// One run as a job's end names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEnd<P> {
    /// The run.
    pub run: u32,
    /// Its nodes.
    pub nodes: Vec<P>,
    /// Its first rank's digest, if complete (enough to show they differ).
    pub digest: Option<ResultDigest>,
}

/// What the home decided of a replicated job's runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<P> {
    /// A run's results are kept: those of a majority of the complete runs
    /// (`agreed` of `completed`), or of the only complete run (`agreed ==
    /// completed == 1`).
    Kept {
        /// The run kept (the lowest of the majority).
        kept: u32,
        /// Runs that gave the kept results.
        agreed: u32,
        /// Runs that completed (the others were lost).
        completed: u32,
        /// The nodes of the complete runs that gave other results.
        dissenters: BTreeSet<P>,
    },
    /// The complete runs (at least two) have no majority.
    Disagreed {
        /// Every complete run.
        runs: Vec<RunEnd<P>>,
    },
    /// No run completed.
    NoneCompleted,
}

/// Decides a replicated job's results from its runs' (see the module
/// documentation for the rule).
pub fn decide<P: PeerKey>(results: &[RunResult<P>]) -> Verdict<P> {
    let complete: Vec<(&RunResult<P>, &Vec<ResultDigest>)> = results
        .iter()
        .filter_map(|r| r.digests.as_ref().map(|d| (r, d)))
        .collect();
    if complete.is_empty() {
        return Verdict::NoneCompleted;
    }
    // Groups of equal results, each with its runs in run order.
    let mut groups: BTreeMap<&Vec<ResultDigest>, Vec<u32>> = BTreeMap::new();
    for (r, digests) in &complete {
        groups.entry(digests).or_default().push(r.run);
    }
    let total = complete.len();
    let majority = groups
        .iter()
        .map(|(digests, runs)| (*digests, runs))
        .max_by(|a, b| a.1.len().cmp(&b.1.len()).then_with(|| b.1.cmp(a.1)));
    match majority {
        Some((digests, runs)) if total == 1 || (runs.len() >= 2 && runs.len() * 2 > total) => {
            let dissenters = complete
                .iter()
                .filter(|(_, d)| *d != digests)
                .flat_map(|(r, _)| r.nodes.iter().cloned())
                .collect();
            Verdict::Kept {
                kept: runs.iter().copied().min().unwrap_or(0),
                agreed: runs.len() as u32,
                completed: total as u32,
                dissenters,
            }
        }
        _ => Verdict::Disagreed {
            runs: complete
                .iter()
                .map(|(r, d)| RunEnd {
                    run: r.run,
                    nodes: r.nodes.iter().cloned().collect(),
                    digest: d.first().copied(),
                })
                .collect(),
        },
    }
}

/// Maps `runs` runs of `size` workers each onto `candidates`: each run
/// with `strategy` on nodes of owners no other run has (`owner_of` says
/// who vouches for a node), or, where the candidates do not allow that, on
/// nodes no other run uses; run 0 on the nearest (as
/// [`allocate_preferring`] orders them). One owner's nodes could
/// otherwise outvote another's with one lie told twice. The assignments
/// come run by run, so that a rank table placing them in order numbers run
/// `k`'s workers `k * size ..`. `None` while the candidates cannot hold
/// every run on distinct nodes; else the assignments and how far apart
/// the runs are.
pub fn allocate_runs<P: Clone + Ord>(
    strategy: Strategy,
    candidates: &[Candidate<P>],
    runs: u32,
    size: u32,
    same: Option<SameDistance>,
    owner_of: impl Fn(&P) -> P,
) -> Option<(Vec<Assignment<P>>, Apart)> {
    if let Some(a) = apart(strategy, candidates, runs, size, same, &owner_of) {
        return Some((a, Apart::Owners));
    }
    apart(strategy, candidates, runs, size, same, &|node: &P| {
        node.clone()
    })
    .map(|a| (a, Apart::Nodes))
}

/// How far apart [`allocate_runs`] kept a job's runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apart {
    /// On nodes of distinct owners.
    Owners,
    /// On distinct nodes, some of one owner (the offers had no more
    /// owners).
    Nodes,
}

/// [`allocate_runs`] with runs kept apart by `key`: no two runs on nodes
/// of the same key.
fn apart<P: Clone + Ord>(
    strategy: Strategy,
    candidates: &[Candidate<P>],
    runs: u32,
    size: u32,
    same: Option<SameDistance>,
    key: &dyn Fn(&P) -> P,
) -> Option<Vec<Assignment<P>>> {
    let mut left: Vec<Candidate<P>> = candidates.to_vec();
    let mut all = Vec::new();
    for _ in 0..runs {
        let run = allocate_preferring(strategy, &left, size, same)?;
        let used: BTreeSet<P> = run.iter().map(|a| key(&a.node)).collect();
        left.retain(|c| !used.contains(&key(&c.node)));
        all.extend(run);
    }
    Some(all)
}

/// The nodes a home remembers as having dissented from a majority (or
/// caught by a spot check), with when: it grants them no worker of its
/// jobs from then on. At most [`MAX_AVOIDED`]; a driver keeps them over a
/// restart ([`Avoided::changes`], [`Scheduler::restore_avoided`](crate::node::Scheduler::restore_avoided)).
#[derive(Debug, Clone)]
pub struct Avoided<P> {
    nodes: BTreeMap<P, Time>,
    changes: u64,
}

impl<P> Default for Avoided<P> {
    fn default() -> Self {
        Avoided {
            nodes: BTreeMap::new(),
            changes: 0,
        }
    }
}

impl<P: PeerKey> Avoided<P> {
    /// Remembers `node` as of `now`.
    pub fn insert(&mut self, node: P, now: Time) {
        make_room(&mut self.nodes, &node, MAX_AVOIDED, |at| *at);
        self.nodes.insert(node, now);
        self.changes = self.changes.wrapping_add(1);
    }

    /// How many times the set changed: a driver saves it when this moved.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Whether `node` is avoided.
    pub fn contains(&self, node: &P) -> bool {
        self.nodes.contains_key(node)
    }

    /// Every node avoided, with when it dissented.
    pub fn iter(&self) -> impl Iterator<Item = (&P, Time)> {
        self.nodes.iter().map(|(p, t)| (p, *t))
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Machine;
    use std::time::Duration;

    fn d(b: u8) -> ResultDigest {
        ResultDigest([b; 32])
    }

    fn run(run: u32, node: u32, digest: Option<u8>) -> RunResult<u32> {
        RunResult {
            run,
            nodes: BTreeSet::from([node]),
            digests: digest.map(|b| vec![d(b)]),
        }
    }

    #[test]
    fn three_runs_two_agreeing_keep_the_majority_and_name_the_third() {
        let v = decide(&[
            run(0, 10, Some(1)),
            run(1, 11, Some(2)),
            run(2, 12, Some(1)),
        ]);
        assert_eq!(
            v,
            Verdict::Kept {
                kept: 0,
                agreed: 2,
                completed: 3,
                dissenters: BTreeSet::from([11])
            }
        );
        // The liar in run 0: run 1 is kept.
        let v = decide(&[
            run(0, 10, Some(9)),
            run(1, 11, Some(1)),
            run(2, 12, Some(1)),
        ]);
        assert!(
            matches!(v, Verdict::Kept { kept: 1, agreed: 2, ref dissenters, .. } if dissenters == &BTreeSet::from([10]))
        );
    }

    #[test]
    fn unanimous_runs_have_no_dissenter() {
        let v = decide(&[run(0, 1, Some(1)), run(1, 2, Some(1))]);
        assert_eq!(
            v,
            Verdict::Kept {
                kept: 0,
                agreed: 2,
                completed: 2,
                dissenters: BTreeSet::new()
            }
        );
    }

    #[test]
    fn two_that_differ_disagree_and_nobody_is_blamed() {
        let v = decide(&[run(0, 1, Some(1)), run(1, 2, Some(2))]);
        let Verdict::Disagreed { runs } = v else {
            panic!("{v:?}")
        };
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].nodes, vec![1]);
        assert_eq!(runs[1].digest, Some(d(2)));
        // Three all different: no majority either.
        let v = decide(&[run(0, 1, Some(1)), run(1, 2, Some(2)), run(2, 3, Some(3))]);
        assert!(matches!(v, Verdict::Disagreed { runs } if runs.len() == 3));
    }

    #[test]
    fn lost_runs_do_not_count_and_one_complete_run_is_kept_unverified() {
        let v = decide(&[run(0, 1, None), run(1, 2, Some(5))]);
        assert_eq!(
            v,
            Verdict::Kept {
                kept: 1,
                agreed: 1,
                completed: 1,
                dissenters: BTreeSet::new()
            }
        );
        // Two complete of three, agreeing: kept, with nobody to blame.
        let v = decide(&[run(0, 1, Some(4)), run(1, 2, None), run(2, 3, Some(4))]);
        assert!(
            matches!(v, Verdict::Kept { kept: 0, agreed: 2, completed: 2, ref dissenters } if dissenters.is_empty())
        );
        // Two complete of three, differing: no majority.
        let v = decide(&[run(0, 1, Some(4)), run(1, 2, None), run(2, 3, Some(6))]);
        assert!(matches!(v, Verdict::Disagreed { .. }));
        assert_eq!(
            decide(&[run(0, 1, None), run(1, 2, None)]),
            Verdict::<u32>::NoneCompleted
        );
    }

    #[test]
    fn every_rank_of_a_run_must_agree() {
        let a = RunResult {
            run: 0,
            nodes: BTreeSet::from([1, 2]),
            digests: Some(vec![d(1), d(2)]),
        };
        let b = RunResult {
            run: 1,
            nodes: BTreeSet::from([3]),
            digests: Some(vec![d(1), d(3)]),
        };
        let c = RunResult {
            run: 2,
            nodes: BTreeSet::from([4, 5]),
            digests: Some(vec![d(1), d(2)]),
        };
        let v = decide(&[a, b, c]);
        assert!(
            matches!(v, Verdict::Kept { kept: 0, ref dissenters, .. } if dissenters == &BTreeSet::from([3]))
        );
    }

    fn offer(node: u32, rtt_ms: u64, offered: u32) -> Candidate<u32> {
        Candidate {
            node,
            rtt: Duration::from_millis(rtt_ms),
            offered,
            machine: Machine::default(),
        }
    }

    #[test]
    fn runs_go_to_distinct_nodes_nearest_run_first() {
        let offers = [offer(1, 5, 4), offer(2, 1, 1), offer(3, 9, 2)];
        let (a, _) = allocate_runs(Strategy::Concentrate, &offers, 3, 1, None, u32::clone).unwrap();
        let nodes: Vec<u32> = a.iter().map(|a| a.node).collect();
        assert_eq!(nodes, vec![2, 1, 3]);
        assert!(a.iter().all(|a| a.workers == 1));
        // Two runs of two: node 1 could take both runs alone, but takes
        // part in one; the assignments come run by run.
        let (a, _) = allocate_runs(Strategy::Concentrate, &offers, 2, 2, None, u32::clone).unwrap();
        let mut runs: Vec<Vec<u32>> = vec![Vec::new()];
        let mut filled = 0;
        for assignment in &a {
            if filled == 2 {
                runs.push(Vec::new());
                filled = 0;
            }
            filled += assignment.workers;
            runs.last_mut().unwrap().push(assignment.node);
        }
        assert_eq!(runs.len(), 2);
        assert!(runs[0].iter().all(|n| !runs[1].contains(n)), "{runs:?}");
        // Not enough distinct nodes: wait.
        assert_eq!(
            allocate_runs(Strategy::Concentrate, &offers[..2], 3, 1, None, u32::clone),
            None
        );
    }

    #[test]
    fn runs_go_to_distinct_owners_where_the_offers_allow_and_else_to_distinct_nodes() {
        // Nodes 1 and 2 are one owner's (10), node 3 another's (30); node
        // 2 is the nearest, node 1 the next.
        let offers = [offer(1, 2, 1), offer(2, 1, 1), offer(3, 9, 1)];
        let owner = |n: &u32| if *n == 3 { 30 } else { 10 };
        let (a, apart) = allocate_runs(Strategy::Concentrate, &offers, 2, 1, None, owner).unwrap();
        let nodes: Vec<u32> = a.iter().map(|a| a.node).collect();
        assert_eq!(nodes, vec![2, 3], "not nodes 2 and 1, of one owner");
        assert_eq!(apart, Apart::Owners);
        // Three runs: two owners cannot keep them apart; three nodes can.
        let (a, apart) = allocate_runs(Strategy::Concentrate, &offers, 3, 1, None, owner).unwrap();
        let nodes: BTreeSet<u32> = a.iter().map(|a| a.node).collect();
        assert_eq!(nodes, BTreeSet::from([1, 2, 3]));
        assert_eq!(apart, Apart::Nodes);
    }

    #[test]
    fn the_avoided_are_bounded_and_the_oldest_make_room() {
        let mut avoided = Avoided::default();
        for n in 0..(MAX_AVOIDED as u32 + 5) {
            avoided.insert(n, Duration::from_secs(u64::from(n)));
        }
        assert_eq!(avoided.len(), MAX_AVOIDED);
        assert!(!avoided.contains(&0));
        assert!(avoided.contains(&(MAX_AVOIDED as u32 + 4)));
    }
}

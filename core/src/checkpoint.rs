//! Where the checkpoints of a job's ranks are kept: the choice of the nodes
//! that hold a rank's checkpoint, and the home's index of each rank's
//! latest complete checkpoint.
//!
//! A worker's node stores each checkpoint on [`DEFAULT_REPLICAS`] other
//! nodes chosen by [`choose_holders`] (near ones, never itself while there
//! are others, spread over the grid by a rendezvous hash so that the ranks
//! of a job do not all pick the same holders), then tells the home, whose
//! [`CheckpointIndex`] keeps the newest per rank: the fresh worker that
//! replaces a lost rank asks the home where to fetch it. When the job ends,
//! the index names the holders to tell.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use crate::limits::MAX_WORKERS;

/// On how many other nodes a checkpoint is kept unless configured.
pub const DEFAULT_REPLICAS: usize = 2;

/// The most holders a checkpoint may name: a replication degree above it
/// is refused.
pub const MAX_REPLICAS: usize = 8;

/// The holders chosen for a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holders<P> {
    /// Nearest first.
    pub peers: Vec<P>,
    /// Why fewer than asked were chosen, if they were.
    pub short: Option<Shortfall>,
}

/// Why a checkpoint has fewer holders than its replication degree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortfall {
    /// Fewer other nodes are known than asked for: all of them hold it.
    FewerNodes {
        /// How many other nodes hold it.
        found: usize,
    },
    /// No other node is known: the worker's own node keeps it, so it does
    /// not survive that node's loss.
    OnlyThisNode,
}

/// A rendezvous score of `peer` for a rank's checkpoint: the same for every
/// node that computes it, different per rank.
fn score<P: Hash>(job: u64, rank: u32, peer: &P) -> u64 {
    // SipHash with fixed (zero) keys: the same on every node.
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new();
    (job, rank).hash(&mut hasher);
    peer.hash(&mut hasher);
    hasher.finish()
}

/// Chooses up to `replicas` holders of a checkpoint of `rank` of `job` among
/// `candidates` (other nodes, with their distance when known): the nearest
/// first, equals ordered by rendezvous hash. `me` is never chosen while
/// another node can be; with no other node at all it is the only holder
/// ([`Shortfall::OnlyThisNode`]).
pub fn choose_holders<P: Clone + Ord + Hash>(
    job: u64,
    rank: u32,
    me: &P,
    candidates: &[(P, Option<Duration>)],
    replicas: usize,
) -> Holders<P> {
    let replicas = replicas.clamp(1, MAX_REPLICAS);
    let mut seen = BTreeSet::new();
    let mut ranked: Vec<(Duration, u64, &P)> = candidates
        .iter()
        .filter(|(p, _)| p != me && seen.insert(p.clone()))
        .map(|(p, d)| (d.unwrap_or(Duration::MAX), score(job, rank, p), p))
        .collect();
    ranked.sort();
    let peers: Vec<P> = ranked
        .into_iter()
        .take(replicas)
        .map(|(_, _, p)| p.clone())
        .collect();
    match peers.len() {
        0 => Holders {
            peers: vec![me.clone()],
            short: Some(Shortfall::OnlyThisNode),
        },
        n if n < replicas => Holders {
            peers,
            short: Some(Shortfall::FewerNodes { found: n }),
        },
        _ => Holders { peers, short: None },
    }
}

/// Where a rank's latest complete checkpoint is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latest<P> {
    /// The checkpoint's number: higher is newer.
    pub seq: u64,
    /// Its size in bytes.
    pub size: u64,
    /// The nodes that hold it whole.
    pub holders: Vec<P>,
}

/// The home's index of the latest checkpoint of every rank of its jobs.
/// Bounded by its caller: entries only for jobs under way at the home and
/// ranks below [`MAX_WORKERS`], and [`CheckpointIndex::end_job`] when a job
/// ends.
#[derive(Debug, Clone)]
pub struct CheckpointIndex<P> {
    latest: BTreeMap<(u64, u32), Latest<P>>,
}

impl<P> Default for CheckpointIndex<P> {
    fn default() -> Self {
        CheckpointIndex {
            latest: BTreeMap::new(),
        }
    }
}

impl<P: Clone + Ord> CheckpointIndex<P> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `latest` of `rank` of `job` is stored: kept if it is
    /// newer than the one known (returns whether it was). Holders keep
    /// only a rank's newest checkpoint themselves, so nothing is dropped
    /// here.
    pub fn record(&mut self, job: u64, rank: u32, latest: Latest<P>) -> bool {
        if rank >= MAX_WORKERS || latest.holders.is_empty() {
            return false;
        }
        match self.latest.get(&(job, rank)) {
            Some(known) if known.seq >= latest.seq => false,
            _ => {
                self.latest.insert((job, rank), latest);
                true
            }
        }
    }

    /// The latest checkpoint of `rank` of `job`, if one was recorded.
    pub fn latest(&self, job: u64, rank: u32) -> Option<&Latest<P>> {
        self.latest.get(&(job, rank))
    }

    /// The jobs with checkpoints in the index.
    pub fn jobs(&self) -> BTreeSet<u64> {
        self.latest.keys().map(|(job, _)| *job).collect()
    }

    /// Forgets `job`; returns every node that holds a checkpoint of it (to
    /// be told to drop them).
    pub fn end_job(&mut self, job: u64) -> BTreeSet<P> {
        let keys: Vec<(u64, u32)> = self
            .latest
            .range((job, 0)..=(job, u32::MAX))
            .map(|(k, _)| *k)
            .collect();
        let mut holders = BTreeSet::new();
        for key in keys {
            if let Some(latest) = self.latest.remove(&key) {
                holders.extend(latest.holders);
            }
        }
        holders
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    #[test]
    fn holders_are_the_nearest_other_nodes() {
        let candidates = [(1, ms(30)), (2, ms(5)), (0, ms(0)), (3, ms(10)), (4, None)];
        let holders = choose_holders(7, 0, &0, &candidates, 2);
        assert_eq!(
            holders,
            Holders {
                peers: vec![2, 3],
                short: None
            }
        );
    }

    #[test]
    fn too_few_nodes_are_said_and_none_leaves_this_node() {
        let holders = choose_holders(7, 0, &0, &[(0, None), (5, None), (5, None)], 2);
        assert_eq!(holders.peers, vec![5]);
        assert_eq!(holders.short, Some(Shortfall::FewerNodes { found: 1 }));
        let alone = choose_holders(7, 0, &0, &[(0, ms(1))], 2);
        assert_eq!(alone.peers, vec![0]);
        assert_eq!(alone.short, Some(Shortfall::OnlyThisNode));
    }

    #[test]
    fn equally_near_holders_differ_between_ranks() {
        let candidates: Vec<(u32, Option<Duration>)> = (1..=20).map(|p| (p, None)).collect();
        let picks: BTreeSet<Vec<u32>> = (0..16)
            .map(|rank| choose_holders(9, rank, &0, &candidates, 2).peers)
            .collect();
        assert!(picks.len() > 8, "{picks:?}");
        // And the same for every node that computes it.
        assert_eq!(
            choose_holders(9, 3, &0, &candidates, 2),
            choose_holders(9, 3, &0, &candidates, 2)
        );
    }

    #[test]
    fn the_index_keeps_the_newest_per_rank_and_forgets_an_ended_job() {
        let mut index = CheckpointIndex::new();
        let at = |seq, holders: &[u32]| Latest {
            seq,
            size: 10,
            holders: holders.to_vec(),
        };
        assert!(index.record(1, 0, at(2, &[5, 6])));
        assert!(!index.record(1, 0, at(1, &[7])), "an older one is ignored");
        assert!(
            !index.record(1, 0, at(3, &[])),
            "one held nowhere is ignored"
        );
        assert!(index.record(1, 1, at(1, &[7])));
        assert!(index.record(2, 0, at(1, &[8])));
        assert!(!index.record(2, MAX_WORKERS, at(1, &[8])));
        assert_eq!(index.latest(1, 0), Some(&at(2, &[5, 6])));
        assert_eq!(index.jobs(), BTreeSet::from([1, 2]));
        assert_eq!(index.end_job(1), BTreeSet::from([5, 6, 7]));
        assert_eq!(index.latest(1, 0), None);
        assert_eq!(index.jobs(), BTreeSet::from([2]));
    }
}

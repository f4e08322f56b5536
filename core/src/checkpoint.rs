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
//!
//! Checkpoints that a job's ranks take together at a barrier carry a
//! *generation* ([`Latest::generation`]): the index keeps each rank's two
//! latest generations, so that a job whose ranks roll back together
//! ([`LostPolicy::Rollback`](crate::node::LostPolicy::Rollback)) always
//! finds one that all of them hold
//! ([`CheckpointIndex::common_generation`]) while a save is on its way.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
        .map(|(p, d)| {
            (
                d.unwrap_or(Duration::MAX),
                crate::rendezvous(&(job, rank), p),
                p,
            )
        })
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

/// The highest checkpoint generation a guest may name: generations count
/// checkpoints taken at a barrier, so this is never reached (one a
/// millisecond would take nine thousand years).
pub const MAX_GENERATION: u64 = 1 << 48;

/// The number of the `count`th checkpoint a worker of incarnation
/// `incarnation` saves: the incarnation above the count, so that a fresh
/// worker's checkpoints are newer than its predecessors', and the home can
/// tell which worker saved one ([`incarnation_of`]).
pub fn checkpoint_seq(incarnation: u32, count: u32) -> u64 {
    (u64::from(incarnation) << 32) | u64::from(count)
}

/// The incarnation of the worker that saved checkpoint `seq` (see
/// [`checkpoint_seq`]).
pub fn incarnation_of(seq: u64) -> u32 {
    (seq >> 32) as u32
}

/// Where one complete checkpoint of a rank is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latest<P> {
    /// The checkpoint's number: higher is newer ([`checkpoint_seq`]).
    pub seq: u64,
    /// The generation the rank's workers agreed on when they took it at a
    /// barrier (every rank's checkpoint of generation `g` describes the
    /// same step of the computation); `None` for a checkpoint a rank took
    /// by itself.
    pub generation: Option<u64>,
    /// Its size in bytes.
    pub size: u64,
    /// The nodes that hold it whole.
    pub holders: Vec<P>,
}

/// What the index keeps of one rank: its latest checkpoint and, when that
/// one has a generation, the one before it in the rank's timeline (a lower
/// generation): while one rank's newest save is still on its way, the
/// generation before it is what every rank holds. Holders keep the same
/// two (see the node's checkpoint store).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kept<P> {
    latest: Latest<P>,
    previous: Option<Latest<P>>,
}

impl<P> Kept<P> {
    fn entries(&self) -> impl Iterator<Item = &Latest<P>> {
        std::iter::once(&self.latest).chain(self.previous.as_ref())
    }
}

/// The home's index of the latest checkpoints of every rank of its jobs
/// (per rank, its latest and, for checkpoints taken at a barrier, the
/// generation before: see [`Latest::generation`]). Bounded by its caller:
/// entries only for jobs under way at the home and ranks below
/// [`MAX_WORKERS`], and [`CheckpointIndex::end_job`] when a job ends; at
/// most two entries per rank, and at most [`MAX_REPLICAS`] holders each.
#[derive(Debug, Clone)]
pub struct CheckpointIndex<P> {
    kept: BTreeMap<(u64, u32), Kept<P>>,
    /// Every node told to hold a checkpoint of a job, also of ones the
    /// index no longer names (rolled back): all of them hear when the job
    /// ended. At most [`MAX_REPLICAS`] per checkpoint recorded, and in
    /// practice the job's nodes' neighbours.
    holders: BTreeMap<u64, BTreeSet<P>>,
}

impl<P> Default for CheckpointIndex<P> {
    fn default() -> Self {
        CheckpointIndex {
            kept: BTreeMap::new(),
            holders: BTreeMap::new(),
        }
    }
}

/// Why the index did not record a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRecorded {
    /// The rank, holder list or generation is beyond its maximum, or the
    /// list is empty.
    OutOfRange,
    /// A newer checkpoint of the rank is known.
    Older,
}

impl<P: Clone + Ord> CheckpointIndex<P> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that checkpoint `latest` of `rank` of `job` is stored: kept
    /// if it is newer than the one known. A checkpoint with a generation
    /// keeps, as the one before it, the newest one known with a lower
    /// generation; anything else the rank had is dropped (a generation not
    /// below the new one belongs to a timeline the job rolled back from).
    pub fn record(&mut self, job: u64, rank: u32, latest: Latest<P>) -> Result<(), NotRecorded> {
        if rank >= MAX_WORKERS
            || latest.holders.is_empty()
            || latest.holders.len() > MAX_REPLICAS
            || latest.generation.is_some_and(|g| g > MAX_GENERATION)
        {
            return Err(NotRecorded::OutOfRange);
        }
        let known = self.kept.get(&(job, rank));
        if known.is_some_and(|k| k.latest.seq >= latest.seq) {
            return Err(NotRecorded::Older);
        }
        let previous = match latest.generation {
            None => None,
            Some(g) => known.and_then(|k| {
                k.entries()
                    .filter(|e| e.generation.is_some_and(|h| h < g))
                    .max_by_key(|e| e.seq)
                    .cloned()
            }),
        };
        self.holders
            .entry(job)
            .or_default()
            .extend(latest.holders.iter().cloned());
        self.kept.insert((job, rank), Kept { latest, previous });
        Ok(())
    }

    /// The latest checkpoint of `rank` of `job`, if one was recorded.
    pub fn latest(&self, job: u64, rank: u32) -> Option<&Latest<P>> {
        self.kept.get(&(job, rank)).map(|k| &k.latest)
    }

    /// The checkpoints of `rank` of `job` the index keeps, newest first.
    pub fn kept(&self, job: u64, rank: u32) -> impl Iterator<Item = &Latest<P>> {
        self.kept
            .get(&(job, rank))
            .into_iter()
            .flat_map(Kept::entries)
    }

    /// The latest generation every one of `ranks` of `job` holds a
    /// checkpoint of: `None` if there is none (a rank holds nothing, or
    /// the ranks hold no generation in common), or if `ranks` is empty.
    pub fn common_generation(&self, job: u64, ranks: impl IntoIterator<Item = u32>) -> Option<u64> {
        let mut common: Option<BTreeSet<u64>> = None;
        for rank in ranks {
            let held: BTreeSet<u64> = self.kept(job, rank).filter_map(|e| e.generation).collect();
            let both = match common {
                None => held,
                Some(c) => c.intersection(&held).copied().collect(),
            };
            if both.is_empty() {
                return None;
            }
            common = Some(both);
        }
        common.and_then(|c| c.last().copied())
    }

    /// The job rolls back to `generation` (`None`: to its start): every
    /// rank keeps only its checkpoints up to that generation, so that a
    /// fresh worker of the rank loads that one, and a checkpoint of the
    /// abandoned timeline is never taken for the new one's.
    pub fn roll_back(&mut self, job: u64, generation: Option<u64>) {
        let keys: Vec<(u64, u32)> = self
            .kept
            .range((job, 0)..=(job, u32::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            let Some(kept) = self.kept.remove(&key) else {
                continue;
            };
            let Some(g) = generation else {
                continue;
            };
            let mut left: Vec<Latest<P>> = kept
                .entries()
                .filter(|e| e.generation.is_some_and(|h| h <= g))
                .cloned()
                .collect();
            left.sort_by_key(|e| std::cmp::Reverse(e.seq));
            let mut left = left.into_iter();
            if let Some(latest) = left.next() {
                let previous = left.next();
                self.kept.insert(key, Kept { latest, previous });
            }
        }
    }

    /// `peer` is gone: it holds no checkpoint any more. A checkpoint left
    /// with no holder is forgotten (the one before it, if held, becomes
    /// the rank's latest), so that neither a replaced rank nor a rollback
    /// is sent to load what no live node has.
    pub fn holder_lost(&mut self, peer: &P) {
        self.kept.retain(|_, kept| {
            let held: Vec<Latest<P>> = kept
                .entries()
                .cloned()
                .filter_map(|mut e| {
                    e.holders.retain(|h| h != peer);
                    (!e.holders.is_empty()).then_some(e)
                })
                .collect();
            let mut held = held.into_iter();
            let Some(latest) = held.next() else {
                return false;
            };
            *kept = Kept {
                latest,
                previous: held.next(),
            };
            true
        });
    }

    /// The jobs with checkpoints in the index.
    pub fn jobs(&self) -> BTreeSet<u64> {
        self.holders.keys().copied().collect()
    }

    /// Takes `job` out of the index, as it is (for another index: a job's
    /// state rebuilt from its log, a home that takes the job over).
    pub fn take_job(&mut self, job: u64) -> CheckpointIndex<P> {
        let mut taken = CheckpointIndex::new();
        let keys: Vec<(u64, u32)> = self
            .kept
            .range((job, 0)..=(job, u32::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            if let Some(kept) = self.kept.remove(&key) {
                taken.kept.insert(key, kept);
            }
        }
        if let Some(holders) = self.holders.remove(&job) {
            taken.holders.insert(job, holders);
        }
        taken
    }

    /// Adds every job of `other` to this index (replacing what it knew of
    /// them).
    pub fn absorb(&mut self, other: CheckpointIndex<P>) {
        for job in other.holders.keys() {
            drop(self.take_job(*job));
        }
        self.kept.extend(other.kept);
        self.holders.extend(other.holders);
    }

    /// Forgets `job`; returns every node that was told to hold a
    /// checkpoint of it (to be told to drop them).
    pub fn end_job(&mut self, job: u64) -> BTreeSet<P> {
        self.take_job(job).holders.remove(&job).unwrap_or_default()
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

    fn at(seq: u64, holders: &[u32]) -> Latest<u32> {
        Latest {
            seq,
            generation: None,
            size: 10,
            holders: holders.to_vec(),
        }
    }

    fn generation_at(seq: u64, generation: u64, holder: u32) -> Latest<u32> {
        Latest {
            generation: Some(generation),
            ..at(seq, &[holder])
        }
    }

    #[test]
    fn the_index_keeps_the_newest_per_rank_and_forgets_an_ended_job() {
        let mut index = CheckpointIndex::new();
        assert_eq!(index.record(1, 0, at(2, &[5, 6])), Ok(()));
        assert_eq!(
            index.record(1, 0, at(1, &[7])),
            Err(NotRecorded::Older),
            "an older one is ignored"
        );
        assert_eq!(
            index.record(1, 0, at(3, &[])),
            Err(NotRecorded::OutOfRange),
            "one held nowhere is ignored"
        );
        assert_eq!(index.record(1, 1, at(1, &[7])), Ok(()));
        assert_eq!(index.record(2, 0, at(1, &[8])), Ok(()));
        assert_eq!(
            index.record(2, MAX_WORKERS, at(1, &[8])),
            Err(NotRecorded::OutOfRange)
        );
        let too_many: Vec<u32> = (0..=MAX_REPLICAS as u32).collect();
        assert_eq!(
            index.record(2, 1, at(1, &too_many)),
            Err(NotRecorded::OutOfRange)
        );
        assert_eq!(
            index.record(2, 1, generation_at(1, MAX_GENERATION + 1, 3)),
            Err(NotRecorded::OutOfRange)
        );
        assert_eq!(index.latest(1, 0), Some(&at(2, &[5, 6])));
        assert_eq!(index.jobs(), BTreeSet::from([1, 2]));
        assert_eq!(index.end_job(1), BTreeSet::from([5, 6, 7]));
        assert_eq!(index.latest(1, 0), None);
        assert_eq!(index.jobs(), BTreeSet::from([2]));
    }

    #[test]
    fn the_common_generation_is_the_latest_every_rank_holds() {
        let mut index = CheckpointIndex::new();
        // Ranks 0 and 1 saved generations 1 and 2; rank 2 is still saving
        // generation 2: generation 1 is common.
        for rank in 0..3 {
            index
                .record(1, rank, generation_at(1, 1, 10 + rank))
                .unwrap();
        }
        index.record(1, 0, generation_at(2, 2, 10)).unwrap();
        index.record(1, 1, generation_at(2, 2, 11)).unwrap();
        assert_eq!(index.common_generation(1, 0..3), Some(1));
        assert_eq!(index.common_generation(1, 0..2), Some(2));
        // Rank 2's save arrives: generation 2 is common, and every rank
        // still keeps generation 1 as the one before.
        index.record(1, 2, generation_at(2, 2, 12)).unwrap();
        assert_eq!(index.common_generation(1, 0..3), Some(2));
        let kept: Vec<Option<u64>> = index.kept(1, 0).map(|e| e.generation).collect();
        assert_eq!(kept, vec![Some(2), Some(1)]);
        // Generation 3 of rank 0 drops its generation 1.
        index.record(1, 0, generation_at(3, 3, 10)).unwrap();
        let kept: Vec<Option<u64>> = index.kept(1, 0).map(|e| e.generation).collect();
        assert_eq!(kept, vec![Some(3), Some(2)]);
        assert_eq!(index.common_generation(1, 0..3), Some(2));
        // A rank that holds nothing, or no shared generation: none.
        assert_eq!(index.common_generation(1, 0..4), None);
        assert_eq!(index.common_generation(1, []), None);
        index.record(2, 0, generation_at(1, 5, 10)).unwrap();
        index.record(2, 1, generation_at(1, 7, 11)).unwrap();
        assert_eq!(index.common_generation(2, 0..2), None);
        // Checkpoints without a generation are in no generation.
        index.record(3, 0, at(1, &[10])).unwrap();
        assert_eq!(index.common_generation(3, 0..1), None);
    }

    #[test]
    fn a_checkpoint_whose_holders_are_gone_is_not_chosen() {
        let mut index = CheckpointIndex::new();
        for rank in 0..2 {
            index.record(1, rank, generation_at(1, 1, 10)).unwrap();
        }
        index.record(1, 0, generation_at(2, 2, 20)).unwrap();
        index.record(1, 1, generation_at(2, 2, 21)).unwrap();
        assert_eq!(index.common_generation(1, 0..2), Some(2));
        // Rank 0's generation 2 was held by node 20 alone: generation 1
        // is the latest every rank can still load.
        index.holder_lost(&20);
        assert_eq!(index.common_generation(1, 0..2), Some(1));
        assert_eq!(index.latest(1, 0), Some(&generation_at(1, 1, 10)));
        assert_eq!(index.latest(1, 1), Some(&generation_at(2, 2, 21)));
        // A holder of several keeps none of them; a checkpoint with
        // another holder keeps it.
        index.record(2, 0, at(1, &[10, 11])).unwrap();
        index.holder_lost(&10);
        assert_eq!(index.latest(1, 0), None);
        assert_eq!(index.common_generation(1, 0..2), None);
        assert_eq!(index.latest(2, 0), Some(&at(1, &[11])));
        // The gone node still hears when the job ends (it may come back).
        assert!(index.end_job(1).contains(&20));
    }

    #[test]
    fn a_rollback_drops_the_abandoned_timeline() {
        let mut index = CheckpointIndex::new();
        for rank in 0..2 {
            index.record(1, rank, generation_at(1, 1, 10)).unwrap();
            index.record(1, rank, generation_at(2, 2, 11)).unwrap();
        }
        index.record(1, 0, generation_at(3, 3, 12)).unwrap();
        index.roll_back(1, Some(2));
        assert_eq!(index.latest(1, 0).map(|l| l.generation), Some(Some(2)));
        assert_eq!(index.latest(1, 1).map(|l| l.generation), Some(Some(2)));
        // The new timeline saves generation 3 again, with a newer number;
        // its generation 2 stays the one before.
        index.record(1, 0, generation_at(4 << 32, 3, 13)).unwrap();
        let kept: Vec<(u64, Option<u64>)> =
            index.kept(1, 0).map(|e| (e.seq, e.generation)).collect();
        assert_eq!(kept, vec![(4 << 32, Some(3)), (2, Some(2))]);
        // A checkpoint of a generation at or above the new one's (the old
        // timeline's, saved late) is not kept as the one before.
        index.record(1, 1, generation_at(3, 3, 12)).unwrap();
        index.record(1, 1, generation_at(5 << 32, 3, 13)).unwrap();
        let kept: Vec<u64> = index.kept(1, 1).map(|e| e.seq).collect();
        assert_eq!(kept, vec![5 << 32, 2]);
        // Back to the start: nothing is kept, but the holders are still
        // told when the job ends.
        index.roll_back(1, None);
        assert_eq!(index.latest(1, 0), None);
        assert_eq!(index.common_generation(1, 0..2), None);
        assert_eq!(index.end_job(1), BTreeSet::from([10, 11, 12, 13]));
        assert!(index.jobs().is_empty());
    }

    #[test]
    fn a_job_moves_between_indexes_whole() {
        let mut index = CheckpointIndex::new();
        index.record(1, 0, generation_at(1, 1, 10)).unwrap();
        index.record(1, 0, generation_at(2, 2, 10)).unwrap();
        index.record(2, 0, at(1, &[11])).unwrap();
        let taken = index.take_job(1);
        assert_eq!(index.jobs(), BTreeSet::from([2]));
        let mut other = CheckpointIndex::new();
        other.record(1, 0, generation_at(9, 9, 12)).unwrap();
        other.absorb(taken);
        assert_eq!(other.common_generation(1, 0..1), Some(2));
        assert_eq!(other.kept(1, 0).count(), 2);
        assert_eq!(other.end_job(1), BTreeSet::from([10]));
    }
}

//! Mapping a job's workers onto the nodes that offered them: the `spread` and
//! `concentrate` strategies of P2P-MPI (Genaud and Rattanapoka, section 4.3).
//!
//! Both take `slist`, the `min(|offers|, n)` offering nodes nearest to the
//! home, each with capacity `c_i = min(offered_i, n)`:
//! - **spread** deals workers round-robin over `slist`, one per node per round,
//!   so that nodes carry one worker each as long as there are nodes enough;
//! - **concentrate** fills each node of `slist` up to its capacity, nearest
//!   first.
//!
//! Ranks are then numbered along `slist`. Nodes that got no worker have their
//! hold released.
//!
//! Nearest first is what P2P-MPI and Zorilla do. Grids are not uniform
//! (issue 17, after the multi-core desktop grids paper): among offers at
//! the *same distance* ([`SameDistance`]) the home prefers nodes that run
//! nothing else, then faster ones, then less loaded ones
//! ([`allocate_preferring`]), as that paper's job pushing prefers free
//! nodes and among them the fastest. Distance still comes first: the order
//! changes only within a group of equally near offers, never across groups.
//!
//! A native job's ranks talk over their MPI library's own transport, not
//! through the overlay's relays: before mapping, its offers are narrowed
//! to nodes that reach each other ([`reachable_together`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::advert::Strategy;
use crate::resources::{Machine, Reachability};

/// An offering node as the home sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate<P> {
    /// The node.
    pub node: P,
    /// The RTT between the home and the node.
    pub rtt: Duration,
    /// How many workers the node offered.
    pub offered: u32,
    /// What the node said of its machine (cores, load, speed).
    pub machine: Machine,
}

/// When two offers count as equally near: the home then prefers idle,
/// then faster, then less loaded nodes among them.
///
/// Offers are grouped nearest first: a group starts at the nearest offer
/// not grouped yet, at RTT `r`, and takes every offer within
/// `r + max(absolute, r * relative_permille / 1000)`. So every offer of a
/// group is farther than every offer of the groups before it, and the
/// nearest offer of a group decides its extent (a chain of offers each a
/// little farther than the last cannot stretch a group without bound).
///
/// Why a tolerance at all: measured RTTs are noisy (queueing only adds:
/// samples of one path vary by some 10%), and the machines of one site or
/// LAN are a few hundred microseconds apart whichever is measured first; a
/// home that ranked them by RTT alone would choose among them by noise.
/// Why these defaults ([`SameDistance::DEFAULT`]): 250 µs spans a LAN
/// (the home itself, at RTT zero, and the machines of its site, some 100
/// to 200 µs away, are one group), yet stays below the RTT to another
/// site (0.5 ms at the least in the simulator's grids, which count a
/// worker as out of order when a free one was nearer by more than the
/// within-site RTT, 200 µs); 5% is half the measurement noise, so that
/// the machines of one far site mostly fall in one group, while sites
/// that differ by more than a twentieth of their distance stay apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SameDistance {
    /// Offers within this much of a group's nearest are in the group.
    pub absolute: Duration,
    /// ... or within this share of its RTT, in per mille, whichever is
    /// more.
    pub relative_permille: u32,
}

impl SameDistance {
    /// 250 µs or 5%, whichever is more (see the type's docs for why).
    pub const DEFAULT: SameDistance = SameDistance {
        absolute: Duration::from_micros(250),
        relative_permille: 50,
    };

    /// The farthest RTT in the group whose nearest offer is at `nearest`
    /// (saturating: RTTs come from peers).
    pub fn reach(&self, nearest: Duration) -> Duration {
        let relative = nearest
            .checked_mul(self.relative_permille)
            .map_or(Duration::MAX, |d| d / 1000);
        nearest.saturating_add(self.absolute.max(relative))
    }
}

impl Default for SameDistance {
    fn default() -> Self {
        SameDistance::DEFAULT
    }
}

/// Orders offers for `slist`: nearest first (ties by node order); with
/// `same`, within each group of equally near offers, idle nodes first,
/// then faster, then less loaded, then nearer, then by node order.
fn order<P: Ord>(candidates: &[Candidate<P>], same: Option<SameDistance>) -> Vec<&Candidate<P>> {
    let mut slist: Vec<&Candidate<P>> = candidates.iter().filter(|c| c.offered > 0).collect();
    slist.sort_by(|a, b| a.rtt.cmp(&b.rtt).then_with(|| a.node.cmp(&b.node)));
    let Some(same) = same else {
        return slist;
    };
    let mut start = 0;
    while start < slist.len() {
        let reach = same.reach(slist[start].rtt);
        let len = slist[start..].iter().take_while(|c| c.rtt <= reach).count();
        slist[start..start + len].sort_by(|a, b| {
            let key = |c: &Candidate<P>| {
                (
                    !c.machine.is_idle(),
                    std::cmp::Reverse(c.machine.speed),
                    c.machine.load_permille(),
                    c.rtt,
                )
            };
            key(a).cmp(&key(b)).then_with(|| a.node.cmp(&b.node))
        });
        start += len.max(1);
    }
    slist
}

/// The workers one node runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment<P> {
    /// The node.
    pub node: P,
    /// How many workers it runs.
    pub workers: u32,
}

/// Maps `n` workers onto `candidates` with `strategy`, nearest nodes first
/// (ties broken by node order, so the result is deterministic). Returns the
/// nodes that get at least one worker, in `slist` order, or `None` when the
/// candidates cannot hold `n` workers.
pub fn allocate<P: Clone + Ord>(
    strategy: Strategy,
    candidates: &[Candidate<P>],
    n: u32,
) -> Option<Vec<Assignment<P>>> {
    allocate_preferring(strategy, candidates, n, None)
}

/// [`allocate`], but with `same`, among offers at the same distance the
/// nodes that run nothing else come first, then the faster ones, then the
/// less loaded ones ([`SameDistance`]); `None` is [`allocate`].
pub fn allocate_preferring<P: Clone + Ord>(
    strategy: Strategy,
    candidates: &[Candidate<P>],
    n: u32,
    same: Option<SameDistance>,
) -> Option<Vec<Assignment<P>>> {
    let mut slist = order(candidates, same);
    slist.truncate(n as usize);
    let capacity: Vec<u32> = slist.iter().map(|c| c.offered.min(n)).collect();
    if capacity.iter().map(|c| u64::from(*c)).sum::<u64>() < u64::from(n) {
        return None;
    }
    let mut used = vec![0u32; slist.len()];
    let mut dealt = 0u32;
    match strategy {
        Strategy::Spread => {
            while dealt < n {
                for (u, c) in used.iter_mut().zip(&capacity) {
                    if dealt == n {
                        break;
                    }
                    if *u < *c {
                        *u += 1;
                        dealt += 1;
                    }
                }
            }
        }
        Strategy::Concentrate => {
            for (u, c) in used.iter_mut().zip(&capacity) {
                *u = (*c).min(n - dealt);
                dealt += *u;
            }
        }
    }
    Some(
        slist
            .iter()
            .zip(used)
            .filter(|(_, u)| *u > 0)
            .map(|(c, workers)| Assignment {
                node: c.node.clone(),
                workers,
            })
            .collect(),
    )
}

/// The offers among which a native job's ranks are placed: nodes that
/// reach each other ([`Reachability::together`]), since its ranks connect
/// directly, not through the overlay. `pinned`: the kind of the nodes its
/// ranks already run on (not unknown), which its new ones must match.
/// Otherwise each kind the offers name (public, or behind one NAT) makes a
/// group with the offers of unknown kind, tried in the order of their
/// nearest offer: the first whose offers reach `needed` workers is taken,
/// else the one that offers the most (the job waits for more). Offers of
/// unknown kind alone make one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Together<P> {
    /// The offers of the group.
    pub candidates: Vec<Candidate<P>>,
    /// Its kind, if any offer of it has one: the job's ranks are then
    /// pinned to it.
    pub kind: Option<Reachability>,
    /// Workers offered by nodes outside it.
    pub apart: u32,
}

/// See [`Together`].
pub fn reachable_together<P: Clone + Ord>(
    candidates: &[Candidate<P>],
    pinned: Option<Reachability>,
    needed: u32,
) -> Together<P> {
    let group = |kind: Reachability| -> Together<P> {
        let (inside, outside): (Vec<&Candidate<P>>, Vec<&Candidate<P>>) = candidates
            .iter()
            .partition(|c| c.machine.reach.together(kind));
        let known = kind != Reachability::Unknown;
        Together {
            candidates: inside.into_iter().cloned().collect(),
            kind: known.then_some(kind),
            apart: offered(outside.into_iter()),
        }
    };
    if let Some(kind) = pinned.filter(|k| *k != Reachability::Unknown) {
        return group(kind);
    }
    let mut by_distance: Vec<&Candidate<P>> = candidates.iter().collect();
    by_distance.sort_by(|a, b| a.rtt.cmp(&b.rtt).then_with(|| a.node.cmp(&b.node)));
    let mut kinds: Vec<Reachability> = Vec::new();
    for c in by_distance {
        let kind = c.machine.reach;
        if kind != Reachability::Unknown && !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    if kinds.is_empty() {
        return group(Reachability::Unknown);
    }
    let mut best: Option<(u32, Together<P>)> = None;
    for kind in kinds {
        let together = group(kind);
        let workers = offered(together.candidates.iter());
        if workers >= needed {
            return together;
        }
        if best.as_ref().is_none_or(|(most, _)| workers > *most) {
            best = Some((workers, together));
        }
    }
    best.expect("at least one kind").1
}

/// The workers `candidates` offer in all (saturating: counts from peers).
fn offered<'a, P: 'a>(candidates: impl Iterator<Item = &'a Candidate<P>>) -> u32 {
    candidates.fold(0u32, |sum, c| sum.saturating_add(c.offered))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};

    /// Offers `(node, rtt µs, offered, reachability)`.
    fn reaching(offers: &[(u32, u64, u32, Reachability)]) -> Vec<Candidate<u32>> {
        offers
            .iter()
            .map(|&(node, rtt, offered, reach)| Candidate {
                node,
                rtt: Duration::from_micros(rtt),
                offered,
                machine: Machine {
                    reach,
                    ..Machine::default()
                },
            })
            .collect()
    }

    fn nodes(together: &Together<u32>) -> Vec<u32> {
        together.candidates.iter().map(|c| c.node).collect()
    }

    #[test]
    fn a_native_jobs_ranks_go_only_to_nodes_that_reach_each_other() {
        use Reachability::{BehindNat, Public, Unknown};
        let nat = |last| BehindNat(std::net::IpAddr::from([192, 0, 2, last]));
        // Nearest: a node behind NAT 1; then public ones; then one of
        // unknown kind; then another behind NAT 1.
        let offers = reaching(&[
            (1, 100, 1, nat(1)),
            (2, 200, 1, Public),
            (3, 300, 1, Public),
            (4, 400, 1, Unknown),
            (5, 500, 1, nat(1)),
            (6, 600, 1, nat(2)),
        ]);
        // Two workers: the nearest kind's group has them (with the
        // unknown node): NAT 1.
        let two = reachable_together(&offers, None, 2);
        assert_eq!(nodes(&two), [1, 4, 5]);
        assert_eq!((two.kind, two.apart), (Some(nat(1)), 3));
        // Four: NAT 1's group has 3; the public one, with the unknown
        // node, has 3 too; none has 4: the first of the largest.
        let four = reachable_together(&offers, None, 4);
        assert_eq!(nodes(&four), [1, 4, 5]);
        // Pinned to public by the ranks that run: only public or unknown.
        let pinned = reachable_together(&offers, Some(Public), 1);
        assert_eq!(nodes(&pinned), [2, 3, 4]);
        assert_eq!((pinned.kind, pinned.apart), (Some(Public), 3));
        // Only unknown kinds (a grid on one machine): everyone, unpinned.
        let unknown = reaching(&[(1, 100, 2, Unknown), (2, 50, 1, Unknown)]);
        let all = reachable_together(&unknown, None, 3);
        assert_eq!((nodes(&all), all.kind, all.apart), (vec![1, 2], None, 0));
        assert_eq!(reachable_together(&unknown, Some(Unknown), 3), all);
    }

    fn candidates(offers: &[(u32, u64, u32)]) -> Vec<Candidate<u32>> {
        offers
            .iter()
            .map(|&(node, rtt, offered)| Candidate {
                node,
                rtt: Duration::from_micros(rtt),
                offered,
                machine: Machine::default(),
            })
            .collect()
    }

    fn counts(assignments: &[Assignment<u32>]) -> Vec<(u32, u32)> {
        assignments.iter().map(|a| (a.node, a.workers)).collect()
    }

    #[test]
    fn spread_puts_one_worker_per_nearest_node_first() {
        let offers = candidates(&[(1, 30, 4), (2, 10, 4), (3, 20, 4), (4, 40, 4)]);
        let result = allocate(Strategy::Spread, &offers, 3).unwrap();
        assert_eq!(counts(&result), vec![(2, 1), (3, 1), (1, 1)]);
        let result = allocate(Strategy::Spread, &offers, 6).unwrap();
        assert_eq!(counts(&result), vec![(2, 2), (3, 2), (1, 1), (4, 1)]);
    }

    #[test]
    fn concentrate_fills_the_nearest_node_first() {
        let offers = candidates(&[(1, 30, 4), (2, 10, 4), (3, 20, 4)]);
        let result = allocate(Strategy::Concentrate, &offers, 6).unwrap();
        assert_eq!(counts(&result), vec![(2, 4), (3, 2)]);
    }

    #[test]
    fn too_little_capacity_allocates_nothing() {
        let offers = candidates(&[(1, 30, 1), (2, 10, 2)]);
        assert_eq!(allocate(Strategy::Concentrate, &offers, 4), None);
        assert_eq!(allocate(Strategy::Spread, &offers, 4), None);
    }

    /// Offers `(node, rtt µs, offered, busy cores of 8, speed)`.
    fn machines(offers: &[(u32, u64, u32, u32, u32)]) -> Vec<Candidate<u32>> {
        offers
            .iter()
            .map(|&(node, rtt, offered, busy, speed)| Candidate {
                node,
                rtt: Duration::from_micros(rtt),
                offered,
                machine: Machine {
                    cores: 8,
                    busy,
                    speed,
                    reach: Reachability::Unknown,
                },
            })
            .collect()
    }

    #[test]
    fn among_equally_near_offers_idle_then_faster_nodes_come_first() {
        // One site (0.2 ms, measured with noise): node 1 runs another
        // job's workers, 2 is idle and slow, 3 idle and fast, 5 busy but
        // fast; node 4, at another site, is idle and fastest of all.
        let offers = machines(&[
            (1, 200, 4, 2, 1000),
            (2, 215, 4, 0, 800),
            (3, 220, 4, 0, 1500),
            (4, 5_000, 4, 0, 3000),
            (5, 205, 4, 6, 2000),
            (6, 210, 4, 2, 2000),
        ]);
        let prefer = Some(SameDistance::DEFAULT);
        let result = allocate_preferring(Strategy::Spread, &offers, 2, prefer).unwrap();
        assert_eq!(counts(&result), vec![(3, 1), (2, 1)]);
        // Among busy nodes of one speed, the less loaded first.
        let result = allocate_preferring(Strategy::Spread, &offers, 4, prefer).unwrap();
        assert_eq!(counts(&result), vec![(3, 1), (2, 1), (6, 1), (5, 1)]);
        let result = allocate_preferring(Strategy::Concentrate, &offers, 6, prefer).unwrap();
        assert_eq!(counts(&result), vec![(3, 4), (2, 2)]);
        // Without the preference: by RTT alone.
        let result = allocate(Strategy::Spread, &offers, 2).unwrap();
        assert_eq!(counts(&result), vec![(1, 1), (5, 1)]);
    }

    #[test]
    fn distance_still_comes_first_across_groups() {
        // The home (RTT zero, busy) and its site (0.2 ms) are one group;
        // the idle fast node 0.6 ms away is in the next one.
        let offers = machines(&[
            (0, 0, 1, 7, 1000),
            (1, 200, 1, 1, 1000),
            (2, 600, 4, 0, 4000),
        ]);
        let prefer = Some(SameDistance::DEFAULT);
        let result = allocate_preferring(Strategy::Concentrate, &offers, 2, prefer).unwrap();
        assert_eq!(counts(&result), vec![(1, 1), (0, 1)]);
        // Groups are measured from their nearest offer, so a chain of
        // offers each a little farther cannot stretch one: 10 and 10.4 ms
        // are one group (within 5% of 10), 10.8 and 11.2 ms the next.
        let offers = machines(&[
            (1, 10_000, 1, 3, 1000),
            (2, 10_400, 1, 0, 1000),
            (3, 10_800, 1, 3, 1000),
            (4, 11_200, 1, 0, 1000),
        ]);
        let result = allocate_preferring(Strategy::Spread, &offers, 3, prefer).unwrap();
        assert_eq!(counts(&result), vec![(2, 1), (1, 1), (4, 1)]);
    }

    #[test]
    fn hostile_rtts_and_figures_do_not_panic() {
        let same = SameDistance {
            absolute: Duration::MAX,
            relative_permille: u32::MAX,
        };
        assert_eq!(same.reach(Duration::MAX), Duration::MAX);
        assert_eq!(SameDistance::DEFAULT.reach(Duration::MAX), Duration::MAX);
        let offers = vec![
            Candidate {
                node: 1,
                rtt: Duration::MAX,
                offered: u32::MAX,
                machine: Machine {
                    cores: 0,
                    busy: u32::MAX,
                    speed: 0,
                    reach: Reachability::Unknown,
                },
            },
            Candidate {
                node: 2,
                rtt: Duration::MAX,
                offered: 1,
                machine: Machine {
                    cores: u32::MAX,
                    busy: u32::MAX,
                    speed: u32::MAX,
                    reach: Reachability::Unknown,
                },
            },
        ];
        let result = allocate_preferring(Strategy::Spread, &offers, 2, Some(same)).unwrap();
        assert_eq!(counts(&result), vec![(2, 1), (1, 1)]);
    }

    proptest! {
        /// With the preference: exactly `n` placed within the offers, and
        /// an offer left out while a farther one was used is in that
        /// one's group of equally near offers.
        #[test]
        fn a_preferring_allocation_never_skips_a_nearer_group(
            offers in proptest::collection::vec(
                (0u32..50, 0u64..3000, 0u32..8, 0u32..9, 1u32..4000), 0..40),
            n in 1u32..100,
        ) {
            let mut seen = std::collections::BTreeSet::new();
            let offers: Vec<_> = offers.into_iter().filter(|o| seen.insert(o.0)).collect();
            let offers = machines(&offers);
            let same = SameDistance::DEFAULT;
            let Some(result) = allocate_preferring(Strategy::Concentrate, &offers, n, Some(same)) else {
                return Ok(());
            };
            prop_assert_eq!(result.iter().map(|a| a.workers).sum::<u32>(), n);
            let rtt = |node: u32| offers.iter().find(|c| c.node == node).unwrap().rtt;
            for left in offers.iter().filter(|c| c.offered > 0 && !result.iter().any(|a| a.node == c.node)) {
                for used in &result {
                    let used = rtt(used.node);
                    prop_assert!(left.rtt >= used || used <= same.reach(left.rtt));
                }
            }
        }

        #[test]
        fn every_allocation_places_exactly_n_within_offers(
            offers in proptest::collection::vec((0u32..50, 0u64..1000, 0u32..8), 0..40),
            n in 1u32..100,
            spread in any::<bool>(),
        ) {
            let mut seen = std::collections::BTreeSet::new();
            let offers: Vec<_> = offers.into_iter().filter(|(node, _, _)| seen.insert(*node)).collect();
            let offers = candidates(&offers);
            let strategy = if spread { Strategy::Spread } else { Strategy::Concentrate };
            let total: u64 = offers.iter().map(|c| u64::from(c.offered)).sum();
            match allocate(strategy, &offers, n) {
                None => prop_assert!(total < u64::from(n) || offers.iter().filter(|c| c.offered > 0).count() < 1),
                Some(result) => {
                    prop_assert_eq!(result.iter().map(|a| a.workers).sum::<u32>(), n);
                    for a in &result {
                        let offer = offers.iter().find(|c| c.node == a.node).unwrap();
                        prop_assert!(a.workers >= 1 && a.workers <= offer.offered);
                    }
                    // Nearest first: every node left out is no nearer than
                    // every node used, unless the used ones are all full.
                    let max_used = result.iter().map(|a| offers.iter().find(|c| c.node == a.node).unwrap().rtt).max().unwrap();
                    if strategy == Strategy::Concentrate {
                        for c in offers.iter().filter(|c| c.offered > 0 && !result.iter().any(|a| a.node == c.node)) {
                            prop_assert!(c.rtt >= max_used);
                        }
                    }
                }
            }
        }
    }
}

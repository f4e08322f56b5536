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

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::advert::Strategy;

/// An offering node as the home sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate<P> {
    /// The node.
    pub node: P,
    /// The RTT between the home and the node.
    pub rtt: Duration,
    /// How many workers the node offered.
    pub offered: u32,
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
    let mut slist: Vec<&Candidate<P>> = candidates.iter().filter(|c| c.offered > 0).collect();
    slist.sort_by(|a, b| a.rtt.cmp(&b.rtt).then_with(|| a.node.cmp(&b.node)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};

    fn candidates(offers: &[(u32, u64, u32)]) -> Vec<Candidate<u32>> {
        offers
            .iter()
            .map(|&(node, rtt, offered)| Candidate {
                node,
                rtt: Duration::from_micros(rtt),
                offered,
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

    proptest! {
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

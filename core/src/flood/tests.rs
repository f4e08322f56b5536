//! The flood router's tests: duplicates, TTL and budget, the rate
//! limit, pruning by distance and the routes told.

use super::*;

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn header(ttl: u8) -> FloodHeader {
    FloodHeader {
        seq: 0,
        ttl,
        latency_budget: None,
        path_rtt: Duration::ZERO,
    }
}

/// Where the driver says the home, what a copy told of a neighbour's
/// distance holds for every job of that home: the first flood of the
/// next job is pruned too. Without the home, only later floods of the
/// same job are.
#[test]
fn nearer_neighbours_are_remembered_per_home_where_the_home_is_known() {
    struct Home(u32);
    impl HomeDistance<u32> for Home {
        fn own(&self) -> Option<Duration> {
            None
        }
        fn peer(&self, _: &u32) -> Option<Duration> {
            None
        }
        fn home(&self) -> Option<&u32> {
            Some(&self.0)
        }
    }
    let neighbours = [(1, ms(1)), (2, ms(1)), (3, ms(1))];
    // Latency-bounded floods (a hop-limited one is not pruned: see
    // `a_flood_limited_by_hops_only_is_not_pruned_by_latency`).
    let at = |path: u64| FloodHeader {
        path_rtt: ms(path),
        latency_budget: Some(ms(1000)),
        ..header(5)
    };
    let flood = |job: u64| FloodId {
        job: JobId(job),
        seq: 0,
    };
    let peers = |verdict: Verdict<u32>| match verdict {
        Verdict::Deliver { forward, .. } => forward.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    for (distances, pruned) in [(&Home(7) as &dyn HomeDistance<u32>, true), (&None, false)] {
        let mut router: FloodRouter<u32> = FloodRouter::new(FloodConfig::default());
        // Job 1's copy from peer 1 says peer 1 is 2 ms from the home;
        // peer 3's duplicate, 1 ms.
        router.receive_with(&1, flood(1), at(3), &[], distances, &neighbours, ms(0));
        router.receive_with(&3, flood(1), at(2), &[], distances, &neighbours, ms(1));
        // Job 2's first flood, from the same home, comes by peer 2 at
        // 4 ms: peers 1 and 3 are nearer the home.
        let sent =
            peers(router.receive_with(&2, flood(2), at(4), &[], distances, &neighbours, ms(2)));
        if pruned {
            assert_eq!(sent, Vec::<u32>::new());
        } else {
            assert_eq!(sent, vec![1, 3]);
        }
    }
}

/// A copy is not sent back to the peers its sender also sent it to;
/// and a later flood of the same job goes to a neighbour only where the
/// way through this node is no longer than the one the neighbour is
/// known to have (its own copy told it, or the sender served it
/// directly).
#[test]
fn no_copy_to_peers_the_sender_served_nor_where_a_shorter_way_is_known() {
    let mut router: FloodRouter<u32> = FloodRouter::new(FloodConfig::default());
    let neighbours = [(1, ms(1)), (2, ms(1)), (3, ms(1)), (4, ms(1))];
    let at = |path: u64, seq: u32| FloodHeader {
        seq,
        path_rtt: ms(path),
        latency_budget: Some(ms(1000)),
        ..header(5)
    };
    let flood = |seq: u32| FloodId { job: JobId(9), seq };
    let peers = |verdict: Verdict<u32>| match verdict {
        Verdict::Deliver { forward, .. } => forward.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    // Peer 1 (2 ms from the home: 3 ms less its link) sent the first
    // flood here and to peer 2, so peer 2 is at most 4 ms away.
    let sent = peers(router.receive_from(&1, flood(0), at(3, 0), &[2], None, &neighbours, ms(0)));
    assert_eq!(sent, vec![3, 4]);
    // Peer 3's duplicate says it is 1 ms from the home (a way short
    // enough that the copy is passed on again, not delivered again).
    let dup = router.receive_from(&3, flood(0), at(2, 0), &[], None, &neighbours, ms(1));
    assert!(matches!(dup, Verdict::Reforward { .. }), "{dup:?}");
    // The next flood, from peer 4 at 4 ms (so peer 4 is 3 ms away): the
    // way through here is 5 ms, and each of 1 (2 ms), 2 (4 ms) and 3
    // (1 ms) has a shorter one.
    let sent = peers(router.receive_from(&4, flood(1), at(4, 1), &[], None, &neighbours, ms(2)));
    assert_eq!(sent, Vec::<u32>::new());
    // The one after comes by peer 3 at 2 ms: 3 ms through here is
    // longer than peer 1's 2 ms, and no longer than 2's 4 ms and 4's
    // 3 ms (equal ways both send).
    let sent = peers(router.receive_from(&3, flood(2), at(2, 2), &[], None, &neighbours, ms(3)));
    assert_eq!(sent, vec![2, 4]);
    // A minute later nothing learnt holds: the overlay may have changed.
    let later = ms(3) + DISTANCE_KEPT;
    let sent = peers(router.receive_from(&4, flood(3), at(4, 3), &[], None, &neighbours, later));
    assert_eq!(sent, vec![1, 2, 3]);
    // Without pruning (the paper's plain flood): all but the sender.
    let mut plain: FloodRouter<u32> = FloodRouter::new(FloodConfig {
        prune: false,
        ..FloodConfig::default()
    });
    let sent = peers(plain.receive_from(&1, flood(0), at(3, 0), &[2], None, &neighbours, ms(0)));
    assert_eq!(sent, vec![2, 3, 4]);
}

/// A flood limited by hops only goes to every neighbour but the ones its
/// sender served, whatever their known distances: a neighbour nearer in
/// latency may be more hops away from the home, and have had the flood
/// with too little TTL to pass it on.
#[test]
fn a_flood_limited_by_hops_only_is_not_pruned_by_latency() {
    let mut router: FloodRouter<u32> = FloodRouter::new(FloodConfig::default());
    let neighbours = [(1, ms(1)), (2, ms(1)), (3, ms(1))];
    let at = |path: u64, seq: u32| FloodHeader {
        seq,
        path_rtt: ms(path),
        ..header(5)
    };
    let flood = |seq: u32| FloodId { job: JobId(9), seq };
    // Peer 3's copy says it is 1 ms from the home.
    router.receive_from(&3, flood(0), at(2, 0), &[], None, &neighbours, ms(0));
    // The next flood comes by peer 1 at 4 ms: peer 3 gets it all the same.
    let Verdict::Deliver { forward, .. } =
        router.receive_from(&1, flood(1), at(4, 1), &[], None, &neighbours, ms(1))
    else {
        panic!("not delivered");
    };
    let sent: Vec<u32> = forward.iter().map(|(p, _)| *p).collect();
    assert_eq!(sent, vec![2, 3]);
}

/// A stranger's copies cannot grow the distances a router keeps per
/// home past their bound.
#[test]
fn distances_kept_per_home_are_bounded() {
    let mut router: FloodRouter<u32> = FloodRouter::new(FloodConfig {
        adverts_per_peer_per_sec: 1_000_000,
        ..FloodConfig::default()
    });
    let flood = FloodId {
        job: JobId(1),
        seq: 0,
    };
    let senders = MAX_DISTANCES_PER_HOME as u32 + 50;
    for from in 0..senders {
        let also: Vec<u32> = (10_000..10_064).collect();
        router.receive_from(
            &from,
            flood,
            header(5),
            &also,
            None,
            &[],
            ms(u64::from(from)),
        );
    }
    let kept: usize = router.nearer.values().map(BTreeMap::len).sum();
    assert_eq!(kept, MAX_DISTANCES_PER_HOME);
}

/// Distances that do not depend on the path: a node whose path is long
/// but whose own distance is within the budget delivers, and a
/// neighbour estimated within the budget gets a copy the path alone
/// would not send it; one estimated beyond it gets none.
#[test]
fn distances_that_do_not_depend_on_the_path_decide_the_budget() {
    struct Known;
    impl HomeDistance<u32> for Known {
        fn own(&self) -> Option<Duration> {
            Some(ms(4))
        }
        fn peer(&self, peer: &u32) -> Option<Duration> {
            match peer {
                2 => Some(ms(5)),
                3 => Some(ms(30)),
                _ => None,
            }
        }
    }
    let mut router = FloodRouter::new(FloodConfig::default());
    let copy = FloodHeader {
        latency_budget: Some(ms(10)),
        path_rtt: ms(9),
        ..header(5)
    };
    // Links of 8 ms: by the path (17 ms) no copy would go anywhere.
    let neighbours = [(2u32, ms(8)), (3, ms(8)), (4, ms(8))];
    let verdict = router.receive_with(&1, ID, copy, &[], &Known, &neighbours, ms(0));
    let Verdict::Deliver { forward, distance } = verdict else {
        panic!("{verdict:?}");
    };
    assert_eq!(distance, ms(4));
    let peers: Vec<u32> = forward.iter().map(|(p, _)| *p).collect();
    assert_eq!(peers, vec![2]);
    assert_eq!(forward[0].1.path_rtt, ms(17), "the path still grows");
}

const ID: FloodId = FloodId {
    job: JobId(1),
    seq: 0,
};

#[test]
fn forwards_to_all_but_the_sender_with_one_less_ttl_and_the_path_grown() {
    let mut router = FloodRouter::new(FloodConfig::default());
    let neighbours = [(1u32, ms(1)), (2, ms(2)), (3, ms(3))];
    let verdict = router.receive(&1, ID, header(3), None, &neighbours, ms(0));
    let Verdict::Deliver { forward, distance } = verdict else {
        panic!("expected delivery, got {verdict:?}");
    };
    assert_eq!(distance, Duration::ZERO);
    assert_eq!(
        forward,
        vec![
            (
                2,
                FloodHeader {
                    ttl: 2,
                    path_rtt: ms(2),
                    ..header(3)
                }
            ),
            (
                3,
                FloodHeader {
                    ttl: 2,
                    path_rtt: ms(3),
                    ..header(3)
                }
            ),
        ]
    );
    // The same copy again is a duplicate.
    assert_eq!(
        router.receive(&2, ID, header(3), None, &neighbours, ms(1)),
        Verdict::Drop(DropReason::Duplicate)
    );
}

#[test]
fn last_hop_delivers_without_forwarding() {
    let mut router = FloodRouter::new(FloodConfig::default());
    let verdict = router.receive(&1u32, ID, header(1), None, &[(2, ms(1))], ms(0));
    assert_eq!(
        verdict,
        Verdict::Deliver {
            forward: vec![],
            distance: Duration::ZERO
        }
    );
}

#[test]
fn a_copy_with_more_ttl_is_forwarded_again_but_not_delivered_again() {
    let mut router = FloodRouter::new(FloodConfig::default());
    let neighbours = [(1u32, ms(1)), (2, ms(1)), (3, ms(1))];
    assert!(matches!(
        router.receive(&1, ID, header(1), None, &neighbours, ms(0)),
        Verdict::Deliver { .. }
    ));
    let verdict = router.receive(&2, ID, header(3), None, &neighbours, ms(1));
    let Verdict::Reforward { forward } = verdict else {
        panic!("expected a re-forward, got {verdict:?}");
    };
    assert_eq!(forward.len(), 2);
    assert!(forward.iter().all(|(_, h)| h.ttl == 2));
}

#[test]
fn node_cap_limits_the_forwarded_ttl() {
    let mut router = FloodRouter::new(FloodConfig {
        max_forward_ttl: 2,
        ..FloodConfig::default()
    });
    let verdict = router.receive(&1u32, ID, header(200), None, &[(2, ms(1))], ms(0));
    let Verdict::Deliver { forward, .. } = verdict else {
        panic!("{verdict:?}")
    };
    assert_eq!(forward[0].1.ttl, 2);
}

#[test]
fn outside_the_latency_budget_neither_delivers_nor_forwards() {
    let mut router = FloodRouter::new(FloodConfig::default());
    let copy = FloodHeader {
        latency_budget: Some(ms(5)),
        path_rtt: ms(8),
        ..header(5)
    };
    assert_eq!(
        router.receive(&1u32, ID, copy, None, &[(2, ms(1))], ms(0)),
        Verdict::Drop(DropReason::OutsideBudget)
    );
    // A direct measurement below the budget wins over the long path.
    let verdict = router.receive(&1u32, ID, copy, Some(ms(4)), &[(2, ms(1))], ms(0));
    assert!(
        matches!(verdict, Verdict::Deliver { distance, .. } if distance == ms(4)),
        "{verdict:?}"
    );
}

#[test]
fn rate_limit_per_peer_refills_over_time() {
    let mut router = FloodRouter::new(FloodConfig {
        adverts_per_peer_per_sec: 2,
        ..FloodConfig::default()
    });
    let mut id = ID;
    let mut verdicts = Vec::new();
    for seq in 0..3 {
        id.seq = seq;
        verdicts.push(router.receive(&1u32, id, header(1), None, &[], ms(0)));
    }
    assert!(matches!(verdicts[0], Verdict::Deliver { .. }));
    assert!(matches!(verdicts[1], Verdict::Deliver { .. }));
    assert_eq!(verdicts[2], Verdict::Drop(DropReason::RateLimited));
    // Another peer is not affected, and after a second peer 1 may send.
    id.seq = 10;
    assert!(matches!(
        router.receive(&2u32, id, header(1), None, &[], ms(0)),
        Verdict::Deliver { .. }
    ));
    id.seq = 11;
    assert!(matches!(
        router.receive(&1u32, id, header(1), None, &[], ms(1000)),
        Verdict::Deliver { .. }
    ));
}

#[test]
fn seen_cache_is_bounded() {
    let mut router = FloodRouter::new(FloodConfig {
        seen_capacity: 4,
        adverts_per_peer_per_sec: 1000,
        ..FloodConfig::default()
    });
    for seq in 0..10 {
        let id = FloodId { job: JobId(1), seq };
        router.receive(&1u32, id, header(1), None, &[], ms(0));
    }
    assert_eq!(router.seen.len(), 4);
    assert!(router.has_seen(&FloodId {
        job: JobId(1),
        seq: 9
    }));
    assert!(!router.has_seen(&FloodId {
        job: JobId(1),
        seq: 0
    }));
}

mod properties {
    use std::collections::{BTreeMap, BTreeSet, VecDeque};

    use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// Hop distances from node 0 over undirected `links`.
    fn hops_from_origin(n: usize, links: &BTreeMap<u32, Vec<(u32, Duration)>>) -> Vec<Option<u8>> {
        let mut hops = vec![None; n];
        hops[0] = Some(0u8);
        let mut queue = VecDeque::from([0u32]);
        while let Some(node) = queue.pop_front() {
            let d = hops[node as usize].unwrap_or(0);
            for (peer, _) in links.get(&node).into_iter().flatten() {
                if hops[*peer as usize].is_none() {
                    hops[*peer as usize] = Some(d.saturating_add(1));
                    queue.push_back(*peer);
                }
            }
        }
        hops
    }

    proptest! {
        /// Floods from node 0 over a random graph, copies handled in a
        /// random order: each node delivers each flood at most once, a
        /// copy never leaves a node with more TTL than it arrived with
        /// (less one), paths only grow, no delivered node is outside
        /// the budget, and a hop-limited flood reaches every node
        /// within its radius, whatever the order.
        #[test]
        fn each_node_delivers_a_flood_once_and_ttl_never_grows(
            n in 2usize..30,
            edges in proptest::collection::vec((0u32..30, 0u32..30, 1u64..20), 1..90),
            radius in 1u8..8,
            budget in proptest::option::of(1u64..60),
            floods in 1u32..3,
            order_seed in any::<u64>(),
        ) {
            let ms = Duration::from_millis;
            let mut links: BTreeMap<u32, Vec<(u32, Duration)>> = BTreeMap::new();
            let mut seen_edges = BTreeSet::new();
            for (a, b, rtt) in edges {
                let (a, b) = (a % n as u32, b % n as u32);
                if a != b && seen_edges.insert((a.min(b), a.max(b))) {
                    links.entry(a).or_default().push((b, ms(rtt)));
                    links.entry(b).or_default().push((a, ms(rtt)));
                }
            }
            let config = FloodConfig {
                adverts_per_peer_per_sec: 1_000_000,
                ..FloodConfig::default()
            };
            let mut routers: Vec<FloodRouter<u32>> =
                (0..n).map(|_| FloodRouter::new(config.clone())).collect();
            let neighbours = |node: u32| links.get(&node).cloned().unwrap_or_default();
            let mut rng = ChaCha8Rng::seed_from_u64(order_seed);
            let mut in_flight: Vec<(u32, u32, FloodId, FloodHeader)> = Vec::new();
            for seq in 0..floods {
                let id = FloodId { job: JobId(1), seq };
                let header = FloodHeader {
                    seq,
                    ttl: radius,
                    latency_budget: budget.map(ms),
                    path_rtt: Duration::ZERO,
                };
                for (to, copy) in routers[0].originate(id, header, &neighbours(0)) {
                    prop_assert_eq!(copy.ttl, radius);
                    in_flight.push((to, 0, id, copy));
                }
            }
            let mut delivered: BTreeMap<(u32, FloodId), u32> = BTreeMap::new();
            while !in_flight.is_empty() {
                let (to, from, id, copy) = in_flight.swap_remove(rng.random_range(0..in_flight.len()));
                let verdict = routers[to as usize].receive(
                    &from, id, copy, None, &neighbours(to), Time::ZERO,
                );
                let forward = match verdict {
                    Verdict::Deliver { forward, distance } => {
                        *delivered.entry((to, id)).or_default() += 1;
                        prop_assert!(to != 0, "the origin delivered its own flood");
                        if let Some(budget) = copy.latency_budget {
                            prop_assert!(distance <= budget);
                        }
                        forward
                    }
                    Verdict::Reforward { forward } => forward,
                    Verdict::Drop(_) => Vec::new(),
                };
                for (next, out) in forward {
                    prop_assert!(out.ttl < copy.ttl, "TTL grew from {} to {}", copy.ttl, out.ttl);
                    prop_assert!(out.ttl >= 1);
                    prop_assert!(out.path_rtt > copy.path_rtt);
                    prop_assert!(next != from);
                    prop_assert_eq!((out.seq, out.latency_budget), (copy.seq, copy.latency_budget));
                    in_flight.push((next, to, id, out));
                }
            }
            for ((node, id), count) in &delivered {
                prop_assert_eq!(*count, 1, "node {} delivered {:?} {} times", node, id, count);
            }
            if budget.is_none() {
                let hops = hops_from_origin(n, &links);
                for seq in 0..floods {
                    let id = FloodId { job: JobId(1), seq };
                    for node in 1..n as u32 {
                        let within = hops[node as usize].is_some_and(|h| h <= radius);
                        prop_assert_eq!(
                            delivered.contains_key(&(node, id)),
                            within,
                            "node {} at {:?} hops, radius {}", node, hops[node as usize], radius
                        );
                    }
                }
            }
        }
    }
}

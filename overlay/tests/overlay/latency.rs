//! With emulated latency, neighbours are the near nodes, floods stay
//! within their latency budget, and a neighbour that turns far is replaced.

use super::*;

/// 18 nodes in three regions of six. Each node is its own site, so that
/// every pair has its own RTT (no ties: stable neighbour sets): 4 to 32 ms
/// within a region, 60 ms and more between regions.
fn regional_topology() -> (Topology, impl Fn(usize) -> usize) {
    let region = |i: usize| i / 6;
    let mut topology = Topology {
        default_rtt_ms: 200,
        ..Topology::default()
    };
    for i in 0..18 {
        topology.sites.push(Site {
            name: format!("n{i}"),
            rtt_within_ms: 1,
        });
    }
    let mut intra = [0u64; 3];
    let mut cross = 0u64;
    for i in 0..18 {
        for j in i + 1..18 {
            let rtt_ms = if region(i) == region(j) {
                let k = &mut intra[region(i)];
                *k += 1;
                2 + 2 * *k
            } else {
                cross += 1;
                let base = match (region(i), region(j)) {
                    (0, 1) => 60,
                    (1, 2) => 70,
                    _ => 90,
                };
                base + cross % 20
            };
            topology.links.push(SiteLink {
                a: format!("n{i}"),
                b: format!("n{j}"),
                rtt_ms,
            });
        }
    }
    (topology, region)
}

/// Sites `names`, `within_ms` apart inside each, `default_rtt_ms` apart
/// unless `links` (site, site, ms) says otherwise.
fn sites(
    names: &[&str],
    within_ms: u64,
    default_rtt_ms: u64,
    links: &[(&str, &str, u64)],
) -> Topology {
    Topology {
        default_rtt_ms,
        sites: names
            .iter()
            .map(|name| Site {
                name: (*name).into(),
                rtt_within_ms: within_ms,
            })
            .collect(),
        links: links
            .iter()
            .map(|(a, b, rtt_ms)| SiteLink {
                a: (*a).into(),
                b: (*b).into(),
                rtt_ms: *rtt_ms,
            })
            .collect(),
        ..Topology::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_emulated_latency_neighbours_are_local_and_floods_are_bounded() {
    let net = network("regions");
    let (topology, region) = regional_topology();
    let shared = SharedTopology::new(topology.clone());
    let nodes = start_grid(18, |i| OverlayConfig {
        latency: Some(LatencyEmulation {
            topology: shared.clone(),
            site: format!("n{i}"),
        }),
        ..config(&net, 2, 1)
    })
    .await;
    let refs: Vec<&Node> = nodes.iter().collect();
    let index: HashMap<PeerId, usize> =
        nodes.iter().enumerate().map(|(i, n)| (n.peer, i)).collect();

    // Near neighbours are in the node's region; far links cross regions
    // and keep the overlay connected.
    eventually(
        "local near neighbours and a connected overlay",
        Duration::from_secs(60),
        || async {
            let graph = full_and_connected(&refs, 3).await?;
            for (peer, neighbours) in &graph {
                for (n, kind) in neighbours {
                    if *kind == LinkKind::Near && region(index[n]) != region(index[peer]) {
                        let me = &nodes[index[peer]];
                        let known: Vec<String> = me
                            .handle
                            .known_peers()
                            .await
                            .unwrap()
                            .iter()
                            .map(|k| format!("{}:{:?}:{:?}", index[&k.peer], k.rtt, k.kind))
                            .collect();
                        return Err(format!(
                            "node {} has a near neighbour in another region; it knows {known:?}",
                            index[peer]
                        ));
                    }
                }
            }
            let cross = graph
                .iter()
                .flat_map(|(p, ns)| ns.iter().map(move |(n, _)| (p, n)))
                .filter(|(p, n)| region(index[p]) != region(index[n]))
                .count();
            if cross == 0 {
                return Err("no link between regions".into());
            }
            Ok(())
        },
    )
    .await;

    // The measured RTTs reflect the topology.
    let neighbours = nodes[0].handle.neighbours().await.unwrap();
    for n in &neighbours {
        let emulated = topology.rtt("n0", &format!("n{}", index[&n.peer])).unwrap();
        assert!(
            n.rtt >= emulated && n.rtt < emulated + Duration::from_millis(30),
            "measured {:?} for an emulated {emulated:?}",
            n.rtt
        );
    }

    // A flood of radius r reaches exactly the nodes within r hops, once.
    // Links work both ways, so a radius of 2 may already cover the grid
    // from a well-connected node: start from the node with the fewest links
    // and take the largest radius that leaves some nodes out. The links must
    // not change during the flood; retry if they did.
    let all = |_: &PeerId| true;
    let mut exact = false;
    for seq in 0..5 {
        let before = links(&refs).await;
        let origin = *before
            .iter()
            .min_by_key(|(p, ls)| (ls.len(), **p))
            .map(|(p, _)| p)
            .unwrap();
        let radius = (1..=4)
            .take_while(|r| within(&before, origin, *r, &all).len() < 17)
            .last()
            .unwrap_or(1);
        let expected = within(&before, origin, radius, &all);
        let id = FloodId { job: JobId(1), seq };
        let source = &nodes[index[&origin]];
        source
            .handle
            .flood(id, header(seq, radius as u8, None), b"advert".to_vec())
            .await
            .unwrap();
        eventually(
            "the radius-r flood is over",
            Duration::from_secs(20),
            || async {
                let reached = nodes
                    .iter()
                    .filter(|n| !n.deliveries(id).is_empty())
                    .count();
                if reached < expected.len() {
                    return Err(format!("{reached} of {} reached", expected.len()));
                }
                quiescent(&refs).await
            },
        )
        .await;
        if links(&refs).await != before {
            eprintln!("links changed during flood {seq}; again");
            continue;
        }
        let reached: HashSet<PeerId> = nodes
            .iter()
            .filter(|n| !n.deliveries(id).is_empty())
            .map(|n| n.peer)
            .collect();
        assert_eq!(
            reached, expected,
            "radius-{radius} flood reached other nodes than those within {radius} hops"
        );
        for node in &nodes {
            assert!(node.deliveries(id).len() <= 1, "delivered twice");
        }
        eprintln!("radius {radius} reached exactly {} of 17", expected.len());
        exact = expected.len() < 17;
        break;
    }
    assert!(
        exact,
        "links never held still for a flood, or no radius left nodes out"
    );

    // A latency-bounded flood (45 ms from a node of region 0) reaches
    // nodes of region 0 only (regions are 60 ms or more apart), at least
    // the origin's near neighbours, each with a distance within budget.
    let budget = Duration::from_millis(45);
    let id = FloodId {
        job: JobId(2),
        seq: 0,
    };
    nodes[0]
        .handle
        .flood(id, header(0, 10, Some(budget)), b"advert".to_vec())
        .await
        .unwrap();
    let near: Vec<PeerId> = neighbours
        .iter()
        .filter(|n| n.kind == LinkKind::Near)
        .map(|n| n.peer)
        .collect();
    eventually(
        "the bounded flood is over",
        Duration::from_secs(20),
        || async {
            if near
                .iter()
                .any(|p| nodes[index[p]].deliveries(id).is_empty())
            {
                return Err("near neighbours not reached yet".into());
            }
            quiescent(&refs).await
        },
    )
    .await;
    for (i, node) in nodes.iter().enumerate() {
        for (_, distance) in node.deliveries(id) {
            assert_eq!(region(i), 0, "node {i} outside the budget got the flood");
            assert!(distance <= budget);
        }
    }

    // An unbounded flood with a large radius reaches everyone, once.
    let id = FloodId {
        job: JobId(3),
        seq: 0,
    };
    nodes[5]
        .handle
        .flood(id, header(0, 15, None), vec![7; 100])
        .await
        .unwrap();
    eventually(
        "the big flood reaches all",
        Duration::from_secs(20),
        || async {
            let missing = nodes
                .iter()
                .skip(1)
                .filter(|n| n.peer != nodes[5].peer && n.deliveries(id).is_empty())
                .count()
                + usize::from(nodes[0].deliveries(id).is_empty());
            if missing > 0 {
                return Err(format!("{missing} not reached"));
            }
            quiescent(&refs).await
        },
    )
    .await;
    for node in &nodes {
        assert!(node.deliveries(id).len() <= 1);
    }
}

/// A near neighbour whose RTT jumps (a route changed, a link got
/// congested) is replaced by a nearer peer: the RTTs of open connections
/// change under the node, and its neighbour selection follows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_near_neighbour_that_becomes_far_is_replaced() {
    let net = network("reselect");
    let topology = sites(&["a", "b", "c"], 1, 50, &[("a", "b", 4), ("a", "c", 20)]);
    let shared = SharedTopology::new(topology);
    // One near neighbour each; two samples smooth the RTT and pings are
    // frequent, so that a change shows within a second.
    let make = |site: &str| OverlayConfig {
        latency: Some(LatencyEmulation {
            topology: shared.clone(),
            site: site.into(),
        }),
        neighbours: NeighbourConfig {
            near: 1,
            far: 0,
            samples: 2,
            ..NeighbourConfig::default()
        },
        ping_interval: Duration::from_millis(200),
        refresh_interval: Duration::from_millis(200),
        ..OverlayConfig::local(&net)
    };
    let a = Node::start(make("a")).await;
    let join = |site: &str| OverlayConfig {
        bootstrap: vec![a.addr.clone()],
        ..make(site)
    };
    let b = Node::start(join("b")).await;
    let c = Node::start(join("c")).await;
    let near_neighbour = |node: &Node| {
        let handle = node.handle.clone();
        async move {
            let neighbours = handle.neighbours().await.unwrap();
            match neighbours.as_slice() {
                [n] if n.kind == LinkKind::Near => Some((n.peer, n.rtt)),
                _ => None,
            }
        }
    };
    eventually(
        "a takes b (4 ms) over c (20 ms)",
        Duration::from_secs(10),
        || async {
            let known = a.handle.known_peers().await.unwrap();
            let c_measured = known.iter().any(|k| k.peer == c.peer && k.rtt.is_some());
            match near_neighbour(&a).await {
                Some((peer, _)) if peer == b.peer && c_measured => Ok(()),
                other => Err(format!("neighbour {other:?}, c measured: {c_measured}")),
            }
        },
    )
    .await;
    let (_, rtt) = near_neighbour(&a).await.unwrap();
    assert!(
        rtt >= Duration::from_millis(4) && rtt < Duration::from_millis(20),
        "{rtt:?}"
    );

    // The link from a to b becomes slow: 100 ms, five times c's 20.
    shared
        .set_rtt("a", "b", Duration::from_millis(100))
        .unwrap();
    let took = eventually("a replaces b by c", Duration::from_secs(5), || async {
        match near_neighbour(&a).await {
            Some((peer, _)) if peer == c.peer => Ok(()),
            other => Err(format!("neighbour {other:?}")),
        }
    })
    .await;
    let known = a.handle.known_peers().await.unwrap();
    let b_rtt = known.iter().find(|k| k.peer == b.peer).and_then(|k| k.rtt);
    assert!(
        b_rtt.is_some_and(|rtt| rtt >= Duration::from_millis(100)),
        "b's RTT as a measures it: {b_rtt:?}"
    );
    eprintln!("b's RTT went from {rtt:?} to {b_rtt:?}; a switched to c after {took:?}");
}

/// A request carries its sender's RTT as the receiving node measured it
/// (a home ranks offers by it): two nodes 40 ms apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_carries_the_rtt_the_receiver_measured_to_its_sender() {
    let net = network("request-rtt");
    let shared = SharedTopology::new(sites(&["a", "b"], 1, 40, &[]));
    let nodes = start_grid(2, |i| OverlayConfig {
        latency: Some(LatencyEmulation {
            topology: shared.clone(),
            site: ["a", "b"][i].into(),
        }),
        ..config(&net, 1, 0)
    })
    .await;
    let (a, b) = (&nodes[0], &nodes[1]);
    // Once a has measured b, b's request arrives with that RTT.
    eventually("a measured b", Duration::from_secs(30), || async {
        let known = a.handle.known_peers().await.map_err(|e| e.to_string())?;
        match known.iter().find(|k| k.peer == b.peer).and_then(|k| k.rtt) {
            Some(_) => Ok(()),
            None => Err(format!("a knows {known:?}")),
        }
    })
    .await;
    let answer = b.handle.request(a.peer, b"ping".to_vec()).await.unwrap();
    assert_eq!(answer, b"gnip".to_vec());
    let requests = a.seen.lock().unwrap().requests.clone();
    let (from, rtt) = requests.last().copied().expect("a saw the request");
    assert_eq!(from, b.peer);
    let rtt = rtt.expect("the request carries b's RTT");
    assert!(
        rtt >= Duration::from_millis(35) && rtt <= Duration::from_millis(200),
        "about the emulated 40 ms: {rtt:?}"
    );
}

/// Network coordinates: six nodes in three emulated sites (2 ms within a
/// site; 20, 40 and 50 ms between them) exchange coordinates until each
/// node's coordinate predicts the RTTs it measures to its peers within a
/// median relative error of 0.2 (1 to 2 s on loopback; 0.1 after about
/// 5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinates_converge_to_the_measured_rtts() {
    let net = network("coordinates");
    let topology = sites(&["a", "b", "c"], 2, 50, &[("a", "b", 20), ("b", "c", 40)]);
    let shared = SharedTopology::new(topology);
    // Frequent pings: a coordinate moves once per sample.
    let nodes = start_grid(6, |i| OverlayConfig {
        latency: Some(LatencyEmulation {
            topology: shared.clone(),
            site: ["a", "b", "c"][i / 2].into(),
        }),
        ping_interval: Duration::from_millis(200),
        refresh_interval: Duration::from_millis(200),
        ..config(&net, 2, 1)
    })
    .await;
    let took = eventually(
        "coordinates predict the measured RTTs",
        Duration::from_secs(90),
        || async {
            let mut positions = HashMap::new();
            for node in &nodes {
                let position = node.handle.position().await.map_err(|e| e.to_string())?;
                positions.insert(node.peer, position);
            }
            let mut errors = Vec::new();
            for node in &nodes {
                let known = node.handle.known_peers().await.map_err(|e| e.to_string())?;
                let measured: Vec<(PeerId, Duration)> = known
                    .iter()
                    .filter(|k| k.connected && k.coord.is_some())
                    .filter_map(|k| k.rtt.map(|rtt| (k.peer, rtt)))
                    .collect();
                if measured.len() < 3 {
                    return Err(format!(
                        "{} has coordinates of {} peers",
                        node.peer,
                        measured.len()
                    ));
                }
                let ours = positions[&node.peer].coord;
                for (peer, rtt) in measured {
                    let real = rtt.as_secs_f64() * 1000.0;
                    let estimate = ours.distance_ms(&positions[&peer].coord);
                    errors.push((estimate - real).abs() / real);
                }
            }
            errors.sort_by(f64::total_cmp);
            let median = errors[errors.len() / 2];
            if median < 0.2 {
                eprintln!(
                    "median relative error {median:.3} over {} pairs",
                    errors.len()
                );
                Ok(())
            } else {
                Err(format!(
                    "median relative error {median:.3} over {} pairs",
                    errors.len()
                ))
            }
        },
    )
    .await;
    eprintln!("converged after {took:?}");
}

//! The overlay repairs itself when nodes die or go silent.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_third_of_the_nodes_is_repaired_within_seconds() {
    let net = network("repair");
    let mut nodes = start_grid(15, |_| config(&net, 3, 1)).await;
    let refs: Vec<&Node> = nodes.iter().collect();
    eventually("the overlay forms", Duration::from_secs(40), || async {
        full_and_connected(&refs, 4).await.map(|_| ())
    })
    .await;

    // Kill every third node, the bootstrap node included.
    let mut killed = HashSet::new();
    let mut survivors = Vec::new();
    for (i, node) in nodes.drain(..).enumerate() {
        if i % 3 == 0 {
            node.handle.shutdown().await;
            killed.insert(node.peer);
        } else {
            survivors.push(node);
        }
    }
    let refs: Vec<&Node> = survivors.iter().collect();
    let noticed = eventually(
        "no survivor keeps a dead neighbour",
        Duration::from_secs(10),
        || async {
            for (peer, neighbours) in graph(&refs).await {
                if neighbours.iter().any(|(n, _)| killed.contains(n)) {
                    return Err(format!("{peer} still has a dead neighbour"));
                }
            }
            Ok(())
        },
    )
    .await;
    let repaired = eventually(
        "survivors have full neighbour sets and stay connected",
        Duration::from_secs(30),
        || async { full_and_connected(&refs, 4).await.map(|_| ()) },
    )
    .await;
    eprintln!(
        "dead neighbours dropped after {noticed:?}, overlay repaired after a further {repaired:?}"
    );
    // And floods still cover the survivors.
    let id = FloodId {
        job: JobId(9),
        seq: 0,
    };
    survivors[0]
        .handle
        .flood(id, header(0, 15, None), vec![1])
        .await
        .unwrap();
    eventually(
        "a flood reaches every survivor",
        Duration::from_secs(10),
        || async {
            let missing = survivors[1..]
                .iter()
                .filter(|n| n.deliveries(id).is_empty())
                .count();
            if missing == 0 {
                Ok(())
            } else {
                Err(format!("{missing} missing"))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_goes_silent_is_dropped_after_a_ping_timeout() {
    let net = network("silent");
    // Every node its own site, 2 ms apart; no connection ever closes, the
    // cut-off node's traffic just stops, so only ping can tell.
    let mut topology = Topology {
        default_rtt_ms: 2,
        ..Topology::default()
    };
    for i in 0..8 {
        topology.sites.push(Site {
            name: format!("n{i}"),
            rtt_within_ms: 1,
        });
    }
    let shared = SharedTopology::new(topology);
    let nodes = start_grid(8, |i| OverlayConfig {
        latency: Some(LatencyEmulation {
            topology: shared.clone(),
            site: format!("n{i}"),
        }),
        ping_timeout: Duration::from_secs(2),
        ..config(&net, 2, 1)
    })
    .await;
    let refs: Vec<&Node> = nodes.iter().collect();
    eventually("the overlay forms", Duration::from_secs(30), || async {
        full_and_connected(&refs, 3).await.map(|_| ())
    })
    .await;
    // Silence the node that most others chose as a neighbour.
    let before = graph(&refs).await;
    let in_degree = |peer: PeerId| {
        before
            .values()
            .filter(|ns| ns.iter().any(|(n, _)| *n == peer))
            .count()
    };
    let (index, chosen_by) = (0..nodes.len())
        .map(|i| (i, in_degree(nodes[i].peer)))
        .max_by_key(|(_, d)| *d)
        .unwrap();
    assert!(chosen_by >= 1);
    let silent = nodes[index].peer;
    shared.isolate(&format!("n{index}"));
    let survivors: Vec<&Node> = nodes.iter().filter(|n| n.peer != silent).collect();
    let noticed = eventually(
        "nobody keeps the silent peer",
        Duration::from_secs(8),
        || async {
            for (peer, neighbours) in graph(&survivors).await {
                if neighbours.iter().any(|(n, _)| *n == silent) {
                    return Err(format!("{peer} still has it"));
                }
            }
            Ok(())
        },
    )
    .await;
    eventually(
        "the others repair the overlay",
        Duration::from_secs(30),
        || async { full_and_connected(&survivors, 3).await.map(|_| ()) },
    )
    .await;
    eprintln!("{chosen_by} nodes dropped the silent neighbour after {noticed:?}");
}

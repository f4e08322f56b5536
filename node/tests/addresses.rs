//! Addresses that are true (issue 18), on separate hosts: network
//! namespaces the test creates (`common::netns`; needs root).
//!
//! The operator's scenario that found the bug: four hosts on one bridge,
//! every node listening on 0.0.0.0 (so it has a loopback and a network
//! address, and identify tells peers both), joined through one bootstrap
//! address. A node's peer list once carried another host's loopback
//! address, which that host would dial as itself.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Net, grid_on, nqueens, stdout_of, wait_all_measured, wait_completed, wasm};
use zorilla_webui::model::AddressInfo;

/// The node's own addresses as its status page's JSON API shows them.
async fn addresses(node: &common::TestNode) -> Vec<AddressInfo> {
    node.overview().await.addresses
}

/// No node keeps (or was passed) a loopback or link-local address of
/// another host; every node reaches every other; a job runs on all four;
/// each node's status page shows its loopback address as this machine's
/// only, its host address as reachable, and the bootstrap node's host
/// address as confirmed by the three peers that connected to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_hosts_on_a_bridge_keep_only_addresses_that_reach_and_say_so() {
    let grid = grid_on(Net::Hosts, 4, 1);
    let start = Instant::now();
    let lists = wait_all_measured(&grid.nodes, Duration::from_secs(60)).await;
    let joined = start.elapsed();
    let ips: Vec<String> = grid
        .nodes
        .iter()
        .map(|n| n.host.as_ref().unwrap().ip.to_string())
        .collect();
    for (node, peers) in grid.nodes.iter().zip(&lists) {
        for p in peers {
            let other = grid
                .nodes
                .iter()
                .position(|n| n.peer == p.peer)
                .unwrap_or_else(|| panic!("{} knows a stranger {}", node.peer, p.peer));
            assert!(
                !p.addrs.is_empty(),
                "{} has no address for {}",
                node.peer,
                p.peer
            );
            for addr in &p.addrs {
                assert!(
                    addr.starts_with(&format!("/ip4/{}/tcp/", ips[other])),
                    "{} keeps {addr} for the node at {} (all: {:?})",
                    node.peer,
                    ips[other],
                    p.addrs
                );
            }
        }
    }

    // A job on all four hosts.
    let mut client = grid.nodes[0].client().await;
    let job = client
        .submit(nqueens(4, 12), wasm("nqueens"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, Duration::from_secs(60)).await;
    let used: BTreeSet<&String> = status.ranks.values().map(|r| &r.node).collect();
    assert_eq!(used.len(), 4, "one worker per host: {status:?}");
    let out = stdout_of(&client.logs(job).await.unwrap());
    assert!(out.contains("solutions=14200"), "{out:?}");

    // What each node believes of its own addresses, and why.
    let deadline = Duration::from_secs(20);
    let start = Instant::now();
    for (i, node) in grid.nodes.iter().enumerate() {
        let port = node.listen.rsplit_once("/tcp/").unwrap().1;
        let lan = format!("/ip4/{}/tcp/{port}", ips[i]);
        let lo = format!("/ip4/127.0.0.1/tcp/{port}");
        loop {
            let shown = addresses(node).await;
            let find = |addr: &str| shown.iter().find(|a| a.address == addr).cloned();
            let (Some(lan_info), Some(lo_info)) = (find(&lan), find(&lo)) else {
                assert!(
                    start.elapsed() < deadline,
                    "node {i} does not show {lan} and {lo}: {shown:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            assert!(
                shown
                    .iter()
                    .all(|a| !a.address.starts_with("/ip4/0.0.0.0/")),
                "0.0.0.0 is shown, not expanded to the interfaces: {shown:?}"
            );
            assert!(!lo_info.reachable, "{lo_info:?}");
            assert!(lo_info.why.contains("loopback"), "{lo_info:?}");
            assert!(lan_info.reachable, "{lan_info:?}");
            // The bootstrap node: the three others connected to it there.
            if i == 0 && !lan_info.why.contains("confirmed: 3 peers") {
                assert!(
                    start.elapsed() < deadline,
                    "the bootstrap node does not show its address confirmed by the 3 peers \
                     that connected to it: {lan_info:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            eprintln!("node {i}: {shown:?}");
            break;
        }
    }
    // The node page has the section.
    let (code, page) = grid.nodes[0].http_get("/").await;
    assert_eq!(code, 200);
    assert!(
        page.contains("id=\"addresses\"") && page.contains("confirmed: 3 peers"),
        "{page}"
    );
    eprintln!("4 hosts knew and measured each other after {joined:?}");
}

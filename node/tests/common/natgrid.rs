//! Two nodes behind NAT routers and a public node, running a job whose
//! ranks exchange messages: the scenario of `nat.rs` and of the real
//! networks benchmark (`benches/realnet.rs`).

use std::time::{Duration, Instant};

use zorilla_node::protocol::JobRequest;
use zorilla_webui::model::AddressInfo;

use super::netns::{Hosts, Nat};
use super::{Grid, TestNode, stdout_of, wait_completed, wasm};

/// The node's own addresses as its status page's JSON API shows them.
async fn addresses(node: &TestNode) -> Vec<AddressInfo> {
    node.overview().await.addresses
}

/// Waits until the status page of `node` shows an address that `ok`
/// accepts; returns it.
async fn wait_address(
    node: &TestNode,
    deadline: Duration,
    what: &str,
    ok: impl Fn(&AddressInfo) -> bool,
) -> AddressInfo {
    let start = Instant::now();
    loop {
        let shown = addresses(node).await;
        if let Some(found) = shown.iter().find(|a| ok(a)) {
            return found.clone();
        }
        assert!(
            start.elapsed() < deadline,
            "{}: no {what} after {deadline:?}; it shows {shown:?}\n{}",
            node.peer,
            node.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What one run of [`two_nodes_behind_nats_run_a_job`] found.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Time from the relayed connection to the direct one, if the hole
    /// punch succeeded (from the NATed nodes' logs).
    pub(crate) time_to_direct: Option<Duration>,
    /// Whether a node said its rank traffic went through the relay.
    pub(crate) over_relay: bool,
    /// From start to both NATed nodes advertising a relayed address.
    pub(crate) relayed_after: Duration,
    /// The rank messages' round trips: (size, ns).
    pub(crate) roundtrips: Vec<(u64, u64)>,
    /// Relayed connections the NATed nodes made to each other (from their
    /// logs; one per circuit, so more than one when a circuit ended).
    pub(crate) circuits: usize,
}

/// The public node P (no cores), A and B behind NATs of kind `nat` each;
/// a 2-worker message-passing job runs with a rank on A and one on B.
pub(crate) async fn two_nodes_behind_nats_run_a_job(nat: Nat) -> Outcome {
    behind_nats_with_relay_args(nat, &[]).await
}

/// [`two_nodes_behind_nats_run_a_job`], with `relay_args` given to the
/// public node (its relay's limits).
pub(crate) async fn behind_nats_with_relay_args(nat: Nat, relay_args: &[String]) -> Outcome {
    let (grid, relayed_after) = nat_grid(nat, relay_args, &[]).await;
    let nodes = &grid.nodes;

    // The job: pingpong between rank 0 and rank 1, one behind each NAT.
    let request = JobRequest {
        min_workers: 2,
        max_workers: 2,
        cores: 1,
        memory_mib: 64,
        lifetime_secs: 120,
        args: vec![
            "pingpong".into(),
            "8".into(),
            "200".into(),
            (1u64 << 20).to_string(),
            "8".into(),
        ],
        ..JobRequest::default()
    };
    let mut client = nodes[0].client().await;
    let job = client
        .submit(request, wasm("transfer"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, Duration::from_secs(120)).await;
    let used: std::collections::BTreeSet<&String> =
        status.ranks.values().map(|r| &r.node).collect();
    assert!(
        used.contains(&nodes[1].peer) && used.contains(&nodes[2].peer),
        "one rank behind each NAT: {status:?}"
    );
    let out = stdout_of(&client.logs(job).await.unwrap());
    let roundtrips: Vec<(u64, u64)> = out
        .lines()
        .filter_map(|l| {
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(k))
                    .and_then(|v| v.parse().ok())
            };
            Some((field("size=")?, field("roundtrip_ns=")?))
        })
        .collect();
    assert_eq!(roundtrips.len(), 2, "{out:?}");

    // What the NATed nodes' logs say of the connection between them.
    let mut time_to_direct = None;
    let mut over_relay = false;
    let mut circuits = 0;
    for (node, other) in [(&nodes[1], &nodes[2]), (&nodes[2], &nodes[1])] {
        let log = std::fs::read_to_string(node.dir.join("node.log")).unwrap_or_default();
        for line in log.lines() {
            // Counted at the dialling end only (the other logs the same
            // circuit as an inbound one).
            if line.contains("connected through a relay") {
                circuits += 1;
            }
            if line.contains("hole punch succeeded")
                && line.contains(&other.peer)
                && let Some(ms) = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("after_ms="))
                    .and_then(|v| v.parse::<u64>().ok())
            {
                let d = Duration::from_millis(ms);
                time_to_direct = Some(time_to_direct.map_or(d, |t: Duration| t.min(d)));
            }
            over_relay |= line.contains("rank traffic goes through a relay");
        }
    }
    Outcome {
        time_to_direct,
        over_relay,
        relayed_after,
        roundtrips,
        circuits,
    }
}

/// The public node P (no cores, `relay_args`) and A and B behind NATs of
/// kind `nat` each (a core each, `member_args`), once P's address is
/// confirmed and A and B advertise relayed addresses; and how long that
/// took.
pub(crate) async fn nat_grid(
    nat: Nat,
    relay_args: &[String],
    member_args: &[String],
) -> (Grid, Duration) {
    let hosts = Hosts::behind_nats(1, &[nat, nat]);
    let dir = tempfile::tempdir().unwrap();
    let network = format!("test-nat-{}", std::process::id());
    // The overlay's NAT decisions are logged at info; the rank links'
    // streams at debug, so that a job that hangs says where (one did, with
    // its ranks connected only 21 s after they started and the job never
    // completing after that).
    // The relayed connections at debug, so that the circuits can be counted.
    let env = vec![(
        "RUST_LOG".to_string(),
        "info,libp2p=error,zorilla_node::link=debug,zorilla_overlay::streams=debug,\
         zorilla_overlay::overlay::driver::nat=debug"
            .to_string(),
    )];
    let start = Instant::now();
    let mut nodes: Vec<TestNode> = Vec::new();
    for (i, host) in hosts.hosts.iter().enumerate() {
        let node_dir = dir.path().join(format!("n{i}"));
        let bootstrap = nodes.first().map(|n| n.listen.clone());
        let cores = if i == 0 { 0 } else { 1 };
        let extra = if i == 0 { relay_args } else { member_args };
        let args = TestNode::args(
            &node_dir,
            &network,
            bootstrap.as_deref(),
            cores,
            "0.0.0.0",
            extra,
        );
        nodes.push(TestNode::spawn_on(
            &node_dir,
            args,
            env.clone(),
            Some(host.clone()),
        ));
    }
    // Their logs are shown if the test fails (Grid's drop).
    let grid = Grid {
        nodes,
        hosts: Some(hosts),
        _dir: dir,
        network,
    };
    let (nodes, hosts) = (&grid.nodes, grid.hosts.as_ref().unwrap());
    let deadline = Duration::from_secs(90);
    // P: reachable (the NATed nodes connected to it; AutoNAT asks only
    // peers it dialed, and it dials none of them).
    let public = format!("/ip4/{}/tcp/", hosts.hosts[0].ip);
    let p = wait_address(&nodes[0], deadline, "confirmed address", |a| {
        a.address.starts_with(&public) && a.reachable && a.why.contains("confirmed")
    })
    .await;
    eprintln!("P: {p:?}");
    // A and B: their NAT's address is not advertised; a relayed one is.
    for node in &nodes[1..] {
        let relayed = wait_address(node, deadline, "relayed address", |a| {
            a.address.contains("/p2p-circuit") && a.reachable
        })
        .await;
        assert!(relayed.address.starts_with(&public), "{relayed:?}");
        let shown = addresses(node).await;
        let nat_addr = format!("/ip4/10.77.200.{}/", 100 + node.host.as_ref().unwrap().site);
        for a in shown.iter().filter(|a| a.address.starts_with(&nat_addr)) {
            assert!(!a.reachable, "{}: {a:?}", node.peer);
        }
        eprintln!("{}: {shown:?}", node.peer);
    }
    (grid, start.elapsed())
}

/// Waits until the log of `node` has a line containing `text`.
pub(crate) async fn wait_log(node: &TestNode, text: &str, deadline: Duration) {
    let start = Instant::now();
    loop {
        let log = std::fs::read_to_string(node.dir.join("node.log")).unwrap_or_default();
        if log.lines().any(|l| l.contains(text)) {
            return;
        }
        assert!(
            start.elapsed() < deadline,
            "{}: no {text:?} in its log after {deadline:?}\n{}",
            node.peer,
            node.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

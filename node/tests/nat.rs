//! NAT traversal (issue 18) on hosts behind NAT routers: network namespaces
//! and nftables rules the test makes itself (`common::netns`, needs root
//! and nftables), addresses only inside them.
//!
//! The grid of each test: a public node on the "internet" (a home with no
//! cores: it runs no rank) and two nodes behind NAT routers of their own,
//! joined through the public one. Each NATed node learns that it is not
//! reachable (a dial-back fails or never comes), reserves a slot on the
//! public node (circuit relay v2), and advertises the relayed address; a
//! 2-worker job then runs one rank behind each NAT, its ranks exchanging
//! messages: over a direct connection where DCUtR punches a hole, else over
//! the relay (whose limits a Zorilla node raises).

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::natgrid::{
    behind_nats_with_relay_args, nat_grid, two_nodes_behind_nats_run_a_job, wait_log,
};
use common::netns::{Hosts, Nat, in_netns};
use zorilla_core::advert::WorkKind;
use zorilla_node::protocol::{JobPhase, JobRequest};

/// The port of `sender` on the public hosts as each of them sees it, for
/// one UDP socket of a private host sending to each in turn.
fn ports_seen(hosts: &Hosts, sender: usize, public: &[usize]) -> Vec<u16> {
    let receivers: Vec<(String, SocketAddr, UdpSocket)> = public
        .iter()
        .map(|&p| {
            let host = hosts.hosts[p].clone();
            let addr = SocketAddr::from((host.ip, 0));
            let socket = in_netns(&host.netns, move || UdpSocket::bind(addr).unwrap());
            let addr = socket.local_addr().unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            (host.netns, addr, socket)
        })
        .collect();
    let targets: Vec<SocketAddr> = receivers.iter().map(|r| r.1).collect();
    let private = hosts.hosts[sender].clone();
    let local = SocketAddr::from((private.ip, 40_000));
    in_netns(&private.netns, move || {
        let socket = UdpSocket::bind(local).unwrap();
        for target in targets {
            socket.send_to(b"where am I", target).unwrap();
        }
    });
    receivers
        .iter()
        .map(|(netns, _, socket)| {
            let mut buf = [0u8; 64];
            let (_, from) = socket
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("nothing came through the NAT to {netns}: {e}"));
            assert_eq!(
                from.ip(),
                std::net::Ipv4Addr::new(10, 77, 200, 100 + private.site as u8),
                "the packet comes from the NAT router's public address"
            );
            from.port()
        })
        .collect()
}

/// What nftables here gives: an endpoint-independent NAT keeps the host's
/// port for every destination (plain masquerade keeps a free source port);
/// a symmetric one (`fully-random`) gives each destination another.
#[test]
fn nat_routers_map_ports_as_their_kind() {
    let hosts = Hosts::behind_nats(2, &[Nat::EndpointIndependent, Nat::Symmetric]);
    let eim = ports_seen(&hosts, 2, &[0, 1]);
    assert_eq!(eim, vec![40_000, 40_000], "endpoint-independent: {eim:?}");
    let sym = ports_seen(&hosts, 3, &[0, 1]);
    assert!(
        sym[0] != sym[1] && !sym.contains(&40_000),
        "symmetric: a random port per destination, not {sym:?}"
    );
    eprintln!("ports seen: endpoint-independent {eim:?}, symmetric {sym:?}");
}

/// Behind endpoint-independent NATs the hole punch succeeds, and the
/// ranks' messages go over the direct connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_endpoint_independent_nats_a_hole_punch_makes_the_job_direct() {
    let outcome = two_nodes_behind_nats_run_a_job(Nat::EndpointIndependent).await;
    eprintln!("endpoint-independent NATs: {outcome:?}");
    assert!(
        outcome.time_to_direct.is_some(),
        "no hole punch succeeded: {outcome:?}"
    );
    assert!(!outcome.over_relay, "{outcome:?}");
}

/// Behind symmetric NATs no hole can be punched (each destination sees
/// another port): the job still completes, its messages through the
/// public node's relay, whose limits the node raises.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_symmetric_nats_the_job_runs_through_the_relay() {
    let outcome = two_nodes_behind_nats_run_a_job(Nat::Symmetric).await;
    eprintln!("symmetric NATs: {outcome:?}");
    // What the name says, whatever happens: no direct connection (0 of 10
    // hole punches in BENCHMARKS.md, "NAT traversal"; one would mean the
    // router is not symmetric) and the ranks' traffic through the relay.
    assert!(
        outcome.time_to_direct.is_none(),
        "a hole punch through symmetric NATs succeeded: {outcome:?}"
    );
    assert!(outcome.over_relay, "{outcome:?}");
}

/// A relay's circuits have limits (libp2p's defaults are 2 minutes and
/// 128 KiB; Zorilla's nodes raise theirs). Here the public node relays at
/// most 4 MiB per circuit, and the job's ranks exchange 16 MiB behind
/// symmetric NATs: each circuit ends in the middle of the job, the ranks'
/// streams open again on a new one and send again what was not
/// acknowledged, and the job completes with every message whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_symmetric_nats_a_job_outlasts_the_relays_circuit_limit() {
    let relay_args = ["--relay-circuit-mib".to_string(), "4".to_string()];
    let outcome = behind_nats_with_relay_args(Nat::Symmetric, &relay_args).await;
    eprintln!("symmetric NATs, 4 MiB circuits: {outcome:?}");
    assert!(outcome.time_to_direct.is_none(), "{outcome:?}");
    assert!(outcome.over_relay, "{outcome:?}");
    assert!(
        outcome.circuits >= 3,
        "16 MiB through 4 MiB circuits needs several: {outcome:?}"
    );
}

/// A native job's ranks connect to each other directly, over their MPI
/// library's own transport, which no relay or hole punch serves (issue
/// 32): each NATed node finds out that it is behind its NAT and says so in
/// its offers, and the home does not place the job's two ranks behind two
/// different NATs. It waits, and its status says why; a native job of one
/// rank runs there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_jobs_ranks_are_not_placed_behind_different_nats_and_the_home_says_why() {
    let user = zorilla_node::owner::UserKey::load_or_create(&common::test_user_key()).unwrap();
    let member_args = vec!["--native-user".to_string(), user.id().to_string()];
    let (grid, _) = nat_grid(Nat::EndpointIndependent, &[], &member_args).await;
    for node in &grid.nodes[1..] {
        wait_log(
            node,
            "reachability: behind the NAT at 10.77.200.",
            Duration::from_secs(30),
        )
        .await;
    }
    let mut client = grid.nodes[0].client().await;
    let exe = std::fs::read("/bin/echo").unwrap();
    let arch = zorilla_node::native::executable_arch(&exe).unwrap();
    let native = |workers| JobRequest {
        kind: WorkKind::Native(arch),
        min_workers: workers,
        max_workers: workers,
        lifetime_secs: 60,
        args: vec!["alone".into()],
        ..JobRequest::default()
    };
    let job = client.submit(native(2), exe.clone(), vec![]).await.unwrap();
    let waiting = common::wait_for(
        &mut client,
        job,
        Duration::from_secs(60),
        "the home to count the workers behind the other NAT",
        |s| s.pending.as_ref().is_some_and(|p| p.apart >= 1),
    )
    .await;
    assert_eq!(waiting.phase, JobPhase::Scheduling, "{waiting:?}");
    assert!(waiting.ranks.is_empty(), "{waiting:?}");
    let pending = waiting.pending.unwrap();
    assert!(pending.workers_offered >= 2, "{pending:?}");
    client.cancel(job).await.unwrap();

    let job = client.submit(native(1), exe, vec![]).await.unwrap();
    let done = common::wait_completed(&mut client, job, Duration::from_secs(60)).await;
    let out = common::stdout_of(&client.logs(job).await.unwrap());
    assert_eq!(out, "alone\n", "{done:?}");
}

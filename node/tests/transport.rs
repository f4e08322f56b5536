//! The message path between workers on real `zorilla-node` processes
//! (loopback, ports chosen by the OS), with the `transfer` guest
//! (examples/src/transfer.c): messages of growing sizes up to 64 MiB
//! checked byte by byte and for order, between two nodes and between two
//! workers of one node; the TCP connections between the nodes cut again
//! and again while big messages flow; a slow receiver; a receiver that
//! never reads.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{TestNode, grid, stdout_of, wait_completed, wait_for, wasm};
use zorilla_node::client::Client;
use zorilla_node::protocol::{JobPhase, JobRequest, JobStatus};

const MAX: u32 = 64 * 1024 * 1024;

fn transfer(args: &[&str], memory_mib: u64) -> JobRequest {
    JobRequest {
        min_workers: 2,
        max_workers: 2,
        cores: 1,
        memory_mib,
        lifetime_secs: 60,
        args: args.iter().map(|a| a.to_string()).collect(),
        ..JobRequest::default()
    }
}

fn nodes_of(status: &JobStatus) -> BTreeSet<String> {
    status.ranks.values().map(|r| r.node.clone()).collect()
}

/// The TCP port in a multiaddr `/ip4/127.0.0.1/tcp/PORT/...`.
fn port(listen: &str) -> u16 {
    let parts: Vec<&str> = listen.split('/').collect();
    let at = parts
        .iter()
        .position(|p| *p == "tcp")
        .expect("a tcp address");
    parts[at + 1].parse().expect("a port")
}

/// The local ports of the established TCP connections of processes
/// `pids` (`ss -p`): the overlay's and the rank data plane's direct
/// connections, whose ports the OS chose.
fn ports_of(pids: &[u32]) -> Vec<u16> {
    let out = Command::new("ss")
        .args(["-t", "-n", "-p", "-H", "state", "established"])
        .output()
        .expect("ss (iproute2) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| pids.iter().any(|p| l.contains(&format!("pid={p},"))))
        .filter_map(|l| {
            let local = l.split_whitespace().nth(2)?;
            local.rsplit_once(':')?.1.parse().ok()
        })
        .collect()
}

/// Aborts every TCP connection to or from `ports` (as root: `ss -K`);
/// returns how many it aborted.
fn cut_connections(ports: &[u16]) -> usize {
    let filter: Vec<String> = ports
        .iter()
        .flat_map(|p| [format!("sport = :{p}"), format!("dport = :{p}")])
        .collect();
    let filter = format!("( {} )", filter.join(" or "));
    let out = Command::new("ss")
        .args(["-K", "-t", "-n", "state", "established"])
        .arg(&filter)
        .output()
        .expect("ss (iproute2) runs");
    assert!(
        out.status.success(),
        "ss -K failed (this test needs root): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A header line, then one line per socket aborted.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .count()
}

async fn submit(client: &mut Client, request: JobRequest) -> u64 {
    client
        .submit(request, wasm("transfer"), vec![])
        .await
        .unwrap()
}

/// Two one-core nodes: the two workers run on different nodes; messages
/// from 0 bytes to 64 MiB go there and back intact, 200 pipelined ones in
/// order, and a message of 64 MiB + 1 gets ETOOBIG at once. The nodes open
/// two lanes (whatever this machine's default), so that the messages of
/// a MiB or more are striped over them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_up_to_64_mib_between_nodes_arrive_intact_and_in_order() {
    let grid = common::sites_grid(common::Net::Loopback, &[2], 1, |_| {
        vec!["--rank-lanes".to_string(), "2".to_string()]
    });
    let mut client = grid.nodes[0].client().await;
    let max = MAX.to_string();
    let job = submit(&mut client, transfer(&["check", &max], 200)).await;
    let status = wait_completed(&mut client, job, Duration::from_secs(180)).await;
    assert_eq!(nodes_of(&status).len(), 2, "{status:?}");
    let out = stdout_of(&client.logs(job).await.unwrap());
    assert!(
        out.contains(&format!("transfer check ok sizes=21 max={MAX}")),
        "{out:?}"
    );
}

/// One two-core node: the same between two workers of one node (the
/// direct path, not the network).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_up_to_64_mib_between_workers_of_one_node() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::start(dir.path(), &format!("t-{}", std::process::id()), None, 2);
    let mut client = node.client().await;
    let max = MAX.to_string();
    let job = submit(&mut client, transfer(&["check", &max], 200)).await;
    let status = wait_completed(&mut client, job, Duration::from_secs(180)).await;
    assert_eq!(nodes_of(&status).len(), 1, "{status:?}");
    let out = stdout_of(&client.logs(job).await.unwrap());
    assert!(out.contains("transfer check ok"), "{out:?}");
}

/// The TCP connections between the two nodes (the overlay's and the rank
/// data plane's direct ones) are aborted again and again while messages of
/// up to 64 MiB flow: every message still arrives exactly once, intact and
/// in order (the guest checks), because the stream is opened again and
/// what was not acknowledged is sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_cut_mid_message_lose_and_duplicate_nothing() {
    let grid = grid(2, 1);
    let listen: Vec<u16> = grid.nodes.iter().map(|n| port(&n.listen)).collect();
    let pids: Vec<u32> = grid.nodes.iter().map(|n| n.child.id()).collect();
    let mut client = grid.nodes[0].client().await;
    let max = MAX.to_string();
    let job = submit(&mut client, transfer(&["check", &max], 200)).await;
    // Wait until both workers run, then cut while they exchange.
    wait_for(&mut client, job, Duration::from_secs(60), "workers", |s| {
        s.running_workers() == 2 || s.phase.is_terminal()
    })
    .await;
    let start = Instant::now();
    let mut cuts = 0;
    let mut aborted = 0;
    while start.elapsed() < Duration::from_secs(120) && cuts < 6 {
        let status = client.status(job).await.unwrap();
        if status.phase.is_terminal() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
        let mut ports = listen.clone();
        ports.extend(ports_of(&pids));
        let n = cut_connections(&ports);
        aborted += n;
        cuts += usize::from(n > 0);
        // The client connection may have been to another port: fine.
        client = grid.nodes[0].client().await;
    }
    assert!(cuts >= 2, "connections were cut only {cuts} times");
    let status = wait_completed(&mut client, job, Duration::from_secs(180)).await;
    assert_eq!(nodes_of(&status).len(), 2, "{status:?}");
    let out = stdout_of(&client.logs(job).await.unwrap());
    assert!(
        out.contains("transfer check ok"),
        "{out:?} ({aborted} sockets aborted)"
    );
}

/// A receiver that reads one message every 20 ms: the sender stalls on
/// credit, no message is lost, all arrive in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_receiver_stalls_its_sender_and_loses_nothing() {
    let grid = grid(2, 1);
    let mut client = grid.nodes[0].client().await;
    // 64 x 256 KiB = 16 MiB, four times the window.
    let job = submit(&mut client, transfer(&["slow", "64", "262144"], 64)).await;
    let status = wait_completed(&mut client, job, Duration::from_secs(120)).await;
    assert_eq!(nodes_of(&status).len(), 2, "{status:?}");
    let out = stdout_of(&client.logs(job).await.unwrap());
    assert!(out.contains("transfer slow ok count=64"), "{out:?}");
}

/// A receiver that never reads: the sender's sends time out once the
/// credit its rank lent is used, so what the sender's node buffers is
/// bounded;
/// then it blocks in a send, and the job can still be cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_reads_blocks_its_sender_within_the_window() {
    let grid = grid(2, 1);
    let mut client = grid.nodes[0].client().await;
    let job = submit(&mut client, transfer(&["stall", "1048576"], 64)).await;
    let start = Instant::now();
    let sent: usize = loop {
        let out = stdout_of(&client.logs(job).await.unwrap());
        if let Some(rest) = out.split("transfer stalled after ").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
        let status = client.status(job).await.unwrap();
        assert!(!status.phase.is_terminal(), "{status:?} {out:?}");
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no stall reported"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The rank lends a window of two messages for a 1 MiB one (within its
    // budget): 2 messages of 1 MiB, and never more than 4.
    assert!((1..=4).contains(&sent), "{sent} messages were accepted");
    let status = client.status(job).await.unwrap();
    assert_eq!(nodes_of(&status).len(), 2, "{status:?}");
    client.cancel(job).await.unwrap();
    let status = wait_for(&mut client, job, Duration::from_secs(30), "cancel", |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(status.phase, JobPhase::Cancelled, "{status:?}");
}

//! Issue 5's benchmark, with real processes: 32 `zorilla-node`s on
//! 127.0.0.1 (2 cores each, temp state directories, OS-chosen ports), then
//! a 64-worker job (`spin`, one core per worker) submitted to one of them.
//!
//! Prints the time from submit to all 64 workers running (every node
//! reporting its workers in `NodeInfo.running`), the overlay messages the
//! nodes sent for it (sum of `NodeInfo.messages_sent`: flood frames and rpc
//! requests), and the idle RSS and CPU of the nodes before the job.
//!
//! Run: `cargo bench -p zorilla-node --bench start64` (uses the bench
//! profile, i.e. an optimised `zorilla-node`). `START64_ROUNDS` sets the
//! number of jobs, one after another (default 5): the first finds every
//! node's module cache cold (each node compiles the module), the others
//! warm.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::TestNode;
use zorilla_node::client::Client;
use zorilla_node::protocol::{JobPhase, JobRequest};

const CORES: u32 = 2;

/// `ZORILLA_BENCH_SHORT=1` (CI): 8 nodes, 16 workers, a short idle window.
fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
}

/// (RSS in kB, CPU ticks) of a process, from /proc.
fn proc_stats(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which is in parentheses); utime and
    // stime are fields 14 and 15, i.e. 12 and 13 after it.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    (rss, ticks)
}

async fn messages(clients: &mut [Client]) -> u64 {
    let mut sum = 0;
    for c in clients {
        sum += c.node_info().await.unwrap().messages_sent;
    }
    sum
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // `cargo bench` passes `--bench`; there is nothing to filter.
    let (node_count, workers, idle_window): (usize, u32, _) = if short() {
        (8, 16, Duration::from_secs(2))
    } else {
        (32, 64, Duration::from_secs(10))
    };
    let rounds: usize = std::env::var("START64_ROUNDS")
        .ok()
        .map(|v| v.parse().expect("START64_ROUNDS is a number"))
        .unwrap_or(5);
    // START64_GUEST=spin makes every worker burn its core (the starved
    // machine case); idle workers block in recv.
    let guest = std::env::var("START64_GUEST").unwrap_or_else(|_| "idle".into());
    let module = common::wasm(&guest);
    let dir = tempfile::tempdir().unwrap();
    let network = format!("bench-{}", std::process::id());
    let started = Instant::now();
    let first = TestNode::start(&dir.path().join("n0"), &network, None, CORES);
    let bootstrap = first.listen.clone();
    let mut nodes = vec![first];
    for i in 1..node_count {
        nodes.push(TestNode::start(
            &dir.path().join(format!("n{i}")),
            &network,
            Some(&bootstrap),
            CORES,
        ));
    }
    println!("{node_count} nodes ready in {:.2?}", started.elapsed());
    let mut clients = Vec::new();
    for n in &nodes {
        clients.push(Client::connect(n.client.as_str()).await.unwrap());
    }
    // Let the overlay settle: every node with at least 3 neighbours.
    let deadline = Instant::now() + Duration::from_secs(60);
    for c in clients.iter_mut() {
        while c.node_info().await.unwrap().neighbours < 3 {
            assert!(Instant::now() < deadline, "overlay did not settle in 60 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    println!(
        "overlay settled {:.2?} after the first start",
        started.elapsed()
    );

    // Idle figures: RSS now, CPU over the idle window (a measurement
    // interval, not a wait for an event).
    let before: Vec<(u64, u64)> = nodes.iter().map(|n| proc_stats(n.child.id())).collect();
    tokio::time::sleep(idle_window).await;
    let after: Vec<(u64, u64)> = nodes.iter().map(|n| proc_stats(n.child.id())).collect();
    let mut rss: Vec<u64> = after.iter().map(|a| a.0).collect();
    rss.sort_unstable();
    let ticks: Vec<u64> = before.iter().zip(&after).map(|(b, a)| a.1 - b.1).collect();
    println!(
        "idle RSS over {node_count} nodes: min {:.1} MB, median {:.1} MB, max {:.1} MB",
        rss[0] as f64 / 1024.0,
        rss[node_count / 2] as f64 / 1024.0,
        rss[node_count - 1] as f64 / 1024.0
    );
    println!(
        "idle CPU: {} ticks per node in {idle_window:?} on average (max {})",
        ticks.iter().sum::<u64>() as f64 / node_count as f64,
        ticks.iter().max().unwrap()
    );

    let request = JobRequest {
        min_workers: workers,
        max_workers: workers,
        cores: 1,
        memory_mib: 16,
        lifetime_secs: 30,
        ..JobRequest::default()
    };
    let mut times = Vec::new();
    let mut msgs = Vec::new();
    for round in 0..rounds {
        let m0 = messages(&mut clients).await;
        let t0 = Instant::now();
        let job = clients[0]
            .submit(request.clone(), module.clone(), vec![])
            .await
            .unwrap();
        // Poll every node until all workers run; the first round's curve
        // of workers running over time goes to the report.
        let deadline = t0 + Duration::from_secs(30);
        let mut last = usize::MAX;
        let mut last_placed = usize::MAX;
        loop {
            let mut running = 0;
            for c in clients.iter_mut() {
                let info = c.node_info().await.unwrap();
                running += info.running.get(&job).map_or(0, Vec::len);
            }
            if round == 0 {
                // Placed: granted by the home (scheduling done); running:
                // fetched, compiled and started on their nodes.
                let placed = clients[0].status(job).await.unwrap().ranks.len();
                let at = t0.elapsed().as_secs_f64() * 1e3;
                if placed != last_placed {
                    println!("CURVE start.placed {at:.1} {placed}");
                    last_placed = placed;
                }
                if running != last {
                    println!("CURVE start.running {at:.1} {running}");
                    last = running;
                }
            }
            if running == workers as usize {
                break;
            }
            if Instant::now() > deadline {
                let status = clients[0].status(job).await.unwrap();
                panic!(
                    "round {round}: {running} of {workers} workers running after 30 s: {status:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let elapsed = t0.elapsed();
        let m1 = messages(&mut clients).await;
        times.push(elapsed);
        msgs.push(m1 - m0);
        println!(
            "round {round}: all {workers} workers running {:.1?} after submit; {} messages",
            elapsed,
            m1 - m0
        );
        let status = clients[0].cancel(job).await.unwrap();
        assert_eq!(status.phase, JobPhase::Cancelled);
        // Wait until every worker has stopped before the next round; report
        // (not hide) nodes whose workers outlive the cancel.
        let cancelled = Instant::now();
        let deadline = cancelled + Duration::from_secs(10);
        let mut stragglers = 0;
        for (c, node) in clients.iter_mut().zip(&nodes) {
            while c.node_info().await.unwrap().running.contains_key(&job) {
                if Instant::now() > deadline {
                    stragglers += 1;
                    // What that node saw, for the record.
                    let log =
                        std::fs::read_to_string(node.dir.join("node.log")).unwrap_or_default();
                    let job_lines: Vec<&str> = log
                        .lines()
                        .filter(|l| l.contains(&zorilla_core::advert::JobId(job).to_string()))
                        .collect();
                    println!(
                        "straggler {}: its log lines for the job:\n{}",
                        node.peer,
                        job_lines[job_lines.len().saturating_sub(15)..].join("\n")
                    );
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        if stragglers > 0 {
            println!(
                "round {round}: workers still running on {stragglers} nodes 10 s after cancel"
            );
            return;
        }
        println!(
            "round {round}: every worker stopped {:.1?} after cancel",
            cancelled.elapsed()
        );
    }
    let cold = times[0];
    let mut warm = times[1..].to_vec();
    warm.sort();
    times.sort();
    msgs.sort_unstable();
    println!("RESULT start.nodes {node_count} nodes");
    println!("RESULT start.workers {workers} workers");
    println!(
        "RESULT start.cold {:.2} s (first job: every node compiles the module)",
        cold.as_secs_f64()
    );
    if let Some(median) = warm.get(warm.len() / 2) {
        println!(
            "RESULT start.warm_median {:.2} s (median of {} later jobs: module cached)",
            median.as_secs_f64(),
            warm.len()
        );
    }
    println!(
        "RESULT start.messages_per_job {} messages",
        msgs[rounds / 2]
    );
    println!(
        "RESULT start.idle_rss_median {:.1} MB",
        rss[node_count / 2] as f64 / 1024.0
    );
    println!(
        "submit to all {workers} running over {rounds} jobs: min {:.1?}, median {:.1?}, max {:.1?}; messages per job: median {}",
        times[0],
        times[rounds / 2],
        times[rounds - 1],
        msgs[rounds / 2]
    );
}

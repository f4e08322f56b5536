//! Issue 16's benchmark: how long a job is without a home when its home
//! dies. A grid of real `zorilla-node` processes on 127.0.0.1: the home
//! (no cores of its own) and three 2-core nodes run a 6-rank job whose
//! workers wait without using the CPU; the home is killed (-9), and the
//! time is taken until another node answers for the job as its home (it
//! adopted the job: its status names it). With the default failure
//! detection (a lease of 1.5 s, then 0.3 s of election). The workers keep
//! running through it: the work lost is none, where before every worker of
//! the job was stopped.
//!
//! Run: `cargo bench --workspace --bench failover`
//! (`ZORILLA_BENCH_SHORT=1`: 2 runs instead of 8).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{grid_with_idle_home, nqueens, wasm};

fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
}

/// One run: the time from the kill to a new home answering, and how many
/// of the job's workers still ran then.
async fn one_run() -> (Duration, usize) {
    let mut grid = grid_with_idle_home(3, 2);
    let nodes = &mut grid.nodes;
    let mut client = nodes[0].client().await;
    let mut request = nqueens(6, 0);
    request.args = vec!["0".into(), "60".into()];
    request.lifetime_secs = 120;
    let job = client
        .submit(request, wasm("stagger"), vec![])
        .await
        .unwrap();
    let mut workers = Vec::new();
    for node in &nodes[1..] {
        workers.push(node.client().await);
    }
    let running = async |workers: &mut Vec<zorilla_node::client::Client>| {
        let mut n = 0;
        for c in workers.iter_mut() {
            n += c
                .node_info()
                .await
                .unwrap()
                .running
                .get(&job)
                .map_or(0, Vec::len);
        }
        n
    };
    let start = Instant::now();
    while running(&mut workers).await < 6 {
        assert!(start.elapsed() < Duration::from_secs(60), "never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let old = nodes[0].peer.clone();
    nodes[0].kill();
    let killed = Instant::now();
    let took = 'found: loop {
        for c in workers.iter_mut() {
            if let Ok(status) = c.status(job).await
                && status.home.as_ref().is_some_and(|h| *h != old)
            {
                break 'found killed.elapsed();
            }
        }
        assert!(killed.elapsed() < Duration::from_secs(30), "no takeover");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let still = running(&mut workers).await;
    let _ = workers[0].cancel(job).await;
    (took, still)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs = if short() { 2 } else { 8 };
    let mut times = Vec::new();
    for run in 0..runs {
        let (took, still) = one_run().await;
        println!(
            "failover run={run} takeover_ms={} workers_running_after={still}/6",
            took.as_millis()
        );
        assert_eq!(still, 6, "workers were lost in the takeover");
        times.push(took);
    }
    times.sort();
    let p50 = times[times.len() / 2];
    let max = times[times.len() - 1];
    println!("RESULT failover.takeover_p50 {:.2} s", p50.as_secs_f64());
    println!("RESULT failover.takeover_max {:.2} s", max.as_secs_f64());
    println!("RESULT failover.workers_lost 0 of 6");
}

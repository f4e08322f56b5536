//! Issue 34's cost of replicated execution, with real processes (release
//! `zorilla-node`s on 127.0.0.1): the same deterministic one-worker job
//! run once, twice and three times (`replicas` 1, 2, 3), each run on a
//! node of its own, from an idle home (a node of no cores, so that every
//! run goes out to another node).
//!
//! After a first run of each job on every node (which compiles its module
//! there), for each replication degree and two jobs, a short one (`detcheck`: the
//! fixed costs of a job: flood, offers, grants, start, outputs, the ends
//! and the home's replicated log) and a compute-bound one (`nqueens` N,
//! one rank): the median wall time from submission to the end as the
//! client sees it, and the overlay messages all nodes sent per job (their
//! `messages_sent` before and after), against the unreplicated job's. The
//! grid has one core per worker node and three worker nodes, so the runs
//! of a job compute at once on cores of their own: on this machine of 2
//! cores the third run shares a core, which a grid of separate machines
//! would not.
//!
//! Run: `cargo bench --workspace --bench replication`. 7 jobs per point
//! and N = 13; `ZORILLA_BENCH_SHORT=1` (CI): 2 jobs and N = 10.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use zorilla_node::client::Client;
use zorilla_node::protocol::{JobPhase, JobRequest, JobStatus};

fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
}

/// Waits for `job` to end (checking every 10 ms) and returns its status.
async fn wait_end(client: &mut Client, job: u64, limit: Duration) -> JobStatus {
    let start = Instant::now();
    loop {
        let status = client.status(job).await.unwrap();
        if status.phase.is_terminal() {
            return status;
        }
        assert!(
            start.elapsed() < limit,
            "job not over in {limit:?}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The median wall time (s) and the mean messages of `jobs` runs of
/// `request` one after the other.
async fn measure(
    client: &mut Client,
    clients: &mut [Client],
    request: &JobRequest,
    module: &[u8],
    jobs: usize,
) -> (f64, f64) {
    let mut times = Vec::new();
    let mut msgs = 0;
    for _ in 0..jobs {
        let m0 = common::messages_sent(clients).await;
        let t0 = Instant::now();
        let job = client
            .submit(request.clone(), module.to_vec(), vec![])
            .await
            .unwrap();
        let status = wait_end(client, job, Duration::from_secs(300)).await;
        times.push(t0.elapsed().as_secs_f64());
        assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
        // The nodes' last words of the job (acknowledgements, the log's
        // last entries) are counted with it: until the count stands still
        // for 200 ms (at most 5 s).
        let mut last = common::messages_sent(clients).await;
        for _ in 0..25 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = common::messages_sent(clients).await;
            if now == last {
                break;
            }
            last = now;
        }
        msgs += last - m0;
    }
    (median(times), msgs as f64 / jobs as f64)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (jobs, n) = if short() { (2, 10) } else { (7, 13) };
    let grid = common::grid_with_idle_home(3, 1);
    let nodes = &grid.nodes;
    let mut clients = Vec::new();
    for node in nodes {
        clients.push(Client::connect(node.client.as_str()).await.unwrap());
    }
    common::wait_for_neighbours(nodes, 3, Duration::from_secs(60)).await;
    let mut client = nodes[0].client().await;
    println!("an idle home and 3 nodes of 1 core on loopback; {jobs} jobs per point");
    for (name, module, args) in [
        ("detcheck", common::wasm("detcheck"), Vec::new()),
        ("nqueens", common::wasm("nqueens"), vec![n.to_string()]),
    ] {
        // A first run on every node compiles the module there and keeps
        // it in the node's cache: not what the figures compare.
        let warm = JobRequest {
            lifetime_secs: 120,
            deterministic: Some(1),
            replicas: 3,
            args: args.clone(),
            ..JobRequest::default()
        };
        measure(&mut client, &mut clients, &warm, &module, 1).await;
        let mut base = (0.0, 0.0);
        for replicas in 1..=3u8 {
            let request = JobRequest {
                lifetime_secs: 120,
                deterministic: Some(1),
                replicas,
                args: args.clone(),
                ..JobRequest::default()
            };
            let (secs, msgs) = measure(&mut client, &mut clients, &request, &module, jobs).await;
            if replicas == 1 {
                base = (secs, msgs);
            }
            println!(
                "{name} replicas {replicas}: {:.0} ms ({:.2}x), {msgs:.0} messages ({:.2}x)",
                secs * 1000.0,
                secs / base.0,
                msgs / base.1
            );
            println!(
                "RESULT replication.{name}.r{replicas}.wall {:.0} ms",
                secs * 1000.0
            );
            println!("RESULT replication.{name}.r{replicas}.messages {msgs:.0}");
            if replicas > 1 {
                println!(
                    "RESULT replication.{name}.r{replicas}.wall_ratio {:.2} x unreplicated",
                    secs / base.0
                );
                println!(
                    "RESULT replication.{name}.r{replicas}.messages_ratio {:.2} x unreplicated",
                    msgs / base.1
                );
            }
        }
    }
}

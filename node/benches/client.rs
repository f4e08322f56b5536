//! Issue 6's benchmark: the client protocol of one real `zorilla-node`
//! (release build, 127.0.0.1, temp state directory).
//!
//! - Submissions per second the node accepts from 8 concurrent clients, each
//!   submitting 50 jobs one after another. A submission is
//!   the whole path: the module checked by the sandbox, module and job
//!   committed to redb (durably), the job handed to the scheduler. The jobs
//!   ask for more cores than the node has, so they wait for workers and the
//!   figure is acceptance, not execution.
//! - Status round-trip latency: 5,000 status requests, one after another
//!   on one connection; median and 99th percentile.
//! - What the owners' checks cost (issue 28), in the same run: a signed
//!   submission against one without an owner (one client, one after
//!   another), and an owner's status read proved end to end, at the job's
//!   home and through a second node that forwards it there (a pair of
//!   nodes of their own, away from the waiting jobs above, which would be
//!   flooded to a node joining their grid).
//!
//! Run: `cargo bench -p zorilla-node --bench client`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{TestNode, wasm};
use zorilla_node::client::Client;
use zorilla_node::protocol::{JobRequest, Request, Response};

const CLIENTS: usize = 8;

/// `ZORILLA_BENCH_SHORT=1` (CI): fewer of everything, same code.
fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (submits_per_client, status_calls) = if short() { (5, 200) } else { (50, 5000) };
    let (one_by_one, forwarded_calls) = if short() { (20, 100) } else { (200, 2000) };
    let dir = tempfile::tempdir().unwrap();
    let network = format!("bench-client-{}", std::process::id());
    let node = TestNode::start(&dir.path().join("n0"), &network, None, 2);
    let module = wasm("hello");
    let request = JobRequest {
        cores: 64,
        lifetime_secs: 600,
        ..JobRequest::default()
    };

    // Warm up: the first submit compiles the module into the cache.
    let mut first = Client::connect(node.client.as_str()).await.unwrap();
    first
        .submit(request.clone(), module.clone(), vec![])
        .await
        .unwrap();

    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let addr = node.client.clone();
        let request = request.clone();
        let module = module.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(addr.as_str()).await.unwrap();
            let mut latencies = Vec::with_capacity(submits_per_client);
            for _ in 0..submits_per_client {
                let t = Instant::now();
                client
                    .submit(request.clone(), module.clone(), vec![])
                    .await
                    .unwrap();
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = start.elapsed();
    let total = CLIENTS * submits_per_client;
    latencies.sort();
    println!(
        "submit: {total} jobs from {CLIENTS} clients in {elapsed:.2?}: {:.0} submissions/s; \
         latency median {:.2?}, p99 {:.2?} ({} byte module)",
        total as f64 / elapsed.as_secs_f64(),
        latencies[total / 2],
        latencies[total * 99 / 100],
        module.len()
    );
    println!(
        "RESULT client.submits {:.0} submissions/s",
        total as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(first.list().await.unwrap().len(), total + 1);

    let job = first.list().await.unwrap()[0].job;
    let mut rtts: Vec<Duration> = Vec::with_capacity(status_calls);
    for _ in 0..status_calls {
        let t = Instant::now();
        first.status(job).await.unwrap();
        rtts.push(t.elapsed());
    }
    rtts.sort();
    println!(
        "status: {status_calls} round trips on one connection: median {:.1?}, p99 {:.1?}, max {:.1?}",
        rtts[status_calls / 2],
        rtts[status_calls * 99 / 100],
        rtts[status_calls - 1]
    );
    println!(
        "RESULT client.status_rtt_median {:.1} µs",
        rtts[status_calls / 2].as_secs_f64() * 1e6
    );

    // A signed submission against one without an owner, alternating so
    // that both see the same store and load.
    let (mut signed, mut unsigned) = (Vec::new(), Vec::new());
    for _ in 0..one_by_one {
        let t = Instant::now();
        first
            .submit(request.clone(), module.clone(), vec![])
            .await
            .unwrap();
        signed.push(t.elapsed());
        let t = Instant::now();
        let anonymous = Request::Submit {
            job: request.clone(),
            module: module.clone(),
            inputs: vec![],
            owner: None,
        };
        let answer = first.call(&anonymous).await.unwrap();
        assert!(matches!(answer, Response::Submitted { .. }), "{answer:?}");
        unsigned.push(t.elapsed());
    }
    let (signed, unsigned) = (median(&mut signed), median(&mut unsigned));
    println!(
        "submit, one after another: signed median {signed:.2?}, without an owner {unsigned:.2?}"
    );
    println!(
        "RESULT client.signed_submit_ratio {:.2} x",
        signed.as_secs_f64() / unsigned.as_secs_f64()
    );

    // The owner's status read, proved end to end: at the home, and through
    // a second node that forwards it to the home. A pair of nodes of its
    // own, in a grid of its own: the jobs above wait for 64-core workers,
    // and a node joining their grid would be flooded with them all the
    // while (the read is measured on its own).
    let pair = format!("{network}-forwarded");
    let home = TestNode::start(&dir.path().join("n1"), &pair, None, 2);
    let mut owner = Client::connect(home.client.as_str())
        .await
        .unwrap()
        .as_user(first.user().clone());
    let job = owner
        .submit(request.clone(), module.clone(), vec![])
        .await
        .unwrap();
    let other = TestNode::start(&dir.path().join("n2"), &pair, Some(&home.listen), 1);
    let mut through = Client::connect(other.client.as_str())
        .await
        .unwrap()
        .as_user(first.user().clone());
    let start = Instant::now();
    while through.status(job).await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the second node never reached the job's home"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (mut direct, mut forwarded) = (Vec::new(), Vec::new());
    for _ in 0..forwarded_calls {
        let t = Instant::now();
        owner.status(job).await.unwrap();
        direct.push(t.elapsed());
        let t = Instant::now();
        let status = through.status(job).await.unwrap();
        forwarded.push(t.elapsed());
        assert_eq!(status.job, job);
    }
    let (direct, forwarded) = (median(&mut direct), median(&mut forwarded));
    println!(
        "owner's status, median: at the home {direct:.1?}, forwarded by another node {forwarded:.1?}"
    );
    println!(
        "RESULT client.forwarded_status_rtt_median {:.1} µs",
        forwarded.as_secs_f64() * 1e6
    );
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

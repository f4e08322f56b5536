//! What a home's memory does over many finished jobs and after a flood of
//! output: a measurement on a real `zorilla-node`, run by hand:
//! `cargo test --workspace --release --test memory -- --ignored --nocapture`.

mod common;

use std::time::{Duration, Instant};

use common::{TestNode, wait_completed, wasm};
use zorilla_node::client::Client;
use zorilla_node::protocol::{JobRequest, NamedFile};

/// The node's resident memory, KiB.
fn rss_kib(node: &TestNode) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", node.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Runs `n` hello jobs, `at_once` at a time, each to completion.
async fn run_jobs(client: &mut Client, n: usize, at_once: usize) {
    let mut done = 0;
    while done < n {
        let batch = at_once.min(n - done);
        let mut jobs = Vec::new();
        for _ in 0..batch {
            let inputs = vec![NamedFile {
                name: "name.txt".into(),
                data: b"memory".to_vec(),
            }];
            let request = JobRequest {
                args: vec!["a few words of arguments".into()],
                ..JobRequest::default()
            };
            jobs.push(client.submit(request, wasm("hello"), inputs).await.unwrap());
        }
        for job in jobs {
            wait_completed(client, job, Duration::from_secs(60)).await;
        }
        done += batch;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test"]
async fn home_memory_over_finished_jobs_and_a_flood_of_output() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::start(&dir.path().join("n0"), "memory", None, 2);
    let mut client = node.client().await;
    let start = Instant::now();
    run_jobs(&mut client, 200, 4).await;
    let at_200 = rss_kib(&node);
    run_jobs(&mut client, 800, 4).await;
    let at_1000 = rss_kib(&node);
    let per_job = (at_1000 as f64 - at_200 as f64) / 800.0;
    println!(
        "RSS after 200 jobs {at_200} KiB, after 1000 jobs {at_1000} KiB: {per_job:.2} KiB per finished job ({:.0} s)",
        start.elapsed().as_secs_f64()
    );

    let flood = JobRequest {
        wall_time_secs: 60,
        ..JobRequest::default()
    };
    let job = client.submit(flood, wasm("flood"), vec![]).await.unwrap();
    let status = common::wait_for(
        &mut client,
        job,
        Duration::from_secs(120),
        "the flood's end",
        |s| s.phase.is_terminal(),
    )
    .await;
    let logged: usize = client
        .logs(job)
        .await
        .unwrap()
        .iter()
        .map(|c| c.data.len())
        .sum();
    let after_flood = rss_kib(&node);
    // Give the allocator a moment to hand memory back, then look again.
    let mut settled = after_flood;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        settled = rss_kib(&node);
    }
    println!(
        "flood ({:?}, {} MiB of log): RSS {after_flood} KiB just after, {settled} KiB 10 s later",
        status.phase,
        logged >> 20
    );
    assert!(
        per_job < 4.0,
        "the home's memory grows by {per_job:.2} KiB per finished job"
    );
}

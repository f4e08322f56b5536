//! Deterministic jobs (issue 34) on real nodes: the same job run twice,
//! its ranks on other, differently configured nodes the second time,
//! gives bit-identical outputs; what cannot be deterministic is refused.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Net, wait_completed, wait_for_neighbours, wasm};
use zorilla_core::advert::{Strategy, WorkKind};
use zorilla_node::client::{Client, ClientError};
use zorilla_node::protocol::{ErrorKind, JobRequest, JobStatus};

const DEADLINE: Duration = Duration::from_secs(90);

fn detcheck(strategy: Strategy, seed: u64) -> JobRequest {
    JobRequest {
        min_workers: 2,
        max_workers: 2,
        strategy,
        lifetime_secs: 60,
        deterministic: Some(seed),
        ..JobRequest::default()
    }
}

/// Runs `request` to completion; returns where each rank ran, each
/// output file's bytes, and each rank's stdout (the ranks' chunks
/// interleave in the job's log as they arrive).
async fn run(
    client: &mut Client,
    request: JobRequest,
) -> (JobStatus, BTreeMap<String, Vec<u8>>, BTreeMap<u32, String>) {
    let job = client
        .submit(request, wasm("detcheck"), vec![])
        .await
        .unwrap();
    let status = wait_completed(client, job, DEADLINE).await;
    let mut outputs = BTreeMap::new();
    for file in client.outputs(job).await.unwrap() {
        let data = client.read_output(job, &file.name).await.unwrap();
        outputs.insert(file.name, data);
    }
    let logs = client.logs(job).await.unwrap();
    let mut stdout: BTreeMap<u32, String> = BTreeMap::new();
    for chunk in logs.iter().filter(|c| !c.stderr) {
        let text = String::from_utf8_lossy(&chunk.data);
        stdout.entry(chunk.rank).or_default().push_str(&text);
    }
    (status, outputs, stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deterministic_job_gives_the_same_outputs_in_every_run_on_any_nodes() {
    // A home without cores and two nodes that differ: cores, the owner's
    // limits, direct rank connections.
    let grid = common::sites_grid_of(
        Net::Loopback,
        &[3],
        |i| match i {
            0 => 0,
            1 => 2,
            _ => 4,
        },
        |i| match i {
            2 => ["--max-cpu-time-secs", "600", "--direct-ranks", "false"]
                .map(String::from)
                .to_vec(),
            _ => Vec::new(),
        },
    );
    wait_for_neighbours(&grid.nodes, 2, DEADLINE).await;
    let mut client = grid.nodes[0].client().await;

    // Spread: a rank on each node. Concentrate: both ranks on one node.
    let (spread, first, first_log) = run(&mut client, detcheck(Strategy::Spread, 7)).await;
    let (together, second, second_log) = run(&mut client, detcheck(Strategy::Concentrate, 7)).await;
    assert_ne!(spread.ranks[&0].node, spread.ranks[&1].node);
    assert_eq!(together.ranks[&0].node, together.ranks[&1].node);

    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        ["0/det.txt", "1/det.txt"],
        "{first:?}"
    );
    assert_eq!(first, second, "the outputs differ between runs");
    assert_eq!(first_log.len(), 2);
    assert_eq!(first_log, second_log);
    assert_eq!(first_log[&0].as_bytes(), first["0/det.txt"]);
    // Rank is part of the key: the ranks' random bytes differ.
    assert_ne!(first["0/det.txt"], first["1/det.txt"]);
    let text = String::from_utf8_lossy(&first["0/det.txt"]);
    assert!(text.contains("nan payload+1 7ff8000000000000"), "{text}");

    // Another seed, other random bytes.
    let (_, other_seed, _) = run(&mut client, detcheck(Strategy::Spread, 8)).await;
    assert_ne!(first["0/det.txt"], other_seed["0/det.txt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_that_cannot_be_deterministic_are_refused_with_a_sentence() {
    let grid = common::grid(1, 1);
    let mut client = grid.nodes[0].client().await;
    let malleable = JobRequest {
        min_workers: 1,
        max_workers: 2,
        deterministic: Some(1),
        ..JobRequest::default()
    };
    let refused = client
        .submit(malleable, wasm("detcheck"), vec![])
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ClientError::Node { kind: ErrorKind::BadRequest, message }
            if message.contains("must have a fixed size")),
        "{refused:?}"
    );

    let exe = std::fs::read("/bin/echo").unwrap();
    let arch = zorilla_node::native::executable_arch(&exe).unwrap();
    let native = JobRequest {
        kind: WorkKind::Native(arch),
        deterministic: Some(1),
        ..JobRequest::default()
    };
    let refused = client.submit(native, exe, vec![]).await.unwrap_err();
    assert!(
        matches!(&refused, ClientError::Node { kind: ErrorKind::BadRequest, message }
            if message.contains("a native job cannot be deterministic")),
        "{refused:?}"
    );
}

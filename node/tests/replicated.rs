//! Replicated execution (issue 34, item 2) on real nodes, one of which
//! lies: started with `ZORILLA_TEST_CORRUPT=1`, in a node built with the
//! test-only `test-corrupt` feature, it adds a line to the stdout and
//! output files of every worker it runs. A job that runs three times
//! completes with the majority's results, names the liar and its home
//! avoids it from then on (also after a restart), also when each run is a parallel job of its
//! own; two runs that differ fail the job naming both nodes; an
//! unreplicated job trusts its node as before; a lost run does not stop
//! the job while another runs on. A spot-checked job array (item 3)
//! catches the liar, runs its tasks again elsewhere and keeps only
//! honest outputs.
//!
//! Run with `cargo test --workspace --features zorilla-node/test-corrupt
//! --test replicated` (scripts/test.sh does).

mod common;

use std::time::Duration;

use common::{Net, TestNode, wait_completed, wait_for, wait_for_neighbours, wasm};
use zorilla_node::client::{Client, ClientError};
use zorilla_node::protocol::{ErrorKind, JobPhase, JobRequest, JobStatus};

const DEADLINE: Duration = Duration::from_secs(90);

fn detcheck(replicas: u8) -> JobRequest {
    JobRequest {
        lifetime_secs: 60,
        deterministic: Some(7),
        replicas,
        ..JobRequest::default()
    }
}

/// An idle home (node 0) and `workers` nodes of one core each; node
/// `liar` (if any) lies about all its workers' results.
fn grid(workers: usize, liar: Option<usize>) -> common::Grid {
    common::liar_grid(workers, liar, "1")
}

/// Each output file of `job` and its text.
async fn outputs(client: &mut Client, job: u64) -> Vec<(String, String)> {
    let mut all = Vec::new();
    for file in client.outputs(job).await.unwrap() {
        let data = client.read_output(job, &file.name).await.unwrap();
        all.push((file.name, String::from_utf8_lossy(&data).into_owned()));
    }
    all
}

/// Waits for `node`'s status page (published every so often, not at each
/// change) to list `liar` among the nodes it avoids.
async fn wait_avoided(node: &TestNode, liar: &str) {
    let start = std::time::Instant::now();
    loop {
        let overview = node.overview().await;
        if overview.avoided.iter().any(|a| a.contains(liar)) {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the status page never listed {liar} as avoided: {:?}",
            overview.avoided
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn nodes_of(status: &JobStatus) -> Vec<String> {
    status.ranks.values().map(|r| r.node.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_runs_keep_the_majority_name_the_liar_and_avoid_it_later() {
    let grid = grid(3, Some(2));
    let liar = grid.nodes[2].peer.clone();
    wait_for_neighbours(&grid.nodes, 3, DEADLINE).await;
    let mut client = grid.nodes[0].client().await;

    let job = client
        .submit(detcheck(3), wasm("detcheck"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, DEADLINE).await;
    // One worker per run, each on a node of its own, the liar among them.
    let mut nodes = nodes_of(&status);
    assert_eq!(nodes.len(), 3, "{status:?}");
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "two runs on one node: {status:?}");
    assert!(nodes.contains(&liar));
    assert!(
        status.reason.contains("2 of 3 complete runs")
            && status
                .reason
                .contains(&format!("node {liar} disagreed with the majority")),
        "{}",
        status.reason
    );
    // The job's outputs are the majority's, as its rank 0's.
    let files = outputs(&mut client, job).await;
    assert_eq!(
        files.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["0/det.txt"],
        "{files:?}"
    );
    assert!(files[0].1.contains("rank 0 of 1"), "{files:?}");
    assert!(!files[0].1.contains(common::MADE_UP), "{files:?}");
    let stdout = common::stdout_of(&client.logs(job).await.unwrap());
    assert!(!stdout.contains(common::MADE_UP), "{stdout}");
    assert_eq!(stdout, files[0].1, "stdout is the kept run's");

    // A later job of this home, replicated or not, runs elsewhere.
    let later = client
        .submit(detcheck(2), wasm("detcheck"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, later, DEADLINE).await;
    assert!(!nodes_of(&status).contains(&liar), "{status:?}");
    assert!(
        status
            .reason
            .starts_with("all 2 runs gave the same results"),
        "{}",
        status.reason
    );
    // The status page lists the node avoided, also after the home
    // restarted.
    wait_avoided(&grid.nodes[0], &liar).await;
    let mut grid = grid;
    grid.nodes[0].restart_gracefully();
    wait_avoided(&grid.nodes[0], &liar).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_that_differ_fail_naming_both_and_unreplicated_jobs_trust_their_nodes() {
    let grid = grid(2, Some(2));
    let (honest, liar) = (grid.nodes[1].peer.clone(), grid.nodes[2].peer.clone());
    wait_for_neighbours(&grid.nodes, 2, DEADLINE).await;
    let mut client = grid.nodes[0].client().await;

    let job = client
        .submit(detcheck(2), wasm("detcheck"), vec![])
        .await
        .unwrap();
    let status = wait_for(&mut client, job, DEADLINE, "its end", |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(status.phase, JobPhase::Failed, "{status:?}");
    assert!(
        status
            .reason
            .starts_with("the runs gave different results and no majority (2 of 2 complete)")
            && status.reason.contains(&format!("node {honest}"))
            && status.reason.contains(&format!("node {liar}"))
            && status.reason.ends_with("no result was kept"),
        "{}",
        status.reason
    );

    // Unreplicated: a worker on each node, the liar's output taken as it
    // came (nobody compares it), the job completed.
    let unreplicated = JobRequest {
        min_workers: 2,
        max_workers: 2,
        strategy: zorilla_core::advert::Strategy::Spread,
        ..detcheck(1)
    };
    let job = client
        .submit(unreplicated, wasm("detcheck"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, DEADLINE).await;
    assert_eq!(status.reason, "all 2 workers exited with status 0");
    let on_liar = status
        .ranks
        .iter()
        .find(|(_, r)| r.node == liar)
        .map(|(rank, _)| *rank)
        .expect("a rank on each node");
    let files = outputs(&mut client, job).await;
    for (name, text) in &files {
        let lied = name.starts_with(&format!("{on_liar}/"));
        assert_eq!(text.contains(common::MADE_UP), lied, "{name}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_of_a_parallel_job_is_a_world_of_its_own_and_the_liars_run_is_outvoted() {
    // Three nodes of two cores, node 2 lying: each run's two ranks on one
    // node (concentrate), messages and barriers within the run.
    let grid = common::sites_grid_env(
        Net::Loopback,
        &[4],
        |i| if i == 0 { 0 } else { 2 },
        |_| Vec::new(),
        |i| match i {
            2 => vec![("ZORILLA_TEST_CORRUPT".into(), "1".into())],
            _ => Vec::new(),
        },
    );
    let liar = grid.nodes[2].peer.clone();
    wait_for_neighbours(&grid.nodes, 3, DEADLINE).await;
    let mut client = grid.nodes[0].client().await;
    let request = JobRequest {
        min_workers: 2,
        max_workers: 2,
        args: vec!["2".into(), "20".into()],
        ..detcheck(3)
    };
    let job = client
        .submit(request, wasm("barrier"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, DEADLINE).await;
    assert_eq!(status.ranks.len(), 6, "{status:?}");
    // Workers 2k and 2k+1 (run k) on one node, every run on another.
    for run in 0..3 {
        assert_eq!(
            status.ranks[&(2 * run)].node,
            status.ranks[&(2 * run + 1)].node
        );
    }
    assert!(
        status
            .reason
            .contains(&format!("node {liar} disagreed with the majority")),
        "{}",
        status.reason
    );
    let logs = client.logs(job).await.unwrap();
    assert!(logs.iter().all(|c| c.rank < 2), "the kept run's ranks only");
    let stdout = common::stdout_of(&logs);
    assert!(stdout.contains("barrier ranks=2 rounds=2 ok"), "{stdout}");
    assert!(
        !stdout.contains(common::MADE_UP) && !stdout.contains("FAIL"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_run_does_not_stop_the_job_while_another_runs_on() {
    let mut grid = grid(2, None);
    wait_for_neighbours(&grid.nodes, 2, DEADLINE).await;
    let mut client = grid.nodes[0].client().await;
    let request = JobRequest {
        args: vec!["15".into()],
        ..detcheck(2)
    };
    let job = client
        .submit(request, wasm("nqueens"), vec![])
        .await
        .unwrap();
    let running = wait_for(&mut client, job, DEADLINE, "two runs", |s| {
        s.ranks.len() == 2 && s.running_workers() == 2
    })
    .await;
    // Kill the node of run 1.
    let lost = running.ranks[&1].node.clone();
    let node: &mut TestNode = grid
        .nodes
        .iter_mut()
        .find(|n| n.peer == lost)
        .expect("a node of the grid");
    node.kill();
    let status = wait_completed(&mut client, job, DEADLINE).await;
    assert!(
        status
            .reason
            .starts_with("only run 0 of 2 completed (the others lost a worker)"),
        "{}",
        status.reason
    );
    let stdout = common::stdout_of(&client.logs(job).await.unwrap());
    assert!(stdout.contains("solutions=2279184"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_and_spot_checks_are_checked_when_decoded() {
    let grid = common::grid(1, 1);
    let mut client = grid.nodes[0].client().await;
    for (request, says) in [
        (detcheck(4), "replicas is 4, but must be from 1 to 3"),
        (detcheck(0), "replicas is 0, but must be from 1 to 3"),
        (
            JobRequest {
                deterministic: None,
                ..detcheck(2)
            },
            "must be deterministic",
        ),
        (
            JobRequest {
                min_workers: 1,
                max_workers: 2,
                ..detcheck(2)
            },
            "must be of a fixed size",
        ),
        (
            JobRequest {
                deterministic: None,
                ..checked_array(4, 1, 10)
            },
            "with spot checks must be deterministic",
        ),
        (
            checked_array(4, 1, 101),
            "spot_checks is 101, but must be at most 100",
        ),
    ] {
        let refused = client
            .submit(request, wasm("detcheck"), vec![])
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, ClientError::Node { kind: ErrorKind::BadRequest, message }
                if message.contains(says)),
            "{refused:?}"
        );
    }
}

/// A deterministic array of `count` `sweep` tasks, `percent` of them spot
/// checked, at most `running` at once.
fn checked_array(count: u32, running: u32, percent: u8) -> JobRequest {
    JobRequest {
        min_workers: 1,
        max_workers: running,
        tasks: Some(zorilla_node::protocol::Tasks {
            count,
            retries: 0,
            args_file: None,
            spot_checks: percent,
        }),
        ..detcheck(1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spot_checks_catch_a_lying_node_run_its_tasks_again_and_keep_honest_outputs() {
    // Two honest nodes and a liar, a core each: every task checked, so
    // the liar's first task is checked by one honest node and settled by
    // the other.
    let grid = grid(3, Some(3));
    let liar = grid.nodes[3].peer.clone();
    wait_for_neighbours(&grid.nodes, 3, DEADLINE).await;
    let mut client = grid.nodes[0].client().await;
    let job = client
        .submit(checked_array(9, 3, 100), wasm("sweep"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, DEADLINE).await;
    let tasks = status
        .tasks
        .clone()
        .expect("an array's status has its tasks");
    assert_eq!(tasks.caught, vec![liar.clone()], "{tasks:?}");
    assert_eq!(
        (tasks.done, tasks.checked, tasks.checking),
        (9, 9, 0),
        "{tasks:?}"
    );
    assert!(
        status
            .reason
            .starts_with("all 9 tasks exited with status 0; 9 of them checked on another node")
            && status.reason.contains(&format!(
                "node {liar} gave results that two other nodes' runs disagreed with"
            )),
        "{}",
        status.reason
    );
    // Every task's output is the honest one.
    let files = outputs(&mut client, job).await;
    assert_eq!(files.len(), 9, "{files:?}");
    for (task, (name, text)) in files.iter().enumerate() {
        assert_eq!(name, &format!("{task}/result.txt"));
        assert_eq!(
            text,
            &format!("task {task} of 9: {task}^2 = {}\n", task * task)
        );
    }
    // The home avoids the liar from now on, and its status page says so.
    let later = client
        .submit(checked_array(4, 2, 0), wasm("sweep"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, later, DEADLINE).await;
    assert_eq!(status.reason, "all 4 tasks exited with status 0");
    wait_avoided(&grid.nodes[0], &liar).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_with_replicas_checks_every_task_and_catches_the_liar() {
    let grid = grid(3, Some(3));
    let liar = grid.nodes[3].peer.clone();
    wait_for_neighbours(&grid.nodes, 3, DEADLINE).await;
    let mut client = grid.nodes[0].client().await;
    let request = JobRequest {
        replicas: 2,
        ..checked_array(6, 3, 0)
    };
    let job = client.submit(request, wasm("sweep"), vec![]).await.unwrap();
    let status = wait_completed(&mut client, job, DEADLINE).await;
    let tasks = status
        .tasks
        .clone()
        .expect("an array's status has its tasks");
    assert_eq!((tasks.done, tasks.checked), (6, 6), "{tasks:?}");
    assert_eq!(tasks.caught, vec![liar], "{tasks:?}");
    for (task, (name, text)) in outputs(&mut client, job).await.iter().enumerate() {
        assert_eq!(name, &format!("{task}/result.txt"));
        assert_eq!(
            text,
            &format!("task {task} of 6: {task}^2 = {}\n", task * task)
        );
    }
}

//! Issue 33's real-node figures: job arrays and a second user, with real
//! processes (release `zorilla-node`s on 127.0.0.1, 2 cores each).
//!
//! 1. **One array, and one against as many jobs.** User A runs T tasks of
//!    50 ms as one job array; then J of them
//!    (`sweep sleep 50`: they wait rather than compute, so that the nodes,
//!    all on this machine, measure the scheduling, not their share of its
//!    cores) once as one job array and once as J one-worker jobs submitted
//!    at once: the makespan of each, its efficiency (the tasks' time over
//!    the grid's cores times the makespan), and the overlay messages the
//!    nodes sent per task.
//! 2. **A second user is not starved.** User B runs a job of two 500 ms
//!    tasks alone (its turnaround without contention), then three
//!    such jobs while A's array of T tasks keeps every core busy: each
//!    job's turnaround against the one alone, and how A's tasks spread
//!    over the nodes (fewest and most run on one node).
//!
//! Run: `cargo bench -p zorilla-node --bench arrays`.
//! T = 1,000 and J = 200 on 8 nodes; `ZORILLA_BENCH_SHORT=1` (CI): 4
//! nodes, T = 200 and J = 50.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::TestNode;
use zorilla_node::client::Client;
use zorilla_node::owner::UserKey;
use zorilla_node::protocol::{JobPhase, JobRequest, JobStatus, Tasks};

const CORES: u32 = 2;
/// Milliseconds of computing per task of A's.
const TASK_MS: u64 = 50;
/// Milliseconds per task of B's jobs.
const B_MS: u64 = 500;

fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
}

/// Waits for `job` to end (checking every 20 ms) and returns its status.
/// A status the node cannot give now (a job whose home moved, asked
/// through a node that has not heard yet) is asked again.
async fn wait_end(client: &mut Client, job: u64, limit: Duration) -> JobStatus {
    let start = Instant::now();
    loop {
        match client.status(job).await {
            Ok(status) if status.phase.is_terminal() => return status,
            Ok(status) => assert!(
                start.elapsed() < limit,
                "job not over in {limit:?}: {status:?}"
            ),
            Err(e) => assert!(start.elapsed() < limit, "job not over in {limit:?}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The sweep guest's arguments for a task that waits `ms` milliseconds.
fn nap(ms: u64) -> Vec<String> {
    vec!["sleep".into(), ms.to_string()]
}

fn array(tasks: u32) -> JobRequest {
    JobRequest {
        min_workers: 1,
        max_workers: tasks,
        memory_mib: 16,
        lifetime_secs: 600,
        args: nap(TASK_MS),
        tasks: Some(Tasks {
            count: tasks,
            retries: 0,
            args_file: None,
            spot_checks: 0,
        }),
        ..JobRequest::default()
    }
}

/// How many of `job`'s workers each node started (its log's lines).
fn started_per_node(nodes: &[TestNode], job: u64) -> Vec<usize> {
    let id = zorilla_core::advert::JobId(job).to_string();
    nodes
        .iter()
        .map(|n| {
            std::fs::read_to_string(n.dir.join("node.log"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("worker started") && l.contains(&id))
                .count()
        })
        .collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (node_count, tasks, jobs_n): (usize, u32, u32) = if short() {
        (4, 200, 50)
    } else {
        (8, 1000, 200)
    };
    let module = common::wasm("sweep");
    let grid = common::grid(node_count, CORES);
    let nodes = &grid.nodes;
    let mut clients = Vec::new();
    for n in nodes {
        clients.push(Client::connect(n.client.as_str()).await.unwrap());
    }
    common::wait_for_neighbours(nodes, 2.min(node_count - 1), Duration::from_secs(60)).await;
    let grid_cores = node_count as f64 * f64::from(CORES);
    let ideal = |tasks: u32, ms: u64| f64::from(tasks) * ms as f64 / 1000.0 / grid_cores;
    println!(
        "{node_count} nodes x {CORES} cores; tasks of {TASK_MS} ms: {tasks} of them take {:.2} s \
         at best",
        ideal(tasks, TASK_MS)
    );
    let mut a = Client::connect(nodes[0].client.as_str())
        .await
        .unwrap()
        .as_user(UserKey::generate());
    let mut b = Client::connect(nodes[1].client.as_str())
        .await
        .unwrap()
        .as_user(UserKey::generate());

    // 1. One array of T tasks.
    let m0 = common::messages_sent(&mut clients).await;
    let t0 = Instant::now();
    let job = a
        .submit(array(tasks), module.clone(), vec![])
        .await
        .unwrap();
    let status = wait_end(&mut a, job, Duration::from_secs(600)).await;
    let array_s = t0.elapsed().as_secs_f64();
    let array_msgs = common::messages_sent(&mut clients).await - m0;
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    let spread = started_per_node(nodes, job);
    println!(
        "array of {tasks} tasks: {array_s:.2} s, efficiency {:.2}, {:.1} messages per task; \
         tasks per node {spread:?}",
        ideal(tasks, TASK_MS) / array_s,
        array_msgs as f64 / f64::from(tasks)
    );
    println!("RESULT arrays.array.makespan {array_s:.2} s");
    println!(
        "RESULT arrays.array.efficiency {:.2}",
        ideal(tasks, TASK_MS) / array_s
    );
    println!(
        "RESULT arrays.array.msgs_per_task {:.1}",
        array_msgs as f64 / f64::from(tasks)
    );

    // J of the tasks as one array, then as J jobs of one worker,
    // submitted at once.
    let m0 = common::messages_sent(&mut clients).await;
    let t0 = Instant::now();
    let job = a
        .submit(array(jobs_n), module.clone(), vec![])
        .await
        .unwrap();
    let status = wait_end(&mut a, job, Duration::from_secs(600)).await;
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    let small_s = t0.elapsed().as_secs_f64();
    let small_msgs = common::messages_sent(&mut clients).await - m0;
    println!(
        "array of {jobs_n} tasks: {small_s:.2} s, efficiency {:.2}, {:.1} messages per task",
        ideal(jobs_n, TASK_MS) / small_s,
        small_msgs as f64 / f64::from(jobs_n)
    );
    let one = JobRequest {
        memory_mib: 16,
        lifetime_secs: 600,
        args: nap(TASK_MS),
        ..JobRequest::default()
    };
    let m0 = common::messages_sent(&mut clients).await;
    let t0 = Instant::now();
    let mut jobs = Vec::new();
    for _ in 0..jobs_n {
        jobs.push(a.submit(one.clone(), module.clone(), vec![]).await.unwrap());
    }
    let submitted_s = t0.elapsed().as_secs_f64();
    for job in &jobs {
        let status = wait_end(&mut a, *job, Duration::from_secs(900)).await;
        assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    }
    let jobs_s = t0.elapsed().as_secs_f64();
    let jobs_msgs = common::messages_sent(&mut clients).await - m0;
    println!(
        "{jobs_n} one-worker jobs: {jobs_s:.2} s (submitted in {submitted_s:.2} s), efficiency \
         {:.2}, {:.1} messages per task",
        ideal(jobs_n, TASK_MS) / jobs_s,
        jobs_msgs as f64 / f64::from(jobs_n)
    );
    println!("RESULT arrays.small.makespan {small_s:.2} s");
    println!(
        "RESULT arrays.small.msgs_per_task {:.1}",
        small_msgs as f64 / f64::from(jobs_n)
    );
    println!("RESULT arrays.jobs.makespan {jobs_s:.2} s");
    println!(
        "RESULT arrays.jobs.msgs_per_task {:.1}",
        jobs_msgs as f64 / f64::from(jobs_n)
    );

    // 2. B alone, then B beside A's array. B's jobs are small arrays of
    // its own (the sweep guest runs as a task).
    let b_job = JobRequest {
        min_workers: 1,
        max_workers: 2,
        memory_mib: 16,
        lifetime_secs: 600,
        args: nap(B_MS),
        tasks: Some(Tasks {
            count: 2,
            retries: 0,
            args_file: None,
            spot_checks: 0,
        }),
        ..JobRequest::default()
    };
    let t0 = Instant::now();
    let job = b
        .submit(b_job.clone(), module.clone(), vec![])
        .await
        .unwrap();
    let alone = wait_end(&mut b, job, Duration::from_secs(120)).await;
    assert_eq!(alone.phase, JobPhase::Completed, "{alone:?}");
    let alone_s = t0.elapsed().as_secs_f64();
    println!("user B's job alone: {alone_s:.2} s");

    let job_a = a
        .submit(array(tasks), module.clone(), vec![])
        .await
        .unwrap();
    // A's array holds every core before B comes.
    let full = Instant::now();
    loop {
        let s = a.status(job_a).await.unwrap();
        let running = s.tasks.as_ref().map_or(0, |t| t.running);
        if running as f64 >= grid_cores || s.phase.is_terminal() {
            break;
        }
        assert!(full.elapsed() < Duration::from_secs(60), "{s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut beside = Vec::new();
    for _ in 0..3 {
        let t0 = Instant::now();
        let job = b
            .submit(b_job.clone(), module.clone(), vec![])
            .await
            .unwrap();
        let status = wait_end(&mut b, job, Duration::from_secs(300)).await;
        assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
        beside.push(t0.elapsed().as_secs_f64());
    }
    let status = wait_end(&mut a, job_a, Duration::from_secs(600)).await;
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    let spread = started_per_node(nodes, job_a);
    let worst = beside.iter().copied().fold(0.0, f64::max);
    println!(
        "user B's jobs beside A's array of {tasks}: {beside:.2?} s ({:.2}x alone at worst); A's \
         tasks per node {spread:?}",
        worst / alone_s
    );
    println!("RESULT arrays.b.alone {alone_s:.2} s");
    println!("RESULT arrays.b.beside_worst {worst:.2} s");
    println!("RESULT arrays.b.slowdown {:.2}", worst / alone_s);
    println!(
        "RESULT arrays.spread.min {}",
        spread.iter().min().unwrap_or(&0)
    );
    println!(
        "RESULT arrays.spread.max {}",
        spread.iter().max().unwrap_or(&0)
    );
}

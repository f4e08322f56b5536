//! Issue 34's spot checks on real nodes (release `zorilla-node`s on
//! 127.0.0.1): how often a node that lies about half of its results is
//! caught when a job array's home re-runs 20% of the tasks elsewhere, the
//! made-up results the arrays keep with and without the checks, and what
//! the checks cost in wall time. The liar is the test-only lying node
//! (`ZORILLA_TEST_CORRUPT=0.5`, cargo feature `test-corrupt`): it adds a
//! line to the output of about half of its workers.
//!
//! Each round starts a fresh grid (a home that caught the liar avoids it
//! from then on): an idle home, three honest nodes and the liar, one core
//! each. On it, after a first array that compiles the module on every
//! node, an array of 40 `sweep` tasks without checks, then the
//! same with 20% checked; a task's output is a lie kept if it holds the
//! liar's line. The simulator measures the same over more runs and shares
//! (`zorilla-sim --spot-checks 50`, `sim/src/spotcheck.rs`).
//!
//! Run: `cargo bench --workspace --features zorilla-node/test-corrupt
//! --bench spotchecks`. 10 rounds; `ZORILLA_BENCH_SHORT=1` (CI): 2.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use zorilla_node::client::Client;
use zorilla_node::protocol::{JobPhase, JobRequest, JobStatus, Tasks};

const TASKS: u32 = 40;
const PERCENT: u8 = 20;

fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
}

/// Runs an array of [`TASKS`] with `percent` checked: its wall time (s),
/// its status, and how many of its outputs are made up.
async fn array(client: &mut Client, percent: u8) -> (f64, JobStatus, u32) {
    let request = JobRequest {
        min_workers: 1,
        max_workers: 4,
        lifetime_secs: 120,
        deterministic: Some(3),
        tasks: Some(Tasks {
            count: TASKS,
            retries: 0,
            args_file: None,
            spot_checks: percent,
        }),
        ..JobRequest::default()
    };
    let t0 = Instant::now();
    let job = client
        .submit(request, common::wasm("sweep"), vec![])
        .await
        .unwrap();
    let status = common::wait_for(client, job, Duration::from_secs(300), "its end", |s| {
        s.phase.is_terminal()
    })
    .await;
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    let mut lies = 0;
    for file in client.outputs(job).await.unwrap() {
        let data = client.read_output(job, &file.name).await.unwrap();
        if String::from_utf8_lossy(&data).contains(common::MADE_UP) {
            lies += 1;
        }
    }
    (secs, status, lies)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rounds = if short() { 2 } else { 10 };
    println!(
        "an idle home, 3 honest nodes and one lying about half its results, 1 core each, on \
         loopback; an array of {TASKS} sweep tasks without checks, then with {PERCENT}% \
         checked; {rounds} rounds, a fresh grid each"
    );
    let (mut caught, mut kept_unchecked, mut kept_checked) = (0, 0, 0);
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let grid = common::liar_grid(4, Some(4), "0.5");
        let liar = grid.nodes[4].peer.clone();
        common::wait_for_neighbours(&grid.nodes, 3, Duration::from_secs(60)).await;
        let mut client = grid.nodes[0].client().await;
        // Compiles the module on every node (not what is compared).
        array(&mut client, 0).await;
        let (plain_s, _, plain_lies) = array(&mut client, 0).await;
        let (checked_s, status, checked_lies) = array(&mut client, PERCENT).await;
        let tasks = status.tasks.expect("an array's status has its tasks");
        let was_caught = tasks.caught.contains(&liar);
        caught += u32::from(was_caught);
        kept_unchecked += plain_lies;
        kept_checked += checked_lies;
        ratios.push(checked_s / plain_s);
        println!(
            "round {round}: unchecked {plain_s:.2} s, {plain_lies} made-up outputs kept; \
             {PERCENT}% checked {checked_s:.2} s ({:.2}x), {} tasks checked, liar {}, \
             {checked_lies} made-up outputs kept",
            checked_s / plain_s,
            tasks.checked,
            if was_caught { "caught" } else { "not caught" },
        );
    }
    let per_1000 = |n: u32| f64::from(n) * 1000.0 / f64::from(TASKS * rounds);
    ratios.sort_by(f64::total_cmp);
    let ratio = ratios[ratios.len() / 2];
    println!("RESULT spotchecks.real.caught {caught} of {rounds} rounds");
    println!(
        "RESULT spotchecks.real.kept_unchecked {:.0} per 1000 tasks",
        per_1000(kept_unchecked)
    );
    println!(
        "RESULT spotchecks.real.kept_checked {:.0} per 1000 tasks",
        per_1000(kept_checked)
    );
    println!("RESULT spotchecks.real.wall_ratio {ratio:.2} x unchecked");
}

//! A job that can never go on is ended with a sentence, never left to hang
//! (issue 31): real `zorilla-node` processes on 127.0.0.1. A job whose
//! ranks all wait in a receive with nothing in flight fails, saying so; a
//! rank replaced after a loss that waits for what was sent to the worker it
//! replaced makes its job fail, naming the replacement; a rank that only
//! receives late is not taken for stalled. Every wait has a deadline.

mod common;

use std::time::{Duration, Instant};

use common::{TestNode, grid, grid_with_idle_home, stdout_of, wait_completed, wait_for, wasm};
use zorilla_core::node::LostPolicy;
use zorilla_node::client::Client;
use zorilla_node::protocol::{JobPhase, JobRequest};

/// A job of `guest` with `args` on two ranks, submitted to the first of
/// two one-core nodes (so one rank on each).
async fn two_ranks(guest: &str, args: &[&str]) -> (common::Grid, Client, u64) {
    let grid = grid(2, 1);
    let mut client = grid.nodes[0].client().await;
    let request = JobRequest {
        min_workers: 2,
        max_workers: 2,
        lifetime_secs: 60,
        args: args.iter().map(|a| (*a).to_string()).collect(),
        ..JobRequest::default()
    };
    let job = client.submit(request, wasm(guest), vec![]).await.unwrap();
    (grid, client, job)
}

/// Every rank of `stagger 0 -1` waits for ever for a message nobody
/// sends: the home ends the job, failed, with a sentence that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_ranks_all_wait_for_ever_fails_saying_so() {
    let (_grid, mut client, job) = two_ranks("stagger", &["0", "-1"]).await;
    let ended = wait_for(&mut client, job, Duration::from_secs(60), "the end", |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(ended.phase, JobPhase::Failed, "{ended:?}");
    assert!(
        ended.reason.starts_with("stalled: ")
            && ended
                .reason
                .contains("all of ranks 0 and 1 waited in a receive"),
        "{ended:?}"
    );
    assert!(!ended.reason.contains("replaced"), "{ended:?}");
    assert_eq!(ended.running_workers(), 0, "{ended:?}");
}

/// `late 10` on two one-core nodes, with a home that runs no rank: rank 1
/// sends rank 0 its number and ends while rank 0 sleeps. Then rank 0's
/// node is killed (-9); the rank is replaced (on the node where rank 1
/// ran) by a fresh worker that sleeps again and then waits for the number,
/// which went to the worker it replaced. The job fails, naming the
/// replaced rank and what to use instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_rank_waiting_for_what_its_predecessor_was_sent_fails_the_job() {
    let mut grid = grid_with_idle_home(2, 1);
    let mut client = grid.nodes[0].client().await;
    let request = JobRequest {
        min_workers: 2,
        max_workers: 2,
        lifetime_secs: 120,
        on_worker_lost: LostPolicy::Replace,
        args: vec!["10".into()],
        ..JobRequest::default()
    };
    let job = client.submit(request, wasm("late"), vec![]).await.unwrap();
    let sent = wait_for(
        &mut client,
        job,
        Duration::from_secs(30),
        "rank 1's end while rank 0 runs",
        |s| {
            s.ranks.get(&1).and_then(|r| r.outcome.as_deref()) == Some("exited with status 0")
                && s.running_workers() == 1
        },
    )
    .await;
    let victim_peer = sent.ranks[&0].node.clone();
    let victim = grid
        .nodes
        .iter()
        .position(|n: &TestNode| n.peer == victim_peer)
        .unwrap();
    assert_ne!(victim, 0, "the home runs no rank: {sent:?}");
    grid.nodes[victim].kill();
    let killed = Instant::now();

    let ended = wait_for(&mut client, job, Duration::from_secs(90), "the end", |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(ended.phase, JobPhase::Failed, "{ended:?}");
    assert!(
        ended.reason.starts_with("stalled: ")
            && ended.reason.contains("rank 0 waited in a receive")
            && ended.reason.contains("rank 0 was replaced")
            && ended.reason.contains("\"rollback\""),
        "{ended:?}"
    );
    assert_ne!(
        ended.ranks[&0].node, victim_peer,
        "rank 0 replaced elsewhere: {ended:?}"
    );
    eprintln!("failed {:?} after the kill", killed.elapsed());
}

/// A rank that receives only after a long sleep is not a stall: `late 5`
/// completes with the number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_that_receives_late_is_not_taken_for_stalled() {
    let (_grid, mut client, job) = two_ranks("late", &["5"]).await;
    wait_completed(&mut client, job, Duration::from_secs(60)).await;
    let logs = client.logs(job).await.unwrap();
    assert!(
        stdout_of(&logs).contains("late got 42 from rank 1"),
        "{}",
        stdout_of(&logs)
    );
}

//! Whose waiting job gets a node's core when it frees up (issue 33, item
//! 3), on real nodes: the owner's own users' jobs before everyone else's
//! (`own_users`), and a user's priorities reorder only that user's jobs;
//! the favours behind the others' turns, and preemption for a creditor
//! (item 2).

mod common;

use std::time::Duration;

use common::{Net, TestNode, wait_for, wait_for_neighbours, wasm};
use zorilla_core::node::LostPolicy;
use zorilla_node::client::Client;
use zorilla_node::owner::UserKey;
use zorilla_node::protocol::{JobPhase, JobRequest, OutcomeCode};
use zorilla_webui::model::Creditor;

const DEADLINE: Duration = Duration::from_secs(60);

async fn connect(node: &TestNode, user: &UserKey) -> Client {
    Client::connect_with(node.client.as_str(), None, "turns test")
        .await
        .unwrap()
        .as_user(user.clone())
}

/// A job of one worker that waits until it is cancelled.
fn idle(priority: i8) -> JobRequest {
    JobRequest {
        lifetime_secs: 600,
        priority,
        ..JobRequest::default()
    }
}

/// Submits an idle job and waits until the node with the core has
/// declined it as busy (it waits in that node's queue).
async fn queued(client: &mut Client, priority: i8) -> u64 {
    let job = client
        .submit(idle(priority), wasm("idle"), vec![])
        .await
        .unwrap();
    wait_for(client, job, DEADLINE, "a busy decline", |s| {
        s.pending
            .as_ref()
            .is_some_and(|p| p.declines.keys().any(|reason| reason.starts_with("busy")))
    })
    .await;
    job
}

/// Waits until one of `jobs` (each with the client of its owner) runs;
/// returns which.
async fn first_to_run(jobs: &mut [(&mut Client, u64)]) -> u64 {
    let start = std::time::Instant::now();
    loop {
        for (client, job) in jobs.iter_mut() {
            let status = client.status(*job).await.unwrap();
            if status.phase == JobPhase::Running {
                return *job;
            }
        }
        assert!(start.elapsed() < DEADLINE, "none of the jobs started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A home without cores and a node of one core whose owner's own user is
/// Alice. Bob's job holds the core; Bob queues a job of priority 0, then
/// one of priority 5, then Alice queues one. The core goes to Alice's job
/// first, though it came last; then to Bob's later job of priority 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freed_cores_go_to_the_owners_users_first_then_by_each_users_priorities() {
    let (alice, bob) = (UserKey::generate(), UserKey::generate());
    let alice_id = alice.id().to_string();
    let grid = common::sites_grid_of(
        Net::Loopback,
        &[2],
        |i| if i == 0 { 0 } else { 1 },
        |i| {
            if i == 1 {
                vec!["--own-user".into(), alice_id.clone()]
            } else {
                Vec::new()
            }
        },
    );
    wait_for_neighbours(&grid.nodes, 1, DEADLINE).await;
    let mut as_bob = connect(&grid.nodes[0], &bob).await;
    let mut as_alice = connect(&grid.nodes[0], &alice).await;

    let holder = as_bob.submit(idle(0), wasm("idle"), vec![]).await.unwrap();
    wait_for(&mut as_bob, holder, DEADLINE, "the start", |s| {
        s.phase == JobPhase::Running
    })
    .await;
    let bobs_low = queued(&mut as_bob, 0).await;
    let bobs_high = queued(&mut as_bob, 5).await;
    let alices = queued(&mut as_alice, 0).await;

    as_bob.cancel(holder).await.unwrap();
    let mut bob_for_high = connect(&grid.nodes[0], &bob).await;
    let first = first_to_run(&mut [
        (&mut as_bob, bobs_low),
        (&mut bob_for_high, bobs_high),
        (&mut as_alice, alices),
    ])
    .await;
    assert_eq!(first, alices, "the owner's own user's job goes first");

    as_alice.cancel(alices).await.unwrap();
    let second = first_to_run(&mut [(&mut as_bob, bobs_low), (&mut bob_for_high, bobs_high)]).await;
    assert_eq!(
        second, bobs_high,
        "Bob's job of priority 5 goes before his earlier one"
    );
    for job in [bobs_low, bobs_high] {
        as_bob.cancel(job).await.unwrap();
    }
}

/// What `node`'s status page (JSON API) lists as its creditors.
async fn creditors(node: &TestNode) -> Vec<Creditor> {
    node.overview().await.creditors
}

/// `node`'s creditors once it lists any (its page comes up before its
/// state is read back after a restart, and shows a change within a
/// publishing interval).
async fn listed_creditors(node: &TestNode) -> Vec<Creditor> {
    let start = std::time::Instant::now();
    loop {
        if let (200, _) = node.http_get("/api/overview").await {
            let listed = creditors(node).await;
            if !listed.is_empty() {
                return listed;
            }
        }
        assert!(start.elapsed() < DEADLINE, "the node lists no creditor");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The favours behind the turns (Network of Favors, issue 33 item 2): a
/// home without cores whose job ran 2 s on the other node owes that node
/// the favour, and its status page (JSON API) lists the node as its
/// creditor with those core seconds, and again after a restart; the node
/// that ran it owes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_whose_job_another_node_ran_lists_that_node_as_its_creditor() {
    let grid = common::sites_grid_of(
        Net::Loopback,
        &[2],
        |i| if i == 0 { 0 } else { 1 },
        |_| Vec::new(),
    );
    wait_for_neighbours(&grid.nodes, 1, DEADLINE).await;
    let mut client = grid.nodes[0].client().await;
    let request = JobRequest {
        args: vec!["0".into(), "2".into()],
        lifetime_secs: 60,
        ..JobRequest::default()
    };
    let job = client
        .submit(request, wasm("stagger"), vec![])
        .await
        .unwrap();
    let status = common::wait_completed(&mut client, job, DEADLINE).await;
    assert_eq!(status.ranks[&0].node, grid.nodes[1].peer.to_string());

    let owed = listed_creditors(&grid.nodes[0]).await;
    assert_eq!(owed.len(), 1, "{owed:?}");
    assert_eq!(owed[0].node_id, grid.nodes[1].peer.to_string());
    // 2 s of one core, at the same speed (one machine), whole seconds.
    assert!((2..=4).contains(&owed[0].balance_core_secs), "{owed:?}");
    assert!(creditors(&grid.nodes[1]).await.is_empty());

    // The balance survives a restart of the node (it saves it when it
    // shuts down).
    let mut grid = grid;
    grid.nodes[0].restart_gracefully();
    assert_eq!(
        listed_creditors(&grid.nodes[0]).await,
        owed,
        "after a restart"
    );
}

/// Preemption for a creditor (issue 33, item 2), on real nodes: S (no
/// cores) is a stranger's home, M and C have a core each. A job of M's
/// ran one of its two workers on C: M owes C. C runs an idle job of its
/// own; S's idle job, which replaces lost workers, runs on M, the only
/// core left. C's next job finds no core free: M stops S's worker and runs
/// C's job, and S's job looks for a replacement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creditors_job_preempts_a_strangers_worker_that_can_be_replaced() {
    let grid = common::sites_grid_of(
        Net::Loopback,
        &[3],
        |i| if i == 0 { 0 } else { 1 },
        |_| Vec::new(),
    );
    wait_for_neighbours(&grid.nodes, 2, DEADLINE).await;
    let (s, m, c) = (&grid.nodes[0], &grid.nodes[1], &grid.nodes[2]);

    // M owes C: its job of two one-second workers ran one on C.
    let mut at_m = m.client().await;
    let request = JobRequest {
        min_workers: 2,
        max_workers: 2,
        args: vec!["0".into(), "1".into()],
        lifetime_secs: 60,
        ..JobRequest::default()
    };
    let job = at_m.submit(request, wasm("stagger"), vec![]).await.unwrap();
    let status = common::wait_completed(&mut at_m, job, DEADLINE).await;
    let used: Vec<&String> = status.ranks.values().map(|r| &r.node).collect();
    assert!(used.contains(&&c.peer.to_string()), "{status:?}");
    assert_eq!(listed_creditors(m).await[0].node_id, c.peer.to_string());

    // C's own idle job takes C's core; then S's, which can be replaced,
    // takes M's.
    let mut at_c = c.client().await;
    let first = at_c.submit(idle(0), wasm("idle"), vec![]).await.unwrap();
    let running_on = |node: &TestNode| {
        let peer = node.peer.to_string();
        move |s: &zorilla_node::protocol::JobStatus| {
            s.phase == JobPhase::Running && s.ranks.values().all(|r| r.node == peer)
        }
    };
    wait_for(&mut at_c, first, DEADLINE, "C's job on C", running_on(c)).await;
    let mut at_s = s.client().await;
    let strangers = at_s
        .submit(
            JobRequest {
                on_worker_lost: LostPolicy::Replace,
                ..idle(0)
            },
            wasm("idle"),
            vec![],
        )
        .await
        .unwrap();
    wait_for(
        &mut at_s,
        strangers,
        DEADLINE,
        "S's job on M",
        running_on(m),
    )
    .await;

    // C's next job: M's core, at once.
    let second = at_c.submit(idle(0), wasm("idle"), vec![]).await.unwrap();
    wait_for(&mut at_c, second, DEADLINE, "C's job on M", running_on(m)).await;
    let log = std::fs::read_to_string(m.dir.join("node.log")).unwrap_or_default();
    assert!(
        log.contains("their cores go to a job of a node this one owes favours"),
        "M's log does not say it preempted:\n{}",
        m.log_tail()
    );
    // S's job lost its worker there, and goes on looking for another.
    wait_for(
        &mut at_s,
        strangers,
        DEADLINE,
        "S's worker lost on M",
        |st| {
            st.phase == JobPhase::Running
                && st.ranks[&0].code == Some(OutcomeCode::Lost)
                && st.ranks[&0]
                    .outcome
                    .as_deref()
                    .is_some_and(|o| o.contains("preempted"))
        },
    )
    .await;
    at_c.cancel(first).await.unwrap();
    at_c.cancel(second).await.unwrap();
    at_s.cancel(strangers).await.unwrap();
}

//! Users and the jobs they own (issue 28), against real nodes: another user
//! sees that a job exists and nothing more, through any node and with or
//! without a node's token; its owner sees and manages it through any node;
//! a proof made with another key, or replayed, is refused; a node's admin
//! manages the jobs of that node; the status pages show whose a job is.

mod common;

use std::time::Duration;

use common::{Net, sites_grid, wait_for};
use zorilla_node::client::{Client, ClientError};
use zorilla_node::owner::UserKey;
use zorilla_node::protocol::{ErrorKind, JobPhase, JobRequest, Request, Response, Signed};

/// An idle job whose argument is a secret.
fn secret_job() -> JobRequest {
    JobRequest {
        args: vec!["secret-of-alice".into()],
        lifetime_secs: 60,
        ..JobRequest::default()
    }
}

fn unauthorized<T: std::fmt::Debug>(result: Result<T, ClientError>, what: &str) -> String {
    match result {
        Err(ClientError::Node {
            kind: ErrorKind::Unauthorized,
            message,
        }) => message,
        other => panic!("{what}: expected a refusal, got {other:?}"),
    }
}

/// Two nodes, the first with `tokens[0]` (if any), the second with
/// `tokens[1]`.
fn two_nodes(tokens: [Option<&str>; 2]) -> common::Grid {
    sites_grid(Net::Loopback, &[2], 1, |i| match tokens[i] {
        Some(token) => vec!["--token".into(), token.into()],
        None => Vec::new(),
    })
}

async fn connect(node: &common::TestNode, token: Option<&str>, user: &UserKey) -> Client {
    Client::connect_with(node.client.as_str(), token, "owners test")
        .await
        .unwrap()
        .as_user(user.clone())
}

/// Alice submits a job at node 0. Bob, directly at node 0 and through node
/// 1, sees its id, owner, phase and size, but not its argument, placement,
/// logs or outputs, and can neither cancel nor resize it. Alice, through
/// node 1, sees all of it and cancels it. A proof with Alice's name and
/// Bob's signature, and a replay of Alice's proof, are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_sees_only_that_a_job_exists_through_any_node() {
    let grid = two_nodes([None, None]);
    let (alice, bob) = (UserKey::generate(), UserKey::generate());
    let mut at_home = connect(&grid.nodes[0], None, &alice).await;
    let job = at_home
        .submit(secret_job(), common::wasm("idle"), Vec::new())
        .await
        .unwrap();
    let running = wait_for(
        &mut at_home,
        job,
        Duration::from_secs(30),
        "the job running",
        |s| s.phase == JobPhase::Running,
    )
    .await;
    assert_eq!(running.owner, Some(alice.id().to_string()));
    assert_eq!(running.request.args, vec!["secret-of-alice".to_string()]);
    // The rank's first line has reached the home (the reads below expect
    // a log).
    wait_first_log(&mut at_home, job).await;

    for (i, node) in grid.nodes.iter().enumerate() {
        let mut bob = connect(node, None, &bob).await;
        let seen = bob.status(job).await.unwrap();
        assert_eq!(seen.job, job);
        assert_eq!(seen.phase, JobPhase::Running);
        assert_eq!(seen.owner, Some(alice.id().to_string()));
        assert_eq!(seen.request.max_workers, running.request.max_workers);
        assert!(
            seen.request.args.is_empty() && seen.ranks.is_empty() && seen.reason.is_empty(),
            "node {i} showed bob {seen:?}"
        );
        let refused = unauthorized(bob.logs(job).await, "bob's logs");
        assert!(refused.contains(&alice.id().to_string()), "{refused}");
        unauthorized(bob.outputs(job).await, "bob's outputs");
        unauthorized(
            bob.output_block(job, "0/x", 0, 16).await,
            "bob's output block",
        );
        unauthorized(bob.cancel(job).await, "bob's cancel");
        unauthorized(bob.resize(job, 4).await, "bob's resize");
        let listed = bob.list().await.unwrap();
        assert!(
            listed.iter().all(|s| s.request.args.is_empty()),
            "node {i} listed {listed:?}"
        );
    }

    // A proof in Alice's name signed with Bob's key, through node 1.
    let mut bob_there = connect(&grid.nodes[1], None, &bob).await;
    let nonce = match bob_there.call(&Request::Challenge { job }).await.unwrap() {
        Response::Challenge { nonce } => nonce,
        other => panic!("{other:?}"),
    };
    let logs = Request::Logs {
        job,
        from: 0,
        wait_secs: 0,
    };
    let mut forged = bob.prove(&nonce, 1, &logs);
    forged.user = alice.id().to_string();
    let refused = unauthorized(
        bob_there
            .call(&Request::Owner {
                proof: forged,
                request: Box::new(logs.clone()),
            })
            .await,
        "a forged proof",
    );
    assert!(
        refused.contains("not signed by the job's owner"),
        "{refused}"
    );

    // Alice's own proof, taken once and refused when replayed.
    let mut alice_there = connect(&grid.nodes[1], None, &alice).await;
    let nonce = match alice_there.call(&Request::Challenge { job }).await.unwrap() {
        Response::Challenge { nonce } => nonce,
        other => panic!("{other:?}"),
    };
    let proof = alice.prove(&nonce, 7, &logs);
    let owned = Request::Owner {
        proof,
        request: Box::new(logs.clone()),
    };
    match alice_there.call(&owned).await.unwrap() {
        Response::Logs(page) => assert!(!page.chunks.is_empty(), "{page:?}"),
        other => panic!("{other:?}"),
    }
    let refused = unauthorized(alice_there.call(&owned).await, "a replayed proof");
    assert!(refused.contains("used already"), "{refused}");

    // The status pages, the home's own and node 1's remote view of the
    // home, show whose the job is, and the remote one not its argument.
    let id = format!("{job:016x}");
    let alice_id = alice.id().to_string();
    let home_peer = grid.nodes[0].peer.clone();
    for (node, path) in [
        (0, "/jobs".to_string()),
        (0, format!("/jobs/{id}")),
        (1, format!("/peers/{home_peer}/jobs")),
        (1, format!("/peers/{home_peer}/jobs/{id}")),
    ] {
        let (code, page) = grid.nodes[node].http_get(&path).await;
        assert_eq!(code, 200, "{path} at node {node}: {page}");
        assert!(
            page.contains(&alice_id),
            "{path} at node {node} shows no owner: {page}"
        );
        if node == 1 {
            assert!(
                !page.contains("secret-of-alice"),
                "{path} at node 1: {page}"
            );
        }
    }

    // Alice, through node 1, sees and manages her job.
    let seen = alice_there.status(job).await.unwrap();
    assert_eq!(seen.request.args, vec!["secret-of-alice".to_string()]);
    assert!(!seen.ranks.is_empty());
    let logs = alice_there.logs(job).await.unwrap();
    assert!(common::stdout_of(&logs).contains("idle rank 0"), "{logs:?}");
    let cancelled = alice_there.cancel(job).await.unwrap();
    assert_eq!(cancelled.phase, JobPhase::Cancelled);
}

/// A submission signed on another connection (its nonce) is refused: a
/// node that saw it cannot submit the job again in its owner's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_submission_is_refused_on_another_connection() {
    let grid = two_nodes([None, None]);
    let alice = UserKey::generate();
    let mut client = connect(&grid.nodes[0], None, &alice).await;
    let module = common::wasm("idle");
    let job = secret_job();
    let other_nonce = [7u8; 16];
    let hash = |d: &[u8]| {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(d))
    };
    let message = zorilla_node::owner::submit_message(&other_nonce, &job, &hash(&module), &[]);
    let submit = Request::Submit {
        job,
        module,
        inputs: Vec::new(),
        owner: Some(Signed {
            user: alice.id().to_string(),
            signature: alice.sign(&message),
        }),
    };
    let refused = unauthorized(client.call(&submit).await, "a replayed submission");
    assert!(refused.contains("on this connection"), "{refused}");
}

/// A node's admin (a client with its token) sees and manages every job
/// its node is home to, whoever owns it; a token of another node makes
/// nobody an admin at the job's home.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_token_manages_its_jobs_and_no_other_nodes() {
    let (t0, t1) = ("token-of-node-zero-0123", "token-of-node-one-01234");
    let grid = two_nodes([Some(t0), Some(t1)]);
    let alice = UserKey::generate();
    let mut alice_home = connect(&grid.nodes[0], Some(t0), &alice).await;
    let job = alice_home
        .submit(secret_job(), common::wasm("idle"), Vec::new())
        .await
        .unwrap();
    // The admin of node 1, another user, asking through node 1.
    let mut admin1 = connect(&grid.nodes[1], Some(t1), &UserKey::generate()).await;
    let seen = wait_for(
        &mut admin1,
        job,
        Duration::from_secs(30),
        "the job running",
        |s| s.phase == JobPhase::Running,
    )
    .await;
    assert!(seen.request.args.is_empty(), "{seen:?}");
    unauthorized(admin1.logs(job).await, "another node's admin's logs");
    unauthorized(admin1.cancel(job).await, "another node's admin's cancel");
    // The admin of node 0, another user too.
    let mut admin0 = connect(&grid.nodes[0], Some(t0), &UserKey::generate()).await;
    let seen = admin0.status(job).await.unwrap();
    assert_eq!(seen.request.args, vec!["secret-of-alice".to_string()]);
    // The worker's first output reaches the home a moment after it runs.
    wait_first_log(&mut admin0, job).await;
    let cancelled = admin0.cancel(job).await.unwrap();
    assert_eq!(cancelled.phase, JobPhase::Cancelled);
}

/// A machine's owner runs only Alice's jobs: node 1 (two cores) names her
/// alone; the home (node 0) has no cores. Bob's job is declined by node 1,
/// and its home's report says why while it waits; Alice's job runs there
/// and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_owner_runs_only_the_users_it_names_and_the_home_says_why() {
    let (alice, bob) = (UserKey::generate(), UserKey::generate());
    let alice_id = alice.id().to_string();
    let grid = common::sites_grid_of(
        Net::Loopback,
        &[2],
        |i| if i == 0 { 0 } else { 2 },
        |i| {
            if i == 1 {
                vec!["--user".into(), alice_id.clone()]
            } else {
                Vec::new()
            }
        },
    );
    common::wait_for_neighbours(&grid.nodes, 1, Duration::from_secs(30)).await;
    let mut as_bob = connect(&grid.nodes[0], None, &bob).await;
    let bobs = as_bob
        .submit(common::nqueens(1, 8), common::wasm("nqueens"), Vec::new())
        .await
        .unwrap();
    let declined = "owner does not run this user's jobs";
    let status = wait_for(
        &mut as_bob,
        bobs,
        Duration::from_secs(30),
        "the home's report of node 1's decline",
        |s| {
            s.pending
                .as_ref()
                .is_some_and(|p| p.declines.get(declined).is_some_and(|n| *n >= 1))
        },
    )
    .await;
    assert_eq!(status.phase, JobPhase::Scheduling, "{status:?}");
    assert!(status.ranks.is_empty(), "nothing of Bob's runs: {status:?}");

    let mut as_alice = connect(&grid.nodes[0], None, &alice).await;
    let alices = as_alice
        .submit(common::nqueens(1, 8), common::wasm("nqueens"), Vec::new())
        .await
        .unwrap();
    let done = common::wait_completed(&mut as_alice, alices, Duration::from_secs(60)).await;
    assert_eq!(done.ranks.len(), 1);
    assert_eq!(done.ranks[&0].node, grid.nodes[1].peer, "{done:?}");
    let bobs_now = as_bob.status(bobs).await.unwrap();
    assert!(
        bobs_now.ranks.is_empty(),
        "still nothing of Bob's: {bobs_now:?}"
    );
}

/// Waits until `client` reads a log line of `job`: the worker's first
/// output reaches the home a moment after the job shows as running.
async fn wait_first_log(client: &mut zorilla_node::client::Client, job: u64) {
    let start = std::time::Instant::now();
    while client.logs(job).await.unwrap().is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no log line of job {job} within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

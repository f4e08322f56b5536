//! Native jobs (issue 32) against real nodes: whose native jobs a node
//! runs is its owner's choice, and every other node declines with a reason
//! its home shows.

mod common;

use std::time::Duration;

use common::{Net, wait_for};
use zorilla_core::advert::WorkKind;
use zorilla_node::client::{Client, ClientError};
use zorilla_node::owner::UserKey;
use zorilla_node::protocol::{ErrorKind, JobPhase, JobRequest};

async fn connect(node: &common::TestNode, user: &UserKey) -> Client {
    Client::connect_with(node.client.as_str(), None, "native test")
        .await
        .unwrap()
        .as_user(user.clone())
}

/// A native job of this machine's `true`.
fn native_true() -> (JobRequest, Vec<u8>) {
    let exe = std::fs::read("/bin/true").unwrap();
    let arch = zorilla_node::native::executable_arch(&exe).unwrap();
    let request = JobRequest {
        kind: WorkKind::Native(arch),
        lifetime_secs: 60,
        ..JobRequest::default()
    };
    (request, exe)
}

/// Waits until the home's report of `job` counts a decline for `reason`.
async fn wait_declined(client: &mut Client, job: u64, reason: &str) {
    let status = wait_for(client, job, Duration::from_secs(30), reason, |s| {
        s.pending
            .as_ref()
            .is_some_and(|p| p.declines.get(reason).is_some_and(|n| *n >= 1))
    })
    .await;
    assert_eq!(status.phase, JobPhase::Scheduling, "{status:?}");
    assert!(status.ranks.is_empty(), "nothing runs: {status:?}");
}

/// Three nodes: the home (node 0, no cores), node 1 whose owner runs no
/// native jobs (the default), node 2 whose owner runs Alice's. Bob's native
/// job is declined by both, each saying why; Alice's by node 1, and by
/// node 2 while it cannot sandbox native workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_node_whose_owner_lists_the_user_takes_a_native_job_and_the_home_says_why() {
    let (alice, bob) = (UserKey::generate(), UserKey::generate());
    let alice_id = alice.id().to_string();
    let grid = common::sites_grid_of(
        Net::Loopback,
        &[3],
        |i| if i == 0 { 0 } else { 1 },
        |i| {
            if i == 2 {
                vec!["--native-user".into(), alice_id.clone()]
            } else {
                Vec::new()
            }
        },
    );
    common::wait_for_neighbours(&grid.nodes, 2, Duration::from_secs(30)).await;
    let (request, exe) = native_true();

    let mut as_bob = connect(&grid.nodes[0], &bob).await;
    let bobs = as_bob
        .submit(request.clone(), exe.clone(), Vec::new())
        .await
        .unwrap();
    wait_declined(&mut as_bob, bobs, "owner runs no native jobs").await;
    wait_declined(
        &mut as_bob,
        bobs,
        "owner does not run this user's native jobs",
    )
    .await;

    let mut as_alice = connect(&grid.nodes[0], &alice).await;
    let alices = as_alice.submit(request, exe, Vec::new()).await.unwrap();
    wait_declined(&mut as_alice, alices, "owner runs no native jobs").await;
    wait_declined(
        &mut as_alice,
        alices,
        "the node cannot enforce the sandbox of native jobs",
    )
    .await;
}

/// A native executable is not taken for a WebAssembly module, nor a
/// module for a native executable: the submission is refused, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_whose_module_is_not_of_its_kind_is_refused_with_a_sentence() {
    let grid = common::grid(1, 1);
    let mut client = connect(&grid.nodes[0], &UserKey::generate()).await;
    let (native, exe) = native_true();
    let refused = |r: Result<u64, ClientError>| match r {
        Err(ClientError::Node {
            kind: ErrorKind::BadRequest,
            message,
        }) => message,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let message = refused(client.submit(JobRequest::default(), exe, Vec::new()).await);
    assert!(message.contains("is a native executable"), "{message}");
    let message = refused(
        client
            .submit(native, common::wasm("nqueens"), Vec::new())
            .await,
    );
    assert!(message.contains("not an ELF executable"), "{message}");
}

//! A closed grid of real `zorilla-node` processes on loopback, set up with
//! the commands an operator runs (`zorilla-node grid init`, `id`, `grid
//! issue`, `grid revoke`, `zorilla revoke`): members run a job together; a
//! node without a credential never joins and nothing of the job reaches
//! it; a node refuses to start with an expired credential; a revoked
//! member is cut off; the runs of a replicated job go to nodes of distinct
//! owners (who vouches for a node: itself, or the member that invited it).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{TestNode, nqueens, wait_completed, wait_for_neighbours, wasm};

fn node_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zorilla-node"))
}

/// Runs `zorilla-node` with `args`; returns its stdout, failing on error.
fn run(args: &[&str]) -> String {
    let out = node_bin().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "zorilla-node {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `zorilla-node id` in state directory `dir`.
fn peer_id(dir: &Path) -> String {
    run(&["--state-dir", dir.to_str().unwrap(), "id"])
        .trim()
        .to_string()
}

/// A credential for the node of `dir`, written next to it.
fn issue(key: &Path, dir: &Path, days: &str) -> PathBuf {
    issue_with(key, dir, days, &[])
}

/// [`issue`] with `more` arguments of `grid issue` (`--may-invite`).
fn issue_with(key: &Path, dir: &Path, days: &str, more: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let out = dir.with_extension("cred");
    let _ = std::fs::remove_file(&out);
    let peer = peer_id(dir);
    let mut args = vec![
        "grid",
        "issue",
        "--key",
        key.to_str().unwrap(),
        "--peer",
        &peer,
        "--days",
        days,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(more);
    run(&args);
    out
}

fn with_credential(credential: &Path) -> Vec<String> {
    vec!["--credential".into(), credential.display().to_string()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_run_a_job_and_a_node_without_a_credential_gets_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("grid.key");
    let init = run(&["grid", "init", "--key", key.to_str().unwrap()]);
    assert!(init.contains("grid_key = "), "{init}");
    let net = format!("closed-{}", std::process::id());

    let dirs: Vec<PathBuf> = (0..3).map(|i| tmp.path().join(format!("m{i}"))).collect();
    let creds: Vec<PathBuf> = dirs.iter().map(|d| issue(&key, d, "30")).collect();
    let first = TestNode::start_with(
        &dirs[0],
        &net,
        None,
        2,
        "127.0.0.1",
        &with_credential(&creds[0]),
    );
    let mut members = vec![first];
    for i in 1..3 {
        let peer = members[0].listen.clone();
        members.push(TestNode::start_with(
            &dirs[i],
            &net,
            Some(&peer),
            2,
            "127.0.0.1",
            &with_credential(&creds[i]),
        ));
    }
    // A node of the same network without a credential, told of every
    // member.
    let stranger_dir = tmp.path().join("stranger");
    let stranger = TestNode::start_with(
        &stranger_dir,
        &net,
        Some(&members[0].listen),
        4,
        "127.0.0.1",
        &["--peer".into(), members[1].listen.clone()],
    );
    wait_for_neighbours(&members, 2, Duration::from_secs(30)).await;

    // `zorilla node` says which kind of grid each is in.
    let info = members[0].client().await.node_info().await.unwrap();
    let grid = info.grid.expect("a closed grid");
    assert_eq!(grid.fingerprint.len(), 19);
    let open = stranger.client().await.node_info().await.unwrap();
    assert!(open.grid.is_none());
    let shown = Command::new(env!("CARGO_BIN_EXE_zorilla"))
        .args(["--node", &stranger.client, "node"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("open: anyone who can reach this node may join"),
        "{shown}"
    );
    // And so do their status pages.
    let (code, page) = members[0].http_get("/").await;
    assert_eq!(code, 200);
    assert!(
        page.contains("Only nodes with a credential of grid key"),
        "{page}"
    );
    assert!(page.contains(&grid.fingerprint), "{page}");
    let (_, page) = stranger.http_get("/").await;
    assert!(page.contains("Anyone who can reach this node"), "{page}");

    // A job needing more cores than the members have together would wait
    // for the stranger's: 6 workers fit the members' 6 cores exactly.
    let mut client = members[0].client().await;
    let job = client
        .submit(nqueens(6, 8), wasm("nqueens"), Vec::new())
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, Duration::from_secs(60)).await;
    let stranger_info = stranger.client().await.node_info().await.unwrap();
    assert_eq!(status.ranks.len(), 6);
    assert!(
        status.ranks.values().all(|r| r.node != stranger.peer),
        "{status:?}"
    );
    assert_eq!(stranger_info.neighbours, 0, "{stranger_info:?}");
    assert!(stranger_info.running.is_empty());
    // It never got a connection to any member past the gate.
    let peers = stranger.client().await.peers().await.unwrap();
    assert!(peers.iter().all(|p| !p.connected), "{peers:?}");
    assert_eq!(stranger_info.peers_measured, 0);

    // Revoke member 2: the members keep it and cut it off.
    let revocation = tmp.path().join("m2.revocation");
    run(&[
        "grid",
        "revoke",
        "--key",
        key.to_str().unwrap(),
        "--peer",
        &members[2].peer,
        "--out",
        revocation.to_str().unwrap(),
    ]);
    let handed = Command::new(env!("CARGO_BIN_EXE_zorilla"))
        .args([
            "--node",
            &members[0].client,
            "revoke",
            revocation.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        handed.status.success(),
        "{}",
        String::from_utf8_lossy(&handed.stderr)
    );
    let start = Instant::now();
    let mut revoked = members[2].client().await;
    loop {
        let peers = revoked.peers().await.unwrap();
        if peers.iter().all(|p| !p.connected) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the revoked member still has connections: {peers:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(stranger);
}

#[test]
fn a_node_refuses_to_start_with_an_expired_credential_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("grid.key");
    run(&["grid", "init", "--key", key.to_str().unwrap()]);
    let dir = tmp.path().join("late");
    let credential = issue(&key, &dir, "0");
    let out = node_bin()
        .args(TestNode::args(
            &dir,
            "closed-expired",
            None,
            1,
            "127.0.0.1",
            &with_credential(&credential),
        ))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("expired"), "{stderr}");
    // And with a credential of another node.
    let other = tmp.path().join("other");
    let theirs = issue(&key, &other, "30");
    let out = node_bin()
        .args(TestNode::args(
            &dir,
            "closed-expired",
            None,
            1,
            "127.0.0.1",
            &with_credential(&theirs),
        ))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("names peer"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_of_a_replicated_job_go_to_nodes_of_distinct_owners() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("grid.key");
    run(&["grid", "init", "--key", key.to_str().unwrap()]);
    let net = format!("owners-{}", std::process::id());
    // Member x (the home, no cores) may invite: it vouches for a and b.
    // Member c is vouched for by the grid key alone.
    let dir = |name: &str| tmp.path().join(name);
    let x_cred = issue_with(&key, &dir("x"), "30", &["--may-invite"]);
    let invite = |name: &str| -> PathBuf {
        std::fs::create_dir_all(dir(name)).unwrap();
        let out = dir(name).with_extension("cred");
        run(&[
            "--state-dir",
            dir("x").to_str().unwrap(),
            "grid",
            "invite",
            "--credential",
            x_cred.to_str().unwrap(),
            "--peer",
            &peer_id(&dir(name)),
            "--out",
            out.to_str().unwrap(),
        ]);
        out
    };
    let (a_cred, b_cred) = (invite("a"), invite("b"));
    let c_cred = issue(&key, &dir("c"), "30");
    let mut nodes = vec![TestNode::start_with(
        &dir("x"),
        &net,
        None,
        0,
        "127.0.0.1",
        &with_credential(&x_cred),
    )];
    for (name, cred) in [("a", &a_cred), ("b", &b_cred), ("c", &c_cred)] {
        nodes.push(TestNode::start_with(
            &dir(name),
            &net,
            Some(&nodes[0].listen.clone()),
            1,
            "127.0.0.1",
            &with_credential(cred),
        ));
    }
    let c = nodes[3].peer.clone();
    wait_for_neighbours(&nodes, 3, Duration::from_secs(30)).await;
    let mut client = nodes[0].client().await;
    // Two runs each: one on a or b (one owner's), the other on c. Without
    // owners, any two of the three nodes would do.
    for _ in 0..3 {
        let request = zorilla_node::protocol::JobRequest {
            lifetime_secs: 60,
            deterministic: Some(7),
            replicas: 2,
            ..zorilla_node::protocol::JobRequest::default()
        };
        let job = client
            .submit(request, wasm("detcheck"), Vec::new())
            .await
            .unwrap();
        let status = wait_completed(&mut client, job, Duration::from_secs(60)).await;
        let used: Vec<&String> = status.ranks.values().map(|r| &r.node).collect();
        assert_eq!(used.len(), 2, "{status:?}");
        assert!(
            used.contains(&&c),
            "both runs on nodes x vouches for: {status:?}"
        );
    }
}

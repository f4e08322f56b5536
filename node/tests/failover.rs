//! A job outlives its home (issue 16), with real `zorilla-node` processes
//! on 127.0.0.1: the home of a running job is killed (-9), one of the
//! job's copies takes it over, the workers keep running, and the job
//! completes with the right answer, its status and logs whole at the new
//! home.

mod common;

use std::time::{Duration, Instant};

use common::{TestNode, nqueens, stdout_of, wait_completed, wasm};
use zorilla_node::protocol::JobPhase;

/// A 6-node grid: the home (node 0, no cores of its own: a user's machine
/// that only submits) and five 2-core nodes. An 8-worker nqueens job runs
/// on them; once all 8 run, the home is killed (-9). A copy takes over,
/// the job completes with the right count, and the new home shows every
/// rank's end and the whole log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_of_a_running_job_is_killed_and_a_copy_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let network = format!("test-{}", std::process::id());
    let home = TestNode::start(&dir.path().join("n0"), &network, None, 0);
    let bootstrap = home.listen.clone();
    let mut nodes = vec![home];
    for i in 1..6 {
        nodes.push(TestNode::start(
            &dir.path().join(format!("n{i}")),
            &network,
            Some(&bootstrap),
            2,
        ));
    }
    let mut client = nodes[0].client().await;
    let mut request = nqueens(8, 13);
    request.lifetime_secs = 120;
    let job = client
        .submit(request, wasm("nqueens"), vec![])
        .await
        .unwrap();
    // Every worker runs (its node fetched the files and started it).
    let start = Instant::now();
    'running: loop {
        let mut running = 0;
        for node in &nodes[1..] {
            let info = node.client().await.node_info().await.unwrap();
            running += info.running.get(&job).map_or(0, Vec::len);
        }
        if running == 8 {
            break 'running;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never ran 8 workers: {:?}",
            client.status(job).await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    nodes[0].kill();
    let killed = Instant::now();

    // Some other node becomes the job's home.
    let mut clients = Vec::new();
    for node in &nodes[1..] {
        clients.push(node.client().await);
    }
    let (new_home, took) = 'found: loop {
        for (i, c) in clients.iter_mut().enumerate() {
            if let Ok(status) = c.status(job).await
                && !status.phase.is_terminal()
            {
                break 'found (i, killed.elapsed());
            }
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "no node took the job over within 30 s; the nodes' logs:{}",
            nodes[1..]
                .iter()
                .map(|n| format!("\n--- {}\n{}", n.peer, n.log_tail()))
                .collect::<String>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!(
        "node {} took the job over {took:?} after the kill",
        new_home + 1
    );
    let status = wait_completed(&mut clients[new_home], job, Duration::from_secs(120)).await;
    assert_eq!(status.ranks.len(), 8, "{status:?}");
    assert!(
        status.ranks.values().all(|r| r.exit_status == Some(0)),
        "{status:?}"
    );
    let logs = clients[new_home].logs(job).await.unwrap();
    let out = stdout_of(&logs);
    assert!(
        out.contains("nqueens N=13 ranks=8 solutions=73712"),
        "the answer at the new home: {out:?}"
    );
    assert_eq!(status.phase, JobPhase::Completed);
}

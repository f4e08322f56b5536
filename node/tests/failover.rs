//! A job outlives its home (issue 16), with real `zorilla-node` processes
//! on loopback: the home of a running job is killed (-9), one of the
//! job's copies takes it over, the workers keep running, and the job
//! completes with the right answer, its status and logs whole at the new
//! home. A home frozen, and one cut off by a network partition (hosts in
//! network namespaces), steps down when it comes back; a job that had no
//! worker yet survives its home too.

mod common;

use std::time::{Duration, Instant};

use common::{
    Grid, Net, TestNode, grid_with_idle_home, grid_with_idle_home_on, nqueens, sites_grid_env,
    stdout_of, wait_completed, wasm,
};
use zorilla_node::client::ClientError;
use zorilla_node::protocol::{ErrorKind, JobPhase, JobStatus};

/// The tests of this file run one at a time: each kills, freezes or cuts
/// off a home and times its recovery (leases, probes, redials) on a machine
/// of two cores, and two of them at once starve each other's recovery (seen:
/// a partition healing with the old home still cut off 30 s later while
/// another test's grid ran beside it; alone, every one passes).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A 6-node grid: the home (node 0, no cores of its own: a user's machine
/// that only submits) and five 2-core nodes. A job of six ranks that run
/// 12 s each (`stagger`) runs on them; once all six run, the home is killed
/// (-9). A copy takes the job over while it still runs, within
/// [`TAKEOVER_BOUND`], and finishes it: its workers kept running through
/// the takeover (every rank's log is whole and once: no worker started
/// again), and the new home shows every rank's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_of_a_running_job_is_killed_and_a_copy_finishes_it() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut grid = grid_with_idle_home(5, 2);
    let nodes = &mut grid.nodes;
    let mut client = nodes[0].client().await;
    let job = submit_stagger(&mut client, 0, 12).await;
    wait_six_ranks_running(&mut client, job).await;
    let (mut clients, new_home, took) = kill_home_for_a_copy(nodes, job).await;
    eprintln!(
        "node {} took the job over {took:?} after the kill",
        new_home + 1
    );
    completed_once(&mut clients[new_home], job).await;
}

/// Kills the home (node 0) of a running `job` (-9) and waits, through
/// the other nodes, until some other node is its home while it still runs
/// (within [`TAKEOVER_BOUND`]): a client of each other node, the new
/// home's place among them, and how long after the kill it showed.
async fn kill_home_for_a_copy(
    nodes: &mut [TestNode],
    job: u64,
) -> (Vec<zorilla_node::client::Client>, usize, Duration) {
    nodes[0].kill();
    let killed = Instant::now();
    let old_home = nodes[0].peer.clone();
    let mut clients = Vec::new();
    for node in &nodes[1..] {
        clients.push(node.client().await);
    }
    let (new_home, took) = 'found: loop {
        for c in clients.iter_mut() {
            if let Ok(status) = c.status(job).await
                && let Some(home) = status.home.as_deref()
                && home != old_home
                && let Some(i) = nodes[1..].iter().position(|n| n.peer == home)
            {
                assert!(
                    !status.phase.is_terminal(),
                    "the job ended before the takeover showed: {status:?}"
                );
                break 'found (i, killed.elapsed());
            }
        }
        assert!(
            killed.elapsed() < TAKEOVER_BOUND,
            "no node took the job over within {TAKEOVER_BOUND:?}; the nodes' logs:{}",
            nodes[1..]
                .iter()
                .map(|n| format!("\n--- {}\n{}", n.peer, n.log_tail()))
                .collect::<String>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    (clients, new_home, took)
}

/// Waits until the `stagger` job of six completes (asking through
/// `client`), and checks every rank ended with status 0 and its log is
/// whole and once (no worker started again).
async fn completed_once(client: &mut zorilla_node::client::Client, job: u64) {
    let status = wait_completed(client, job, Duration::from_secs(120)).await;
    assert_eq!(status.ranks.len(), 6, "{status:?}");
    assert!(
        status.ranks.values().all(|r| r.exit_status == Some(0)),
        "every rank's end: {status:?}"
    );
    let logs = client.logs(job).await.unwrap();
    for rank in 0..6u32 {
        let of_rank: Vec<_> = logs.iter().filter(|l| l.rank == rank).cloned().collect();
        assert_eq!(
            stdout_of(&of_rank),
            format!("rank {rank} of 6\nrank {rank} done\n"),
            "rank {rank}'s log: whole, and its worker started once"
        );
    }
}

/// The rule of when a home's grant goes out (issue 30): only once a copy
/// holds it in the job's log, so that a copy that takes the job over knows
/// of every worker the home started. A home whose replica messages reach
/// the job's copies a second late (a test switch:
/// `ZORILLA_TEST_REPLICA_DELAY_MS`) runs a job of six `stagger` ranks that
/// wait 8 s; as soon as all six have said they run, it is killed (-9). The
/// copy that takes the job over knows where every rank runs: each worker
/// runs on and ends once (every rank's log is whole and says it started
/// once), and the job completes with every rank's end and output. (With
/// the grants sent at once, before a copy held them, the workers ran
/// before any copy held the job's log, and no node could take the job
/// over: this test fails so.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_killed_right_after_its_grants_leaves_no_rank_to_start_again() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let delay = |i: usize| {
        if i == 0 {
            vec![(
                "ZORILLA_TEST_REPLICA_DELAY_MS".to_string(),
                "1000".to_string(),
            )]
        } else {
            Vec::new()
        }
    };
    let mut grid = sites_grid_env(
        Net::Loopback,
        &[4],
        |i| if i == 0 { 0 } else { 2 },
        |_| Vec::new(),
        delay,
    );
    let nodes = &mut grid.nodes;
    let mut client = nodes[0].client().await;
    let job = submit_stagger(&mut client, 0, 8).await;
    wait_six_ranks_running(&mut client, job).await;
    let (mut clients, new_home, _) = kill_home_for_a_copy(nodes, job).await;
    completed_once(&mut clients[new_home], job).await;
    let outputs = clients[new_home].outputs(job).await.unwrap();
    assert_eq!(outputs.len(), 6, "every rank's output: {outputs:?}");
}

/// How soon a copy must have taken a job over after its home died: the
/// lease and the election take about 2 s (BENCHMARKS.md, "Failover: time
/// to a new home"); the rest is room for a loaded machine of two cores.
const TAKEOVER_BOUND: Duration = Duration::from_secs(10);

/// A 5-node grid: the home (no cores) and four 2-core nodes. A job of 6
/// `stagger` ranks: 3 end at once (their outputs and logs reach the home),
/// 3 run on for a while. Then the home is killed (-9): the new home gets
/// everything again from the nodes that ran the ranks, and every node of
/// the grid answers for the job (status, logs, outputs) by asking it. The
/// old home, restarted, says the job is held elsewhere and runs nothing of
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_home_is_lost_every_node_shows_the_job_whole() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut grid = grid_with_idle_home(4, 2);
    let nodes = &mut grid.nodes;
    let mut client = nodes[0].client().await;
    let job = submit_stagger(&mut client, 3, 6).await;
    // Three ranks ended at the home, with their outputs; three run.
    let start = Instant::now();
    loop {
        let status = client.status(job).await.unwrap();
        let ended = status
            .ranks
            .values()
            .filter(|r| r.exit_status == Some(0))
            .count();
        let outputs = client.outputs(job).await.unwrap().len();
        if ended == 3 && outputs == 3 && status.running_workers() == 3 {
            break;
        }
        assert!(!status.phase.is_terminal(), "{status:?}");
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "three ranks never ended with their outputs while three ran: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    nodes[0].kill();

    let old_home = nodes[0].peer.clone();
    // Until a copy has taken the job over (about 2 s), the job's home
    // cannot be reached; then it completes.
    let mut asked = nodes[1].client().await;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = status_through(&mut asked, job).await
            && status.phase.is_terminal()
        {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the job never completed at its new home"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    let new_home = status
        .home
        .clone()
        .expect("the status names the job's home");
    assert_ne!(new_home, old_home);
    assert_eq!(
        status.moved_from.as_deref(),
        Some(old_home.as_str()),
        "{status:?}"
    );
    assert_eq!(status.ranks.len(), 6);
    // Every surviving node answers for the job, all alike.
    for node in &nodes[1..] {
        let mut c = node.client().await;
        let s = c.status(job).await.unwrap();
        assert_eq!(s.phase, JobPhase::Completed, "through {}: {s:?}", node.peer);
        assert_eq!(s.home.as_deref(), Some(new_home.as_str()));
        let logs = c.logs(job).await.unwrap();
        for rank in 0..6u32 {
            let of_rank: Vec<_> = logs.iter().filter(|l| l.rank == rank).cloned().collect();
            let want = if rank < 3 {
                format!("rank {rank} of 6\n")
            } else {
                format!("rank {rank} of 6\nrank {rank} done\n")
            };
            assert_eq!(
                stdout_of(&of_rank),
                want,
                "rank {rank}'s log, once and whole, through {}",
                node.peer
            );
        }
        let files = c.outputs(job).await.unwrap();
        assert_eq!(files.len(), 6, "outputs through {}: {files:?}", node.peer);
        for rank in 0..6u32 {
            let data = c
                .read_output(job, &format!("{rank}/rank.txt"))
                .await
                .unwrap();
            assert_eq!(data, format!("rank {rank} of 6\n").into_bytes());
        }
    }

    // The old home, restarted (joining through a node of the grid: it was
    // the first, and listens on a new port), hands the job to its new home.
    let peer = nodes[1].listen.clone();
    nodes[0].args.extend(["--peer".to_string(), peer]);
    nodes[0].restart();
    let mut old = nodes[0].client().await;
    let start = Instant::now();
    loop {
        let s = old.status(job).await.unwrap();
        if s.home.as_deref() == Some(new_home.as_str()) {
            assert_eq!(s.phase, JobPhase::Completed, "{s:?}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the restarted home still answers for the job itself: {s:?}\n{}",
            nodes[0].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let info = old.node_info().await.unwrap();
    assert!(info.running.is_empty(), "{info:?}");
}

/// Submits a job of 6 `stagger` ranks (examples/src/stagger.c): the first
/// `early` end at once, the others after `seconds` seconds.
async fn submit_stagger(
    client: &mut zorilla_node::client::Client,
    early: u32,
    seconds: u32,
) -> u64 {
    let mut request = nqueens(6, 0);
    request.args = vec![early.to_string(), seconds.to_string()];
    request.lifetime_secs = 120;
    client
        .submit(request, wasm("stagger"), vec![])
        .await
        .unwrap()
}

/// Waits until every rank of a `stagger` job of six has said it runs (the
/// job still under way).
async fn wait_six_ranks_running(client: &mut zorilla_node::client::Client, job: u64) {
    let start = Instant::now();
    loop {
        let status = client.status(job).await.unwrap();
        let logged = stdout_of(&client.logs(job).await.unwrap());
        if (0..6).all(|r| logged.contains(&format!("rank {r} of 6"))) {
            break;
        }
        assert!(!status.phase.is_terminal(), "{status:?}");
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the six ranks never all ran: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `signal` to `node`'s process (`STOP` freezes it: its peers see it
/// go silent, as behind a partition; `CONT` brings it back).
fn signal(node: &TestNode, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), node.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} failed");
}

/// The status of `job` through `client`, waiting out the seconds when its
/// home cannot be reached (a takeover under way).
async fn status_through(client: &mut zorilla_node::client::Client, job: u64) -> Option<JobStatus> {
    match client.status(job).await {
        Ok(status) => Some(status),
        Err(ClientError::Node {
            kind: ErrorKind::Unreachable,
            ..
        }) => None,
        Err(e) => panic!("asking for the job: {e}"),
    }
}

/// How a test cuts the home off the grid.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// Frozen with SIGSTOP: its connections stay open but it says nothing.
    Freeze,
    /// A network partition: the home runs on a host of its own (a network
    /// namespace) whose port on the site's bridge goes down, so nothing
    /// passes either way until it comes back up.
    Link,
}

/// The home of a running job is cut off from the grid (frozen with
/// SIGSTOP: its connections stay open but it says nothing, as behind a
/// partition) until a copy has taken the job over, then comes back
/// (SIGCONT) believing it is still the home. It learns of the newer epoch
/// and steps down: afterwards every node, the old home included, names the
/// same home, and the job completes once, every rank's log whole and once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_cut_off_and_back_steps_down_and_the_job_has_one_home() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    home_cut_off_and_back(Cut::Freeze).await;
}

/// The same across a real network partition: five hosts on one site's
/// bridge, the home's port goes down until a copy took the job over, then
/// up again; the partition heals with one home for the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_partition_heals_with_one_home_for_the_job() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    home_cut_off_and_back(Cut::Link).await;
}

async fn home_cut_off_and_back(cut: Cut) {
    let mut grid = match cut {
        Cut::Freeze => grid_with_idle_home(4, 2),
        Cut::Link => grid_with_idle_home_on(Net::Hosts, 4, 2),
    };
    let cut_off = |grid: &Grid, off: bool| match cut {
        Cut::Freeze => signal(&grid.nodes[0], if off { "STOP" } else { "CONT" }),
        Cut::Link => {
            let hosts = grid.hosts.as_ref().expect("a grid on hosts");
            hosts.set_link(&hosts.hosts[0], !off);
        }
    };
    let nodes = &mut grid.nodes;
    let mut client = nodes[0].client().await;
    let job = submit_stagger(&mut client, 0, 12).await;
    wait_six_ranks_running(&mut client, job).await;
    let old_home = nodes[0].peer.clone();
    cut_off(&grid, true);
    let nodes = &mut grid.nodes;

    let mut asked = nodes[1].client().await;
    let start = Instant::now();
    let new_home = loop {
        if let Some(status) = status_through(&mut asked, job).await
            && let Some(home) = status.home
            && home != old_home
        {
            break home;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no copy took the job over while its home was cut off"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    cut_off(&grid, false);
    let nodes = &mut grid.nodes;

    // The old home steps down: it answers with the new home's status.
    let mut old = nodes[0].client().await;
    let start = Instant::now();
    loop {
        let s = status_through(&mut old, job).await;
        if s.as_ref().and_then(|s| s.home.as_deref()) == Some(new_home.as_str()) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the old home still answers for the job itself: {s:?}\n{}",
            nodes[0].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = loop {
        let s = status_through(&mut asked, job).await;
        if let Some(s) = s.filter(|s| s.phase.is_terminal()) {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "never completed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    for node in nodes.iter() {
        let mut c = node.client().await;
        let s = status_through(&mut c, job).await.expect("the home answers");
        assert_eq!(
            s.home.as_deref(),
            Some(new_home.as_str()),
            "through {}",
            node.peer
        );
        assert_eq!(s.phase, JobPhase::Completed);
        let logs = c.logs(job).await.unwrap();
        for rank in 0..6u32 {
            let of_rank: Vec<_> = logs.iter().filter(|l| l.rank == rank).cloned().collect();
            assert_eq!(
                stdout_of(&of_rank),
                format!("rank {rank} of 6\nrank {rank} done\n"),
                "rank {rank}'s log through {}",
                node.peer
            );
        }
    }
    assert!(
        std::fs::read_to_string(nodes[0].dir.join("node.log"))
            .unwrap_or_default()
            .contains("stepped down"),
        "the old home says it stepped down"
    );
}

/// A job that never got a worker outlives its home too: the home (no
/// cores) and two 1-core nodes with 1 GiB each; the job needs 2 GiB per
/// worker, so it waits. Its home placed copies on the two near nodes, and
/// they fetched its module (it is in their file cache: the module is held
/// by three nodes). The home is killed (-9); a copy takes the job over.
/// Then a node with 4 GiB joins: the new home places the worker there,
/// which fetches the module from the new home, and the job completes with
/// the right answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_for_workers_outlives_its_home() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    use sha2::{Digest, Sha256};
    let mut grid = grid_with_idle_home(2, 1);
    let mut client = grid.nodes[0].client().await;
    let mut request = nqueens(1, 8);
    request.memory_mib = 2048;
    request.lifetime_secs = 300;
    let module = wasm("nqueens");
    let sha256 = hex::encode(Sha256::digest(&module));
    let job = client.submit(request, module, vec![]).await.unwrap();

    // Both near nodes hold a copy, with the module.
    let start = Instant::now();
    for node in &grid.nodes[1..] {
        let cached = node.dir.join("files").join(&sha256);
        while !cached.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{} never fetched the job's module as its copy; its log:\n{}",
                node.peer,
                node.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let status = client.status(job).await.unwrap();
    assert!(
        !status.phase.is_terminal() && status.running_workers() == 0,
        "no node can run the job yet: {status:?}"
    );
    grid.nodes[0].kill();
    let old_home = grid.nodes[0].peer.clone();

    let mut asked = grid.nodes[1].client().await;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = status_through(&mut asked, job).await
            && status.home.as_deref() != Some(old_home.as_str())
        {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no copy took the waiting job over; the nodes' logs:{}",
            grid.nodes[1..]
                .iter()
                .map(|n| format!("\n--- {}\n{}", n.peer, n.log_tail()))
                .collect::<String>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        !status.phase.is_terminal() && status.running_workers() == 0,
        "{status:?}"
    );
    assert_eq!(status.moved_from.as_deref(), Some(old_home.as_str()));

    // A node that can run it joins (through node 1).
    let dir = grid._dir.path().join("big");
    let mut args = TestNode::args(
        &dir,
        &grid.network,
        Some(&grid.nodes[1].listen),
        1,
        "127.0.0.1",
        &[],
    );
    let memory = args.iter().position(|a| a == "--memory-mib").unwrap() + 1;
    args[memory] = "4096".into();
    grid.nodes.push(TestNode::spawn(&dir, args));
    let status = wait_completed(&mut asked, job, Duration::from_secs(120)).await;
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    let logs = asked.logs(job).await.unwrap();
    assert!(
        stdout_of(&logs).contains("nqueens N=8 ranks=1 solutions=92"),
        "{:?}",
        stdout_of(&logs)
    );
}

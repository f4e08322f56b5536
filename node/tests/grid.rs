//! End-to-end tests: real `zorilla-node` processes on 127.0.0.1 (ports
//! chosen by the OS, temp state directories), driven through the client
//! library. Every wait has a deadline; nothing sleeps a fixed time to let
//! things happen.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zorilla_node::client::Client;
use zorilla_node::protocol::{JobPhase, JobRequest, JobStatus};

struct TestNode {
    child: Child,
    dir: PathBuf,
    client: String,
    listen: String,
    peer: String,
    args: Vec<String>,
}

impl TestNode {
    fn start(dir: &Path, network: &str, peer: Option<&str>, cores: u32) -> TestNode {
        Self::start_with(dir, network, peer, cores, "127.0.0.1", &[])
    }

    /// Starts a node listening on loopback address `ip`, port 0 (chosen by
    /// the OS), with `extra` arguments.
    fn start_with(
        dir: &Path,
        network: &str,
        peer: Option<&str>,
        cores: u32,
        ip: &str,
        extra: &[String],
    ) -> TestNode {
        let mut args = vec![
            "--state-dir".to_string(),
            dir.display().to_string(),
            "--network".into(),
            network.into(),
            "--client".into(),
            "127.0.0.1:0".into(),
            "--listen".into(),
            format!("/ip4/{ip}/tcp/0"),
            "--mdns".into(),
            "false".into(),
            "--cores".into(),
            cores.to_string(),
            "--memory-mib".into(),
            "1024".into(),
            "--disk-mib".into(),
            "1000".into(),
        ];
        if let Some(peer) = peer {
            args.push("--peer".into());
            args.push(peer.into());
        }
        args.extend_from_slice(extra);
        Self::spawn(dir, args)
    }

    fn spawn(dir: &Path, args: Vec<String>) -> TestNode {
        std::fs::create_dir_all(dir).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("node.log"))
            .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_zorilla-node"))
            .args(&args)
            .env("RUST_LOG", "info,zorilla_overlay=warn,libp2p=warn")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start zorilla-node");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("zorilla-node ready") {
                    let _ = tx.try_send(line);
                }
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                let log = std::fs::read_to_string(dir.join("node.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                panic!(
                    "node in {} did not get ready; its log ends:\n{}",
                    dir.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            });
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .unwrap()
                .to_string()
        };
        let listen = field("listen").split(',').next().unwrap().to_string();
        TestNode {
            child,
            dir: dir.to_owned(),
            client: field("client"),
            listen,
            peer: field("peer"),
            args,
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn restart(&mut self) {
        self.kill();
        // The old value's drop kills the already dead process again: harmless.
        *self = TestNode::spawn(&self.dir, self.args.clone());
    }

    async fn client(&self) -> Client {
        Client::connect(self.client.as_str()).await.unwrap()
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Grid {
    _dir: tempfile::TempDir,
    nodes: Vec<TestNode>,
}

fn grid(n: usize, cores: u32) -> Grid {
    let dir = tempfile::tempdir().unwrap();
    let network = format!("test-{}", std::process::id());
    let first = TestNode::start(&dir.path().join("n0"), &network, None, cores);
    let bootstrap = first.listen.clone();
    let mut nodes = vec![first];
    for i in 1..n {
        let node = TestNode::start(
            &dir.path().join(format!("n{i}")),
            &network,
            Some(&bootstrap),
            cores,
        );
        nodes.push(node);
    }
    Grid { _dir: dir, nodes }
}

fn wasm(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../examples/wasm/{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Waits until the job ends and checks that it completed.
async fn wait_completed(client: &mut Client, job: u64, deadline: Duration) -> JobStatus {
    let status = wait_for(client, job, deadline, "completion", |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    status
}

async fn wait_for(
    client: &mut Client,
    job: u64,
    deadline: Duration,
    what: &str,
    done: impl Fn(&JobStatus) -> bool,
) -> JobStatus {
    let start = Instant::now();
    loop {
        let status = client.status(job).await.unwrap();
        if done(&status) {
            return status;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out waiting for {what}; last status {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn stdout_of(logs: &[zorilla_node::protocol::LogChunk]) -> String {
    logs.iter()
        .filter(|c| !c.stderr)
        .map(|c| String::from_utf8_lossy(&c.data).into_owned())
        .collect()
}

fn nqueens(workers: u32, n: u32) -> JobRequest {
    JobRequest {
        min_workers: workers,
        max_workers: workers,
        cores: 1,
        memory_mib: 64,
        lifetime_secs: 30,
        args: vec![n.to_string()],
        ..JobRequest::default()
    }
}

/// 8 nodes of one core each: nqueens with 8 workers lands on all of them,
/// the answer and every log arrive at the home; then the home is killed
/// (-9) and restarted and still has the job and its outputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nqueens_on_eight_nodes_then_home_restart() {
    let mut grid = grid(8, 1);
    let mut client = grid.nodes[0].client().await;
    let job = client
        .submit(nqueens(8, 12), wasm("nqueens"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, Duration::from_secs(60)).await;
    assert_eq!(status.ranks.len(), 8);
    let nodes: std::collections::BTreeSet<&String> =
        status.ranks.values().map(|r| &r.node).collect();
    assert_eq!(nodes.len(), 8, "one worker per one-core node: {status:?}");
    let logs = client.logs(job).await.unwrap();
    let out = stdout_of(&logs);
    assert!(
        out.contains("nqueens N=12 ranks=8 solutions=14200"),
        "{out:?}"
    );

    // kill -9 and restart the home: the job and its logs are still there.
    grid.nodes[0].restart();
    let mut client = grid.nodes[0].client().await;
    let again = client.status(job).await.unwrap();
    assert_eq!(again.phase, JobPhase::Completed);
    assert_eq!(again.ranks, status.ranks);
    let out = stdout_of(&client.logs(job).await.unwrap());
    assert!(out.contains("solutions=14200"), "{out:?}");
}

/// A job needing more workers than the grid has waits with a reason, then
/// expires with one; a bad module is refused at submit with a clear error
/// and the node keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_job_pends_then_expires_and_bad_input_is_refused() {
    let grid = grid(2, 1);
    let mut client = grid.nodes[0].client().await;
    let mut request = nqueens(5, 8);
    request.lifetime_secs = 3;
    let job = client
        .submit(request, wasm("nqueens"), vec![])
        .await
        .unwrap();
    let pending = wait_for(
        &mut client,
        job,
        Duration::from_secs(10),
        "a pending reason",
        |s| s.phase == JobPhase::Scheduling && s.reason.contains("of 5 workers granted"),
    )
    .await;
    assert!(pending.reason.starts_with("pending"), "{pending:?}");
    let ended = wait_for(&mut client, job, Duration::from_secs(15), "expiry", |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(ended.phase, JobPhase::Failed, "{ended:?}");
    assert!(ended.reason.contains("expired"), "{ended:?}");

    let err = client
        .submit(nqueens(1, 8), b"not wasm at all".to_vec(), vec![])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("module refused"), "{err}");
    let mut bad = nqueens(1, 8);
    bad.min_workers = 0;
    let err = client
        .submit(bad, wasm("nqueens"), vec![])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("at least one worker"), "{err}");
    assert!(client.status(12345).await.is_err());
    // Still serving.
    assert_eq!(client.list().await.unwrap().len(), 1);
}

/// Cancelling a running job stops every worker on every node within a
/// couple of seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_every_worker_quickly() {
    let grid = grid(4, 1);
    let mut client = grid.nodes[0].client().await;
    // `spin` loops for ever: only a cancel ends it.
    let mut request = nqueens(4, 0);
    request.args.clear();
    let job = client.submit(request, wasm("spin"), vec![]).await.unwrap();
    wait_for(&mut client, job, Duration::from_secs(30), "running", |s| {
        s.phase == JobPhase::Running && s.ranks.len() == 4
    })
    .await;
    // Every node reports its worker running.
    for node in &grid.nodes {
        let mut c = node.client().await;
        let start = Instant::now();
        while !c.node_info().await.unwrap().running.contains_key(&job) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "worker never ran on {}",
                node.peer
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let cancelled_at = Instant::now();
    let status = client.cancel(job).await.unwrap();
    assert_eq!(status.phase, JobPhase::Cancelled);
    for node in &grid.nodes {
        let mut c = node.client().await;
        while c.node_info().await.unwrap().running.contains_key(&job) {
            assert!(
                cancelled_at.elapsed() < Duration::from_secs(2),
                "a worker still runs on {} after 2 s",
                node.peer
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A port that was free a moment ago (the OS chose it; the listener is
/// dropped so that a node can take it as its fixed listen port).
/// Waits until every node has at least `min` overlay neighbours.
async fn wait_for_neighbours(nodes: &[TestNode], min: usize, deadline: Duration) {
    let start = Instant::now();
    for node in nodes {
        let mut c = node.client().await;
        loop {
            let info = c.node_info().await.unwrap();
            if info.neighbours >= min {
                break;
            }
            assert!(
                start.elapsed() < deadline,
                "{} has {} neighbours after {deadline:?}, wanted {min}",
                node.peer,
                info.neighbours
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Three emulated sites of 4 two-core nodes (1 ms RTT within a site, 20 ms
/// from a to b, 40 ms from c to either): a job that fits in the submitter's
/// site runs there only; a larger one spills to the nearest other site
/// before the farthest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sites_workers_land_on_the_submitters_site_first() {
    let dir = tempfile::tempdir().unwrap();
    let network = format!("sites-{}", std::process::id());
    let sites = ["a", "b", "c"];
    // Each site its own loopback addresses (all of 127/8 is loopback), so
    // the ports stay 0: a port picked in advance can be taken by another
    // test before the node binds it.
    let ips: Vec<String> = (0..12)
        .map(|i| format!("127.0.{}.{}", i / 4 + 1, i % 4 + 1))
        .collect();
    let mut topology = String::from(
        "default_rtt_ms = 40\n\
         [[sites]]\nname = \"a\"\nrtt_within_ms = 1\n\
         [[sites]]\nname = \"b\"\nrtt_within_ms = 1\n\
         [[sites]]\nname = \"c\"\nrtt_within_ms = 1\n\
         [[links]]\na = \"a\"\nb = \"b\"\nrtt_ms = 20\n\
         [hosts]\n",
    );
    for (i, ip) in ips.iter().enumerate() {
        topology.push_str(&format!("\"{ip}\" = \"{}\"\n", sites[i / 4]));
    }
    let topology_file = dir.path().join("sites.toml");
    std::fs::write(&topology_file, topology).unwrap();
    let mut nodes: Vec<TestNode> = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let extra = [
            "--topology".to_string(),
            topology_file.display().to_string(),
            "--site".into(),
            sites[i / 4].into(),
        ];
        let bootstrap = nodes.first().map(|n| n.listen.clone());
        nodes.push(TestNode::start_with(
            &dir.path().join(format!("n{i}")),
            &network,
            bootstrap.as_deref(),
            2,
            ip,
            &extra,
        ));
    }
    let site_of = |peer: &str| -> &str {
        let i = nodes.iter().position(|n| n.peer == peer).unwrap();
        sites[i / 4]
    };
    wait_for_neighbours(&nodes, 3, Duration::from_secs(30)).await;

    // 8 workers: exactly site a's cores.
    let mut client = nodes[0].client().await;
    let job = client
        .submit(nqueens(8, 12), wasm("nqueens"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, Duration::from_secs(60)).await;
    let placed: Vec<&str> = status.ranks.values().map(|r| site_of(&r.node)).collect();
    assert_eq!(placed.len(), 8);
    assert!(
        placed.iter().all(|s| *s == "a"),
        "ranks on sites {placed:?}"
    );
    let out = stdout_of(&client.logs(job).await.unwrap());
    assert!(out.contains("solutions=14200"), "{out:?}");

    // 12 workers: site a's 8, then 4 on site b (20 ms), none on c (40 ms).
    let job = client
        .submit(nqueens(12, 12), wasm("nqueens"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, Duration::from_secs(60)).await;
    let mut count = std::collections::BTreeMap::new();
    for rank in status.ranks.values() {
        *count.entry(site_of(&rank.node)).or_insert(0) += 1;
    }
    assert_eq!(
        count,
        [("a", 8), ("b", 4)].into_iter().collect(),
        "ranks per site"
    );
    let out = stdout_of(&client.logs(job).await.unwrap());
    assert!(out.contains("solutions=14200"), "{out:?}");
}

/// A malleable nqueens job on 4 of 6 one-core nodes; the node of a non-zero
/// rank is killed (-9) mid-run: the rank is replaced on another node, the
/// master re-queues the task it held, and the count is still right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_node_is_replaced_and_the_answer_is_right() {
    let mut grid = grid(6, 1);
    let mut client = grid.nodes[0].client().await;
    let mut request = nqueens(4, 16);
    request.min_workers = 3;
    let job = client
        .submit(request, wasm("nqueens"), vec![])
        .await
        .unwrap();
    let running = wait_for(&mut client, job, Duration::from_secs(30), "4 ranks", |s| {
        s.phase == JobPhase::Running && s.ranks.len() == 4
    })
    .await;
    let home = grid.nodes[0].peer.clone();
    let (&victim_rank, victim) = running
        .ranks
        .iter()
        .find(|(rank, r)| **rank > 0 && r.node != home)
        .expect("a non-zero rank away from the home");
    let victim_node = grid
        .nodes
        .iter()
        .position(|n| n.peer == victim.node)
        .unwrap();
    let victim_peer = victim.node.clone();
    // Kill it while its worker is running.
    let mut c = grid.nodes[victim_node].client().await;
    let start = Instant::now();
    while !c.node_info().await.unwrap().running.contains_key(&job) {
        assert!(start.elapsed() < Duration::from_secs(20), "rank never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    grid.nodes[victim_node].kill();

    let status = wait_completed(&mut client, job, Duration::from_secs(120)).await;
    let replacement = &status.ranks[&victim_rank].node;
    assert_ne!(replacement, &victim_peer, "rank {victim_rank} not replaced");
    assert!(
        grid.nodes.iter().any(|n| &n.peer == replacement),
        "{replacement} is not a grid node"
    );
    let logs = client.logs(job).await.unwrap();
    let stderr: String = logs
        .iter()
        .filter(|c| c.stderr)
        .map(|c| String::from_utf8_lossy(&c.data).into_owned())
        .collect();
    assert!(
        stderr.contains(&format!("rank {victim_rank} was replaced")),
        "the master was not told: {stderr:?}"
    );
    let out = stdout_of(&logs);
    assert!(
        out.contains("nqueens N=16 ranks=4 solutions=14772512"),
        "{out:?}"
    );
}

//! What the multi-node tests share: real `zorilla-node` processes on
//! loopback (ports chosen by the OS, temp state directories), and waits
//! that poll with a deadline instead of sleeping a fixed time.

// Each test crate uses only part of this.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zorilla_node::ReadyLine;
use zorilla_node::client::Client;
use zorilla_node::protocol::{JobPhase, JobRequest, JobStatus, NodeInfo};

/// The last `lines` lines of the log of the node in `dir`.
fn log_tail(dir: &Path, lines: usize) -> String {
    let log = std::fs::read_to_string(dir.join("node.log")).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(lines).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// The last lines of the log file `log`, for failure messages.
pub(crate) fn log_tail_of(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(30).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

pub(crate) struct TestNode {
    pub(crate) child: Child,
    pub(crate) dir: PathBuf,
    pub(crate) client: String,
    pub(crate) listen: String,
    pub(crate) peer: String,
    /// The status page, from `web=http://ADDR/` on the ready line.
    pub(crate) web: SocketAddr,
    pub(crate) args: Vec<String>,
    /// Environment variables the node was started with.
    pub(crate) env: Vec<(String, String)>,
}

impl TestNode {
    pub(crate) fn start(dir: &Path, network: &str, peer: Option<&str>, cores: u32) -> TestNode {
        Self::start_with(dir, network, peer, cores, "127.0.0.1", &[])
    }

    /// Starts a node listening on loopback address `ip`, port 0 (chosen by
    /// the OS), with `extra` arguments.
    pub(crate) fn start_with(
        dir: &Path,
        network: &str,
        peer: Option<&str>,
        cores: u32,
        ip: &str,
        extra: &[String],
    ) -> TestNode {
        Self::spawn(dir, Self::args(dir, network, peer, cores, ip, extra))
    }

    /// The arguments of a node in `dir` listening on loopback address
    /// `ip`, port 0, with `extra` arguments.
    pub(crate) fn args(
        dir: &Path,
        network: &str,
        peer: Option<&str>,
        cores: u32,
        ip: &str,
        extra: &[String],
    ) -> Vec<String> {
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
        args
    }

    pub(crate) fn spawn(dir: &Path, args: Vec<String>) -> TestNode {
        Self::spawn_env(dir, args, Vec::new())
    }

    /// Starts a node with `args` and environment variables `env` added.
    pub(crate) fn spawn_env(dir: &Path, args: Vec<String>, env: Vec<(String, String)>) -> TestNode {
        std::fs::create_dir_all(dir).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("node.log"))
            .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_zorilla-node"))
            .args(&args)
            .env("RUST_LOG", "info,zorilla_overlay=warn,libp2p=warn")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start zorilla-node");
        let stdout = child.stdout.take().unwrap();
        let ready = ReadyLine::wait(stdout, Duration::from_secs(30)).unwrap_or_else(|| {
            panic!(
                "node in {} did not get ready; its log ends:\n{}",
                dir.display(),
                log_tail(dir, 20)
            )
        });
        let listen = ready.listen[0].clone();
        let web = ready
            .web
            .strip_prefix("http://")
            .and_then(|w| w.strip_suffix('/'))
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("web={} is not http://ADDR/", ready.web));
        TestNode {
            child,
            dir: dir.to_owned(),
            client: ready.client,
            listen,
            peer: ready.peer,
            web,
            args,
            env,
        }
    }

    /// The last lines of the node's log, for failure messages.
    pub(crate) fn log_tail(&self) -> String {
        log_tail(&self.dir, 30)
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(crate) fn restart(&mut self) {
        self.kill();
        // The old value's drop kills the already dead process again: harmless.
        *self = TestNode::spawn_env(&self.dir, self.args.clone(), self.env.clone());
    }

    pub(crate) async fn client(&self) -> Client {
        Client::connect(self.client.as_str()).await.unwrap()
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        self.kill();
    }
}

pub(crate) struct Grid {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) network: String,
    pub(crate) nodes: Vec<TestNode>,
}

impl Drop for Grid {
    /// A failed test shows how each node's log ends, and every panic a
    /// node logged: the logs go with the temporary directory.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for node in &self.nodes {
            let log = std::fs::read_to_string(node.dir.join("node.log")).unwrap_or_default();
            let panics: Vec<&str> = log.lines().filter(|l| l.contains("panicked")).collect();
            eprintln!(
                "--- node {} ({}): {} panics logged{}\n{}",
                node.peer,
                node.dir.display(),
                panics.len(),
                panics
                    .iter()
                    .map(|l| format!("\n  {l}"))
                    .collect::<String>(),
                node.log_tail()
            );
        }
    }
}

pub(crate) fn grid(n: usize, cores: u32) -> Grid {
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
    Grid {
        _dir: dir,
        network,
        nodes,
    }
}

pub(crate) fn wasm(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../examples/wasm/{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Waits until the job ends and checks that it completed.
pub(crate) async fn wait_completed(client: &mut Client, job: u64, deadline: Duration) -> JobStatus {
    let status = wait_for(client, job, deadline, "completion", |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    status
}

pub(crate) async fn wait_for(
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

pub(crate) fn stdout_of(logs: &[zorilla_node::protocol::LogChunk]) -> String {
    logs.iter()
        .filter(|c| !c.stderr)
        .map(|c| String::from_utf8_lossy(&c.data).into_owned())
        .collect()
}

pub(crate) fn stderr_of(logs: &[zorilla_node::protocol::LogChunk]) -> String {
    logs.iter()
        .filter(|c| c.stderr)
        .map(|c| String::from_utf8_lossy(&c.data).into_owned())
        .collect()
}

pub(crate) fn nqueens(workers: u32, n: u32) -> JobRequest {
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

/// Waits until every node's `NodeInfo` satisfies `done`.
pub(crate) async fn wait_nodes(
    nodes: &[TestNode],
    deadline: Duration,
    what: &str,
    done: impl Fn(&NodeInfo) -> bool,
) {
    let start = Instant::now();
    for node in nodes {
        let mut c = node.client().await;
        loop {
            let info = c.node_info().await.unwrap();
            if done(&info) {
                break;
            }
            assert!(
                start.elapsed() < deadline,
                "{}: no {what} after {deadline:?}; last {info:?}",
                node.peer
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Waits until every node has at least `min` overlay neighbours.
pub(crate) async fn wait_for_neighbours(nodes: &[TestNode], min: usize, deadline: Duration) {
    let what = format!("{min} neighbours");
    wait_nodes(nodes, deadline, &what, |info| info.neighbours >= min).await;
}

/// Waits until no node runs a worker of any job.
pub(crate) async fn wait_idle(nodes: &[TestNode], deadline: Duration) {
    wait_nodes(nodes, deadline, "idle grid", |info| info.running.is_empty()).await;
}

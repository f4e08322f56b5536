//! What the multi-node tests share: real `zorilla-node` processes (ports
//! chosen by the OS, temp state directories) on loopback or on separate
//! hosts in network namespaces of the test's own ([`Net`], [`netns`]), and
//! waits that poll with a deadline instead of sleeping a fixed time.

// Each test crate uses only part of this.
#![allow(dead_code)]

pub(crate) mod natgrid;
pub(crate) mod netns;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zorilla_node::ReadyLine;
use zorilla_node::client::Client;
use zorilla_node::protocol::{JobPhase, JobRequest, JobStatus, NodeInfo};

use netns::{Host, Hosts};

/// Where a test grid's nodes run. The same test body runs on either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Net {
    /// All on this machine's loopback: site S's host H listens on
    /// 127.0.S.H.
    Loopback,
    /// Each node on a host of its own (a network namespace), site S's host
    /// H at 10.77.S.H behind its site's bridge, listening on 0.0.0.0 as an
    /// operator's node would (see [`netns`]).
    Hosts,
}

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
    /// Its first TCP listen address (on a host, at the host's address).
    pub(crate) listen: String,
    /// Every listen address its ready line names (QUIC ones too).
    pub(crate) listen_all: Vec<String>,
    pub(crate) peer: String,
    /// The status page, from `web=http://ADDR/` on the ready line.
    pub(crate) web: SocketAddr,
    pub(crate) args: Vec<String>,
    /// Environment variables the node was started with.
    pub(crate) env: Vec<(String, String)>,
    /// The host (network namespace) it runs on; `None` on loopback.
    pub(crate) host: Option<Host>,
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
            // The test's nodes share one machine, so differences between
            // their measured speeds would be noise, and placements would
            // follow it; `cpu_speed`'s measurement has its own test (web.rs).
            "--cpu-speed".into(),
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
        Self::spawn_on(dir, args, env, None)
    }

    /// Starts a node with `args` and `env` on `host` (its own network
    /// namespace), or on this machine if `None`. On a host, its overlay
    /// address is the host's (it may listen on 0.0.0.0, whose first
    /// address the ready line names could be loopback).
    pub(crate) fn spawn_on(
        dir: &Path,
        args: Vec<String>,
        env: Vec<(String, String)>,
        host: Option<Host>,
    ) -> TestNode {
        std::fs::create_dir_all(dir).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("node.log"))
            .unwrap();
        let node = env!("CARGO_BIN_EXE_zorilla-node");
        let mut command = match &host {
            None => Command::new(node),
            Some(host) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{}", host.netns))
                    .arg("--")
                    .arg(node);
                c
            }
        };
        let mut child = command
            .args(&args)
            .env("RUST_LOG", "info,zorilla_overlay=warn,libp2p=warn")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start zorilla-node");
        let stdout = child.stdout.take().unwrap();
        let Some(ready) = ReadyLine::wait(stdout, Duration::from_secs(30)) else {
            // Not left running (on a host, in a namespace about to go).
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "node in {} did not get ready; its log ends:\n{}",
                dir.display(),
                log_tail(dir, 20)
            )
        };
        let mut listen = ready
            .listen
            .iter()
            .find(|a| a.contains("/tcp/"))
            .unwrap_or(&ready.listen[0])
            .clone();
        if let Some(host) = &host {
            let port = listen
                .rsplit_once("/tcp/")
                .map(|(_, port)| port.to_string())
                .unwrap_or_else(|| panic!("listen address {listen} has no TCP port"));
            listen = format!("/ip4/{}/tcp/{port}", host.ip);
        }
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
            listen_all: ready.listen,
            peer: ready.peer,
            web,
            args,
            env,
            host,
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

    /// Stops the node as its service manager would (SIGTERM: it shuts
    /// down in order), killing it if it has not ended within 30 s, and
    /// starts it again on the same directory.
    pub(crate) fn restart_gracefully(&mut self) {
        let pid = self.child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill (procps) runs");
        assert!(sent.success(), "SIGTERM to {pid} failed");
        let start = std::time::Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the node did not end after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.restart();
    }

    pub(crate) fn restart(&mut self) {
        self.kill();
        // The old value's drop kills the already dead process again: harmless.
        *self = TestNode::spawn_on(
            &self.dir,
            self.args.clone(),
            self.env.clone(),
            self.host.clone(),
        );
    }

    /// A client of the node (made inside its host's namespace, if any).
    pub(crate) async fn client(&self) -> Client {
        let user = zorilla_node::owner::UserKey::load_or_create(&test_user_key()).unwrap();
        let Some(host) = &self.host else {
            return Client::connect(self.client.as_str())
                .await
                .unwrap()
                .as_user(user);
        };
        let addr: SocketAddr = self.client.parse().unwrap();
        let stream = netns::connect_in(&host.netns, addr)
            .unwrap_or_else(|e| panic!("cannot reach the client port of {}: {e}", self.peer));
        stream.set_nonblocking(true).unwrap();
        let stream = tokio::net::TcpStream::from_std(stream).unwrap();
        Client::over(stream, None, "zorilla test")
            .await
            .unwrap()
            .as_user(user)
    }

    /// `GET path` from the node's status page: the status code and body.
    pub(crate) async fn http_get(&self, path: &str) -> (u16, String) {
        let netns = self.host.as_ref().map(|h| h.netns.clone());
        let (web, path) = (self.web, path.to_string());
        tokio::task::spawn_blocking(move || match netns {
            Some(netns) => netns::http_get_in(&netns, web, &path),
            None => netns::http_get(web, &path),
        })
        .await
        .unwrap()
    }

    /// The node's overview as its status page's JSON API shows it.
    pub(crate) async fn overview(&self) -> zorilla_webui::model::NodeOverview {
        let (code, body) = self.http_get("/api/overview").await;
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("/api/overview is not an overview ({e}): {body}"))
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        self.kill();
    }
}

pub(crate) struct Grid {
    /// Killed (on drop) before their hosts go.
    pub(crate) nodes: Vec<TestNode>,
    /// The namespaces of [`Net::Hosts`].
    pub(crate) hosts: Option<Hosts>,
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) network: String,
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

/// `n` nodes of `cores` cores on loopback, all joined through the first.
pub(crate) fn grid(n: usize, cores: u32) -> Grid {
    grid_on(Net::Loopback, n, cores)
}

/// `n` nodes of `cores` cores on `net` (one site), all joined through the
/// first.
pub(crate) fn grid_on(net: Net, n: usize, cores: u32) -> Grid {
    sites_grid(net, &[n], cores, |_| Vec::new())
}

/// A home with no cores of its own (node 0: a machine that only submits,
/// so that it runs no rank of its jobs) and `n` nodes of `cores` cores,
/// all joined through it, on loopback.
pub(crate) fn grid_with_idle_home(n: usize, cores: u32) -> Grid {
    grid_with_idle_home_on(Net::Loopback, n, cores)
}

/// [`grid_with_idle_home`] on `net` (one site).
pub(crate) fn grid_with_idle_home_on(net: Net, n: usize, cores: u32) -> Grid {
    sites_grid_of(
        net,
        &[n + 1],
        |i| if i == 0 { 0 } else { cores },
        |_| Vec::new(),
    )
}

/// The address of host `h` (from 0) of site `s` (from 0) on `net`.
pub(crate) fn host_ip(net: Net, s: usize, h: usize) -> std::net::Ipv4Addr {
    let (site, host) = (s as u8 + 1, h as u8 + 1);
    match net {
        Net::Loopback => std::net::Ipv4Addr::new(127, 0, site, host),
        Net::Hosts => std::net::Ipv4Addr::new(10, 77, site, host),
    }
}

/// Sites of `sizes[s]` nodes of `cores` cores on `net`, all joined through
/// the first node; node `i` (site by site) is `nodes[i]`. `extra(i)`
/// gives the arguments node `i` gets besides the harness's.
pub(crate) fn sites_grid(
    net: Net,
    sizes: &[usize],
    cores: u32,
    extra: impl Fn(usize) -> Vec<String>,
) -> Grid {
    sites_grid_of(net, sizes, |_| cores, extra)
}

/// [`sites_grid`] where node `i` has `cores(i)` cores.
pub(crate) fn sites_grid_of(
    net: Net,
    sizes: &[usize],
    cores: impl Fn(usize) -> u32,
    extra: impl Fn(usize) -> Vec<String>,
) -> Grid {
    sites_grid_env(net, sizes, cores, extra, |_| Vec::new())
}

/// What the test-only lying node adds to the outputs it lies about
/// (node/src/node/digest.rs).
pub(crate) const MADE_UP: &str = "a made-up result";

/// An idle home (node 0) and `workers` nodes of one core each on
/// loopback; node `liar` (if any) is the test-only lying node (cargo
/// feature `test-corrupt`), lying about `share` of its workers' results
/// ("1": all of them).
pub(crate) fn liar_grid(workers: usize, liar: Option<usize>, share: &str) -> Grid {
    sites_grid_env(
        Net::Loopback,
        &[workers + 1],
        |i| if i == 0 { 0 } else { 1 },
        |_| Vec::new(),
        |i| match Some(i) == liar {
            true => vec![("ZORILLA_TEST_CORRUPT".into(), share.into())],
            false => Vec::new(),
        },
    )
}

/// [`sites_grid_of`] where node `i` is started with the environment
/// variables `env(i)` besides the harness's.
pub(crate) fn sites_grid_env(
    net: Net,
    sizes: &[usize],
    cores: impl Fn(usize) -> u32,
    extra: impl Fn(usize) -> Vec<String>,
    env: impl Fn(usize) -> Vec<(String, String)>,
) -> Grid {
    let dir = tempfile::tempdir().unwrap();
    let network = format!("test-{}", std::process::id());
    let hosts = (net == Net::Hosts).then(|| Hosts::new(sizes));
    let mut grid = Grid {
        nodes: Vec::new(),
        hosts,
        _dir: dir,
        network,
    };
    let mut i = 0;
    for (s, &size) in sizes.iter().enumerate() {
        for h in 0..size {
            let bootstrap = grid.nodes.first().map(|n| n.listen.clone());
            let node_dir = grid._dir.path().join(format!("n{i}"));
            let listen_ip = match net {
                Net::Loopback => host_ip(net, s, h).to_string(),
                Net::Hosts => "0.0.0.0".to_string(),
            };
            // The client port and the status page stay on 127.0.0.1 (the
            // harness's and the node's default), on a host inside its
            // namespace only.
            let more = extra(i);
            let args = TestNode::args(
                &node_dir,
                &grid.network,
                bootstrap.as_deref(),
                cores(i),
                &listen_ip,
                &more,
            );
            let host = grid.hosts.as_ref().map(|hosts| hosts.hosts[i].clone());
            let node = TestNode::spawn_on(&node_dir, args, env(i), host);
            grid.nodes.push(node);
            i += 1;
        }
    }
    grid
}

/// The MPI library's directory (sdk/).
pub(crate) fn sdk() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk")
}

/// Runs a build step; a failure panics with what it printed.
pub(crate) fn run(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Builds sdk/tests/NAME.c with sdk/bin/zmpicc into `dir`: the module.
/// The library is built first (sdk/build.sh) if a source changed.
pub(crate) fn zmpicc(dir: &Path, name: &str) -> Vec<u8> {
    zmpicc_source(dir, &sdk().join(format!("tests/{name}.c")))
}

/// Builds the C file `source` with sdk/bin/zmpicc (warnings are errors)
/// into `dir`: the module. The library is built first (sdk/build.sh) if a
/// source changed.
pub(crate) fn zmpicc_source(dir: &Path, source: &Path) -> Vec<u8> {
    let name = source.file_stem().unwrap().to_string_lossy();
    let out = dir.join(format!("{name}.wasm"));
    run(
        Command::new(sdk().join("bin/zmpicc"))
            .args(["-O2", "-Wall", "-Wextra", "-Werror"])
            .arg(source)
            .arg("-o")
            .arg(&out),
        &format!("zmpicc {name}.c"),
    );
    std::fs::read(&out).unwrap()
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
            if start.elapsed() >= deadline {
                // What the node said, for a failure seen once in a while.
                let log = std::fs::read_to_string(node.dir.join("node.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!(
                    "{}: no {what} after {deadline:?}; last {info:?}\nits log's end:\n{}",
                    node.peer,
                    tail.join("\n")
                );
            }
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

/// Waits until every node knows every other one and has measured its RTT
/// (a connection was made between them, one way or both); returns each
/// node's peers as it last listed them.
pub(crate) async fn wait_all_measured(
    nodes: &[TestNode],
    deadline: Duration,
) -> Vec<Vec<zorilla_node::protocol::PeerEntry>> {
    let start = Instant::now();
    let mut lists = Vec::new();
    for node in nodes {
        let mut client = node.client().await;
        loop {
            let peers = client.peers().await.unwrap();
            let measured = nodes
                .iter()
                .filter(|other| other.peer != node.peer)
                .filter(|other| {
                    peers
                        .iter()
                        .any(|p| p.peer == other.peer && p.rtt_us.is_some())
                })
                .count();
            if measured == nodes.len() - 1 {
                lists.push(peers);
                break;
            }
            assert!(
                start.elapsed() < deadline,
                "{} measured {measured} of the {} others after {deadline:?}: {peers:?}",
                node.peer,
                nodes.len() - 1
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    lists
}

/// The `zorilla` tool, acting as this test process's user: its key is
/// made in a directory of the process's own under the system's temporary
/// directory, never in the user's configuration.
pub(crate) fn cli() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zorilla"));
    cmd.env("ZORILLA_USER_KEY", test_user_key());
    cmd
}

/// Where this test process's user key is (see [`cli`]).
pub(crate) fn test_user_key() -> PathBuf {
    std::env::temp_dir()
        .join(format!("zorilla-test-{}", std::process::id()))
        .join("user.key")
}

/// A native program built by `compiler` (gcc, or the distribution's
/// MPICH's `mpicc.mpich`, which scripts/install-test-deps.sh installs)
/// with `-O2` from `sources` of the repository, with its C headers
/// (`examples/include`, `sdk/native`).
/// The overlay messages the nodes behind `clients` have sent in all (their
/// `messages_sent`), for the benchmarks' message counts.
#[allow(dead_code)]
pub(crate) async fn messages_sent(clients: &mut [Client]) -> u64 {
    let mut sum = 0;
    for c in clients {
        sum += c.node_info().await.unwrap().messages_sent;
    }
    sum
}

/// The node's library for native MPI ranks (`sdk/native/zorilla_pmi.c`,
/// the PMI-1 client of Open MPI programs, and `zorilla_ucx.c`, the fix of
/// MPICH's `MPI_Finalize`), built once per test binary into the
/// target's scratch directory (not under /tmp, which a native worker's
/// sandbox replaces with its own).
#[allow(dead_code)]
pub(crate) fn pmi_library() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("pmi-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let library = dir.join("libzorilla-pmi.so");
            let built = Command::new("cc")
                .args(["-O2", "-shared", "-fPIC"])
                .arg(format!("{root}/sdk/native/zorilla_pmi.c"))
                .arg(format!("{root}/sdk/native/zorilla_ucx.c"))
                .arg("-o")
                .arg(&library)
                .arg("-ldl")
                .status()
                .unwrap_or_else(|e| panic!("cannot run cc ({e})"));
            assert!(
                built.success(),
                "cc failed on sdk/native/zorilla_pmi.c or zorilla_ucx.c"
            );
            library
        })
        .clone()
}

pub(crate) fn build_native(compiler: &str, sources: &[&str]) -> Vec<u8> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("program");
    let built = Command::new(compiler)
        .arg("-O2")
        .arg(format!("-I{root}/examples/include"))
        .arg(format!("-I{root}/sdk/native"))
        .args(sources.iter().map(|s| format!("{root}/{s}")))
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run {compiler} ({e}): install it (MPICH: libmpich-dev)")
        });
    assert!(built.success(), "{compiler} failed");
    std::fs::read(&exe).unwrap()
}

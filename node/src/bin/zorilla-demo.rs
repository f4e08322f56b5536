//! `zorilla-demo`: Zorilla's main job in one command. Starts a local grid of
//! 12 real `zorilla-node` processes on loopback in three emulated sites
//! (each site its own 127.0.x.y addresses; 1 ms within a site, 10 ms between
//! the first two, 40 ms to the third), submits the bundled `nqueens` guest
//! with 16 workers to a node of the first site through the real `zorilla`
//! tool (progress bar, the answer), shows where the workers ran per site and
//! the status page's address, and shuts the grid down cleanly.
//!
//! Before the grid starts it times the same C source built natively (gcc
//! -O2, one core, when a C compiler and the repository's `examples/` are at
//! hand), and after the job it prints the job's wall time against that:
//! the speed-up a user gets from the grid, or the slow-down.
//!
//! Needs `zorilla-node` and `zorilla` next to it (`cargo build --release -p
//! zorilla-node` builds all three; `scripts/demo.sh` does both). No config
//! file, no compiler: the guest is built in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use zorilla_core::advert::JobId;
use zorilla_node::ReadyLine;
use zorilla_node::client::Client;
use zorilla_node::owner::UserKey;
use zorilla_node::protocol::JobPhase;

/// The nqueens guest, built in so that the demo needs no files.
const NQUEENS: &[u8] = include_bytes!("../../../examples/wasm/nqueens.wasm");

/// Known N-Queens solution counts, to check the answer.
const SOLUTIONS: [(u32, u64); 7] = [
    (8, 92),
    (10, 724),
    (12, 14_200),
    (13, 73_712),
    (14, 365_596),
    (15, 2_279_184),
    (16, 14_772_512),
];

/// The sites: name, and the RTT from the first site.
const SITES: [(&str, u64); 3] = [("amsterdam", 1), ("delft", 10), ("paris", 40)];
const NODES_PER_SITE: usize = 4;
const CORES: u32 = 2;

/// Runs a 12-node Zorilla grid on this machine and a 16-worker nqueens job
/// on it.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// N of N-Queens (8, 10, 12, 13, 14, 15 or 16).
    #[arg(long, default_value_t = 16)]
    queens: u32,
    /// Workers of the job.
    #[arg(long, default_value_t = 16)]
    workers: u32,
    /// Keep the grid running after the job, until Ctrl-C (to look around
    /// with the status page and `zorilla`).
    #[arg(long)]
    keep: bool,
    /// Run a closed grid: the demo makes a grid key and a membership
    /// credential for each node (as `zorilla-node grid init` and `grid
    /// issue` would), and each node shows its credential to its peers.
    #[arg(long)]
    closed: bool,
}

struct DemoNode {
    child: Child,
    site: &'static str,
    peer: String,
    client: String,
    listen: String,
    web: String,
}

impl Drop for DemoNode {
    fn drop(&mut self) {
        // Only reached if the demo fails half-way: a clean run has already
        // stopped every node with SIGTERM.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(demo(args)))
    {
        Ok(code) => code,
        Err(e) => {
            eprintln!("zorilla-demo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn sibling(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
    let path = exe.with_file_name(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: build it with `cargo build --release -p zorilla-node` (or run \
             scripts/demo.sh)",
            path.display()
        ))
    }
}

fn topology() -> String {
    let mut text = String::from("default_rtt_ms = 40\n");
    for (name, _) in SITES {
        text.push_str(&format!(
            "[[sites]]\nname = \"{name}\"\nrtt_within_ms = 1\n"
        ));
    }
    text.push_str(&format!(
        "[[links]]\na = \"{}\"\nb = \"{}\"\nrtt_ms = {}\n[hosts]\n",
        SITES[0].0, SITES[1].0, SITES[1].1
    ));
    for (s, (name, _)) in SITES.iter().enumerate() {
        for k in 0..NODES_PER_SITE {
            text.push_str(&format!("\"{}\" = \"{name}\"\n", host(s, k)));
        }
    }
    text
}

/// The loopback address of node `k` of site `s`.
fn host(s: usize, k: usize) -> String {
    format!("127.0.{}.{}", s + 1, k + 1)
}

/// Why the grid is not ready: each node's neighbours, and the last lines
/// of the log of each node with fewer than three.
async fn formation_report(nodes: &[DemoNode], dir: &Path) -> String {
    /// Lines of each lagging node's log shown.
    const TAIL: usize = 60;
    let mut report = String::new();
    for (i, node) in nodes.iter().enumerate() {
        let neighbours = match Client::connect(node.client.as_str()).await {
            Ok(mut client) => match client.node_info().await {
                Ok(info) => info.neighbours,
                Err(e) => {
                    report.push_str(&format!("  n{i} ({}): {e}\n", node.site));
                    continue;
                }
            },
            Err(e) => {
                report.push_str(&format!("  n{i} ({}): {e}\n", node.site));
                continue;
            }
        };
        report.push_str(&format!(
            "  n{i} ({}, {}): {neighbours} neighbours\n",
            node.site, node.peer
        ));
        if neighbours < 3 {
            let log = dir.join(format!("n{i}")).join("node.log");
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            report.push_str(&format!("    the last lines of {}:\n", log.display()));
            for line in &lines[lines.len().saturating_sub(TAIL)..] {
                report.push_str(&format!("    {line}\n"));
            }
        }
    }
    report
}

fn start_node(
    exe: &Path,
    dir: &Path,
    network: &str,
    s: usize,
    k: usize,
    bootstrap: Option<&str>,
    grid: Option<&zorilla_overlay::membership::GridKey>,
) -> Result<DemoNode, String> {
    use std::os::unix::process::CommandExt as _;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let log = std::fs::File::create(dir.join("node.log")).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.arg("--state-dir")
        .arg(dir)
        .args(["--network", network, "--client", "127.0.0.1:0"])
        .args(["--listen", &format!("/ip4/{}/tcp/0", host(s, k))])
        .args(["--mdns", "false", "--cores", &CORES.to_string()])
        .args(["--memory-mib", "1024", "--disk-mib", "1000"])
        .arg("--topology")
        .arg(dir.parent().unwrap_or(dir).join("sites.toml"))
        .args(["--site", SITES[s].0])
        // Warnings only, unless the demo's caller asks for more (a test
        // does, so that a failure's report says what the nodes did).
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .stderr(log)
        // Their own process group: a Ctrl-C at the terminal goes to the
        // demo and the zorilla tool, not to the nodes, which the demo then
        // stops in order.
        .process_group(0);
    let demo = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec and makes
    // only async-signal-safe system calls (prctl, getppid). `pre_exec` is
    // the only way to set a child's parent-death signal.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            // A node outlives no demo, however the demo ends (SIGKILL, a
            // crash): the kernel sends it SIGTERM when the demo's thread
            // that started it exits. If the demo died before this line ran,
            // the node was re-parented already: stop at once.
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))?;
            if rustix::process::getppid() != Some(demo) {
                return Err(std::io::Error::other("the demo is gone"));
            }
            Ok(())
        });
    }
    if let Some(peer) = bootstrap {
        cmd.args(["--peer", peer]);
    }
    if let Some(grid) = grid {
        // The node's peer id is its identity key's, made here first.
        let key = zorilla_overlay::identity::load_or_create(dir).map_err(|e| e.to_string())?;
        let credential = grid.issue(
            key.public().to_peer_id(),
            zorilla_overlay::membership::credential::unix_now() + 86_400,
            false,
        );
        let path = dir.join("member.cred");
        credential.save(&path).map_err(|e| e.to_string())?;
        cmd.arg("--credential").arg(path);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let Some(ready) = ReadyLine::wait(stdout, Duration::from_secs(30)) else {
        let _ = child.kill();
        return Err(format!(
            "a node did not start; see {}",
            dir.join("node.log").display()
        ));
    };
    Ok(DemoNode {
        site: SITES[s].0,
        peer: ready.peer,
        client: ready.client,
        listen: ready.listen.into_iter().next().unwrap_or_default(),
        web: ready.web,
        child,
    })
}

async fn demo(args: Args) -> Result<ExitCode, String> {
    let expected = SOLUTIONS
        .iter()
        .find(|(n, _)| *n == args.queens)
        .map(|(_, s)| *s)
        .ok_or_else(|| format!("--queens {}: use 8, 10, 12, 13, 14, 15 or 16", args.queens))?;
    let node_exe = sibling("zorilla-node")?;
    let cli_exe = sibling("zorilla")?;
    // The demo's own signal handling: it must outlive an interrupted job to
    // shut the grid down, and stop the grid however it is asked to stop.
    let mut signals = Signals::new()?;

    let dir = std::env::temp_dir().join(format!("zorilla-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // The baseline first, while the machine is quiet.
    let native = native_baseline(&dir, args.queens, expected);
    std::fs::write(dir.join("sites.toml"), topology()).map_err(|e| e.to_string())?;
    let network = format!("demo-{}", std::process::id());
    let grid = if args.closed {
        let grid = zorilla_overlay::membership::GridKey::generate();
        grid.save(&dir.join("grid.key"))
            .map_err(|e| e.to_string())?;
        println!(
            "A closed grid: grid key {} in {} (each node gets a credential signed by it)",
            grid.public().fingerprint(),
            dir.join("grid.key").display()
        );
        Some(grid)
    } else {
        None
    };

    let started = Instant::now();
    println!(
        "Starting 12 zorilla-node processes in 3 emulated sites: {} (submitter's), {} ({} ms away), {} ({} ms away)",
        SITES[0].0, SITES[1].0, SITES[1].1, SITES[2].0, SITES[2].1
    );
    let mut nodes: Vec<DemoNode> = Vec::new();
    for s in 0..SITES.len() {
        for k in 0..NODES_PER_SITE {
            let bootstrap = nodes.first().map(|n| n.listen.clone());
            let i = nodes.len();
            nodes.push(start_node(
                &node_exe,
                &dir.join(format!("n{i}")),
                &network,
                s,
                k,
                bootstrap.as_deref(),
                grid.as_ref(),
            )?);
        }
    }
    // Ready when every node has neighbours to flood to.
    let deadline = Instant::now() + Duration::from_secs(60);
    for node in &nodes {
        let mut client = Client::connect(node.client.as_str())
            .await
            .map_err(|e| e.to_string())?;
        while client
            .node_info()
            .await
            .map_err(|e| e.to_string())?
            .neighbours
            < 3
        {
            if Instant::now() > deadline {
                return Err(format!(
                    "the overlay did not form within 60 s:\n{}",
                    formation_report(&nodes, &dir).await
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    println!(
        "Grid ready in {:.1} s: {} nodes × {CORES} cores, state in {}",
        started.elapsed().as_secs_f64(),
        nodes.len(),
        dir.display()
    );
    println!("Status page of the submitting node: {}", nodes[0].web);

    let spec = dir.join("nqueens.toml");
    std::fs::write(dir.join("nqueens.wasm"), NQUEENS).map_err(|e| e.to_string())?;
    std::fs::write(
        &spec,
        format!(
            "module = \"nqueens.wasm\"\nargs = [\"{}\"]\nworkers = {}\nstrategy = \"concentrate\"\n\
             lifetime_secs = 120\non_worker_lost = \"replace\"\n",
            args.queens, args.workers
        ),
    )
    .map_err(|e| e.to_string())?;
    println!(
        "\n$ zorilla --node {} submit nqueens.toml --follow    # N={}, {} workers\n",
        nodes[0].client, args.queens, args.workers
    );
    let job_started = Instant::now();
    let mut cli = Command::new(&cli_exe)
        .args(["--node", &nodes[0].client, "submit"])
        .arg(&spec)
        .arg("--follow")
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", cli_exe.display()))?;
    let mut stopped_by = None;
    let cli_status = loop {
        tokio::select! {
            signal = signals.recv() => match signal {
                // Ctrl-C reached the zorilla tool too: it asks whether to
                // cancel the job, and the demo waits for it.
                Stop::Interrupt => {}
                Stop::Terminate | Stop::HangUp => {
                    let _ = cli.kill();
                    stopped_by = Some(signal);
                }
            },
            () = tokio::time::sleep(Duration::from_millis(5)) => {
                if let Some(status) = cli.try_wait().map_err(|e| e.to_string())? {
                    break status;
                }
            }
        }
    };
    let job_wall = job_started.elapsed();
    if let Some(signal) = stopped_by {
        println!("\n{signal}: stopping the grid.");
        stop_grid(nodes).await;
        let _ = std::fs::remove_dir_all(&dir);
        return Ok(ExitCode::FAILURE);
    }

    // Where the workers ran, per site, from the home's record, asked as
    // the user the `zorilla` tool submitted the job as (its key, made on
    // its first use; only the job's owner sees where it ran).
    let user = UserKey::default_path()
        .and_then(|path| UserKey::load_or_create(&path))
        .map_err(|e| e.to_string())?;
    let mut client = Client::connect(nodes[0].client.as_str())
        .await
        .map_err(|e| e.to_string())?
        .as_user(user);
    let listed = client.list().await.map_err(|e| e.to_string())?;
    let mut jobs = Vec::new();
    if let Some(job) = listed.first() {
        jobs.push(client.status(job.job).await.map_err(|e| e.to_string())?);
    }
    let mut ok = cli_status.success();
    if let Some(job) = jobs.first() {
        let site_of: BTreeMap<&str, &str> =
            nodes.iter().map(|n| (n.peer.as_str(), n.site)).collect();
        let mut per_site: BTreeMap<&str, (usize, std::collections::BTreeSet<&str>)> =
            BTreeMap::new();
        for rank in job.ranks.values() {
            let site = site_of.get(rank.node.as_str()).copied().unwrap_or("?");
            let entry = per_site.entry(site).or_default();
            entry.0 += 1;
            entry.1.insert(rank.node.as_str());
        }
        println!(
            "\nWhere the {} workers of job {} ran:",
            job.ranks.len(),
            JobId(job.job)
        );
        for (name, rtt) in SITES {
            let (workers, hosts) = per_site.remove(name).unwrap_or_default();
            println!(
                "  {name:<10} ({rtt:>2} ms from the submitter): {workers:>2} workers on {} nodes",
                hosts.len()
            );
        }
        println!(
            "  drawn on the grid view by site: {}grid?job={}",
            nodes[0].web,
            JobId(job.job)
        );
        let logs = client.logs(job.job).await.map_err(|e| e.to_string())?;
        let stdout: String = logs
            .iter()
            .filter(|c| !c.stderr)
            .map(|c| String::from_utf8_lossy(&c.data).into_owned())
            .collect();
        let right = stdout.contains(&format!("solutions={expected}"));
        println!(
            "Answer check: {}-Queens has {expected} solutions: {}",
            args.queens,
            if right {
                "correct"
            } else {
                "NOT FOUND in the output"
            }
        );
        ok &= right && job.phase == JobPhase::Completed;
        if right {
            print_speedup(native, job_wall, args.workers);
        }
    }

    if args.keep {
        println!(
            "\nThe grid keeps running; try `zorilla --node {} list`. Ctrl-C (or SIGTERM, or closing the terminal) stops it.",
            nodes[0].client
        );
        let signal = signals.recv().await;
        println!("\n{signal}.");
    }
    print!("\nShutting the grid down... ");
    ok &= stop_grid(nodes).await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What asked the demo to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Ctrl-C (SIGINT).
    Interrupt,
    /// SIGTERM (`kill`, `timeout`, a service manager).
    Terminate,
    /// SIGHUP (the terminal closed).
    HangUp,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stop::Interrupt => "Interrupted",
            Stop::Terminate => "Asked to terminate",
            Stop::HangUp => "The terminal hung up",
        })
    }
}

/// The signals that stop the demo, caught so that it stops its grid first.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Signals, String> {
        use tokio::signal::unix::{SignalKind, signal};
        let catch = |kind| signal(kind).map_err(|e| format!("cannot catch signals: {e}"));
        Ok(Signals {
            interrupt: catch(SignalKind::interrupt())?,
            terminate: catch(SignalKind::terminate())?,
            hangup: catch(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> Stop {
        tokio::select! {
            _ = self.interrupt.recv() => Stop::Interrupt,
            _ = self.terminate.recv() => Stop::Terminate,
            _ = self.hangup.recv() => Stop::HangUp,
        }
    }
}

/// Stops every node with SIGTERM (SIGKILL after 10 s); prints how many
/// stopped cleanly and returns whether all did.
async fn stop_grid(mut nodes: Vec<DemoNode>) -> bool {
    let stopping = Instant::now();
    for node in &nodes {
        let pid = rustix::process::Pid::from_child(&node.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let mut clean = 0;
    for node in &mut nodes {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match node.child.try_wait() {
                Ok(Some(status)) => {
                    clean += usize::from(status.success());
                    break;
                }
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ => {
                    let _ = node.child.kill();
                    let _ = node.child.wait();
                    break;
                }
            }
        }
    }
    println!(
        "{clean} of {} nodes stopped cleanly in {:.2} s.",
        nodes.len(),
        stopping.elapsed().as_secs_f64()
    );
    clean == nodes.len()
}

/// Times `examples/src/nqueens.c` built natively (`$CC` or gcc, -O2, with
/// the single-rank stand-in for the host API) on one core, or says why
/// there is no baseline.
fn native_baseline(dir: &Path, n: u32, expected: u64) -> Result<Duration, String> {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let source = examples.join("src/nqueens.c");
    if !source.is_file() {
        return Err(format!("{} is not here", source.display()));
    }
    let binary = dir.join("nqueens-native");
    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".into());
    let built = Command::new(&cc)
        .args(["-O2", "-w", "-I"])
        .arg(examples.join("include"))
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .arg(examples.join("native/zorilla_solo.c"))
        .status()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    if !built.success() {
        return Err(format!("{cc} could not build {}", source.display()));
    }
    print!("Timing the same nqueens natively on one core (gcc -O2, N={n})... ");
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let started = Instant::now();
    let out = Command::new(&binary)
        .arg(n.to_string())
        .output()
        .map_err(|e| format!("cannot run the native build: {e}"))?;
    let took = started.elapsed();
    let _ = std::fs::remove_file(&binary);
    if !String::from_utf8_lossy(&out.stdout).contains(&format!("solutions={expected}")) {
        println!("wrong answer");
        return Err("the native build gave a wrong answer".into());
    }
    println!("{:.2} s", took.as_secs_f64());
    Ok(took)
}

/// The job's wall time (submit to answer, as the user waited for it)
/// against the native one-core time.
fn print_speedup(native: Result<Duration, String>, job: Duration, workers: u32) {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let job_s = job.as_secs_f64();
    match native {
        Ok(native) => {
            let native_s = native.as_secs_f64();
            let (word, factor) = if native_s >= job_s {
                ("speed-up", native_s / job_s)
            } else {
                ("SLOW-DOWN", job_s / native_s)
            };
            println!(
                "Wall time: {job_s:.2} s on the grid ({workers} workers; the 12 nodes share this machine's \
                 {cores} cores) against {native_s:.2} s natively on one core: a {word} of {factor:.2}x."
            );
        }
        Err(why) => println!(
            "Wall time: {job_s:.2} s on the grid (no native baseline to compare with: {why})."
        ),
    }
}

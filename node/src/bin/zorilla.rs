//! `zorilla`: the command-line tool to submit and follow jobs on a Zorilla
//! grid, through any node's client port (see `zorilla_node::protocol`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use zorilla_core::advert::{JobId, Strategy};
use zorilla_core::node::LostPolicy;
use zorilla_node::client::{Client, ClientError};
use zorilla_node::jobspec::{Job, JobFile, SpecError};
use zorilla_node::protocol::{ErrorKind, JobPhase, JobStatus, LogChunk, NodeInfo, PeerEntry};

/// Submit and follow jobs on a Zorilla grid.
///
/// Every command talks to one node: the one given by --node (or
/// ZORILLA_NODE), else the local node, found through the `client.addr` file
/// in its state directory.
///
/// Exit codes: 0 success; 1 the job did not complete (failed or cancelled);
/// 2 bad usage or job spec; 3 the node cannot be reached; 4 no such job;
/// 5 the node refused the request (invalid, unauthorized, busy); 130
/// interrupted (the job keeps running).
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Cli {
    /// The node's client address (HOST:PORT).
    #[arg(long, global = true, env = "ZORILLA_NODE")]
    node: Option<String>,
    /// The node's token (needed when the node has one).
    #[arg(long, global = true, env = "ZORILLA_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Where to look for the local node's `client.addr` when --node is not
    /// given.
    #[arg(long, global = true, env = "ZORILLA_STATE_DIR")]
    state_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Submit a job (a job spec file, flags, or both: flags win).
    Submit(SubmitArgs),
    /// Show a job's phase, workers, and why it is still pending.
    Status {
        /// The job id (or a unique prefix of it).
        job: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the jobs the node is home to.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Wait for a job to end, showing progress.
    Wait {
        /// The job id (or a unique prefix of it).
        job: String,
        /// Stream the job's stdout and stderr while waiting.
        #[arg(long, short)]
        follow: bool,
    },
    /// Cancel a job.
    Cancel {
        /// The job id (or a unique prefix of it).
        job: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Change the most workers a malleable job may use.
    Scale {
        /// The job id (or a unique prefix of it).
        job: String,
        /// The new maximum worker count.
        max_workers: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a job's stdout (to stdout) and stderr (to stderr).
    Logs {
        /// The job id (or a unique prefix of it).
        job: String,
        /// Keep following new output until the job ends.
        #[arg(long, short)]
        follow: bool,
        /// Prefix every line with its rank.
        #[arg(long)]
        ranks: bool,
        /// Print JSON lines, one per chunk.
        #[arg(long)]
        json: bool,
    },
    /// Download a job's output files into DIR/<rank>/<file>.
    Fetch {
        /// The job id (or a unique prefix of it).
        job: String,
        /// Where to put them (default: job-<id>).
        dir: Option<PathBuf>,
    },
    /// Show what the node is and has.
    Node {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show the peers the node knows, nearest first.
    Peers {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
struct SubmitArgs {
    /// Job spec file (TOML; see examples/jobs/).
    spec: Option<PathBuf>,
    /// The WebAssembly module.
    #[arg(long)]
    module: Option<PathBuf>,
    /// An argument for every worker (repeatable).
    #[arg(long = "arg", allow_hyphen_values = true)]
    args: Vec<String>,
    /// Exactly this many workers (a rigid job).
    #[arg(long, conflicts_with_all = ["min_workers", "max_workers"])]
    workers: Option<u32>,
    /// Least workers to start with (a malleable job).
    #[arg(long = "min")]
    min_workers: Option<u32>,
    /// Most workers (a malleable job).
    #[arg(long = "max")]
    max_workers: Option<u32>,
    /// spread (a node each first) or concentrate (fill nodes first).
    #[arg(long, value_parser = parse_strategy)]
    strategy: Option<Strategy>,
    /// Cores per worker.
    #[arg(long)]
    cores: Option<u32>,
    /// Memory per worker, MiB.
    #[arg(long)]
    memory_mib: Option<u64>,
    /// Disk per worker, MiB.
    #[arg(long)]
    disk_mib: Option<u64>,
    /// CPU-time limit per worker, seconds (the node's own cap, if lower,
    /// holds).
    #[arg(long)]
    cpu_time_secs: Option<u64>,
    /// Wall-clock limit per worker, seconds (the node's own cap, if lower,
    /// holds).
    #[arg(long)]
    wall_time_secs: Option<u64>,
    /// How long the job may wait for its workers, seconds.
    #[arg(long)]
    lifetime_secs: Option<u64>,
    /// What a rigid job does when it loses a worker: fail or replace.
    #[arg(long, value_parser = parse_lost_policy)]
    on_worker_lost: Option<LostPolicy>,
    /// An input file (repeatable); workers read it under /inputs.
    #[arg(long = "input")]
    inputs: Vec<PathBuf>,
    /// Where outputs go after --wait (default: the spec's, else none).
    #[arg(long)]
    outputs: Option<PathBuf>,
    /// An MPI program (built with sdk/bin/zmpicc): refuses malleable sizes.
    #[arg(long)]
    mpi: bool,
    /// Wait for the job to end, with a progress bar.
    #[arg(long)]
    wait: bool,
    /// Wait and stream the job's stdout and stderr.
    #[arg(long, short)]
    follow: bool,
    /// Print JSON (the job id; with --wait, the final status).
    #[arg(long)]
    json: bool,
}

fn parse_strategy(s: &str) -> Result<Strategy, String> {
    match s {
        "spread" => Ok(Strategy::Spread),
        "concentrate" => Ok(Strategy::Concentrate),
        _ => Err(format!("{s:?}: use spread or concentrate")),
    }
}

fn parse_lost_policy(s: &str) -> Result<LostPolicy, String> {
    match s {
        "fail" => Ok(LostPolicy::Fail),
        "replace" => Ok(LostPolicy::Replace),
        _ => Err(format!("{s:?}: use fail or replace")),
    }
}

/// A failure, with the exit code it maps to and one sentence for the user.
struct Failure {
    code: u8,
    message: String,
}

const EXIT_JOB_FAILED: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_UNREACHABLE: u8 = 3;
const EXIT_NOT_FOUND: u8 = 4;
const EXIT_REFUSED: u8 = 5;
const EXIT_INTERRUPTED: u8 = 130;

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<SpecError> for Failure {
    fn from(e: SpecError) -> Self {
        Failure::new(EXIT_USAGE, e.to_string())
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Node { kind, message } => {
                let code = match kind {
                    ErrorKind::NotFound => EXIT_NOT_FOUND,
                    ErrorKind::Internal | ErrorKind::Version => EXIT_UNREACHABLE,
                    ErrorKind::BadRequest | ErrorKind::Unauthorized | ErrorKind::Busy => {
                        EXIT_REFUSED
                    }
                };
                let hint = match kind {
                    ErrorKind::Unauthorized => {
                        " (give the node's token with --token or ZORILLA_TOKEN)"
                    }
                    ErrorKind::Version => " (use a zorilla of the same version as the node)",
                    _ => "",
                };
                Failure::new(code, format!("the node says: {message}{hint}"))
            }
            other => Failure::new(
                EXIT_UNREACHABLE,
                format!("lost the connection to the node: {other}"),
            ),
        }
    }
}

type Result<T, E = Failure> = std::result::Result<T, E>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("zorilla: cannot start: {e}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("zorilla: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// Where the node is: --node, else the local node's `client.addr`.
fn node_addr(cli: &Cli) -> Result<String> {
    if let Some(addr) = &cli.node {
        return Ok(addr.clone());
    }
    let mut candidates = Vec::new();
    if let Some(dir) = &cli.state_dir {
        candidates.push(dir.join("client.addr"));
    } else {
        let config = zorilla_node::config::Config::default();
        candidates.push(config.state_dir().join("client.addr"));
        // The systemd unit's StateDirectory.
        candidates.push(PathBuf::from("/var/lib/zorilla/client.addr"));
    }
    for path in &candidates {
        if let Ok(text) = std::fs::read_to_string(path) {
            return Ok(text.trim().to_string());
        }
    }
    Err(Failure::new(
        EXIT_UNREACHABLE,
        format!(
            "no local node found (no {}): start one with `zorilla-node`, or say which node \
             to use with --node HOST:PORT or ZORILLA_NODE",
            candidates[0].display()
        ),
    ))
}

async fn connect(cli: &Cli) -> Result<Client> {
    let addr = node_addr(cli)?;
    Client::connect_with(addr.as_str(), cli.token.as_deref(), "zorilla")
        .await
        .map_err(|e| match e {
            ClientError::Node { .. } => Failure::from(e),
            other => Failure::new(
                EXIT_UNREACHABLE,
                format!("cannot reach a node at {addr} ({other}): is zorilla-node running there?"),
            ),
        })
}

/// Resolves a job id or a unique prefix of one.
async fn job_id(client: &mut Client, text: &str) -> Result<u64> {
    let hex = text.trim().trim_start_matches("0x");
    if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) || hex.len() > 16 {
        return Err(Failure::new(
            EXIT_USAGE,
            format!("{text:?} is not a job id: job ids are 16 hex digits, as `zorilla list` shows"),
        ));
    }
    if hex.len() == 16 {
        return u64::from_str_radix(hex, 16)
            .map_err(|e| Failure::new(EXIT_USAGE, format!("{text:?} is not a job id: {e}")));
    }
    let hex = hex.to_ascii_lowercase();
    let matches: Vec<u64> = client
        .list()
        .await?
        .iter()
        .map(|s| s.job)
        .filter(|id| JobId(*id).to_string().starts_with(&hex))
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => Err(Failure::new(
            EXIT_NOT_FOUND,
            format!("no job starting with {hex} on this node: `zorilla list` shows its jobs"),
        )),
        _ => Err(Failure::new(
            EXIT_USAGE,
            format!("{hex} matches {} jobs: give more digits", matches.len()),
        )),
    }
}

async fn run(cli: Cli) -> Result<u8> {
    // A job is read and checked before the node is contacted: what the node
    // would refuse is refused here, and nothing is sent.
    let job = match &cli.command {
        Command::Submit(args) => Some(job_of(args)?),
        _ => None,
    };
    let mut client = connect(&cli).await?;
    match &cli.command {
        Command::Submit(args) => match job {
            Some(job) => submit(&cli, &mut client, args, job).await,
            None => Ok(EXIT_USAGE),
        },
        Command::Status { job, json } => {
            let id = job_id(&mut client, job).await?;
            let status = client.status(id).await?;
            if *json {
                print_json(&status);
            } else {
                out(&describe(&status));
            }
            Ok(0)
        }
        Command::List { json } => {
            let mut jobs = client.list().await?;
            jobs.sort_by_key(|j| std::cmp::Reverse(j.submitted_unix));
            if *json {
                print_json(&jobs);
            } else {
                out(&list_table(&jobs));
            }
            Ok(0)
        }
        Command::Wait { job, follow } => {
            let id = job_id(&mut client, job).await?;
            wait(&cli, client, id, *follow, None, false).await
        }
        Command::Cancel { job, json } => {
            let id = job_id(&mut client, job).await?;
            let status = client.cancel(id).await?;
            if *json {
                print_json(&status);
            } else {
                out(&format!(
                    "job {}: {}\n",
                    JobId(id),
                    phase_name(status.phase)
                ));
            }
            Ok(0)
        }
        Command::Scale {
            job,
            max_workers,
            json,
        } => {
            let id = job_id(&mut client, job).await?;
            let status = client.resize(id, *max_workers).await?;
            if *json {
                print_json(&status);
            } else {
                out(&format!(
                    "job {}: up to {} workers ({} placed)\n",
                    JobId(id),
                    status.request.max_workers,
                    status.ranks.len()
                ));
            }
            Ok(0)
        }
        Command::Logs {
            job,
            follow,
            ranks,
            json,
        } => {
            let id = job_id(&mut client, job).await?;
            let mut printer = LogPrinter::new(*ranks, *json);
            let mut from = 0;
            loop {
                let wait = if *follow { 30 } else { 0 };
                let page = client.logs_page(id, from, wait).await?;
                for chunk in &page.chunks {
                    printer.print(chunk);
                }
                from = page.next;
                if page.ended || (!follow && page.chunks.is_empty()) {
                    printer.flush();
                    return Ok(0);
                }
            }
        }
        Command::Fetch { job, dir } => {
            let id = job_id(&mut client, job).await?;
            let dir = dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("job-{}", JobId(id))));
            let written = fetch(&mut client, id, &dir).await?;
            out(&format!("{written} files in {}\n", dir.display()));
            Ok(0)
        }
        Command::Node { json } => {
            let info = client.node_info().await?;
            if *json {
                print_json(&info);
            } else {
                out(&describe_node(&info));
            }
            Ok(0)
        }
        Command::Peers { json } => {
            let peers = client.peers().await?;
            if *json {
                print_json(&peers);
            } else {
                out(&peers_table(&peers));
            }
            Ok(0)
        }
    }
}

/// Writes to stdout; a closed pipe (`zorilla list | head`) is not an
/// error worth a panic.
fn out(text: &str) {
    let _ = std::io::stdout().write_all(text.as_bytes());
}

fn print_json<T: serde::Serialize>(value: &T) {
    match serde_json::to_value(value) {
        Ok(mut value) => {
            hex_job_ids(&mut value);
            out(&format!("{value:#}\n"));
        }
        Err(e) => eprintln!("zorilla: cannot print JSON: {e}"),
    }
}

/// Job ids as the CLI shows and takes them (16 hex digits), not as the
/// protocol's integers.
fn hex_job_ids(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Array(items) => items.iter_mut().for_each(hex_job_ids),
        serde_json::Value::Object(map) => {
            if let Some(id) = map.get("job").and_then(serde_json::Value::as_u64) {
                map.insert("job".into(), JobId(id).to_string().into());
            }
            if let Some(running) = map.get_mut("running").and_then(|r| r.as_object_mut()) {
                let renamed = std::mem::take(running)
                    .into_iter()
                    .map(|(k, v)| match k.parse::<u64>() {
                        Ok(id) => (JobId(id).to_string(), v),
                        Err(_) => (k, v),
                    })
                    .collect();
                *running = renamed;
            }
        }
        _ => {}
    }
}

/// The job that `zorilla submit` describes (spec file and flags), read and
/// checked as the node would check it.
fn job_of(args: &SubmitArgs) -> Result<Job> {
    let file = match &args.spec {
        Some(path) => JobFile::load(path)?,
        None => JobFile::default(),
    };
    let flags = JobFile {
        module: args.module.clone(),
        args: args.args.clone(),
        workers: args.workers,
        min_workers: args.min_workers,
        max_workers: args.max_workers,
        strategy: args.strategy,
        cores: args.cores,
        memory_mib: args.memory_mib,
        disk_mib: args.disk_mib,
        cpu_time_secs: args.cpu_time_secs,
        wall_time_secs: args.wall_time_secs,
        lifetime_secs: args.lifetime_secs,
        on_worker_lost: args.on_worker_lost,
        inputs: args.inputs.clone(),
        outputs: args.outputs.clone(),
        mpi: args.mpi.then_some(true),
    };
    Ok(file.overridden_by(flags).job()?)
}

async fn submit(cli: &Cli, client: &mut Client, args: &SubmitArgs, job: Job) -> Result<u8> {
    let id = client.submit(job.request, job.module, job.inputs).await?;
    if !(args.wait || args.follow) {
        if args.json {
            print_json(&serde_json::json!({ "job": JobId(id).to_string() }));
        } else {
            out(&format!("{}\n", JobId(id)));
        }
        return Ok(0);
    }
    eprintln!("submitted job {}", JobId(id));
    let connection = connect(cli).await?;
    wait(
        cli,
        connection,
        id,
        args.follow,
        job.outputs.as_deref(),
        args.json,
    )
    .await
}

/// Waits for a job to end: a progress bar while workers join and while it
/// runs, logs streamed if `follow`, outputs fetched into `outputs`, and
/// Ctrl-C asks whether to cancel. Returns the exit code.
async fn wait(
    cli: &Cli,
    mut client: Client,
    id: u64,
    follow: bool,
    outputs: Option<&Path>,
    json: bool,
) -> Result<u8> {
    let bar = ProgressBar::with_draw_target(Some(1), ProgressDrawTarget::stderr());
    let plain = bar.is_hidden();
    bar.enable_steady_tick(Duration::from_millis(120));
    let started = Instant::now();
    let mut logs = if follow {
        Some((connect(cli).await?, LogPrinter::new(false, false), 0u64))
    } else {
        None
    };
    // Registered now, before the first progress line, so that a Ctrl-C
    // from then on is ours to answer.
    let mut interrupt =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(|e| Failure::new(EXIT_UNREACHABLE, format!("cannot watch for Ctrl-C: {e}")))?;
    let mut last_phase = None;
    let status = loop {
        let status = client.status(id).await?;
        show_progress(&bar, &status);
        if plain && last_phase != Some(status.phase) {
            eprintln!("job {}: {}", JobId(id), progress_line(&status));
        }
        last_phase = Some(status.phase);
        if let Some((conn, printer, from)) = &mut logs {
            // Drain what is there now; the status poll paces the loop.
            loop {
                let page = conn.logs_page(id, *from, 0).await?;
                if page.chunks.is_empty() {
                    break;
                }
                bar.suspend(|| page.chunks.iter().for_each(|c| printer.print(c)));
                *from = page.next;
            }
        }
        if status.phase.is_terminal() {
            break status;
        }
        tokio::select! {
            _ = interrupt.recv() => {
                bar.finish_and_clear();
                return interrupted(&mut client, id, &mut interrupt).await;
            }
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    };
    bar.finish_and_clear();
    if let Some((mut conn, mut printer, from)) = logs {
        // What arrived after the last poll.
        let mut from = from;
        loop {
            let page = conn.logs_page(id, from, 0).await?;
            if page.chunks.is_empty() {
                break;
            }
            page.chunks.iter().for_each(|c| printer.print(c));
            from = page.next;
        }
        printer.flush();
    }
    if let Some(dir) = outputs
        && status.phase == JobPhase::Completed
    {
        let written = fetch(&mut client, id, dir).await?;
        eprintln!("{written} output files in {}", dir.display());
    }
    if json {
        print_json(&status);
    } else {
        eprintln!(
            "job {} {} after {:.1} s: {}",
            JobId(id),
            phase_name(status.phase),
            started.elapsed().as_secs_f64(),
            status.reason
        );
        eprint!("{}", placement(&status));
    }
    Ok(if status.phase == JobPhase::Completed {
        0
    } else {
        EXIT_JOB_FAILED
    })
}

/// Ctrl-C while waiting: ask whether to cancel (the answer is read from
/// stdin, so a script can pipe it; no answer means no).
async fn interrupted(
    client: &mut Client,
    id: u64,
    interrupt: &mut tokio::signal::unix::Signal,
) -> Result<u8> {
    eprint!("\ncancel job {}? [y/N] ", JobId(id));
    let _ = std::io::stderr().flush();
    // A plain thread, not the runtime's blocking pool: the runtime would
    // wait for a read that may never end when the process exits.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        let _ = tx.send(line);
    });
    let answer = tokio::select! {
        answer = rx => answer.unwrap_or_default(),
        // A second Ctrl-C means no.
        _ = interrupt.recv() => String::new(),
    };
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        let status = client.cancel(id).await?;
        eprintln!("job {}: {}", JobId(id), phase_name(status.phase));
        Ok(EXIT_JOB_FAILED)
    } else {
        eprintln!(
            "job {} keeps running: `zorilla wait {}` follows it again",
            JobId(id),
            JobId(id)
        );
        Ok(EXIT_INTERRUPTED)
    }
}

fn show_progress(bar: &ProgressBar, status: &JobStatus) {
    let style = |template: &str| {
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ")
    };
    match status.phase {
        JobPhase::Submitted | JobPhase::Scheduling => {
            let needed = status.request.min_workers.max(1);
            bar.set_style(style(
                "{spinner} {elapsed:>4} scheduling [{bar:20}] {pos}/{len} joined  {wide_msg}",
            ));
            bar.set_length(u64::from(needed));
            let joined = status
                .pending
                .as_ref()
                .map_or(status.ranks.len() as u32, |p| p.granted);
            bar.set_position(u64::from(joined.min(needed)));
            let msg = status
                .pending
                .as_ref()
                .map(|p| {
                    format!(
                        "radius {} · {} nodes answered · {} offered",
                        p.radius, p.nodes_answered, p.workers_offered
                    )
                })
                .unwrap_or_default();
            bar.set_message(msg);
        }
        _ => {
            let total = status.ranks.len().max(1) as u64;
            let ended = status
                .ranks
                .values()
                .filter(|r| r.outcome.is_some())
                .count() as u64;
            bar.set_style(style(
                "{spinner} {elapsed:>4} running    [{bar:20}] {pos}/{len} done    {wide_msg}",
            ));
            bar.set_length(total);
            bar.set_position(ended);
            bar.set_message(format!(
                "{} running on {} nodes",
                status.running_workers(),
                nodes_of(status).len()
            ));
        }
    }
}

/// One line on where a job stands, for when there is no progress bar.
fn progress_line(status: &JobStatus) -> String {
    match status.phase {
        JobPhase::Submitted | JobPhase::Scheduling => format!(
            "scheduling, {}/{} workers joined",
            status.pending.as_ref().map_or(0, |p| p.granted),
            status.request.min_workers
        ),
        JobPhase::Running => format!(
            "running, {} workers on {} nodes",
            status.running_workers(),
            nodes_of(status).len()
        ),
        other => phase_name(other).to_string(),
    }
}

fn nodes_of(status: &JobStatus) -> std::collections::BTreeMap<&str, Vec<u32>> {
    let mut nodes: std::collections::BTreeMap<&str, Vec<u32>> = Default::default();
    for (rank, r) in &status.ranks {
        nodes.entry(r.node.as_str()).or_default().push(*rank);
    }
    nodes
}

fn phase_name(phase: JobPhase) -> &'static str {
    match phase {
        JobPhase::Submitted => "submitted",
        JobPhase::Scheduling => "scheduling",
        JobPhase::Running => "running",
        JobPhase::Completed => "completed",
        JobPhase::Cancelled => "cancelled",
        JobPhase::Failed => "failed",
    }
}

fn short_peer(peer: &str) -> &str {
    // Peer ids share their first characters; the tail tells them apart.
    &peer[peer.len().saturating_sub(8)..]
}

/// Where a job's workers ran, one line per node.
fn placement(status: &JobStatus) -> String {
    let mut out = String::new();
    for (node, ranks) in nodes_of(status) {
        let ranks: Vec<String> = ranks.iter().map(u32::to_string).collect();
        out.push_str(&format!(
            "  node …{}: ranks {}\n",
            short_peer(node),
            ranks.join(",")
        ));
    }
    out
}

fn age(status: &JobStatus) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if status.submitted_unix == 0 {
        return "-".into();
    }
    let secs = now.saturating_sub(status.submitted_unix);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..86400 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{:02}h", secs / 86400, secs % 86400 / 3600),
    }
}

fn describe(status: &JobStatus) -> String {
    let r = &status.request;
    let workers = if r.min_workers == r.max_workers {
        format!("{}", r.max_workers)
    } else {
        format!("{}..{}", r.min_workers, r.max_workers)
    };
    let strategy = match r.strategy {
        Strategy::Spread => "spread",
        Strategy::Concentrate => "concentrate",
    };
    let mut out = format!(
        "job       {}\nphase     {}\nreason    {}\nworkers   {} placed of {workers} ({} running), {strategy}, \
         {} core(s) and {} MiB each\nage       {}\nargs      {}\n",
        JobId(status.job),
        phase_name(status.phase),
        status.reason,
        status.ranks.len(),
        status.running_workers(),
        r.cores,
        r.memory_mib,
        age(status),
        r.args.join(" ")
    );
    if let Some(p) = &status.pending {
        out.push_str(&format!(
            "pending   {} of {} workers granted; {} floods, radius {}{}; {} nodes answered, \
             {} offers for {} workers\n",
            p.granted,
            p.needed,
            p.floods,
            p.radius,
            p.budget_ms
                .map(|b| format!(", up to {b} ms from home"))
                .unwrap_or_default(),
            p.nodes_answered,
            p.offers,
            p.workers_offered
        ));
        for (reason, n) in &p.declines {
            out.push_str(&format!("          {n} declined: {reason}\n"));
        }
        for (reason, n) in &p.refusals {
            out.push_str(&format!("          {n} offers refused: {reason}\n"));
        }
    }
    if !status.ranks.is_empty() {
        out.push_str("ranks\n");
        for (rank, r) in &status.ranks {
            out.push_str(&format!(
                "  {rank:>4}  node …{}  {}\n",
                short_peer(&r.node),
                r.outcome.as_deref().unwrap_or("running")
            ));
        }
    }
    out
}

fn list_table(jobs: &[JobStatus]) -> String {
    if jobs.is_empty() {
        return "no jobs on this node\n".into();
    }
    let mut out = format!(
        "{:<16}  {:<10}  {:>9}  {:>7}  {}\n",
        "JOB", "PHASE", "WORKERS", "AGE", "REASON"
    );
    for job in jobs {
        let workers = format!("{}/{}", job.ranks.len(), job.request.max_workers);
        let mut reason = job.reason.clone();
        if reason.chars().count() > 60 {
            reason = reason.chars().take(59).collect::<String>() + "…";
        }
        out.push_str(&format!(
            "{:<16}  {:<10}  {:>9}  {:>7}  {}\n",
            JobId(job.job),
            phase_name(job.phase),
            workers,
            age(job),
            reason
        ));
    }
    out
}

fn describe_node(info: &NodeInfo) -> String {
    let jobs: Vec<String> = info
        .jobs
        .iter()
        .map(|(phase, n)| format!("{n} {}", phase_name(*phase)))
        .collect();
    let workers: usize = info.running.values().map(Vec::len).sum();
    let disk = match &info.disk_problem {
        Some(reason) => format!("disk        cannot be written ({reason}): takes no jobs\n"),
        None => String::new(),
    };
    let text = format!(
        "peer        {}\nversion     {}\nnetwork     {}\nuptime      {} s\nlisten      {}\n\
         offers      {} cores, {} MiB memory, {} MiB disk\nworkers     {} running ({} jobs)\n\
         home to     {}\nneighbours  {}\nmessages    {} sent\n",
        info.peer,
        info.version,
        info.network,
        info.uptime_secs,
        info.listen.join(" "),
        info.cores,
        info.memory_mib,
        info.disk_mib,
        workers,
        info.running.len(),
        if jobs.is_empty() {
            "no jobs".into()
        } else {
            jobs.join(", ")
        },
        info.neighbours,
        info.messages_sent
    );
    text + &disk
}

fn peers_table(peers: &[PeerEntry]) -> String {
    if peers.is_empty() {
        return "no peers known yet\n".into();
    }
    let mut out = format!(
        "{:<52}  {:>9}  {:<5}  {:<9}  {}\n",
        "PEER", "RTT", "LINK", "CONNECTED", "ADDRESS"
    );
    for p in peers {
        let rtt = p
            .rtt_us
            .map_or("-".to_string(), |us| format!("{:.2} ms", us as f64 / 1e3));
        out.push_str(&format!(
            "{:<52}  {:>9}  {:<5}  {:<9}  {}\n",
            p.peer,
            rtt,
            p.link.as_deref().unwrap_or("-"),
            if p.connected { "yes" } else { "no" },
            p.addrs.first().map_or("-", String::as_str)
        ));
    }
    out
}

/// Prints log chunks: stdout to stdout, stderr to stderr, optionally with
/// each line prefixed by its rank, or as JSON lines.
struct LogPrinter {
    ranks: bool,
    json: bool,
    /// Partial lines per (rank, stderr), when prefixing.
    partial: std::collections::BTreeMap<(u32, bool), Vec<u8>>,
}

impl LogPrinter {
    fn new(ranks: bool, json: bool) -> Self {
        LogPrinter {
            ranks,
            json,
            partial: Default::default(),
        }
    }

    fn print(&mut self, chunk: &LogChunk) {
        if self.json {
            let line = serde_json::json!({
                "rank": chunk.rank,
                "stream": if chunk.stderr { "stderr" } else { "stdout" },
                "data": String::from_utf8_lossy(&chunk.data),
            });
            out(&format!("{line}\n"));
            return;
        }
        if !self.ranks {
            write_to(chunk.stderr, &chunk.data);
            return;
        }
        let buf = self.partial.entry((chunk.rank, chunk.stderr)).or_default();
        buf.extend_from_slice(&chunk.data);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let mut out = format!("[{}] ", chunk.rank).into_bytes();
            out.extend_from_slice(&line);
            write_to(chunk.stderr, &out);
        }
    }

    fn flush(&mut self) {
        for ((rank, stderr), rest) in std::mem::take(&mut self.partial) {
            if !rest.is_empty() {
                let mut out = format!("[{rank}] ").into_bytes();
                out.extend_from_slice(&rest);
                out.push(b'\n');
                write_to(stderr, &out);
            }
        }
        let _ = std::io::stdout().flush();
    }
}

fn write_to(stderr: bool, data: &[u8]) {
    let _ = if stderr {
        std::io::stderr().write_all(data)
    } else {
        std::io::stdout().write_all(data)
    };
}

/// Writes a job's outputs (named `rank/path` by the node) under `dir`,
/// refusing names that would leave it, and never writing through a link
/// already in `dir` (see [`zorilla_sandbox::jobfs::create_file`]). Each
/// file streams to disk block by block (so no output needs to fit in
/// memory or in one frame), with a progress bar on stderr when stderr is a
/// terminal; each must end with the size the node listed.
async fn fetch(client: &mut Client, id: u64, dir: &Path) -> Result<usize> {
    use zorilla_node::protocol::MAX_OUTPUT_BLOCK_BYTES;
    use zorilla_sandbox::jobfs;
    let files = client.outputs(id).await?;
    for file in &files {
        if let Err(e) = jobfs::check_relative(&file.name) {
            return Err(Failure::new(
                EXIT_REFUSED,
                format!(
                    "the node sent an output named {:?}, which would land outside {} ({e}); nothing was written",
                    file.name,
                    dir.display()
                ),
            ));
        }
    }
    let total: u64 = files.iter().map(|f| f.size).sum();
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {bytes}/{total_bytes} {bytes_per_sec} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    for file in &files {
        bar.set_message(file.name.clone());
        let path = dir.join(&file.name);
        let cannot_write = |e: std::io::Error| {
            Failure::new(EXIT_USAGE, format!("cannot write {}: {e}", path.display()))
        };
        let mut out = jobfs::create_file(dir, &file.name).map_err(cannot_write)?;
        let mut written = 0u64;
        while written < file.size {
            let want = (file.size - written).min(u64::from(MAX_OUTPUT_BLOCK_BYTES)) as u32;
            let block = client.output_block(id, &file.name, written, want).await?;
            if block.data.is_empty() {
                break;
            }
            out.write_all(&block.data).map_err(cannot_write)?;
            written += block.data.len() as u64;
            bar.inc(block.data.len() as u64);
        }
        if written != file.size {
            bar.abandon();
            return Err(Failure::new(
                EXIT_USAGE,
                format!(
                    "{} ended at {written} bytes, but the node listed {} bytes",
                    path.display(),
                    file.size
                ),
            ));
        }
    }
    bar.finish_and_clear();
    Ok(files.len())
}

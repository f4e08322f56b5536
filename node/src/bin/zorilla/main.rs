//! `zorilla`: the command-line tool to submit and follow jobs on a Zorilla
//! grid, through any node's client port (see `zorilla_node::protocol`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use zorilla_core::advert::JobId;
use zorilla_node::client::{Client, ClientError};
use zorilla_node::jobspec::{Job, JobFile};
use zorilla_node::owner::UserKey;
use zorilla_node::protocol::JobPhase;

mod args;
mod failure;
mod logs;
mod show;

use args::{Cli, Command, SubmitArgs};
use failure::{
    EXIT_INTERRUPTED, EXIT_JOB_FAILED, EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE,
    Failure, Result,
};
use logs::LogPrinter;
use show::{
    describe, describe_node, list_table, out, peers_table, phase_name, placement, print_json,
    progress_line, show_progress,
};

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

/// The user's key (made on first use) and where it is kept.
fn user_key(cli: &Cli) -> Result<(UserKey, PathBuf)> {
    let path = match &cli.user_key {
        Some(path) => path.clone(),
        None => UserKey::default_path().map_err(|e| Failure::new(EXIT_USAGE, e.to_string()))?,
    };
    let key =
        UserKey::load_or_create(&path).map_err(|e| Failure::new(EXIT_USAGE, e.to_string()))?;
    Ok((key, path))
}

async fn connect(cli: &Cli) -> Result<Client> {
    let addr = node_addr(cli)?;
    let (user, _) = user_key(cli)?;
    Client::connect_with(addr.as_str(), cli.token.as_deref(), "zorilla")
        .await
        .map(|client| client.as_user(user))
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
            format!(
                "no job starting with {hex} on this node: `zorilla list` shows its jobs \
                 (a job of another home is asked for by all 16 digits)"
            ),
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
        Command::Whoami { json } => {
            let (key, path) = user_key(&cli)?;
            if *json {
                print_json(&serde_json::json!({ "user": key.id().to_string(), "key": path }));
            } else {
                out(&format!("user {}\nkey  {}\n", key.id(), path.display()));
            }
            return Ok(0);
        }
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
        // Answered before any node was reached.
        Command::Whoami { .. } => Ok(0),
        Command::Revoke { files } => {
            let mut revocations = Vec::new();
            for file in files {
                // A revocation is a few hundred bytes; a larger file is
                // not one (the node checks each anyway).
                let bytes = std::fs::read(file).map_err(|e| {
                    Failure::new(EXIT_USAGE, format!("cannot read {}: {e}", file.display()))
                })?;
                if bytes.len() > 4096 {
                    return Err(Failure::new(
                        EXIT_USAGE,
                        format!("{} is not a revocation file (too large)", file.display()),
                    ));
                }
                revocations.push(bytes);
            }
            let new = client.revoke(revocations).await?;
            out(&format!(
                "{new} of {} revocations new to the node; flooded to the grid\n",
                files.len()
            ));
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
        native: args.native.then_some(true),
        deterministic: args.deterministic.then_some(true),
        seed: args.seed,
        replicas: args.replicas,
        priority: args.priority,
        tasks: args.tasks,
        max_running: args.max_running,
        retries: args.retries,
        task_args: args.task_args.clone(),
        spot_checks: args.spot_checks,
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
            // A rank's output reached its home before its end did: what
            // it still holds of a line is all there will be.
            let ended = status.ranks.iter().filter(|(_, r)| r.outcome.is_some());
            bar.suspend(|| ended.for_each(|(rank, _)| printer.end_rank(*rank)));
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

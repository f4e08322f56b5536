//! `bench-report`: turns the logs of `scripts/bench.sh` into the summary
//! table of BENCHMARKS.md and two plots.
//!
//! It reads every `*.log` in the log directory:
//! - `RESULT <name> <value> <unit...>` lines that the benchmarks print
//!   (`sim.<scenario>.wall` and `.rss`, from `/usr/bin/time` around a
//!   simulator scenario, go into that scenario's row);
//! - `CURVE <name> <x> <y>` lines (the node benchmark's workers running over
//!   time since submit);
//! - the simulator's `mean over N seed(s):` block (`ours` and `paper` lines)
//!   in `sim-<scenario>.log`.
//!
//! - a `KIND <text>` line (scripts/bench.sh's `run.log`): how the figures
//!   were produced, for the summary's heading.
//!
//! It rewrites the part of the markdown file between
//! `<!-- bench-summary:begin -->` and `<!-- bench-summary:end -->`, the
//! README's headline figures between `<!-- bench-headline:begin -->` and
//! `<!-- bench-headline:end -->` (with `--readme`), and writes
//! `locality.svg` (extra RTT per worker, ours against the paper's
//! scheduler, per scenario) and `start-times.svg` (workers running against
//! time since submit) into the SVG directory.
//!
//! After a change to the table's rows alone (a figure added to
//! [`FIGURES`]), the committed blocks are written again from the
//! committed logs without redrawing the plots: `bench-report --logs
//! docs/bench/logs --markdown BENCHMARKS.md --readme README.md` (no
//! `--svg-dir`).
//!
//! With `--check` it writes nothing: it generates both blocks from the logs
//! (the full run's logs are committed in docs/bench/logs) and fails unless
//! the files hold exactly those blocks, so that no figure in them is edited
//! by hand (scripts/test.sh runs it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Parser;
use plotters::prelude::*;
use zorilla_sim::report::{draw_lines, step_line};

/// Writes the benchmark summary and plots from scripts/bench.sh's logs.
#[derive(Debug, Parser)]
struct Args {
    /// Directory of the benchmark logs.
    #[arg(long)]
    logs: PathBuf,
    /// The markdown file whose summary section is rewritten.
    #[arg(long)]
    markdown: PathBuf,
    /// The README whose headline figures are rewritten.
    #[arg(long)]
    readme: Option<PathBuf>,
    /// Where the SVG plots go (none without it, nor with --check): after a
    /// change to the table alone, the summary can be written again from
    /// the committed logs without redrawing the plots.
    #[arg(long)]
    svg_dir: Option<PathBuf>,
    /// Write nothing; fail unless the summary (and the README's headline
    /// figures) are exactly what these logs make.
    #[arg(long)]
    check: bool,
}

/// One generated block of a markdown file, between its two markers.
struct Block {
    begin: &'static str,
    end: &'static str,
}

const SUMMARY: Block = Block {
    begin: "<!-- bench-summary:begin -->",
    end: "<!-- bench-summary:end -->",
};
const HEADLINE: Block = Block {
    begin: "<!-- bench-headline:begin -->",
    end: "<!-- bench-headline:end -->",
};

/// One scheduler's mean figures on one scenario.
#[derive(Debug, Clone, Default)]
struct SimMeans {
    extra_rtt_ms: f64,
    out_of_order_pct: f64,
    msgs_per_job: f64,
    /// Mean time from a job's submission to its allocation (simulated).
    allocation_mean_s: f64,
}

/// One scenario's run of the simulator.
#[derive(Debug, Clone, Default)]
struct SimRun {
    /// Machines in the scenario (its first line).
    machines: Option<u64>,
    ours: Option<SimMeans>,
    paper: Option<SimMeans>,
    /// Wall-clock seconds of ours' runs, one per seed.
    ours_wall_s: Vec<f64>,
}

#[derive(Debug, Default)]
struct Results {
    /// name -> (value, unit), from RESULT lines.
    figures: BTreeMap<String, (String, String)>,
    /// name -> points, from CURVE lines.
    curves: BTreeMap<String, Vec<(f64, f64)>>,
    /// scenario -> its run.
    sim: BTreeMap<String, SimRun>,
    /// How the figures were produced (`KIND` lines, joined).
    kind: Vec<String>,
    /// The directory the logs were read from.
    dir: String,
}

fn parse_sim_line(line: &str) -> Option<SimMeans> {
    // "ours   extra RTT 0.0000 ms/worker | out of order 0.00% | 6483 msgs/job | ..."
    let mut parts = line.split('|').map(str::trim);
    let rtt = parts.next()?.split_whitespace().nth(2)?.parse().ok()?;
    let order = parts
        .next()?
        .trim_start_matches("out of order")
        .trim()
        .trim_end_matches('%')
        .parse()
        .ok()?;
    let msgs = parts.next()?.split_whitespace().next()?.parse().ok()?;
    // "allocation mean 0.095 s, max 0.257 s"
    let allocation = parts
        .next()?
        .strip_prefix("allocation mean")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(SimMeans {
        extra_rtt_ms: rtt,
        out_of_order_pct: order,
        msgs_per_job: msgs,
        allocation_mean_s: allocation,
    })
}

/// The wall time at the end of a seed's line: "... 137623 events in 2.35 s wall".
fn parse_wall(line: &str) -> Option<f64> {
    let rest = line.strip_suffix(" s wall")?;
    rest.rsplit(' ').next()?.parse().ok()
}

fn read_logs(dir: &Path) -> anyhow::Result<Results> {
    let mut results = Results {
        dir: dir.display().to_string(),
        ..Results::default()
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path)?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let mut in_means = false;
        let scenario = stem.strip_prefix("sim-");
        for line in text.lines() {
            if let Some(kind) = line.strip_prefix("KIND ") {
                results.kind.push(kind.trim().to_string());
            } else if let Some(rest) = line.strip_prefix("RESULT ") {
                let mut words = rest.split_whitespace();
                if let (Some(name), Some(value)) = (words.next(), words.next()) {
                    let unit = words.collect::<Vec<_>>().join(" ");
                    results
                        .figures
                        .insert(name.to_string(), (value.to_string(), unit));
                }
            } else if let Some(rest) = line.strip_prefix("CURVE ") {
                let w: Vec<&str> = rest.split_whitespace().collect();
                if let [name, x, y] = w.as_slice()
                    && let (Ok(x), Ok(y)) = (x.parse(), y.parse())
                {
                    results
                        .curves
                        .entry(name.to_string())
                        .or_default()
                        .push((x, y));
                }
            } else if let Some(scenario) = scenario
                && line.starts_with("scenario ")
            {
                // "scenario zorilla-4.2: 430 machines, ..."
                let machines = line
                    .split_once(": ")
                    .and_then(|(_, r)| r.split_whitespace().next())
                    .and_then(|n| n.parse().ok());
                results
                    .sim
                    .entry(scenario.to_string())
                    .or_default()
                    .machines = machines;
            } else if let Some(scenario) = scenario
                && line.starts_with("ours ")
                && let Some(wall) = parse_wall(line)
            {
                let entry = results.sim.entry(scenario.to_string()).or_default();
                entry.ours_wall_s.push(wall);
            } else if line.starts_with("mean over") {
                in_means = true;
            } else if in_means && let Some(scenario) = scenario {
                let (mode, rest) = line.trim_start().split_once(' ').unwrap_or_default();
                let entry = results.sim.entry(scenario.to_string()).or_default();
                match mode {
                    "ours" => entry.ours = parse_sim_line(rest.trim()),
                    "paper" => entry.paper = parse_sim_line(rest.trim()),
                    // Ablations (`--mode ours-hop`) are not in the summary.
                    "ours-hop" => {}
                    _ => in_means = false,
                }
            }
        }
    }
    Ok(results)
}

/// What each figure is, in the order of the table, and where it comes from.
const FIGURES: &[(&str, &str, &str)] = &[
    (
        "fairshare.ours.contributor_share",
        "fair sharing: core time per contributor (8 contributors, 4 free riders, 24 identities; 1.6x the cores asked for)",
        "zorilla-sim --fairshare 5",
    ),
    (
        "fairshare.ours.free_rider_share",
        "fair sharing: core time per free rider",
        "zorilla-sim --fairshare 5",
    ),
    (
        "fairshare.ours.identities_share",
        "fair sharing: core time of the 24 fresh identities together",
        "zorilla-sim --fairshare 5",
    ),
    (
        "fairshare.fcfs.contributor_share",
        "first come, first served (same plans): core time per contributor",
        "zorilla-sim --fairshare 5",
    ),
    (
        "fairshare.fcfs.free_rider_share",
        "first come, first served: core time per free rider",
        "zorilla-sim --fairshare 5",
    ),
    (
        "fairshare.fcfs.identities_share",
        "first come, first served: core time of the identities together",
        "zorilla-sim --fairshare 5",
    ),
    (
        "preemption.preempt.short_turnaround",
        "preemption: contributors' 10 s tasks after free riders' 250 s ones took the cores, median turnaround",
        "zorilla-sim --preemption 5",
    ),
    (
        "preemption.nopreempt.short_turnaround",
        "the same without preemption (free riders' tasks not replaceable), median turnaround",
        "zorilla-sim --preemption 5",
    ),
    (
        "preemption.preempt.lost",
        "preemption: core time the preempted workers had run (lost, replacements start over)",
        "zorilla-sim --preemption 5",
    ),
    (
        "fairarrays.ours.correlation",
        "job arrays of many users on generated topologies with contention, fair sharing: rank correlation of a contributor's contribution and the work it got",
        "zorilla-sim --arrays 5",
    ),
    (
        "fairarrays.fcfs.correlation",
        "the same, first come, first served",
        "zorilla-sim --arrays 5",
    ),
    (
        "fairarrays.ours.free_rider_share",
        "job arrays, fair sharing: work per free rider",
        "zorilla-sim --arrays 5",
    ),
    (
        "fairarrays.fcfs.free_rider_share",
        "job arrays, first come, first served: work per free rider",
        "zorilla-sim --arrays 5",
    ),
    (
        "fairarrays.ours.identities_share",
        "job arrays, fair sharing: work of the 24 fresh identities together",
        "zorilla-sim --arrays 5",
    ),
    (
        "fairarrays.ours.messages_per_task",
        "job arrays, fair sharing: messages per task",
        "zorilla-sim --arrays 5",
    ),
    (
        "fairarrays.bags.messages_per_task",
        "the same tasks as bags of one-worker jobs: messages per task",
        "zorilla-sim --arrays 5",
    ),
    (
        "arrays.array.efficiency",
        "job array of 1,000 tasks of 50 ms on 8 nodes of 2 cores: the tasks' time over the cores times the makespan",
        "cargo bench --workspace --bench arrays",
    ),
    (
        "arrays.array.msgs_per_task",
        "job array of 1,000 tasks: overlay messages per task",
        "cargo bench --workspace --bench arrays",
    ),
    (
        "arrays.small.makespan",
        "200 of those tasks as one array: makespan",
        "cargo bench --workspace --bench arrays",
    ),
    (
        "arrays.jobs.makespan",
        "the same 200 tasks as 200 one-worker jobs submitted at once: makespan",
        "cargo bench --workspace --bench arrays",
    ),
    (
        "arrays.small.msgs_per_task",
        "200 tasks as one array: overlay messages per task",
        "cargo bench --workspace --bench arrays",
    ),
    (
        "arrays.jobs.msgs_per_task",
        "200 one-worker jobs: overlay messages per task",
        "cargo bench --workspace --bench arrays",
    ),
    (
        "arrays.b.slowdown",
        "another user's job of two 0.5 s tasks while the array holds every core: turnaround against alone (worst of 3)",
        "cargo bench --workspace --bench arrays",
    ),
    (
        "native_mpi.latency_ratio",
        "an MPICH program as a native job on 2 nodes: 8-byte latency against mpiexec.hydra over the same transport (UCX over TCP)",
        "cargo bench --workspace --bench native_mpi",
    ),
    (
        "native_mpi.bandwidth_ratio",
        "the same, 1 MiB messages: bandwidth against mpiexec.hydra over the same transport",
        "cargo bench --workspace --bench native_mpi",
    ),
    (
        "native_mpi.zorilla.init",
        "the same: MPI_Init through the nodes' PMI-1 servers",
        "cargo bench --workspace --bench native_mpi",
    ),
    (
        "native_mpi.nqueens.speed_ratio",
        "a compute-bound MPICH program (N-Queens of 16) as a native job on 2 nodes: speed against mpiexec.hydra (target at least 0.95)",
        "cargo bench --workspace --bench native_mpi",
    ),
    (
        "native_mpi.wasm.nqueens.speed_ratio",
        "the same source built with zmpicc, a WebAssembly job on the same nodes: speed against the native job",
        "cargo bench --workspace --bench native_mpi",
    ),
    (
        "native_mpi.wasm.latency_ratio",
        "the ping-pong's source built with zmpicc, a WebAssembly job on the same nodes: 8-byte latency against the MPICH native job",
        "cargo bench --workspace --bench native_mpi",
    ),
    (
        "replication.detcheck.r3.wall_ratio",
        "a short deterministic job run 3 times (replicas = 3): wall time against run once",
        "cargo bench --workspace --bench replication",
    ),
    (
        "replication.detcheck.r3.messages_ratio",
        "the same: overlay messages against run once",
        "cargo bench --workspace --bench replication",
    ),
    (
        "replication.nqueens.r2.wall_ratio",
        "nqueens 13 run twice (replicas = 2): wall time against run once",
        "cargo bench --workspace --bench replication",
    ),
    (
        "spotcheck.p10.f10.caught",
        "spot checks of a job array (simulator): a node lying about 10% of its results caught, 10% of tasks checked",
        "zorilla-sim --spot-checks 50",
    ),
    (
        "spotcheck.p50.f10.caught",
        "the same, a node lying about half its results",
        "zorilla-sim --spot-checks 50",
    ),
    (
        "spotcheck.p100.f5.caught",
        "the same, a node lying about every result, 5% of tasks checked",
        "zorilla-sim --spot-checks 50",
    ),
    (
        "spotcheck.p50.f0.kept_lies",
        "made-up results an array keeps beside a node lying about half its results, no checks",
        "zorilla-sim --spot-checks 50",
    ),
    (
        "spotcheck.p50.f10.kept_lies",
        "the same, 10% of tasks checked",
        "zorilla-sim --spot-checks 50",
    ),
    (
        "spotcheck.p50.f10.extra_workers",
        "the workers 10% spot checks add (checks, third runs, the caught node's tasks run again)",
        "zorilla-sim --spot-checks 50",
    ),
    (
        "spotchecks.real.caught",
        "spot checks on real nodes: a node lying about half its results caught, 40 tasks, 20% checked",
        "cargo bench --workspace --features zorilla-node/test-corrupt --bench spotchecks",
    ),
    (
        "spotchecks.real.kept_unchecked",
        "the same without checks: made-up outputs the arrays kept",
        "cargo bench --workspace --features zorilla-node/test-corrupt --bench spotchecks",
    ),
    (
        "spotchecks.real.kept_checked",
        "the same, 20% checked: made-up outputs the arrays kept",
        "cargo bench --workspace --features zorilla-node/test-corrupt --bench spotchecks",
    ),
    (
        "spotchecks.real.wall_ratio",
        "the same: wall time of the array against without checks",
        "cargo bench --workspace --features zorilla-node/test-corrupt --bench spotchecks",
    ),
    (
        "native_mpi.ompi.latency_ratio",
        "the same program built with Open MPI, as a native job on 2 nodes: 8-byte latency against mpirun over the same transport (TCP)",
        "cargo bench --workspace --bench native_mpi",
    ),
    (
        "native_mpi.ompi.bandwidth_ratio",
        "the same, 1 MiB messages: bandwidth against mpirun over the same transport",
        "cargo bench --workspace --bench native_mpi",
    ),
    (
        "native_mpi.ompi.nqueens.speed_ratio",
        "the compute-bound program built with Open MPI, as a native job on 2 nodes: speed against mpirun (target at least 0.95)",
        "cargo bench --workspace --bench native_mpi",
    ),
    (
        "client.submits",
        "submissions accepted per second, 8 clients",
        "cargo bench -p zorilla-node --bench client",
    ),
    (
        "client.status_rtt_median",
        "status round trip, median",
        "cargo bench -p zorilla-node --bench client",
    ),
    (
        "client.signed_submit_ratio",
        "signed submission against one without an owner, median",
        "cargo bench -p zorilla-node --bench client",
    ),
    (
        "client.forwarded_status_rtt_median",
        "owner's status round trip forwarded by another node, median",
        "cargo bench -p zorilla-node --bench client",
    ),
    (
        "start.cold",
        "submit to all workers running, first job",
        "cargo bench -p zorilla-node --bench start64",
    ),
    (
        "start.warm_median",
        "submit to all workers running, later jobs",
        "cargo bench -p zorilla-node --bench start64",
    ),
    (
        "start.messages_per_job",
        "overlay messages for that job",
        "cargo bench -p zorilla-node --bench start64",
    ),
    (
        "start.idle_rss_median",
        "idle RSS per node (median)",
        "cargo bench -p zorilla-node --bench start64",
    ),
    (
        "overlay.formed",
        "overlay formed",
        "cargo bench -p zorilla-overlay --bench flood",
    ),
    (
        "overlay.frames_per_flood",
        "frames per flood",
        "cargo bench -p zorilla-overlay --bench flood",
    ),
    (
        "overlay.bytes_per_flood",
        "CBOR bytes per flood",
        "cargo bench -p zorilla-overlay --bench flood",
    ),
    (
        "overlay.unacknowledged",
        "flood frames not acknowledged (all floods)",
        "cargo bench -p zorilla-overlay --bench flood",
    ),
    (
        "overlay.cover_median",
        "time for a flood to cover every node (median)",
        "cargo bench -p zorilla-overlay --bench flood",
    ),
    (
        "gate.open_connect_median",
        "connection set-up, open grid (median)",
        "cargo bench -p zorilla-overlay --bench connect",
    ),
    (
        "gate.closed_connect_median",
        "connection set-up, closed grid: membership checked (median)",
        "cargo bench -p zorilla-overlay --bench connect",
    ),
    (
        "sandbox.instantiate_worker_cached_module_p50",
        "instantiate a worker from a cached module (p50)",
        "cargo bench -p zorilla-sandbox --bench sandbox",
    ),
    (
        "sandbox.start_guest_s_first_instruction_p50",
        "start to the guest's first instruction (p50)",
        "cargo bench -p zorilla-sandbox --bench sandbox",
    ),
    (
        "sandbox.message_round_trip_two_workers_5_runs_p50",
        "message round trip between two workers in one process (p50)",
        "cargo bench -p zorilla-sandbox --bench sandbox",
    ),
    (
        "failover.takeover_p50",
        "a job's home killed (-9): time until a copy answers as its home (p50)",
        "cargo bench --workspace --bench failover",
    ),
    (
        "failover.takeover_max",
        "a job's home killed (-9): time until a copy answers as its home (worst run)",
        "cargo bench --workspace --bench failover",
    ),
    (
        "failover.workers_lost",
        "workers stopped by the home's loss",
        "cargo bench --workspace --bench failover",
    ),
    (
        "pingpong.nodes_rtt_8",
        "message round trip, 8 B, two nodes",
        "cargo bench --workspace --bench pingpong",
    ),
    (
        "pingpong.nodes_rtt_8_vs_mpi",
        "the same, relative to OpenMPI over TCP (target: at most 3x)",
        "cargo bench --workspace --bench pingpong",
    ),
    (
        "pingpong.local_rtt_8",
        "message round trip, 8 B, two workers of one node",
        "cargo bench --workspace --bench pingpong",
    ),
    (
        "pingpong.local_rtt_8_vs_mpi",
        "the same, relative to OpenMPI over shared memory (target: at most 5x)",
        "cargo bench --workspace --bench pingpong",
    ),
    (
        "pingpong.nodes_bw_big",
        "ping-pong bandwidth, large messages, two nodes",
        "cargo bench --workspace --bench pingpong",
    ),
    (
        "pingpong.nodes_bw_big_vs_mpi",
        "the same, as a share of OpenMPI's over TCP (target: at least 50%)",
        "cargo bench --workspace --bench pingpong",
    ),
    (
        "pingpong.lanes_bw_big",
        "the same with two lanes (large messages striped over them)",
        "cargo bench --workspace --bench pingpong",
    ),
    (
        "pingpong.local_bw_big",
        "ping-pong bandwidth, large messages, two workers of one node",
        "cargo bench --workspace --bench pingpong",
    ),
    (
        "pingpong.local_bw_big_vs_mpi",
        "the same, as a share of OpenMPI's over shared memory (no target)",
        "cargo bench --workspace --bench pingpong",
    ),
    (
        "pingpong.cipher",
        "noise's cipher alone (ChaCha20-Poly1305, one core)",
        "cargo bench --workspace --bench pingpong",
    ),
    (
        "compute.nqueens_speed_vs_native",
        "nqueens, 1 worker: speed in the sandbox relative to native gcc -O2 (CPU time)",
        "cargo bench --workspace --bench compute",
    ),
    (
        "compute.nqueens_sandbox_cpu",
        "nqueens, 1 worker, in the sandbox: CPU time",
        "cargo bench --workspace --bench compute",
    ),
    (
        "compute.nqueens_native_cpu",
        "nqueens, natively (gcc -O2, single-rank stand-in): CPU time",
        "cargo bench --workspace --bench compute",
    ),
    (
        "speedup.native",
        "nqueens natively on one core (gcc -O2): wall time",
        "cargo bench --workspace --bench speedup",
    ),
    (
        "speedup.w2_wall",
        "nqueens job, 2 workers on 1 node: submit to completion",
        "cargo bench --workspace --bench speedup",
    ),
    (
        "speedup.w4_wall",
        "nqueens job, 4 workers on 2 nodes: submit to completion",
        "cargo bench --workspace --bench speedup",
    ),
    (
        "speedup.w8_wall",
        "nqueens job, 8 workers on 4 nodes: submit to completion",
        "cargo bench --workspace --bench speedup",
    ),
    (
        "store.append_time",
        "store: appending output in 64 KiB blocks",
        "cargo bench --workspace --bench store",
    ),
    (
        "store.append_written",
        "store: bytes written for that output (target: at most 2x)",
        "cargo bench --workspace --bench store",
    ),
    (
        "store.append_disk",
        "store: bytes sent to the disk for that output",
        "cargo bench --workspace --bench store",
    ),
    (
        "mpi.allreduce_8b_4ranks",
        "MPI_Allreduce 8 B, 4 ranks on 4 nodes",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_8b_4ranks_openmpi",
        "MPI_Allreduce 8 B, 4 ranks, OpenMPI over TCP (same run)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_8b_4ranks_ratio",
        "MPI_Allreduce 8 B, 4 ranks: Zorilla / OpenMPI over TCP (target at most 3)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_8b_4ranks_ratio_shm",
        "MPI_Allreduce 8 B, 4 ranks: Zorilla / OpenMPI over shared memory (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_1mib_4ranks",
        "MPI_Allreduce 1 MiB, 4 ranks on 4 nodes",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_1mib_4ranks_openmpi",
        "MPI_Allreduce 1 MiB, 4 ranks, OpenMPI over TCP (same run)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_1mib_4ranks_ratio",
        "MPI_Allreduce 1 MiB, 4 ranks: Zorilla / OpenMPI over TCP (target at most 2)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_1mib_4ranks_ratio_shm",
        "MPI_Allreduce 1 MiB, 4 ranks: Zorilla / OpenMPI over shared memory (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_8b_8ranks",
        "MPI_Allreduce 8 B, 8 ranks on 4 nodes",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_8b_8ranks_openmpi",
        "MPI_Allreduce 8 B, 8 ranks, OpenMPI over TCP (same run)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_8b_8ranks_ratio",
        "MPI_Allreduce 8 B, 8 ranks: Zorilla / OpenMPI over TCP (target at most 3)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_8b_8ranks_ratio_shm",
        "MPI_Allreduce 8 B, 8 ranks: Zorilla / OpenMPI over shared memory (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_1mib_8ranks",
        "MPI_Allreduce 1 MiB, 8 ranks on 4 nodes",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_1mib_8ranks_openmpi",
        "MPI_Allreduce 1 MiB, 8 ranks, OpenMPI over TCP (same run)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_1mib_8ranks_ratio",
        "MPI_Allreduce 1 MiB, 8 ranks: Zorilla / OpenMPI over TCP (target at most 2)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.allreduce_1mib_8ranks_ratio_shm",
        "MPI_Allreduce 1 MiB, 8 ranks: Zorilla / OpenMPI over shared memory (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.bcast_8b_4ranks",
        "MPI_Bcast 8 B, 4 ranks on 4 nodes",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.bcast_8b_4ranks_openmpi",
        "MPI_Bcast 8 B, 4 ranks, OpenMPI over TCP (same run)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.bcast_8b_4ranks_ratio",
        "MPI_Bcast 8 B, 4 ranks: Zorilla / OpenMPI over TCP (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.bcast_8b_4ranks_ratio_shm",
        "MPI_Bcast 8 B, 4 ranks: Zorilla / OpenMPI over shared memory (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.bcast_1mib_4ranks",
        "MPI_Bcast 1 MiB, 4 ranks on 4 nodes",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.bcast_1mib_4ranks_openmpi",
        "MPI_Bcast 1 MiB, 4 ranks, OpenMPI over TCP (same run)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.bcast_1mib_4ranks_ratio",
        "MPI_Bcast 1 MiB, 4 ranks: Zorilla / OpenMPI over TCP (target at most 2)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.bcast_1mib_4ranks_ratio_shm",
        "MPI_Bcast 1 MiB, 4 ranks: Zorilla / OpenMPI over shared memory (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.put_8b_latency",
        "MPI_Put 8 B and a fence, 2 ranks on 2 nodes",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.put_8b_latency_openmpi",
        "MPI_Put 8 B and a fence, OpenMPI over TCP (same run)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.put_8b_latency_ratio",
        "MPI_Put 8 B and a fence: Zorilla / OpenMPI over TCP (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.put_8b_latency_ratio_shm",
        "MPI_Put 8 B and a fence: Zorilla / OpenMPI over shared memory (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.get_8b_latency",
        "MPI_Get 8 B and a fence, 2 ranks on 2 nodes",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.get_8b_latency_openmpi",
        "MPI_Get 8 B and a fence, OpenMPI over TCP (same run)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.get_8b_latency_ratio",
        "MPI_Get 8 B and a fence: Zorilla / OpenMPI over TCP (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.get_8b_latency_ratio_shm",
        "MPI_Get 8 B and a fence: Zorilla / OpenMPI over shared memory (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.put_1mib_bandwidth",
        "MPI_Put bandwidth, 1 MiB operations with fences, 2 ranks on 2 nodes",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.put_1mib_bandwidth_openmpi",
        "MPI_Put bandwidth at 1 MiB, OpenMPI over TCP (same run)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.put_1mib_bandwidth_ratio",
        "MPI_Put bandwidth at 1 MiB: Zorilla / OpenMPI, bandwidth, over TCP (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.put_1mib_bandwidth_ratio_shm",
        "MPI_Put bandwidth at 1 MiB: Zorilla / OpenMPI, bandwidth, over shared memory (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.get_1mib_bandwidth",
        "MPI_Get bandwidth, 1 MiB operations with fences, 2 ranks on 2 nodes",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.get_1mib_bandwidth_openmpi",
        "MPI_Get bandwidth at 1 MiB, OpenMPI over TCP (same run)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.get_1mib_bandwidth_ratio",
        "MPI_Get bandwidth at 1 MiB: Zorilla / OpenMPI, bandwidth, over TCP (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.get_1mib_bandwidth_ratio_shm",
        "MPI_Get bandwidth at 1 MiB: Zorilla / OpenMPI, bandwidth, over shared memory (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.is_4ranks",
        "integer sort shaped like NPB IS (class W: 2^20 keys), 4 ranks on 4 nodes",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.is_4ranks_openmpi",
        "integer sort like NPB IS, 4 ranks, OpenMPI over TCP (same run)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.is_4ranks_ratio",
        "integer sort like NPB IS, 4 ranks: Zorilla / OpenMPI, Mop/s, over TCP (target at least 0.7)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.is_4ranks_ratio_shm",
        "integer sort like NPB IS, 4 ranks: Zorilla / OpenMPI, Mop/s, over shared memory (no target)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.jacobi_4ranks_2nodes",
        "Jacobi stencil, 4 ranks on 2 nodes",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.jacobi_4ranks_openmpi",
        "Jacobi stencil, 4 ranks, OpenMPI over TCP (same run)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.jacobi_ratio",
        "Jacobi stencil: Zorilla / OpenMPI over TCP (target at most 1.3)",
        "cargo bench --workspace --bench mpi",
    ),
    (
        "mpi.jacobi_ratio_shm",
        "Jacobi stencil: Zorilla / OpenMPI over shared memory (no target)",
        "cargo bench --workspace --bench mpi",
    ),
];

/// How the figures were produced, from the logs' `KIND` lines.
fn kind(results: &Results) -> String {
    if results.kind.is_empty() {
        "how: not said in the logs".to_string()
    } else {
        results.kind.join("; ")
    }
}

fn markdown(results: &Results) -> String {
    let mut out = format!(
        "{}\n_Written by `bench-report` (scripts/bench.sh) from the logs in {} \
         ({}); the sections below explain each figure._\n\n",
        SUMMARY.begin,
        results.dir,
        kind(results)
    );
    out.push_str("| figure | measured | command |\n|---|---|---|\n");
    let size = |prefix: &str, key: &str| {
        let get = |k: &str| {
            results
                .figures
                .get(&format!("{prefix}.{k}"))
                .map(|v| v.0.clone())
        };
        match prefix {
            "start" => get("nodes")
                .zip(get("workers"))
                .map(|(n, w)| format!(" ({n} nodes, {w} workers)")),
            "overlay" => get("nodes").map(|n| format!(" ({n} nodes)")),
            "compute" | "speedup" => get(if prefix == "compute" {
                "nqueens_n"
            } else {
                "n"
            })
            .map(|n| format!(" (N={n})")),
            "mpi" if key.contains("jacobi") => get("jacobi_size").map(|n| format!(" ({n}x{n})")),
            "mpi" if key.starts_with("mpi.is_") => {
                get("is_log2_keys").map(|k| format!(" (2^{k} keys)"))
            }
            _ => None,
        }
        .unwrap_or_default()
    };
    for (key, what, command) in FIGURES {
        let prefix = key.split('.').next().unwrap_or("");
        let measured = results
            .figures
            .get(*key)
            .map_or("not run".to_string(), |(v, u)| format!("{v} {u}"));
        out.push_str(&format!(
            "| {what}{} | {measured} | `{command}` |\n",
            size(prefix, key)
        ));
    }
    for (scenario, SimRun { ours, paper, .. }) in &results.sim {
        let cell = |m: &Option<SimMeans>| {
            m.as_ref().map_or("-".into(), |m| {
                format!(
                    "{:.3} ms extra RTT/worker, {:.2}% out of order, {:.0} msgs/job",
                    m.extra_rtt_ms, m.out_of_order_pct, m.msgs_per_job
                )
            })
        };
        // A scenario bench.sh runs under /usr/bin/time (synthetic-100k)
        // has its wall time and peak memory too.
        let figure = |what: &str| results.figures.get(&format!("sim.{scenario}.{what}"));
        let cost = match (figure("wall"), figure("rss")) {
            (Some((wall, _)), Some((rss, _))) => {
                let gb = rss
                    .parse::<f64>()
                    .map_or("?".into(), |kb| format!("{:.2}", kb / 1e6));
                format!("; {wall} s and {gb} GB peak RSS, whole command")
            }
            _ => String::new(),
        };
        out.push_str(&format!(
            "| simulator `{scenario}`: ours | {}{cost} | `zorilla-sim sim/scenarios/{scenario}.toml` |\n\
             | simulator `{scenario}`: paper's scheduler | {} | same run |\n",
            cell(ours),
            cell(paper)
        ));
    }
    out.push_str(
        "\nPlots: [locality](docs/bench/locality.svg) (simulator, extra RTT per worker), \
         [worker start](docs/bench/start-times.svg) (workers running after a submit).\n",
    );
    out.push_str(SUMMARY.end);
    out
}

/// The README's headline figures: a few of the summary's, in sentences.
fn headline(results: &Results) -> String {
    // "value unit" of a figure, without the unit's explanation in brackets.
    let fig = |key: &str| {
        results
            .figures
            .get(key)
            .map_or("(not run)".to_string(), |(v, u)| {
                let unit = u.split(" (").next().unwrap_or("").trim();
                format!("{v} {unit}").trim().to_string()
            })
    };
    let value = |key: &str| {
        results
            .figures
            .get(key)
            .map_or("?".to_string(), |(v, _)| v.clone())
    };
    let mut out = format!(
        "{}\n_Written by `bench-report` (scripts/bench.sh) from the logs in {} \
         ({}), as [the summary in BENCHMARKS.md](BENCHMARKS.md#summary)._\n\n",
        HEADLINE.begin,
        results.dir,
        kind(results)
    );
    if let Some(SimRun {
        machines,
        ours: Some(ours),
        paper: Some(paper),
        ..
    }) = results.sim.get("zorilla-4.2")
    {
        out.push_str(&format!(
            "- **Locality** (simulator, the Zorilla paper's {}-machine Grid'5000 experiment, \
             `zorilla-4.2`): workers {:.3} ms RTT per worker from the optimum and {:.2}% out of \
             order, against {:.3} ms and {:.2}% for the paper's scheduler on the overlay it \
             describes, with {:.0} messages per job against its {:.0} ({:.2}x).\n",
            machines.unwrap_or(0),
            ours.extra_rtt_ms,
            ours.out_of_order_pct,
            paper.extra_rtt_ms,
            paper.out_of_order_pct,
            ours.msgs_per_job,
            paper.msgs_per_job,
            ours.msgs_per_job / paper.msgs_per_job.max(1.0),
        ));
    }
    let big = results.sim.get("synthetic-10k");
    let one = results.sim.get("zorilla-671");
    if let (Some(big), Some(one)) = (big, one)
        && let (Some(big_ours), Some(one_ours)) = (&big.ours, &one.ours)
    {
        let wall = big.ours_wall_s.iter().sum::<f64>() / big.ours_wall_s.len().max(1) as f64;
        out.push_str(&format!(
            "- **Scale** (simulator): {} nodes and 1,000 jobs with churn (`synthetic-10k`) \
             simulated in {wall:.1} s of wall time, {:.3} ms extra RTT per worker; \
             one job of 671 workers (`zorilla-671`) allocated {:.2} s (simulated) after \
             its submission.\n",
            big.machines.unwrap_or(0),
            big_ours.extra_rtt_ms,
            one_ours.allocation_mean_s,
        ));
    }
    // A line only where its figures were measured.
    let have = |keys: &[&str]| keys.iter().all(|k| results.figures.contains_key(*k));
    if have(&[
        "start.workers",
        "start.nodes",
        "start.warm_median",
        "start.cold",
    ]) {
        out.push_str(&format!(
            "- **Real nodes** (`start64`): {} workers on {} nodes all running {} after submit \
             ({} for the first job, when every node compiles the module); idle node {} RSS; \
             a node accepts {} from 8 clients; status round trip {}.\n",
            value("start.workers"),
            value("start.nodes"),
            fig("start.warm_median"),
            fig("start.cold"),
            fig("start.idle_rss_median"),
            fig("client.submits"),
            fig("client.status_rtt_median"),
        ));
    }
    if have(&["sandbox.instantiate_worker_cached_module_p50"]) {
        out.push_str(&format!(
            "- **Sandbox**: a worker instantiated in {} from a cached module; message round \
             trip between two workers in one process {}; nqueens (N={}) in the sandbox at {} \
             of the speed of native gcc -O2.\n",
            fig("sandbox.instantiate_worker_cached_module_p50"),
            fig("sandbox.message_round_trip_two_workers_5_runs_p50"),
            value("compute.nqueens_n"),
            value("compute.nqueens_speed_vs_native"),
        ));
    }
    if have(&["failover.takeover_p50", "failover.workers_lost"]) {
        out.push_str(&format!(
            "- **Failover**: a job's home killed (-9), a copy answers as its home after {} \
             (median); workers stopped: {}.\n",
            fig("failover.takeover_p50"),
            fig("failover.workers_lost"),
        ));
    }
    out.push_str(HEADLINE.end);
    out
}

/// The text of `path` with `block` replaced by `section`.
fn replaced(path: &Path, block: &Block, section: &str) -> anyhow::Result<(String, String)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (Some(a), Some(b)) = (text.find(block.begin), text.find(block.end)) else {
        bail!(
            "{} has no {} ... {} section",
            path.display(),
            block.begin,
            block.end
        );
    };
    anyhow::ensure!(
        a < b,
        "{}: {} comes after {}",
        path.display(),
        block.end,
        block.begin
    );
    let new = format!("{}{section}{}", &text[..a], &text[b + block.end.len()..]);
    Ok((text, new))
}

/// Writes `section` into `path`'s block or, with `check`, fails unless
/// it is there already.
fn rewrite(path: &Path, block: &Block, section: &str, check: bool) -> anyhow::Result<()> {
    let (old, new) = replaced(path, block, section)?;
    if !check {
        return std::fs::write(path, new)
            .with_context(|| format!("cannot write {}", path.display()));
    }
    if old != new {
        let a = old.find(block.begin).unwrap_or(0);
        let first = old[a..]
            .lines()
            .zip(section.lines())
            .find(|(o, n)| o != n)
            .map_or(String::new(), |(o, n)| {
                format!("\n  there:     {o}\n  generated: {n}")
            });
        bail!(
            "{} between {} and {} is not what scripts/bench.sh wrote from its logs: \
             figures there are generated, never edited by hand (rerun scripts/bench.sh, or \
             sim/src/bin/bench-report.rs over docs/bench/logs){first}",
            path.display(),
            block.begin,
            block.end
        );
    }
    Ok(())
}

fn plot_locality(path: &Path, results: &Results) -> anyhow::Result<()> {
    let rows: Vec<(&String, f64, f64)> = results
        .sim
        .iter()
        .map(|(s, run)| {
            (
                s,
                run.ours.as_ref().map_or(0.0, |m| m.extra_rtt_ms),
                run.paper.as_ref().map_or(0.0, |m| m.extra_rtt_ms),
            )
        })
        .collect();
    let root = SVGBackend::new(path, (800, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let y_max = rows.iter().map(|r| r.1.max(r.2)).fold(0.1_f64, f64::max) * 1.2;
    let n = rows.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Extra RTT per worker over the optimum (lower is better)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n as f64, 0.0..y_max)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("ms per worker")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (series, color, label) in [(1usize, BLUE, "ours"), (2, RED, "paper's scheduler")] {
        let bars = rows.iter().enumerate().map(move |(i, r)| {
            let v = if series == 1 { r.1 } else { r.2 };
            let x0 = i as f64 + if series == 1 { 0.15 } else { 0.5 };
            Rectangle::new([(x0, 0.0), (x0 + 0.35, v)], color.filled())
        });
        chart
            .draw_series(bars)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    // Each scenario's name above its pair of bars.
    let names = rows.iter().enumerate().map(|(i, r)| {
        Text::new(
            r.0.clone(),
            (i as f64 + 0.15, r.1.max(r.2) + y_max * 0.04),
            ("sans-serif", 14),
        )
    });
    chart
        .draw_series(names)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))
}

fn plot_start(path: &Path, results: &Results) -> anyhow::Result<()> {
    let curve = |name: &str| results.curves.get(name).cloned().unwrap_or_default();
    let (placed, running) = (curve("start.placed"), curve("start.running"));
    let all = placed.iter().chain(&running);
    let x_max = all.clone().map(|p| p.0).fold(1.0_f64, f64::max) * 1.05;
    let y_max = all.map(|p| p.1).fold(1.0_f64, f64::max) * 1.1;
    let root = SVGBackend::new(path, (800, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Workers placed and running after a submit (real nodes)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("ms since submit")
        .y_desc("workers running")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let lines = [
        (placed, RED, "placed by the home"),
        (running, BLUE, "running on their nodes"),
    ]
    .into_iter()
    .map(|(points, color, label)| (label.to_string(), color.to_rgba(), step_line(&points)));
    draw_lines(&mut chart, lines, SeriesLabelPosition::UpperLeft)?;
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let results = read_logs(&args.logs)?;
    if results.figures.is_empty() && results.sim.is_empty() {
        bail!(
            "no RESULT lines or simulator means in {}",
            args.logs.display()
        );
    }
    rewrite(&args.markdown, &SUMMARY, &markdown(&results), args.check)?;
    if let Some(readme) = &args.readme {
        rewrite(readme, &HEADLINE, &headline(&results), args.check)?;
    }
    if args.check {
        println!(
            "bench-report: {}{} hold exactly what the logs in {} make",
            args.markdown.display(),
            args.readme
                .as_ref()
                .map_or(String::new(), |r| format!(" and {}", r.display())),
            args.logs.display()
        );
        return Ok(());
    }
    if let Some(svg_dir) = &args.svg_dir {
        std::fs::create_dir_all(svg_dir)?;
        plot_locality(&svg_dir.join("locality.svg"), &results)?;
        plot_start(&svg_dir.join("start-times.svg"), &results)?;
    }
    let missing: Vec<&str> = FIGURES
        .iter()
        .filter(|(k, _, _)| !results.figures.contains_key(*k))
        .map(|(k, _, _)| *k)
        .collect();
    println!(
        "bench-report: {} figures, {} simulator scenarios into {}; plots {}",
        results.figures.len(),
        results.sim.len(),
        args.markdown.display(),
        args.svg_dir
            .as_ref()
            .map_or("not drawn".to_string(), |d| format!("in {}", d.display()))
    );
    if !missing.is_empty() {
        bail!("figures missing from the logs: {}", missing.join(", "));
    }
    Ok(())
}

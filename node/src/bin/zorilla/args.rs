//! The command line: commands, their options and how they are parsed.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use zorilla_core::advert::Strategy;
use zorilla_core::node::LostPolicy;

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
pub(crate) struct Cli {
    /// The node's client address (HOST:PORT).
    #[arg(long, global = true, env = "ZORILLA_NODE")]
    pub(crate) node: Option<String>,
    /// The node's token (needed when the node has one).
    #[arg(long, global = true, env = "ZORILLA_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Where to look for the local node's `client.addr` when --node is not
    /// given.
    #[arg(long, global = true, env = "ZORILLA_STATE_DIR")]
    pub(crate) state_dir: Option<PathBuf>,
    /// Your user key: it signs your jobs and proves they are yours (made
    /// on first use, mode 0600). Default: ~/.config/zorilla/user.key.
    #[arg(long, global = true, env = "ZORILLA_USER_KEY")]
    pub(crate) user_key: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Submit a job (a job spec file, flags, or both: flags win).
    Submit(Box<SubmitArgs>),
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
        /// Keep following new output until the job ends. Each rank's
        /// lines are shown whole, as `mpirun` shows them.
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
    /// Show who you are to the grid: your user id (the owner of the jobs you
    /// submit) and where your key is.
    Whoami {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Hand the node revocations of its closed grid (files made by
    /// `zorilla-node grid revoke`): it keeps them and floods them, and the
    /// revoked nodes are cut off from the grid within seconds.
    Revoke {
        /// Revocation files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    /// Job spec file (TOML; see examples/jobs/).
    pub(crate) spec: Option<PathBuf>,
    /// The WebAssembly module.
    #[arg(long)]
    pub(crate) module: Option<PathBuf>,
    /// An argument for every worker (repeatable).
    #[arg(long = "arg", allow_hyphen_values = true)]
    pub(crate) args: Vec<String>,
    /// Exactly this many workers (a rigid job).
    #[arg(long, conflicts_with_all = ["min_workers", "max_workers"])]
    pub(crate) workers: Option<u32>,
    /// Least workers to start with (a malleable job).
    #[arg(long = "min")]
    pub(crate) min_workers: Option<u32>,
    /// Most workers (a malleable job).
    #[arg(long = "max")]
    pub(crate) max_workers: Option<u32>,
    /// spread (a node each first) or concentrate (fill nodes first).
    #[arg(long, value_parser = parse_strategy)]
    pub(crate) strategy: Option<Strategy>,
    /// Cores per worker.
    #[arg(long)]
    pub(crate) cores: Option<u32>,
    /// Memory per worker, MiB.
    #[arg(long)]
    pub(crate) memory_mib: Option<u64>,
    /// Disk per worker, MiB.
    #[arg(long)]
    pub(crate) disk_mib: Option<u64>,
    /// CPU-time limit per worker, seconds (the node's own cap, if lower,
    /// holds).
    #[arg(long)]
    pub(crate) cpu_time_secs: Option<u64>,
    /// Wall-clock limit per worker, seconds (the node's own cap, if lower,
    /// holds).
    #[arg(long)]
    pub(crate) wall_time_secs: Option<u64>,
    /// How long the job may wait for its workers, seconds.
    #[arg(long)]
    pub(crate) lifetime_secs: Option<u64>,
    /// What a rigid job does when it loses a worker: fail, replace (the
    /// lost rank restarts from its checkpoint) or rollback (every rank
    /// restarts from the latest checkpoint generation all of them hold).
    #[arg(long, value_parser = parse_lost_policy)]
    pub(crate) on_worker_lost: Option<LostPolicy>,
    /// An input file (repeatable); workers read it under /inputs.
    #[arg(long = "input")]
    pub(crate) inputs: Vec<PathBuf>,
    /// Where outputs go after --wait (default: the spec's, else none).
    #[arg(long)]
    pub(crate) outputs: Option<PathBuf>,
    /// An MPI program (built with sdk/bin/zmpicc): refuses malleable sizes.
    #[arg(long)]
    pub(crate) mpi: bool,
    /// A native executable for this machine's architecture instead of a
    /// WebAssembly module: runs only on nodes whose owners allow your
    /// native jobs.
    #[arg(long)]
    pub(crate) native: bool,
    /// Deterministic workers: the same output bits in every run and on
    /// every node (virtual clocks, seeded randomness, canonical NaNs;
    /// WebAssembly jobs of a fixed size).
    #[arg(long)]
    pub(crate) deterministic: bool,
    /// The seed of a deterministic job (default 0): keys the random bytes
    /// its workers read.
    #[arg(long, requires = "deterministic")]
    pub(crate) seed: Option<u64>,
    /// Run the job this many times (1 to 3), each run on nodes no other
    /// run uses, and keep the results most runs agree on; nodes that gave
    /// others are named and avoided. Implies --deterministic; a fixed
    /// size, or a job array (each task then runs twice on two nodes, and
    /// on a third if they differ).
    #[arg(long)]
    pub(crate) replicas: Option<u8>,
    /// Among your jobs waiting for the same cores, higher goes first
    /// (-128 to 127; default 0). Other users' jobs keep their turn.
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) priority: Option<i8>,
    /// A job array of this many independent tasks (each worker reads its
    /// index from ZORILLA_TASK).
    #[arg(long)]
    pub(crate) tasks: Option<u32>,
    /// The most tasks of the array running at once (default: all).
    #[arg(long)]
    pub(crate) max_running: Option<u32>,
    /// How often a failed task runs again, elsewhere (default 0).
    #[arg(long)]
    pub(crate) retries: Option<u8>,
    /// A file with a line of arguments per task: task i gets the words of
    /// line i after the --arg ones (with no --tasks, a task per line).
    #[arg(long)]
    pub(crate) task_args: Option<PathBuf>,
    /// Run this percentage (0 to 100) of the array's tasks again on
    /// another node, picked at random after they end, and compare the
    /// results: a node caught giving a wrong one has its tasks run again
    /// elsewhere and is avoided. Implies --deterministic.
    #[arg(long, value_name = "PERCENT")]
    pub(crate) spot_checks: Option<u8>,
    /// Wait for the job to end, with a progress bar.
    #[arg(long)]
    pub(crate) wait: bool,
    /// Wait and stream the job's stdout and stderr.
    #[arg(long, short)]
    pub(crate) follow: bool,
    /// Print JSON (the job id; with --wait, the final status).
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn parse_strategy(s: &str) -> Result<Strategy, String> {
    match s {
        "spread" => Ok(Strategy::Spread),
        "concentrate" => Ok(Strategy::Concentrate),
        _ => Err(format!("{s:?}: use spread or concentrate")),
    }
}

pub(crate) fn parse_lost_policy(s: &str) -> Result<LostPolicy, String> {
    match s {
        "fail" => Ok(LostPolicy::Fail),
        "replace" => Ok(LostPolicy::Replace),
        "rollback" => Ok(LostPolicy::Rollback),
        _ => Err(format!("{s:?}: use fail, replace or rollback")),
    }
}

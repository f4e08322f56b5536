//! Native workers: a job's own executable, run at full speed inside a
//! sandbox the kernel enforces, ending in the same [`Outcome`]s, with the
//! same limits and sentences, as WebAssembly workers.
//!
//! Meant for jobs from users a machine's owner trusts enough to run their
//! binaries (the owner's policy is the node's business); the sandbox still
//! assumes the program may be hostile. Each worker:
//!
//! - runs under its own unprivileged identity (one id of
//!   [`NativeConfig::ids`], never root) in its own user namespace, with no
//!   capabilities and no new privileges (set-user-id programs do nothing);
//! - in its own PID namespace: it sees only its own processes, and all of
//!   them die with it;
//! - in its own mount namespace: its job directory writable at `/job`, the
//!   owner's read-only paths, its own `/proc`, a few devices, a tmpfs
//!   `/tmp` and `/dev/shm`; nothing else of the machine's files;
//! - under Landlock rules that say the same by path (`landlock`), and a
//!   seccomp filter that refuses what a job has no business doing
//!   ([`seccomp`]) with `EPERM`;
//! - in control groups that hold its memory and process count and count
//!   its CPU time (`cgroup`); its output is captured bounded as a
//!   WebAssembly worker's is, and its job directory measured for the disk
//!   limit.
//!
//! [`NativeSandbox::probe`] checks at the node's start that this machine
//! can enforce all of it, by setting up a real sandbox once, and says which
//! mechanism is missing if not. [`NativeSandbox::start`] runs a worker; the
//! setup itself is done by a small helper program (`init`: why a helper,
//! and the order of the steps). The network is not restricted: MPI ranks
//! talk to each other over it.

mod cgroup;
mod init;
mod landlock;
mod plan;
pub mod seccomp;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Read;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use init::{init_main, init_main_with};

use crate::hostapi::Waiting;
use crate::limits::{LimitFlag, LimitHit, Limits};
use crate::output::{OutputChunk, OutputKind, OutputShared};
use crate::worker::{CancelHandle, Outcome, WorkerHandle, WorkerReport};
use cgroup::{Group, GroupLimits, Hierarchy};
use init::Status;
use plan::Plan;

/// System paths an owner typically shows native workers read-only: the
/// programs and libraries of the distribution, its configuration, and
/// `/sys`, where MPI libraries (hwloc, UCX) read the machine's processors
/// and network interfaces (without it MPICH's UCX finds no transport).
/// (Paths a machine does not have are skipped.)
pub const SYSTEM_PATHS: [&str; 7] = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/sys"];

/// How often a worker's control groups are read for its memory, process
/// and CPU-time limits: a worker can overshoot its CPU time by about this.
pub const POLL: Duration = Duration::from_millis(50);

/// How long the end of a worker waits for its processes to be gone.
const KILL_PATIENCE: Duration = Duration::from_secs(10);

/// The node owner's configuration of native workers.
#[derive(Clone, Debug)]
pub struct NativeConfig {
    /// The helper that sets up each worker's sandbox: the
    /// `zorilla-native-init` program of this crate, or the node's own
    /// binary if its `main` calls [`init_main`] when started with
    /// [`NativeConfig::init_args`].
    pub init_program: PathBuf,
    /// Arguments put before the worker's when starting `init_program`.
    pub init_args: Vec<OsString>,
    /// The owner's caps on every limit a job asks for.
    pub caps: Limits,
    /// The owner's cap on a worker's processes and threads.
    pub max_processes: u32,
    /// User and group ids (outside the workers' user namespaces) the node
    /// gives its native workers, one per running worker. No user of the
    /// machine should have one of them.
    pub ids: Range<u32>,
    /// The user and group id a worker has inside its user namespace.
    pub inside_id: u32,
    /// Name of the directory made under the node's own control group(s),
    /// which holds the workers' groups.
    pub cgroup_name: String,
    /// Where to make the workers' groups, if not under the node's own
    /// groups (found from `/proc/self/cgroup`): a cgroup v2 group delegated
    /// to the node that holds no process (systemd's `Delegate=yes` gives
    /// the node its unit's group; the node keeps itself in a leaf of it),
    /// or a directory with the v1 hierarchies as `<root>/memory`,
    /// `<root>/pids` and `<root>/cpuacct`.
    pub cgroup_root: Option<PathBuf>,
}

impl NativeConfig {
    /// The defaults, with this helper program: the owner's default caps
    /// ([`Limits::default`]), 256 processes, ids from 1 000 000 on, id 1000
    /// inside, groups under `zorilla-native`.
    pub fn new(init_program: PathBuf) -> NativeConfig {
        NativeConfig {
            init_program,
            init_args: Vec::new(),
            caps: Limits::default(),
            max_processes: 256,
            ids: 1_000_000..1_065_536,
            inside_id: 1000,
            cgroup_name: "zorilla-native".to_owned(),
            cgroup_root: None,
        }
    }
}

/// Why this machine cannot run native workers: a sentence that names the
/// mechanism it cannot enforce.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("this node cannot sandbox native jobs: {0}")]
pub struct Unenforceable(pub String);

/// One native job worker to run.
#[derive(Debug)]
pub struct NativeSpec {
    /// The program, as the worker sees it: `/job/...` for a file of the job
    /// directory, a system path as it is.
    pub exe: PathBuf,
    /// Arguments after `argv[0]`.
    pub args: Vec<String>,
    /// Environment variables; nothing of the node's environment is passed
    /// (not even `PATH`).
    pub env: Vec<(String, String)>,
    /// The job directory on this machine; the worker sees it at `/job`,
    /// starts there, and may write there. Its files are given to the
    /// worker's identity.
    pub job_dir: PathBuf,
    /// Paths of this machine the worker may read and run, at the same
    /// paths (typically [`SYSTEM_PATHS`]). Absolute; not `/`, nor under
    /// `/tmp`, `/job`, `/proc` or `/dev`, which the sandbox makes itself.
    pub read_only_paths: Vec<PathBuf>,
    /// The limits the job asks for, each capped by the owner's
    /// ([`NativeConfig::caps`]). Memory counts all of the worker's
    /// processes, with their page cache and their `/tmp` and `/dev/shm`;
    /// CPU time all of their threads; disk the job directory.
    pub limits: Limits,
    /// How many processes and threads the worker may have at once (capped
    /// by [`NativeConfig::max_processes`]); a `fork` or thread beyond it
    /// fails, and the worker ends with [`process_limit_outcome`].
    pub max_processes: u32,
    /// Where stdout and stderr go, in chunks. `None`: discarded (but still
    /// counted against the output limit).
    pub output: Option<mpsc::Sender<OutputChunk>>,
    /// Sockets the program finds open, the first as file descriptor
    /// [`INHERITED_FD`], the next as the one after, and so on (the node
    /// serves the MPI library's process management interface on the
    /// first, see the node's `pmi`, and the `zorilla.h` calls of native
    /// programs on the second); no other descriptor of the node reaches
    /// the worker. At most [`MAX_INHERITED`].
    pub inherit: Vec<std::os::fd::OwnedFd>,
}

/// The descriptor number the first of [`NativeSpec::inherit`] has in the
/// worker.
pub const INHERITED_FD: i32 = 3;

/// The most descriptors a worker inherits.
pub const MAX_INHERITED: usize = 4;

/// The outcome of a worker that tried to run more processes and threads
/// than its limit.
pub fn process_limit_outcome(limit: u32) -> Outcome {
    Outcome::ProcessLimit(limit)
}

/// The outcome of a worker whose program was killed by `signal`.
pub fn signal_outcome(signal: i32) -> Outcome {
    let name = nix::sys::signal::Signal::try_from(signal)
        .map(|s| format!(" ({})", s.as_str()))
        .unwrap_or_default();
    Outcome::Trapped(format!("killed by signal {signal}{name}"))
}

/// What a node needs to run native workers, once it knows it can.
#[derive(Clone)]
pub struct NativeSandbox {
    inner: Arc<Inner>,
}

struct Inner {
    config: NativeConfig,
    hierarchy: Hierarchy,
    /// Outside ids of running workers.
    ids_used: Mutex<BTreeSet<u32>>,
    /// Numbers the workers' control groups.
    started: AtomicU64,
}

impl NativeSandbox {
    /// Checks that this machine can enforce every part of the sandbox, by
    /// building one (with the helper, in a scratch job directory, in a
    /// control group of its own) and running nothing in it. Blocks for the
    /// few milliseconds that takes; call it at the node's start.
    pub fn probe(config: NativeConfig) -> Result<NativeSandbox, Unenforceable> {
        if config.ids.is_empty() || config.ids.start == 0 {
            return Err(Unenforceable(
                "no user ids for native workers (the range is empty or has root)".into(),
            ));
        }
        if let Err(e) = std::fs::metadata(&config.init_program) {
            return Err(Unenforceable(format!(
                "cannot start the sandbox helper {}: {e}",
                config.init_program.display()
            )));
        }
        let hierarchy = Hierarchy::find(&config.cgroup_name, config.cgroup_root.as_deref())
            .map_err(|e| Unenforceable(format!("control groups: {e}")))?;
        landlock::probe().map_err(Unenforceable)?;
        let actions = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
            .map_err(|e| Unenforceable(format!("seccomp: this kernel has no filters: {e}")))?;
        if !actions.split_whitespace().any(|a| a == "errno") {
            return Err(Unenforceable(
                "seccomp: this kernel's filters cannot return errors".into(),
            ));
        }
        seccomp::filters().map_err(Unenforceable)?;
        let sandbox = NativeSandbox {
            inner: Arc::new(Inner {
                config,
                hierarchy,
                ids_used: Mutex::new(BTreeSet::new()),
                started: AtomicU64::new(0),
            }),
        };
        sandbox.trial().map_err(Unenforceable)?;
        Ok(sandbox)
    }

    /// Which control groups the workers get, for the node's log.
    pub fn describe(&self) -> String {
        self.inner.hierarchy.describe()
    }

    /// The directories under which the workers' control groups are made
    /// (one per v1 controller, or one in v2): each worker's group is a
    /// directory in them while it runs, removed when it ends.
    pub fn cgroup_parents(&self) -> Vec<PathBuf> {
        self.inner.hierarchy.parents()
    }

    /// Sets a sandbox up once without running anything in it.
    fn trial(&self) -> Result<(), String> {
        let inner = &self.inner;
        // Unique in the process, and hard to guess for another user of
        // /tmp (who could only make the probe fail by taking the name).
        static TRIALS: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let scratch = std::env::temp_dir().join(format!(
            "zorilla-native-probe-{}-{}-{nanos}",
            std::process::id(),
            TRIALS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&scratch)
            .map_err(|e| format!("cannot make {}: {e}", scratch.display()))?;
        let id = inner.config.ids.start;
        let result = (|| {
            std::os::unix::fs::lchown(&scratch, Some(id), Some(id))
                .map_err(|e| format!("cannot give {} to user {id}: {e}", scratch.display()))?;
            let name = format!(
                "probe-{}-{}",
                std::process::id(),
                inner.started.fetch_add(1, Ordering::Relaxed)
            );
            let group = inner
                .hierarchy
                .create(
                    &name,
                    GroupLimits {
                        memory_bytes: 64 << 20,
                        processes: 16,
                    },
                )
                .map_err(|e| format!("control groups: cannot make a worker's group: {e}"))?;
            let plan = Plan {
                outside_id: id,
                inside_id: inner.config.inside_id,
                cgroups: group.procs_files(),
                job_dir: scratch.clone(),
                read_only: SYSTEM_PATHS.iter().map(PathBuf::from).collect(),
                tmp_bytes: 1 << 20,
                probe: true,
                exe: "/bin/true".into(),
                args: Vec::new(),
            };
            let status = run_helper_blocking(&inner.config, &plan);
            drop(group);
            match status? {
                Status::Exited(0) => Ok(()),
                Status::Error(why) => Err(why),
                other => Err(format!("the trial sandbox ended unexpectedly: {other:?}")),
            }
        })();
        let _ = std::fs::remove_dir_all(&scratch);
        result
    }

    /// Starts a worker as a tokio task (call inside a tokio runtime) and
    /// returns its handle, the same as a WebAssembly worker's (a native
    /// worker never waits in the host API: its [`WorkerHandle::waiting`] is
    /// always `None`). Cancelling kills every process it started; its
    /// report comes once they and its control groups are gone. A worker
    /// that cannot start ends with [`Outcome::Failed`] saying why.
    pub fn start(&self, spec: NativeSpec) -> WorkerHandle {
        let (cancel, cancelled) = CancelHandle::new();
        let inner = self.inner.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut report = supervise(&inner, spec, cancelled).await;
            report.wall_time = started.elapsed();
            report
        });
        WorkerHandle {
            cancel,
            waiting: Waiting::default(),
            task,
        }
    }
}

fn failed(why: String) -> WorkerReport {
    WorkerReport {
        outcome: Outcome::Failed(why),
        cpu_time: Duration::ZERO,
        output_bytes: 0,
        wall_time: Duration::ZERO,
    }
}

/// Gives back a worker's id when it ends.
struct IdLease<'a> {
    inner: &'a Inner,
    id: u32,
}

impl<'a> IdLease<'a> {
    fn take(inner: &'a Inner) -> Option<IdLease<'a>> {
        let mut used = inner.ids_used.lock().unwrap_or_else(|p| p.into_inner());
        let id = inner.config.ids.clone().find(|id| !used.contains(id))?;
        used.insert(id);
        Some(IdLease { inner, id })
    }
}

impl Drop for IdLease<'_> {
    fn drop(&mut self) {
        let mut used = self
            .inner
            .ids_used
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        used.remove(&self.id);
    }
}

/// Runs one worker from setup to cleanup.
async fn supervise(
    inner: &Arc<Inner>,
    spec: NativeSpec,
    cancelled: watch::Receiver<bool>,
) -> WorkerReport {
    if let Err(why) = check_paths(&spec) {
        return failed(why);
    }
    let Some(lease) = IdLease::take(inner) else {
        return failed("no free user id for a native worker".into());
    };
    let limits = spec.limits.capped_by(&inner.config.caps);
    let processes = spec.max_processes.min(inner.config.max_processes);
    let id = lease.id;
    let n = inner.started.fetch_add(1, Ordering::Relaxed);
    let name = format!("w{}-{n}", std::process::id());
    let setup = {
        let inner = inner.clone();
        let job_dir = spec.job_dir.clone();
        tokio::task::spawn_blocking(move || {
            give_tree(&job_dir, id).map_err(|e| {
                format!(
                    "cannot give the job directory {} to the worker's user {id}: {e}",
                    job_dir.display()
                )
            })?;
            let group_limits = GroupLimits {
                memory_bytes: limits.memory_bytes,
                // The helper and the namespace's first process are in the
                // group too.
                processes: processes.saturating_add(2),
            };
            inner
                .hierarchy
                .create(&name, group_limits)
                .map_err(|e| format!("cannot make the worker's control group: {e}"))
        })
        .await
    };
    let group = match setup {
        Ok(Ok(group)) => Arc::new(group),
        Ok(Err(why)) => return failed(why),
        Err(e) => return failed(format!("setup task failed: {e}")),
    };
    let plan = Plan {
        outside_id: id,
        inside_id: inner.config.inside_id,
        cgroups: group.procs_files(),
        job_dir: spec.job_dir.clone(),
        read_only: spec.read_only_paths.clone(),
        tmp_bytes: limits.memory_bytes.min(limits.disk_bytes),
        probe: false,
        exe: spec.exe.clone(),
        args: spec.args.iter().map(OsString::from).collect(),
    };
    let report = run(inner, &plan, &group, limits, processes, spec, cancelled).await;
    // The group's end (see `Group`'s drop) may wait for the kernel.
    let _ = tokio::task::spawn_blocking(move || drop(group)).await;
    drop(lease);
    report
}

/// Runs the helper and watches the worker until it ends, then kills
/// whatever is left of it.
async fn run(
    inner: &Inner,
    plan: &Plan,
    group: &Arc<Group>,
    limits: Limits,
    processes: u32,
    mut spec: NativeSpec,
    mut cancelled: watch::Receiver<bool>,
) -> WorkerReport {
    let flag = Arc::new(LimitFlag::default());
    // The node's copies close once the helper has its own: the worker's
    // ends of the sockets then end with the worker.
    let mut inherit = std::mem::take(&mut spec.inherit);
    inherit.truncate(MAX_INHERITED);
    let output = OutputShared::new(spec.output, limits.output_bytes, flag.clone());
    let (status_r, status_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(pipe) => pipe,
        Err(e) => return failed(format!("cannot make a pipe: {e}")),
    };
    let spawned = {
        let mut command = tokio::process::Command::new(&inner.config.init_program);
        command
            .args(&inner.config.init_args)
            .args(plan.to_args())
            // The job's program inherits the helper's environment.
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::from(status_w))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if !inherit.is_empty() {
            let fds: Vec<i32> = inherit.iter().map(|fd| fd.as_raw_fd()).collect();
            inherit_as(&mut command, &fds);
        }
        let spawned = command.spawn();
        drop(inherit);
        spawned
        // The command, with the node's end of the status pipe's writing
        // side, is dropped here: the pipe ends when the helper's copies do.
    };
    let mut helper = match spawned {
        Ok(child) => child,
        Err(e) => {
            return failed(format!(
                "cannot start the sandbox helper {}: {e}",
                inner.config.init_program.display()
            ));
        }
    };
    let status = tokio::task::spawn_blocking(move || {
        let mut text = String::new();
        let _ = std::fs::File::from(status_r)
            .take(4096)
            .read_to_string(&mut text);
        text
    });
    let pumps: Vec<JoinHandle<bool>> = [
        helper
            .stdout
            .take()
            .map(|p| (OutputKind::Stdout, Box::new(p) as Box<dyn PipeRead>)),
        helper
            .stderr
            .take()
            .map(|p| (OutputKind::Stderr, Box::new(p) as Box<dyn PipeRead>)),
    ]
    .into_iter()
    .flatten()
    .map(|(kind, pipe)| {
        let output = output.clone();
        tokio::spawn(async move { output.pump(kind, pipe).await })
    })
    .collect();

    let deadline = Instant::now().checked_add(limits.wall_time);
    let ended = {
        let cancel = async {
            if cancelled.wait_for(|c| *c).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let timeout = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
                None => std::future::pending().await,
            }
        };
        let disk = crate::worker::watch_disk(Some(spec.job_dir.clone()), limits.disk_bytes);
        let watch = watch_group(group, limits, processes, &flag);
        tokio::select! {
            biased;
            () = cancel => Some(Outcome::Cancelled),
            () = timeout => Some(Outcome::TimeLimit(limits.wall_time)),
            () = disk => Some(Outcome::DiskLimit),
            outcome = watch => Some(outcome),
            _ = helper.wait() => None,
        }
    };
    // Whatever ended it, nothing of the worker may keep running.
    let _ = helper.start_kill();
    let killer = group.clone();
    let _ = tokio::task::spawn_blocking(move || killer.kill_all(KILL_PATIENCE)).await;
    let _ = helper.wait().await;
    let status = status.await.unwrap_or_default();
    for pump in pumps {
        let _ = pump.await;
    }
    output.send_tail().await;
    let counters = group.counters();
    let outcome = match ended {
        Some(outcome) => outcome,
        None => ended_by_itself(&status, counters, &flag, processes),
    };
    WorkerReport {
        outcome,
        cpu_time: counters.cpu,
        output_bytes: output.written(),
        wall_time: Duration::ZERO,
    }
}

/// A pipe the pumps read.
trait PipeRead: tokio::io::AsyncRead + Unpin + Send {}
impl<T: tokio::io::AsyncRead + Unpin + Send> PipeRead for T {}

/// The limit a worker's group (or its output) crossed, if any; CPU time is
/// checked by [`watch_group`] only (a worker that ended keeps its end).
fn crossed(counters: cgroup::Counters, flag: &LimitFlag, processes: u32) -> Option<Outcome> {
    if counters.oom_kills > 0 {
        Some(Outcome::OutOfMemory)
    } else if flag.get() == Some(LimitHit::Output) {
        Some(Outcome::OutputLimit)
    } else if counters.pids_refused > 0 {
        Some(process_limit_outcome(processes))
    } else {
        None
    }
}

/// The outcome of a worker whose helper ended on its own: a limit that
/// killed or stopped it, else what the helper reported.
fn ended_by_itself(
    status: &str,
    counters: cgroup::Counters,
    flag: &LimitFlag,
    processes: u32,
) -> Outcome {
    if let Some(outcome) = crossed(counters, flag, processes) {
        return outcome;
    }
    match Status::parse(status) {
        Some(Status::Exited(code)) => Outcome::Exited(code),
        Some(Status::Signalled(signal)) => signal_outcome(signal),
        Some(Status::Error(why)) => Outcome::Failed(why),
        None => Outcome::Failed("the sandbox's helper ended without saying how".into()),
    }
}

/// Returns once the worker's group crossed a limit (or its output did).
async fn watch_group(group: &Group, limits: Limits, processes: u32, flag: &LimitFlag) -> Outcome {
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let counters = group.counters();
        if let Some(outcome) = crossed(counters, flag, processes) {
            return outcome;
        }
        if counters.cpu > limits.cpu_time {
            return Outcome::CpuLimit(limits.cpu_time);
        }
    }
}

/// Runs the helper to its end without a runtime (the probe).
fn run_helper_blocking(config: &NativeConfig, plan: &Plan) -> Result<Status, String> {
    let (status_r, status_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| e.to_string())?;
    let child = std::process::Command::new(&config.init_program)
        .args(&config.init_args)
        .args(plan.to_args())
        .env_clear()
        .stdin(Stdio::from(status_w))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut child = child.map_err(|e| {
        format!(
            "cannot start the sandbox helper {}: {e}",
            config.init_program.display()
        )
    })?;
    let mut text = String::new();
    let _ = std::fs::File::from(status_r)
        .take(4096)
        .read_to_string(&mut text);
    let _ = child.wait();
    Status::parse(&text).ok_or_else(|| "the sandbox's helper ended without saying how".into())
}

/// Refuses paths the sandbox cannot show as asked.
fn check_paths(spec: &NativeSpec) -> Result<(), String> {
    if !spec.exe.is_absolute() {
        return Err(format!(
            "the program {} is not an absolute path",
            spec.exe.display()
        ));
    }
    for path in &spec.read_only_paths {
        check_read_only(path)?;
    }
    Ok(())
}

/// Whether the sandbox can show `path` read-only to a native worker: an
/// absolute path without `.` or `..`, not `/` and not under what the
/// sandbox makes itself (`/tmp`, `/job`, `/proc`, `/dev`). A node checks
/// what its owner lists when it starts, so that no worker fails on it.
pub fn check_read_only(path: &Path) -> Result<(), String> {
    let normal = path.is_absolute()
        && path.components().skip(1).count() > 0
        && path
            .components()
            .skip(1)
            .all(|c| matches!(c, Component::Normal(_)));
    let made = ["/tmp", "/job", "/proc", "/dev"]
        .iter()
        .any(|own| path.starts_with(own));
    if !normal || made {
        return Err(format!(
            "the read-only path {} cannot be shown to a native worker \
             (absolute, without . or .., not /, /tmp, /job, /proc or /dev)",
            path.display()
        ));
    }
    Ok(())
}

/// Gives the job directory and everything in it to the worker's user and
/// group, never through a link, bounded like every walk of a job directory
/// ([`crate::jobfs::MAX_ENTRIES`] entries, [`crate::jobfs::MAX_DEPTH`]
/// levels).
fn give_tree(root: &Path, id: u32) -> std::io::Result<()> {
    let mut budget = crate::jobfs::MAX_ENTRIES;
    let mut dirs = vec![(root.to_path_buf(), 0usize)];
    std::os::unix::fs::lchown(root, Some(id), Some(id))?;
    while let Some((dir, depth)) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            budget = budget
                .checked_sub(1)
                .ok_or_else(|| std::io::Error::other("too many files"))?;
            let path = entry.path();
            std::os::unix::fs::lchown(&path, Some(id), Some(id))?;
            if entry.file_type()?.is_dir() && depth < crate::jobfs::MAX_DEPTH {
                dirs.push((path, depth + 1));
            }
        }
    }
    Ok(())
}

/// Makes `fds` the spawned helper's descriptors [`INHERITED_FD`] and up,
/// open across its `exec` (and so the worker's: the helper and C keep
/// them, and G inherits them). Between fork and exec only `fcntl` and
/// `dup2` run, both async-signal-safe, so this is sound in the
/// multi-threaded node; every other descriptor the node opens is
/// close-on-exec (Rust's default), so only these reach the worker, and
/// only this worker.
fn inherit_as(command: &mut tokio::process::Command, fds: &[i32]) {
    use nix::libc;
    let mut from = [-1; MAX_INHERITED];
    let count = fds.len().min(MAX_INHERITED);
    from[..count].copy_from_slice(&fds[..count]);
    #[allow(unsafe_code)]
    // SAFETY: the closure makes only async-signal-safe calls (fcntl,
    // dup2) and touches no memory but its own copy of `from` (an array:
    // nothing is allocated between fork and exec).
    unsafe {
        command.pre_exec(move || {
            // Every descriptor is first copied above every target, and
            // only then moved to its target: a source that is another's
            // target is never overwritten before it is copied.
            let above = INHERITED_FD + MAX_INHERITED as i32;
            let mut high = [-1; MAX_INHERITED];
            for i in 0..count {
                high[i] = libc::fcntl(from[i], libc::F_DUPFD_CLOEXEC, above);
                if high[i] < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (i, fd) in high.iter().take(count).enumerate() {
                if libc::dup2(*fd, INHERITED_FD + i as i32) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(read_only: &[&str]) -> NativeSpec {
        NativeSpec {
            exe: "/bin/true".into(),
            args: Vec::new(),
            env: Vec::new(),
            job_dir: "/nonexistent".into(),
            read_only_paths: read_only.iter().map(PathBuf::from).collect(),
            limits: Limits::UNLIMITED,
            max_processes: 1,
            output: None,
            inherit: Vec::new(),
        }
    }

    #[test]
    fn read_only_paths_must_be_plain_and_not_the_sandboxs_own() {
        assert!(check_paths(&spec(&["/usr", "/lib64", "/opt/mpich"])).is_ok());
        for bad in [
            "/",
            "usr",
            "/usr/../etc",
            "/tmp",
            "/tmp/x",
            "/proc",
            "/dev/shm",
            "/job",
        ] {
            assert!(check_paths(&spec(&[bad])).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_ended_helper_is_told_by_its_limits_first() {
        let counters = cgroup::Counters::default();
        let clean = LimitFlag::default();
        assert_eq!(
            ended_by_itself("exited 3\n", counters, &clean, 8),
            Outcome::Exited(3)
        );
        assert_eq!(
            ended_by_itself("signal 11\n", counters, &clean, 8),
            Outcome::Trapped("killed by signal 11 (SIGSEGV)".into())
        );
        let oom = cgroup::Counters {
            oom_kills: 1,
            ..counters
        };
        assert_eq!(
            ended_by_itself("signal 9\n", oom, &clean, 8),
            Outcome::OutOfMemory
        );
        let forks = cgroup::Counters {
            pids_refused: 3,
            ..counters
        };
        assert_eq!(
            ended_by_itself("exited 1\n", forks, &clean, 8),
            process_limit_outcome(8)
        );
        assert!(matches!(
            ended_by_itself("", counters, &clean, 8),
            Outcome::Failed(_)
        ));
    }
}

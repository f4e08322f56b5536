//! One running worker: its store, its limits, how it is started, cancelled
//! and how its end is reported.
//!
//! A worker runs as a tokio task driving wasmtime's async API. The engine's
//! epoch ticker makes the guest yield to the executor on every tick, so a
//! worker never holds an executor thread for more than one tick and its task
//! can always notice cancellation and its wall-clock deadline, even in a
//! guest that never calls the host. CPU time is read from the CPU clock of
//! the thread that polls the guest, before and after every poll ([`metered`]):
//! the guest runs only inside a poll, but successive polls may run on
//! different executor threads, so the per-poll differences are summed. This
//! costs nothing in the guest's code, unlike fuel metering. Memory is limited
//! by a resource limiter, output in the capture streams ([`crate::output`]).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use wasmtime::{Store, Trap, TypedFunc};
use wasmtime_wasi::I32Exit;
use wasmtime_wasi::p1::WasiP1Ctx;

use crate::diskquota::{self, DiskQuota, DiskQuotaState};
use crate::epoch::Ticker;
use crate::hostapi::{HostApiState, HostNet, Waiting};
use crate::limits::{LimitFlag, LimitHit, Limits, MemoryLimiter};
use crate::output::{OutputChunk, OutputShared};
use crate::transport::Transport;

/// Everything a worker needs besides its module.
pub struct WorkerSpec {
    /// `argv[0]` as the guest sees it.
    pub program_name: String,
    /// Arguments after `argv[0]`.
    pub args: Vec<String>,
    /// Environment variables; nothing of the host's environment is passed.
    pub env: Vec<(String, String)>,
    /// The job directory. Its `inputs/` subdirectory is preopened read-only
    /// as `/inputs` and its `outputs/` subdirectory read-write as `/outputs`
    /// (both are created if missing); nothing else of the host's filesystem
    /// is visible. `None`: no filesystem at all.
    pub job_dir: Option<PathBuf>,
    /// The limits the job asks for; each is capped by the owner's
    /// [`crate::SandboxConfig::caps`].
    pub limits: Limits,
    /// Where stdout and stderr go, in chunks. `None`: discarded (but still
    /// counted against the output limit).
    pub output: Option<mpsc::Sender<OutputChunk>>,
    /// The worker's link to the rest of its job. `None`: the worker is rank 0
    /// of a job of one.
    pub transport: Option<Box<dyn Transport>>,
    /// Where the worker's checkpoints go (see [`crate::checkpoint`]).
    /// `None`: the checkpoint calls answer `ZORILLA_ENOTSUP`.
    pub checkpoints: Option<std::sync::Arc<dyn crate::checkpoint::Checkpoints>>,
    /// `Some` for a deterministic worker (its randomness and clocks, see
    /// [`crate::determinism`]), whose program must have been loaded with
    /// [`crate::Execution::Deterministic`]; `None` for every other.
    pub deterministic: Option<crate::Determinism>,
}

impl Default for WorkerSpec {
    fn default() -> Self {
        WorkerSpec {
            program_name: "worker".to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            job_dir: None,
            limits: Limits::UNLIMITED,
            output: None,
            transport: None,
            checkpoints: None,
            deterministic: None,
        }
    }
}

/// How a worker ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The guest returned from `main` or called `exit`, with this status.
    Exited(i32),
    /// The guest trapped (e.g. `unreachable`, out-of-bounds access, stack
    /// overflow); the message says which trap.
    Trapped(String),
    /// The guest's linear memory would have grown beyond its limit.
    OutOfMemory,
    /// The guest used up its CPU time: the limit in force.
    CpuLimit(Duration),
    /// The guest ran past its wall-clock limit: the limit in force.
    TimeLimit(Duration),
    /// The guest wrote more than its output limit to stdout and stderr.
    OutputLimit,
    /// The guest kept more than its disk limit in `/outputs`.
    DiskLimit,
    /// A native worker tried to run more processes and threads at once
    /// than its limit: the limit in force.
    ProcessLimit(u32),
    /// The worker was cancelled through its [`CancelHandle`].
    Cancelled,
    /// The worker could not start (e.g. no free worker slot, job directory
    /// unusable); the message says why.
    Failed(String),
}

impl std::fmt::Display for Outcome {
    /// What happened, as the end of a sentence about the worker ("rank 3
    /// ..."), with the figures of the limit it hit.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Exited(code) => write!(f, "exited with status {code}"),
            Outcome::Trapped(trap) => write!(f, "was stopped by a trap: {trap}"),
            Outcome::OutOfMemory => f.write_str("needed more memory than its limit allows"),
            Outcome::CpuLimit(limit) => {
                write!(f, "used its CPU-time limit of {}", HumanDuration(*limit))
            }
            Outcome::TimeLimit(limit) => write!(
                f,
                "ran past its wall-clock limit of {}",
                HumanDuration(*limit)
            ),
            Outcome::OutputLimit => f.write_str("wrote more than its output limit"),
            Outcome::DiskLimit => f.write_str("kept more than its disk limit in /outputs"),
            Outcome::ProcessLimit(limit) => write!(
                f,
                "tried to run more than its limit of {limit} processes and threads"
            ),
            Outcome::Cancelled => f.write_str("was cancelled"),
            Outcome::Failed(why) => write!(f, "could not start: {why}"),
        }
    }
}

/// A duration the way a person writes it: `500 ms`, `1.5 s`, `60 s`,
/// `10 min`, `1 h 30 min`.
#[derive(Clone, Copy, Debug)]
pub struct HumanDuration(pub Duration);

impl std::fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.0;
        if d < Duration::from_secs(1) {
            return write!(f, "{} ms", d.as_millis());
        }
        if d.subsec_millis() != 0 {
            let text = format!("{:.3}", d.as_secs_f64());
            return write!(f, "{} s", text.trim_end_matches('0'));
        }
        let secs = d.as_secs();
        if secs <= 60 {
            return write!(f, "{secs} s");
        }
        let parts = [
            (secs / 3600, "h"),
            (secs / 60 % 60, "min"),
            (secs % 60, "s"),
        ];
        let mut first = true;
        for (value, unit) in parts {
            if value != 0 {
                if !first {
                    f.write_str(" ")?;
                }
                write!(f, "{value} {unit}")?;
                first = false;
            }
        }
        Ok(())
    }
}

/// What the caller learns when a worker ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerReport {
    /// How it ended.
    pub outcome: Outcome,
    /// CPU time the guest used (see [`Limits::cpu_time`]).
    pub cpu_time: Duration,
    /// Bytes written to stdout and stderr (up to the output limit).
    pub output_bytes: u64,
    /// Wall-clock time from the guest's first instruction to its end.
    pub wall_time: Duration,
}

/// The store data of a worker.
pub(crate) struct WorkerState {
    pub(crate) wasi: WasiP1Ctx,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) net: HostNet,
    pub(crate) disk: DiskQuota,
}

impl HostApiState for WorkerState {
    fn net(&mut self) -> &mut HostNet {
        &mut self.net
    }
}

impl DiskQuotaState for WorkerState {
    fn disk_and_wasi(&mut self) -> (&mut DiskQuota, &mut WasiP1Ctx) {
        (&mut self.disk, &mut self.wasi)
    }
}

/// Cancels a worker, at any time, from anywhere. Cloneable; cancelling a
/// worker that already ended does nothing.
#[derive(Clone)]
pub struct CancelHandle(Arc<watch::Sender<bool>>);

impl CancelHandle {
    pub(crate) fn new() -> (CancelHandle, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        (CancelHandle(Arc::new(tx)), rx)
    }

    /// Ends the worker with [`Outcome::Cancelled`] (unless it ended first).
    pub fn cancel(&self) {
        self.0.send_replace(true);
    }

    /// Returns once [`CancelHandle::cancel`] was called, by anyone, even
    /// after the worker ended: whoever still works for the worker (sending
    /// its outputs) stops then too.
    pub async fn cancelled(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`: `wait_for` cannot fail.
        let _ = rx.wait_for(|c| *c).await;
    }
}

/// A worker that is instantiated but has not run any guest code yet.
///
/// Made by [`crate::Sandbox::prepare`]; [`PreparedWorker::run`] runs it. The
/// split lets a caller instantiate ahead of time (and lets the benchmark
/// measure instantiation alone).
pub struct PreparedWorker {
    pub(crate) store: Store<WorkerState>,
    pub(crate) start: TypedFunc<(), ()>,
    pub(crate) limits: Limits,
    pub(crate) flag: Arc<LimitFlag>,
    pub(crate) output: Arc<OutputShared>,
    pub(crate) cancel: CancelHandle,
    pub(crate) cancelled: watch::Receiver<bool>,
    /// The host directory behind `/outputs`, if the worker has one.
    pub(crate) outputs: Option<PathBuf>,
    /// Keeps the engine's epoch ticker alive while the worker exists: without
    /// ticks a spinning guest would never yield, and could not be stopped.
    pub(crate) _ticker: Arc<Ticker>,
}

impl PreparedWorker {
    /// A handle that cancels this worker, before or while it runs.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.cancel.clone()
    }

    /// Runs the guest's `_start` to its end, whatever that end is.
    pub async fn run(mut self) -> WorkerReport {
        let started = Instant::now();
        let deadline = started.checked_add(self.limits.wall_time);
        let cpu_used = CpuMeter::default();
        let outcome = {
            let mut cancelled = self.cancelled.clone();
            let cancel = async move {
                // If every handle is gone nobody can cancel: wait for ever.
                if cancelled.wait_for(|c| *c).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            let timeout = async move {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
                    None => std::future::pending().await,
                }
            };
            let disk = watch_disk(self.outputs.clone(), self.limits.disk_bytes);
            let call = metered(
                self.start.call_async(&mut self.store, ()),
                self.limits.cpu_time,
                &cpu_used,
            );
            // Dropping `call` abandons the guest mid-flight; wasmtime unwinds
            // its stack safely and the store is not run again.
            tokio::select! {
                biased;
                () = cancel => Outcome::Cancelled,
                () = timeout => Outcome::TimeLimit(self.limits.wall_time),
                () = disk => Outcome::DiskLimit,
                result = call => match result {
                    Some(result) => classify(result, &self.flag),
                    None => Outcome::CpuLimit(self.limits.cpu_time),
                },
            }
        };
        let report = WorkerReport {
            outcome,
            cpu_time: cpu_used.used(),
            output_bytes: self.output.written(),
            wall_time: started.elapsed(),
        };
        // The last bytes of a worker that hit its output limit while the
        // consumer was behind (see `OutputShared::tail`).
        self.output.send_tail().await;
        report
    }
}

/// Returns once the files under `dir` take more than `limit` bytes (never,
/// without a directory or a limit).
pub(crate) async fn watch_disk(dir: Option<PathBuf>, limit: u64) {
    let Some(dir) = dir.filter(|_| limit != u64::MAX) else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(diskquota::DISK_POLL).await;
        let measured = dir.clone();
        let used = tokio::task::spawn_blocking(move || crate::jobfs::tree_bytes(&measured))
            .await
            .unwrap_or(0);
        if used > limit {
            return;
        }
    }
}

/// CPU time used by a worker so far, in nanoseconds (shared with the
/// future that measures it, which must be `Send`).
#[derive(Default)]
pub(crate) struct CpuMeter(AtomicU64);

impl CpuMeter {
    pub(crate) fn used(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }

    fn add(&self, cpu: Duration) -> Duration {
        let nanos = u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX);
        let total = self.0.load(Ordering::Relaxed).saturating_add(nanos);
        // Only the future being polled writes.
        self.0.store(total, Ordering::Relaxed);
        Duration::from_nanos(total)
    }
}

/// Runs `call`, adding the CPU time each poll of it takes to `used`, and
/// gives up on it (`None`) once `used` is beyond `limit`.
///
/// The guest runs only while its future is polled, and a poll runs on one
/// thread: the difference of that thread's CPU clock across the poll is CPU
/// time the guest (and the host functions it called) used. Between polls
/// the task may move to another executor thread, which is why the clock is
/// read per poll and never across polls. An epoch tick ends every poll of a
/// running guest, so the limit is checked at least once a tick.
pub(crate) async fn metered<T>(
    call: impl Future<Output = T>,
    limit: Duration,
    used: &CpuMeter,
) -> Option<T> {
    let mut call = std::pin::pin!(call);
    std::future::poll_fn(|cx| {
        let before = thread_cpu_time();
        let poll = call.as_mut().poll(cx);
        let total = used.add(thread_cpu_time().saturating_sub(before));
        match poll {
            Poll::Ready(result) => Poll::Ready(Some(result)),
            Poll::Pending if total > limit => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// CPU time used so far by the calling thread.
pub(crate) fn thread_cpu_time() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// Turns the result of `_start` into an outcome.
fn classify(result: wasmtime::Result<()>, flag: &LimitFlag) -> Outcome {
    // A crossed limit surfaces as some trap; the flag says which limit.
    match flag.get() {
        Some(LimitHit::Memory) => return Outcome::OutOfMemory,
        Some(LimitHit::Output) => return Outcome::OutputLimit,
        Some(LimitHit::Disk) => return Outcome::DiskLimit,
        None => {}
    }
    let error = match result {
        Ok(()) => return Outcome::Exited(0),
        Err(error) => error,
    };
    if let Some(exit) = error.downcast_ref::<I32Exit>() {
        return Outcome::Exited(exit.0);
    }
    let what = match error.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => format!("{error:#}"),
    };
    match error
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .and_then(|trace| trace.frames().first())
    {
        Some(frame) => Outcome::Trapped(format!(
            "{what} in function {}",
            function_name(frame.func_name(), frame.func_index())
        )),
        None => Outcome::Trapped(what),
    }
}

/// The longest function name a trap's sentence shows, in bytes (a C++
/// name demangles to any length); longer ones are cut, ending in `...`.
pub(crate) const MAX_FUNCTION_NAME_BYTES: usize = 256;

/// The name of the function a guest trapped in, as a user reads it: from
/// the module's name section, demangled if it is a Rust or C++ symbol
/// (C names as they are, `main` for the names clang gives a C `main`), or
/// `#index` (in the module's function index space) without a name section.
/// At most [`MAX_FUNCTION_NAME_BYTES`].
pub(crate) fn function_name(name: Option<&str>, index: u32) -> String {
    let Some(name) = name else {
        return format!("#{index}");
    };
    let mut shown = match name {
        "__original_main" | "__main_argc_argv" | "__main_void" => "main".to_string(),
        _ => {
            if let Ok(rust) = rustc_demangle::try_demangle(name) {
                // Without the hash suffix: `nqueens::solve`, not `...::h1234`.
                format!("{rust:#}")
            } else if let Some(cpp) = cpp_demangle::Symbol::new(name)
                .ok()
                .and_then(|symbol| symbol.demangle().ok())
            {
                cpp
            } else {
                name.to_string()
            }
        }
    };
    if shown.len() > MAX_FUNCTION_NAME_BYTES {
        let mut end = MAX_FUNCTION_NAME_BYTES - 3;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        shown.truncate(end);
        shown.push_str("...");
    }
    shown
}

/// A started worker.
pub struct WorkerHandle {
    pub(crate) cancel: CancelHandle,
    pub(crate) waiting: Waiting,
    pub(crate) task: JoinHandle<WorkerReport>,
}

impl WorkerHandle {
    /// The handle of a worker that could not start, saying why (its
    /// report is [`Outcome::Failed`]). Call inside a tokio runtime.
    pub fn failed(why: String) -> WorkerHandle {
        let (cancel, _) = CancelHandle::new();
        let report = WorkerReport {
            outcome: Outcome::Failed(why),
            cpu_time: Duration::ZERO,
            output_bytes: 0,
            wall_time: Duration::ZERO,
        };
        WorkerHandle {
            cancel,
            waiting: Waiting::default(),
            task: tokio::spawn(async move { report }),
        }
    }

    /// Whether the worker waits in a receive without a deadline.
    pub fn waiting(&self) -> Waiting {
        self.waiting.clone()
    }

    /// A handle that cancels this worker.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.cancel.clone()
    }

    /// Cancels the worker; [`WorkerHandle::wait`] then reports
    /// [`Outcome::Cancelled`] unless it had already ended.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Waits for the worker to end. (Dropping the handle instead detaches
    /// the worker; it still ends at its limits.)
    pub async fn wait(self) -> WorkerReport {
        match self.task.await {
            Ok(report) => report,
            Err(e) => WorkerReport {
                outcome: Outcome::Failed(format!("worker task failed: {e}")),
                cpu_time: Duration::ZERO,
                output_bytes: 0,
                wall_time: Duration::ZERO,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_classified() {
        let clean = LimitFlag::default();
        assert_eq!(classify(Ok(()), &clean), Outcome::Exited(0));
        assert_eq!(
            classify(Err(wasmtime::Error::new(I32Exit(7))), &clean),
            Outcome::Exited(7)
        );
        assert_eq!(
            classify(
                Err(wasmtime::Error::new(Trap::UnreachableCodeReached)),
                &clean
            ),
            Outcome::Trapped(Trap::UnreachableCodeReached.to_string())
        );
        // Whatever trap follows a crossed limit, the limit is the reason.
        let hit = LimitFlag::default();
        hit.set(LimitHit::Memory);
        assert_eq!(
            classify(Err(wasmtime::format_err!("grow failed")), &hit),
            Outcome::OutOfMemory
        );
    }

    #[test]
    fn trapped_functions_are_named_as_users_read_them() {
        assert_eq!(function_name(Some("solve"), 3), "solve");
        assert_eq!(function_name(Some("__original_main"), 3), "main");
        assert_eq!(function_name(None, 17), "#17");
        assert_eq!(
            function_name(Some("_ZN7nqueens5solve17h0123456789abcdefE"), 3),
            "nqueens::solve"
        );
        assert_eq!(
            function_name(Some("_ZN5board5placeEii"), 3),
            "board::place(int, int)"
        );
        let long = function_name(Some(&"x".repeat(5000)), 3);
        assert_eq!(long.len(), MAX_FUNCTION_NAME_BYTES);
        assert!(long.ends_with("..."));
    }

    #[test]
    fn outcomes_read_as_sentences_with_their_figures() {
        let cases = [
            (Outcome::Exited(3), "exited with status 3"),
            (
                Outcome::CpuLimit(Duration::from_secs(60)),
                "used its CPU-time limit of 60 s",
            ),
            (
                Outcome::TimeLimit(Duration::from_secs(600)),
                "ran past its wall-clock limit of 10 min",
            ),
            (
                Outcome::TimeLimit(Duration::from_secs(5400)),
                "ran past its wall-clock limit of 1 h 30 min",
            ),
            (
                Outcome::CpuLimit(Duration::from_millis(1500)),
                "used its CPU-time limit of 1.5 s",
            ),
            (
                Outcome::TimeLimit(Duration::from_millis(200)),
                "ran past its wall-clock limit of 200 ms",
            ),
            (
                Outcome::CpuLimit(Duration::from_secs(90)),
                "used its CPU-time limit of 1 min 30 s",
            ),
        ];
        for (outcome, sentence) in cases {
            assert_eq!(outcome.to_string(), sentence);
        }
    }

    #[test]
    fn the_thread_cpu_clock_counts_work_not_sleep() {
        let before = thread_cpu_time();
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu_time() - before;
        assert!(slept < Duration::from_millis(20), "{slept:?}");
        let before = thread_cpu_time();
        let mut x = 0u64;
        while thread_cpu_time() - before < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(thread_cpu_time() - before >= Duration::from_millis(30));
    }

    /// Burns `per_poll` of CPU in every poll; ready at the poll after
    /// `pending` pending ones.
    struct Burn {
        pending: u32,
        per_poll: Duration,
    }

    fn burn(cpu: Duration) {
        let start = thread_cpu_time();
        let mut x = 0u64;
        while thread_cpu_time() - start < cpu {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    impl Future for Burn {
        type Output = ();
        fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
            burn(self.per_poll);
            if self.pending == 0 {
                return Poll::Ready(());
            }
            self.pending -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn cpu_time_is_summed_over_polls_on_different_threads() {
        let ms = Duration::from_millis;
        let meter = CpuMeter::default();
        let burning = Burn {
            pending: 2,
            per_poll: ms(30),
        };
        let mut call = Box::pin(metered(burning, Duration::MAX, &meter));
        assert!(poll_once(call.as_mut()).is_pending());
        // The thread works for something else between polls: not the
        // guest's time.
        burn(ms(100));
        std::thread::scope(|s| {
            s.spawn(|| assert!(poll_once(call.as_mut()).is_pending()))
                .join()
                .unwrap();
        });
        assert_eq!(poll_once(call.as_mut()), Poll::Ready(Some(())));
        let used = meter.used();
        assert!(used >= ms(90) && used < ms(150), "{used:?}");
    }

    #[test]
    fn a_call_over_its_cpu_limit_is_given_up_at_the_next_poll() {
        let ms = Duration::from_millis;
        let meter = CpuMeter::default();
        let burning = Burn {
            pending: 100,
            per_poll: ms(10),
        };
        let mut call = Box::pin(metered(burning, ms(35), &meter));
        let mut polls = 0;
        let result = loop {
            polls += 1;
            if let Poll::Ready(result) = poll_once(call.as_mut()) {
                break result;
            }
        };
        assert_eq!(result, None);
        assert_eq!(polls, 4);
        let used = meter.used();
        assert!(used >= ms(40) && used < ms(60), "{used:?}");
    }
}

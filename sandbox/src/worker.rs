//! One running worker: its store, its limits, how it is started, cancelled
//! and how its end is reported.
//!
//! A worker runs as a tokio task driving wasmtime's async API. The engine's
//! epoch ticker makes the guest yield to the executor on every tick, so a
//! worker never holds an executor thread for more than one tick and its task
//! can always notice cancellation and its wall-clock deadline, even in a
//! guest that never calls the host. CPU time is metered with fuel, memory
//! with a resource limiter, output in the capture streams
//! ([`crate::output`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use wasmtime::{ResourceLimiter, Store, Trap, TypedFunc};
use wasmtime_wasi::I32Exit;
use wasmtime_wasi::p1::WasiP1Ctx;

use crate::hostapi::HostNet;
use crate::limits::Limits;
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
    /// The guest used up its CPU budget (fuel).
    CpuLimit,
    /// The guest ran past its wall-clock limit.
    TimeLimit,
    /// The guest wrote more than its output limit to stdout and stderr.
    OutputLimit,
    /// The guest kept more than its disk limit in `/outputs`.
    DiskLimit,
    /// The worker was cancelled through its [`CancelHandle`].
    Cancelled,
    /// The worker could not start (e.g. no free worker slot, job directory
    /// unusable); the message says why.
    Failed(String),
}

/// What the caller learns when a worker ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerReport {
    /// How it ended.
    pub outcome: Outcome,
    /// Fuel consumed by the guest.
    pub fuel_used: u64,
    /// Bytes written to stdout and stderr (up to the output limit).
    pub output_bytes: u64,
    /// Wall-clock time from the guest's first instruction to its end.
    pub wall_time: Duration,
}

/// Which limit a worker crossed, as recorded by the limiter or the output
/// streams at the moment it happened (the trap that follows is generic, so
/// the reason is taken from here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LimitHit {
    Memory = 1,
    Output = 2,
}

/// The first limit hit by a worker, shared between the places that detect
/// limits and the task that reports the outcome.
#[derive(Default)]
pub(crate) struct LimitFlag(AtomicU8);

impl LimitFlag {
    pub(crate) fn set(&self, hit: LimitHit) {
        // Only the first limit counts: it is what ended the worker.
        let _ = self
            .0
            .compare_exchange(0, hit as u8, Ordering::Relaxed, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Option<LimitHit> {
        match self.0.load(Ordering::Relaxed) {
            1 => Some(LimitHit::Memory),
            2 => Some(LimitHit::Output),
            _ => None,
        }
    }
}

/// Caps linear memory (and tables) of one worker. Growing past the cap is a
/// trap, not a failed `memory.grow`: a guest whose `malloc` returns NULL
/// usually dies in some unrelated way, and the owner wants to see
/// "out of memory".
pub(crate) struct MemoryLimiter {
    pub(crate) memory_bytes: usize,
    pub(crate) flag: Arc<LimitFlag>,
}

/// Table elements a worker may have (C guests use one small function table).
const MAX_TABLE_ELEMENTS: usize = 100_000;

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.flag.set(LimitHit::Memory);
            wasmtime::bail!(
                "memory limit of {} bytes exceeded (wanted {desired})",
                self.memory_bytes
            );
        }
        Ok(maximum.is_none_or(|max| desired <= max))
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS && maximum.is_none_or(|max| desired <= max))
    }
}

/// The store data of a worker.
pub(crate) struct WorkerState {
    pub(crate) wasi: WasiP1Ctx,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) net: HostNet,
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
    pub(crate) _sandbox: Arc<crate::SandboxInner>,
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
            let call = self.start.call_async(&mut self.store, ());
            // Dropping `call` abandons the guest mid-flight; wasmtime unwinds
            // its stack safely and the store is not run again.
            tokio::select! {
                biased;
                () = cancel => Outcome::Cancelled,
                () = timeout => Outcome::TimeLimit,
                () = disk => Outcome::DiskLimit,
                result = call => classify(result, &self.flag),
            }
        };
        let fuel_left = self.store.get_fuel().unwrap_or(0);
        WorkerReport {
            outcome,
            fuel_used: fuel_budget(&self.limits).saturating_sub(fuel_left),
            output_bytes: self.output.written(),
            wall_time: started.elapsed(),
        }
    }
}

/// Returns once the files under `dir` take more than `limit` bytes (never,
/// without a directory or a limit).
async fn watch_disk(dir: Option<PathBuf>, limit: u64) {
    let Some(dir) = dir.filter(|_| limit != u64::MAX) else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(crate::DISK_POLL).await;
        let measured = dir.clone();
        let used = tokio::task::spawn_blocking(move || crate::jobfs::tree_bytes(&measured))
            .await
            .unwrap_or(0);
        if used > limit {
            return;
        }
    }
}

/// The fuel a store is given: wasmtime keeps fuel as a signed 64-bit count.
pub(crate) fn fuel_budget(limits: &Limits) -> u64 {
    limits.cpu_fuel.min(i64::MAX as u64)
}

/// Turns the result of `_start` into an outcome.
fn classify(result: wasmtime::Result<()>, flag: &LimitFlag) -> Outcome {
    // A crossed limit surfaces as some trap; the flag says which limit.
    match flag.get() {
        Some(LimitHit::Memory) => return Outcome::OutOfMemory,
        Some(LimitHit::Output) => return Outcome::OutputLimit,
        None => {}
    }
    let error = match result {
        Ok(()) => return Outcome::Exited(0),
        Err(error) => error,
    };
    if let Some(exit) = error.downcast_ref::<I32Exit>() {
        return Outcome::Exited(exit.0);
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => Outcome::CpuLimit,
        Some(trap) => Outcome::Trapped(trap.to_string()),
        None => Outcome::Trapped(format!("{error:#}")),
    }
}

/// A started worker.
pub struct WorkerHandle {
    pub(crate) cancel: CancelHandle,
    pub(crate) task: JoinHandle<WorkerReport>,
}

impl WorkerHandle {
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
                fuel_used: 0,
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
    fn the_first_limit_hit_wins() {
        let flag = LimitFlag::default();
        assert_eq!(flag.get(), None);
        flag.set(LimitHit::Output);
        flag.set(LimitHit::Memory);
        assert_eq!(flag.get(), Some(LimitHit::Output));
    }

    #[test]
    fn results_are_classified() {
        let clean = LimitFlag::default();
        assert_eq!(classify(Ok(()), &clean), Outcome::Exited(0));
        assert_eq!(
            classify(Err(wasmtime::Error::new(I32Exit(7))), &clean),
            Outcome::Exited(7)
        );
        assert_eq!(
            classify(Err(wasmtime::Error::new(Trap::OutOfFuel)), &clean),
            Outcome::CpuLimit
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
    fn memory_growth_past_the_cap_traps_and_is_recorded() {
        let flag = Arc::new(LimitFlag::default());
        let mut limiter = MemoryLimiter {
            memory_bytes: 1 << 20,
            flag: flag.clone(),
        };
        assert!(limiter.memory_growing(0, 1 << 20, None).unwrap());
        assert!(!limiter.memory_growing(0, 1 << 19, Some(1 << 18)).unwrap());
        assert!(
            limiter
                .memory_growing(1 << 20, (1 << 20) + 1, None)
                .is_err()
        );
        assert_eq!(flag.get(), Some(LimitHit::Memory));
    }
}

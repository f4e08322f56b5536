//! Sandboxed WebAssembly workers for Zorilla, and the host API that lets the
//! workers of one job talk to each other.
//!
//! Every job worker is a WebAssembly module (a WASI preview 1 command) run by
//! wasmtime. This crate owns everything between "here are the module's
//! bytes" and "the worker ended like this":
//!
//! - [`Sandbox`]: one per node. Holds the shared [`wasmtime::Engine`]
//!   (epoch interruption driven by a ticker thread, cranelift tuned for
//!   speed, the pooling instance allocator), the linker that defines what
//!   guests may import, and the module cache.
//! - [`Sandbox::load`] turns module bytes into a [`Program`]: validated,
//!   compiled once and cached on disk by content hash ([`cache`]), imports
//!   checked against what we provide, so a bad module is refused before any
//!   worker starts. [`Sandbox::load_for`] loads it for deterministic
//!   workers ([`determinism`]), whose engine is made on first use.
//! - [`Sandbox::start`] runs one worker of a program as a tokio task with a
//!   [`WorkerSpec`] (arguments, environment, job directory, [`Limits`],
//!   output channel, transport) and returns a [`WorkerHandle`] to cancel it
//!   or wait for its [`WorkerReport`] and [`Outcome`].
//! - [`hostapi`]: the `zorilla` import module (rank, size, send, recv,
//!   barrier, membership changes), written against the [`Transport`] trait
//!   ([`transport`]); the node implements that over the overlay, and
//!   [`local::LocalGroup`] implements it in-process.
//!
//! - [`jobfs`]: how the host touches a job directory a guest has filled
//!   (and any other directory it does not trust): never through a link.
//! - [`determinism`]: deterministic workers, whose outputs are the same
//!   bits on every node: their engine settings, randomness and clocks.
//! - [`checkpoint`]: a guest's checkpoints as the sandbox sees them (the
//!   [`Checkpoints`] trait the node implements).
//! - [`output`]: capture of a worker's stdout and stderr, bounded.
//! - [`native`]: native workers, the job's own executable in a sandbox the
//!   kernel enforces (namespaces, Landlock, seccomp, control groups), ending
//!   in the same [`Outcome`]s; `zorilla-native-init` is its helper program.
//! - `worker`: one running worker: its store, start, cancellation, end.
//! - `limits`: a worker's limits, capped by the node owner's, and the
//!   memory limiter; `diskquota`: its disk limit, held at each write.
//! - `epoch`: the engine's epoch ticker; `error`: what fails before a
//!   worker runs.
//!
//! The guest side of the host API is `examples/include/zorilla.h`; example
//! and misbehaving guests are in `examples/`.
//!
//! # Threads and runtime
//!
//! Workers are async: [`Sandbox::start`] must be called inside a tokio
//! runtime, and a worker never blocks an executor thread for longer than one
//! epoch tick ([`SandboxConfig::epoch_tick`]). [`Sandbox::load`] compiles on
//! the calling thread (tens of milliseconds for a new module); call it from
//! `spawn_blocking` in async code.

pub mod cache;
pub mod checkpoint;
pub mod determinism;
mod diskquota;
mod epoch;
mod error;
pub mod hostapi;
pub mod jobfs;
mod limits;
pub mod local;
pub mod native;
pub mod output;
pub mod transport;
mod worker;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use wasmtime::{
    Config, Engine, ExternType, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolingAllocationConfig, Store,
};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

pub use cache::CacheStats;
pub use checkpoint::{
    Checkpoint, CheckpointError, Checkpoints, MAX_CHECKPOINT_BYTES, MAX_GENERATION,
    MemoryCheckpoints,
};
pub use determinism::{Determinism, Execution};
pub use diskquota::DISK_POLL;
pub use error::SandboxError;
pub use hostapi::Waiting;
pub use limits::Limits;
pub use output::{OutputChunk, OutputKind};
pub use transport::{
    ChangeKind, Delivery, Handover, Lend, MembershipChange, Rank, Received, RecvBuffer, Transport,
    TransportError,
};
pub use worker::{
    CancelHandle, HumanDuration, Outcome, PreparedWorker, WorkerHandle, WorkerReport, WorkerSpec,
};

use cache::{Digest32, DiskCache, sha256};
use epoch::Ticker;
use limits::{LimitFlag, LimitHit, MemoryLimiter};
use local::LocalGroup;
use output::{Capture, OutputShared};
use worker::WorkerState;

/// The node owner's configuration of the sandbox.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Directory of the compiled-module cache (created if missing).
    pub cache_dir: PathBuf,
    /// The most any job may use; a job's [`WorkerSpec::limits`] are capped
    /// by these.
    pub caps: Limits,
    /// Bytes that all workers together may keep in their `/outputs` (the
    /// node's offer of disk; each worker is also held to its own
    /// [`Limits::disk_bytes`]). A write that would pass it fails with
    /// `ENOSPC` ("No space left on device") and the worker goes on.
    /// `u64::MAX`: no such limit.
    pub disk_bytes: u64,
    /// Workers that may exist at once. With the pooling allocator (used when
    /// this is non-zero) this many instance slots are reserved up front,
    /// which makes instantiation a matter of microseconds; a worker started
    /// while all are busy fails with [`Outcome::Failed`]. 0 selects
    /// on-demand allocation with no fixed maximum.
    pub max_workers: u32,
    /// Interval of the epoch ticker: a running guest yields to the executor
    /// at least this often, which bounds how late cancellation and the
    /// wall-clock limit can take effect.
    pub epoch_tick: Duration,
    /// Compiled programs kept in memory (beyond that, the oldest is
    /// dropped and reloaded from disk when needed).
    pub loaded_programs: usize,
}

impl SandboxConfig {
    /// Defaults for a cache in `cache_dir`: [`Limits::default`] as caps, no
    /// limit on the disk of all workers together, 64 worker slots, a 5 ms
    /// epoch tick, 64 programs in memory.
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        SandboxConfig {
            cache_dir: cache_dir.into(),
            caps: Limits::default(),
            disk_bytes: u64::MAX,
            max_workers: 64,
            epoch_tick: Duration::from_millis(5),
            loaded_programs: 64,
        }
    }
}

/// The per-node WebAssembly runtime. Cheap to clone (shared state).
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<SandboxInner>,
}

struct SandboxInner {
    /// The engine of [`Execution::Default`] workers, made with the sandbox.
    fast: Runtime,
    /// The engine of [`Execution::Deterministic`] workers, made when the
    /// first is loaded (most nodes never run one); a failure to make it is
    /// kept and told each time.
    deterministic: OnceLock<Result<Runtime, String>>,
    loaded: Mutex<LoadedPrograms>,
    config: SandboxConfig,
    /// The disk all workers share ([`SandboxConfig::disk_bytes`]).
    disk: Arc<diskquota::DiskBudget>,
}

/// One engine and what is bound to it: the linker, the module cache and
/// the epoch ticker.
struct Runtime {
    engine: Engine,
    linker: Linker<WorkerState>,
    /// Every `(module, name)` the linker defines, to name a missing import.
    provided: HashSet<(String, String)>,
    cache: DiskCache,
    pooling: bool,
    /// Shared with every worker, which keeps it running while it exists.
    ticker: Arc<Ticker>,
}

/// Programs already in memory, with their insertion order for eviction.
#[derive(Default)]
struct LoadedPrograms {
    by_hash: HashMap<(Digest32, Execution), Program>,
    order: VecDeque<(Digest32, Execution)>,
}

/// A module ready to run as workers: validated, compiled, imports resolved.
/// Cheap to clone.
#[derive(Clone)]
pub struct Program {
    hash: Digest32,
    execution: Execution,
    pre: InstancePre<WorkerState>,
}

impl Program {
    /// SHA-256 of the module's bytes, in hex: the key of the module cache.
    pub fn hash_hex(&self) -> String {
        hex::encode(self.hash)
    }

    /// The engine it was compiled for, and so how its workers compute.
    pub fn execution(&self) -> Execution {
        self.execution
    }
}

/// The largest linear memory a 32-bit guest can have.
const MAX_WASM32_MEMORY: u64 = 4 << 30;

/// Inaccessible address space after each linear memory's reservation
/// (wasmtime's default): an access whose static offset is below this needs
/// no bounds check either.
const MEMORY_GUARD: u64 = 32 << 20;

fn engine_config(config: &SandboxConfig, pooling: bool, execution: Execution) -> Config {
    let mut wasm = Config::new();
    if execution == Execution::Deterministic {
        determinism::configure(&mut wasm);
    }
    // Cancellation and the wall-clock and CPU limits are checked at epoch
    // ticks. No fuel: metering every instruction slowed compute-bound
    // guests about threefold; CPU time comes from the thread CPU clock
    // instead (see `worker::metered`). The epoch checks (at every function
    // entry and loop header) cost CPU-bound guests about 13% (issue 13,
    // BENCHMARKS.md); wasmtime 48 has no cheaper interruption that also
    // stops a loop without calls, so they stay.
    wasm.epoch_interruption(true);
    // Said explicitly because guest speed depends on them (all are
    // wasmtime 48's defaults on 64-bit hosts): optimize for speed, and
    // give every 32-bit memory its whole 4 GiB of address space plus a
    // guard, so that any access outside the memory's current size faults
    // on inaccessible address space and the signal handler turns the fault
    // into a trap. Compiled code then carries no bounds checks.
    // With a smaller reservation Cranelift puts a compare and a
    // conditional move (its Spectre guard) in front of every load and
    // store with a computed address. The pooling allocator's
    // `max_memory_size` below only limits growth; it does not shrink the
    // reservation (checked in the machine code for both allocators).
    wasm.cranelift_opt_level(wasmtime::OptLevel::Speed);
    wasm.signals_based_traps(true);
    wasm.memory_reservation(MAX_WASM32_MEMORY);
    wasm.memory_guard_size(MEMORY_GUARD);
    // Not a default: a memory never moves, so that a receive can lend a
    // range of it to another thread (`transport::RecvBuffer`). With the
    // whole 32-bit address space reserved, growing never needs to move it.
    wasm.memory_may_move(false);
    if pooling {
        let slots = config.max_workers;
        let max_memory = config.caps.memory_bytes.min(MAX_WASM32_MEMORY);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_core_instances(slots)
            .total_memories(slots)
            .total_tables(slots)
            .total_stacks(slots)
            .max_memories_per_module(1)
            .max_tables_per_module(1)
            .max_memory_size(usize::try_from(max_memory).unwrap_or(usize::MAX));
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    wasm
}

impl Sandbox {
    /// Creates the engine, the linker, the cache and the epoch ticker.
    pub fn new(config: SandboxConfig) -> Result<Sandbox, SandboxError> {
        let fast = Runtime::new(&config, Execution::Default)?;
        let disk = diskquota::DiskBudget::new(config.disk_bytes);
        Ok(Sandbox {
            inner: Arc::new(SandboxInner {
                disk,
                fast,
                deterministic: OnceLock::new(),
                loaded: Mutex::new(LoadedPrograms::default()),
                config,
            }),
        })
    }

    /// The runtime of `execution`'s workers, made now if it is the first.
    fn runtime(&self, execution: Execution) -> Result<&Runtime, SandboxError> {
        match execution {
            Execution::Default => Ok(&self.inner.fast),
            Execution::Deterministic => self
                .inner
                .deterministic
                .get_or_init(|| {
                    Runtime::new(&self.inner.config, Execution::Deterministic)
                        .map_err(|e| e.to_string())
                })
                .as_ref()
                .map_err(|e| {
                    SandboxError::Engine(format!("the deterministic engine cannot run: {e}"))
                }),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// Whether the pooling allocator is in use (see
    /// [`SandboxConfig::max_workers`]).
    pub fn uses_pooling(&self) -> bool {
        self.inner.fast.pooling
    }

    /// What the module cache has done so far, for both engines.
    pub fn cache_stats(&self) -> CacheStats {
        let fast = self.inner.fast.cache.counters.snapshot();
        match self.inner.deterministic.get() {
            Some(Ok(deterministic)) => fast.plus(deterministic.cache.counters.snapshot()),
            _ => fast,
        }
    }

    /// Where the cache keeps the artifact of a module with these bytes for
    /// default workers (whether or not it exists yet).
    pub fn cache_path(&self, wasm: &[u8]) -> PathBuf {
        self.inner.fast.cache.path_for(&sha256(wasm))
    }

    /// Makes a [`Program`] of a module for default workers: from memory,
    /// from the disk cache, or by compiling it. Refuses bytes that are not
    /// valid WebAssembly, modules that import anything the sandbox does not
    /// provide (naming the import), and modules without a `_start`
    /// function.
    pub fn load(&self, wasm: &[u8]) -> Result<Program, SandboxError> {
        self.load_for(wasm, Execution::Default)
    }

    /// [`Sandbox::load`] for workers that compute as `execution` says: a
    /// program is compiled for one engine, and its workers must be started
    /// with a [`WorkerSpec::deterministic`] exactly when it is
    /// [`Execution::Deterministic`].
    pub fn load_for(&self, wasm: &[u8], execution: Execution) -> Result<Program, SandboxError> {
        if !wasm.starts_with(b"\0asm") {
            return Err(SandboxError::InvalidModule(
                "the bytes do not start with the `\\0asm` magic number of a WebAssembly binary"
                    .to_owned(),
            ));
        }
        let hash = sha256(wasm);
        let runtime = self.runtime(execution)?;
        let key = (hash, execution);
        if let Some(program) = self.lock_loaded().by_hash.get(&key) {
            runtime
                .cache
                .counters
                .memory_hits
                .fetch_add(1, Ordering::Relaxed);
            return Ok(program.clone());
        }

        // The checks run before the cache writes an entry: a refused module
        // leaves no artifact behind.
        let pre = runtime
            .cache
            .get_or_compile(&runtime.engine, wasm, &hash, |module| runtime.check(module))?;
        let program = Program {
            hash,
            execution,
            pre,
        };

        let mut loaded = self.lock_loaded();
        if !loaded.by_hash.contains_key(&key) {
            while loaded.order.len() >= self.inner.config.loaded_programs.max(1) {
                if let Some(oldest) = loaded.order.pop_front() {
                    loaded.by_hash.remove(&oldest);
                }
            }
            loaded.order.push_back(key);
            loaded.by_hash.insert(key, program.clone());
        }
        Ok(program)
    }

    fn lock_loaded(&self) -> std::sync::MutexGuard<'_, LoadedPrograms> {
        // The map is only ever updated by complete inserts and removes.
        self.inner
            .loaded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Instantiates a worker without running it (see [`PreparedWorker`]).
    pub async fn prepare(
        &self,
        program: &Program,
        spec: WorkerSpec,
    ) -> Result<PreparedWorker, SandboxError> {
        let (cancel, cancelled) = CancelHandle::new();
        self.prepare_with(program, spec, cancel, cancelled, Waiting::default())
            .await
            .map_err(|(error, _)| error)
    }

    /// Starts a worker of `program` as a tokio task.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime (like `tokio::spawn`).
    pub fn start(&self, program: &Program, spec: WorkerSpec) -> WorkerHandle {
        let (cancel, cancelled) = CancelHandle::new();
        let sandbox = self.clone();
        let program = program.clone();
        let handle_cancel = cancel.clone();
        let waiting = Waiting::default();
        let handle_waiting = waiting.clone();
        let task = tokio::spawn(async move {
            match sandbox
                .prepare_with(&program, spec, cancel, cancelled, waiting)
                .await
            {
                Ok(worker) => worker.run().await,
                Err((error, hit)) => WorkerReport {
                    outcome: match hit {
                        Some(LimitHit::Memory) => Outcome::OutOfMemory,
                        _ => Outcome::Failed(error.to_string()),
                    },
                    cpu_time: Duration::ZERO,
                    output_bytes: 0,
                    wall_time: Duration::ZERO,
                },
            }
        });
        WorkerHandle {
            cancel: handle_cancel,
            waiting: handle_waiting,
            task,
        }
    }

    async fn prepare_with(
        &self,
        program: &Program,
        spec: WorkerSpec,
        cancel: CancelHandle,
        cancelled: tokio::sync::watch::Receiver<bool>,
        waiting: Waiting,
    ) -> Result<PreparedWorker, (SandboxError, Option<LimitHit>)> {
        let runtime = self.runtime(program.execution).map_err(|e| (e, None))?;
        if !Engine::same(program.pre.module().engine(), &runtime.engine) {
            return Err((
                SandboxError::Instantiate("the program was loaded by another sandbox".to_owned()),
                None,
            ));
        }
        match (program.execution, spec.deterministic) {
            (Execution::Default, None) | (Execution::Deterministic, Some(_)) => {}
            (Execution::Default, Some(_)) => {
                return Err((
                    SandboxError::Instantiate(
                        "a deterministic worker needs a program loaded for deterministic execution"
                            .to_owned(),
                    ),
                    None,
                ));
            }
            (Execution::Deterministic, None) => {
                return Err((
                    SandboxError::Instantiate(
                        "a program loaded for deterministic execution needs a seed".to_owned(),
                    ),
                    None,
                ));
            }
        }
        let limits = spec.limits.capped_by(&self.inner.config.caps);
        let flag = Arc::new(LimitFlag::default());
        let output = OutputShared::new(spec.output, limits.output_bytes, flag.clone());

        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(Capture {
            shared: output.clone(),
            kind: OutputKind::Stdout,
        })
        .stderr(Capture {
            shared: output.clone(),
            kind: OutputKind::Stderr,
        })
        .arg(&spec.program_name)
        .args(&spec.args)
        .envs(&spec.env);
        if let Some(determinism) = &spec.deterministic {
            determinism.apply(&mut wasi);
        }
        if let Some(dir) = &spec.job_dir {
            for (sub, guest, perms) in [
                ("inputs", "/inputs", FsPerms::ReadOnly),
                ("outputs", "/outputs", FsPerms::ReadWrite),
            ] {
                let host = dir.join(sub);
                let job_dir_error = |source| {
                    (
                        SandboxError::JobDir {
                            path: host.clone(),
                            source,
                        },
                        None,
                    )
                };
                std::fs::create_dir_all(&host).map_err(job_dir_error)?;
                wasi.preopened_dir(&host, guest, perms)
                    .map_err(|e| job_dir_error(std::io::Error::other(format!("{e:#}"))))?;
            }
        }
        let transport = spec.transport.unwrap_or_else(single_rank_transport);
        let state = WorkerState {
            wasi: wasi.build_p1(),
            limiter: MemoryLimiter {
                memory_bytes: usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX),
                flag: flag.clone(),
            },
            net: hostapi::HostNet::new(transport)
                .with_checkpoints(spec.checkpoints.clone())
                .with_waiting(waiting),
            disk: diskquota::DiskQuota::new(
                spec.job_dir.as_ref().map(|d| d.join("outputs")),
                limits.disk_bytes,
                self.inner.disk.clone(),
                flag.clone(),
            ),
        };

        let mut store = Store::new(&runtime.engine, state);
        store.limiter(|state| &mut state.limiter);
        let instantiate_error =
            |e: wasmtime::Error| (SandboxError::Instantiate(format!("{e:#}")), flag.get());
        // Yield to the executor at every epoch tick, then carry on.
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        let instance = program
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(instantiate_error)?;
        let start = instance
            .get_typed_func::<(), ()>(&mut store, "_start")
            .map_err(instantiate_error)?;
        Ok(PreparedWorker {
            store,
            start,
            limits,
            flag,
            output,
            cancel,
            cancelled,
            outputs: spec.job_dir.as_ref().map(|d| d.join("outputs")),
            _ticker: runtime.ticker.clone(),
        })
    }
}

impl Runtime {
    /// Makes the engine of `execution`'s workers (with the pooling allocator
    /// for default workers if the config asks for it), its linker, cache and
    /// ticker.
    fn new(config: &SandboxConfig, execution: Execution) -> Result<Runtime, SandboxError> {
        let engine_error = |e: wasmtime::Error| SandboxError::Engine(format!("{e:#}"));
        // Deterministic workers allocate on demand: their engine is made
        // late and for few workers, and a second pool would reserve as much
        // address space again on every node.
        let mut pooling = config.max_workers > 0 && execution == Execution::Default;
        let engine = match Engine::new(&engine_config(config, pooling, execution)) {
            Ok(engine) => engine,
            // The pool reserves address space up front, which a restricted
            // environment (ulimit -v) may refuse: fall back to on-demand.
            Err(e) if pooling => {
                tracing::warn!(error = %e, "pooling allocator unavailable; allocating instances on demand");
                pooling = false;
                Engine::new(&engine_config(config, false, execution)).map_err(engine_error)?
            }
            Err(e) => return Err(engine_error(e)),
        };

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |state: &mut WorkerState| {
            &mut state.wasi
        })
        .map_err(engine_error)?;
        diskquota::add_to_linker(&mut linker).map_err(engine_error)?;
        hostapi::add_to_linker(&mut linker).map_err(engine_error)?;
        let provided = {
            let mut store = Store::new(&engine, placeholder_state());
            linker
                .iter(&mut store)
                .map(|(module, name, _)| (module.to_owned(), name.to_owned()))
                .collect()
        };

        let suffix = match execution {
            Execution::Default => "",
            Execution::Deterministic => "-deterministic",
        };
        let cache = DiskCache::open(&config.cache_dir, &engine, suffix)?;
        let ticker = Ticker::start(engine.clone(), config.epoch_tick)
            .map_err(|e| SandboxError::Engine(format!("cannot start the epoch ticker: {e}")))?;
        Ok(Runtime {
            engine,
            linker,
            provided,
            cache,
            pooling,
            ticker: Arc::new(ticker),
        })
    }

    /// Accepts a compiled module if it imports only what the sandbox
    /// provides, with the right types, and exports a `_start` command.
    fn check(&self, module: &Module) -> Result<InstancePre<WorkerState>, SandboxError> {
        for import in module.imports() {
            if !self
                .provided
                .contains(&(import.module().to_owned(), import.name().to_owned()))
            {
                return Err(SandboxError::UnknownImport {
                    module: import.module().to_owned(),
                    name: import.name().to_owned(),
                });
            }
        }
        match module.get_export("_start") {
            Some(ExternType::Func(f)) if f.params().len() == 0 && f.results().len() == 0 => {}
            _ => return Err(SandboxError::NoEntryPoint),
        }
        self.linker
            .instantiate_pre(module)
            .map_err(|e| SandboxError::IncompatibleImport(format!("{e:#}")))
    }
}

/// The transport of a worker started without one: rank 0 of a job of one.
fn single_rank_transport() -> Box<dyn Transport> {
    Box::new(LocalGroup::solo(16))
}

/// Store data for the throwaway store used to list the linker's names.
fn placeholder_state() -> WorkerState {
    WorkerState {
        wasi: WasiCtxBuilder::new().build_p1(),
        limiter: MemoryLimiter {
            memory_bytes: 0,
            flag: Arc::default(),
        },
        net: hostapi::HostNet::new(single_rank_transport()),
        disk: diskquota::DiskQuota::new(
            None,
            u64::MAX,
            diskquota::DiskBudget::new(u64::MAX),
            Arc::default(),
        ),
    }
}

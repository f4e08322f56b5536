//! Helpers shared by the sandbox's integration tests.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

use tokio::sync::mpsc;
use zorilla_sandbox::{
    OutputChunk, OutputKind, Program, Sandbox, SandboxConfig, WorkerHandle, WorkerReport,
    WorkerSpec,
};

/// The bytes of a committed example guest.
pub fn guest(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/wasm")
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run examples/build.sh)", path.display()))
}

/// A sandbox with its cache in `dir/cache`.
pub fn sandbox(dir: &Path) -> Sandbox {
    Sandbox::new(config(dir)).expect("sandbox")
}

pub fn config(dir: &Path) -> SandboxConfig {
    let mut config = SandboxConfig::new(dir.join("cache"));
    config.max_workers = 32;
    config
}

pub fn load(sandbox: &Sandbox, name: &str) -> Program {
    sandbox.load(&guest(name)).expect("load")
}

/// A job directory under `dir` with `inputs/` and `outputs/`.
pub fn job_dir(dir: &Path, name: &str) -> PathBuf {
    let job = dir.join(name);
    std::fs::create_dir_all(job.join("inputs")).unwrap();
    std::fs::create_dir_all(job.join("outputs")).unwrap();
    job
}

/// A finished worker with its collected output.
#[derive(Debug)]
pub struct Finished {
    pub report: WorkerReport,
    pub stdout: String,
    pub stderr: String,
    pub chunks: usize,
}

/// A started worker whose output is being collected.
pub struct Running {
    pub handle: WorkerHandle,
    collector: tokio::task::JoinHandle<(Vec<u8>, Vec<u8>, usize)>,
}

impl Running {
    pub async fn finish(self) -> Finished {
        let report = self.handle.wait().await;
        // The channel closes when the worker's store is dropped.
        let (stdout, stderr, chunks) = self.collector.await.unwrap();
        Finished {
            report,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            chunks,
        }
    }
}

/// Tells a test when a worker has printed a given text to stdout.
pub type Signal = (&'static str, tokio::sync::oneshot::Sender<()>);

/// Starts a worker, collecting its output. With `signal = (text, tx)`, `tx`
/// fires as soon as the worker's stdout contains `text`.
pub fn start_collecting(
    sandbox: &Sandbox,
    program: &Program,
    mut spec: WorkerSpec,
    signal: Option<Signal>,
) -> Running {
    let (tx, mut rx) = mpsc::channel::<OutputChunk>(8);
    spec.output = Some(tx);
    let handle = sandbox.start(program, spec);
    let collector = tokio::spawn(async move {
        let mut signal = signal;
        let (mut stdout, mut stderr, mut chunks) = (Vec::new(), Vec::new(), 0);
        while let Some(chunk) = rx.recv().await {
            chunks += 1;
            assert!(chunk.data.len() <= zorilla_sandbox::output::MAX_CHUNK_BYTES);
            match chunk.kind {
                OutputKind::Stdout => stdout.extend_from_slice(&chunk.data),
                OutputKind::Stderr => stderr.extend_from_slice(&chunk.data),
            }
            if signal
                .as_ref()
                .is_some_and(|(text, _)| String::from_utf8_lossy(&stdout).contains(text))
                && let Some((_, tx)) = signal.take()
            {
                let _ = tx.send(());
            }
        }
        (stdout, stderr, chunks)
    });
    Running { handle, collector }
}

pub async fn run(sandbox: &Sandbox, program: &Program, spec: WorkerSpec) -> Finished {
    start_collecting(sandbox, program, spec, None)
        .finish()
        .await
}

pub fn args(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

//! Sandbox benchmark (issue 4). Run with
//! `cargo bench -p zorilla-sandbox --bench sandbox`.
//!
//! Prints three figures (see BENCHMARKS.md):
//! 1. instantiating a worker from a cached module (`Sandbox::prepare`: WASI
//!    context, store, instance from the pooling allocator);
//! 2. from `Sandbox::start` to the guest's first instruction (a module whose
//!    `_start` begins with a call to `zorilla.rank`, timed by the transport);
//! 3. the message round trip between two workers in one process (the
//!    `pingpong` guest over the in-process transport, timed by the guest).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use zorilla_sandbox::local::LocalGroup;
use zorilla_sandbox::transport::BoxFuture;
use zorilla_sandbox::{
    Delivery, Outcome, Rank, Sandbox, SandboxConfig, Transport, TransportError, WorkerSpec,
};

/// A transport that records when the guest first asked for its rank.
struct FirstCall(Arc<OnceLock<Instant>>);

impl Transport for FirstCall {
    fn rank(&self) -> Rank {
        let _ = self.0.set(Instant::now());
        0
    }
    fn size(&self) -> u32 {
        1
    }
    fn send(&mut self, _: Rank, _: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async { Err(TransportError::Closed) })
    }
    fn recv(&mut self) -> BoxFuture<'_, Result<Delivery, TransportError>> {
        Box::pin(async { Err(TransportError::Closed) })
    }
    fn barrier(&mut self) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async { Ok(()) })
    }
}

struct Summary {
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    Summary {
        p50: at(0.5),
        p99: at(0.99),
        mean,
    }
}

fn print(name: &str, s: &Summary) {
    println!(
        "{name:<44} p50 {:>9.1} µs   p99 {:>9.1} µs   mean {:>9.1} µs",
        s.p50.as_secs_f64() * 1e6,
        s.p99.as_secs_f64() * 1e6,
        s.mean.as_secs_f64() * 1e6
    );
    // For scripts/bench.sh (see sim/src/bin/bench-report.rs).
    let slug: String = name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join("_")
        .to_lowercase();
    println!(
        "RESULT sandbox.{slug}_p50 {:.1} µs",
        s.p50.as_secs_f64() * 1e6
    );
}

fn guest(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/wasm")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let dir = tempfile::tempdir().unwrap();
    let config = SandboxConfig::new(dir.path().join("cache"));
    let nqueens = guest("nqueens");

    // Compile once, then time loading the artifact in a fresh sandbox.
    let started = Instant::now();
    Sandbox::new(config.clone())
        .unwrap()
        .load(&nqueens)
        .unwrap();
    let compile = started.elapsed();
    let sandbox = Sandbox::new(config.clone()).unwrap();
    let started = Instant::now();
    let program = sandbox.load(&nqueens).unwrap();
    let from_disk = started.elapsed();
    assert_eq!(sandbox.cache_stats().compiled, 0);
    println!("pooling allocator: {}", sandbox.uses_pooling());
    println!(
        "compile nqueens.wasm ({} KiB), cold: {:.1} ms",
        nqueens.len() / 1024,
        compile.as_secs_f64() * 1e3
    );
    println!(
        "load its artifact from the disk cache: {:.2} ms",
        from_disk.as_secs_f64() * 1e3
    );

    // 1. Instantiation from the cached module.
    let mut samples = Vec::new();
    for i in 0..5_000 {
        let started = Instant::now();
        let worker = sandbox
            .prepare(&program, WorkerSpec::default())
            .await
            .unwrap();
        let took = started.elapsed();
        drop(worker);
        if i >= 500 {
            samples.push(took);
        }
    }
    print("instantiate worker (cached module)", &summarize(samples));

    // 2. Start to first guest instruction, and start to exit.
    let module = wat::parse_str(
        r#"(module
            (import "zorilla" "rank" (func $rank (result i32)))
            (memory (export "memory") 1)
            (func (export "_start") (drop (call $rank))))"#,
    )
    .unwrap();
    let first = sandbox.load(&module).unwrap();
    let (mut to_first, mut to_exit) = (Vec::new(), Vec::new());
    for i in 0..3_000 {
        let seen = Arc::new(OnceLock::new());
        let spec = WorkerSpec {
            transport: Some(Box::new(FirstCall(seen.clone()))),
            ..WorkerSpec::default()
        };
        let started = Instant::now();
        let report = sandbox.start(&first, spec).wait().await;
        let exited = started.elapsed();
        assert_eq!(report.outcome, Outcome::Exited(0));
        if i >= 300 {
            to_first.push(*seen.get().unwrap() - started);
            to_exit.push(exited);
        }
    }
    print("start -> guest's first instruction", &summarize(to_first));
    print("start -> exit of a no-op worker", &summarize(to_exit));

    // 3. Round trip between two workers.
    let pingpong = sandbox.load(&guest("pingpong")).unwrap();
    let mut roundtrips = Vec::new();
    for _ in 0..5 {
        let (_group, endpoints) = LocalGroup::new(2, 16);
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let mut handles = Vec::new();
        for endpoint in endpoints {
            let spec = WorkerSpec {
                args: vec!["20000".to_owned()],
                transport: Some(Box::new(endpoint)),
                output: Some(tx.clone()),
                ..WorkerSpec::default()
            };
            handles.push(sandbox.start(&pingpong, spec));
        }
        drop(tx);
        for handle in handles {
            assert_eq!(handle.wait().await.outcome, Outcome::Exited(0));
        }
        let mut out = Vec::new();
        while let Some(chunk) = rx.recv().await {
            out.extend_from_slice(&chunk.data);
        }
        let out = String::from_utf8(out).unwrap();
        let ns: u64 = out.trim().rsplit('=').next().unwrap().parse().unwrap();
        roundtrips.push(Duration::from_nanos(ns));
    }
    print(
        "message round trip, two workers (5 runs)",
        &summarize(roundtrips),
    );
}

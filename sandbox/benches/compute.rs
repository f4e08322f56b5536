//! Compute efficiency (issue 13): how fast a CPU-bound guest runs in the
//! sandbox compared with the same C source built natively. Run with
//! `cargo bench --workspace --bench compute` (or through scripts/bench.sh).
//!
//! `examples/src/nqueens.c` with N=15 and N=16 (N=12 with
//! `ZORILLA_BENCH_SHORT`, N given by `ZORILLA_BENCH_NQUEENS`) runs as one worker of a job of one in
//! the sandbox (the committed `nqueens.wasm`, compiled before timing), and
//! natively, built here at run time with `gcc -O2` against
//! `examples/native/zorilla_solo.c`, a single-rank stand-in for the host
//! API. Both alternate in the same run, three times each (once when short);
//! the best of each counts. The figure is native CPU time over the sandbox
//! worker's CPU time (1.0: native speed); CPU time rather than wall-clock
//! time, so that other load on the machine does not skew the comparison.
//! The wall-clock times are printed too.
//!
//! Then the cost of deterministic workers (issue 34,
//! `zorilla_sandbox::determinism`): nqueens (integer code) and
//! `examples/src/mandel.c` (doubles; size 1200, 1000 iterations, 200 and
//! 100 when short) each run on the default engine and on the deterministic
//! one, alternating, best of three; the figure is the default engine's CPU
//! time over the deterministic engine's (1.0: no cost). Both must print the
//! same line.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use zorilla_sandbox::{
    Determinism, Execution, Outcome, Program, Sandbox, SandboxConfig, WorkerSpec,
};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// CPU and wall-clock time of one run.
#[derive(Clone, Copy, Debug)]
struct Run {
    cpu: Duration,
    wall: Duration,
}

fn best(runs: &[Run]) -> Run {
    Run {
        cpu: runs.iter().map(|r| r.cpu).min().unwrap_or_default(),
        wall: runs.iter().map(|r| r.wall).min().unwrap_or_default(),
    }
}

/// Builds the native nqueens into `dir`.
fn build_native(dir: &Path) -> PathBuf {
    let out = dir.join("nqueens-native");
    let ex = examples();
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "gcc".into()))
        .args(["-O2", "-Wall", "-Wno-attributes", "-I"])
        .arg(ex.join("include"))
        .arg("-o")
        .arg(&out)
        .arg(ex.join("src/nqueens.c"))
        .arg(ex.join("native/zorilla_solo.c"))
        .status()
        .expect("run gcc (the native side of the benchmark needs a C compiler)");
    assert!(status.success(), "gcc failed");
    out
}

fn run_native(binary: &Path, n: u32, expected: &str) -> Run {
    let started = Instant::now();
    let out = Command::new(binary)
        .arg(n.to_string())
        .env("ZORILLA_SOLO_CPU_TIME", "1")
        .output()
        .expect("run the native nqueens");
    let wall = started.elapsed();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ns: u64 = stderr
        .trim()
        .strip_prefix("zorilla-solo cpu_ns=")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no CPU time from the native run: {stderr}"));
    Run {
        cpu: Duration::from_nanos(ns),
        wall,
    }
}

async fn run_sandbox(sandbox: &Sandbox, program: &Program, n: u32, expected: &str) -> Run {
    let (run, out) = run_guest(sandbox, program, &[n.to_string()]).await;
    assert_eq!(out, expected);
    run
}

/// Runs `program` with `args` to its end (seed 1 if it is deterministic);
/// returns its times and stdout.
async fn run_guest(sandbox: &Sandbox, program: &Program, args: &[String]) -> (Run, String) {
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let deterministic = (program.execution() == Execution::Deterministic)
        .then_some(Determinism { seed: 1, rank: 0 });
    let spec = WorkerSpec {
        args: args.to_vec(),
        output: Some(tx),
        deterministic,
        ..WorkerSpec::default()
    };
    let started = Instant::now();
    let report = sandbox.start(program, spec).wait().await;
    let wall = started.elapsed();
    assert_eq!(report.outcome, Outcome::Exited(0));
    let mut out = Vec::new();
    while let Some(chunk) = rx.recv().await {
        out.extend_from_slice(&chunk.data);
    }
    let run = Run {
        cpu: report.cpu_time,
        wall,
    };
    (run, String::from_utf8_lossy(&out).into_owned())
}

fn main() {
    let short = std::env::var_os("ZORILLA_BENCH_SHORT").is_some();
    let sizes: Vec<u32> = match std::env::var("ZORILLA_BENCH_NQUEENS") {
        Ok(n) => vec![n.parse().expect("ZORILLA_BENCH_NQUEENS is a number")],
        Err(_) if short => vec![12],
        Err(_) => vec![15, 16],
    };
    let rounds = if short { 1 } else { 3 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let native = build_native(dir.path());
    let sandbox = Sandbox::new(SandboxConfig::new(dir.path().join("cache"))).unwrap();
    let wasm = std::fs::read(examples().join("wasm/nqueens.wasm")).unwrap();
    let program = sandbox.load(&wasm).unwrap();
    for &n in &sizes {
        measure(&runtime, &sandbox, &program, &native, n, rounds);
    }

    let nqueens_n = sizes.last().copied().unwrap_or(12).to_string();
    let mandel_args = if short {
        ["200", "100"]
    } else {
        ["1200", "1000"]
    };
    let mandel_args: Vec<String> = mandel_args.map(String::from).to_vec();
    for (name, args) in [("nqueens", vec![nqueens_n]), ("mandel", mandel_args)] {
        let wasm = std::fs::read(examples().join(format!("wasm/{name}.wasm"))).unwrap();
        let default = sandbox.load_for(&wasm, Execution::Default).unwrap();
        let deterministic = sandbox.load_for(&wasm, Execution::Deterministic).unwrap();
        deterministic_cost(
            &runtime,
            &sandbox,
            name,
            &args,
            [&default, &deterministic],
            rounds,
        );
    }
}

/// Times `name` with `args` on the default engine and the deterministic
/// one, alternating, and prints the figures and RESULT lines.
fn deterministic_cost(
    runtime: &tokio::runtime::Runtime,
    sandbox: &Sandbox,
    name: &str,
    args: &[String],
    [default, deterministic]: [&Program; 2],
    rounds: usize,
) {
    let (mut fast, mut exact) = (Vec::new(), Vec::new());
    let mut printed = None;
    for _ in 0..rounds {
        for (program, runs) in [(default, &mut fast), (deterministic, &mut exact)] {
            let (run, out) = runtime.block_on(run_guest(sandbox, program, args));
            // Both engines compute the same result (nothing here makes a NaN).
            assert_eq!(printed.get_or_insert_with(|| out.clone()), &out);
            runs.push(run);
        }
    }
    let (fast, exact) = (best(&fast), best(&exact));
    let ratio = fast.cpu.as_secs_f64() / exact.cpu.as_secs_f64();
    println!("{name} {}, 1 worker, best of {rounds}:", args.join(" "));
    println!(
        "  default engine:       CPU {:.3} s",
        fast.cpu.as_secs_f64()
    );
    println!(
        "  deterministic engine: CPU {:.3} s",
        exact.cpu.as_secs_f64()
    );
    println!("  deterministic speed relative to default: {ratio:.2}");
    println!("RESULT compute.deterministic_{name}_vs_default {ratio:.2} x");
}

/// Times N=`n` natively and in the sandbox, alternating, and prints the
/// figures; the last `n` measured gives the RESULT lines.
fn measure(
    runtime: &tokio::runtime::Runtime,
    sandbox: &Sandbox,
    program: &zorilla_sandbox::Program,
    binary: &Path,
    n: u32,
    rounds: usize,
) {
    let solutions = match n {
        12 => "14200",
        13 => "73712",
        14 => "365596",
        15 => "2279184",
        16 => "14772512",
        _ => panic!("ZORILLA_BENCH_NQUEENS: 12 to 16"),
    };
    let expected = format!("nqueens N={n} ranks=1 solutions={solutions}\n");

    let (mut natives, mut sandboxed) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        natives.push(run_native(binary, n, &expected));
        sandboxed.push(runtime.block_on(run_sandbox(sandbox, program, n, &expected)));
    }
    let (native, sandboxed) = (best(&natives), best(&sandboxed));
    let ratio = native.cpu.as_secs_f64() / sandboxed.cpu.as_secs_f64();
    let wall_ratio = native.wall.as_secs_f64() / sandboxed.wall.as_secs_f64();
    println!("nqueens N={n}, 1 worker, best of {rounds}:");
    println!(
        "  native (gcc -O2):  CPU {:.3} s, wall {:.3} s",
        native.cpu.as_secs_f64(),
        native.wall.as_secs_f64()
    );
    println!(
        "  sandbox (wasm):    CPU {:.3} s, wall {:.3} s",
        sandboxed.cpu.as_secs_f64(),
        sandboxed.wall.as_secs_f64()
    );
    println!("  speed relative to native: {ratio:.2} (CPU time), {wall_ratio:.2} (wall clock)");
    // For scripts/bench.sh (see sim/src/bin/bench-report.rs).
    println!("RESULT compute.nqueens_n {n}");
    println!(
        "RESULT compute.nqueens_native_cpu {:.3} s",
        native.cpu.as_secs_f64()
    );
    println!(
        "RESULT compute.nqueens_sandbox_cpu {:.3} s",
        sandboxed.cpu.as_secs_f64()
    );
    println!("RESULT compute.nqueens_speed_vs_native {ratio:.2} x");
}

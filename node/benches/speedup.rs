//! Parallel speed-up (issue 13): nqueens N=16 as one job of 2, 4 and 8
//! workers on grids of 1, 2 and 4 real `zorilla-node`s (two cores each, on
//! loopback), against the same C source built natively with gcc -O2 and run
//! on one core in the same run.
//!
//! A job's wall time runs from the submit request to the home reporting it
//! completed: flooding, placement, fetching and compiling the module on
//! every node, the workers' run and the report home. The ideal is native
//! one-core time over the cores used, where the cores used are the
//! workers, but at most the cores this machine has (the nodes of one
//! machine share its cores). Target: within 10% of the ideal.
//!
//! Run: `cargo bench --workspace --bench speedup` (an optimised
//! `zorilla-node`). `ZORILLA_BENCH_SHORT=1` (CI): N=13. `ZORILLA_BENCH_NQUEENS` sets N.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::TestNode;
use zorilla_node::client::Client;
use zorilla_node::protocol::JobPhase;

const CORES: u32 = 2;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// The solution counts the runs are checked against.
fn solutions(n: u32) -> u64 {
    match n {
        10 => 724,
        12 => 14_200,
        13 => 73_712,
        14 => 365_596,
        15 => 2_279_184,
        16 => 14_772_512,
        _ => panic!("ZORILLA_BENCH_NQUEENS: 12 to 16"),
    }
}

/// Builds `examples/src/nqueens.c` natively with the single-rank stand-in
/// for the host API, and times one run of it (wall clock: it has the
/// machine to itself).
fn native_time(dir: &Path, n: u32) -> Duration {
    let binary = dir.join("nqueens-native");
    let ex = examples();
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "gcc".into()))
        .args(["-O2", "-Wall", "-Wno-attributes", "-I"])
        .arg(ex.join("include"))
        .arg("-o")
        .arg(&binary)
        .arg(ex.join("src/nqueens.c"))
        .arg(ex.join("native/zorilla_solo.c"))
        .status()
        .expect("run gcc (the native baseline needs a C compiler)");
    assert!(status.success(), "gcc failed");
    let started = Instant::now();
    let out = Command::new(&binary)
        .arg(n.to_string())
        .output()
        .expect("run the native nqueens");
    let took = started.elapsed();
    assert!(out.status.success());
    let expected = format!("nqueens N={n} ranks=1 solutions={}\n", solutions(n));
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
    took
}

/// Starts `count` nodes and waits until each has a neighbour.
async fn start_grid(dir: &Path, count: usize) -> Vec<TestNode> {
    let network = format!("speedup-{}-{count}", std::process::id());
    let first = TestNode::start(&dir.join("n0"), &network, None, CORES);
    let bootstrap = first.listen.clone();
    let mut nodes = vec![first];
    for i in 1..count {
        nodes.push(TestNode::start(
            &dir.join(format!("n{i}")),
            &network,
            Some(&bootstrap),
            CORES,
        ));
    }
    if count > 1 {
        common::wait_for_neighbours(&nodes, 1, Duration::from_secs(60)).await;
    }
    nodes
}

/// Submits one nqueens job of `workers` to the first node and returns its
/// wall time, from the submit request to the home's report of completion.
async fn job_time(client: &mut Client, workers: u32, n: u32) -> Duration {
    let mut request = common::nqueens(workers, n);
    request.lifetime_secs = 600;
    let started = Instant::now();
    let job = client
        .submit(request, common::wasm("nqueens"), vec![])
        .await
        .unwrap();
    // Poll every 5 ms: the polling adds at most that to the figure.
    let deadline = Duration::from_secs(600);
    let status = loop {
        let status = client.status(job).await.unwrap();
        if status.phase.is_terminal() {
            break status;
        }
        assert!(started.elapsed() < deadline, "no end after {deadline:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let took = started.elapsed();
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    let out = common::stdout_of(&client.logs(job).await.unwrap());
    let expected = format!("nqueens N={n} ranks={workers} solutions={}", solutions(n));
    assert!(out.contains(&expected), "{out:?}");
    took
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let short = std::env::var_os("ZORILLA_BENCH_SHORT").is_some();
    let n: u32 = std::env::var("ZORILLA_BENCH_NQUEENS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if short { 13 } else { 16 });
    let setups: &[(u32, usize)] = &[(2, 1), (4, 2), (8, 4)];
    let machine_cores = std::thread::available_parallelism().map_or(1, |c| c.get() as u32);
    let dir = tempfile::tempdir().unwrap();
    let native = native_time(dir.path(), n);
    println!(
        "nqueens N={n}: native (gcc -O2, one core) {:.3} s; this machine has {machine_cores} cores",
        native.as_secs_f64()
    );
    // For scripts/bench.sh (see sim/src/bin/bench-report.rs).
    println!("RESULT speedup.n {n}");
    println!("RESULT speedup.native {:.3} s", native.as_secs_f64());
    for &(workers, node_count) in setups {
        let grid_dir = dir.path().join(format!("grid{node_count}"));
        let nodes = start_grid(&grid_dir, node_count).await;
        let mut client = nodes[0].client().await;
        // A first small job compiles the module on every node, as any
        // earlier job would have: the figure is the run, not the compile.
        job_time(&mut client, workers, 10).await;
        let took = job_time(&mut client, workers, n).await;
        let cores = workers.min(machine_cores);
        let ideal = native.as_secs_f64() / f64::from(cores);
        println!(
            "SPEEDUP workers={workers} nodes={node_count} cores_used={cores} wall={:.3} native={:.3} \
             ideal={ideal:.3} speedup={:.2} of_ideal={:.2}",
            took.as_secs_f64(),
            native.as_secs_f64(),
            native.as_secs_f64() / took.as_secs_f64(),
            ideal / took.as_secs_f64()
        );
        println!(
            "RESULT speedup.w{workers}_wall {:.3} s ({:.2}x of native, {:.2} of ideal)",
            took.as_secs_f64(),
            native.as_secs_f64() / took.as_secs_f64(),
            ideal / took.as_secs_f64()
        );
        drop(nodes);
    }
}

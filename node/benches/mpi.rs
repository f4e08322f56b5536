//! The MPI benchmarks (issues 14 and 29), each beside Open MPI on the same
//! machine in the same run, over TCP and over shared memory: what the OSU
//! Micro-Benchmarks measure and an integer sort shaped like NPB IS, all
//! programs of the project's own (sdk/tests):
//! - MPI_Allreduce of 8 B and 1 MiB on 4 and 8 ranks, and MPI_Bcast of
//!   8 B and 1 MiB on 4 (`bench_coll.c`);
//! - MPI_Put and MPI_Get with fence between 2 ranks on 2 nodes: the latency
//!   of 8 B and the bandwidth of 1 MiB operations (`bench_onesided.c`);
//! - the integer sort (`is.c`) at NPB IS class W's sizes on 4 ranks, in
//!   Mop/s as IS counts them;
//! - the Jacobi stencil (`jacobi.c`) on 4 ranks over 2 nodes.
//!
//! Zorilla: real `zorilla-node` processes on 127.0.0.1, 2 cores each (4
//! nodes, ranks spread one or two per node; the stencil on 2 of them, 2
//! ranks each), the programs built with sdk/bin/zmpicc. Open MPI: the same
//! sources built with mpicc, run with `mpirun --mca btl tcp,self` (TCP on
//! loopback, as between nodes) and with `--mca btl vader,self` (shared
//! memory). Times are measured inside the programs (MPI_Wtime), so job
//! start-up is not counted on either side.
//!
//! Prints `RESULT mpi.<figure> <value> <unit>` lines for bench-report; a
//! figure's `_ratio` is Zorilla's value over Open MPI's over TCP,
//! `_ratio_shm` over shared memory.
//! Run: `cargo bench --workspace --bench mpi`; `ZORILLA_BENCH_SHORT=1`
//! (CI) uses few iterations and small sizes.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{run, sdk, stdout_of, wait_completed};
use zorilla_core::advert::Strategy;
use zorilla_node::client::Client;
use zorilla_node::protocol::JobRequest;

fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
}

/// Whether the part named `part` runs: all of them unless
/// `ZORILLA_MPI_ONLY` names some (comma-separated: allreduce, bcast,
/// onesided, is, jacobi), for measuring one while changing it.
fn wanted(part: &str) -> bool {
    match std::env::var("ZORILLA_MPI_ONLY") {
        Ok(only) => only.split(',').any(|p| p.trim() == part),
        Err(_) => true,
    }
}

/// Runs a build or a baseline; its stdout.
fn check(cmd: &mut Command, what: &str) -> String {
    String::from_utf8_lossy(&run(cmd, what).stdout).into_owned()
}

/// The number after `key` in a program's output.
fn value(out: &str, key: &str) -> f64 {
    out.lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {out:?}"))
}

/// How Open MPI's ranks reach each other in a baseline run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Btl {
    /// TCP over loopback for every pair, as between nodes (`--mca btl
    /// tcp,self`); one-sided operations over point-to-point messages (`osc
    /// pt2pt`: Open MPI 4.1's osc rdma cannot create windows over TCP, and
    /// osc sm would put a window of ranks on one machine in shared memory).
    Tcp,
    /// Shared memory (`--mca btl vader,self`, Open MPI 4.1's shared-memory
    /// transport), one-sided operations as Open MPI chooses (osc sm).
    Shm,
}

fn openmpi(exe: &Path, n: u32, btl: Btl, args: &[String]) -> String {
    let mut cmd = Command::new("mpirun");
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .arg("--oversubscribe");
    match btl {
        Btl::Tcp => cmd
            .args(["--mca", "btl", "tcp,self"])
            .args(["--mca", "btl_tcp_if_include", "lo"])
            .args(["--mca", "osc", "pt2pt"]),
        Btl::Shm => cmd.args(["--mca", "btl", "vader,self"]),
    };
    check(
        cmd.args(["-np", &n.to_string()]).arg(exe).args(args),
        "mpirun",
    )
}

async fn zorilla(
    client: &mut Client,
    module: &[u8],
    n: u32,
    strategy: Strategy,
    args: &[String],
) -> String {
    let request = JobRequest {
        min_workers: n,
        max_workers: n,
        cores: 1,
        memory_mib: 256,
        strategy,
        lifetime_secs: 300,
        args: args.to_vec(),
        ..JobRequest::default()
    };
    let job = client
        .submit(request, module.to_vec(), vec![])
        .await
        .unwrap();
    wait_completed(client, job, Duration::from_secs(900)).await;
    stdout_of(&client.logs(job).await.unwrap())
}

/// A benchmark program built both ways.
struct Program {
    wasm: Vec<u8>,
    native: PathBuf,
}

/// Builds sdk/tests/NAME.c with zmpicc and with Open MPI's mpicc.
fn build(dir: &Path, name: &str) -> Program {
    let w = dir.join(format!("{name}.wasm"));
    let x = dir.join(name);
    let src = sdk().join(format!("tests/{name}.c"));
    check(
        Command::new(sdk().join("bin/zmpicc"))
            .arg("-O2")
            .arg(&src)
            .arg("-o")
            .arg(&w),
        "zmpicc",
    );
    check(
        Command::new("mpicc")
            .arg("-O2")
            .arg(&src)
            .arg("-o")
            .arg(&x)
            .arg("-lm"),
        "mpicc",
    );
    Program {
        wasm: std::fs::read(&w).unwrap(),
        native: x,
    }
}

/// A program's output under Zorilla, Open MPI over TCP and Open MPI over
/// shared memory, one after the other (never at once: the machine is
/// small). None may report a failed check.
async fn three_ways(
    client: &mut Client,
    program: &Program,
    n: u32,
    strategy: Strategy,
    args: &[String],
) -> [String; 3] {
    let ours = zorilla(client, &program.wasm, n, strategy, args).await;
    let tcp = openmpi(&program.native, n, Btl::Tcp, args);
    let shm = openmpi(&program.native, n, Btl::Shm, args);
    for out in [&ours, &tcp, &shm] {
        assert!(!out.contains("FAIL"), "a check failed: {out}");
    }
    [ours, tcp, shm]
}

/// Prints the RESULT lines of the figure after `key` in the outputs of
/// [`three_ways`]: each value with `decimals` decimals, and Zorilla's
/// relative to each baseline (Zorilla's figure / Open MPI's).
fn report(name: &str, outs: &[String; 3], key: &str, unit: &str, decimals: usize) {
    let [ours, tcp, shm] = [0, 1, 2].map(|i| value(&outs[i], key));
    println!("RESULT mpi.{name} {ours:.decimals$} {unit}");
    println!("RESULT mpi.{name}_openmpi {tcp:.decimals$} {unit}");
    println!("RESULT mpi.{name}_openmpi_shm {shm:.decimals$} {unit}");
    println!("RESULT mpi.{name}_ratio {:.2} x OpenMPI TCP", ours / tcp);
    println!(
        "RESULT mpi.{name}_ratio_shm {:.2} x OpenMPI shm",
        ours / shm
    );
}

/// A program's arguments, as text.
fn strings(args: &[&dyn ToString]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    check(&mut Command::new(sdk().join("build.sh")), "sdk/build.sh");
    let coll = build(dir.path(), "bench_coll");
    let onesided = build(dir.path(), "bench_onesided");
    let is = build(dir.path(), "is");
    let jacobi = build(dir.path(), "jacobi");

    let grid = common::grid(4, 2);
    let mut client = grid.nodes[0].client().await;
    let (small_iters, big_iters) = if short() { (20, 2) } else { (1000, 20) };
    let sizes = [(8u64, "8b", small_iters), (1 << 20, "1mib", big_iters)];
    for n in [4u32, 8].into_iter().filter(|_| wanted("allreduce")) {
        for (bytes, label, iters) in sizes {
            let args = strings(&[&"allreduce", &bytes, &iters]);
            let outs = three_ways(&mut client, &coll, n, Strategy::Spread, &args).await;
            report(
                &format!("allreduce_{label}_{n}ranks"),
                &outs,
                "allreduce_usec",
                "µs",
                1,
            );
        }
    }
    // Bcast from rank 0, 4 ranks one per node.
    for (bytes, label, iters) in sizes.into_iter().filter(|_| wanted("bcast")) {
        let args = strings(&[&"bcast", &bytes, &iters]);
        let outs = three_ways(&mut client, &coll, 4, Strategy::Spread, &args).await;
        report(
            &format!("bcast_{label}_4ranks"),
            &outs,
            "bcast_usec",
            "µs",
            1,
        );
    }
    // One-sided, 2 ranks on 2 nodes: the latency of one 8-byte operation
    // and its fence, and the bandwidth of 1 MiB operations, 16 an epoch.
    let (window, epochs) = if short() { (4, 2) } else { (16, 10) };
    for op in ["put", "get"].into_iter().filter(|_| wanted("onesided")) {
        let args = strings(&[&op, &8, &small_iters, &1]);
        let outs = three_ways(&mut client, &onesided, 2, Strategy::Spread, &args).await;
        report(
            &format!("{op}_8b_latency"),
            &outs,
            &format!("{op}_usec"),
            "µs",
            1,
        );
        let args = strings(&[&op, &(1 << 20), &epochs, &window]);
        let outs = three_ways(&mut client, &onesided, 2, Strategy::Spread, &args).await;
        report(
            &format!("{op}_1mib_bandwidth"),
            &outs,
            &format!("{op}_mbs"),
            "MB/s",
            0,
        );
    }
    if wanted("is") {
        // The integer sort shaped like NPB IS, 4 ranks one per node: class W's
        // sizes (2^20 keys up to 2^16, 10 iterations), 2^16 keys in CI.
        let (log2_keys, log2_max) = if short() { (16, 11) } else { (20, 16) };
        let args = strings(&[&log2_keys, &log2_max, &10, &"bench"]);
        let outs = three_ways(&mut client, &is, 4, Strategy::Spread, &args).await;
        // The same keys give the same sum whichever MPI sorted them.
        let sum = |out: &str| {
            out.lines()
                .find(|l| l.starts_with("is key_sum"))
                .map(str::to_string)
        };
        assert!(outs.iter().all(|o| o.ends_with("OK\n")), "{outs:?}");
        assert!(sum(&outs[0]).is_some(), "{}", outs[0]);
        assert!(outs.iter().all(|o| sum(o) == sum(&outs[0])), "{outs:?}");
        report("is_4ranks", &outs, "is_mops", "Mop/s", 2);
        println!("RESULT mpi.is_log2_keys {log2_keys}");
    }
    drop(client);
    drop(grid);

    if !wanted("jacobi") {
        return;
    }
    // The stencil: 4 ranks on 2 nodes of 2 cores.
    let grid = common::grid(2, 2);
    let mut client = grid.nodes[0].client().await;
    let (n, sweeps) = if short() { (200, 20) } else { (1200, 300) };
    let args = strings(&[&n, &sweeps, &"bench"]);
    let [ours, theirs, shm] =
        three_ways(&mut client, &jacobi, 4, Strategy::Concentrate, &args).await;
    let (a, b, c) = (
        value(&ours, "time_s"),
        value(&theirs, "time_s"),
        value(&shm, "time_s"),
    );
    // The same grid and sweeps give the same answer.
    let answer = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("jacobi "))
            .map(str::to_string)
    };
    assert_eq!(answer(&ours), answer(&theirs), "{ours}\n{theirs}");
    assert_eq!(answer(&ours), answer(&shm), "{ours}\n{shm}");
    println!("RESULT mpi.jacobi_4ranks_2nodes {a:.3} s");
    println!("RESULT mpi.jacobi_4ranks_openmpi {b:.3} s");
    println!("RESULT mpi.jacobi_4ranks_openmpi_shm {c:.3} s");
    println!("RESULT mpi.jacobi_ratio {:.2} x OpenMPI TCP", a / b);
    println!("RESULT mpi.jacobi_ratio_shm {:.2} x OpenMPI shm", a / c);
    println!("RESULT mpi.jacobi_size {n}");
}

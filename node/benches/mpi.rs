//! Issue 14's MPI benchmarks, beside OpenMPI on the same machine in the same
//! run: MPI_Allreduce of 8 B and 1 MiB on 4 and 8 ranks, and the Jacobi
//! stencil (sdk/tests/jacobi.c) on 4 ranks over 2 nodes.
//!
//! Zorilla: real `zorilla-node` processes on 127.0.0.1, 2 cores each (4
//! nodes for Allreduce, ranks spread one or two per node; the stencil on 2
//! of them, 2 ranks each), the programs built with sdk/bin/zmpicc. OpenMPI:
//! the same sources built with mpicc, run with `mpirun --mca btl tcp,self`
//! (TCP on loopback, as between nodes). Times are measured inside the
//! programs (MPI_Wtime), so job start-up is not counted on either side.
//!
//! Prints `RESULT mpi.<figure> <value> <unit>` lines for bench-report.
//! Run: `cargo bench --workspace --bench mpi`; `ZORILLA_BENCH_SHORT=1`
//! (CI) uses few iterations and a small grid.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{run, sdk, stdout_of, wait_completed};
use zorilla_core::advert::Strategy;
use zorilla_node::client::Client;
use zorilla_node::protocol::JobRequest;

fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
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

fn openmpi(exe: &Path, n: u32, args: &[String]) -> String {
    check(
        Command::new("mpirun")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .args(["--oversubscribe", "--mca", "btl", "tcp,self"])
            .args(["--mca", "btl_tcp_if_include", "lo"])
            .args(["-np", &n.to_string()])
            .arg(exe)
            .args(args),
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    check(&mut Command::new(sdk().join("build.sh")), "sdk/build.sh");
    let mut wasm = Vec::new();
    let mut native = Vec::new();
    for name in ["bench_allreduce", "jacobi"] {
        let w = dir.path().join(format!("{name}.wasm"));
        let x = dir.path().join(name);
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
        wasm.push(std::fs::read(&w).unwrap());
        native.push(x);
    }

    let grid = common::grid(4, 2);
    let mut client = grid.nodes[0].client().await;
    let (small_iters, big_iters) = if short() { (20, 2) } else { (1000, 20) };
    for n in [4u32, 8] {
        for (bytes, label, iters) in [(8u64, "8b", small_iters), (1 << 20, "1mib", big_iters)] {
            let args = vec![bytes.to_string(), iters.to_string()];
            let ours = value(
                &zorilla(&mut client, &wasm[0], n, Strategy::Spread, &args).await,
                "allreduce_usec",
            );
            let theirs = value(&openmpi(&native[0], n, &args), "allreduce_usec");
            println!("RESULT mpi.allreduce_{label}_{n}ranks {ours:.1} µs");
            println!("RESULT mpi.allreduce_{label}_{n}ranks_openmpi {theirs:.1} µs");
            println!(
                "RESULT mpi.allreduce_{label}_{n}ranks_ratio {:.2} x OpenMPI TCP",
                ours / theirs
            );
        }
    }
    drop(client);
    drop(grid);

    // The stencil: 4 ranks on 2 nodes of 2 cores.
    let grid = common::grid(2, 2);
    let mut client = grid.nodes[0].client().await;
    let (n, sweeps) = if short() { (200, 20) } else { (1200, 300) };
    let args = vec![n.to_string(), sweeps.to_string(), "bench".to_string()];
    let ours = zorilla(&mut client, &wasm[1], 4, Strategy::Concentrate, &args).await;
    let theirs = openmpi(&native[1], 4, &args);
    let (a, b) = (value(&ours, "time_s"), value(&theirs, "time_s"));
    // The same grid and sweeps give the same answer.
    let answer = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("jacobi "))
            .map(str::to_string)
    };
    assert_eq!(answer(&ours), answer(&theirs), "{ours}\n{theirs}");
    println!("RESULT mpi.jacobi_4ranks_2nodes {a:.3} s");
    println!("RESULT mpi.jacobi_4ranks_openmpi {b:.3} s");
    println!("RESULT mpi.jacobi_ratio {:.2} x OpenMPI TCP", a / b);
    println!("RESULT mpi.jacobi_size {n}");
}

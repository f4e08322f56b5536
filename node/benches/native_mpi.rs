//! Issue 32's native MPI figures: the same MPICH program
//! (`examples/native/mpi_pingpong.c`, built with `mpicc.mpich -O2`) run as
//! a native Zorilla job of 2 ranks on 2 release nodes on 127.0.0.1 (its
//! ranks wired up by the nodes' PMI-1 servers, `node/src/pmi.rs`), and
//! under MPICH's own `mpiexec.hydra` on the same machine in the same run:
//! once with the transport Zorilla's sandboxes leave it (UCX over TCP,
//! MPICH's shared memory off: `UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1`), once
//! as `mpiexec` runs it by default (shared memory). Figures: `MPI_Init`'s
//! time, the one-way latency of 8-byte messages, the bandwidth of 1 MiB
//! ones (best of `RUNS` runs each), and the submission-to-end time of the
//! Zorilla job. Needs root (the native sandbox), as in CI.
//!
//! Run: `cargo bench -p zorilla-node --bench native_mpi`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use zorilla_core::advert::WorkKind;
use zorilla_node::client::Client;
use zorilla_node::owner::UserKey;
use zorilla_node::protocol::{JobPhase, JobRequest};

const RUNS: usize = 3;

/// The figures the program prints (`name value` lines of rank 0).
fn figures(out: &str) -> BTreeMap<String, f64> {
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(k, v)| v.trim().parse().ok().map(|v| (k.to_owned(), v)))
        .collect()
}

/// One run under `mpiexec.hydra -n 2` with `env`.
fn hydra(exe: &std::path::Path, env: &[(&str, &str)]) -> BTreeMap<String, f64> {
    let out = std::process::Command::new("timeout")
        .args(["60", "mpiexec.hydra", "-n", "2"])
        .arg(exe)
        .envs(env.iter().copied())
        .output()
        .expect("mpiexec.hydra");
    assert!(out.status.success(), "mpiexec.hydra: {out:?}");
    figures(&String::from_utf8_lossy(&out.stdout))
}

/// The best of `runs` by each figure (least time, most bandwidth).
fn best(runs: &[BTreeMap<String, f64>]) -> BTreeMap<String, f64> {
    let mut best: BTreeMap<String, f64> = BTreeMap::new();
    for run in runs {
        for (k, v) in run {
            let b = best.entry(k.clone()).or_insert(*v);
            *b = if k.starts_with("bandwidth") {
                b.max(*v)
            } else {
                b.min(*v)
            };
        }
    }
    best
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let exe = common::build_native("mpicc.mpich", &["examples/native/mpi_pingpong.c"]);
    // mpiexec runs the same program from a file.
    let exe_path = dir.path().join("mpi_pingpong");
    std::fs::write(&exe_path, &exe).unwrap();
    std::fs::set_permissions(
        &exe_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let user = UserKey::generate();
    let user_id = user.id().to_string();
    // A home without cores and two nodes of one: the ranks on two nodes.
    let grid = common::sites_grid_of(
        common::Net::Loopback,
        &[3],
        |i| if i == 0 { 0 } else { 1 },
        |_| vec!["--native-user".into(), user_id.clone()],
    );
    common::wait_for_neighbours(&grid.nodes, 2, Duration::from_secs(30)).await;
    let mut client = Client::connect_with(grid.nodes[0].client.as_str(), None, "native mpi bench")
        .await
        .unwrap()
        .as_user(user);
    let request = JobRequest {
        kind: WorkKind::Native(zorilla_node::native::executable_arch(&exe).unwrap()),
        lifetime_secs: 120,
        min_workers: 2,
        max_workers: 2,
        ..JobRequest::default()
    };
    let mut zorilla = Vec::new();
    let mut turnaround = f64::MAX;
    for _ in 0..RUNS {
        let start = Instant::now();
        let job = client
            .submit(request.clone(), exe.clone(), Vec::new())
            .await
            .unwrap();
        let status = common::wait_for(&mut client, job, Duration::from_secs(90), "its end", |s| {
            s.phase.is_terminal()
        })
        .await;
        turnaround = turnaround.min(start.elapsed().as_secs_f64());
        let out = common::stdout_of(&client.logs(job).await.unwrap());
        assert_eq!(status.phase, JobPhase::Completed, "{status:?}\n{out}");
        zorilla.push(figures(&out));
    }
    let tcp: Vec<_> = (0..RUNS)
        .map(|_| {
            hydra(
                &exe_path,
                &[("UCX_TLS", "tcp,self"), ("MPIR_CVAR_NOLOCAL", "1")],
            )
        })
        .collect();
    let shm: Vec<_> = (0..RUNS).map(|_| hydra(&exe_path, &[])).collect();
    let (z, t, s) = (best(&zorilla), best(&tcp), best(&shm));
    println!("MPICH ping-pong, 2 ranks, best of {RUNS}:");
    println!(
        "  {:<44} {:>10} {:>14} {:>14}",
        "", "MPI_Init", "latency 8 B", "bandwidth 1 MiB"
    );
    for (name, f) in [
        ("Zorilla native job, 2 nodes", &z),
        ("mpiexec.hydra, UCX over TCP (as Zorilla's)", &t),
        ("mpiexec.hydra, default (shared memory)", &s),
    ] {
        println!(
            "  {name:<44} {:>7.1} ms {:>11.2} µs {:>9.0} MB/s",
            f["init_ms"], f["latency_8B_us"], f["bandwidth_1MiB_MBps"]
        );
    }
    println!("RESULT native_mpi.zorilla.init {:.1} ms", z["init_ms"]);
    println!("RESULT native_mpi.hydra_tcp.init {:.1} ms", t["init_ms"]);
    println!(
        "RESULT native_mpi.zorilla.latency {:.2} µs",
        z["latency_8B_us"]
    );
    println!(
        "RESULT native_mpi.hydra_tcp.latency {:.2} µs",
        t["latency_8B_us"]
    );
    println!(
        "RESULT native_mpi.hydra_shm.latency {:.2} µs",
        s["latency_8B_us"]
    );
    println!(
        "RESULT native_mpi.zorilla.bandwidth {:.0} MB/s",
        z["bandwidth_1MiB_MBps"]
    );
    println!(
        "RESULT native_mpi.hydra_tcp.bandwidth {:.0} MB/s",
        t["bandwidth_1MiB_MBps"]
    );
    println!(
        "RESULT native_mpi.hydra_shm.bandwidth {:.0} MB/s",
        s["bandwidth_1MiB_MBps"]
    );
    println!(
        "RESULT native_mpi.latency_ratio {:.2} x mpiexec over the same transport",
        z["latency_8B_us"] / t["latency_8B_us"]
    );
    println!(
        "RESULT native_mpi.bandwidth_ratio {:.2} of mpiexec over the same transport",
        z["bandwidth_1MiB_MBps"] / t["bandwidth_1MiB_MBps"]
    );
    println!("RESULT native_mpi.zorilla.turnaround {turnaround:.2} s submit to end");
}

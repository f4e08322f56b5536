//! Issue 32's native MPI figures: the same program
//! (`examples/native/mpi_pingpong.c`) built with MPICH (`mpicc.mpich -O2`)
//! and with Open MPI (`mpicc.openmpi -O2`), each run as a native Zorilla
//! job of 2 ranks on 2 release nodes on 127.0.0.1 (its ranks wired up by
//! the nodes' PMI-1 servers, `node/src/pmi.rs`; Open MPI's through the
//! PMI-1 library `sdk/native/zorilla_pmi.c`), and under the MPI's own
//! launcher on the same machine in the same run: once with the transport
//! Zorilla's sandboxes leave it (MPICH: UCX over TCP with its shared memory
//! off, `UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1`; Open MPI: `--mca btl
//! tcp,self`), once as the launcher runs it by default (shared memory).
//! Figures: `MPI_Init`'s time, the one-way latency of 8-byte messages, the
//! bandwidth of 1 MiB ones (best of `RUNS` runs each), and the
//! submission-to-end time of the Zorilla job. Needs root (the native
//! sandbox), as in CI.
//!
//! Run: `cargo bench -p zorilla-node --bench native_mpi`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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

/// One run of 2 ranks of `exe` under `launcher` (its arguments before the
/// program's) with `env`.
fn launch(launcher: &[&str], exe: &Path, env: &[(&str, &str)]) -> BTreeMap<String, f64> {
    let out = std::process::Command::new("timeout")
        .arg("60")
        .args(launcher)
        .arg(exe)
        .envs(env.iter().copied())
        .output()
        .expect("the MPI's launcher");
    assert!(out.status.success(), "{launcher:?}: {out:?}");
    figures(&String::from_utf8_lossy(&out.stdout))
}

const HYDRA: &[&str] = &["mpiexec.hydra", "-n", "2"];
/// Open MPI's launcher, as root (the bench runs as root, as CI does).
const MPIRUN: &[&str] = &["mpirun.openmpi", "--allow-run-as-root", "-n", "2"];

/// `RUNS` runs of `exe` as a native job of 2 ranks, through `client`; the
/// figures of each and the least submission-to-end time.
async fn zorilla_runs(client: &mut Client, exe: &[u8]) -> (Vec<BTreeMap<String, f64>>, f64) {
    let request = JobRequest {
        kind: WorkKind::Native(zorilla_node::native::executable_arch(exe).unwrap()),
        lifetime_secs: 120,
        min_workers: 2,
        max_workers: 2,
        ..JobRequest::default()
    };
    let mut runs = Vec::new();
    let mut turnaround = f64::MAX;
    for _ in 0..RUNS {
        let start = Instant::now();
        let job = client
            .submit(request.clone(), exe.to_vec(), Vec::new())
            .await
            .unwrap();
        let status = common::wait_for(client, job, Duration::from_secs(90), "its end", |s| {
            s.phase.is_terminal()
        })
        .await;
        turnaround = turnaround.min(start.elapsed().as_secs_f64());
        let logs = client.logs(job).await.unwrap();
        let out = common::stdout_of(&logs);
        assert_eq!(
            status.phase,
            JobPhase::Completed,
            "{status:?}\n{out}\n{}",
            common::stderr_of(&logs)
        );
        runs.push(figures(&out));
    }
    (runs, turnaround)
}

/// The program built by `compiler`, in a file of `dir` too (for the MPI's
/// own launcher).
fn build(compiler: &str, dir: &Path) -> (Vec<u8>, PathBuf) {
    let exe = common::build_native(compiler, &["examples/native/mpi_pingpong.c"]);
    let path = dir.join(compiler);
    std::fs::write(&path, &exe).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (exe, path)
}

/// Prints the table of one MPI's three ways of running.
fn table(title: &str, rows: [(&str, &BTreeMap<String, f64>); 3]) {
    println!("{title}, 2 ranks, best of {RUNS}:");
    println!(
        "  {:<44} {:>10} {:>14} {:>14}",
        "", "MPI_Init", "latency 8 B", "bandwidth 1 MiB"
    );
    for (name, f) in rows {
        println!(
            "  {name:<44} {:>7.1} ms {:>11.2} µs {:>9.0} MB/s",
            f["init_ms"], f["latency_8B_us"], f["bandwidth_1MiB_MBps"]
        );
    }
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
    let (mpich, mpich_path) = build("mpicc.mpich", dir.path());
    let (ompi, ompi_path) = build("mpicc.openmpi", dir.path());
    let user = UserKey::generate();
    let user_id = user.id().to_string();
    let library = common::pmi_library().display().to_string();
    // A home without cores and two nodes of one: the ranks on two nodes.
    let grid = common::sites_grid_of(
        common::Net::Loopback,
        &[3],
        |i| if i == 0 { 0 } else { 1 },
        |_| {
            vec![
                "--native-user".into(),
                user_id.clone(),
                "--native-pmi-library".into(),
                library.clone(),
            ]
        },
    );
    common::wait_for_neighbours(&grid.nodes, 2, Duration::from_secs(30)).await;
    let mut client = Client::connect_with(grid.nodes[0].client.as_str(), None, "native mpi bench")
        .await
        .unwrap()
        .as_user(user);

    let (zorilla, turnaround) = zorilla_runs(&mut client, &mpich).await;
    let tcp: Vec<_> = (0..RUNS)
        .map(|_| {
            launch(
                HYDRA,
                &mpich_path,
                &[("UCX_TLS", "tcp,self"), ("MPIR_CVAR_NOLOCAL", "1")],
            )
        })
        .collect();
    let shm: Vec<_> = (0..RUNS).map(|_| launch(HYDRA, &mpich_path, &[])).collect();
    let (z, t, s) = (best(&zorilla), best(&tcp), best(&shm));
    table(
        "MPICH ping-pong",
        [
            ("Zorilla native job, 2 nodes", &z),
            ("mpiexec.hydra, UCX over TCP (as Zorilla's)", &t),
            ("mpiexec.hydra, default (shared memory)", &s),
        ],
    );

    let (ompi_zorilla, ompi_turnaround) = zorilla_runs(&mut client, &ompi).await;
    let mpirun_tcp: Vec<_> = (0..RUNS)
        .map(|_| launch(MPIRUN, &ompi_path, &[("OMPI_MCA_btl", "tcp,self")]))
        .collect();
    let mpirun_shm: Vec<_> = (0..RUNS).map(|_| launch(MPIRUN, &ompi_path, &[])).collect();
    let (oz, ot, os) = (best(&ompi_zorilla), best(&mpirun_tcp), best(&mpirun_shm));
    table(
        "Open MPI ping-pong",
        [
            ("Zorilla native job, 2 nodes", &oz),
            ("mpirun, TCP (as Zorilla's)", &ot),
            ("mpirun, default (shared memory)", &os),
        ],
    );

    for (mpi, zorilla, tcp, shm, launcher, turnaround) in [
        ("", &z, &t, &s, "mpiexec", turnaround),
        ("ompi.", &oz, &ot, &os, "mpirun", ompi_turnaround),
    ] {
        let (own_tcp, own_shm) = if mpi.is_empty() {
            ("hydra_tcp", "hydra_shm")
        } else {
            ("mpirun_tcp", "mpirun_shm")
        };
        println!(
            "RESULT native_mpi.{mpi}zorilla.init {:.1} ms",
            zorilla["init_ms"]
        );
        println!(
            "RESULT native_mpi.{mpi}{own_tcp}.init {:.1} ms",
            tcp["init_ms"]
        );
        for (name, f) in [("zorilla", zorilla), (own_tcp, tcp), (own_shm, shm)] {
            println!(
                "RESULT native_mpi.{mpi}{name}.latency {:.2} µs",
                f["latency_8B_us"]
            );
            println!(
                "RESULT native_mpi.{mpi}{name}.bandwidth {:.0} MB/s",
                f["bandwidth_1MiB_MBps"]
            );
        }
        println!(
            "RESULT native_mpi.{mpi}latency_ratio {:.2} x {launcher} over the same transport",
            zorilla["latency_8B_us"] / tcp["latency_8B_us"]
        );
        println!(
            "RESULT native_mpi.{mpi}bandwidth_ratio {:.2} of {launcher} over the same transport",
            zorilla["bandwidth_1MiB_MBps"] / tcp["bandwidth_1MiB_MBps"]
        );
        println!("RESULT native_mpi.{mpi}zorilla.turnaround {turnaround:.2} s submit to end");
    }
}

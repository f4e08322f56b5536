//! Issue 32's native MPI figures, on 2 release nodes on 127.0.0.1 (a
//! home without cores and two nodes of one core: one rank on each), in
//! one run:
//!
//! - communication-bound: `examples/native/mpi_pingpong.c` (`MPI_Init`'s
//!   time, the one-way latency of 8-byte messages, the bandwidth of 1 MiB
//!   ones);
//! - compute-bound: `examples/native/mpi_nqueens.c` (its compute time:
//!   the N-Queens solutions counted by both ranks and reduced).
//!
//! Each is built with MPICH (`mpicc.mpich -O2`) and with Open MPI
//! (`mpicc.openmpi -O2`), and run as a native Zorilla job of 2 ranks
//! (wired up by the nodes' PMI-1 servers, `node/src/pmi.rs`; Open MPI's
//! through the library `sdk/native/zorilla_pmi.c`), and the same binary
//! under the MPI's own launcher: once with the transport Zorilla's
//! sandboxes leave it (MPICH: UCX over TCP with its shared memory off,
//! `UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1`; Open MPI: `--mca btl
//! tcp,self`), once as the launcher runs it by default (shared memory).
//! The same sources built with `sdk/bin/zmpicc` run as WebAssembly jobs on
//! the same nodes. Best of `RUNS` runs each; also the submission-to-end
//! time of the native jobs. Needs root (the native sandbox), as in CI.
//!
//! Run: `cargo bench -p zorilla-node --bench native_mpi`
//! (`ZORILLA_BENCH_SHORT=1`: N-Queens of 13 instead of 16).

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

/// One run of 2 ranks of `exe` with `args` under `launcher` (its
/// arguments before the program's) with `env`.
fn launch(
    launcher: &[&str],
    exe: &Path,
    args: &[String],
    env: &[(&str, &str)],
) -> BTreeMap<String, f64> {
    let out = std::process::Command::new("timeout")
        .arg("120")
        .args(launcher)
        .arg(exe)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the MPI's launcher");
    assert!(out.status.success(), "{launcher:?}: {out:?}");
    figures(&String::from_utf8_lossy(&out.stdout))
}

fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
}

const PINGPONG: &str = "examples/native/mpi_pingpong.c";
const NQUEENS: &str = "examples/native/mpi_nqueens.c";

/// The transport Zorilla's sandboxes leave Open MPI, for its launcher.
const MPIRUN_TCP: &[(&str, &str)] = &[("OMPI_MCA_btl", "tcp,self")];

const HYDRA: &[&str] = &["mpiexec.hydra", "-n", "2"];
/// Open MPI's launcher, as root (the bench runs as root, as CI does).
const MPIRUN: &[&str] = &["mpirun.openmpi", "--allow-run-as-root", "-n", "2"];

/// `RUNS` runs of `module` (native if it is an executable, else
/// WebAssembly) as a job of 2 ranks with `args`, through `client`; the
/// figures of each and the least submission-to-end time.
async fn zorilla_runs(
    client: &mut Client,
    module: &[u8],
    args: &[String],
) -> (Vec<BTreeMap<String, f64>>, f64) {
    let kind = match zorilla_node::native::looks_native(module) {
        true => WorkKind::Native(zorilla_node::native::executable_arch(module).unwrap()),
        false => WorkKind::Wasm,
    };
    let request = JobRequest {
        kind,
        lifetime_secs: 300,
        min_workers: 2,
        max_workers: 2,
        args: args.to_vec(),
        ..JobRequest::default()
    };
    let mut runs = Vec::new();
    let mut turnaround = f64::MAX;
    for _ in 0..RUNS {
        let start = Instant::now();
        let job = client
            .submit(request.clone(), module.to_vec(), Vec::new())
            .await
            .unwrap();
        let status = common::wait_for(client, job, Duration::from_secs(240), "its end", |s| {
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

/// `source` built by `compiler`, in a file of `dir` too (for the MPI's
/// own launcher).
fn build(compiler: &str, source: &str, dir: &Path) -> (Vec<u8>, PathBuf) {
    let exe = common::build_native(compiler, &[source]);
    let name = Path::new(source).file_stem().unwrap().to_str().unwrap();
    let path = dir.join(format!("{name}.{compiler}"));
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
    let (mpich, mpich_path) = build("mpicc.mpich", PINGPONG, dir.path());
    let (ompi, ompi_path) = build("mpicc.openmpi", PINGPONG, dir.path());
    let (nq_mpich, nq_mpich_path) = build("mpicc.mpich", NQUEENS, dir.path());
    let (nq_ompi, nq_ompi_path) = build("mpicc.openmpi", NQUEENS, dir.path());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let wasm_pingpong = common::zmpicc_source(dir.path(), &root.join(PINGPONG));
    let wasm_nqueens = common::zmpicc_source(dir.path(), &root.join(NQUEENS));
    let queens: u32 = if short() { 13 } else { 16 };
    let nq_args = vec![queens.to_string()];
    let user = UserKey::generate();
    let user_id = user.id().to_string();
    let library = common::pmi_library().display().to_string();
    // MPICH under its own launcher: with the transport Zorilla's sandboxes
    // leave it, and as it runs by default; both with the fix of its
    // MPI_Finalize that the nodes preload into native ranks (without it a
    // run of these 2 ranks now and then hangs as it ends; it changes
    // nothing before).
    let hydra_tcp = [
        ("UCX_TLS", "tcp,self"),
        ("MPIR_CVAR_NOLOCAL", "1"),
        ("LD_PRELOAD", library.as_str()),
    ];
    let hydra_shm = [("LD_PRELOAD", library.as_str())];
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

    // Communication-bound: the ping-pong.
    let (zorilla, turnaround) = zorilla_runs(&mut client, &mpich, &[]).await;
    let tcp: Vec<_> = (0..RUNS)
        .map(|_| launch(HYDRA, &mpich_path, &[], &hydra_tcp))
        .collect();
    let shm: Vec<_> = (0..RUNS)
        .map(|_| launch(HYDRA, &mpich_path, &[], &hydra_shm))
        .collect();
    let (z, t, s) = (best(&zorilla), best(&tcp), best(&shm));
    table(
        "MPICH ping-pong",
        [
            ("Zorilla native job, 2 nodes", &z),
            ("mpiexec.hydra, UCX over TCP (as Zorilla's)", &t),
            ("mpiexec.hydra, default (shared memory)", &s),
        ],
    );

    let (ompi_zorilla, ompi_turnaround) = zorilla_runs(&mut client, &ompi, &[]).await;
    let mpirun_tcp: Vec<_> = (0..RUNS)
        .map(|_| launch(MPIRUN, &ompi_path, &[], MPIRUN_TCP))
        .collect();
    let mpirun_shm: Vec<_> = (0..RUNS)
        .map(|_| launch(MPIRUN, &ompi_path, &[], &[]))
        .collect();
    let (oz, ot, os) = (best(&ompi_zorilla), best(&mpirun_tcp), best(&mpirun_shm));
    table(
        "Open MPI ping-pong",
        [
            ("Zorilla native job, 2 nodes", &oz),
            ("mpirun, TCP (as Zorilla's)", &ot),
            ("mpirun, default (shared memory)", &os),
        ],
    );
    let (wasm, _) = zorilla_runs(&mut client, &wasm_pingpong, &[]).await;
    let w = best(&wasm);
    println!(
        "The same source built with zmpicc, a WebAssembly job on the same 2 nodes: \
         MPI_Init {:.1} ms, latency 8 B {:.2} µs, bandwidth 1 MiB {:.0} MB/s",
        w["init_ms"], w["latency_8B_us"], w["bandwidth_1MiB_MBps"]
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
    println!(
        "RESULT native_mpi.wasm.latency {:.2} µs",
        w["latency_8B_us"]
    );
    println!(
        "RESULT native_mpi.wasm.bandwidth {:.0} MB/s",
        w["bandwidth_1MiB_MBps"]
    );
    println!(
        "RESULT native_mpi.wasm.latency_ratio {:.2} x the MPICH native job",
        w["latency_8B_us"] / z["latency_8B_us"]
    );
    println!(
        "RESULT native_mpi.wasm.bandwidth_ratio {:.2} of the MPICH native job",
        w["bandwidth_1MiB_MBps"] / z["bandwidth_1MiB_MBps"]
    );

    // Compute-bound: N-Queens, each way in turn.
    let (nz, _) = zorilla_runs(&mut client, &nq_mpich, &nq_args).await;
    let nt: Vec<_> = (0..RUNS)
        .map(|_| launch(HYDRA, &nq_mpich_path, &nq_args, &hydra_tcp))
        .collect();
    let (noz, _) = zorilla_runs(&mut client, &nq_ompi, &nq_args).await;
    let not: Vec<_> = (0..RUNS)
        .map(|_| launch(MPIRUN, &nq_ompi_path, &nq_args, MPIRUN_TCP))
        .collect();
    let (nw, _) = zorilla_runs(&mut client, &wasm_nqueens, &nq_args).await;
    let rows = [
        ("MPICH, Zorilla native job", best(&nz)),
        ("MPICH, mpiexec.hydra (UCX over TCP)", best(&nt)),
        ("Open MPI, Zorilla native job", best(&noz)),
        ("Open MPI, mpirun (TCP)", best(&not)),
        ("zmpicc, Zorilla WebAssembly job", best(&nw)),
    ];
    let solutions = rows[0].1["solutions"];
    println!("N-Queens of {queens}, 2 ranks on 2 nodes, best of {RUNS}:");
    for (name, f) in &rows {
        assert_eq!(f["solutions"], solutions, "{name}: another count");
        println!("  {name:<44} {:>8.3} s", f["compute_s"]);
    }
    let time = |i: usize| rows[i].1["compute_s"];
    println!("RESULT native_mpi.nqueens.zorilla {:.3} s", time(0));
    println!("RESULT native_mpi.nqueens.hydra_tcp {:.3} s", time(1));
    println!("RESULT native_mpi.ompi.nqueens.zorilla {:.3} s", time(2));
    println!("RESULT native_mpi.ompi.nqueens.mpirun_tcp {:.3} s", time(3));
    println!("RESULT native_mpi.wasm.nqueens {:.3} s", time(4));
    println!(
        "RESULT native_mpi.nqueens.speed_ratio {:.2} of mpiexec's speed",
        time(1) / time(0)
    );
    println!(
        "RESULT native_mpi.ompi.nqueens.speed_ratio {:.2} of mpirun's speed",
        time(3) / time(2)
    );
    println!(
        "RESULT native_mpi.wasm.nqueens.speed_ratio {:.2} of the MPICH native job's speed",
        time(0) / time(4)
    );
}

//! Zorilla's MPI library (sdk/) end to end: the test programs in
//! sdk/tests/*.c are built with sdk/bin/zmpicc, run on a grid of real
//! `zorilla-node` processes with 1, 3, 4 and 7 ranks (spread over the
//! nodes, several jobs at once), and built with OpenMPI's mpicc and
//! run with mpirun on the same rank counts. Every program checks its own
//! results against values it computes serially and prints OK; here the two
//! runs must print the same thing, and the printed results must match
//! formulas computed independently below.
//!
//! Needs clang for wasm32-wasi and OpenMPI (`scripts/install-test-deps.sh`).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{TestNode, grid, run, sdk, stderr_of, stdout_of, wait_for, zmpicc};
use zorilla_core::advert::Strategy;
use zorilla_node::protocol::{JobPhase, JobRequest};

const PROGRAMS: [&str; 12] = [
    "env",
    "p2p",
    "nonblocking",
    "collectives",
    "datatypes",
    "comms",
    "cart",
    "jacobi",
    "sort",
    "onesided",
    "info_graph",
    "is",
];
const SIZES: [u32; 4] = [1, 3, 4, 7];
const NODES: usize = 4;
const CORES: u32 = 2;

/// Builds the library and every test program for WebAssembly.
fn build_wasm(dir: &Path) -> BTreeMap<&'static str, Vec<u8>> {
    run(&mut Command::new(sdk().join("build.sh")), "sdk/build.sh");
    PROGRAMS
        .iter()
        .map(|name| (*name, zmpicc(dir, name)))
        .collect()
}

/// Builds a test program natively with OpenMPI and runs it on `n` ranks.
fn openmpi(dir: &Path, name: &str, n: u32, args: &[&str]) -> String {
    let exe = dir.join(format!("{name}.ompi"));
    if !exe.exists() {
        run(
            Command::new("mpicc")
                .args(["-O2", "-Wall", "-Wextra", "-Werror"])
                .arg(sdk().join(format!("tests/{name}.c")))
                .arg("-o")
                .arg(&exe)
                .arg("-lm"),
            &format!("mpicc {name}.c"),
        );
    }
    let out = run(
        mpirun(n).arg(&exe).args(args),
        &format!("mpirun -np {n} {name}"),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// mpirun over TCP on loopback, allowed to run as root (CI containers).
/// OpenMPI 4.1's default one-sided component (osc rdma) cannot create
/// windows over TCP; osc pt2pt runs them over point-to-point messages.
fn mpirun(n: u32) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["--oversubscribe", "--mca", "btl", "tcp,self"])
        .args(["--mca", "btl_tcp_if_include", "lo"])
        .args(["--mca", "osc", "pt2pt"])
        .args(["-np", &n.to_string()]);
    cmd
}

fn request(n: u32) -> JobRequest {
    JobRequest {
        min_workers: n,
        max_workers: n,
        cores: 1,
        memory_mib: 160,
        strategy: Strategy::Spread,
        lifetime_secs: 900,
        ..JobRequest::default()
    }
}

/// The value after `key ` on the line starting with `key`.
fn field(out: &str, key: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
        .unwrap_or_else(|| panic!("no {key:?} in {out:?}"))
}

/// The results the programs print, computed here from their definitions.
fn check_formulas(name: &str, n: u32, out: &str) {
    let n = i64::from(n);
    match name {
        "env" => {
            assert_eq!(field(out, "size"), n.to_string());
            assert_eq!(field(out, "sum_of_ranks"), (n * (n - 1) / 2).to_string());
        }
        "p2p" => {
            // rank r sends r*1000+k for k in 0..=r to rank 0
            let sum: i64 = (1..n)
                .map(|r| (0..=r).map(|k| r * 1000 + k).sum::<i64>())
                .sum();
            assert_eq!(field(out, "gathered_sum"), sum.to_string());
        }
        "nonblocking" => {
            let sum = 7 * n * (n - 1) / 2;
            assert_eq!(field(out, "waitany_sum"), format!("{sum} seen {}", n - 1));
            // three rounds of 100k + left neighbour on every rank
            assert_eq!(
                field(out, "persistent_sum"),
                (600 * n + 3 * n * (n - 1) / 2).to_string()
            );
        }
        "comms" => {
            let evens: i64 = (0..n).step_by(2).sum();
            let odds: i64 = (1..n).step_by(2).sum();
            assert_eq!(field(out, "split_sums"), format!("{evens} {odds}"));
            let odd_group = if n > 1 { odds } else { -1 };
            assert_eq!(field(out, "group_sums"), format!("{evens} {odd_group}"));
        }
        "collectives" => {
            // rank r's input at i is (7r + 3i) % 11 - 4
            let input = |r: i64, i: i64| (r * 7 + i * 3) % 11 - 4;
            let sums: Vec<String> = (0..5)
                .map(|i| (0..n).map(|r| input(r, i)).sum::<i64>().to_string())
                .collect();
            assert_eq!(field(out, "allreduce_sum"), sums.join(" "));
            let maxs: Vec<String> = (0..5)
                .map(|i| (0..n).map(|r| input(r, i)).max().unwrap().to_string())
                .collect();
            assert_eq!(field(out, "allreduce_max"), maxs.join(" "));
            assert_eq!(field(out, "scan_last"), (n * (n + 1) / 2).to_string());
        }
        "onesided" => {
            // every rank puts its rank into every window; adds rank+1 at
            // rank 0; 5 locked increments per rank
            assert_eq!(field(out, "fence_put_sum"), (n * (n - 1) / 2).to_string());
            let (tri, ranks) = (n * (n + 1) / 2, n * (n - 1) / 2);
            assert_eq!(
                field(out, "accumulate"),
                format!("{tri} {ranks} {} {}", n - 1, 2 * ranks)
            );
            assert_eq!(field(out, "locked_counter"), (5 * n).to_string());
            assert_eq!(
                field(out, "atomics"),
                format!("tickets {} winners 1", n * (n - 1) / 2)
            );
        }
        "info_graph" => {
            assert_eq!(field(out, "alltoallw"), format!("{} ints", n * (n + 1) / 2));
        }
        "is" => {
            assert_eq!(
                field(out, "is keys"),
                "65536 max_key 2048 buckets 1024 iterations 10"
            );
            assert_eq!(field(out, "is key_sum"), is_key_sum(16, 11, 10).to_string());
        }
        "sort" => {
            let keys: i64 = (0..n).map(|r| 2000 + (r * 37) % 101).sum();
            assert!(
                field(out, "sorted").starts_with(&format!("{keys} keys")),
                "{out}"
            );
        }
        _ => {}
    }
}

/// The sum of the keys sdk/tests/is.c sorts, drawn here as it describes
/// them: 2^log2_keys keys, each the mean of four draws of a 64-bit linear
/// congruential sequence (seed 20261129, the top 53 bits as a fraction)
/// times 2^log2_max; iteration i (from 1) sets key i to i and key
/// i + iterations to 2^log2_max - i.
fn is_key_sum(log2_keys: u32, log2_max: u32, iterations: i64) -> i64 {
    let mut x: u64 = 20261129;
    let mut uniform = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let max = 1i64 << log2_max;
    (0..1i64 << log2_keys)
        .map(|i| {
            let sum = uniform() + uniform() + uniform() + uniform();
            if (1..=iterations).contains(&i) {
                i
            } else if (iterations + 1..=2 * iterations).contains(&i) {
                max - (i - iterations)
            } else {
                (sum / 4.0 * max as f64) as i64
            }
        })
        .sum()
}

/// Every test program on 1, 3, 4 and 7 ranks of a 4-node grid prints OK,
/// the results the formulas give, and exactly what OpenMPI prints for the
/// same source; the Jacobi stencil's result is the same on every rank count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpi_programs_run_on_a_grid_and_agree_with_openmpi() {
    let build = tempfile::tempdir().unwrap();
    let modules = build_wasm(build.path());

    let grid = grid(NODES, CORES);
    let mut client = grid.nodes[0].client().await;

    // OpenMPI first: its runs would slow the grid's jobs down.
    let mut expected = BTreeMap::new();
    for name in PROGRAMS {
        for n in SIZES {
            expected.insert((name, n), openmpi(build.path(), name, n, &[]));
        }
    }

    // The jobs, as many at once as the grid has cores for (a rigid job
    // waiting for cores that other jobs hold is not what is tested here).
    let capacity = NODES as u32 * CORES;
    let mut queue: Vec<(&str, u32)> = SIZES
        .iter()
        .flat_map(|&n| PROGRAMS.iter().map(move |&name| (name, n)))
        .collect();
    queue.reverse();
    let mut running: std::collections::VecDeque<(&str, u32, u64)> = Default::default();
    let mut jacobi = Vec::new();
    while !queue.is_empty() || !running.is_empty() {
        let busy: u32 = running.iter().map(|j| j.1).sum();
        if let Some(&(name, n)) = queue.last()
            && busy + n <= capacity
        {
            queue.pop();
            let job = client
                .submit(request(n), modules[name].clone(), vec![])
                .await
                .unwrap();
            running.push_back((name, n, job));
            continue;
        }
        let (name, n, job) = running.pop_front().unwrap();
        let status = wait_for(&mut client, job, Duration::from_secs(300), name, |s| {
            s.phase.is_terminal()
        })
        .await;
        let logs = client.logs(job).await.unwrap();
        let out = stdout_of(&logs);
        assert_eq!(
            status.phase,
            JobPhase::Completed,
            "{name} on {n} ranks: {}\nstdout: {out}\nstderr: {}",
            status.reason,
            stderr_of(&logs)
        );
        assert_eq!(status.ranks.len(), n as usize, "{name} on {n}: {status:?}");
        assert!(
            out.ends_with("OK\n"),
            "{name} on {n} ranks did not pass:\n{out}\n{}",
            grid.nodes[0].log_tail()
        );
        check_formulas(name, n, &out);
        assert_eq!(
            out,
            expected[&(name, n)],
            "{name} on {n} ranks: Zorilla and OpenMPI disagree"
        );
        if name == "jacobi" {
            jacobi.push(out);
        }
    }
    assert!(jacobi.windows(2).all(|w| w[0] == w[1]), "{jacobi:?}");
}

/// The README's path: `zorilla submit --mpi --workers 3 --follow` runs an
/// MPI program and shows its output; `--mpi` with a malleable size is
/// refused with the reason, before anything is sent; a program calling an
/// MPI function the library lacks does not compile, and the error says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zorilla_submit_mpi_runs_rigid_jobs_and_refuses_malleable_ones() {
    let build = tempfile::tempdir().unwrap();
    run(&mut Command::new(sdk().join("build.sh")), "sdk/build.sh");
    let module = build.path().join("cart.wasm");
    run(
        Command::new(sdk().join("bin/zmpicc"))
            .arg("-O2")
            .arg(sdk().join("tests/cart.c"))
            .arg("-o")
            .arg(&module),
        "zmpicc cart.c",
    );
    // A call the library does not provide fails at compile time, saying so.
    let source = build.path().join("spawn.c");
    std::fs::write(
        &source,
        "#include <mpi.h>\nint main(int c, char **v) {\n  MPI_Init(&c, &v);\n  \
         MPI_Comm_spawn(\"x\", 0, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, 0, 0);\n  \
         return MPI_Finalize();\n}\n",
    )
    .unwrap();
    let refused = Command::new(sdk().join("bin/zmpicc"))
        .arg(&source)
        .arg("-o")
        .arg(build.path().join("spawn.wasm"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("MPI_Comm_spawn") && stderr.contains("not provided by Zorilla's MPI"),
        "{stderr}"
    );

    let grid = grid(3, 1);
    let zorilla = |node: &TestNode| {
        let mut cmd = common::cli();
        cmd.env("ZORILLA_NODE", &node.client)
            .env_remove("ZORILLA_TOKEN")
            .env_remove("ZORILLA_STATE_DIR")
            .stdin(Stdio::null());
        cmd
    };

    let refused = zorilla(&grid.nodes[0])
        .args(["submit", "--mpi", "--min", "2", "--max", "4", "--module"])
        .arg(&module)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("an MPI job is rigid"), "{stderr}");

    let ran = zorilla(&grid.nodes[0])
        .args(["submit", "--mpi", "--workers", "3", "--strategy", "spread"])
        .args(["--lifetime-secs", "120", "--follow", "--module"])
        .arg(&module)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(out.contains("grid 3 x 1, row0_sum 0"), "{out}");
    assert!(out.contains("OK\n"), "{out}");
}

/// zmpicc refuses, with the compiler's error and one sentence saying why,
/// the programs that mpicc builds with a warning but whose worker would
/// trap on Zorilla ("signature_mismatch"): a call to a function without a
/// declaration (time() without <time.h>, as in a public tutorial), and a
/// call declared with another signature than the function's definition.
/// Headers come from the WebAssembly C library (and sdk/wasi) only: with
/// clang's default search, <pthread.h> came from glibc and failed inside it.
#[test]
fn zmpicc_refuses_programs_that_would_trap() {
    let build = tempfile::tempdir().unwrap();
    let zmpicc = |name: &str, source: &str| {
        let path = build.path().join(format!("{name}.c"));
        std::fs::write(&path, source).unwrap();
        Command::new(sdk().join("bin/zmpicc"))
            .arg("-O2")
            .arg(&path)
            .arg("-o")
            .arg(build.path().join(format!("{name}.wasm")))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let main = |body: &str| {
        format!(
            "#include <mpi.h>\n#include <stdio.h>\nint main(int c, char **v) {{\n  \
             MPI_Init(&c, &v);\n  {body}\n  return MPI_Finalize();\n}}\n"
        )
    };

    let implicit = zmpicc("implicit", &main("printf(\"%ld\\n\", (long)time(NULL));"));
    let stderr = String::from_utf8_lossy(&implicit.stderr);
    assert!(!implicit.status.success(), "{stderr}");
    assert!(
        stderr.contains("implicit declaration of function 'time'"),
        "{stderr}"
    );
    assert!(
        stderr.contains("zmpicc: refused: calling time without a declaration")
            && stderr.contains("traps"),
        "{stderr}"
    );

    let mismatch = zmpicc(
        "mismatch",
        &format!("long time(void);\n{}", main("printf(\"%ld\\n\", time());")),
    );
    let stderr = String::from_utf8_lossy(&mismatch.stderr);
    assert!(!mismatch.status.success(), "{stderr}");
    assert!(stderr.contains("signature mismatch: time"), "{stderr}");
    assert!(
        stderr.contains("zmpicc: refused: calling time with a signature other than")
            && stderr.contains("traps"),
        "{stderr}"
    );
    assert!(!build.path().join("mismatch.wasm").exists());

    // The same program with its header builds; so does one that includes
    // <pthread.h> (one thread: taking a lock works) and uses getpagesize.
    let fine = zmpicc(
        "fine",
        &format!(
            "#include <time.h>\n#include <pthread.h>\n#include <unistd.h>\n{}",
            main(
                "static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;\n  \
                 pthread_mutex_lock(&m);\n  \
                 printf(\"%ld %d\\n\", (long)time(NULL), getpagesize());\n  \
                 pthread_mutex_unlock(&m);"
            )
        ),
    );
    assert!(
        fine.status.success(),
        "{}",
        String::from_utf8_lossy(&fine.stderr)
    );

    // Starting a thread cannot work in a worker: refused, saying so.
    let threads = zmpicc(
        "threads",
        &format!(
            "#include <pthread.h>\nstatic void *run(void *a) {{ return a; }}\n{}",
            main("pthread_t t;\n  pthread_create(&t, NULL, run, NULL);")
        ),
    );
    let stderr = String::from_utf8_lossy(&threads.stderr);
    assert!(!threads.status.success(), "{stderr}");
    assert!(stderr.contains("has a single thread"), "{stderr}");
    assert!(!stderr.contains("/usr/include/pthread.h"), "{stderr}");
}

//! Deterministic workers (`zorilla_sandbox::determinism`): the same bits
//! in every run and under every sandbox configuration, canonical NaNs,
//! randomness keyed by seed and rank, virtual clocks; and programs of one
//! engine refused for workers of the other.

mod common;

use std::path::Path;

use common::{guest, run};
use zorilla_sandbox::{
    Determinism, Execution, Outcome, Program, Sandbox, SandboxConfig, WorkerSpec,
};

fn detcheck(sandbox: &Sandbox, execution: Execution) -> Program {
    sandbox
        .load_for(&guest("detcheck"), execution)
        .expect("load detcheck")
}

/// Runs detcheck once in a fresh job directory under `dir`; returns its
/// stdout, checked to be what it wrote to /outputs/det.txt.
async fn run_detcheck(
    sandbox: &Sandbox,
    program: &Program,
    dir: &Path,
    deterministic: Option<Determinism>,
) -> String {
    let job_dir = common::job_dir(dir, &format!("job{}", rand_name()));
    let done = run(
        sandbox,
        program,
        WorkerSpec {
            job_dir: Some(job_dir.clone()),
            deterministic,
            ..WorkerSpec::default()
        },
    )
    .await;
    assert_eq!(done.report.outcome, Outcome::Exited(0), "{}", done.stderr);
    let written = std::fs::read_to_string(job_dir.join("outputs/det.txt")).unwrap();
    assert_eq!(written, done.stdout);
    done.stdout
}

/// A name no other run of this process has taken.
fn rand_name() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no line `{key}` in:\n{out}"))
        .trim()
}

const SEED_7: Determinism = Determinism { seed: 7, rank: 0 };

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deterministic_worker_prints_the_same_bits_in_every_run_and_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    // Two differently configured sandboxes: the pooling allocator and a
    // 5 ms tick, and allocation on demand with a 1 ms tick and smaller
    // caps, over caches of their own.
    let first = common::sandbox(dir.path());
    let mut other = SandboxConfig::new(dir.path().join("other-cache"));
    other.max_workers = 0;
    other.epoch_tick = std::time::Duration::from_millis(1);
    other.caps.memory_bytes = 256 << 20;
    let second = Sandbox::new(other).unwrap();

    let a = detcheck(&first, Execution::Deterministic);
    let b = detcheck(&second, Execution::Deterministic);
    let one = run_detcheck(&first, &a, dir.path(), Some(SEED_7)).await;
    let two = run_detcheck(&first, &a, dir.path(), Some(SEED_7)).await;
    let three = run_detcheck(&second, &b, dir.path(), Some(SEED_7)).await;
    assert_eq!(one, two);
    assert_eq!(one, three);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_engine_gives_fresh_random_bytes_in_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = common::sandbox(dir.path());
    let program = detcheck(&sandbox, Execution::Default);
    let one = run_detcheck(&sandbox, &program, dir.path(), None).await;
    let two = run_detcheck(&sandbox, &program, dir.path(), None).await;
    assert_ne!(line(&one, "random "), line(&two, "random "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nans_are_canonical_on_the_deterministic_engine_only() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = common::sandbox(dir.path());
    let deterministic = detcheck(&sandbox, Execution::Deterministic);
    let out = run_detcheck(&sandbox, &deterministic, dir.path(), Some(SEED_7)).await;
    for key in ["nan 0/0 ", "nan sqrt(-1) ", "nan payload+1 "] {
        assert_eq!(line(&out, key), "7ff8000000000000", "{key}");
    }
    assert_eq!(line(&out, "nan f32 0/0 "), "7fc00000");

    // On the CPU's own terms a NaN operand's payload goes through (x86_64
    // and aarch64 both keep it, quieted): what canonicalization removes.
    if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        let default = detcheck(&sandbox, Execution::Default);
        let out = run_detcheck(&sandbox, &default, dir.path(), None).await;
        assert_eq!(line(&out, "nan payload+1 "), "7ffc000000000001");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_and_rank_key_the_random_bytes_and_the_clocks_are_virtual() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = common::sandbox(dir.path());
    let program = detcheck(&sandbox, Execution::Deterministic);
    let seven = run_detcheck(&sandbox, &program, dir.path(), Some(SEED_7)).await;
    let eight = Determinism { seed: 8, rank: 0 };
    let eight = run_detcheck(&sandbox, &program, dir.path(), Some(eight)).await;
    let rank_one = Determinism { seed: 7, rank: 1 };
    let rank_one = run_detcheck(&sandbox, &program, dir.path(), Some(rank_one)).await;
    assert_ne!(line(&seven, "random "), line(&eight, "random "));
    assert_ne!(line(&seven, "random "), line(&rank_one, "random "));
    // Everything but the random bytes is the same for another seed.
    let without_random = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| !l.starts_with("random "))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(without_random(&seven), without_random(&eight));

    // The wall clock starts at 2025-01-01T00:00:00Z; each reading of a
    // clock is 1 ms after the one before.
    let wall = line(&seven, "wall ");
    assert!(wall.starts_with("1735689600."), "{wall}");
    let nanos = |text: &str| -> u64 {
        let (secs, frac) = text.split_once('.').unwrap();
        secs.parse::<u64>().unwrap() * 1_000_000_000 + frac.parse::<u64>().unwrap()
    };
    let (first, then) = line(&seven, "monotonic ").split_once(" then ").unwrap();
    assert_eq!(nanos(then) - nanos(first), 1_000_000);
    assert!(
        nanos(first) < 1_000_000_000,
        "{first}: the monotonic clock starts at 0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_runs_only_as_the_engine_it_was_loaded_for() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = common::sandbox(dir.path());
    let default = detcheck(&sandbox, Execution::Default);
    let deterministic = detcheck(&sandbox, Execution::Deterministic);
    assert_eq!(default.execution(), Execution::Default);
    assert_eq!(deterministic.execution(), Execution::Deterministic);

    let spec = |d| WorkerSpec {
        deterministic: d,
        ..WorkerSpec::default()
    };
    let done = run(&sandbox, &default, spec(Some(SEED_7))).await;
    assert!(
        matches!(&done.report.outcome, Outcome::Failed(why) if why.contains("loaded for deterministic execution")),
        "{:?}",
        done.report.outcome
    );
    let done = run(&sandbox, &deterministic, spec(None)).await;
    assert!(
        matches!(&done.report.outcome, Outcome::Failed(why) if why.contains("needs a seed")),
        "{:?}",
        done.report.outcome
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deterministic_code_is_cached_apart_and_loaded_from_disk_again() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = guest("detcheck");
    {
        let first = common::sandbox(dir.path());
        first.load_for(&wasm, Execution::Deterministic).unwrap();
        first.load(&wasm).unwrap();
        assert_eq!(first.cache_stats().compiled, 2);
    }
    let entries: Vec<String> = std::fs::read_dir(dir.path().join("cache"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".cwasm"))
        .collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(
        entries.iter().any(|n| n.ends_with("-deterministic.cwasm")),
        "{entries:?}"
    );

    let second = common::sandbox(dir.path());
    let program = second.load_for(&wasm, Execution::Deterministic).unwrap();
    assert_eq!(second.cache_stats().compiled, 0);
    assert_eq!(second.cache_stats().loaded_from_disk, 1);
    let out = run_detcheck(&second, &program, dir.path(), Some(SEED_7)).await;
    assert_eq!(line(&out, "nan 0/0 "), "7ff8000000000000");
}

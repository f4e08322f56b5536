//! The checkpoint calls of the host API: a worker's checkpoint is what a
//! later worker of its rank loads (here through the in-process
//! [`MemoryCheckpoints`]), every pointer and length the guest passes is
//! checked, and the `heat` guest resumes from its checkpoint with the same
//! exact result.

mod common;

use std::sync::Arc;

use common::*;
use zorilla_sandbox::{Checkpoints, MemoryCheckpoints, Outcome, WorkerSpec};

/// The `heat` guest's checksum, computed here independently of it.
fn heat_checksum(rank: u64, cells: usize, iterations: u64) -> u64 {
    let mut grid: Vec<u64> = (0..cells as u64)
        .map(|i| ((i.wrapping_mul(2654435761) + rank * 40503) % 1000003) << 16)
        .collect();
    let mut next = grid.clone();
    for _ in 0..iterations {
        for i in 1..cells - 1 {
            next[i] = (grid[i - 1] + 2 * grid[i] + grid[i + 1]) >> 2;
        }
        std::mem::swap(&mut grid, &mut next);
        next.clone_from(&grid);
    }
    grid.iter().enumerate().fold(0u64, |sum, (i, v)| {
        sum.wrapping_add(v.wrapping_mul(i as u64 + 1))
    })
}

fn spec(store: Option<&MemoryCheckpoints>, args_: &[&str]) -> WorkerSpec {
    WorkerSpec {
        args: args(args_),
        checkpoints: store.map(|s| Arc::new(s.clone()) as Arc<dyn Checkpoints>),
        ..WorkerSpec::default()
    }
}

#[tokio::test]
async fn a_second_worker_resumes_the_heat_stencil_from_the_first_ones_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let program = load(&sandbox, "heat");
    let expected = format!(
        "heat rank=0 done iterations=100 computed=100 checksum={:016x}\n",
        heat_checksum(0, 64, 100)
    );
    let store = MemoryCheckpoints::new(1 << 20);

    let first = run(&sandbox, &program, spec(Some(&store), &["64", "100", "30"])).await;
    assert_eq!(first.report.outcome, Outcome::Exited(0), "{first:?}");
    assert!(
        first.stdout.starts_with("heat rank=0 start=0\n"),
        "{first:?}"
    );
    for at in [30, 60, 90] {
        let line = format!("heat rank=0 checkpoint={at} copies=1\n");
        assert!(first.stdout.contains(&line), "{first:?}");
    }
    assert!(first.stdout.ends_with(&expected), "{first:?}");
    // The checkpoint holds the header and the grid at step 90.
    let saved = store.load().await.unwrap();
    assert_eq!(saved.data.len(), 16 + 64 * 8);
    assert_eq!(saved.data[8..16], 90u64.to_le_bytes());

    let second = run(&sandbox, &program, spec(Some(&store), &["64", "100", "30"])).await;
    assert_eq!(second.report.outcome, Outcome::Exited(0), "{second:?}");
    assert!(
        second.stdout.starts_with("heat rank=0 start=90\n"),
        "{second:?}"
    );
    let resumed = expected.replace("computed=100", "computed=10");
    assert!(second.stdout.ends_with(&resumed), "{second:?}");

    // Without a store the guest computes everything, to the same result.
    let alone = run(&sandbox, &program, spec(None, &["64", "100", "30"])).await;
    assert_eq!(alone.report.outcome, Outcome::Exited(0), "{alone:?}");
    assert!(!alone.stdout.contains("checkpoint="), "{alone:?}");
    assert!(alone.stdout.ends_with(&expected), "{alone:?}");
}

/// Runs `checks` (a WAT function body that calls `$exit` with the number
/// of the first check that fails) against a store of `limit` bytes.
async fn exit_code(store: Option<&MemoryCheckpoints>, checks: &str) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let module = wat::parse_str(format!(
        r#"(module
            (import "zorilla" "checkpoint_save" (func $save (param i32 i32) (result i32)))
            (import "zorilla" "checkpoint_size" (func $size (result i32)))
            (import "zorilla" "checkpoint_load" (func $load (param i32 i32) (result i32)))
            (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
            (memory (export "memory") 1)
            (data (i32.const 0) "hello")
            (func $check (param $got i32) (param $want i32) (param $n i32)
                (if (i32.ne (local.get $got) (local.get $want))
                    (then (call $exit (local.get $n)))))
            (func (export "_start") {checks}))"#
    ))
    .unwrap();
    let program = sandbox.load(&module).unwrap();
    let spec = WorkerSpec {
        checkpoints: store.map(|s| Arc::new(s.clone()) as Arc<dyn Checkpoints>),
        ..WorkerSpec::default()
    };
    run(&sandbox, &program, spec).await.report.outcome
}

#[tokio::test]
async fn checkpoint_calls_check_every_pointer_length_and_limit() {
    let store = MemoryCheckpoints::new(1000);
    let checks = r#"
        ;; nothing saved yet: ZORILLA_ENOCHECKPOINT
        (call $check (call $size) (i32.const -7) (i32.const 1))
        (call $check (call $load (i32.const 100) (i32.const 10)) (i32.const -7) (i32.const 2))
        ;; a range past the end of memory, or wrapping around: EFAULT
        (call $check (call $save (i32.const 65530) (i32.const 10)) (i32.const -3) (i32.const 3))
        (call $check (call $save (i32.const -1) (i32.const 2)) (i32.const -3) (i32.const 4))
        ;; larger than the store's limit: ETOOBIG, before memory is read
        (call $check (call $save (i32.const 0) (i32.const 1001)) (i32.const -4) (i32.const 5))
        (call $check (call $save (i32.const 0) (i32.const -1)) (i32.const -4) (i32.const 6))
        ;; a good save: kept on 1 place
        (call $check (call $save (i32.const 0) (i32.const 5)) (i32.const 1) (i32.const 7))
        (call $check (call $size) (i32.const 5) (i32.const 8))
        ;; too small a buffer: the size, nothing copied
        (call $check (call $load (i32.const 100) (i32.const 2)) (i32.const 5) (i32.const 9))
        (call $check (i32.load8_u (i32.const 100)) (i32.const 0) (i32.const 10))
        ;; a buffer outside memory: EFAULT
        (call $check (call $load (i32.const 65535) (i32.const 5)) (i32.const -3) (i32.const 11))
        ;; a good load
        (call $check (call $load (i32.const 100) (i32.const 5)) (i32.const 5) (i32.const 12))
        (call $check (i32.load8_u (i32.const 104)) (i32.const 111) (i32.const 13))
        ;; loading again fetches again
        (call $check (call $load (i32.const 200) (i32.const 64)) (i32.const 5) (i32.const 14))
        (call $check (i32.load8_u (i32.const 200)) (i32.const 104) (i32.const 15))
    "#;
    assert_eq!(exit_code(Some(&store), checks).await, Outcome::Exited(0));
    assert_eq!(&store.load().await.unwrap().data[..], b"hello");

    // A worker without a store: ZORILLA_ENOTSUP from every call.
    let unsupported = r#"
        (call $check (call $size) (i32.const -8) (i32.const 1))
        (call $check (call $save (i32.const 0) (i32.const 5)) (i32.const -8) (i32.const 2))
        (call $check (call $load (i32.const 0) (i32.const 5)) (i32.const -8) (i32.const 3))
    "#;
    assert_eq!(exit_code(None, unsupported).await, Outcome::Exited(0));
}

/// A checkpoint saved with a generation (`checkpoint_save_generation`, the
/// `halo` guest alone: one rank, its barrier its own) comes back with it
/// (`checkpoint_generation`), and the next worker starts from it.
#[tokio::test]
async fn a_checkpoint_keeps_its_generation_for_the_next_worker() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let program = load(&sandbox, "halo");
    let store = MemoryCheckpoints::new(1 << 20);
    let first = run(&sandbox, &program, spec(Some(&store), &["16", "50", "10"])).await;
    assert_eq!(first.report.outcome, Outcome::Exited(0), "{first:?}");
    assert!(
        first
            .stdout
            .starts_with("halo rank=0 start=0 generation=0\n"),
        "{first:?}"
    );
    for (at, generation) in [(10, 1), (20, 2), (30, 3), (40, 4)] {
        let line = format!("halo rank=0 checkpoint={at} generation={generation} copies=1\n");
        assert!(first.stdout.contains(&line), "{first:?}");
    }
    let saved = store.load().await.unwrap();
    assert_eq!(saved.generation, Some(4));
    let second = run(&sandbox, &program, spec(Some(&store), &["16", "50", "10"])).await;
    assert_eq!(second.report.outcome, Outcome::Exited(0), "{second:?}");
    assert!(
        second
            .stdout
            .starts_with("halo rank=0 start=40 generation=4\n"),
        "{second:?}"
    );
    let done = |computed| {
        let line = first.stdout.lines().last().unwrap().to_owned();
        line.replace("computed=50", &format!("computed={computed}"))
    };
    assert!(
        second.stdout.ends_with(&format!("{}\n", done(10))),
        "{second:?}"
    );
}

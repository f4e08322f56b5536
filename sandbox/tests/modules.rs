//! Modules are refused before any worker starts when they are not valid or
//! import what we do not provide; compiled modules are cached on disk,
//! survive a restart, and a damaged cache entry is never trusted.

mod common;

use common::*;
use zorilla_sandbox::{CacheStats, Outcome, SandboxError, WorkerSpec};

fn wat(text: &str) -> Vec<u8> {
    wat::parse_str(text).unwrap()
}

/// The names of the files in the sandbox's cache directory under `dir`.
fn cache_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("cache"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Loads `module`, expects it refused, and checks that the refusal left no
/// compiled artifact in the cache (it was compiled: the checks need that).
fn refused_without_a_trace(module: &[u8]) -> SandboxError {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let err = sandbox.load(module).err().expect("refused");
    assert_eq!(sandbox.cache_stats().compiled, 1, "{err}");
    assert!(!sandbox.cache_path(module).exists(), "{err}");
    assert_eq!(cache_files(dir.path()), Vec::<String>::new(), "{err}");
    err
}

#[test]
fn bytes_that_are_not_wasm_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let err = sandbox.load(b"#!/bin/sh\necho hi\n").err().unwrap();
    assert!(matches!(err, SandboxError::InvalidModule(_)), "{err}");
    assert!(err.to_string().contains("magic number"), "{err}");

    let hello = guest("hello");
    let err = sandbox.load(&hello[..hello.len() / 2]).err().unwrap();
    assert!(matches!(err, SandboxError::InvalidModule(_)), "{err}");
    assert_eq!(sandbox.cache_stats().compiled, 0);
}

#[test]
fn unknown_imports_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let module = wat(r#"(module
        (import "zorilla" "teleport" (func (param i32) (result i32)))
        (memory (export "memory") 1)
        (func (export "_start")))"#);
    let err = sandbox.load(&module).err().unwrap();
    match &err {
        SandboxError::UnknownImport { module, name } => {
            assert_eq!((module.as_str(), name.as_str()), ("zorilla", "teleport"))
        }
        other => panic!("{other}"),
    }
    assert_eq!(
        err.to_string(),
        "module imports `zorilla::teleport`, which the Zorilla sandbox does not provide"
    );

    let module = wat(r#"(module (import "env" "sock_open" (func)) (func (export "_start")))"#);
    let err = sandbox.load(&module).err().unwrap();
    assert!(err.to_string().contains("`env::sock_open`"), "{err}");
}

#[test]
fn refused_modules_leave_no_cache_entry() {
    let unknown_import = wat(r#"(module
        (import "zorilla" "teleport" (func (param i32) (result i32)))
        (func (export "_start")))"#);
    assert!(matches!(
        refused_without_a_trace(&unknown_import),
        SandboxError::UnknownImport { .. }
    ));
    let wrong_type = wat(r#"(module
        (import "zorilla" "rank" (func (param i64) (result i64)))
        (func (export "_start")))"#);
    assert!(matches!(
        refused_without_a_trace(&wrong_type),
        SandboxError::IncompatibleImport(_)
    ));
    let no_start = wat(r#"(module (func (export "main")))"#);
    assert!(matches!(
        refused_without_a_trace(&no_start),
        SandboxError::NoEntryPoint
    ));
}

#[test]
fn a_refused_module_also_loses_a_damaged_entry() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let module = wat(r#"(module (func (export "main")))"#);
    std::fs::write(sandbox.cache_path(&module), b"left over").unwrap();
    let err = sandbox.load(&module).err().unwrap();
    assert!(matches!(err, SandboxError::NoEntryPoint), "{err}");
    assert_eq!(sandbox.cache_stats(), stats(1, 0, 0, 1));
    assert_eq!(cache_files(dir.path()), Vec::<String>::new());
}

#[test]
fn imports_of_the_wrong_type_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let module = wat(r#"(module
        (import "zorilla" "rank" (func (param i64) (result i64)))
        (func (export "_start")))"#);
    let err = sandbox.load(&module).err().unwrap();
    assert!(matches!(err, SandboxError::IncompatibleImport(_)), "{err}");
    assert!(err.to_string().contains("rank"), "{err}");
}

#[test]
fn modules_without_start_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let err = sandbox
        .load(&wat(r#"(module (func (export "main")))"#))
        .err()
        .unwrap();
    assert!(matches!(err, SandboxError::NoEntryPoint), "{err}");
}

#[test]
fn every_example_guest_loads() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    for name in [
        "hello", "nqueens", "pi", "pingpong", "api", "bomb", "spin", "escape", "flood", "trap",
        "sum", "fill", "barrier", "links", "big",
    ] {
        sandbox
            .load(&guest(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

fn stats(compiled: u64, loaded_from_disk: u64, memory_hits: u64, rejected: u64) -> CacheStats {
    CacheStats {
        compiled,
        loaded_from_disk,
        memory_hits,
        rejected,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = guest("nqueens");
    {
        let first = sandbox(dir.path());
        first.load(&wasm).unwrap();
        first.load(&wasm).unwrap();
        assert_eq!(first.cache_stats(), stats(1, 0, 1, 0));
        assert!(first.cache_path(&wasm).exists());
    }
    // A new engine over the same directory: no compilation at all.
    let second = sandbox(dir.path());
    let program = second.load(&wasm).unwrap();
    assert_eq!(second.cache_stats(), stats(0, 1, 0, 0));
    // And the artifact loaded from disk runs correctly.
    let done = run(
        &second,
        &program,
        WorkerSpec {
            args: args(&["8"]),
            ..WorkerSpec::default()
        },
    )
    .await;
    assert_eq!(done.report.outcome, Outcome::Exited(0));
    assert_eq!(done.stdout, "nqueens N=8 ranks=1 solutions=92\n");
}

/// Damages the cache entry of `wasm` with `damage`, then checks that a new
/// sandbox rejects it, recompiles, rewrites a good entry, and runs.
async fn damaged_entry_is_rejected(damage: impl FnOnce(&mut Vec<u8>)) {
    let dir = tempfile::tempdir().unwrap();
    let wasm = guest("nqueens");
    let path = {
        let first = sandbox(dir.path());
        first.load(&wasm).unwrap();
        first.cache_path(&wasm)
    };
    let mut entry = std::fs::read(&path).unwrap();
    damage(&mut entry);
    std::fs::write(&path, &entry).unwrap();

    let second = sandbox(dir.path());
    let program = second.load(&wasm).unwrap();
    assert_eq!(second.cache_stats(), stats(1, 0, 0, 1));
    let done = run(
        &second,
        &program,
        WorkerSpec {
            args: args(&["6"]),
            ..WorkerSpec::default()
        },
    )
    .await;
    assert_eq!(done.stdout, "nqueens N=6 ranks=1 solutions=4\n");

    // The entry was rewritten and is trusted again.
    let third = sandbox(dir.path());
    third.load(&wasm).unwrap();
    assert_eq!(third.cache_stats(), stats(0, 1, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_artifact_is_rejected() {
    damaged_entry_is_rejected(|entry| {
        let middle = entry.len() / 2;
        entry[middle] ^= 0x01;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_artifact_is_rejected() {
    damaged_entry_is_rejected(|entry| entry.truncate(entry.len() - 100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_of_another_engine_is_rejected() {
    // Byte 12 starts the engine fingerprint.
    damaged_entry_is_rejected(|entry| entry[12] ^= 0xFF).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_wasmtime_artifact_is_rejected() {
    // Something wasmtime itself would accept, but without our header.
    damaged_entry_is_rejected(|entry| {
        entry.drain(..116);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_filed_under_another_module_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (hello, nqueens) = (guest("hello"), guest("nqueens"));
    {
        let first = sandbox(dir.path());
        first.load(&hello).unwrap();
        // A self-consistent entry, but for another module.
        std::fs::copy(first.cache_path(&hello), first.cache_path(&nqueens)).unwrap();
    }
    let second = sandbox(dir.path());
    second.load(&nqueens).unwrap();
    assert_eq!(second.cache_stats(), stats(1, 0, 0, 1));
}

#[test]
fn threads_loading_one_new_module_at_once_leave_one_good_entry() {
    let dir = tempfile::tempdir().unwrap();
    // A module of its own, so that it is new to the cache.
    let module = wat(r#"(module
        (memory (export "memory") 1)
        (func (export "_start") (drop (i32.const 7))))"#);
    let sandboxes: Vec<_> = (0..4).map(|_| sandbox(dir.path())).collect();
    let start = std::sync::Barrier::new(sandboxes.len());
    std::thread::scope(|scope| {
        for sandbox in &sandboxes {
            let (start, module) = (&start, &module);
            scope.spawn(move || {
                start.wait();
                sandbox.load(module).unwrap();
            });
        }
    });
    // Every write went through a file of its own and was renamed away.
    let entry = sandboxes[0].cache_path(&module);
    let name = entry.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(cache_files(dir.path()), vec![name]);
    let after = sandbox(dir.path());
    after.load(&module).unwrap();
    assert_eq!(after.cache_stats(), stats(0, 1, 0, 0));
}

//! Outputs of hundreds of MB: stored at the home at a cost linear in their
//! size (off the event loop), fetched whole by `zorilla fetch` in blocks,
//! stopped promptly by a cancel, and held to the worker's disk limit. Real
//! `zorilla-node` processes on loopback; the worker runs on a node other
//! than the home, so that what the home process writes is the store's
//! doing alone.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::{TestNode, wait_for, wasm};
use sha2::{Digest, Sha256};
use zorilla_core::advert::JobId;
use zorilla_node::client::Client;
use zorilla_node::protocol::{JobPhase, JobRequest, OutcomeCode};

const MIB: u64 = 1024 * 1024;

/// What a process has written so far, from `/proc/PID/io`: bytes handed
/// to `write` and its kin (`wchar`), and bytes sent to the storage layer
/// (`write_bytes`).
#[derive(Debug, Clone, Copy)]
struct Io {
    wchar: u64,
    write_bytes: u64,
}

fn io_of(pid: u32) -> Io {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/io:\n{text}"))
    };
    Io {
        wchar: field("wchar:"),
        write_bytes: field("write_bytes:"),
    }
}

/// The SHA-256 of the first `bytes` bytes of what `examples/src/big.c`
/// writes (xorshift32 from 1, little-endian words).
fn pattern_sha256(bytes: u64) -> String {
    let mut hasher = Sha256::new();
    let mut x: u32 = 1;
    let mut block = vec![0u8; 64 * 1024];
    let mut left = bytes;
    while left > 0 {
        for word in block.chunks_exact_mut(4) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            word.copy_from_slice(&x.to_le_bytes());
        }
        let n = left.min(block.len() as u64) as usize;
        hasher.update(&block[..n]);
        left -= n as u64;
    }
    hex(&hasher.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn file_sha256(path: &std::path::Path) -> (u64, String) {
    let mut file = std::fs::File::open(path).unwrap();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).unwrap();
        if n == 0 {
            return (size, hex(&hasher.finalize()));
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
}

/// Bytes of the files below `dir` (as `du --apparent-size` counts).
fn tree_size(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            tree_size(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// A home offering no cores and a worker node with one, on loopback.
fn two_nodes(dir: &std::path::Path, name: &str) -> (TestNode, TestNode) {
    let network = format!("{name}-{}", std::process::id());
    let home = TestNode::start(&dir.join("home"), &network, None, 0);
    let worker = TestNode::start(&dir.join("worker"), &network, Some(&home.listen), 1);
    (home, worker)
}

fn big_job(mib: u64) -> JobRequest {
    JobRequest {
        lifetime_secs: 60,
        args: vec![mib.to_string()],
        ..JobRequest::default()
    }
}

async fn output_total(client: &mut Client, job: u64) -> u64 {
    client
        .outputs(job)
        .await
        .unwrap()
        .iter()
        .map(|f| f.size)
        .sum()
}

/// A 300 MiB output file goes home and comes back whole through `zorilla
/// fetch`, and the home writes it about once: the bytes the home process
/// wrote while taking it (`/proc/PID/io`) and its state directory are
/// within 2.5x the output's size (storing the file as one growing value
/// wrote it over and over: about 800x for 270 MB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_mib_output_is_stored_with_linear_writes_and_fetched_whole() {
    const SIZE_MIB: u64 = 300;
    let size = SIZE_MIB * MIB;
    let dir = tempfile::tempdir().unwrap();
    let (home, _worker) = two_nodes(dir.path(), "big");
    let mut client = home.client().await;
    let pid = home.child.id();

    let before = io_of(pid);
    let started = Instant::now();
    let job = client
        .submit(big_job(SIZE_MIB), wasm("big"), vec![])
        .await
        .unwrap();
    let status = wait_for(&mut client, job, Duration::from_secs(240), "the end", |s| {
        s.phase.is_terminal()
    })
    .await;
    let took = started.elapsed();
    if status.phase != JobPhase::Completed {
        let logs = client.logs(job).await.unwrap();
        let text: String = logs
            .iter()
            .map(|c| String::from_utf8_lossy(&c.data).into_owned())
            .collect();
        panic!("{status:?}\n{text}");
    }
    let after = io_of(pid);
    let wchar = after.wchar - before.wchar;
    let write_bytes = after.write_bytes - before.write_bytes;
    let state = tree_size(&home.dir);
    eprintln!(
        "{SIZE_MIB} MiB output home in {took:.1?}: the home wrote {} MiB ({} MiB to the disk), \
         its state directory holds {} MiB",
        wchar / MIB,
        write_bytes / MIB,
        state / MIB
    );
    let files = client.outputs(job).await.unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0].name, "0/big.bin");
    assert_eq!(files[0].size, size);
    assert!(wchar <= size * 5 / 2, "the home wrote {wchar} bytes");
    assert!(
        write_bytes <= size * 5 / 2,
        "the home wrote {write_bytes} bytes"
    );
    assert!(
        state <= size * 5 / 4,
        "the state directory holds {state} bytes"
    );

    let fetched = dir.path().join("fetched");
    let started = Instant::now();
    let out = common::cli()
        .env("ZORILLA_NODE", &home.client)
        .env_remove("ZORILLA_TOKEN")
        .arg("fetch")
        .arg(JobId(job).to_string())
        .arg(&fetched)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("fetched in {:.1?}", started.elapsed());
    let path = fetched.join("0/big.bin");
    assert_eq!(file_sha256(&path), (size, pattern_sha256(size)));
    std::fs::remove_file(&path).unwrap();
}

/// A job cancelled while its 300 MiB output goes home: the transfer stops
/// and the worker node is idle within a second of the cancel's answer, and
/// the home answers clients quickly all the while.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_large_output_leaves_the_nodes_idle_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let (home, worker) = two_nodes(dir.path(), "cancel");
    let mut client = home.client().await;
    let mut worker_client = worker.client().await;
    let job = client
        .submit(big_job(300), wasm("big"), vec![])
        .await
        .unwrap();
    // Until a good part is home, timing the home's answers meanwhile.
    let mut latencies = Vec::new();
    let start = Instant::now();
    loop {
        let asked = Instant::now();
        client.node_info().await.unwrap();
        latencies.push(asked.elapsed());
        if output_total(&mut client, job).await >= 32 * MIB {
            break;
        }
        let status = client.status(job).await.unwrap();
        assert!(!status.phase.is_terminal(), "{status:?}");
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no output came home\n{}",
            home.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = client.cancel(job).await.unwrap();
    assert_eq!(status.phase, JobPhase::Cancelled);
    let cancelled = Instant::now();
    loop {
        let asked = Instant::now();
        let info = worker_client.node_info().await.unwrap();
        latencies.push(asked.elapsed());
        if info.running.is_empty() {
            break;
        }
        assert!(
            cancelled.elapsed() < Duration::from_secs(10),
            "the worker node still runs {:?}\n{}",
            info.running,
            worker.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let idle_after = cancelled.elapsed();
    let home_info = client.node_info().await.unwrap();
    assert!(home_info.running.is_empty(), "{home_info:?}");
    // Nothing more arrives.
    let kept = output_total(&mut client, job).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(output_total(&mut client, job).await, kept);
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    let worst = *latencies.last().unwrap();
    eprintln!(
        "idle {idle_after:?} after the cancel; {} MiB had come home; client answers: \
         median {median:?}, worst {worst:?} of {}",
        kept / MIB,
        latencies.len()
    );
    assert!(
        idle_after <= Duration::from_secs(1),
        "idle only {idle_after:?} after the cancel"
    );
    assert!(
        kept < 300 * MIB,
        "the whole output came home: not a cancel mid-transfer"
    );
    assert!(
        median < Duration::from_millis(100),
        "median answer {median:?}"
    );
    assert!(worst < Duration::from_secs(2), "slowest answer {worst:?}");
}

/// A worker that writes past its job's disk limit ends with the sentence
/// for it, and what reaches the home is within the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_limit_holds_for_what_goes_home() {
    const LIMIT_MIB: u64 = 16;
    let dir = tempfile::tempdir().unwrap();
    let (home, _worker) = two_nodes(dir.path(), "disklimit");
    let mut client = home.client().await;
    let request = JobRequest {
        disk_mib: LIMIT_MIB,
        ..big_job(64)
    };
    let job = client.submit(request, wasm("big"), vec![]).await.unwrap();
    let status = wait_for(&mut client, job, Duration::from_secs(120), "the end", |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(status.phase, JobPhase::Failed, "{status:?}");
    assert_eq!(
        status.ranks[&0].outcome.as_deref(),
        Some("stopped: wrote more than its 16 MiB disk limit"),
        "{status:?}"
    );
    assert_eq!(status.ranks[&0].code, Some(OutcomeCode::DiskLimit));
    let files = client.outputs(job).await.unwrap();
    let total: u64 = files.iter().map(|f| f.size).sum();
    eprintln!("home has {files:?}");
    assert!(
        total <= LIMIT_MIB * MIB,
        "{total} bytes came home: {files:?}"
    );
    // What came is what the guest wrote.
    for file in &files {
        let data = client.read_output(job, &file.name).await.unwrap();
        let mut hasher = Sha256::new();
        hasher.update(&data);
        assert_eq!(hex(&hasher.finalize()), pattern_sha256(file.size));
    }
}

/// A home keeps at most the disk it offers to jobs of one job's outputs:
/// past it the rest is refused, and the job's log says why in one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_keeps_at_most_its_offered_disk_of_a_jobs_outputs() {
    const HOME_MIB: u64 = 8;
    let dir = tempfile::tempdir().unwrap();
    let network = format!("room-{}", std::process::id());
    let home_dir = dir.path().join("home");
    let mut args = TestNode::args(&home_dir, &network, None, 0, "127.0.0.1", &[]);
    let at = args.iter().position(|a| a == "--disk-mib").unwrap();
    args[at + 1] = HOME_MIB.to_string();
    let home = TestNode::spawn(&home_dir, args);
    let _worker = TestNode::start(&dir.path().join("worker"), &network, Some(&home.listen), 1);
    let mut client = home.client().await;
    let job = client
        .submit(big_job(2 * HOME_MIB), wasm("big"), vec![])
        .await
        .unwrap();
    let status = wait_for(&mut client, job, Duration::from_secs(120), "the end", |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    let total = output_total(&mut client, job).await;
    assert!(total <= HOME_MIB * MIB, "the home kept {total} bytes");
    let logs = client.logs(job).await.unwrap();
    let stderr = common::stderr_of(&logs);
    let expected = format!(
        "zorilla: outputs/big.bin and the rest were not sent: the outputs of job {} \
         reached the {HOME_MIB} MiB its home keeps for one job\n",
        JobId(job)
    );
    assert_eq!(stderr, expected);
}

/// A node's offer of disk holds for all its workers together (issue 31:
/// three workers of one job wrote 419 MB on a node offering 200 MiB): a
/// node offering 24 MiB runs three workers that write 12 MiB each, each
/// under its own limit (the node's 24 MiB). The writes past the offer fail
/// with ENOSPC, which the guest reports before it exits 3 (which ends the
/// job), the node keeps running, and what comes home is within the offer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_workers_together_are_held_to_its_offered_disk() {
    const OFFER_MIB: u64 = 24;
    let dir = tempfile::tempdir().unwrap();
    let network = format!("shared-disk-{}", std::process::id());
    let home = TestNode::start(&dir.path().join("home"), &network, None, 0);
    let worker_dir = dir.path().join("worker");
    let mut args = TestNode::args(
        &worker_dir,
        &network,
        Some(&home.listen),
        3,
        "127.0.0.1",
        &[],
    );
    let at = args.iter().position(|a| a == "--disk-mib").unwrap();
    args[at + 1] = OFFER_MIB.to_string();
    let worker = TestNode::spawn(&worker_dir, args);
    let mut client = home.client().await;
    let request = JobRequest {
        min_workers: 3,
        max_workers: 3,
        ..big_job(OFFER_MIB / 2)
    };
    let job = client.submit(request, wasm("big"), vec![]).await.unwrap();
    let status = wait_for(&mut client, job, Duration::from_secs(120), "the end", |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(status.phase, JobPhase::Failed, "{status:?}");
    // A rank that finds the disk full exits 3, which ends the job: the
    // others completed or were stopped with it, none hit a limit.
    let ends: Vec<_> = status
        .ranks
        .values()
        .map(|r| (r.code, r.exit_status))
        .collect();
    assert!(
        ends.iter().all(|end| matches!(
            end,
            (Some(OutcomeCode::Exited), Some(0 | 3)) | (Some(OutcomeCode::Stopped), None)
        )) && ends.contains(&(Some(OutcomeCode::Exited), Some(3))),
        "each rank completes, finds the disk full or is stopped: {status:?}"
    );
    let stderr = common::stderr_of(&client.logs(job).await.unwrap());
    assert!(stderr.contains("No space left on device"), "{stderr}");
    let total = output_total(&mut client, job).await;
    assert!(total <= OFFER_MIB * MIB, "{total} bytes were written");
    // The node goes on.
    let info = worker.client().await.node_info().await.unwrap();
    assert_eq!(info.disk_mib, OFFER_MIB);
}

//! A job's outputs go home without the node following a link out of the
//! job's directory: real `zorilla-node` processes on loopback, the worker
//! on a node other than the home, with a token in its environment and its
//! identity key on disk, running a guest that leaves links to both (and to
//! `/etc/passwd` and `/dev/zero`) in its `/outputs`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{TestNode, wait_for, wasm};
use zorilla_core::advert::JobId;
use zorilla_node::protocol::{JobPhase, JobRequest, LogChunk};

/// The resident memory of process `pid`, in KiB (0 once it is gone).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Whether `haystack` holds any `window`-byte piece of `needle` (all of it
/// if it is shorter).
fn holds_piece_of(haystack: &[u8], needle: &[u8], window: usize) -> bool {
    let window = window.min(needle.len());
    window > 0
        && needle
            .windows(window)
            .any(|piece| haystack.windows(window).any(|w| w == piece))
}

fn text_of(chunks: &[LogChunk], stderr: bool) -> String {
    chunks
        .iter()
        .filter(|c| c.stderr == stderr)
        .map(|c| String::from_utf8_lossy(&c.data).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_are_regular_files_only_and_links_out_are_skipped_with_a_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let network = format!("links-{}", std::process::id());
    // The home offers no cores: the worker runs on the other node.
    let home = TestNode::start(&dir.path().join("home"), &network, None, 0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let token = format!("zorilla-secret-token-{}-{nanos}", std::process::id());
    let worker_dir = dir.path().join("worker");
    let worker = TestNode::spawn_env(
        &worker_dir,
        TestNode::args(
            &worker_dir,
            &network,
            Some(&home.listen),
            1,
            "127.0.0.1",
            &[],
        ),
        vec![("ZORILLA_TOKEN".into(), token.clone())],
    );
    let key = std::fs::read(worker.dir.join("identity.ed25519")).unwrap();
    let passwd = std::fs::read("/etc/passwd").unwrap();

    // The worker node's resident memory, sampled until the job is over.
    let pid = worker.child.id();
    let baseline = rss_kib(pid);
    let peak = Arc::new(AtomicU64::new(baseline));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            while !stop.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(120) {
                peak.fetch_max(rss_kib(pid), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };

    let mut client = home.client().await;
    let request = JobRequest {
        min_workers: 1,
        max_workers: 1,
        lifetime_secs: 60,
        ..JobRequest::default()
    };
    let job = client.submit(request, wasm("links"), vec![]).await.unwrap();
    let status = wait_for(&mut client, job, Duration::from_secs(60), "the end", |s| {
        s.phase.is_terminal()
    })
    .await;
    // The worker node frees its worker after its outputs went home.
    let mut worker_client = zorilla_node::client::Client::connect_with(
        worker.client.as_str(),
        Some(token.as_str()),
        "test",
    )
    .await
    .unwrap();
    let start = Instant::now();
    while worker_client
        .node_info()
        .await
        .unwrap()
        .running
        .contains_key(&job)
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the worker never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    assert_eq!(status.ranks[&0].node, worker.peer, "rank 0 ran at the home");

    // Exactly the two regular files, with their contents.
    let mut outputs: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for file in client.outputs(job).await.unwrap() {
        let data = client.read_output(job, &file.name).await.unwrap();
        assert_eq!(data.len() as u64, file.size);
        outputs.insert(file.name, data);
    }
    let expected: BTreeMap<String, Vec<u8>> = [
        ("0/ok.txt".to_string(), b"inside\n".to_vec()),
        ("0/sub/deep.txt".to_string(), b"deep\n".to_vec()),
    ]
    .into_iter()
    .collect();
    assert_eq!(outputs, expected);

    // Nothing of the node's key, token or password file anywhere.
    let logs = client.logs(job).await.unwrap();
    let mut everything: Vec<u8> = outputs.values().flatten().copied().collect();
    everything.extend(logs.iter().flat_map(|c| c.data.iter().copied()));
    assert!(
        !holds_piece_of(&everything, &key, 16),
        "a piece of the identity key went home"
    );
    assert!(
        !holds_piece_of(&everything, token.as_bytes(), token.len()),
        "the token went home"
    );
    assert!(
        !holds_piece_of(&everything, &passwd, 16),
        "/etc/passwd went home"
    );

    // One skip line per link the guest made, and no other.
    let stdout = text_of(&logs, false);
    let made: BTreeSet<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("made "))
        .map(|name| format!("zorilla: skipped outputs/{name}: a symbolic link, not a regular file"))
        .collect();
    for name in [
        "up4", "passwd", "environ", "zero", "state", "self", "sub/key",
    ] {
        assert!(stdout.contains(&format!("made {name}\n")), "{stdout}");
    }
    let stderr = text_of(&logs, true);
    let skipped: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("zorilla: "))
        .collect();
    assert_eq!(skipped.len(), made.len(), "{stderr}");
    assert_eq!(
        skipped
            .iter()
            .map(|l| l.to_string())
            .collect::<BTreeSet<_>>(),
        made
    );

    // The /dev/zero link was not read: the worker node's memory stayed
    // within a small margin of where it started.
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        peak < baseline + 128 * 1024,
        "the worker node grew from {baseline} KiB to {peak} KiB"
    );
    eprintln!("worker node RSS: {baseline} KiB before, {peak} KiB at most");

    // The job directory went, through none of its links: the key is still
    // where it was.
    assert_eq!(
        std::fs::read(worker.dir.join("identity.ed25519")).unwrap(),
        key
    );
    // (A worker's directory is named by its rank and incarnation.)
    let rank_dirs = std::fs::read_dir(worker.dir.join("jobs").join(JobId(job).to_string()))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("0."))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(rank_dirs, 0);

    // `zorilla fetch` places the tree, and does not write through a link
    // already in the destination.
    let fetched = dir.path().join("fetched");
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
    assert_eq!(
        std::fs::read(fetched.join("0/ok.txt")).unwrap(),
        b"inside\n"
    );
    assert_eq!(
        std::fs::read(fetched.join("0/sub/deep.txt")).unwrap(),
        b"deep\n"
    );
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let trapped = dir.path().join("trapped");
    std::fs::create_dir(&trapped).unwrap();
    std::os::unix::fs::symlink(&elsewhere, trapped.join("0")).unwrap();
    let out = common::cli()
        .env("ZORILLA_NODE", &home.client)
        .env_remove("ZORILLA_TOKEN")
        .arg("fetch")
        .arg(JobId(job).to_string())
        .arg(&trapped)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

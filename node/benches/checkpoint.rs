//! Issue 16's benchmark: what a checkpoint costs. A one-worker `heat` job
//! on a grid of three one-core `zorilla-node` processes on 127.0.0.1 saves
//! one checkpoint of 1, 16 and 256 MiB (its grid); the worker's node logs
//! how long the save took (blocks to two holders, their manifests, the
//! home told) and how many bytes it sent. Loopback, one machine: the time
//! is the nodes' work (hashing, CBOR, noise, redb), not a network's.
//!
//! Run: `cargo bench --workspace --bench checkpoint`
//! (`ZORILLA_BENCH_SHORT=1`: 1 MiB only).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::{grid, wait_completed, wait_for_neighbours, wasm};
use zorilla_node::protocol::JobRequest;

fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
}

/// `key=value` of the first log line of `dir`'s node that says `what`.
fn logged(dir: &std::path::Path, what: &str, job: u64) -> Option<String> {
    let id = format!("{job:016x}");
    std::fs::read_to_string(dir.join("node.log"))
        .ok()?
        .lines()
        .find(|l| l.contains(what) && l.contains(&id))
        .map(str::to_owned)
}

fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line}"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes_mib: &[u64] = if short() { &[1] } else { &[1, 16, 256] };
    let grid = grid(3, 1);
    // Every node knows both others: each checkpoint goes to two holders.
    wait_for_neighbours(&grid.nodes, 2, Duration::from_secs(60)).await;
    let mut client = grid.nodes[0].client().await;
    println!("checkpoint: size_mib copies sent_mib save_ms MB/s");
    for &mib in sizes_mib {
        // heat's checkpoint: a 16-byte header and 8 bytes per cell.
        let cells = (mib << 20) / 8 - 2;
        let request = JobRequest {
            min_workers: 1,
            max_workers: 1,
            // The grid twice (state and next step), and room.
            memory_mib: 2 * mib + 64,
            lifetime_secs: 120,
            args: vec![cells.to_string(), "2".into(), "1".into()],
            ..JobRequest::default()
        };
        let job = client.submit(request, wasm("heat"), vec![]).await.unwrap();
        wait_completed(&mut client, job, Duration::from_secs(600)).await;
        let line = grid
            .nodes
            .iter()
            .find_map(|n| logged(&n.dir, "checkpoint stored", job))
            .expect("the worker's node logged the save");
        let (bytes, copies, sent, ms) = (
            field(&line, "bytes"),
            field(&line, "copies"),
            field(&line, "sent_bytes"),
            field(&line, "ms"),
        );
        assert_eq!(bytes, mib << 20);
        let rate = sent as f64 / 1e6 / (ms.max(1) as f64 / 1e3);
        println!(
            "checkpoint size_mib={mib} copies={copies} sent_mib={} save_ms={ms} mb_per_s={rate:.0}",
            sent >> 20
        );
    }
}

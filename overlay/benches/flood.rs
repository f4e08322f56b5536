//! Flood benchmark: 64 overlay nodes on loopback (real TCP, noise, yamux),
//! each knowing one bootstrap node; once the overlay has formed, floods of
//! unlimited reach from different origins. Reports frames and bytes per
//! flood and the time until the last node has it.
//!
//! `cargo bench -p zorilla-overlay --bench flood`; `ZORILLA_BENCH_NODES`
//! and `ZORILLA_BENCH_FLOODS` change the size.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use zorilla_core::advert::{FloodHeader, JobId};
use zorilla_core::flood::FloodId;
use zorilla_core::neighbours::NeighbourConfig;
use zorilla_overlay::{Event, Overlay, OverlayConfig, OverlayHandle, PeerId};

type Deliveries = Arc<Mutex<HashMap<FloodId, Vec<Instant>>>>;

struct Node {
    handle: OverlayHandle,
    deliveries: Deliveries,
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    // RUST_LOG=zorilla_overlay=debug shows what the overlay does.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn start(config: OverlayConfig) -> anyhow::Result<Node> {
    let (handle, mut events) = Overlay::start(config).await?;
    let deliveries: Deliveries = Arc::default();
    let sink = deliveries.clone();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let Event::Flood { id, .. } = event {
                let now = Instant::now();
                sink.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(id)
                    .or_default()
                    .push(now);
            }
        }
    });
    Ok(Node { handle, deliveries })
}

/// Whether the two-way flood graph connects all nodes.
async fn connected(nodes: &[Node]) -> anyhow::Result<bool> {
    let mut graph: HashMap<PeerId, Vec<PeerId>> = HashMap::new();
    for node in nodes {
        let links = node.handle.links().await?;
        graph.insert(
            node.handle.local_peer_id(),
            links.into_iter().map(|(p, _)| p).collect(),
        );
    }
    let start = nodes[0].handle.local_peer_id();
    let mut seen = HashSet::from([start]);
    let mut queue = VecDeque::from([start]);
    while let Some(u) = queue.pop_front() {
        for v in graph.get(&u).into_iter().flatten() {
            if seen.insert(*v) {
                queue.push_back(*v);
            }
        }
    }
    Ok(seen.len() == nodes.len())
}

async fn totals(nodes: &[Node]) -> anyhow::Result<(u64, u64, u64)> {
    let (mut frames, mut bytes, mut received) = (0, 0, 0);
    for node in nodes {
        let stats = node.handle.stats().await?;
        frames += stats.flood_frames_sent;
        bytes += stats.flood_bytes_sent;
        received += stats.flood_frames_received + stats.flood_send_failures;
    }
    Ok((frames, bytes, received))
}

async fn run() -> anyhow::Result<()> {
    let n = env_or("ZORILLA_BENCH_NODES", 64);
    let floods = env_or("ZORILLA_BENCH_FLOODS", 20);
    let network = format!("bench-{}", std::process::id());
    let neighbours = NeighbourConfig::default();
    let size = neighbours.near + neighbours.far;
    let make = || OverlayConfig {
        neighbours: neighbours.clone(),
        ..OverlayConfig::local(&network)
    };

    let begin = Instant::now();
    let mut nodes = vec![start(make()).await?];
    let bootstrap = nodes[0].handle.listen_addrs().await?[0].clone();
    for _ in 1..n {
        nodes.push(
            start(OverlayConfig {
                bootstrap: vec![bootstrap.clone()],
                ..make()
            })
            .await?,
        );
    }
    loop {
        let mut full = 0;
        for node in &nodes {
            if node.handle.neighbours().await?.len() == size {
                full += 1;
            }
        }
        if full == n && connected(&nodes).await? {
            break;
        }
        if begin.elapsed() > Duration::from_secs(180) {
            bail!("overlay of {n} nodes did not form within 180 s ({full} full)");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let formed = begin.elapsed();
    let mut degree = 0;
    for node in &nodes {
        degree += node.handle.links().await?.len();
    }

    let payload = vec![0xA5u8; 256];
    let mut cover_times = Vec::new();
    let (mut frames_total, mut bytes_total) = (0u64, 0u64);
    for i in 0..floods {
        let origin = (i * 17) % n;
        let (frames0, bytes0, _) = totals(&nodes).await?;
        let id = FloodId {
            job: JobId(1000 + i as u64),
            seq: 0,
        };
        let header = FloodHeader {
            seq: 0,
            ttl: 15,
            latency_budget: None,
            path_rtt: Duration::ZERO,
        };
        let sent = Instant::now();
        nodes[origin]
            .handle
            .flood(id, header, payload.clone())
            .await
            .context("flood")?;
        // Wait until every other node has it and no copy is in flight.
        // Cheap checks first: asking 64 event loops for their counters
        // competes with the flood for the CPU.
        loop {
            let reached = nodes
                .iter()
                .filter(|node| {
                    node.deliveries
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .contains_key(&id)
                })
                .count();
            if reached == n - 1 {
                let (frames, _, received) = totals(&nodes).await?;
                if received >= frames {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if sent.elapsed() > Duration::from_secs(30) {
                bail!("flood {i} reached {reached} of {} nodes in 30 s", n - 1);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let last = nodes
            .iter()
            .filter_map(|node| {
                node.deliveries
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&id)
                    .and_then(|times| times.iter().max().copied())
            })
            .max()
            .context("no delivery")?;
        cover_times.push(last.duration_since(sent));
        let (frames1, bytes1, _) = totals(&nodes).await?;
        frames_total += frames1 - frames0;
        bytes_total += bytes1 - bytes0;
    }
    cover_times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mean = cover_times.iter().map(|d| ms(*d)).sum::<f64>() / floods as f64;
    println!(
        "overlay flood benchmark: {n} nodes on loopback, neighbours {} near + {} far, {floods} floods of a {}-byte payload, TTL 15",
        neighbours.near,
        neighbours.far,
        payload.len()
    );
    println!(
        "  overlay formed in {:.1} s; mean flood links per node {:.1}",
        formed.as_secs_f64(),
        degree as f64 / n as f64
    );
    println!(
        "  frames per flood: {:.0} ({:.1} per node reached)",
        frames_total as f64 / floods as f64,
        frames_total as f64 / floods as f64 / (n - 1) as f64
    );
    println!(
        "  bytes per flood: {:.0} (CBOR frames, {:.0} per frame)",
        bytes_total as f64 / floods as f64,
        bytes_total as f64 / frames_total.max(1) as f64
    );
    println!(
        "  time to cover all {} other nodes: mean {:.1} ms, median {:.1} ms, max {:.1} ms",
        n - 1,
        mean,
        ms(cover_times[cover_times.len() / 2]),
        ms(cover_times[cover_times.len() - 1])
    );
    let mut failures = 0;
    for node in &nodes {
        failures += node.handle.stats().await?.flood_send_failures;
    }
    println!("  flood frames not acknowledged: {failures}");
    // For scripts/bench.sh (see sim/src/bin/bench-report.rs).
    println!("RESULT overlay.nodes {n} nodes");
    println!("RESULT overlay.formed {:.1} s", formed.as_secs_f64());
    println!(
        "RESULT overlay.frames_per_flood {:.0} frames",
        frames_total as f64 / floods as f64
    );
    println!(
        "RESULT overlay.bytes_per_flood {:.0} bytes",
        bytes_total as f64 / floods as f64
    );
    println!("RESULT overlay.unacknowledged {failures} frames");
    println!(
        "RESULT overlay.cover_median {:.1} ms",
        ms(cover_times[cover_times.len() / 2])
    );
    for node in &nodes {
        node.handle.shutdown().await;
    }
    Ok(())
}

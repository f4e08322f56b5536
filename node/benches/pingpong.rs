//! Issue 14's benchmark: message ping-pong between two workers, from 8 B to
//! 64 MiB, beside OpenMPI on the same machine in the same run.
//!
//! - Zorilla between two nodes: two release `zorilla-node` processes of one
//!   core each on 127.0.0.1 (so the two workers land on different nodes),
//!   the `transfer pingpong` guest (examples/src/transfer.c); their
//!   messages take the rank data plane's direct TLS connection (AES-GCM),
//!   with the lanes the node opens by default on this machine (none on
//!   fewer than four cores).
//! - The same with `--rank-lanes 2`: two lanes beside the direct
//!   connection, which carry the chunks of striped large messages.
//! - The same with `--direct-ranks false`: the messages cross the
//!   overlay's libp2p connection (TCP, noise, yamux), as before the data
//!   plane.
//! - Zorilla between two workers of one node: one two-core node.
//! - OpenMPI 4 (`examples/native/pingpong-mpi.c`, built with `mpicc -O2`):
//!   `mpirun -np 2 --mca btl tcp,self` (TCP over loopback) and the default
//!   (shared memory), if `mpicc` and `mpirun` are installed.
//! - What noise's cipher alone allows on this machine: ChaCha20-Poly1305
//!   (the `chacha20poly1305` crate that libp2p-noise uses, through snow)
//!   sealing 65,519-byte noise frames on one core.
//!
//! Round trip: the mean over N round trips after one warm-up. Bandwidth:
//! size / (round trip / 2).
//!
//! Run: `cargo bench --workspace --bench pingpong`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{TestNode, stdout_of, wait_completed, wasm};
use zorilla_node::protocol::JobRequest;

/// `ZORILLA_BENCH_SHORT=1` (CI): fewer of everything, same code.
fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
}

/// (size, round trips) per measurement. `ZORILLA_BENCH_SIZES=8:200000,4194304:50`
/// measures only those (to profile one size for long enough).
fn sizes() -> Vec<(u64, u32)> {
    if let Ok(list) = std::env::var("ZORILLA_BENCH_SIZES") {
        return list
            .split(',')
            .map(|pair| {
                let (size, n) = pair
                    .split_once(':')
                    .expect("ZORILLA_BENCH_SIZES is size:round_trips,...");
                (
                    size.parse().expect("a size in bytes"),
                    n.parse().expect("a count"),
                )
            })
            .collect();
    }
    if short() {
        return vec![(8, 200), (1 << 20, 5)];
    }
    vec![
        (8, 5000),
        (1024, 2000),
        (64 << 10, 500),
        (256 << 10, 200),
        (1 << 20, 100),
        (4 << 20, 30),
        (16 << 20, 10),
        (64 << 20, 4),
    ]
}

/// Round trip in ns per size, from `PREFIX size=S iterations=N roundtrip_ns=T` lines.
fn parse(out: &str, prefix: &str) -> BTreeMap<u64, f64> {
    let mut got = BTreeMap::new();
    for line in out.lines() {
        let Some(rest) = line.strip_prefix(prefix) else {
            continue;
        };
        let field = |name: &str| {
            rest.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(|v| v.parse::<f64>().ok())
        };
        if let (Some(size), Some(rtt)) = (field("size="), field("roundtrip_ns=")) {
            got.insert(size as u64, rtt);
        }
    }
    got
}

async fn zorilla(node: &TestNode, sizes: &[(u64, u32)]) -> BTreeMap<u64, f64> {
    let mut args = vec!["pingpong".to_string()];
    for (size, n) in sizes {
        args.push(size.to_string());
        args.push(n.to_string());
    }
    let request = JobRequest {
        min_workers: 2,
        max_workers: 2,
        cores: 1,
        memory_mib: 200,
        lifetime_secs: 600,
        args,
        ..JobRequest::default()
    };
    let mut client = node.client().await;
    let job = client
        .submit(request, wasm("transfer"), vec![])
        .await
        .unwrap();
    wait_completed(&mut client, job, Duration::from_secs(600)).await;
    parse(&stdout_of(&client.logs(job).await.unwrap()), "transfer ")
}

/// OpenMPI's figures with `btl` (None: the default, shared memory), or
/// None if OpenMPI is not installed.
fn openmpi(binary: &Path, btl: Option<&str>, sizes: &[(u64, u32)]) -> Option<BTreeMap<u64, f64>> {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "-np", "2"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    if let Some(btl) = btl {
        cmd.args(["--mca", "btl", btl]);
    }
    cmd.arg(binary);
    for (size, n) in sizes {
        // OpenMPI's numbers vary more run to run at small sizes: more
        // round trips cost it nothing.
        cmd.arg(size.to_string()).arg((n * 4).to_string());
    }
    let out = cmd.output().ok()?;
    if !out.status.success() {
        eprintln!(
            "mpirun failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return None;
    }
    Some(parse(&String::from_utf8_lossy(&out.stdout), "mpi "))
}

fn build_mpi(dir: &Path) -> Option<std::path::PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/native/pingpong-mpi.c");
    let out = dir.join("pingpong-mpi");
    let status = Command::new("mpicc")
        .arg("-O2")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .ok()?;
    status.success().then_some(out)
}

/// MB/s (10^6 bytes) a core seals with ChaCha20-Poly1305 in noise frames.
fn cipher_mb_per_s() -> f64 {
    use chacha20poly1305::aead::{AeadInPlace, KeyInit};
    let cipher = chacha20poly1305::ChaCha20Poly1305::new(&[7u8; 32].into());
    let mut frame = vec![1u8; 65535 - 16];
    let total: usize = if short() { 16 << 20 } else { 512 << 20 };
    let start = Instant::now();
    let mut nonce = 0u64;
    let mut done = 0;
    while done < total {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&nonce.to_le_bytes());
        let tag = cipher
            .encrypt_in_place_detached(&n.into(), &[], &mut frame)
            .unwrap();
        std::hint::black_box(tag);
        nonce += 1;
        done += frame.len();
    }
    done as f64 / start.elapsed().as_secs_f64() / 1e6
}

fn human(size: u64) -> String {
    match size {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

fn mbps(size: u64, rtt_ns: f64) -> f64 {
    size as f64 / (rtt_ns / 2.0) * 1e3
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes = sizes();
    let dir = tempfile::tempdir().unwrap();
    let network = format!("bench-pingpong-{}", std::process::id());

    // Two nodes of one core: one worker on each.
    let a = TestNode::start(&dir.path().join("a"), &network, None, 1);
    let b = TestNode::start(&dir.path().join("b"), &network, Some(&a.listen), 1);
    let nodes = zorilla(&a, &sizes).await;
    drop((a, b));

    // The same with two lanes (whatever the default here).
    let lanes_args = ["--rank-lanes".to_string(), "2".to_string()];
    let (dir_a, dir_b) = (dir.path().join("na"), dir.path().join("nb"));
    let net = format!("{network}-n");
    let a = TestNode::start_with(&dir_a, &net, None, 1, "127.0.0.1", &lanes_args);
    let b = TestNode::start_with(&dir_b, &net, Some(&a.listen), 1, "127.0.0.1", &lanes_args);
    let lanes = zorilla(&a, &sizes).await;
    drop((a, b));

    // The same over libp2p (no direct connections).
    let off = ["--direct-ranks".to_string(), "false".to_string()];
    let (dir_a, dir_b) = (dir.path().join("la"), dir.path().join("lb"));
    let a = TestNode::start_with(&dir_a, &format!("{network}-l"), None, 1, "127.0.0.1", &off);
    let b = TestNode::start_with(
        &dir_b,
        &format!("{network}-l"),
        Some(&a.listen),
        1,
        "127.0.0.1",
        &off,
    );
    let libp2p = zorilla(&a, &sizes).await;
    drop((a, b));

    // One node of two cores: both workers on it.
    let c = TestNode::start(&dir.path().join("c"), &format!("{network}-c"), None, 2);
    let local = zorilla(&c, &sizes).await;
    drop(c);

    let mpi = build_mpi(dir.path());
    if mpi.is_none() {
        println!("OpenMPI (mpicc, mpirun) not found: Zorilla's figures only");
    }
    let mpi_tcp = mpi
        .as_deref()
        .and_then(|b| openmpi(b, Some("tcp,self"), &sizes));
    let mpi_shm = mpi.as_deref().and_then(|b| openmpi(b, None, &sizes));
    let cipher = cipher_mb_per_s();

    println!(
        "{:>8} | {:>22} | {:>22} | {:>22} | {:>22} | {:>9} | {:>22} | {:>22} | {:>9}",
        "size",
        "zorilla 2 nodes",
        "2 nodes, 2 lanes",
        "2 nodes over libp2p",
        "openmpi tcp",
        "ratio",
        "zorilla 1 node",
        "openmpi shm",
        "ratio"
    );
    let cell = |m: Option<&BTreeMap<u64, f64>>, size: u64| {
        m.and_then(|m| m.get(&size)).map_or("-".to_string(), |rtt| {
            format!("{:.1} µs {:.0} MB/s", rtt / 1e3, mbps(size, *rtt))
        })
    };
    let ratio = |z: Option<&BTreeMap<u64, f64>>, m: Option<&BTreeMap<u64, f64>>, size: u64| match (
        z.and_then(|z| z.get(&size)),
        m.and_then(|m| m.get(&size)),
    ) {
        (Some(z), Some(m)) => format!("{:.1}x", z / m),
        _ => "-".into(),
    };
    for (size, _) in &sizes {
        println!(
            "{:>8} | {:>22} | {:>22} | {:>22} | {:>22} | {:>9} | {:>22} | {:>22} | {:>9}",
            human(*size),
            cell(Some(&nodes), *size),
            cell(Some(&lanes), *size),
            cell(Some(&libp2p), *size),
            cell(mpi_tcp.as_ref(), *size),
            ratio(Some(&nodes), mpi_tcp.as_ref(), *size),
            cell(Some(&local), *size),
            cell(mpi_shm.as_ref(), *size),
            ratio(Some(&local), mpi_shm.as_ref(), *size),
        );
    }
    println!("noise cipher (ChaCha20-Poly1305, one core): {cipher:.0} MB/s");

    let rtt_us = |m: &BTreeMap<u64, f64>, s: u64| m.get(&s).map(|v| v / 1e3);
    if let Some(v) = rtt_us(&nodes, 8) {
        println!("RESULT pingpong.nodes_rtt_8 {v:.1} µs");
    }
    if let Some(v) = rtt_us(&libp2p, 8) {
        println!("RESULT pingpong.nodes_libp2p_rtt_8 {v:.1} µs");
    }
    if let Some(v) = rtt_us(&local, 8) {
        println!("RESULT pingpong.local_rtt_8 {v:.2} µs");
    }
    if let Some(m) = &mpi_tcp
        && let (Some(z), Some(o)) = (nodes.get(&8), m.get(&8))
    {
        println!("RESULT pingpong.mpi_tcp_rtt_8 {:.1} µs", o / 1e3);
        println!(
            "RESULT pingpong.nodes_rtt_8_vs_mpi {:.1} x OpenMPI TCP",
            z / o
        );
    }
    if let Some(m) = &mpi_shm
        && let (Some(z), Some(o)) = (local.get(&8), m.get(&8))
    {
        println!("RESULT pingpong.mpi_shm_rtt_8 {:.2} µs", o / 1e3);
        println!(
            "RESULT pingpong.local_rtt_8_vs_mpi {:.1} x OpenMPI shm",
            z / o
        );
    }
    let big = sizes
        .iter()
        .map(|(s, _)| *s)
        .filter(|s| *s >= 4 << 20)
        .min();
    let big = big.unwrap_or_else(|| sizes.last().map_or(8, |(s, _)| *s));
    // The bandwidth at `big` of the pair `name`, and as a share of the
    // baseline's in the same run.
    let bandwidth =
        |name: &str, times: &BTreeMap<u64, f64>, baseline: Option<(&BTreeMap<u64, f64>, &str)>| {
            let Some(z) = times.get(&big) else {
                return;
            };
            println!(
                "RESULT pingpong.{name}_bw_big {:.0} MB/s at {}",
                mbps(big, *z),
                human(big)
            );
            if let Some((m, what)) = baseline
                && let Some(o) = m.get(&big)
            {
                println!(
                    "RESULT pingpong.{name}_bw_big_vs_mpi {:.0} % of {what}",
                    o / z * 100.0
                );
            }
        };
    bandwidth(
        "nodes",
        &nodes,
        mpi_tcp.as_ref().map(|m| (m, "OpenMPI TCP")),
    );
    bandwidth("lanes", &lanes, None);
    bandwidth(
        "local",
        &local,
        mpi_shm.as_ref().map(|m| (m, "OpenMPI shm")),
    );
    println!("RESULT pingpong.cipher {cipher:.0} MB/s");
}

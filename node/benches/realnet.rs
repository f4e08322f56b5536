//! Issue 18's benchmark: the overlay on separate hosts (network namespaces
//! the benchmark makes; needs root), over TCP and over QUIC, and NAT
//! traversal on hosts behind NAT routers (nftables).
//!
//! - **Connection set-up**: an overlay node dials another on another host
//!   (one bridge, no emulated latency) until the peer is identified (the
//!   transport's handshake, then identify both ways): TCP + noise + yamux
//!   against QUIC (TLS 1.3 inside), fresh nodes each time. In process
//!   (`zorilla_overlay`), each node on a thread of its own inside its
//!   host's namespace.
//! - **Flood cover time**: N overlay nodes on N hosts of two sites (a
//!   router between them), all listening on one transport, joined through
//!   the first; once the neighbour sets are full, floods from varying
//!   origins; the time until the last node has it. The in-program latency
//!   emulation covers TCP only, so none is used here: both transports see
//!   the namespaces' own (sub-millisecond) latency.
//! - **NAT traversal**: the scenario of `tests/nat.rs` (a public node, two
//!   real nodes behind NAT routers of one kind, a 2-rank ping-pong job
//!   between them), run several times per NAT kind: the share of runs whose
//!   hole punch succeeded, the time from the relayed connection to the
//!   direct one, and the ranks' 1 MiB message throughput.
//!
//! Run: `cargo bench --workspace --bench realnet` (as root). A build
//! without the `quic` feature (on by default) measures TCP only, and says
//! so.
//! `ZORILLA_BENCH_SHORT=1`: 8 nodes, 5 floods, 5 set-ups, no NAT runs;
//! `ZORILLA_BENCH_NAT_RUNS=N`: N runs per NAT kind.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::natgrid::two_nodes_behind_nats_run_a_job;
use common::netns::{Hosts, Nat, in_netns};
use tokio::sync::{mpsc, oneshot};
use zorilla_core::advert::{FloodHeader, JobId};
use zorilla_core::flood::FloodId;
use zorilla_overlay::{Event, Multiaddr, Overlay, OverlayConfig, OverlayHandle, PeerId};

fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Tcp,
    Quic,
}

impl Transport {
    fn listen(self) -> Multiaddr {
        match self {
            Transport::Tcp => "/ip4/0.0.0.0/tcp/0".parse().unwrap(),
            Transport::Quic => "/ip4/0.0.0.0/udp/0/quic-v1".parse().unwrap(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Quic => "quic",
        }
    }
}

/// An overlay node running on a thread of its own inside a namespace.
struct Node {
    handle: OverlayHandle,
    /// Its address on its host.
    addr: Multiaddr,
    /// Flood deliveries, by flood.
    floods: Arc<Mutex<HashMap<FloodId, Instant>>>,
    /// Identified peers, with when.
    connected: mpsc::Receiver<(PeerId, Instant)>,
    _stop: oneshot::Sender<()>,
}

/// Starts an overlay node in namespace `netns` (host address `ip`).
async fn start(netns: &str, ip: std::net::Ipv4Addr, config: OverlayConfig) -> Node {
    let (tx, rx) = oneshot::channel();
    let (stop, stopped) = oneshot::channel::<()>();
    let netns = netns.to_string();
    std::thread::spawn(move || {
        in_netns(&netns, move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let (handle, mut events) = Overlay::start(config).await.unwrap();
                let floods: Arc<Mutex<HashMap<FloodId, Instant>>> = Arc::default();
                let (conn_tx, conn_rx) = mpsc::channel(1024);
                let sink = floods.clone();
                tokio::spawn(async move {
                    while let Some(event) = events.recv().await {
                        match event {
                            Event::Flood { id, .. } => {
                                sink.lock().unwrap().entry(id).or_insert_with(Instant::now);
                            }
                            Event::PeerConnected { peer } => {
                                let _ = conn_tx.try_send((peer, Instant::now()));
                            }
                            _ => {}
                        }
                    }
                });
                let _ = tx.send((handle, floods, conn_rx));
                let _ = stopped.await;
            });
        })
    });
    let (handle, floods, connected) = rx.await.expect("the node's thread failed");
    // 0.0.0.0's interfaces come one by one (loopback may be first).
    let began = Instant::now();
    let addr = loop {
        let addrs = handle.listen_addrs().await.unwrap();
        if let Some(a) = addrs
            .iter()
            .find(|a| a.to_string().starts_with(&format!("/ip4/{ip}/")))
        {
            break a.clone();
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "no address on {ip}: {addrs:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    Node {
        handle,
        addr,
        floods,
        connected,
        _stop: stop,
    }
}

fn config(network: &str, transport: Transport, bootstrap: Option<Multiaddr>) -> OverlayConfig {
    let mut config = OverlayConfig::local(network);
    config.listen = vec![transport.listen()];
    config.quic = transport == Transport::Quic;
    config.bootstrap = bootstrap.into_iter().collect();
    // Nothing to traverse on one bridge; UPnP would only ask around.
    config.nat.upnp = false;
    config
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Connection set-up times over `transport`: `runs` fresh pairs.
async fn setups(hosts: &Hosts, transport: Transport, runs: usize) -> Vec<Duration> {
    let network = format!("bench-setup-{}", std::process::id());
    let mut times = Vec::new();
    for _ in 0..runs {
        let (a, b) = (&hosts.hosts[0], &hosts.hosts[1]);
        let mut na = start(&a.netns, a.ip, config(&network, transport, None)).await;
        let nb = start(&b.netns, b.ip, config(&network, transport, None)).await;
        let began = Instant::now();
        na.handle.dial(nb.addr.clone()).await.unwrap();
        let peer = nb.handle.local_peer_id();
        let at = loop {
            let (p, at) = tokio::time::timeout(Duration::from_secs(20), na.connected.recv())
                .await
                .expect("no connection within 20 s")
                .unwrap();
            if p == peer {
                break at;
            }
        };
        times.push(at - began);
    }
    times
}

/// Flood cover times over `transport` on `hosts`, `floods` floods.
async fn cover(hosts: &Hosts, transport: Transport, floods: usize) -> Vec<Duration> {
    let network = format!("bench-cover-{}", std::process::id());
    let first = &hosts.hosts[0];
    let mut nodes = vec![start(&first.netns, first.ip, config(&network, transport, None)).await];
    let bootstrap = nodes[0].addr.clone();
    for h in &hosts.hosts[1..] {
        nodes.push(
            start(
                &h.netns,
                h.ip,
                config(&network, transport, Some(bootstrap.clone())),
            )
            .await,
        );
    }
    let n = nodes.len();
    let want = zorilla_core::neighbours::NeighbourConfig::default();
    let size = (want.near + want.far).min(n - 1);
    let began = Instant::now();
    loop {
        let mut full = 0;
        for node in &nodes {
            if node.handle.neighbours().await.unwrap().len() >= size {
                full += 1;
            }
        }
        if full == n {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "the overlay of {n} nodes over {transport:?} did not form in 120 s ({full} full)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut times = Vec::new();
    for i in 0..floods {
        let origin = (i * 5) % n;
        let id = FloodId {
            job: JobId(5000 + i as u64),
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
            .flood(id, header, vec![0xA5; 256])
            .await
            .unwrap();
        let last = loop {
            let got: Vec<Option<Instant>> = nodes
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != origin)
                .map(|(_, node)| node.floods.lock().unwrap().get(&id).copied())
                .collect();
            if got.iter().all(Option::is_some) {
                break got.into_iter().flatten().max().unwrap();
            }
            assert!(
                sent.elapsed() < Duration::from_secs(10),
                "flood {i} over {transport:?} reached {} of {}",
                got.iter().flatten().count(),
                n - 1
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        times.push(last - sent);
    }
    times
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    let (n, floods, setup_runs, mut nat_runs) = if short() {
        (8, 5, 5, 0)
    } else {
        (32, 20, 20, 5)
    };
    if let Some(runs) = std::env::var("ZORILLA_BENCH_NAT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        nat_runs = runs;
    }
    for transport in [Transport::Tcp, Transport::Quic] {
        if transport == Transport::Quic && !zorilla_overlay::QUIC_SUPPORTED {
            println!(
                "realnet: QUIC not measured: this build has no QUIC (it was built without the \
                 `quic` feature of zorilla-node, which is on by default)"
            );
            continue;
        }
        let hosts = Hosts::new(&[2]);
        let times = setups(&hosts, transport, setup_runs).await;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "RESULT realnet.setup_{} {:.2} ms (median of {setup_runs}; max {:.2} ms)",
            transport.name(),
            ms(median(times.clone())),
            ms(*times.iter().max().unwrap())
        );
        drop(hosts);
        let hosts = Hosts::new(&[n / 2, n - n / 2]);
        let times = cover(&hosts, transport, floods).await;
        println!(
            "RESULT realnet.cover_{} {:.2} ms ({n} nodes on 2 sites, median of {floods}; max {:.2} ms)",
            transport.name(),
            ms(median(times.clone())),
            ms(*times.iter().max().unwrap())
        );
    }
    for nat in [Nat::EndpointIndependent, Nat::Symmetric] {
        if nat_runs == 0 {
            break;
        }
        let mut direct = Vec::new();
        let mut throughput = Vec::new();
        for _ in 0..nat_runs {
            let outcome = two_nodes_behind_nats_run_a_job(nat).await;
            eprintln!("{nat:?}: {outcome:?}");
            if let Some(t) = outcome.time_to_direct {
                direct.push(t);
            }
            if let Some((size, ns)) = outcome.roundtrips.iter().find(|(s, _)| *s == 1 << 20) {
                // Both ways in one round trip.
                throughput.push(2.0 * *size as f64 / (*ns as f64 / 1e9) / 1e6);
            }
        }
        let name = match nat {
            Nat::EndpointIndependent => "eim",
            Nat::Symmetric => "symmetric",
        };
        println!(
            "RESULT realnet.punch_{name} {} of {nat_runs} hole punches succeeded",
            direct.len()
        );
        if !direct.is_empty() {
            println!(
                "RESULT realnet.direct_after_{name} {:.0} ms (median)",
                median(direct.clone()).as_secs_f64() * 1e3
            );
        }
        if !throughput.is_empty() {
            throughput.sort_by(f64::total_cmp);
            println!(
                "RESULT realnet.rank_mb_s_{name} {:.0} MB/s (1 MiB messages, median)",
                throughput[throughput.len() / 2]
            );
        }
    }
}

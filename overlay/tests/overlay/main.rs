//! Integration tests of the overlay: real nodes on 127.0.0.1 (port 0),
//! waiting for conditions with a deadline rather than sleeping. The mDNS
//! test, which cannot use loopback, runs in a private network namespace.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libp2p::{Multiaddr, PeerId};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use zorilla_core::advert::{FloodHeader, JobId};
use zorilla_core::flood::{FloodConfig, FloodId};
use zorilla_core::neighbours::{LinkKind, NeighbourConfig};
use zorilla_overlay::latency::{Site, SiteLink};
use zorilla_overlay::{
    Event, LatencyEmulation, Overlay, OverlayConfig, OverlayHandle, SharedTopology, Topology,
};

#[path = "../raw_peer/mod.rs"]
mod raw_peer;

mod closed;
mod formation;
mod hostile;
mod latency;
mod mdns;
mod repair;

use raw_peer::{Protocol, RawEvent, RawPeer};

type Graph = HashMap<PeerId, Vec<(PeerId, LinkKind)>>;

#[derive(Debug, Clone, Default)]
struct Seen {
    /// (flood, from, distance) of every delivery.
    floods: Vec<(FloodId, PeerId, Duration)>,
    connected: HashSet<PeerId>,
    /// (sender, its RTT as this node measured it) of every request.
    requests: Vec<(PeerId, Option<Duration>)>,
}

struct Node {
    handle: OverlayHandle,
    peer: PeerId,
    addr: Multiaddr,
    seen: Arc<Mutex<Seen>>,
}

impl Node {
    async fn start(config: OverlayConfig) -> Node {
        let (handle, mut events) = Overlay::start(config).await.expect("overlay starts");
        let addr = handle.listen_addrs().await.unwrap()[0].clone();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (seen2, handle2) = (seen.clone(), handle.clone());
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                match event {
                    Event::Flood {
                        id, from, distance, ..
                    } => seen2.lock().unwrap().floods.push((id, from, distance)),
                    Event::PeerConnected { peer } => {
                        seen2.lock().unwrap().connected.insert(peer);
                    }
                    Event::Request {
                        peer,
                        payload,
                        responder,
                        rtt,
                    } => {
                        seen2.lock().unwrap().requests.push((peer, rtt));
                        // Echo, reversed, so the test sees it went through us.
                        let answer = payload.into_iter().rev().collect();
                        let _ = handle2.respond(responder, answer).await;
                    }
                    _ => {}
                }
            }
        });
        Node {
            peer: handle.local_peer_id(),
            handle,
            addr,
            seen,
        }
    }

    fn deliveries(&self, id: FloodId) -> Vec<(PeerId, Duration)> {
        let seen = self.seen.lock().unwrap();
        seen.floods
            .iter()
            .filter(|(f, _, _)| *f == id)
            .map(|(_, from, d)| (*from, *d))
            .collect()
    }
}

fn network(test: &str) -> String {
    format!("test-{test}-{}", std::process::id())
}

fn config(network: &str, near: usize, far: usize) -> OverlayConfig {
    OverlayConfig {
        neighbours: NeighbourConfig {
            near,
            far,
            ..NeighbourConfig::default()
        },
        ..OverlayConfig::local(network)
    }
}

/// Starts `n` nodes; all but the first know only the first.
async fn start_grid(n: usize, make: impl Fn(usize) -> OverlayConfig) -> Vec<Node> {
    let first = Node::start(make(0)).await;
    let mut nodes = vec![first];
    for i in 1..n {
        let mut config = make(i);
        config.bootstrap = vec![nodes[0].addr.clone()];
        nodes.push(Node::start(config).await);
    }
    nodes
}

/// Polls `check` until it succeeds, failing the test with its last reason
/// after `timeout`.
async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let start = Instant::now();
    loop {
        match check().await {
            Ok(()) => return start.elapsed(),
            Err(why) if start.elapsed() > timeout => {
                panic!("{what}: not within {timeout:?}: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn graph(nodes: &[&Node]) -> Graph {
    let mut graph = Graph::new();
    for node in nodes {
        let neighbours = node.handle.neighbours().await.unwrap();
        graph.insert(
            node.peer,
            neighbours.into_iter().map(|n| (n.peer, n.kind)).collect(),
        );
    }
    graph
}

/// Nodes reachable from `origin` in at most `radius` hops, without origin.
fn within(
    graph: &Graph,
    origin: PeerId,
    radius: usize,
    allowed: &dyn Fn(&PeerId) -> bool,
) -> HashSet<PeerId> {
    let mut dist = HashMap::from([(origin, 0usize)]);
    let mut queue = VecDeque::from([origin]);
    while let Some(u) = queue.pop_front() {
        let d = dist[&u];
        if d == radius {
            continue;
        }
        for (v, _) in graph.get(&u).into_iter().flatten() {
            if allowed(v) && !dist.contains_key(v) {
                dist.insert(*v, d + 1);
                queue.push_back(*v);
            }
        }
    }
    dist.remove(&origin);
    dist.into_keys().collect()
}

/// Whether every node reaches every other along neighbour links.
fn strongly_connected(graph: &Graph) -> Result<(), String> {
    let all = |_: &PeerId| true;
    for origin in graph.keys() {
        let reached = within(graph, *origin, usize::MAX, &all);
        if reached.len() + 1 < graph.len() {
            return Err(format!(
                "{origin} reaches {} of {}",
                reached.len(),
                graph.len() - 1
            ));
        }
    }
    Ok(())
}

/// The links floods travel (neighbours both ways), as the nodes report
/// them.
async fn links(nodes: &[&Node]) -> Graph {
    let mut graph = Graph::new();
    for node in nodes {
        let links = node.handle.links().await.unwrap();
        graph.insert(
            node.peer,
            links
                .into_iter()
                .map(|(p, _)| (p, LinkKind::Near))
                .collect(),
        );
    }
    graph
}

/// Every node has `size` neighbours in the grid, every neighbour knows it
/// was chosen, and the flood graph is connected.
async fn full_and_connected(nodes: &[&Node], size: usize) -> Result<Graph, String> {
    let graph = graph(nodes).await;
    for (peer, neighbours) in &graph {
        if neighbours.len() != size {
            // What its connections looked like, for a failure that
            // cannot be reproduced at will.
            let (at, node) = nodes
                .iter()
                .enumerate()
                .find(|(_, n)| n.peer == *peer)
                .expect("the graph is of these nodes");
            let stats = node.handle.stats().await.unwrap();
            return Err(format!(
                "{peer} (node {at}) has {} neighbours; connections: {} open, {} made, \
                 {} incoming failed; {} requests sent, {} received",
                neighbours.len(),
                stats.open_connections,
                stats.connections,
                stats.failed_incoming,
                stats.requests_sent,
                stats.requests_received
            ));
        }
        if let Some((n, _)) = neighbours.iter().find(|(n, _)| !graph.contains_key(n)) {
            return Err(format!("{peer} has neighbour {n} outside the grid"));
        }
    }
    let links = links(nodes).await;
    for (peer, neighbours) in &graph {
        for (n, _) in neighbours {
            if !links[n].iter().any(|(p, _)| p == peer) {
                return Err(format!("{n} does not know that {peer} chose it"));
            }
        }
    }
    strongly_connected(&links)?;
    Ok(graph)
}

/// Waits until every flood frame sent has been received somewhere: the
/// flood is over.
async fn quiescent(nodes: &[&Node]) -> Result<(), String> {
    let (mut sent, mut received) = (0, 0);
    for node in nodes {
        let stats = node.handle.stats().await.unwrap();
        sent += stats.flood_frames_sent;
        received += stats.flood_frames_received + stats.flood_send_failures;
    }
    if received >= sent {
        Ok(())
    } else {
        Err(format!("{sent} frames sent, {received} received"))
    }
}

fn header(seq: u32, ttl: u8, budget: Option<Duration>) -> FloodHeader {
    FloodHeader {
        seq,
        ttl,
        latency_budget: budget,
        path_rtt: Duration::ZERO,
    }
}

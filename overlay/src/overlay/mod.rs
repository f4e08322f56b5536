//! The overlay node: [`Overlay::start`] builds the libp2p swarm and spawns
//! its event loop; the node drives it through the cloneable
//! [`OverlayHandle`] and receives [`Event`]s from a bounded channel (the
//! client-handle / event-loop split of rust-libp2p's file-sharing example).
//!
//! # How the event loop keeps the overlay
//!
//! The policy (which peers to keep, probe, close and ban, what to tell in
//! peer exchange) is the core's [`PeerKeeper`]: the event loop feeds it
//! libp2p's events and the time and executes its actions. In short:
//!
//! - **Measuring**: libp2p ping runs on every connection (interval and
//!   timeout from the config); each RTT sample of a peer whose identify said
//!   it is on our network goes to the keeper's
//!   [`NeighbourTable`](zorilla_core::neighbours::NeighbourTable). A failed
//!   ping closes the connection, and a neighbour that fails one is dropped
//!   and replaced at once.
//! - **Learning peers**: bootstrap addresses, mDNS, identify (every peer that
//!   connects), and peer exchange (an rpc request answered with some known
//!   peers and their addresses, sent to each new peer and periodically to a
//!   random neighbour). New peers are table candidates.
//! - **Probing**: unmeasured candidates are dialed (a few at a time) so ping
//!   can measure them; the probe ends after a few samples.
//! - **Neighbours**: on a timer, and at once when a neighbour is lost,
//!   `refresh()` recomputes the set; new neighbours are dialed and told so
//!   (`Link(true)` on the rpc protocol; `Link(false)` when dropped).
//! - **Links work both ways**: floods go to our neighbours *and* to the
//!   connected peers that chose us ([`OverlayHandle::links`]). The table's
//!   choice is one-sided (a node far from everyone may be nobody's
//!   neighbour), so a one-way flood graph need not be strongly connected;
//!   the two-way one is connected whenever the neighbour choices connect.
//! - **Closing**: a connection is closed by the side that **dialed** it when
//!   it needs it no more (not a neighbour, not probing, not chosen by the
//!   peer, and no longer getting to know it: identified, measured, peer
//!   exchange answered); connections the peer dialed are the peer's to
//!   close, so that we never cut short a peer's probe of us.
//! - **Failures**: a neighbour whose connection closes is redialed; if the
//!   dial fails, or the new link breaks again soon, it is removed from the
//!   table (and not tried again for a while) and the set is refreshed, so
//!   the overlay repairs itself within a ping timeout of a failure.
//! - **Connection limits**: at most `max_connections` are open (more are
//!   refused), and the node keeps
//!   [`kept_connections`](OverlayConfig::kept_connections) of them for
//!   itself (probes wait for a free one). The rest are introductions: a
//!   node that connects above that (say a new node whose only bootstrap
//!   peer this is) gets its peer exchange answered and is then let go, so
//!   that a full node still lets newcomers join through it. Surplus
//!   connections are closed least needed first, never a neighbour's; a
//!   node shed by a full neighbour that way replaces it. A new node that
//!   was refused dials its bootstrap peers again after 0.5 s, then 1, 2,
//!   4 and 5 s, randomised so that refused nodes do not return at once.
//! - **Misbehaviour**: malformed or oversized frames, and floods without
//!   TTL, are dropped with a log line and count against the sender; at the
//!   limit the peer is disconnected and refused for a while. So is a peer of
//!   another network, a moment later (so that it reads our identify and
//!   learns that we are foreign too), and it is remembered: never dialed
//!   again on our own initiative, however often mDNS announces it.
//!
//! Events are sent with back-pressure: the node must keep draining the event
//! receiver, or the overlay stalls (it never drops a delivered flood).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt;
use libp2p::identity::Keypair;
use libp2p::swarm::SwarmEvent;
use tokio::sync::mpsc;
use tokio::time::Instant;
use zorilla_core::Time;
use zorilla_core::flood::FloodRouter;
use zorilla_core::neighbours::keeper::PeerKeeper;

use crate::addrs::OwnAddrs;
use crate::config::OverlayConfig;
use crate::identity;
use crate::wire;

mod driver;
mod fresh_port;
mod handle;
mod swarm;
mod types;

use driver::Driver;
use swarm::{build_swarm, keeper_config, tcp_port};

pub use handle::OverlayHandle;
pub use types::{Event, KnownPeer, Neighbour, OverlayError, OverlayStats, RequestError, Responder};

/// Most behaviour events kept from before the event loop starts.
const MAX_EARLY_EVENTS: usize = 64;

/// Starts overlay nodes.
#[derive(Debug)]
pub struct Overlay {
    _private: (),
}

impl Overlay {
    /// Builds the node's swarm, starts listening, dials the bootstrap peers
    /// and spawns the event loop on the current tokio runtime. Returns once
    /// every listener has an address.
    pub async fn start(
        config: OverlayConfig,
    ) -> Result<(OverlayHandle, mpsc::Receiver<Event>), OverlayError> {
        config.validate().map_err(OverlayError::InvalidConfig)?;
        let key = match &config.state_dir {
            Some(dir) => identity::load_or_create(dir)?,
            None => Keypair::generate_ed25519(),
        };
        let local = key.public().to_peer_id();
        let mut swarm = build_swarm(&config, &key)?;

        let mut listen_addrs = Vec::new();
        let mut pending = HashSet::new();
        let mut listen = config.listen.clone();
        if config.quic {
            listen.extend(config.listen.iter().filter_map(quic_twin));
        }
        for addr in &listen {
            let id = swarm
                .listen_on(addr.clone())
                .map_err(|e| OverlayError::Listen {
                    addr: addr.clone(),
                    reason: e.to_string(),
                })?;
            pending.insert(id);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        // What the behaviours report meanwhile (mDNS may find peers before
        // the last listener is up, and reports each only once) is handed
        // to the event loop.
        let mut early = Vec::new();
        while !pending.is_empty() {
            let event = tokio::time::timeout_at(deadline, swarm.select_next_some())
                .await
                .map_err(|_| OverlayError::Setup("listeners did not start within 10 s".into()))?;
            match event {
                SwarmEvent::NewListenAddr {
                    listener_id,
                    address,
                } => {
                    pending.remove(&listener_id);
                    listen_addrs.push(address);
                }
                SwarmEvent::ListenerClosed { reason: Err(e), .. }
                | SwarmEvent::ListenerError { error: e, .. } => {
                    return Err(OverlayError::Setup(format!("listener failed: {e}")));
                }
                SwarmEvent::Behaviour(event) if early.len() < MAX_EARLY_EVENTS => {
                    early.push(event);
                }
                _ => {}
            }
        }
        if let Some(latency) = &config.latency {
            for addr in &listen_addrs {
                if let Some(port) = tcp_port(addr) {
                    latency.topology.assign_port(port, &latency.site);
                }
            }
        }
        for addr in &config.bootstrap {
            if let Err(e) = swarm.dial(addr.clone()) {
                tracing::warn!(%addr, error = %e, "cannot dial bootstrap peer");
            }
        }

        let direct = match direct_ip(&config) {
            Some(ip) => Some(
                crate::direct::DirectPlane::start(&key, ip, &config.network)
                    .await
                    .inspect(|plane| plane.set_lanes(config.rank_lanes))
                    .map_err(OverlayError::Setup)?,
            ),
            None => None,
        };
        let (command_tx, command_rx) = mpsc::channel(config.channel_capacity);
        let (event_tx, event_rx) = mpsc::channel(config.channel_capacity);
        let seed = config.seed.unwrap_or_else(|| {
            let bytes = local.to_bytes();
            bytes
                .iter()
                .rev()
                .take(8)
                .fold(0u64, |acc, b| acc << 8 | u64::from(*b))
        });
        let driver = Driver {
            keeper: PeerKeeper::new(keeper_config(&config), seed, Time::ZERO),
            router: FloodRouter::new(config.flood.clone()),
            identify_version: wire::identify_version(&config.network),
            local,
            swarm,
            commands: command_rx,
            events: event_tx,
            start: Instant::now(),
            own: {
                let mut own = OwnAddrs::new(config.nat.autonat);
                for addr in &listen_addrs {
                    own.listening(addr.clone());
                }
                own
            },
            listen_addrs,
            addrs: HashMap::new(),
            via: HashMap::new(),
            pending_requests: HashMap::new(),
            peer_exchanges: HashMap::new(),
            lookups: std::collections::BTreeMap::new(),
            stats: OverlayStats::default(),
            nat: driver::NatState::new(&config.nat),
            direct: direct.clone(),
            config,
        };
        tokio::spawn(driver.run(early));
        Ok((
            OverlayHandle {
                commands: command_tx,
                local_peer_id: local,
                signer: identity::PeerSigner::new(key.clone()),
                direct,
            },
            event_rx,
        ))
    }
}

/// Where the rank data plane listens: the IP address of the first TCP
/// listen address; none if the plane is off (see
/// [`OverlayConfig::direct_ranks`]).
fn direct_ip(config: &OverlayConfig) -> Option<std::net::IpAddr> {
    use libp2p::multiaddr::Protocol;
    if !config.direct_ranks || config.latency.is_some() {
        return None;
    }
    config.listen.iter().find_map(|addr| {
        let mut parts = addr.iter();
        let ip = match parts.next()? {
            Protocol::Ip4(ip) => std::net::IpAddr::V4(ip),
            Protocol::Ip6(ip) => std::net::IpAddr::V6(ip),
            _ => return None,
        };
        matches!(parts.next()?, Protocol::Tcp(_)).then_some(ip)
    })
}

/// The QUIC address beside TCP listen address `addr`: the same IP address,
/// UDP, a port chosen by the OS (the TCP port may be taken on UDP).
fn quic_twin(addr: &libp2p::Multiaddr) -> Option<libp2p::Multiaddr> {
    use libp2p::multiaddr::Protocol;
    let mut parts = addr.iter();
    let ip = parts.next()?;
    if !matches!(ip, Protocol::Ip4(_) | Protocol::Ip6(_)) {
        return None;
    }
    matches!(parts.next()?, Protocol::Tcp(_)).then(|| {
        libp2p::Multiaddr::empty()
            .with(ip)
            .with(Protocol::Udp(0))
            .with(Protocol::QuicV1)
    })
}

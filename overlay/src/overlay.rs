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
use libp2p::core::transport::Transport;
use libp2p::core::{ConnectedPoint, upgrade};
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::request_response::{
    self, InboundFailure, OutboundRequestId, ProtocolSupport, ResponseChannel,
};
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{ConnectionId, DialError, NetworkBehaviour, SwarmEvent};
use libp2p::{
    Multiaddr, PeerId, StreamProtocol, Swarm, allow_block_list, connection_limits, identify, mdns,
    noise, ping, yamux,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use zorilla_core::Time;
use zorilla_core::advert::FloodHeader;
use zorilla_core::flood::{DropReason, FloodId, FloodRouter, FloodStats, Verdict};
use zorilla_core::neighbours::LinkKind;
use zorilla_core::neighbours::keeper::{
    Action, DialFailure, DisconnectReason, KeeperConfig, PeerFacts, PeerKeeper,
};

use crate::config::OverlayConfig;
use crate::identity::{self, IdentityError};
use crate::latency::{Delay, MaybeDelayed, Route};
use crate::streams::{PeerStream, StreamError};
use crate::wire::{
    self, CborCodec, Checked, FloodAck, FloodFrame, PeerRecord, RpcRequest, RpcResponse,
};

/// Most behaviour events kept from before the event loop starts.
const MAX_EARLY_EVENTS: usize = 64;
/// Most addresses remembered per peer.
const MAX_ADDRS_PER_PEER: usize = 8;
/// Most peers in one peer-exchange answer.
const MAX_PEER_RECORDS: usize = 32;
/// How long the transport's handshake (noise, yamux) may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);
/// Connections nobody uses close after this long; the overlay closes the
/// ones it does not need itself, so this is only a safety net.
const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(3600);

/// A neighbour of this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbour {
    /// The peer.
    pub peer: PeerId,
    /// Near (one of the nearest) or far (a random long link).
    pub kind: LinkKind,
    /// The smoothed RTT.
    pub rtt: Duration,
}

/// A peer this node knows of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownPeer {
    /// The peer.
    pub peer: PeerId,
    /// The smoothed RTT, if measured.
    pub rtt: Option<Duration>,
    /// Whether it is a neighbour, and which kind.
    pub kind: Option<LinkKind>,
    /// Whether a connection to it is open now.
    pub connected: bool,
    /// Where it listens, as far as we know.
    pub addrs: Vec<Multiaddr>,
}

/// Counters of what the overlay did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OverlayStats {
    /// Flood frames sent (originated and forwarded copies).
    pub flood_frames_sent: u64,
    /// Bytes of those frames (CBOR, without transport overhead).
    pub flood_bytes_sent: u64,
    /// Flood frames received.
    pub flood_frames_received: u64,
    /// Flood frames that could not be delivered to the neighbour (the
    /// connection closed, the dial failed, no acknowledgement in time).
    pub flood_send_failures: u64,
    /// What the core's flood router did.
    pub router: FloodStats,
    /// Rpc requests this node sent (application and peer exchange).
    pub requests_sent: u64,
    /// Rpc requests this node received.
    pub requests_received: u64,
    /// Offences counted against peers (bad frames, floods without TTL).
    pub misbehaviour: u64,
    /// Peers disconnected and refused (misbehaviour or another network).
    pub bans: u64,
    /// Peers known to be of another network (remembered, up to a bound,
    /// and never dialed again on our own initiative).
    pub foreign_peers: u64,
    /// Connections established.
    pub connections: u64,
    /// Connections open now (never more than the configured
    /// `max_connections`).
    pub open_connections: u64,
    /// Incoming connections that failed before they were established
    /// (garbage, failed handshakes, refused peers).
    pub failed_incoming: u64,
}

/// What the overlay tells the node.
#[derive(Debug)]
pub enum Event {
    /// A flood reached this node for the first time.
    Flood {
        /// Which flood.
        id: FloodId,
        /// The node that started it.
        origin: PeerId,
        /// The header of the copy that arrived.
        header: FloodHeader,
        /// The application's payload.
        payload: Vec<u8>,
        /// The neighbour that sent the copy.
        from: PeerId,
        /// This node's estimated RTT to the origin (own measurement, or the
        /// RTT summed along the path).
        distance: Duration,
    },
    /// A peer sent an application request; answer it with
    /// [`OverlayHandle::respond`] (dropping the responder fails the request
    /// at the sender).
    Request {
        /// The sender.
        peer: PeerId,
        /// The request.
        payload: Vec<u8>,
        /// Where the answer goes.
        responder: Responder,
    },
    /// A peer of our network connected (and identified itself).
    PeerConnected {
        /// The peer.
        peer: PeerId,
    },
    /// The last connection to a peer closed.
    PeerLost {
        /// The peer.
        peer: PeerId,
    },
    /// The neighbour set changed.
    NeighboursChanged {
        /// New neighbours.
        added: Vec<PeerId>,
        /// Former neighbours.
        removed: Vec<PeerId>,
    },
    /// The node listens on a new address.
    Listening {
        /// The address.
        addr: Multiaddr,
    },
}

/// The answer slot of a received request.
#[derive(Debug)]
pub struct Responder {
    channel: ResponseChannel<RpcResponse>,
}

/// Errors of the overlay and of its handle.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    /// The configuration is invalid.
    #[error("invalid overlay configuration: {0}")]
    InvalidConfig(String),
    /// The identity could not be loaded or created.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The transport or a behaviour could not be set up.
    #[error("cannot set up the network: {0}")]
    Setup(String),
    /// Listening failed.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// The address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
    /// A dial could not be started.
    #[error("cannot dial {addr}: {reason}")]
    Dial {
        /// The address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
    /// A message is larger than the configured cap.
    #[error("message of {size} bytes exceeds the cap of {max} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The cap.
        max: usize,
    },
    /// The response could not be sent (the request timed out or the
    /// connection closed).
    #[error("response could not be sent; the requester is gone")]
    ResponseFailed,
    /// The overlay stopped.
    #[error("the overlay has stopped")]
    Stopped,
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The request is larger than the configured cap.
    #[error("request of {size} bytes exceeds the cap of {max} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The cap.
        max: usize,
    },
    /// Dialing, timeout, closed connection, refused or unsupported protocol.
    #[error("request to {peer} failed: {reason}")]
    Failed {
        /// The peer.
        peer: PeerId,
        /// Why.
        reason: String,
    },
    /// The peer answered with something other than an application answer.
    #[error("unexpected response from {0}")]
    UnexpectedResponse(PeerId),
    /// The overlay stopped.
    #[error("the overlay has stopped")]
    Stopped,
}

enum Command {
    Flood {
        id: FloodId,
        header: FloodHeader,
        payload: Vec<u8>,
        reply: oneshot::Sender<Result<usize, OverlayError>>,
    },
    Request {
        peer: PeerId,
        payload: Vec<u8>,
        reply: oneshot::Sender<Result<Vec<u8>, RequestError>>,
    },
    Respond {
        responder: Responder,
        payload: Vec<u8>,
        reply: oneshot::Sender<Result<(), OverlayError>>,
    },
    Dial {
        addr: Multiaddr,
        reply: oneshot::Sender<Result<(), OverlayError>>,
    },
    Neighbours(oneshot::Sender<Vec<Neighbour>>),
    Links(oneshot::Sender<Vec<(PeerId, Duration)>>),
    KnownPeers(oneshot::Sender<Vec<KnownPeer>>),
    ListenAddrs(oneshot::Sender<Vec<Multiaddr>>),
    Stats(oneshot::Sender<OverlayStats>),
    Misbehaved {
        peer: PeerId,
        reason: String,
    },
    OpenStream {
        peer: PeerId,
        reply: crate::streams::OpenReply,
    },
    AcceptStreams(mpsc::Sender<PeerStream>),
    Shutdown,
}

/// The node's handle on its overlay. Cheap to clone; the overlay stops when
/// [`shutdown`](Self::shutdown) is called or every handle is dropped.
#[derive(Debug, Clone)]
pub struct OverlayHandle {
    commands: mpsc::Sender<Command>,
    local_peer_id: PeerId,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Command")
    }
}

impl OverlayHandle {
    /// This node's peer id.
    pub fn local_peer_id(&self) -> PeerId {
        self.local_peer_id
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, OverlayError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .await
            .map_err(|_| OverlayError::Stopped)?;
        rx.await.map_err(|_| OverlayError::Stopped)
    }

    /// Starts flood `id` with `header` (its TTL is the radius; a latency
    /// budget bounds it further) carrying `payload` to the neighbours.
    /// Returns the number of copies sent.
    pub async fn flood(
        &self,
        id: FloodId,
        header: FloodHeader,
        payload: Vec<u8>,
    ) -> Result<usize, OverlayError> {
        self.call(|reply| Command::Flood {
            id,
            header,
            payload,
            reply,
        })
        .await?
    }

    /// Sends `payload` to `peer` (dialing it if needed) and waits for its
    /// answer.
    pub async fn request(&self, peer: PeerId, payload: Vec<u8>) -> Result<Vec<u8>, RequestError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Request {
                peer,
                payload,
                reply: tx,
            })
            .await
            .map_err(|_| RequestError::Stopped)?;
        rx.await.map_err(|_| RequestError::Stopped)?
    }

    /// Answers a request received as [`Event::Request`].
    pub async fn respond(
        &self,
        responder: Responder,
        payload: Vec<u8>,
    ) -> Result<(), OverlayError> {
        self.call(|reply| Command::Respond {
            responder,
            payload,
            reply,
        })
        .await?
    }

    /// Counts an offence of `peer` found by the application (a message
    /// that decoded but is out of range), as the overlay counts malformed
    /// frames: at the configured limit the peer is banned. Best effort: if
    /// the overlay's command queue is full, the report is dropped.
    pub fn report_misbehaviour(&self, peer: PeerId, reason: String) {
        let _ = self.commands.try_send(Command::Misbehaved { peer, reason });
    }

    /// Opens a stream of the ranks protocol to `peer` (dialing it if
    /// needed); see [`crate::streams`].
    pub async fn open_stream(&self, peer: PeerId) -> Result<PeerStream, StreamError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::OpenStream { peer, reply: tx })
            .await
            .map_err(|_| StreamError::Stopped)?;
        rx.await.map_err(|_| StreamError::Stopped)?
    }

    /// Routes the ranks streams peers open to this node into a queue of
    /// `capacity` (streams that find it full are dropped), replacing any
    /// earlier one; before the first call they are dropped.
    pub async fn accept_streams(
        &self,
        capacity: usize,
    ) -> Result<mpsc::Receiver<PeerStream>, OverlayError> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        self.commands
            .send(Command::AcceptStreams(tx))
            .await
            .map_err(|_| OverlayError::Stopped)?;
        Ok(rx)
    }

    /// Dials `addr` (e.g. a peer given on the command line); it joins the
    /// overlay's candidates once it identifies itself.
    pub async fn dial(&self, addr: Multiaddr) -> Result<(), OverlayError> {
        self.call(|reply| Command::Dial { addr, reply }).await?
    }

    /// The current neighbours, near ones first.
    pub async fn neighbours(&self) -> Result<Vec<Neighbour>, OverlayError> {
        self.call(Command::Neighbours).await
    }

    /// The peers floods are forwarded to, with their RTTs: our neighbours
    /// and the connected peers that chose us as their neighbour (links work
    /// both ways, which keeps the flood graph connected even when nobody
    /// chose some node as a neighbour).
    pub async fn links(&self) -> Result<Vec<(PeerId, Duration)>, OverlayError> {
        self.call(Command::Links).await
    }

    /// Every known peer with its RTT and state.
    pub async fn known_peers(&self) -> Result<Vec<KnownPeer>, OverlayError> {
        self.call(Command::KnownPeers).await
    }

    /// The addresses this node listens on.
    pub async fn listen_addrs(&self) -> Result<Vec<Multiaddr>, OverlayError> {
        self.call(Command::ListenAddrs).await
    }

    /// Counters of what the overlay did.
    pub async fn stats(&self) -> Result<OverlayStats, OverlayError> {
        self.call(Command::Stats).await
    }

    /// Stops the overlay: every connection closes.
    pub async fn shutdown(&self) {
        let _ = self.commands.send(Command::Shutdown).await;
    }
}

#[derive(NetworkBehaviour)]
struct Behaviour {
    limits: connection_limits::Behaviour,
    blocked: allow_block_list::Behaviour<allow_block_list::BlockedPeers>,
    identify: identify::Behaviour,
    ping: ping::Behaviour,
    mdns: Toggle<mdns::tokio::Behaviour>,
    flood: request_response::Behaviour<CborCodec<FloodFrame, FloodAck>>,
    rpc: request_response::Behaviour<CborCodec<RpcRequest, RpcResponse>>,
    streams: crate::streams::Behaviour,
}

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
        for addr in &config.listen {
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
            listen_addrs,
            addrs: HashMap::new(),
            pending_requests: HashMap::new(),
            peer_exchanges: HashMap::new(),
            stats: OverlayStats::default(),
            config,
        };
        tokio::spawn(driver.run(early));
        Ok((
            OverlayHandle {
                commands: command_tx,
                local_peer_id: local,
            },
            event_rx,
        ))
    }
}

/// The keeper's settings from the overlay's.
fn keeper_config(config: &OverlayConfig) -> KeeperConfig {
    KeeperConfig {
        neighbours: config.neighbours.clone(),
        ping_interval: config.ping_interval,
        ping_timeout: config.ping_timeout,
        handshake_timeout: HANDSHAKE_TIMEOUT,
        peer_exchange_interval: config.peer_exchange_interval,
        max_probes: config.max_probes,
        probe_samples: config.probe_samples,
        remeasure_after: config.remeasure_after,
        misbehaviour_limit: config.misbehaviour_limit,
        ban_duration: config.ban_duration,
        dead_retry_after: config.dead_retry_after,
        kept_connections: config.kept_connections(),
        bootstrap: !config.bootstrap.is_empty(),
    }
}

fn build_swarm(config: &OverlayConfig, key: &Keypair) -> Result<Swarm<Behaviour>, OverlayError> {
    let setup = |e: &dyn std::fmt::Display| OverlayError::Setup(e.to_string());
    let local = key.public().to_peer_id();
    let latency = config.latency.clone();
    let transport =
        libp2p::tcp::tokio::Transport::new(libp2p::tcp::Config::default().nodelay(true))
            .map(move |stream, endpoint| {
                // Only the dialer delays (see the latency module): it knows the
                // remote's listen port, hence its site.
                let delay = match (&latency, &endpoint) {
                    (Some(l), ConnectedPoint::Dialer { address, .. }) => {
                        l.topology.route_to(&l.site, address).map(|(remote, _)| {
                            Delay::Route(Route {
                                topology: l.topology.clone(),
                                local: l.site.clone(),
                                remote,
                            })
                        })
                    }
                    _ => None,
                };
                MaybeDelayed::new(stream, delay)
            })
            .upgrade(upgrade::Version::V1Lazy)
            .authenticate(noise::Config::new(key).map_err(|e| setup(&e))?)
            .multiplex(yamux::Config::default())
            .timeout(HANDSHAKE_TIMEOUT)
            .boxed();

    let network = &config.network;
    let protocol = |name: String| StreamProtocol::try_from_owned(name).map_err(|e| setup(&e));
    let rr_config = request_response::Config::default()
        .with_request_timeout(config.request_timeout)
        .with_max_concurrent_streams(wire::MAX_STREAMS_PER_CONNECTION);
    // One budget for the inbound requests of both protocols (wire's doc).
    let budget = wire::ReadBudget::new(
        wire::MAX_INBOUND_REQUEST_BYTES.max(config.max_message_size.saturating_mul(2)),
    );
    let mdns = if config.mdns {
        Some(
            mdns::tokio::Behaviour::new(
                mdns::Config {
                    query_interval: config.mdns_query_interval,
                    ..mdns::Config::default()
                },
                local,
            )
            .map_err(|e| setup(&e))?,
        )
    } else {
        None
    };
    let per_peer = 2;
    let behaviour = Behaviour {
        limits: connection_limits::Behaviour::new(
            connection_limits::ConnectionLimits::default()
                .with_max_established(Some(config.max_connections))
                .with_max_established_per_peer(Some(per_peer))
                .with_max_pending_incoming(Some(config.max_connections / 2 + 1)),
        ),
        blocked: allow_block_list::Behaviour::default(),
        identify: identify::Behaviour::new(
            identify::Config::new(wire::identify_version(network), key.public())
                .with_agent_version(format!("zorilla/{}", env!("CARGO_PKG_VERSION"))),
        ),
        ping: ping::Behaviour::new(
            ping::Config::new()
                .with_interval(config.ping_interval)
                .with_timeout(config.ping_timeout),
        ),
        mdns: Toggle::from(mdns),
        flood: request_response::Behaviour::with_codec(
            CborCodec::new(config.max_message_size, Some(budget.clone())),
            [(
                protocol(wire::flood_protocol(network))?,
                ProtocolSupport::Full,
            )],
            rr_config.clone(),
        ),
        rpc: request_response::Behaviour::with_codec(
            CborCodec::new(config.max_message_size, Some(budget)),
            [(
                protocol(wire::rpc_protocol(network))?,
                ProtocolSupport::Full,
            )],
            rr_config,
        ),
        streams: crate::streams::Behaviour::new(protocol(wire::ranks_protocol(network))?),
    };
    Ok(Swarm::new(
        transport,
        behaviour,
        local,
        libp2p::swarm::Config::with_tokio_executor()
            .with_idle_connection_timeout(IDLE_CONNECTION_TIMEOUT),
    ))
}

fn tcp_port(addr: &Multiaddr) -> Option<u16> {
    addr.iter().find_map(|p| match p {
        Protocol::Tcp(port) => Some(port),
        _ => None,
    })
}

/// Whether `addr` is worth remembering as a peer's listen address: TCP on a
/// concrete IP address.
fn dialable(addr: &Multiaddr) -> bool {
    let mut iter = addr.iter();
    let ip_ok = match iter.next() {
        Some(Protocol::Ip4(ip)) => !ip.is_unspecified(),
        Some(Protocol::Ip6(ip)) => !ip.is_unspecified(),
        Some(Protocol::Dns(_) | Protocol::Dns4(_) | Protocol::Dns6(_)) => true,
        _ => false,
    };
    ip_ok && matches!(iter.next(), Some(Protocol::Tcp(port)) if port != 0)
}

/// Where the answer to one of the node's requests goes.
type ReplySlot = oneshot::Sender<Result<Vec<u8>, RequestError>>;

/// What only the event loop knows about a peer, for the keeper.
struct Facts<'a> {
    addrs: &'a HashMap<PeerId, Vec<Multiaddr>>,
    pending_requests: &'a HashMap<OutboundRequestId, (PeerId, ReplySlot)>,
    streams: &'a crate::streams::Behaviour,
}

impl PeerFacts<PeerId> for Facts<'_> {
    fn busy(&self, peer: &PeerId) -> bool {
        self.pending_requests.values().any(|(p, _)| p == peer) || self.streams.in_use(peer)
    }

    fn dialable(&self, peer: &PeerId) -> bool {
        self.addrs.get(peer).is_some_and(|a| !a.is_empty())
    }
}

struct Driver {
    config: OverlayConfig,
    local: PeerId,
    identify_version: String,
    swarm: Swarm<Behaviour>,
    commands: mpsc::Receiver<Command>,
    events: mpsc::Sender<Event>,
    /// The peer-keeping policy.
    keeper: PeerKeeper<PeerId, ConnectionId>,
    router: FloodRouter<PeerId>,
    start: Instant,
    listen_addrs: Vec<Multiaddr>,
    /// Listen addresses of peers, for dialing; pruned to known peers.
    addrs: HashMap<PeerId, Vec<Multiaddr>>,
    pending_requests: HashMap<OutboundRequestId, (PeerId, ReplySlot)>,
    /// Our outstanding peer-exchange requests, with whom.
    peer_exchanges: HashMap<OutboundRequestId, PeerId>,
    stats: OverlayStats,
}

impl Driver {
    async fn run(mut self, early: Vec<BehaviourEvent>) {
        for event in early {
            self.on_behaviour_event(event).await;
        }
        let mut tick = tokio::time::interval(self.config.refresh_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let bootstrap_at = self.bootstrap_at();
            tokio::select! {
                command = self.commands.recv() => match command {
                    None | Some(Command::Shutdown) => break,
                    Some(Command::Misbehaved { peer, reason }) => self.strike(peer, &reason).await,
                    Some(command) => self.on_command(command),
                },
                event = self.swarm.select_next_some() => self.on_swarm_event(event).await,
                _ = tick.tick() => self.maintain().await,
                () = tokio::time::sleep_until(bootstrap_at.unwrap_or_else(Instant::now)),
                    if bootstrap_at.is_some() => {
                    let now = self.now();
                    self.keeper.bootstrap_retry(now);
                    self.execute().await;
                }
            }
        }
        tracing::debug!(peer = %self.local, "overlay stopped");
    }

    /// When to dial the bootstrap peers again: the keeper's time while the
    /// node is alone, and no dial is under way.
    fn bootstrap_at(&self) -> Option<Instant> {
        let pending = self
            .swarm
            .network_info()
            .connection_counters()
            .num_pending_outgoing();
        let at = self.keeper.bootstrap_due().filter(|_| pending == 0)?;
        Some(self.start + at)
    }

    /// Executes the keeper's actions.
    async fn execute(&mut self) {
        while let Some(action) = self.keeper.poll_action() {
            match action {
                Action::Dial(peer) => {
                    if !self.dial_peer(peer) {
                        let now = self.now();
                        self.keeper.dial_failed(&peer, DialFailure::NotStarted, now);
                    }
                }
                Action::DialBootstrap => {
                    for addr in self.config.bootstrap.clone() {
                        if let Err(e) = self.swarm.dial(addr.clone()) {
                            tracing::debug!(%addr, error = %e, "cannot dial bootstrap peer");
                        }
                    }
                }
                Action::Close(id) => {
                    self.swarm.close_connection(id);
                }
                Action::Disconnect { peer, reason } => {
                    match reason {
                        DisconnectReason::Silent => tracing::info!(
                            %peer,
                            "no ping answered for a ping interval and timeout; dropping the peer"
                        ),
                        DisconnectReason::NotIdentified => {
                            tracing::debug!(%peer, "peer did not identify itself; closing");
                        }
                    }
                    let _ = self.swarm.disconnect_peer_id(peer);
                }
                Action::Link { peer, on } => self.send_link(peer, on),
                Action::AskPeers(peer) => self.request_peers(peer),
                Action::Ban(peer) => {
                    self.stats.bans += 1;
                    self.swarm.behaviour_mut().blocked.block_peer(peer);
                    self.addrs.remove(&peer);
                }
                Action::Unban(peer) => {
                    self.swarm.behaviour_mut().blocked.unblock_peer(peer);
                }
                Action::Forgotten(peer) => self.router.peer_lost(&peer),
                Action::NeighboursChanged { added, removed } => {
                    tracing::debug!(
                        added = added.len(),
                        removed = removed.len(),
                        "neighbour set changed"
                    );
                    self.emit(Event::NeighboursChanged { added, removed }).await;
                }
            }
        }
    }

    /// The core's notion of now.
    fn now(&self) -> Time {
        self.start.elapsed()
    }

    async fn emit(&mut self, event: Event) {
        // Back-pressure rather than loss; a node that dropped its receiver
        // simply gets nothing.
        let _ = self.events.send(event).await;
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Flood {
                id,
                header,
                payload,
                reply,
            } => {
                let result = self.originate(id, header, payload);
                let _ = reply.send(result);
            }
            Command::Request {
                peer,
                payload,
                reply,
            } => {
                let size = payload.len();
                let max = self.config.max_message_size;
                // The frame adds a few bytes of CBOR around the payload.
                if size + 16 > max {
                    let _ = reply.send(Err(RequestError::TooLarge { size, max }));
                    return;
                }
                let addrs = self.addrs.get(&peer).cloned().unwrap_or_default();
                let id = self.swarm.behaviour_mut().rpc.send_request_with_addresses(
                    &peer,
                    Checked::Valid(RpcRequest::App(payload)),
                    addrs,
                );
                self.stats.requests_sent += 1;
                self.pending_requests.insert(id, (peer, reply));
                let now = self.now();
                self.keeper.app_traffic(peer, now);
            }
            Command::OpenStream { peer, reply } => {
                let addrs = self.addrs.get(&peer).cloned().unwrap_or_default();
                let now = self.now();
                self.keeper.app_traffic(peer, now);
                self.swarm.behaviour_mut().streams.open(peer, addrs, reply);
            }
            Command::AcceptStreams(tx) => self.swarm.behaviour_mut().streams.accept(tx),
            Command::Respond {
                responder,
                payload,
                reply,
            } => {
                let size = payload.len();
                let max = self.config.max_message_size;
                let result = if size + 16 > max {
                    Err(OverlayError::TooLarge { size, max })
                } else {
                    self.swarm
                        .behaviour_mut()
                        .rpc
                        .send_response(responder.channel, RpcResponse::App(payload))
                        .map_err(|_| OverlayError::ResponseFailed)
                };
                let _ = reply.send(result);
            }
            Command::Dial { addr, reply } => {
                let result = self
                    .swarm
                    .dial(addr.clone())
                    .map_err(|e| OverlayError::Dial {
                        addr,
                        reason: e.to_string(),
                    });
                let _ = reply.send(result);
            }
            Command::Neighbours(reply) => {
                let neighbours = self
                    .keeper
                    .table()
                    .neighbours()
                    .map(|(peer, kind, rtt)| Neighbour {
                        peer: *peer,
                        kind,
                        rtt,
                    })
                    .collect();
                let _ = reply.send(neighbours);
            }
            Command::Links(reply) => {
                let _ = reply.send(self.keeper.links());
            }
            Command::KnownPeers(reply) => {
                let table = self.keeper.table();
                let known = table
                    .known()
                    .map(|(peer, rtt)| KnownPeer {
                        peer: *peer,
                        rtt,
                        kind: table.kind(peer),
                        connected: self.swarm.is_connected(peer),
                        addrs: self.addrs.get(peer).cloned().unwrap_or_default(),
                    })
                    .collect();
                let _ = reply.send(known);
            }
            Command::ListenAddrs(reply) => {
                let _ = reply.send(self.listen_addrs.clone());
            }
            Command::Stats(reply) => {
                let open = self
                    .swarm
                    .network_info()
                    .connection_counters()
                    .num_established();
                let stats = OverlayStats {
                    router: self.router.stats(),
                    open_connections: u64::from(open),
                    foreign_peers: self.keeper.foreign_peers() as u64,
                    ..self.stats
                };
                let _ = reply.send(stats);
            }
            // Handled in the loop, which can await the ban.
            Command::Misbehaved { .. } | Command::Shutdown => {}
        }
    }

    fn originate(
        &mut self,
        id: FloodId,
        header: FloodHeader,
        payload: Vec<u8>,
    ) -> Result<usize, OverlayError> {
        let probe = FloodFrame {
            id,
            origin: self.local,
            header,
            payload,
        };
        let size = wire::encode(&probe).map_or(usize::MAX, |b| b.len());
        let max = self.config.max_message_size;
        if size > max {
            return Err(OverlayError::TooLarge { size, max });
        }
        let neighbours = self.keeper.links();
        let forward = self.router.originate(id, header, &neighbours);
        let copies = forward.len();
        self.send_copies(id, self.local, &probe.payload, forward);
        Ok(copies)
    }

    /// Tells `peer` whether it is our neighbour.
    fn send_link(&mut self, peer: PeerId, on: bool) {
        let addrs = self.addrs.get(&peer).cloned().unwrap_or_default();
        self.swarm.behaviour_mut().rpc.send_request_with_addresses(
            &peer,
            Checked::Valid(RpcRequest::Link(on)),
            addrs,
        );
        self.stats.requests_sent += 1;
    }

    fn send_copies(
        &mut self,
        id: FloodId,
        origin: PeerId,
        payload: &[u8],
        forward: Vec<(PeerId, FloodHeader)>,
    ) {
        for (peer, header) in forward {
            let frame = FloodFrame {
                id,
                origin,
                header,
                payload: payload.to_vec(),
            };
            self.stats.flood_frames_sent += 1;
            self.stats.flood_bytes_sent += wire::encode(&frame).map_or(0, |b| b.len() as u64);
            let addrs = self.addrs.get(&peer).cloned().unwrap_or_default();
            self.swarm
                .behaviour_mut()
                .flood
                .send_request_with_addresses(&peer, Checked::Valid(frame), addrs);
        }
    }

    async fn on_flood(&mut self, from: PeerId, frame: FloodFrame) {
        self.stats.flood_frames_received += 1;
        if !self.keeper.is_verified(&from) {
            tracing::debug!(%from, "flood from a peer not identified yet; dropped");
            return;
        }
        let direct = self.keeper.table().rtt(&frame.origin);
        let neighbours = self.keeper.links();
        let now = self.now();
        match self
            .router
            .receive(&from, frame.id, frame.header, direct, &neighbours, now)
        {
            Verdict::Deliver { forward, distance } => {
                self.send_copies(frame.id, frame.origin, &frame.payload, forward);
                self.emit(Event::Flood {
                    id: frame.id,
                    origin: frame.origin,
                    header: frame.header,
                    payload: frame.payload,
                    from,
                    distance,
                })
                .await;
            }
            Verdict::Reforward { forward } => {
                self.send_copies(frame.id, frame.origin, &frame.payload, forward);
            }
            Verdict::Drop(DropReason::NoTtl) => self.strike(from, "flood copy without TTL").await,
            Verdict::Drop(reason) => {
                tracing::trace!(%from, ?reason, id = ?frame.id, "flood copy dropped");
            }
        }
    }

    async fn on_swarm_event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        match event {
            SwarmEvent::NewListenAddr { address, .. } => {
                if let (Some(latency), Some(port)) = (&self.config.latency, tcp_port(&address)) {
                    latency.topology.assign_port(port, &latency.site);
                }
                if !self.listen_addrs.contains(&address) {
                    self.listen_addrs.push(address.clone());
                }
                self.emit(Event::Listening { addr: address }).await;
            }
            SwarmEvent::ExpiredListenAddr { address, .. } => {
                self.listen_addrs.retain(|a| *a != address);
            }
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                endpoint,
                ..
            } => {
                self.stats.connections += 1;
                if let ConnectedPoint::Dialer { address, .. } = &endpoint {
                    self.remember_addrs(peer_id, [address.clone()]);
                }
                let now = self.now();
                self.keeper
                    .connected(peer_id, connection_id, endpoint.is_dialer(), now);
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                connection_id,
                num_established,
                ..
            } => {
                let now = self.now();
                if self.keeper.disconnected(&peer_id, &connection_id, now) {
                    self.emit(Event::PeerLost { peer: peer_id }).await;
                }
                if num_established == 0 && !self.keeper.remembers(&peer_id) {
                    // The address book keeps only peers the keeper remembers.
                    self.addrs.remove(&peer_id);
                }
                self.execute().await;
            }
            SwarmEvent::OutgoingConnectionError { peer_id, error, .. } => match error {
                DialError::DialPeerConditionFalse(_) | DialError::Aborted => {}
                DialError::Denied { cause } => {
                    // We are full (a neighbour is dialed again at a tick).
                    tracing::debug!(?peer_id, %cause, "dial denied locally");
                    if let Some(peer) = peer_id {
                        let now = self.now();
                        self.keeper.dial_failed(&peer, DialFailure::Denied, now);
                    }
                }
                error => {
                    tracing::debug!(?peer_id, %error, "dial failed");
                    if let Some(peer) = peer_id {
                        let now = self.now();
                        self.keeper
                            .dial_failed(&peer, DialFailure::Unreachable, now);
                        self.execute().await;
                    }
                }
            },
            SwarmEvent::IncomingConnectionError {
                send_back_addr,
                error,
                ..
            } => {
                self.stats.failed_incoming += 1;
                tracing::debug!(%send_back_addr, %error, "incoming connection failed");
            }
            SwarmEvent::Behaviour(event) => self.on_behaviour_event(event).await,
            _ => {}
        }
    }

    async fn on_behaviour_event(&mut self, event: BehaviourEvent) {
        match event {
            BehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. }) => {
                self.on_identified(peer_id, info).await;
            }
            BehaviourEvent::Identify(_) => {}
            BehaviourEvent::Ping(ping::Event {
                peer,
                connection,
                result,
            }) => match result {
                Ok(rtt) => {
                    let now = self.now();
                    self.keeper.rtt(peer, rtt, now);
                }
                Err(error) => {
                    // A peer that does not answer pings is as good as dead
                    // (frozen, or cut off): replace it now rather than wait
                    // for TCP to notice.
                    tracing::info!(%peer, %error, "ping failed; dropping the peer");
                    let now = self.now();
                    self.keeper.ping_failed(peer, connection, now);
                    self.execute().await;
                }
            },
            BehaviourEvent::Mdns(mdns::Event::Discovered(found)) => {
                let mut learned = Vec::new();
                for (peer, addr) in found {
                    if peer == self.local || self.keeper.refused(&peer) {
                        continue;
                    }
                    self.remember_addrs(peer, [addr]);
                    learned.push(peer);
                }
                self.learned(learned).await;
            }
            BehaviourEvent::Mdns(mdns::Event::Expired(_)) => {}
            BehaviourEvent::Flood(event) => self.on_flood_event(event).await,
            BehaviourEvent::Rpc(event) => self.on_rpc_event(event).await,
            BehaviourEvent::Limits(never) => match never {},
            BehaviourEvent::Blocked(never) => match never {},
            BehaviourEvent::Streams(()) => {}
        }
    }

    async fn on_identified(&mut self, peer: PeerId, info: identify::Info) {
        if info.protocol_version != self.identify_version {
            tracing::warn!(
                %peer,
                theirs = %info.protocol_version,
                ours = %self.identify_version,
                "peer belongs to another network; refusing it"
            );
            // Both sides ask for the other's identify at once. Cut off at
            // once, the peer might not have read our answer yet: it would
            // never learn that we are foreign, and would dial us again
            // whenever mDNS showed us anew. So the keeper bans it only a
            // moment later; it cannot use our protocols meanwhile.
            let now = self.now();
            self.keeper.identified(peer, false, now);
            return;
        }
        let addrs: Vec<Multiaddr> = info.listen_addrs.into_iter().filter(dialable).collect();
        if !addrs.is_empty() {
            self.addrs.insert(peer, Vec::new());
            self.remember_addrs(peer, addrs);
        }
        let now = self.now();
        if self.keeper.identified(peer, true, now) {
            self.emit(Event::PeerConnected { peer }).await;
        }
        self.execute().await;
    }

    async fn on_flood_event(
        &mut self,
        event: request_response::Event<Checked<FloodFrame>, FloodAck>,
    ) {
        match event {
            request_response::Event::Message {
                peer,
                message:
                    request_response::Message::Request {
                        request, channel, ..
                    },
                ..
            } => {
                let _ = self
                    .swarm
                    .behaviour_mut()
                    .flood
                    .send_response(channel, FloodAck);
                match request {
                    Checked::Valid(frame) => self.on_flood(peer, frame).await,
                    Checked::Invalid(reason) => self.strike(peer, &reason).await,
                }
            }
            request_response::Event::Message { .. }
            | request_response::Event::ResponseSent { .. } => {}
            request_response::Event::OutboundFailure { peer, error, .. } => {
                self.stats.flood_send_failures += 1;
                tracing::debug!(%peer, %error, "flood copy not delivered");
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                self.on_inbound_failure(peer, error).await;
            }
        }
    }

    async fn on_rpc_event(
        &mut self,
        event: request_response::Event<Checked<RpcRequest>, RpcResponse>,
    ) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => {
                    self.stats.requests_received += 1;
                    match request {
                        // Dropping the channel tells the sender it failed.
                        Checked::Invalid(reason) => self.strike(peer, &reason).await,
                        Checked::Valid(RpcRequest::Link(on)) => {
                            // Not waiting for identify (it may still be on
                            // its way). Anyone who knows the network's name
                            // can speak this protocol, but a link only
                            // makes us forward floods to the peer.
                            self.keeper.link_requested(peer, on);
                            let _ = self
                                .swarm
                                .behaviour_mut()
                                .rpc
                                .send_response(channel, RpcResponse::Done);
                        }
                        Checked::Valid(RpcRequest::Peers) => {
                            let records = self.peer_records(&peer);
                            let _ = self
                                .swarm
                                .behaviour_mut()
                                .rpc
                                .send_response(channel, RpcResponse::Peers(records));
                        }
                        Checked::Valid(RpcRequest::App(payload)) => {
                            let now = self.now();
                            self.keeper.app_traffic(peer, now);
                            self.emit(Event::Request {
                                peer,
                                payload,
                                responder: Responder { channel },
                            })
                            .await;
                        }
                    }
                }
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some((peer, reply)) = self.pending_requests.remove(&request_id) {
                        let result = match response {
                            RpcResponse::App(payload) => Ok(payload),
                            RpcResponse::Peers(_) | RpcResponse::Done => {
                                Err(RequestError::UnexpectedResponse(peer))
                            }
                        };
                        let _ = reply.send(result);
                    } else if let Some(from) = self.peer_exchanges.remove(&request_id)
                        && self.keeper.exchange_ended(&from)
                        && let RpcResponse::Peers(records) = response
                    {
                        self.on_peer_records(records).await;
                    }
                }
            },
            request_response::Event::OutboundFailure {
                peer,
                request_id,
                error,
                ..
            } => {
                if let Some(from) = self.peer_exchanges.remove(&request_id) {
                    self.keeper.exchange_ended(&from);
                }
                // A response that does not decode is the responder's fault.
                if let request_response::OutboundFailure::Io(e) = &error
                    && e.kind() == std::io::ErrorKind::InvalidData
                {
                    self.strike(peer, &e.to_string()).await;
                }
                if let Some((_, reply)) = self.pending_requests.remove(&request_id) {
                    let _ = reply.send(Err(RequestError::Failed {
                        peer,
                        reason: error.to_string(),
                    }));
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                self.on_inbound_failure(peer, error).await;
            }
            request_response::Event::ResponseSent { peer, .. } => {
                // A newcomer that came in above our limit has what it came
                // for once it has our peer records.
                let now = self.now();
                let facts = Facts {
                    addrs: &self.addrs,
                    pending_requests: &self.pending_requests,
                    streams: &self.swarm.behaviour().streams,
                };
                self.keeper.peers_sent(&peer, now, &facts);
                self.execute().await;
            }
        }
    }

    async fn on_inbound_failure(&mut self, peer: PeerId, error: InboundFailure) {
        // Bad frames arrive as `Checked::Invalid`; what is left here
        // (timeouts, closed connections, omitted responses) is nobody's
        // misbehaviour.
        tracing::debug!(%peer, %error, "inbound request failed");
    }

    fn request_peers(&mut self, peer: PeerId) {
        let addrs = self.addrs.get(&peer).cloned().unwrap_or_default();
        let id = self.swarm.behaviour_mut().rpc.send_request_with_addresses(
            &peer,
            Checked::Valid(RpcRequest::Peers),
            addrs,
        );
        self.stats.requests_sent += 1;
        self.peer_exchanges.insert(id, peer);
    }

    /// Some peers for a peer exchange, in the keeper's order (neighbours
    /// first, then other connected peers, then other measured ones).
    fn peer_records(&mut self, asker: &PeerId) -> Vec<PeerRecord> {
        // All of them: only those with an address are sent.
        self.keeper
            .peers_requested(asker, usize::MAX)
            .into_iter()
            .filter_map(|peer| {
                let addrs = self.addrs.get(&peer)?.clone();
                Some(PeerRecord { peer, addrs })
            })
            .take(MAX_PEER_RECORDS)
            .collect()
    }

    /// The answer to our peer exchange from a peer of our network.
    async fn on_peer_records(&mut self, records: Vec<PeerRecord>) {
        let mut learned = Vec::new();
        for record in records.into_iter().take(MAX_PEER_RECORDS) {
            if record.peer == self.local || self.keeper.refused(&record.peer) {
                continue;
            }
            let addrs: Vec<Multiaddr> = record.addrs.into_iter().filter(dialable).collect();
            if addrs.is_empty() {
                continue;
            }
            if !self.addrs.contains_key(&record.peer) {
                self.remember_addrs(record.peer, addrs);
            }
            learned.push(record.peer);
        }
        self.learned(learned).await;
    }

    /// Peers learned of become the keeper's candidates (and probes start).
    async fn learned(&mut self, peers: Vec<PeerId>) {
        let now = self.now();
        let facts = Facts {
            addrs: &self.addrs,
            pending_requests: &self.pending_requests,
            streams: &self.swarm.behaviour().streams,
        };
        self.keeper.learned(peers, now, &facts);
        self.execute().await;
    }

    fn remember_addrs(&mut self, peer: PeerId, addrs: impl IntoIterator<Item = Multiaddr>) {
        let known = self.addrs.entry(peer).or_default();
        for addr in addrs {
            if dialable(&addr) && !known.contains(&addr) && known.len() < MAX_ADDRS_PER_PEER {
                known.push(addr);
            }
        }
    }

    /// Dials `peer` at its known addresses unless connected or dialing.
    /// Returns false if there is no address to dial.
    fn dial_peer(&mut self, peer: PeerId) -> bool {
        let Some(addrs) = self.addrs.get(&peer).filter(|a| !a.is_empty()).cloned() else {
            return false;
        };
        let opts = DialOpts::peer_id(peer)
            .addresses(addrs)
            .condition(PeerCondition::DisconnectedAndNotDialing)
            .build();
        match self.swarm.dial(opts) {
            Ok(()) => true,
            Err(DialError::DialPeerConditionFalse(_)) => true,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "cannot dial");
                false
            }
        }
    }

    /// Counts an offence against `peer`; at the limit it is banned.
    async fn strike(&mut self, peer: PeerId, reason: &str) {
        self.stats.misbehaviour += 1;
        let now = self.now();
        let offences = self.keeper.offence(peer, now);
        tracing::warn!(%peer, reason, offences = offences.count, "dropped a bad message");
        if offences.banned {
            tracing::warn!(%peer, "too many bad messages; disconnecting and refusing the peer");
        }
        self.execute().await;
    }

    /// The periodic work: the keeper's tick (expiries, probes, the
    /// neighbour set, closing unneeded connections, peer exchange), then
    /// the address book pruned to the peers the keeper remembers.
    async fn maintain(&mut self) {
        let now = self.now();
        let facts = Facts {
            addrs: &self.addrs,
            pending_requests: &self.pending_requests,
            streams: &self.swarm.behaviour().streams,
        };
        self.keeper.tick(now, &facts);
        self.execute().await;
        let keeper = &self.keeper;
        self.addrs.retain(|peer, _| keeper.remembers(peer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The core's default peer keeping (which the simulator runs) is the
    /// overlay's default.
    #[test]
    fn the_keepers_defaults_are_the_overlays() {
        assert_eq!(
            keeper_config(&OverlayConfig::default()),
            KeeperConfig::default()
        );
    }
}

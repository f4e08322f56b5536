//! The overlay node: [`Overlay::start`] builds the libp2p swarm and spawns
//! its event loop; the node drives it through the cloneable
//! [`OverlayHandle`] and receives [`Event`]s from a bounded channel (the
//! client-handle / event-loop split of rust-libp2p's file-sharing example).
//!
//! # How the event loop keeps the overlay
//!
//! - **Measuring**: libp2p ping runs on every connection (interval and
//!   timeout from the config); each RTT sample of a peer whose identify said
//!   it is on our network goes to the core's
//!   [`NeighbourTable`]. A failed
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

use std::collections::{HashMap, HashSet, VecDeque};
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
use rand::SeedableRng;
use rand::seq::IteratorRandom;
use rand_chacha::ChaCha8Rng as StdRng;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use zorilla_core::Time;
use zorilla_core::advert::FloodHeader;
use zorilla_core::flood::{DropReason, FloodId, FloodRouter, FloodStats, Verdict};
use zorilla_core::neighbours::{LinkKind, NeighbourTable};

use crate::config::OverlayConfig;
use crate::identity::{self, IdentityError};
use crate::latency::{Delay, MaybeDelayed, Route};
use crate::streams::{PeerStream, StreamError};
use crate::wire::{
    self, CborCodec, Checked, FloodAck, FloodFrame, PeerRecord, RpcRequest, RpcResponse,
};

/// Most peers of other networks remembered (see [`ForeignPeers`]).
const MAX_FOREIGN_PEERS: usize = 1024;
/// How long a connection to a peer of another network stays open once we
/// know it is one (see [`Driver::on_identified`]).
const FAREWELL_GRACE: Duration = Duration::from_secs(1);
/// Most behaviour events kept from before the event loop starts.
const MAX_EARLY_EVENTS: usize = 64;
/// Most addresses remembered per peer.
const MAX_ADDRS_PER_PEER: usize = 8;
/// Most peers in one peer-exchange answer.
const MAX_PEER_RECORDS: usize = 32;
/// A connection whose peer has not identified itself after this long is
/// closed.
const IDENTIFY_GRACE: Duration = Duration::from_secs(10);
/// While a node has no connection at all it dials its bootstrap peers
/// again, first after about this long (randomised by half either way, so
/// that nodes refused by a full bootstrap peer do not all come back at
/// once), then twice as long each time up to [`BOOTSTRAP_RETRY_MAX`].
const BOOTSTRAP_RETRY_MIN: Duration = Duration::from_millis(500);
/// The longest wait between two bootstrap attempts.
const BOOTSTRAP_RETRY_MAX: Duration = Duration::from_secs(5);
/// How long the transport's handshake (noise, yamux) may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);
/// A former neighbour's connection is kept this long after it stopped being
/// one, so that flood copies already sent on it arrive and a neighbour that
/// flaps in and out of the set (equal RTTs) is not redialed each time.
const LINGER: Duration = Duration::from_secs(10);
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
        let now = Instant::now();
        let driver = Driver {
            table: NeighbourTable::new(config.neighbours.clone(), seed),
            router: FloodRouter::new(config.flood.clone()),
            rng: StdRng::seed_from_u64(seed),
            identify_version: wire::identify_version(&config.network),
            local,
            swarm,
            commands: command_rx,
            events: event_tx,
            start: now,
            listen_addrs,
            addrs: HashMap::new(),
            connections: HashMap::new(),
            verified: HashSet::new(),
            chosen_by: HashSet::new(),
            former: HashMap::new(),
            app_traffic: HashMap::new(),
            samples: HashMap::new(),
            last_pong: HashMap::new(),
            probing: HashMap::new(),
            dead: HashMap::new(),
            banned: HashMap::new(),
            foreign: ForeignPeers::new(MAX_FOREIGN_PEERS),
            farewells: HashMap::new(),
            strikes: HashMap::new(),
            pending_requests: HashMap::new(),
            peer_exchanges: HashMap::new(),
            next_peer_exchange: now + config.peer_exchange_interval,
            next_bootstrap: now + BOOTSTRAP_RETRY_MIN,
            bootstrap_backoff: BOOTSTRAP_RETRY_MIN * 2,
            kept_connections: config.kept_connections(),
            introduced: HashSet::new(),
            redialed: HashMap::new(),
            unlinked: HashMap::new(),
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

/// Peers found to belong to another network (their identify said so),
/// oldest forgotten first beyond a capacity. They are never dialed on our
/// own initiative again: mDNS keeps announcing them (the nodes of another
/// grid on the same LAN), and a ban alone expires, after which each
/// announcement of a new address would be dialed and banned once more. A
/// peer that turns out to be of our network after all (it dialed us, or
/// was given explicitly) is taken off the list.
#[derive(Debug)]
struct ForeignPeers {
    order: VecDeque<PeerId>,
    set: HashSet<PeerId>,
    capacity: usize,
}

impl ForeignPeers {
    fn new(capacity: usize) -> Self {
        ForeignPeers {
            order: VecDeque::new(),
            set: HashSet::new(),
            capacity,
        }
    }

    fn insert(&mut self, peer: PeerId) {
        if self.set.insert(peer) {
            self.order.push_back(peer);
        }
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    fn remove(&mut self, peer: &PeerId) {
        if self.set.remove(peer) {
            self.order.retain(|p| p != peer);
        }
    }

    fn contains(&self, peer: &PeerId) -> bool {
        self.set.contains(peer)
    }
}

/// Where the answer to one of the node's requests goes.
type ReplySlot = oneshot::Sender<Result<Vec<u8>, RequestError>>;

struct Conn {
    id: ConnectionId,
    dialer: bool,
    since: Instant,
}

struct Driver {
    config: OverlayConfig,
    local: PeerId,
    identify_version: String,
    swarm: Swarm<Behaviour>,
    commands: mpsc::Receiver<Command>,
    events: mpsc::Sender<Event>,
    table: NeighbourTable<PeerId>,
    router: FloodRouter<PeerId>,
    rng: StdRng,
    start: Instant,
    listen_addrs: Vec<Multiaddr>,
    /// Listen addresses of peers, for dialing; pruned to known peers.
    addrs: HashMap<PeerId, Vec<Multiaddr>>,
    connections: HashMap<PeerId, Vec<Conn>>,
    /// Connected peers that identified themselves as of our network.
    verified: HashSet<PeerId>,
    /// Connected peers that chose us as their neighbour.
    chosen_by: HashSet<PeerId>,
    /// Former neighbours, with when they stopped being one (see [`LINGER`]).
    former: HashMap<PeerId, Instant>,
    /// When the application last sent a request to a peer or got one from
    /// it: such a connection is in use and is kept for [`LINGER`] (closing
    /// it would fail requests in flight on it, or about to be).
    app_traffic: HashMap<PeerId, Instant>,
    /// RTT samples since the peer's connection opened (for probes).
    samples: HashMap<PeerId, usize>,
    /// When each connected peer last answered a ping (or connected).
    last_pong: HashMap<PeerId, Instant>,
    /// Peers dialed to measure them, with when.
    probing: HashMap<PeerId, Instant>,
    /// Peers that could not be reached, with when.
    dead: HashMap<PeerId, Instant>,
    /// Refused peers, with since when.
    banned: HashMap<PeerId, Instant>,
    /// Peers of other networks.
    foreign: ForeignPeers,
    /// Peers of other networks to be cut off, with since when.
    farewells: HashMap<PeerId, Instant>,
    /// Offences per peer, with the time of the last one.
    strikes: HashMap<PeerId, (u32, Instant)>,
    pending_requests: HashMap<OutboundRequestId, (PeerId, ReplySlot)>,
    /// Our outstanding peer-exchange requests, with whom.
    peer_exchanges: HashMap<OutboundRequestId, PeerId>,
    next_peer_exchange: Instant,
    /// When the bootstrap peers are dialed again if we are still alone.
    next_bootstrap: Instant,
    /// The wait before the bootstrap attempt after that one.
    bootstrap_backoff: Duration,
    /// Connections the node keeps for itself; the rest of
    /// `max_connections` are introductions (see [`Driver::shed_surplus`]).
    kept_connections: usize,
    /// Peers we sent our peer records (answered their peer exchange) on
    /// their current connection.
    introduced: HashSet<PeerId>,
    /// Neighbours whose link broke and that we dialed again, with when.
    redialed: HashMap<PeerId, Instant>,
    /// Neighbours without a link, with since when `maintain` noticed.
    unlinked: HashMap<PeerId, Instant>,
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
            tokio::select! {
                command = self.commands.recv() => match command {
                    None | Some(Command::Shutdown) => break,
                    Some(Command::Misbehaved { peer, reason }) => self.strike(peer, &reason).await,
                    Some(command) => self.on_command(command),
                },
                event = self.swarm.select_next_some() => self.on_swarm_event(event).await,
                _ = tick.tick() => self.maintain().await,
                () = tokio::time::sleep_until(self.next_bootstrap), if self.alone() => {
                    self.retry_bootstrap();
                }
            }
        }
        tracing::debug!(peer = %self.local, "overlay stopped");
    }

    /// Whether we have bootstrap peers and no connection, nor a dial under
    /// way.
    fn alone(&self) -> bool {
        !self.config.bootstrap.is_empty()
            && self.connections.is_empty()
            && self
                .swarm
                .network_info()
                .connection_counters()
                .num_pending_outgoing()
                == 0
    }

    /// Dials the bootstrap peers again and schedules the next attempt (see
    /// [`BOOTSTRAP_RETRY_MIN`]).
    fn retry_bootstrap(&mut self) {
        let jitter = rand::Rng::random_range(&mut self.rng, 0.5..1.5);
        self.next_bootstrap = Instant::now() + self.bootstrap_backoff.mul_f64(jitter);
        self.bootstrap_backoff = (self.bootstrap_backoff * 2).min(BOOTSTRAP_RETRY_MAX);
        for addr in self.config.bootstrap.clone() {
            if let Err(e) = self.swarm.dial(addr.clone()) {
                tracing::debug!(%addr, error = %e, "cannot dial bootstrap peer");
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
                self.app_traffic.insert(peer, Instant::now());
            }
            Command::OpenStream { peer, reply } => {
                let addrs = self.addrs.get(&peer).cloned().unwrap_or_default();
                self.app_traffic.insert(peer, Instant::now());
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
                    .table
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
                let _ = reply.send(self.flood_links());
            }
            Command::KnownPeers(reply) => {
                let known = self
                    .table
                    .known()
                    .map(|(peer, rtt)| KnownPeer {
                        peer: *peer,
                        rtt,
                        kind: self.table.kind(peer),
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
                    foreign_peers: self.foreign.set.len() as u64,
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
        let neighbours = self.flood_links();
        let forward = self.router.originate(id, header, &neighbours);
        let copies = forward.len();
        self.send_copies(id, self.local, &probe.payload, forward);
        Ok(copies)
    }

    /// Our neighbours and the connected peers that chose us, with RTTs: the
    /// links floods travel.
    fn flood_links(&self) -> Vec<(PeerId, Duration)> {
        let mut links = self.table.neighbour_rtts();
        let mut chosen: Vec<(PeerId, Duration)> = self
            .chosen_by
            .iter()
            .filter(|p| self.table.kind(p).is_none())
            .filter_map(|p| self.table.rtt(p).map(|rtt| (*p, rtt)))
            .collect();
        // Peer order, so that the same state always gives the same copies.
        chosen.sort();
        links.extend(chosen);
        links
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
        if !self.verified.contains(&from) {
            tracing::debug!(%from, "flood from a peer not identified yet; dropped");
            return;
        }
        let direct = self.table.rtt(&frame.origin);
        let neighbours = self.flood_links();
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
                self.last_pong.insert(peer_id, Instant::now());
                self.connections.entry(peer_id).or_default().push(Conn {
                    id: connection_id,
                    dialer: endpoint.is_dialer(),
                    since: Instant::now(),
                });
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                connection_id,
                num_established,
                ..
            } => {
                if let Some(conns) = self.connections.get_mut(&peer_id) {
                    conns.retain(|c| c.id != connection_id);
                }
                if num_established == 0 {
                    self.connections.remove(&peer_id);
                    self.samples.remove(&peer_id);
                    self.last_pong.remove(&peer_id);
                    self.chosen_by.remove(&peer_id);
                    self.introduced.remove(&peer_id);
                    if self.verified.remove(&peer_id) {
                        self.emit(Event::PeerLost { peer: peer_id }).await;
                    }
                    // A neighbour's link broke: redial at once; if that
                    // fails, or the link breaks again soon after (a full
                    // peer sheds us), the peer is replaced.
                    if self.table.kind(&peer_id).is_some() {
                        let again = self
                            .redialed
                            .get(&peer_id)
                            .is_some_and(|at| at.elapsed() < LINGER);
                        if again || !self.dial_peer(peer_id) {
                            self.redialed.remove(&peer_id);
                            self.unreachable(peer_id).await;
                        } else {
                            self.redialed.insert(peer_id, Instant::now());
                        }
                    }
                }
            }
            SwarmEvent::OutgoingConnectionError { peer_id, error, .. } => match error {
                DialError::DialPeerConditionFalse(_) | DialError::Aborted => {}
                DialError::Denied { cause } => {
                    // We are full (a neighbour is dialed again by maintain).
                    tracing::debug!(?peer_id, %cause, "dial denied locally");
                    if let Some(peer) = peer_id {
                        self.probing.remove(&peer);
                    }
                }
                error => {
                    tracing::debug!(?peer_id, %error, "dial failed");
                    if let Some(peer) = peer_id
                        && !self.swarm.is_connected(&peer)
                    {
                        self.unreachable(peer).await;
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
                    if self.verified.contains(&peer) {
                        let now = self.now();
                        self.table.observe_rtt(peer, rtt, now);
                        *self.samples.entry(peer).or_default() += 1;
                        self.last_pong.insert(peer, Instant::now());
                    }
                }
                Err(error) => {
                    // A peer that does not answer pings is as good as dead
                    // (frozen, or cut off): replace it now rather than wait
                    // for TCP to notice.
                    tracing::info!(%peer, %error, "ping failed; dropping the peer");
                    self.swarm.close_connection(connection);
                    if self.table.kind(&peer).is_some() {
                        self.unreachable(peer).await;
                    }
                }
            },
            BehaviourEvent::Mdns(mdns::Event::Discovered(found)) => {
                for (peer, addr) in found {
                    if peer == self.local || self.refused(&peer) {
                        continue;
                    }
                    self.remember_addrs(peer, [addr]);
                    self.table.add_candidate(peer);
                }
                self.start_probes();
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
            self.foreign.insert(peer);
            // Both sides ask for the other's identify at once. Cut off at
            // once, the peer might not have read our answer yet: it would
            // never learn that we are foreign, and would dial us again
            // whenever mDNS showed us anew. So the connection is closed
            // (and the peer refused) only a moment later, by `maintain`;
            // it cannot use our protocols meanwhile.
            self.farewells.entry(peer).or_insert_with(Instant::now);
            return;
        }
        self.foreign.remove(&peer);
        self.dead.remove(&peer);
        let addrs: Vec<Multiaddr> = info.listen_addrs.into_iter().filter(dialable).collect();
        if !addrs.is_empty() {
            self.addrs.insert(peer, Vec::new());
            self.remember_addrs(peer, addrs);
        }
        if self.verified.insert(peer) {
            self.bootstrap_backoff = BOOTSTRAP_RETRY_MIN;
            self.table.add_candidate(peer);
            if self.table.kind(&peer).is_some() {
                self.send_link(peer, true);
            }
            self.emit(Event::PeerConnected { peer }).await;
            self.request_peers(peer);
        }
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
                            if on && self.swarm.is_connected(&peer) {
                                self.chosen_by.insert(peer);
                            } else {
                                self.chosen_by.remove(&peer);
                            }
                            let _ = self
                                .swarm
                                .behaviour_mut()
                                .rpc
                                .send_response(channel, RpcResponse::Done);
                        }
                        Checked::Valid(RpcRequest::Peers) => {
                            self.introduced.insert(peer);
                            let records = self.peer_records(&peer);
                            let _ = self
                                .swarm
                                .behaviour_mut()
                                .rpc
                                .send_response(channel, RpcResponse::Peers(records));
                        }
                        Checked::Valid(RpcRequest::App(payload)) => {
                            self.app_traffic.insert(peer, Instant::now());
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
                    } else if self.peer_exchanges.remove(&request_id).is_some()
                        && let RpcResponse::Peers(records) = response
                    {
                        self.on_peer_records(peer, records);
                    }
                }
            },
            request_response::Event::OutboundFailure {
                peer,
                request_id,
                error,
                ..
            } => {
                self.peer_exchanges.remove(&request_id);
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
                if self.introduced.contains(&peer) {
                    self.shed_surplus();
                }
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

    /// Some peers for a peer exchange: neighbours first, then other
    /// connected peers, then other measured ones.
    fn peer_records(&self, asker: &PeerId) -> Vec<PeerRecord> {
        let mut chosen: Vec<PeerId> = self.table.neighbours().map(|(p, _, _)| *p).collect();
        chosen.extend(self.verified.iter().copied());
        chosen.extend(
            self.table
                .known()
                .filter(|(_, rtt)| rtt.is_some())
                .map(|(p, _)| *p),
        );
        let mut seen = HashSet::new();
        chosen
            .into_iter()
            .filter(|p| p != asker && seen.insert(*p))
            .filter_map(|peer| {
                let addrs = self.addrs.get(&peer)?.clone();
                Some(PeerRecord { peer, addrs })
            })
            .take(MAX_PEER_RECORDS)
            .collect()
    }

    fn on_peer_records(&mut self, from: PeerId, records: Vec<PeerRecord>) {
        if !self.verified.contains(&from) {
            return;
        }
        for record in records.into_iter().take(MAX_PEER_RECORDS) {
            if record.peer == self.local || self.refused(&record.peer) {
                continue;
            }
            let addrs: Vec<Multiaddr> = record.addrs.into_iter().filter(dialable).collect();
            if addrs.is_empty() {
                continue;
            }
            if !self.addrs.contains_key(&record.peer) {
                self.remember_addrs(record.peer, addrs);
            }
            self.table.add_candidate(record.peer);
        }
        self.start_probes();
    }

    fn remember_addrs(&mut self, peer: PeerId, addrs: impl IntoIterator<Item = Multiaddr>) {
        let known = self.addrs.entry(peer).or_default();
        for addr in addrs {
            if dialable(&addr) && !known.contains(&addr) && known.len() < MAX_ADDRS_PER_PEER {
                known.push(addr);
            }
        }
    }

    /// Whether `peer` is not to be dialed now (nor learned of: mDNS, peer
    /// exchange).
    fn refused(&self, peer: &PeerId) -> bool {
        self.banned.contains_key(peer)
            || self.dead.contains_key(peer)
            || self.foreign.contains(peer)
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

    /// `peer` could not be reached: forget it, and replace it if it was a
    /// neighbour.
    async fn unreachable(&mut self, peer: PeerId) {
        self.probing.remove(&peer);
        self.chosen_by.remove(&peer);
        self.former.remove(&peer);
        let was_neighbour = self.table.kind(&peer).is_some();
        self.table.remove(&peer);
        self.router.peer_lost(&peer);
        self.dead.insert(peer, Instant::now());
        if was_neighbour {
            tracing::info!(%peer, "neighbour unreachable; replacing it");
            self.refresh().await;
        }
    }

    /// Counts an offence against `peer`; at the limit it is banned.
    async fn strike(&mut self, peer: PeerId, reason: &str) {
        self.stats.misbehaviour += 1;
        let now = Instant::now();
        let window = self.config.ban_duration;
        let entry = self.strikes.entry(peer).or_insert((0, now));
        if now.duration_since(entry.1) > window {
            *entry = (0, now);
        }
        entry.0 += 1;
        entry.1 = now;
        let count = entry.0;
        tracing::warn!(%peer, reason, offences = count, "dropped a bad message");
        if count >= self.config.misbehaviour_limit {
            tracing::warn!(%peer, "too many bad messages; disconnecting and refusing the peer");
            self.ban(peer).await;
        }
    }

    /// Disconnects `peer` and refuses it for the ban duration.
    async fn ban(&mut self, peer: PeerId) {
        self.stats.bans += 1;
        self.banned.insert(peer, Instant::now());
        self.strikes.remove(&peer);
        self.swarm.behaviour_mut().blocked.block_peer(peer);
        self.probing.remove(&peer);
        self.chosen_by.remove(&peer);
        self.addrs.remove(&peer);
        let was_neighbour = self.table.kind(&peer).is_some();
        self.table.remove(&peer);
        self.router.peer_lost(&peer);
        if was_neighbour {
            self.refresh().await;
        }
    }

    /// Recomputes the neighbour set and opens links to new neighbours.
    async fn refresh(&mut self) {
        let changes = self.table.refresh();
        if changes.added.is_empty() && changes.removed.is_empty() {
            return;
        }
        tracing::debug!(
            added = changes.added.len(),
            removed = changes.removed.len(),
            "neighbour set changed"
        );
        for peer in &changes.added {
            if self.verified.contains(peer) {
                self.send_link(*peer, true);
            } else if !self.swarm.is_connected(peer) {
                // The link is announced once the peer has identified itself.
                self.dial_peer(*peer);
            }
        }
        let now = Instant::now();
        for peer in &changes.added {
            self.former.remove(peer);
        }
        for peer in &changes.removed {
            if self.verified.contains(peer) {
                self.send_link(*peer, false);
            }
            // Closed by `maintain` once the linger time is over.
            self.former.insert(*peer, now);
        }
        self.emit(Event::NeighboursChanged {
            added: changes.added,
            removed: changes.removed,
        })
        .await;
    }

    /// Closes the connections we dialed to `peer` if we need it neither as
    /// a neighbour nor for a probe. Connections it dialed are its business.
    /// A peer that has not identified itself yet is left alone (`maintain`
    /// closes it if it never does); so is one not measured yet or whose
    /// answer to our peer exchange is outstanding: closing a bootstrap
    /// connection before either would leave a new node knowing nobody, to
    /// try again only a bootstrap retry later.
    fn close_if_unneeded(&mut self, peer: PeerId) {
        let lingering = self
            .former
            .get(&peer)
            .is_some_and(|since| since.elapsed() < LINGER)
            || self
                .app_traffic
                .get(&peer)
                .is_some_and(|since| since.elapsed() < LINGER)
            || self.pending_requests.values().any(|(p, _)| *p == peer)
            || self.swarm.behaviour().streams.in_use(&peer);
        let getting_to_know = !self.verified.contains(&peer)
            || self.table.rtt(&peer).is_none()
            || self.peer_exchanges.values().any(|p| *p == peer);
        if getting_to_know
            || self.table.kind(&peer).is_some()
            || self.probing.contains_key(&peer)
            || self.chosen_by.contains(&peer)
            || lingering
        {
            return;
        }
        let ours: Vec<ConnectionId> = self
            .connections
            .get(&peer)
            .map(|conns| conns.iter().filter(|c| c.dialer).map(|c| c.id).collect())
            .unwrap_or_default();
        for id in ours {
            self.swarm.close_connection(id);
        }
    }

    /// Connections open now.
    fn open_connections(&self) -> usize {
        self.swarm
            .network_info()
            .connection_counters()
            .num_established() as usize
    }

    /// How many more connections the node may open for itself (probes)
    /// without eating into the introduction slots.
    fn free_connections(&self) -> usize {
        self.kept_connections
            .saturating_sub(self.open_connections())
    }

    /// Above [`OverlayConfig::kept_connections`], connections are
    /// introductions: a node that could only reach us (a new node whose
    /// one bootstrap peer we are) gets in, gets our peer records, and is
    /// let go, so that a full node still lets newcomers join through it
    /// instead of refusing them until someone leaves. Closes the surplus,
    /// least needed first: never a neighbour's, a probe's or one with
    /// application requests under way, nor one whose peer has not had our
    /// peer records yet (unless it has been connected for
    /// [`IDENTIFY_GRACE`]); peers that chose us as their neighbour go
    /// last, the newest connections first.
    fn shed_surplus(&mut self) {
        let surplus = self
            .open_connections()
            .saturating_sub(self.kept_connections);
        if surplus == 0 {
            return;
        }
        let mut sheddable: Vec<(bool, Instant, ConnectionId, PeerId)> = self
            .connections
            .iter()
            .filter(|(peer, _)| {
                self.table.kind(peer).is_none()
                    && !self.probing.contains_key(*peer)
                    && !self.pending_requests.values().any(|(p, _)| p == *peer)
                    && !self.swarm.behaviour().streams.in_use(peer)
                    && self
                        .app_traffic
                        .get(*peer)
                        .is_none_or(|since| since.elapsed() >= LINGER)
            })
            .flat_map(|(peer, conns)| conns.iter().map(move |c| (*peer, c)))
            .filter(|(peer, c)| {
                self.introduced.contains(peer) || c.since.elapsed() >= IDENTIFY_GRACE
            })
            .map(|(peer, c)| (self.chosen_by.contains(&peer), c.since, c.id, peer))
            .collect();
        sheddable.sort_by_key(|(chooser, since, _, _)| (*chooser, std::cmp::Reverse(*since)));
        for (_, _, id, peer) in sheddable.into_iter().take(surplus) {
            tracing::debug!(%peer, "connection above the kept limit; closing it");
            self.swarm.close_connection(id);
        }
    }

    /// Dials unmeasured candidates, a few at a time, so ping can measure
    /// them.
    fn start_probes(&mut self) {
        let budget = self
            .config
            .max_probes
            .saturating_sub(self.probing.len())
            .min(self.free_connections());
        if budget == 0 {
            return;
        }
        let candidates: Vec<PeerId> = self
            .table
            .unmeasured()
            .filter(|p| {
                !self.probing.contains_key(*p)
                    && !self.swarm.is_connected(p)
                    && !self.refused(p)
                    && self.addrs.contains_key(*p)
            })
            .copied()
            .collect();
        let candidates = candidates
            .into_iter()
            .choose_multiple(&mut self.rng, budget);
        for peer in candidates {
            if self.dial_peer(peer) {
                self.probing.insert(peer, Instant::now());
            }
        }
    }

    /// The periodic work: expiries, probes, refresh, closing unneeded
    /// connections, peer exchange, bootstrap.
    async fn maintain(&mut self) {
        let now = Instant::now();
        let ban = self.config.ban_duration;
        let expired: Vec<PeerId> = self
            .banned
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= ban)
            .map(|(p, _)| *p)
            .collect();
        for peer in expired {
            self.banned.remove(&peer);
            self.swarm.behaviour_mut().blocked.unblock_peer(peer);
        }
        let farewells: Vec<PeerId> = self
            .farewells
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= FAREWELL_GRACE)
            .map(|(p, _)| *p)
            .collect();
        for peer in farewells {
            self.farewells.remove(&peer);
            self.ban(peer).await;
        }
        self.former
            .retain(|_, since| now.duration_since(*since) < LINGER);
        self.app_traffic
            .retain(|_, since| now.duration_since(*since) < LINGER);
        self.redialed
            .retain(|_, since| now.duration_since(*since) < LINGER);
        let retry = self.config.dead_retry_after;
        self.dead
            .retain(|_, since| now.duration_since(*since) < retry);

        // End probes that measured enough, or that took too long.
        let probe_deadline = self.config.ping_interval * (self.config.probe_samples as u32 + 1)
            + self.config.ping_timeout
            + HANDSHAKE_TIMEOUT / 4;
        let ended: Vec<PeerId> = self
            .probing
            .iter()
            .filter(|(peer, since)| {
                self.samples.get(*peer).copied().unwrap_or(0) >= self.config.probe_samples
                    || now.duration_since(**since) > probe_deadline
            })
            .map(|(p, _)| *p)
            .collect();
        for peer in ended {
            self.probing.remove(&peer);
            // Connected but not measured yet (a slow identify) is not dead.
            if self.table.rtt(&peer).is_none() && !self.swarm.is_connected(&peer) {
                self.unreachable(peer).await;
            }
        }

        self.refresh().await;

        // Keep a link to every neighbour: a dial refused for want of a free
        // connection (all taken, some by newcomers being introduced) is
        // tried again here. A neighbour we cannot dial at all, or still
        // have no link to after a ping interval and timeout (a dial stalled
        // in its handshake would otherwise keep it for the whole handshake
        // timeout, unwatched by ping), is replaced.
        let link_deadline = self.config.ping_interval + self.config.ping_timeout;
        let unlinked: Vec<PeerId> = self
            .table
            .neighbours()
            .map(|(p, _, _)| *p)
            .filter(|p| !self.swarm.is_connected(p))
            .collect();
        self.unlinked.retain(|p, _| unlinked.contains(p));
        for peer in unlinked {
            let since = *self.unlinked.entry(peer).or_insert(now);
            if now.duration_since(since) > link_deadline || !self.dial_peer(peer) {
                tracing::info!(%peer, "no link to the neighbour; replacing it");
                self.unlinked.remove(&peer);
                self.unreachable(peer).await;
            }
        }

        // A peer that has not answered a ping for an interval and a timeout
        // is dead or cut off. libp2p ping reports only the second failure in
        // a row, and opening the stream for it waits for a substream timeout
        // (10 s), so this is what notices a silent peer within seconds.
        let silent_after = self.config.ping_interval + self.config.ping_timeout;
        let silent: Vec<PeerId> = self
            .last_pong
            .iter()
            .filter(|(_, at)| now.duration_since(**at) > silent_after)
            .map(|(p, _)| *p)
            .collect();
        for peer in silent {
            tracing::info!(%peer, "no ping answered for {silent_after:?}; dropping the peer");
            self.last_pong.remove(&peer);
            let _ = self.swarm.disconnect_peer_id(peer);
            if self.table.kind(&peer).is_some() {
                self.unreachable(peer).await;
            }
        }

        // Close what nobody needs: links we dialed to non-neighbours, and
        // connections of peers that never identified themselves.
        let connected: Vec<PeerId> = self.connections.keys().copied().collect();
        for peer in connected {
            let stale = !self.verified.contains(&peer)
                && self.connections.get(&peer).is_some_and(|conns| {
                    conns
                        .iter()
                        .all(|c| now.duration_since(c.since) > IDENTIFY_GRACE)
                });
            if stale {
                let _ = self.swarm.disconnect_peer_id(peer);
            } else {
                self.close_if_unneeded(peer);
            }
        }

        self.shed_surplus();
        self.start_probes();
        // Measure again a known peer whose measurement is old, so that the
        // table does not live on stale RTTs.
        if self.probing.len() < self.config.max_probes && self.free_connections() > 0 {
            let core_now = self.now();
            let stale = self
                .table
                .known()
                .filter(|(peer, rtt)| {
                    rtt.is_some()
                        && self.table.kind(peer).is_none()
                        && !self.swarm.is_connected(peer)
                        && self.table.last_measured(peer).is_some_and(|t| {
                            core_now.saturating_sub(t) > self.config.remeasure_after
                        })
                })
                .map(|(p, _)| *p)
                .next();
            if let Some(peer) = stale
                && self.dial_peer(peer)
            {
                self.probing.insert(peer, now);
                self.samples.remove(&peer);
            }
        }

        if now >= self.next_peer_exchange {
            self.next_peer_exchange = now + self.config.peer_exchange_interval;
            let partner = self
                .table
                .neighbours()
                .map(|(p, _, _)| *p)
                .filter(|p| self.verified.contains(p))
                .choose(&mut self.rng)
                .or_else(|| self.verified.iter().copied().choose(&mut self.rng));
            if let Some(peer) = partner {
                self.request_peers(peer);
            }
            // Announce our links again, in case an announcement was lost
            // with a connection that closed while it was under way.
            let neighbours: Vec<PeerId> = self
                .table
                .neighbours()
                .map(|(p, _, _)| *p)
                .filter(|p| self.verified.contains(p))
                .collect();
            for peer in neighbours {
                self.send_link(peer, true);
            }
        }

        // Keep the address book to peers we still know or are connected to.
        let known: HashSet<PeerId> = self.table.known().map(|(p, _)| *p).collect();
        let connections = &self.connections;
        self.addrs
            .retain(|peer, _| known.contains(peer) || connections.contains_key(peer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_peers_are_a_bounded_set_oldest_forgotten_first() {
        let peers: Vec<PeerId> = (0..5).map(|_| PeerId::random()).collect();
        let mut foreign = ForeignPeers::new(3);
        for peer in &peers[..3] {
            foreign.insert(*peer);
        }
        // Inserting a known peer again changes nothing.
        foreign.insert(peers[0]);
        assert!(peers[..3].iter().all(|p| foreign.contains(p)));
        foreign.insert(peers[3]);
        assert!(!foreign.contains(&peers[0]), "the oldest is forgotten");
        assert!(peers[1..4].iter().all(|p| foreign.contains(p)));
        foreign.remove(&peers[2]);
        assert!(!foreign.contains(&peers[2]));
        foreign.insert(peers[4]);
        assert!([1, 3, 4].iter().all(|&i| foreign.contains(&peers[i])));
        assert_eq!((foreign.order.len(), foreign.set.len()), (3, 3));
    }
}

//! Long-lived raw streams between nodes: the `/zorilla/<network>/ranks/5`
//! protocol that carries the messages between the workers of jobs.
//!
//! The overlay only opens and accepts the streams and hands them out
//! ([`OverlayHandle::open_stream`](crate::OverlayHandle::open_stream) and
//! [`OverlayHandle::accept_streams`](crate::OverlayHandle::accept_streams));
//! the node reads and writes them in its own tasks, so that messages never
//! pass through the overlay's (or the node's) event loop. What flows on a
//! stream is [`protocol`]'s frames.
//!
//! Rank traffic never depends on a relayed circuit when it need not: a
//! stream goes on a direct connection; to a peer connected only through a
//! relay it waits (a bounded time, `nat.direct_wait`) for the hole punch's
//! direct connection, and only then takes the relayed one (whose limits a
//! Zorilla relay raises; see [`NatConfig`](crate::config::NatConfig)).
//! A peer whose hole punch failed is not waited for again for a while
//! ([`PUNCH_FAILED_KEPT`]): a circuit that ends at its relay's limit is
//! replaced by another at once, and the streams go on it.
//!
//! A stream to a peer that is not connected dials it, whatever else is
//! dialing it then: the hole punch's own attempts at a direct connection
//! take up to the handshake timeout behind a symmetric NAT, and the
//! streams must not wait for them. The peers streams went to or came from
//! lately ([`RECENT`]) keep their addresses in the overlay's address book
//! when the keeper no longer needs them, so that a stream can dial them
//! again.
//!
//! The parts, as libp2p's own protocols: this behaviour (which connection
//! gets an open request, dialing when there is none), the per-connection
//! [`handler`] (opens and accepts substreams), and [`protocol`] (the frames
//! and their checked codec).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use libp2p::core::Endpoint;
use libp2p::core::transport::PortUse;
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{
    ConnectionDenied, ConnectionId, FromSwarm, NetworkBehaviour, NotifyHandler, THandler,
    THandlerInEvent, THandlerOutEvent, ToSwarm,
};
use libp2p::{Multiaddr, PeerId, Stream, StreamProtocol};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use zorilla_core::bounded::make_room;

pub(crate) mod handler;
pub mod protocol;

/// A stream to or from a peer. While any is alive, the overlay keeps a
/// connection to that peer open.
#[derive(Debug)]
pub struct PeerStream {
    /// The peer at the other end.
    pub peer: PeerId,
    /// The stream (futures' `AsyncRead + AsyncWrite`).
    pub stream: Stream,
    /// The peer's IP address on the stream's connection; `None` if the
    /// connection is relayed (or not over IP). Where a direct connection
    /// of the rank data plane may reach it ([`crate::direct`]).
    pub remote_ip: Option<std::net::IpAddr>,
    _live: Arc<()>,
}

/// Why a stream could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The peer could not be reached.
    #[error("cannot reach the peer: {0}")]
    Unreachable(String),
    /// The peer refused the protocol, or the substream failed.
    #[error("the peer did not open a stream: {0}")]
    Refused(String),
    /// The overlay stopped.
    #[error("the overlay stopped")]
    Stopped,
}

pub(crate) type OpenReply = oneshot::Sender<Result<PeerStream, StreamError>>;

/// How long a peer counts as one streams went to or came from (its
/// addresses kept, see the module documentation).
pub const RECENT: Duration = Duration::from_secs(600);
/// How long a failed hole punch is remembered: streams to the peer take a
/// relayed connection at once meanwhile.
pub const PUNCH_FAILED_KEPT: Duration = Duration::from_secs(600);
/// The most peers remembered for [`RECENT`] and for
/// [`PUNCH_FAILED_KEPT`] each; the oldest goes first.
pub const MAX_REMEMBERED_PEERS: usize = 4096;

/// Remembers `peer` at `now` in `map`, dropping the oldest entry when full.
fn remember(map: &mut BTreeMap<PeerId, Instant>, peer: PeerId, now: Instant) {
    make_room(map, &peer, MAX_REMEMBERED_PEERS, |at| *at);
    map.insert(peer, now);
}

/// Whether `map` remembers `peer` from less than `kept` ago.
fn remembered(map: &BTreeMap<PeerId, Instant>, peer: &PeerId, kept: Duration) -> bool {
    map.get(peer).is_some_and(|at| at.elapsed() < kept)
}

/// The IP address of a connection's remote address, unless it is relayed.
fn ip_of(addr: &Multiaddr) -> Option<std::net::IpAddr> {
    use libp2p::multiaddr::Protocol;
    if addr.iter().any(|p| matches!(p, Protocol::P2pCircuit)) {
        return None;
    }
    match addr.iter().next()? {
        Protocol::Ip4(ip) => Some(ip.into()),
        Protocol::Ip6(ip) => Some(ip.into()),
        _ => None,
    }
}

/// What the behaviour and its handlers share: where inbound streams go,
/// and which streams are alive.
#[derive(Clone, Default)]
pub(crate) struct Shared {
    inbound: Arc<Mutex<Option<mpsc::Sender<PeerStream>>>>,
    live: Arc<Mutex<HashMap<PeerId, Vec<Weak<()>>>>>,
    /// When a stream to or from each peer last opened.
    recent: Arc<Mutex<BTreeMap<PeerId, Instant>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// Wraps a fresh stream, counting it alive.
    pub(crate) fn wrap(
        &self,
        peer: PeerId,
        remote_ip: Option<std::net::IpAddr>,
        stream: Stream,
    ) -> PeerStream {
        remember(&mut lock(&self.recent), peer, Instant::now());
        let live = Arc::new(());
        let mut map = lock(&self.live);
        let weak = map.entry(peer).or_default();
        weak.retain(|w| w.strong_count() > 0);
        weak.push(Arc::downgrade(&live));
        PeerStream {
            peer,
            stream,
            remote_ip,
            _live: live,
        }
    }

    /// Hands an inbound stream to the node; dropped (the peer sees it
    /// reset) if nobody accepts streams or the queue is full.
    pub(crate) fn deliver(&self, stream: PeerStream) {
        if let Some(tx) = lock(&self.inbound).as_ref() {
            let _ = tx.try_send(stream);
        }
    }
}

/// The behaviour.
pub(crate) struct Behaviour {
    protocol: StreamProtocol,
    shared: Shared,
    /// Each connected peer's connections, with whether each is relayed.
    connected: HashMap<PeerId, Vec<(ConnectionId, bool)>>,
    /// Open requests waiting for a connection to their peer, with the dial
    /// they made (only its failure fails them: another dial of the peer,
    /// a hole punch's say, may fail while theirs goes on).
    waiting: HashMap<PeerId, (ConnectionId, Vec<OpenReply>)>,
    /// Peers whose hole punch failed lately (see [`PUNCH_FAILED_KEPT`]).
    punch_failed: BTreeMap<PeerId, Instant>,
    /// Open requests to peers connected only through a relay, waiting for
    /// a direct connection until their deadline.
    waiting_direct: HashMap<PeerId, (Instant, Vec<OpenReply>)>,
    /// How long a stream waits for a direct connection.
    direct_wait: Duration,
    /// Wakes the behaviour at the next deadline of `waiting_direct`.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    actions: VecDeque<ToSwarm<(), OpenReply>>,
    waker: Option<Waker>,
}

impl Behaviour {
    pub(crate) fn new(protocol: StreamProtocol, direct_wait: Duration) -> Self {
        Behaviour {
            protocol,
            shared: Shared::default(),
            connected: HashMap::new(),
            waiting: HashMap::new(),
            punch_failed: BTreeMap::new(),
            waiting_direct: HashMap::new(),
            direct_wait,
            timer: None,
            actions: VecDeque::new(),
            waker: None,
        }
    }

    /// Routes inbound streams to `tx` from now on.
    pub(crate) fn accept(&mut self, tx: mpsc::Sender<PeerStream>) {
        *lock(&self.shared.inbound) = Some(tx);
    }

    /// A direct (not relayed) connection to `peer`, if any.
    fn direct(&self, peer: &PeerId) -> Option<ConnectionId> {
        self.connected
            .get(peer)?
            .iter()
            .find(|(_, relayed)| !relayed)
            .map(|(id, _)| *id)
    }

    /// A relayed connection to `peer`, if any.
    fn relayed(&self, peer: &PeerId) -> Option<ConnectionId> {
        self.connected.get(peer)?.first().map(|(id, _)| *id)
    }

    /// Opens a stream to `peer`, dialing `addrs` first if not connected.
    pub(crate) fn open(&mut self, peer: PeerId, addrs: Vec<Multiaddr>, reply: OpenReply) {
        remember(&mut lock(&self.shared.recent), peer, Instant::now());
        if let Some(id) = self.direct(&peer) {
            self.send_to(peer, id, reply);
        } else if let Some(id) = self.relayed(&peer) {
            if remembered(&self.punch_failed, &peer, PUNCH_FAILED_KEPT) {
                self.send_to(peer, id, reply);
            } else {
                self.wait_direct(peer, vec![reply]);
            }
        } else if let Some((_, replies)) = self.waiting.get_mut(&peer) {
            replies.push(reply);
        } else {
            // Not `NotDialing`: a hole punch's dial of the peer's observed
            // address may be under way, and behind a symmetric NAT it only
            // ends at the handshake timeout.
            let opts = DialOpts::peer_id(peer)
                .addresses(addrs)
                .condition(PeerCondition::Disconnected)
                .build();
            self.waiting
                .insert(peer, (opts.connection_id(), vec![reply]));
            self.actions.push_back(ToSwarm::Dial { opts });
        }
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    fn send_to(&mut self, peer: PeerId, id: ConnectionId, reply: OpenReply) {
        self.actions.push_back(ToSwarm::NotifyHandler {
            peer_id: peer,
            handler: NotifyHandler::One(id),
            event: reply,
        });
    }

    /// Holds `replies` until a direct connection to `peer` comes, or the
    /// wait ends.
    fn wait_direct(&mut self, peer: PeerId, replies: Vec<OpenReply>) {
        let deadline = Instant::now() + self.direct_wait;
        let entry = self
            .waiting_direct
            .entry(peer)
            .or_insert_with(|| (deadline, Vec::new()));
        entry.1.extend(replies);
        let earliest = self.waiting_direct.values().map(|(at, _)| *at).min();
        if let Some(at) = earliest {
            self.timer = Some(Box::pin(tokio::time::sleep_until(at)));
        }
    }

    /// Requests whose wait for a direct connection ended go on a relayed
    /// one.
    fn direct_wait_ended(&mut self, now: Instant) {
        let due: Vec<PeerId> = self
            .waiting_direct
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(peer, _)| *peer)
            .collect();
        for peer in due {
            let Some((_, replies)) = self.waiting_direct.remove(&peer) else {
                continue;
            };
            match self.relayed(&peer) {
                Some(id) => {
                    remember(&mut self.punch_failed, peer, now);
                    tracing::info!(
                        %peer,
                        wait = ?self.direct_wait,
                        "no direct connection to the peer (hole punching failed): rank \
                         traffic goes through a relay"
                    );
                    for reply in replies {
                        self.send_to(peer, id, reply);
                    }
                }
                None => {
                    for reply in replies {
                        let _ = reply.send(Err(StreamError::Unreachable(
                            "the connection closed".into(),
                        )));
                    }
                }
            }
        }
        let earliest = self.waiting_direct.values().map(|(at, _)| *at).min();
        self.timer = earliest.map(|at| Box::pin(tokio::time::sleep_until(at)));
    }

    /// Whether streams went to or came from `peer` lately, or one waits
    /// for a connection to it: the overlay keeps its addresses.
    pub(crate) fn recently_used(&self, peer: &PeerId) -> bool {
        self.waiting.contains_key(peer) || remembered(&lock(&self.shared.recent), peer, RECENT)
    }

    /// Whether a stream to or from `peer` is alive (its connection is in
    /// use and must not be closed as unneeded).
    pub(crate) fn in_use(&self, peer: &PeerId) -> bool {
        let mut map = lock(&self.shared.live);
        let Some(weak) = map.get_mut(peer) else {
            return false;
        };
        weak.retain(|w| w.strong_count() > 0);
        if weak.is_empty() {
            map.remove(peer);
            return false;
        }
        true
    }

    fn handler(&self, peer: PeerId, remote: &Multiaddr) -> handler::Handler {
        handler::Handler::new(
            peer,
            ip_of(remote),
            self.protocol.clone(),
            self.shared.clone(),
        )
    }
}

impl NetworkBehaviour for Behaviour {
    type ConnectionHandler = handler::Handler;
    type ToSwarm = ();

    fn handle_established_inbound_connection(
        &mut self,
        _: ConnectionId,
        peer: PeerId,
        _: &Multiaddr,
        remote: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(self.handler(peer, remote))
    }

    fn handle_established_outbound_connection(
        &mut self,
        _: ConnectionId,
        peer: PeerId,
        remote: &Multiaddr,
        _: Endpoint,
        _: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(self.handler(peer, remote))
    }

    fn on_swarm_event(&mut self, event: FromSwarm<'_>) {
        match event {
            FromSwarm::ConnectionEstablished(e) => {
                let relayed = e.endpoint.is_relayed();
                self.connected
                    .entry(e.peer_id)
                    .or_default()
                    .push((e.connection_id, relayed));
                let mut replies = self
                    .waiting
                    .remove(&e.peer_id)
                    .map(|(_, replies)| replies)
                    .unwrap_or_default();
                if relayed {
                    if remembered(&self.punch_failed, &e.peer_id, PUNCH_FAILED_KEPT) {
                        for reply in replies {
                            self.send_to(e.peer_id, e.connection_id, reply);
                        }
                    } else if !replies.is_empty() {
                        self.wait_direct(e.peer_id, replies);
                    }
                } else {
                    self.punch_failed.remove(&e.peer_id);
                    if let Some((_, more)) = self.waiting_direct.remove(&e.peer_id) {
                        replies.extend(more);
                    }
                    for reply in replies {
                        self.send_to(e.peer_id, e.connection_id, reply);
                    }
                }
            }
            FromSwarm::ConnectionClosed(e) => {
                if let Some(conns) = self.connected.get_mut(&e.peer_id) {
                    conns.retain(|(id, _)| *id != e.connection_id);
                    if conns.is_empty() {
                        self.connected.remove(&e.peer_id);
                        // Nothing left to wait on: they fail at once.
                        if let Some((at, _)) = self.waiting_direct.get_mut(&e.peer_id) {
                            *at = Instant::now();
                            self.timer = Some(Box::pin(tokio::time::sleep_until(*at)));
                        }
                    }
                }
            }
            FromSwarm::DialFailure(e) => {
                // Only the dial the requests made fails them.
                if let Some(peer) = e.peer_id
                    && self
                        .waiting
                        .get(&peer)
                        .is_some_and(|(dial, _)| *dial == e.connection_id)
                    && let Some((_, replies)) = self.waiting.remove(&peer)
                {
                    for reply in replies {
                        let _ = reply.send(Err(StreamError::Unreachable(e.error.to_string())));
                    }
                }
            }
            _ => {}
        }
    }

    fn on_connection_handler_event(
        &mut self,
        _: PeerId,
        _: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        libp2p::core::util::unreachable(event)
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<ToSwarm<(), THandlerInEvent<Self>>> {
        while let Some(timer) = self.timer.as_mut() {
            if timer.as_mut().poll(cx).is_pending() {
                break;
            }
            self.timer = None;
            self.direct_wait_ended(Instant::now());
        }
        match self.actions.pop_front() {
            Some(action) => Poll::Ready(action),
            None => {
                self.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

//! Long-lived raw streams between nodes: the `/zorilla/<network>/ranks/3`
//! protocol that carries the messages between the workers of jobs.
//!
//! The overlay only opens and accepts the streams and hands them out
//! ([`OverlayHandle::open_stream`](crate::OverlayHandle::open_stream) and
//! [`OverlayHandle::accept_streams`](crate::OverlayHandle::accept_streams));
//! the node reads and writes them in its own tasks, so that messages never
//! pass through the overlay's (or the node's) event loop. What flows on a
//! stream is [`protocol`]'s frames.
//!
//! The parts, as libp2p's own protocols: this behaviour (which connection
//! gets an open request, dialing when there is none), the per-connection
//! [`handler`] (opens and accepts substreams), and [`protocol`] (the frames
//! and their checked codec).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};

use libp2p::core::Endpoint;
use libp2p::core::transport::PortUse;
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{
    ConnectionDenied, ConnectionId, FromSwarm, NetworkBehaviour, NotifyHandler, THandler,
    THandlerInEvent, THandlerOutEvent, ToSwarm,
};
use libp2p::{Multiaddr, PeerId, Stream, StreamProtocol};
use tokio::sync::{mpsc, oneshot};

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

/// What the behaviour and its handlers share: where inbound streams go,
/// and which streams are alive.
#[derive(Clone, Default)]
pub(crate) struct Shared {
    inbound: Arc<Mutex<Option<mpsc::Sender<PeerStream>>>>,
    live: Arc<Mutex<HashMap<PeerId, Vec<Weak<()>>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// Wraps a fresh stream, counting it alive.
    pub(crate) fn wrap(&self, peer: PeerId, stream: Stream) -> PeerStream {
        let live = Arc::new(());
        let mut map = lock(&self.live);
        let weak = map.entry(peer).or_default();
        weak.retain(|w| w.strong_count() > 0);
        weak.push(Arc::downgrade(&live));
        PeerStream {
            peer,
            stream,
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
    connected: HashSet<PeerId>,
    /// Open requests waiting for a connection to their peer.
    waiting: HashMap<PeerId, Vec<OpenReply>>,
    actions: VecDeque<ToSwarm<(), OpenReply>>,
    waker: Option<Waker>,
}

impl Behaviour {
    pub(crate) fn new(protocol: StreamProtocol) -> Self {
        Behaviour {
            protocol,
            shared: Shared::default(),
            connected: HashSet::new(),
            waiting: HashMap::new(),
            actions: VecDeque::new(),
            waker: None,
        }
    }

    /// Routes inbound streams to `tx` from now on.
    pub(crate) fn accept(&mut self, tx: mpsc::Sender<PeerStream>) {
        *lock(&self.shared.inbound) = Some(tx);
    }

    /// Opens a stream to `peer`, dialing `addrs` first if not connected.
    pub(crate) fn open(&mut self, peer: PeerId, addrs: Vec<Multiaddr>, reply: OpenReply) {
        if self.connected.contains(&peer) {
            self.actions.push_back(ToSwarm::NotifyHandler {
                peer_id: peer,
                handler: NotifyHandler::Any,
                event: reply,
            });
        } else {
            let first = !self.waiting.contains_key(&peer);
            self.waiting.entry(peer).or_default().push(reply);
            if first {
                self.actions.push_back(ToSwarm::Dial {
                    opts: DialOpts::peer_id(peer)
                        .addresses(addrs)
                        .condition(PeerCondition::DisconnectedAndNotDialing)
                        .build(),
                });
            }
        }
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
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

    fn handler(&self, peer: PeerId) -> handler::Handler {
        handler::Handler::new(peer, self.protocol.clone(), self.shared.clone())
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
        _: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(self.handler(peer))
    }

    fn handle_established_outbound_connection(
        &mut self,
        _: ConnectionId,
        peer: PeerId,
        _: &Multiaddr,
        _: Endpoint,
        _: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(self.handler(peer))
    }

    fn on_swarm_event(&mut self, event: FromSwarm<'_>) {
        match event {
            FromSwarm::ConnectionEstablished(e) => {
                self.connected.insert(e.peer_id);
                for reply in self.waiting.remove(&e.peer_id).unwrap_or_default() {
                    self.actions.push_back(ToSwarm::NotifyHandler {
                        peer_id: e.peer_id,
                        handler: NotifyHandler::One(e.connection_id),
                        event: reply,
                    });
                }
            }
            FromSwarm::ConnectionClosed(e) if e.remaining_established == 0 => {
                self.connected.remove(&e.peer_id);
            }
            FromSwarm::DialFailure(e) => {
                if let Some(peer) = e.peer_id
                    && !self.connected.contains(&peer)
                {
                    for reply in self.waiting.remove(&peer).unwrap_or_default() {
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
        match self.actions.pop_front() {
            Some(action) => Poll::Ready(action),
            None => {
                self.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

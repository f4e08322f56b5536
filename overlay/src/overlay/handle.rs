//! The node's side of the overlay: the cloneable [`OverlayHandle`] that
//! sends the event loop its commands.

use std::time::Duration;

use libp2p::{Multiaddr, PeerId};
use tokio::sync::{mpsc, oneshot};
use zorilla_core::advert::FloodHeader;
use zorilla_core::flood::FloodId;
use zorilla_core::vivaldi::Position;

use crate::addrs::OwnAddr;
use crate::streams::{PeerStream, StreamError};

use super::types::{KnownPeer, Neighbour, OverlayError, OverlayStats, RequestError, Responder};

pub(super) enum Command {
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
    OwnAddrs(oneshot::Sender<Vec<OwnAddr>>),
    Stats(oneshot::Sender<OverlayStats>),
    Position(oneshot::Sender<Position>),
    Misbehaved {
        peer: PeerId,
        reason: String,
    },
    OpenStream {
        peer: PeerId,
        reply: crate::streams::OpenReply,
    },
    AcceptStreams(mpsc::Sender<PeerStream>),
    Revoke {
        items: Vec<Vec<u8>>,
        reply: oneshot::Sender<Result<usize, OverlayError>>,
    },
    Shutdown,
}

/// The node's handle on its overlay. Cheap to clone; the overlay stops when
/// [`shutdown`](Self::shutdown) is called or every handle is dropped.
#[derive(Debug, Clone)]
pub struct OverlayHandle {
    pub(super) commands: mpsc::Sender<Command>,
    pub(super) local_peer_id: PeerId,
    pub(super) signer: crate::identity::PeerSigner,
    pub(super) direct: Option<std::sync::Arc<crate::direct::DirectPlane>>,
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

    /// Signs with this node's identity (its peer id names the key that
    /// checks it).
    pub fn signer(&self) -> crate::identity::PeerSigner {
        self.signer.clone()
    }

    /// The rank data plane, if on ([`OverlayConfig::direct_ranks`](crate::OverlayConfig::direct_ranks)).
    pub fn direct(&self) -> Option<&std::sync::Arc<crate::direct::DirectPlane>> {
        self.direct.as_ref()
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

    /// This node's addresses (listened on, or seen by peers) with what it
    /// believes of each: whether peers on other hosts can reach it, and
    /// why ([`crate::addrs`]).
    pub async fn own_addrs(&self) -> Result<Vec<OwnAddr>, OverlayError> {
        self.call(Command::OwnAddrs).await
    }

    /// Counters of what the overlay did.
    pub async fn stats(&self) -> Result<OverlayStats, OverlayError> {
        self.call(Command::Stats).await
    }

    /// This node's network coordinate and how sure it is of it (learnt
    /// from its peers' RTTs and coordinates; see zorilla-core's
    /// `neighbours::keeper`).
    pub async fn position(&self) -> Result<Position, OverlayError> {
        self.call(Command::Position).await
    }

    /// Hands the overlay revocations signed by the grid key (each encoded
    /// as [`crate::membership::Revocation::to_bytes`] gives it): the new
    /// ones are kept, flooded to every node, and the revoked peers cut
    /// off. Returns how many were new.
    pub async fn revoke(&self, items: Vec<Vec<u8>>) -> Result<usize, OverlayError> {
        self.call(|reply| Command::Revoke { items, reply }).await?
    }

    /// Stops the overlay: every connection closes.
    pub async fn shutdown(&self) {
        let _ = self.commands.send(Command::Shutdown).await;
    }
}

/// Where the answer to one of the node's requests goes.
pub(super) type ReplySlot = oneshot::Sender<Result<Vec<u8>, RequestError>>;

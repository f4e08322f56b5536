//! What the overlay tells its user: its events, its view of neighbours,
//! peers and counters, and its errors.

use std::time::Duration;

use libp2p::request_response::ResponseChannel;
use libp2p::{Multiaddr, PeerId};
use zorilla_core::advert::FloodHeader;
use zorilla_core::flood::{FloodId, FloodStats};
use zorilla_core::neighbours::LinkKind;
use zorilla_core::vivaldi::Coord;

use crate::identity::IdentityError;
use crate::wire::RpcResponse;

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
#[derive(Debug, Clone, PartialEq)]
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
    /// The network coordinate it last reported, if any.
    pub coord: Option<Coord>,
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
    /// Peers banned now (refused until their ban runs out).
    pub banned_peers: u64,
    /// Peers of another network that identified themselves and are to be
    /// banned a moment later, once they have read our identify.
    pub pending_bans: u64,
    /// Connections established.
    pub connections: u64,
    /// Connections open now (never more than the configured
    /// `max_connections`).
    pub open_connections: u64,
    /// Incoming connections that failed before they were established
    /// (garbage, failed handshakes, refused peers).
    pub failed_incoming: u64,
    /// Hole punches (DCUtR) that made a relayed connection direct.
    pub hole_punches: u64,
    /// Hole punches that failed (the peers stay connected through the
    /// relay).
    pub hole_punch_failures: u64,
    /// Relay reservations held for this node now (by reachable peers).
    pub relay_reservations: u64,
    /// Connections whose peer showed a valid membership credential (a
    /// closed grid; 0 in an open one).
    pub members_admitted: u64,
    /// Connections closed because the peer showed no valid credential in
    /// time, or its credential expired or was revoked.
    pub membership_refused: u64,
    /// Revocations this node keeps now.
    pub revocations: u64,
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
        /// The sender's smoothed RTT, if this node has measured it: a home
        /// chooses among offers by the distance it measured, not by what
        /// the offering node says.
        rtt: Option<Duration>,
    },
    /// A peer of a closed grid showed a valid membership credential.
    /// `vouched_by` is the member the grid key signed the chain's first
    /// link for: the peer itself, or the member that invited it. Nodes one
    /// member vouches for count as one owner's (a member that invites
    /// machines vouches for them), so the node can keep the runs of a
    /// replicated job apart by owner.
    Member {
        /// The peer.
        peer: PeerId,
        /// Who vouches for it.
        vouched_by: PeerId,
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
    pub(super) channel: ResponseChannel<RpcResponse>,
}

/// Errors of the overlay and of its handle.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    /// The configuration is invalid.
    #[error("invalid overlay configuration: {0}")]
    InvalidConfig(#[from] crate::config::ConfigError),
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
    /// This node's own membership credential is not valid (closed grid).
    #[error("this node's membership credential: {0}")]
    Membership(String),
    /// Revocations were refused.
    #[error("revocation refused: {0}")]
    Revocation(String),
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
    /// This node's own membership credential is not valid (closed grid).
    #[error("this node's membership credential: {0}")]
    Membership(String),
    /// Revocations were refused.
    #[error("revocation refused: {0}")]
    Revocation(String),
}

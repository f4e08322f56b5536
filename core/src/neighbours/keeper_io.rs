//! What goes in and out of the [peer keeper](super::keeper): its settings,
//! the actions it asks of its driver, and the facts it asks the driver for.

use std::time::Duration;

use super::NeighbourConfig;

/// The peer keeper's settings (the overlay's configuration supplies them).
#[derive(Debug, Clone, PartialEq)]
pub struct KeeperConfig {
    /// How many neighbours to keep.
    pub neighbours: NeighbourConfig,
    /// Interval between pings on each connection.
    pub ping_interval: Duration,
    /// Time a ping may take.
    pub ping_timeout: Duration,
    /// Time a connection's handshake may take (part of a probe's deadline).
    pub handshake_timeout: Duration,
    /// Interval between peer exchanges with a random neighbour.
    pub peer_exchange_interval: Duration,
    /// Most peers probed at once.
    pub max_probes: usize,
    /// RTT samples a probe waits for.
    pub probe_samples: usize,
    /// A known non-neighbour is measured again after this long.
    pub remeasure_after: Duration,
    /// Offences after which a peer is banned.
    pub misbehaviour_limit: u32,
    /// How long a banned peer is refused (and the window offences count in).
    pub ban_duration: Duration,
    /// How long an unreachable peer is not tried again.
    pub dead_retry_after: Duration,
    /// Connections kept for the node's own use; the rest are introductions.
    pub kept_connections: usize,
    /// Whether the node has bootstrap peers to retry while alone.
    pub bootstrap: bool,
}

impl Default for KeeperConfig {
    /// The overlay's defaults (zorilla-overlay's `OverlayConfig`, whose
    /// tests check that the two agree): pings every second with a
    /// three-second timeout, peer exchange every five seconds, eight probes
    /// of two samples at once, bans of five minutes after five offences,
    /// unreachable peers left alone for thirty seconds, 112 of 128
    /// connections kept, no bootstrap peers.
    fn default() -> Self {
        KeeperConfig {
            neighbours: NeighbourConfig::default(),
            ping_interval: Duration::from_secs(1),
            ping_timeout: Duration::from_secs(3),
            handshake_timeout: Duration::from_secs(20),
            peer_exchange_interval: Duration::from_secs(5),
            max_probes: 8,
            probe_samples: 2,
            remeasure_after: Duration::from_secs(60),
            misbehaviour_limit: 5,
            ban_duration: Duration::from_secs(300),
            dead_retry_after: Duration::from_secs(30),
            kept_connections: 112,
            bootstrap: false,
        }
    }
}

/// What the driver must do. See the [peer keeper](super::keeper).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action<P, C> {
    /// Dial the peer at its known addresses unless connected to it or
    /// dialing it already. If the dial cannot even start, report
    /// [`DialFailure::NotStarted`] at once.
    Dial(P),
    /// Dial the bootstrap addresses.
    DialBootstrap,
    /// Close this connection.
    Close(C),
    /// Close every connection to the peer.
    Disconnect {
        /// The peer.
        peer: P,
        /// Why.
        reason: DisconnectReason,
    },
    /// Tell the peer whether it is our neighbour.
    Link {
        /// The peer.
        peer: P,
        /// Whether it is.
        on: bool,
    },
    /// Ask the peer for the peers it knows; report the end of the request
    /// with [`PeerKeeper::exchange_ended`](super::keeper::PeerKeeper::exchange_ended).
    AskPeers(P),
    /// Send the peer our coordinate
    /// ([`PeerKeeper::position`](super::keeper::PeerKeeper::position)), and
    /// report the coordinate it answers with to
    /// [`PeerKeeper::coordinates_received`](super::keeper::PeerKeeper::coordinates_received)
    /// (a peer that sends us its coordinate gets ours in answer).
    ExchangeCoordinates(P),
    /// Close the peer's connections, refuse new ones and forget its
    /// addresses, until [`Action::Unban`].
    Ban(P),
    /// Accept the peer again.
    Unban(P),
    /// The peer left the table (unreachable or banned): the links of other
    /// state machines (the flood router's) must forget it.
    Forgotten(P),
    /// The neighbour set changed.
    NeighboursChanged {
        /// New neighbours.
        added: Vec<P>,
        /// Former neighbours.
        removed: Vec<P>,
    },
}

/// Why the keeper disconnects a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisconnectReason {
    /// It answered no ping for a ping interval and a timeout.
    Silent,
    /// It did not identify itself within
    /// [`IDENTIFY_GRACE`](super::keeper::IDENTIFY_GRACE).
    NotIdentified,
}

/// How a dial failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialFailure {
    /// The dial could not start (no known address).
    NotStarted,
    /// The driver's own connection limit refused it.
    Denied,
    /// The peer could not be reached.
    Unreachable,
    /// The peer's address answered but the connection's handshake
    /// (protocol negotiation, security) failed. Most often both sides
    /// dialed each other at the same moment from their listen ports (TCP
    /// simultaneous open): the two dials become one TCP connection on
    /// which both sides act as the dialer, and both handshakes fail.
    Handshake,
}

/// Offences counted against a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offences {
    /// Offences within the window, this one included.
    pub count: u32,
    /// Whether this one got the peer banned.
    pub banned: bool,
}

/// What only the driver knows about a peer.
pub trait PeerFacts<P> {
    /// Whether the application uses the peer's connection right now
    /// (requests or streams under way): it is not closed.
    fn busy(&self, peer: &P) -> bool;
    /// Whether there is an address to dial the peer at.
    fn dialable(&self, peer: &P) -> bool;
}

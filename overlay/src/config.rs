//! The overlay's configuration, every field with a named default.

use std::path::PathBuf;
use std::time::Duration;

use libp2p::Multiaddr;
use zorilla_core::flood::FloodConfig;
use zorilla_core::neighbours::NeighbourConfig;

use crate::latency::LatencyEmulation;

/// Whether this build has QUIC (cargo feature `quic`, on by default).
/// Without it [`OverlayConfig::validate`] refuses `quic: true`, and peers'
/// QUIC addresses are neither kept nor dialed: the node only ever listens
/// on, and so only advertises, TCP and relayed addresses.
pub const QUIC_SUPPORTED: bool = cfg!(feature = "quic");

/// The network name used when none is configured.
pub const DEFAULT_NETWORK: &str = "default";
/// Default interval between mDNS queries: libp2p's own.
pub const DEFAULT_MDNS_QUERY_INTERVAL: Duration = Duration::from_secs(300);
/// Default interval between pings on each connection: short, so that RTTs
/// stay fresh and a dead peer is noticed within a few seconds.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(1);
/// Default time a ping may take before the connection counts as dead.
pub const DEFAULT_PING_TIMEOUT: Duration = Duration::from_secs(3);
/// Default interval between recomputations of the neighbour set.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// Default interval between peer exchanges with a random neighbour.
pub const DEFAULT_PEER_EXCHANGE_INTERVAL: Duration = Duration::from_secs(5);
/// Default cap on one flood or rpc frame.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 1 << 20;
/// Default time an rpc request may take.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Default limit on established connections.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 128;
/// Default number of peers probed (dialed to measure their RTT) at once.
pub const DEFAULT_MAX_PROBES: usize = 8;
/// Default number of RTT samples a probe waits for before it may end.
pub const DEFAULT_PROBE_SAMPLES: usize = 2;
/// Default interval after which a known non-neighbour is measured again.
pub const DEFAULT_REMEASURE_AFTER: Duration = Duration::from_secs(60);
/// Default number of offences (malformed or oversized frames, bad floods)
/// after which a peer is disconnected and refused.
pub const DEFAULT_MISBEHAVIOUR_LIMIT: u32 = 5;
/// Default time a misbehaving peer or one from another network is refused.
pub const DEFAULT_BAN_DURATION: Duration = Duration::from_secs(300);
/// Default time a peer that could not be reached is not tried again.
pub const DEFAULT_DEAD_RETRY_AFTER: Duration = Duration::from_secs(30);
/// Default capacity of the event and command channels.
pub const DEFAULT_CHANNEL_CAPACITY: usize = 1024;
/// Most relays a node reserves a slot on.
pub const MAX_RELAY_RESERVATIONS: usize = 8;
/// Default number of relays a node that is not reachable reserves a slot
/// on (see [`NatConfig::reservations`]).
pub const DEFAULT_RELAY_RESERVATIONS: usize = 2;
/// Default time a node waits, once peers saw it at a network address, for
/// a dial-back to confirm one before it takes itself for unreachable.
pub const DEFAULT_REACHABILITY_GRACE: Duration = Duration::from_secs(10);
/// Default time a stream for rank traffic waits for a direct connection to
/// a peer reached only through a relay.
pub const DEFAULT_DIRECT_WAIT: Duration = Duration::from_secs(10);
/// Default number of nodes this node relays for (reservations held).
pub const DEFAULT_RELAY_MAX_RESERVATIONS: usize = 16;
/// Default number of relayed circuits through this node at once.
pub const DEFAULT_RELAY_MAX_CIRCUITS: usize = 16;
/// Default number of relayed circuits of one peer at once.
pub const DEFAULT_RELAY_MAX_CIRCUITS_PER_PEER: usize = 4;
/// Default longest life of one relayed circuit: an hour, not libp2p's two
/// minutes, so that a job between two nodes whose hole punch failed runs
/// over a relay of the grid (only peers of the same network reach it).
pub const DEFAULT_RELAY_CIRCUIT_DURATION: Duration = Duration::from_secs(3600);
/// Default most bytes one relayed circuit carries (1 GiB, not libp2p's
/// 128 KiB; see [`DEFAULT_RELAY_CIRCUIT_DURATION`]).
pub const DEFAULT_RELAY_CIRCUIT_BYTES: u64 = 1 << 30;

/// NAT traversal: AutoNAT, circuit relays, hole punching, UPnP.
///
/// A node learns whether it is reachable from AutoNAT v2 (a peer dials
/// back to an address others saw it at); a node that is not reserves a
/// slot on [`reservations`](Self::reservations) reachable peers and
/// advertises the relayed addresses; DCUtR turns a relayed connection
/// into a direct one (hole punching). Every node serves as a relay for a
/// bounded number of others ([`relay_max_reservations`](Self::relay_max_reservations),
/// [`relay_max_circuits`](Self::relay_max_circuits)), with limits raised
/// above libp2p's (2 minutes, 128 KiB) because a grid's peers relay for
/// each other's jobs when a hole punch fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatConfig {
    /// Test reachability with AutoNAT v2 (client and server). Off, a
    /// node takes an address two peers saw it at for reachable.
    pub autonat: bool,
    /// Ask a UPnP router on the local network for a port mapping
    /// (harmless where none answers).
    pub upnp: bool,
    /// How many relays a node that is not reachable reserves a slot on
    /// (0: none; it is then reachable only by the nodes it dials).
    pub reservations: usize,
    /// How long, once peers saw this node at a network address, it waits
    /// for a dial-back to confirm one before it takes itself for
    /// unreachable and reserves relay slots.
    pub reachability_grace: Duration,
    /// How long opening a stream for rank traffic to a peer connected only
    /// through a relay waits for the hole punch's direct connection before
    /// it uses the relayed one.
    pub direct_wait: Duration,
    /// Serve as a relay for others (only useful on a reachable node).
    pub relay_server: bool,
    /// Most nodes this node holds a relay reservation for.
    pub relay_max_reservations: usize,
    /// Most relayed circuits through this node at once.
    pub relay_max_circuits: usize,
    /// Most relayed circuits of one peer at once.
    pub relay_max_circuits_per_peer: usize,
    /// Longest life of a relayed circuit.
    pub relay_circuit_duration: Duration,
    /// Most bytes a relayed circuit carries (each way).
    pub relay_circuit_bytes: u64,
}

impl Default for NatConfig {
    fn default() -> Self {
        NatConfig {
            autonat: true,
            upnp: true,
            reservations: DEFAULT_RELAY_RESERVATIONS,
            reachability_grace: DEFAULT_REACHABILITY_GRACE,
            direct_wait: DEFAULT_DIRECT_WAIT,
            relay_server: true,
            relay_max_reservations: DEFAULT_RELAY_MAX_RESERVATIONS,
            relay_max_circuits: DEFAULT_RELAY_MAX_CIRCUITS,
            relay_max_circuits_per_peer: DEFAULT_RELAY_MAX_CIRCUITS_PER_PEER,
            relay_circuit_duration: DEFAULT_RELAY_CIRCUIT_DURATION,
            relay_circuit_bytes: DEFAULT_RELAY_CIRCUIT_BYTES,
        }
    }
}

/// Configuration of one overlay node.
#[derive(Debug, Clone)]
pub struct OverlayConfig {
    /// The grid's name: nodes only talk to nodes with the same name. Letters,
    /// digits, `-`, `_` and `.`, at most 64 characters.
    pub network: String,
    /// Addresses to listen on (e.g. `/ip4/0.0.0.0/tcp/4001`).
    pub listen: Vec<Multiaddr>,
    /// Addresses of peers to join through (`--peer`).
    pub bootstrap: Vec<Multiaddr>,
    /// Whether to discover peers on the local network with mDNS.
    pub mdns: bool,
    /// How often mDNS asks the local network who is there. Answers to a
    /// query can miss an address a peer has not finished binding yet; the
    /// next query corrects that.
    pub mdns_query_interval: Duration,
    /// Where the identity is kept; `None` for a fresh identity every start.
    pub state_dir: Option<PathBuf>,
    /// How many near and far neighbours to keep.
    pub neighbours: NeighbourConfig,
    /// Limits on flooding.
    pub flood: FloodConfig,
    /// Interval between pings on each connection.
    pub ping_interval: Duration,
    /// Time a ping may take before the connection is closed as dead.
    pub ping_timeout: Duration,
    /// Interval between recomputations of the neighbour set (it is also
    /// recomputed at once when a neighbour is lost).
    pub refresh_interval: Duration,
    /// Interval between peer exchanges with a random neighbour.
    pub peer_exchange_interval: Duration,
    /// Largest flood or rpc frame accepted or sent, in bytes.
    pub max_message_size: usize,
    /// Time an rpc request may take.
    pub request_timeout: Duration,
    /// Most established connections; more are refused. The top eighth of
    /// them (at least one) is kept free for introductions: a node that
    /// connects when the node has no more room for itself gets its peer
    /// records and is let go (see [`kept_connections`](Self::kept_connections)).
    /// Must exceed the neighbour set (`near + far`).
    pub max_connections: u32,
    /// Most peers probed at once.
    pub max_probes: usize,
    /// RTT samples a probe waits for before its connection may be closed.
    pub probe_samples: usize,
    /// A known non-neighbour is measured again after this long.
    pub remeasure_after: Duration,
    /// Offences after which a peer is disconnected and refused.
    pub misbehaviour_limit: u32,
    /// How long a misbehaving or foreign peer is refused.
    pub ban_duration: Duration,
    /// How long an unreachable peer is not tried again.
    pub dead_retry_after: Duration,
    /// Capacity of the event channel and the command channel.
    pub channel_capacity: usize,
    /// Emulated latency (tests and demo); `None` on a real network.
    pub latency: Option<LatencyEmulation>,
    /// Seed of the far-link choice; `None` derives one from the peer id.
    pub seed: Option<u64>,
    /// Listen on QUIC too (UDP, the same addresses as the TCP listen
    /// addresses, a port chosen by the OS), and dial peers' QUIC
    /// addresses. The latency emulation covers TCP only, so it is off by
    /// default. Needs the cargo feature `quic` (see
    /// [`QUIC_SUPPORTED`](QUIC_SUPPORTED)).
    pub quic: bool,
    /// NAT traversal.
    pub nat: NatConfig,
    /// The rank data plane ([`crate::direct`]): messages between workers
    /// go over direct TLS connections (AES-GCM) of their own where one can
    /// be made, else over libp2p. Off with [`latency`](Self::latency)
    /// emulation, which covers libp2p's connections only.
    pub direct_ranks: bool,
    /// Lanes beside each direct connection between two nodes, for large
    /// messages (see [`crate::direct`]; at most
    /// [`MAX_LANES`](crate::direct::MAX_LANES), 0: none).
    pub rank_lanes: u8,
    /// A closed grid: the grid key and this node's credential. `None`
    /// (the default): an open grid, which anyone who reaches a node and
    /// knows the network's name may join.
    pub grid: Option<crate::membership::GridConfig>,
}

impl Default for OverlayConfig {
    fn default() -> Self {
        OverlayConfig {
            network: DEFAULT_NETWORK.to_string(),
            listen: vec!["/ip4/0.0.0.0/tcp/0".parse().expect("valid literal address")],
            bootstrap: Vec::new(),
            mdns: true,
            mdns_query_interval: DEFAULT_MDNS_QUERY_INTERVAL,
            state_dir: None,
            neighbours: NeighbourConfig::default(),
            flood: FloodConfig::default(),
            ping_interval: DEFAULT_PING_INTERVAL,
            ping_timeout: DEFAULT_PING_TIMEOUT,
            refresh_interval: DEFAULT_REFRESH_INTERVAL,
            peer_exchange_interval: DEFAULT_PEER_EXCHANGE_INTERVAL,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_probes: DEFAULT_MAX_PROBES,
            probe_samples: DEFAULT_PROBE_SAMPLES,
            remeasure_after: DEFAULT_REMEASURE_AFTER,
            misbehaviour_limit: DEFAULT_MISBEHAVIOUR_LIMIT,
            ban_duration: DEFAULT_BAN_DURATION,
            dead_retry_after: DEFAULT_DEAD_RETRY_AFTER,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
            latency: None,
            seed: None,
            quic: false,
            nat: NatConfig::default(),
            direct_ranks: true,
            rank_lanes: crate::direct::default_lanes(),
            grid: None,
        }
    }
}

impl OverlayConfig {
    /// A configuration for tests and local demos: listens on
    /// `127.0.0.1` port 0 of network `network`, mDNS off.
    pub fn local(network: &str) -> Self {
        OverlayConfig {
            network: network.to_string(),
            listen: vec![
                "/ip4/127.0.0.1/tcp/0"
                    .parse()
                    .expect("valid literal address"),
            ],
            mdns: false,
            ..OverlayConfig::default()
        }
    }

    /// The connections the node keeps for its own use (neighbours, peers
    /// that chose it, probes): `max_connections` less the introduction
    /// slots, an eighth of it (at least one), yet never fewer than the
    /// neighbour set.
    pub fn kept_connections(&self) -> usize {
        let max = self.max_connections as usize;
        let introductions = (max / 8).max(1);
        max.saturating_sub(introductions)
            .max(self.neighbours.near + self.neighbours.far)
            .min(max)
    }

    /// Checks the configuration; the error says what is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let name_ok = !self.network.is_empty()
            && self.network.len() <= 64
            && self
                .network
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !name_ok {
            return Err(ConfigError::NetworkName(self.network.clone()));
        }
        if self.listen.is_empty() {
            return Err(ConfigError::NoListenAddress);
        }
        if self.quic && !QUIC_SUPPORTED {
            // Said, not ignored: the operator asked for a transport (and
            // perhaps opened a UDP port for it) that would never be there.
            return Err(ConfigError::NoQuic);
        }
        for (setting, value) in [
            ("ping_interval", self.ping_interval),
            ("ping_timeout", self.ping_timeout),
            ("refresh_interval", self.refresh_interval),
            ("peer_exchange_interval", self.peer_exchange_interval),
            ("request_timeout", self.request_timeout),
            ("nat.reachability_grace", self.nat.reachability_grace),
            (
                "nat.relay_circuit_duration",
                self.nat.relay_circuit_duration,
            ),
        ] {
            if value.is_zero() {
                return Err(ConfigError::Zero(setting));
            }
        }
        if self.nat.reservations > MAX_RELAY_RESERVATIONS {
            return Err(ConfigError::TooManyReservations(self.nat.reservations));
        }
        if self.max_message_size < 1024 {
            return Err(ConfigError::MessageSizeTooSmall(self.max_message_size));
        }
        for (setting, value) in [
            ("channel_capacity", self.channel_capacity),
            ("max_connections", self.max_connections as usize),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero(setting));
            }
        }
        let links = self.neighbours.near + self.neighbours.far;
        if links == 0 {
            return Err(ConfigError::NoNeighbours);
        }
        if self.max_connections as usize <= links {
            return Err(ConfigError::TooFewConnections {
                max_connections: self.max_connections,
                links,
            });
        }
        Ok(())
    }
}

/// What is wrong with an overlay configuration, one sentence each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The network's name.
    #[error("network name {0:?} must be 1 to 64 letters, digits, '-', '_' or '.'")]
    NetworkName(String),
    /// No address to listen on.
    #[error("no listen address")]
    NoListenAddress,
    /// QUIC asked of a build without it.
    #[error(
        "quic is on, but this build of zorilla-overlay has no QUIC: rebuild with its cargo feature `quic` or turn quic off"
    )]
    NoQuic,
    /// A setting that must not be zero is.
    #[error("{0} must not be zero")]
    Zero(&'static str),
    /// More relay reservations than a node keeps.
    #[error("a node reserves a slot on at most {MAX_RELAY_RESERVATIONS} relays, not {0}")]
    TooManyReservations(usize),
    /// Messages too small for the protocol's own.
    #[error("max_message_size must be at least 1024 bytes, not {0}")]
    MessageSizeTooSmall(usize),
    /// No neighbours.
    #[error("the neighbour set must not be empty")]
    NoNeighbours,
    /// No room for newcomers beside the neighbours.
    #[error(
        "max_connections ({max_connections}) must exceed the neighbour set ({links}): room for the neighbours and for newcomers"
    )]
    TooFewConnections {
        /// The setting.
        max_connections: u32,
        /// Near and far neighbours.
        links: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_network_names_are_refused() {
        assert!(OverlayConfig::default().validate().is_ok());
        for bad in ["", "a/b", "with space", &"x".repeat(65)] {
            let config = OverlayConfig {
                network: bad.to_string(),
                ..OverlayConfig::default()
            };
            assert!(config.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn some_connections_are_kept_free_for_introductions() {
        let with = |max_connections| OverlayConfig {
            max_connections,
            ..OverlayConfig::default()
        };
        // Six neighbours by default.
        assert_eq!(with(128).kept_connections(), 112);
        assert_eq!(with(16).kept_connections(), 14);
        assert_eq!(with(9).kept_connections(), 8);
        // Never fewer than the neighbour set.
        assert_eq!(with(7).kept_connections(), 6);
        assert!(with(7).validate().is_ok());
        assert!(with(6).validate().is_err());
    }

    /// QUIC is refused, with a reason, by a build without it; taken by
    /// one with it.
    #[test]
    fn quic_needs_the_feature() {
        let quic = OverlayConfig {
            quic: true,
            ..OverlayConfig::default()
        };
        let taken = quic.validate();
        if QUIC_SUPPORTED {
            taken.unwrap();
        } else {
            assert_eq!(taken, Err(ConfigError::NoQuic));
            let e = ConfigError::NoQuic.to_string();
            assert!(e.contains("no QUIC") && e.contains("`quic`"), "{e}");
        }
    }
}

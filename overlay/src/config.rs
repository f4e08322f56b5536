//! The overlay's configuration, every field with a named default.

use std::path::PathBuf;
use std::time::Duration;

use libp2p::Multiaddr;
use zorilla_core::flood::FloodConfig;
use zorilla_core::neighbours::NeighbourConfig;

use crate::latency::LatencyEmulation;

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
    pub fn validate(&self) -> Result<(), String> {
        let name_ok = !self.network.is_empty()
            && self.network.len() <= 64
            && self
                .network
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !name_ok {
            return Err(format!(
                "network name {:?} must be 1 to 64 letters, digits, '-', '_' or '.'",
                self.network
            ));
        }
        if self.listen.is_empty() {
            return Err("no listen address".into());
        }
        for (what, value) in [
            ("ping_interval", self.ping_interval),
            ("ping_timeout", self.ping_timeout),
            ("refresh_interval", self.refresh_interval),
            ("peer_exchange_interval", self.peer_exchange_interval),
            ("request_timeout", self.request_timeout),
        ] {
            if value.is_zero() {
                return Err(format!("{what} must not be zero"));
            }
        }
        if self.max_message_size < 1024 {
            return Err("max_message_size must be at least 1024 bytes".into());
        }
        if self.channel_capacity == 0 || self.max_connections == 0 {
            return Err("channel_capacity and max_connections must not be zero".into());
        }
        let links = self.neighbours.near + self.neighbours.far;
        if links == 0 {
            return Err("the neighbour set must not be empty".into());
        }
        if self.max_connections as usize <= links {
            return Err(format!(
                "max_connections ({}) must exceed the neighbour set ({links}): room for the \
                 neighbours and for newcomers",
                self.max_connections
            ));
        }
        Ok(())
    }
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
}

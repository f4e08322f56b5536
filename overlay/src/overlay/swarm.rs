//! The libp2p swarm the overlay runs: its behaviours, its transports (TCP
//! with noise, yamux and the latency emulation; circuit relay v2 over the
//! same upgrade; QUIC if configured and built in, cargo feature `quic`)
//! and the keeper's settings. Every behaviour runs behind the membership
//! gate ([`crate::membership`]), which passes everything through in an
//! open grid.

use std::time::Duration;

#[cfg(feature = "quic")]
use futures::future::Either;
use libp2p::core::muxing::StreamMuxerBox;
use libp2p::core::transport::Transport;
use libp2p::core::{ConnectedPoint, upgrade};
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::NetworkBehaviour;
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::{
    Multiaddr, StreamProtocol, Swarm, allow_block_list, autonat, connection_limits, dcutr,
    identify, mdns, noise, ping, relay, upnp, yamux,
};
use zorilla_core::neighbours::keeper::KeeperConfig;

#[cfg(feature = "quic")]
use libp2p::quic;

use crate::config::OverlayConfig;
use crate::latency::{Delay, MaybeDelayed, Route};
use crate::membership::gate::Gate;
use crate::wire::{self, CborCodec, FloodAck, FloodFrame, RpcRequest, RpcResponse};

use super::fresh_port::FreshPortOnConflict;
use super::types::OverlayError;

/// How long the transport's handshake (noise, yamux) may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);
/// Connections nobody uses close after this long; the overlay closes the
/// ones it does not need itself, so this is only a safety net.
const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(NetworkBehaviour)]
pub(super) struct Behaviour {
    pub(super) limits: connection_limits::Behaviour,
    pub(super) blocked: allow_block_list::Behaviour<allow_block_list::BlockedPeers>,
    pub(super) identify: identify::Behaviour,
    pub(super) ping: ping::Behaviour,
    pub(super) mdns: Toggle<mdns::tokio::Behaviour>,
    pub(super) flood: request_response::Behaviour<CborCodec<FloodFrame, FloodAck>>,
    pub(super) rpc: request_response::Behaviour<CborCodec<RpcRequest, RpcResponse>>,
    pub(super) streams: crate::streams::Behaviour,
    /// Circuit relay v2, serving: relays for a bounded number of others.
    pub(super) relay: Toggle<relay::Behaviour>,
    /// Circuit relay v2, using relays: reservations and relayed dials.
    pub(super) relay_client: relay::client::Behaviour,
    /// Hole punching over relayed connections.
    pub(super) dcutr: dcutr::Behaviour,
    /// AutoNAT v2: asks peers to dial back to addresses others saw us at.
    pub(super) autonat: Toggle<autonat::v2::client::Behaviour>,
    /// AutoNAT v2: dials back to peers' addresses when asked.
    pub(super) autonat_server: Toggle<autonat::v2::server::Behaviour>,
    /// Port mappings from a UPnP router, where one answers.
    pub(super) upnp: Toggle<upnp::tokio::Behaviour>,
}

/// Most connections to one peer: two (both sides dialed at once), a
/// relayed one and its hole punch's direct one, and an AutoNAT dial-back.
const MAX_CONNECTIONS_PER_PEER: u32 = 4;

/// The relay server's settings from the overlay's: its bounds, and
/// libp2p's rate limits per peer and per IP address.
fn relay_config(nat: &crate::config::NatConfig) -> relay::Config {
    relay::Config {
        max_reservations: nat.relay_max_reservations,
        max_reservations_per_peer: 1,
        max_circuits: nat.relay_max_circuits,
        max_circuits_per_peer: nat.relay_max_circuits_per_peer,
        max_circuit_duration: nat.relay_circuit_duration,
        max_circuit_bytes: nat.relay_circuit_bytes,
        ..relay::Config::default()
    }
}

/// The keeper's settings from the overlay's.
pub(super) fn keeper_config(config: &OverlayConfig) -> KeeperConfig {
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

/// The overlay's behaviours behind the membership gate (open or closed).
pub(super) type Gated = Gate<Behaviour>;

pub(super) fn build_swarm(
    config: &OverlayConfig,
    key: &Keypair,
) -> Result<Swarm<Gated>, OverlayError> {
    let setup = |e: &dyn std::fmt::Display| OverlayError::Setup(e.to_string());
    let local = key.public().to_peer_id();
    let latency = config.latency.clone();
    let tcp = FreshPortOnConflict::new(libp2p::tcp::tokio::Transport::new(
        libp2p::tcp::Config::default().nodelay(true),
    ))
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
    });
    // Relayed connections get the same upgrade as TCP ones (the relay
    // sees only noise's ciphertext).
    let (relay_transport, relay_client) = relay::client::new(local);
    let upgraded = relay_transport
        .or_transport(tcp)
        .upgrade(upgrade::Version::V1Lazy)
        .authenticate(noise::Config::new(key).map_err(|e| setup(&e))?)
        .multiplex(yamux::Config::default())
        .timeout(HANDSHAKE_TIMEOUT);
    let transport = upgraded
        .map(|(peer, muxer), _| (peer, StreamMuxerBox::new(muxer)))
        .boxed();
    // Without the feature there is no QUIC branch: the configuration's
    // validation refused `quic` already.
    #[cfg(feature = "quic")]
    let transport = if config.quic {
        let mut quic_config = quic::Config::new(key);
        quic_config.handshake_timeout = HANDSHAKE_TIMEOUT;
        transport
            .or_transport(quic::tokio::Transport::new(quic_config))
            .map(|either, _| match either {
                Either::Left(tcp_or_relayed) => tcp_or_relayed,
                Either::Right((peer, muxer)) => (peer, StreamMuxerBox::new(muxer)),
            })
            .boxed()
    } else {
        transport
    };

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
    let nat = &config.nat;
    let behaviour = Behaviour {
        limits: connection_limits::Behaviour::new(
            connection_limits::ConnectionLimits::default()
                .with_max_established(Some(config.max_connections))
                .with_max_established_per_peer(Some(MAX_CONNECTIONS_PER_PEER))
                .with_max_pending_incoming(Some(config.max_connections / 2 + 1)),
        ),
        blocked: allow_block_list::Behaviour::default(),
        identify: identify::Behaviour::new(
            identify::Config::new(wire::identify_version(network), key.public())
                .with_agent_version(format!("zorilla/{}", env!("CARGO_PKG_VERSION")))
                // Peers learn a relayed address (or a new one) at once.
                .with_push_listen_addr_updates(true),
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
        streams: crate::streams::Behaviour::new(
            protocol(wire::ranks_protocol(network))?,
            nat.direct_wait,
        ),
        relay: Toggle::from(
            nat.relay_server
                .then(|| relay::Behaviour::new(local, relay_config(nat))),
        ),
        relay_client,
        dcutr: dcutr::Behaviour::new(local),
        // libp2p's own random generators (it uses another rand than ours).
        autonat: Toggle::from(nat.autonat.then(autonat::v2::client::Behaviour::default)),
        autonat_server: Toggle::from(nat.autonat.then(autonat::v2::server::Behaviour::default)),
        upnp: Toggle::from(nat.upnp.then(upnp::tokio::Behaviour::default)),
    };
    let revocations = config
        .grid
        .as_ref()
        .map(|grid| crate::membership::Revocations::load(grid.key, config.state_dir.as_deref()));
    let gated = Gate::new(
        behaviour,
        config.grid.as_ref().zip(revocations),
        network,
        local,
    )
    .map_err(|e| setup(&e))?;
    Ok(Swarm::new(
        transport,
        gated,
        local,
        libp2p::swarm::Config::with_tokio_executor()
            .with_idle_connection_timeout(IDLE_CONNECTION_TIMEOUT),
    ))
}

pub(super) fn tcp_port(addr: &Multiaddr) -> Option<u16> {
    addr.iter().find_map(|p| match p {
        Protocol::Tcp(port) => Some(port),
        _ => None,
    })
}

/// Whether `addr` is worth remembering as a peer's listen address: TCP or
/// QUIC (if built in: cargo feature `quic`) on a concrete IP address, or
/// such an address of a relay followed by `/p2p/RELAY/p2p-circuit` and
/// perhaps the peer's `/p2p/ID` (and nothing else: no relay of a relay).
/// A build without QUIC could only fail to dial a QUIC address, and would
/// pass it on in peer exchange as if it were worth trying.
pub(super) fn dialable(addr: &Multiaddr) -> bool {
    let mut iter = addr.iter();
    let ip_ok = match iter.next() {
        Some(Protocol::Ip4(ip)) => !ip.is_unspecified(),
        Some(Protocol::Ip6(ip)) => !ip.is_unspecified(),
        Some(Protocol::Dns(_) | Protocol::Dns4(_) | Protocol::Dns6(_)) => true,
        _ => false,
    };
    let transport_ok = match iter.next() {
        Some(Protocol::Tcp(port)) => port != 0,
        Some(Protocol::Udp(port)) => {
            crate::QUIC_SUPPORTED && port != 0 && matches!(iter.next(), Some(Protocol::QuicV1))
        }
        _ => false,
    };
    let rest_ok = match iter.next() {
        None => true,
        Some(Protocol::P2p(_)) => match iter.next() {
            None => true,
            Some(Protocol::P2pCircuit) => match iter.next() {
                None => true,
                Some(Protocol::P2p(_)) => iter.next().is_none(),
                Some(_) => false,
            },
            Some(_) => false,
        },
        Some(_) => false,
    };
    ip_ok && transport_ok && rest_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dialable_addresses() {
        let ok = |s: &str| dialable(&s.parse().unwrap());
        assert!(ok("/ip4/10.0.0.1/tcp/4001"));
        // Only where this build can dial it.
        assert_eq!(ok("/ip4/10.0.0.1/udp/4001/quic-v1"), crate::QUIC_SUPPORTED);
        assert_eq!(
            ok(
                "/ip4/10.0.0.1/udp/4001/quic-v1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit"
            ),
            crate::QUIC_SUPPORTED
        );
        assert!(ok(
            "/ip4/10.0.0.1/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit"
        ));
        assert!(!ok("/ip4/0.0.0.0/tcp/4001"));
        assert!(!ok("/ip4/10.0.0.1/tcp/0"));
        assert!(!ok("/ip4/10.0.0.1/udp/4001"));
        assert!(!ok("/ip4/10.0.0.1/udp/4001/quic-v1/webtransport"));
        assert!(ok(
            "/ip4/10.0.0.1/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
        ));
        assert!(!ok("/p2p-circuit"));
        assert!(!ok(
            "/ip4/10.0.0.1/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit"
        ));
    }

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

//! The libp2p swarm the overlay runs: its behaviours, its transport (TCP,
//! noise, yamux, the latency emulation) and the keeper's settings.

use std::time::Duration;

use libp2p::core::transport::Transport;
use libp2p::core::{ConnectedPoint, upgrade};
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::NetworkBehaviour;
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::{
    Multiaddr, StreamProtocol, Swarm, allow_block_list, connection_limits, identify, mdns, noise,
    ping, yamux,
};
use zorilla_core::neighbours::keeper::KeeperConfig;

use crate::config::OverlayConfig;
use crate::latency::{Delay, MaybeDelayed, Route};
use crate::wire::{self, CborCodec, FloodAck, FloodFrame, RpcRequest, RpcResponse};

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

pub(super) fn build_swarm(
    config: &OverlayConfig,
    key: &Keypair,
) -> Result<Swarm<Behaviour>, OverlayError> {
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

pub(super) fn tcp_port(addr: &Multiaddr) -> Option<u16> {
    addr.iter().find_map(|p| match p {
        Protocol::Tcp(port) => Some(port),
        _ => None,
    })
}

/// Whether `addr` is worth remembering as a peer's listen address: TCP on a
/// concrete IP address.
pub(super) fn dialable(addr: &Multiaddr) -> bool {
    let mut iter = addr.iter();
    let ip_ok = match iter.next() {
        Some(Protocol::Ip4(ip)) => !ip.is_unspecified(),
        Some(Protocol::Ip6(ip)) => !ip.is_unspecified(),
        Some(Protocol::Dns(_) | Protocol::Dns4(_) | Protocol::Dns6(_)) => true,
        _ => false,
    };
    ip_ok && matches!(iter.next(), Some(Protocol::Tcp(port)) if port != 0)
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

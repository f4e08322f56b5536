//! NAT traversal in the event loop: what AutoNAT, the relay client and
//! server, DCUtR and UPnP report goes to the core's NAT policy
//! ([`zorilla_core::neighbours::nat`], which says when this node is
//! unreachable, which relays to reserve a slot on and which relayed
//! connections to close once a direct one exists), and what it decides is
//! done here.
//!
//! - **Reachable or not**: a node is reachable once a peer dialed back to
//!   one of its network addresses (AutoNAT v2; [`crate::addrs`] keeps what
//!   it believes of each address).
//! - **Reservations** are listen addresses through a relay, at the address
//!   the node reached it at; identify pushes them to the peers and peer
//!   exchange passes them on.
//! - **Direct connections**: DCUtR punches a hole for every relayed
//!   connection, so that no rpc, flood or file block depends on a circuit.

use std::collections::HashMap;
use std::time::Duration;

use libp2p::multiaddr::Protocol;
use libp2p::swarm::ConnectionId;
use libp2p::{Multiaddr, PeerId, autonat, dcutr, relay, upnp};
use zorilla_core::neighbours::nat::NatAction;

use super::Driver;
use crate::addrs::{Scope, is_relayed, scope};

/// How long a relay whose reservation failed or ended is not asked again.
pub(super) const RELAY_RETRY: Duration = Duration::from_secs(30);

impl Driver {
    /// Does what the NAT policy decided.
    fn nat_actions(&mut self, actions: Vec<NatAction<PeerId, ConnectionId>>) {
        for action in actions {
            match action {
                NatAction::Reserve(relay) => self.reserve(relay),
                NatAction::GiveUp(relay) => {
                    tracing::info!(%relay, "reachable without a relay; giving up the reservation");
                    if let Some(listener) = self.nat.listeners.remove(&relay) {
                        self.swarm.remove_listener(listener);
                    }
                }
                NatAction::CloseRelayed(peer, ids) => {
                    for id in ids {
                        tracing::debug!(%peer, "direct connection up; closing the relayed one");
                        self.swarm.close_connection(id);
                    }
                }
            }
        }
    }

    /// Asks `relay` for a reservation: listens on a circuit through it.
    fn reserve(&mut self, relay: PeerId) {
        let now = self.now();
        let Some(addr) = self.relay_addr(&relay) else {
            self.nat.policy.reservation_ended(now, &relay);
            return;
        };
        let circuit = addr.with(Protocol::P2p(relay)).with(Protocol::P2pCircuit);
        match self.swarm.listen_on(circuit.clone()) {
            Ok(listener) => {
                tracing::info!(%relay, %circuit, "not reachable: asking a peer to relay for us");
                self.nat.listeners.insert(relay, listener);
            }
            Err(e) => {
                tracing::warn!(%relay, error = %e, "cannot ask the peer to relay for us");
                self.nat.policy.reservation_ended(now, &relay);
            }
        }
    }

    /// The address to reach relay `peer` at (see [`relay_addr`]).
    fn relay_addr(&self, peer: &PeerId) -> Option<Multiaddr> {
        relay_addr(&self.swarm, &self.via, &self.addrs, peer)
    }

    /// A relayed listener (a reservation) closed.
    pub(super) fn relay_listener_closed(
        &mut self,
        listener: libp2p::core::transport::ListenerId,
        reason: &str,
    ) {
        let relay = self
            .nat
            .listeners
            .iter()
            .find(|(_, id)| **id == listener)
            .map(|(relay, _)| *relay);
        if let Some(relay) = relay {
            tracing::info!(%relay, reason, "the relay's reservation ended; asking another later");
            self.nat.listeners.remove(&relay);
            let now = self.now();
            self.nat.policy.reservation_ended(now, &relay);
        }
    }

    /// A connection to `peer` came; `relayed` if through a relay.
    pub(super) fn nat_connected(&mut self, peer: PeerId, id: ConnectionId, relayed: bool) {
        let now = self.now();
        let in_use = self.swarm.behaviour().streams.in_use(&peer);
        let out = self.nat.policy.connected(now, peer, id, relayed, in_use);
        self.nat_actions(out);
    }

    /// A connection to `peer` closed.
    pub(super) fn nat_disconnected(&mut self, peer: PeerId, id: ConnectionId, remaining: u32) {
        self.nat.policy.disconnected(&peer, &id, remaining);
    }

    /// The tick's part: reservations, and relayed connections left open
    /// beside direct ones while streams used them.
    pub(super) fn nat_tick(&mut self) {
        // Only a node others can reach is of use as a relay: it offers the
        // hop protocol while a dial-back confirms an address of its (not
        // for a relay's own confirmation of our relayed address, as
        // libp2p's automatic status would).
        // Addresses peers reached us at count as confirmed for libp2p too
        // (a relay's reservation names its external addresses, and the
        // client refuses one that names none).
        for addr in self.own.reached_listen() {
            if !self.swarm.external_addresses().any(|a| *a == addr) {
                self.swarm.add_external_address(addr);
            }
        }
        let serve = self.own.reachable();
        if self.nat.serving != Some(serve)
            && let Some(relay) = self.swarm.behaviour_mut().relay.as_mut()
        {
            relay.set_status(Some(if serve {
                relay::Status::Enable
            } else {
                relay::Status::Disable
            }));
            self.nat.serving = Some(serve);
            if serve {
                tracing::info!("reachable: relaying for peers that are not");
            }
        }
        let now = self.now();
        let reachable = self.own.reachable();
        let (swarm, via, addrs) = (&self.swarm, &self.via, &self.addrs);
        let out = self.nat.policy.tick(
            now,
            reachable,
            |p| swarm.behaviour().streams.in_use(p),
            |p| relay_addr(swarm, via, addrs, p).is_some(),
        );
        self.nat_actions(out);
    }

    pub(super) fn on_autonat(&mut self, event: autonat::v2::client::Event) {
        match event.result {
            Ok(()) => {
                tracing::info!(addr = %event.tested_addr, server = %event.server,
                    "a peer dialed back to an address of ours: it is reachable");
            }
            Err(e) => {
                tracing::info!(addr = %event.tested_addr, server = %event.server, error = %e,
                    "a peer could not dial back to an address of ours (NAT or firewall)");
                if scope(&event.tested_addr) == Some(Scope::Network) {
                    self.nat.policy.dial_back_failed();
                }
                self.own.dial_back_failed(&event.tested_addr);
            }
        }
    }

    pub(super) fn on_relay_client(&mut self, event: relay::client::Event) {
        match event {
            relay::client::Event::ReservationReqAccepted {
                relay_peer_id,
                renewal,
                limit,
            } => {
                if !renewal {
                    tracing::info!(relay = %relay_peer_id, ?limit, "a peer relays for us");
                }
                self.nat.policy.reservation_accepted(relay_peer_id);
            }
            relay::client::Event::OutboundCircuitEstablished {
                relay_peer_id,
                limit,
            } => {
                tracing::debug!(relay = %relay_peer_id, ?limit, "connected through a relay");
            }
            relay::client::Event::InboundCircuitEstablished { src_peer_id, limit } => {
                tracing::debug!(from = %src_peer_id, ?limit, "a peer connected through our relay");
            }
        }
    }

    pub(super) fn on_relay_server(&mut self, event: relay::Event) {
        match event {
            relay::Event::ReservationReqAccepted {
                src_peer_id,
                renewed,
            } if !renewed => {
                tracing::info!(peer = %src_peer_id, "relaying for a peer");
            }
            relay::Event::ReservationReqDenied { src_peer_id, .. } => {
                tracing::info!(peer = %src_peer_id, "refused to relay for a peer (at the limit)");
            }
            relay::Event::CircuitReqDenied {
                src_peer_id,
                dst_peer_id,
                ..
            } => {
                tracing::info!(from = %src_peer_id, to = %dst_peer_id,
                    "refused a relayed circuit (at the limit or no reservation)");
            }
            relay::Event::CircuitClosed {
                src_peer_id,
                dst_peer_id,
                error: Some(error),
            } => {
                tracing::info!(from = %src_peer_id, to = %dst_peer_id, %error,
                    "a relayed circuit ended");
            }
            _ => {}
        }
    }

    pub(super) fn on_dcutr(&mut self, event: dcutr::Event) {
        let peer = event.remote_peer_id;
        let now = self.now();
        let since = self
            .nat
            .policy
            .relayed_since(&peer)
            .map(|at| now.saturating_sub(at));
        match event.result {
            Ok(_) => {
                self.stats.hole_punches += 1;
                tracing::info!(%peer, after_ms = since.map_or(0, |d| d.as_millis() as u64),
                    "hole punch succeeded: a direct connection to the peer");
            }
            Err(e) => {
                self.stats.hole_punch_failures += 1;
                tracing::info!(%peer, error = %e,
                    "hole punch failed: the peer stays connected through the relay");
            }
        }
    }

    pub(super) fn on_upnp(&mut self, event: upnp::Event) {
        match event {
            upnp::Event::NewExternalAddr {
                local_addr,
                external_addr,
            } => {
                tracing::info!(%local_addr, %external_addr, "the router mapped a port for us (UPnP)");
                self.own.dialed_back(&external_addr);
            }
            upnp::Event::ExpiredExternalAddr { external_addr, .. } => {
                self.own.dial_back_failed(&external_addr);
            }
            upnp::Event::GatewayNotFound | upnp::Event::NonRoutableGateway => {
                tracing::debug!("no UPnP router on this network");
            }
        }
    }
}

/// The address to reach relay `peer` at: the one our connection to it
/// uses, if we dialed it directly, else a known one of network scope; none
/// if it is not connected.
fn relay_addr(
    swarm: &libp2p::Swarm<super::Gated>,
    via: &HashMap<PeerId, Multiaddr>,
    addrs: &HashMap<PeerId, Vec<Multiaddr>>,
    peer: &PeerId,
) -> Option<Multiaddr> {
    if !swarm.is_connected(peer) {
        return None;
    }
    let usable = |a: &Multiaddr| {
        scope(a) == Some(Scope::Network)
            && !is_relayed(a)
            && a.iter().all(|p| !matches!(p, Protocol::P2p(_)))
    };
    via.get(peer)
        .filter(|a| usable(a) && addrs.get(peer).is_some_and(|k| k.contains(a)))
        .cloned()
        .or_else(|| addrs.get(peer)?.iter().find(|a| usable(a)).cloned())
}

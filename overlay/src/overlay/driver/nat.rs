//! NAT traversal in the event loop: what AutoNAT, the relay client and
//! server, DCUtR and UPnP report, and the reservations a node that is not
//! reachable keeps on reachable peers.
//!
//! - **Reachable or not**: a node is reachable once a peer dialed back to
//!   one of its network addresses (AutoNAT v2; [`crate::addrs`] keeps what
//!   it believes of each address). It takes itself for unreachable when a
//!   dial-back failed, or when peers saw it at an address none of its
//!   interfaces has (a NAT's) and no dial-back reached it within
//!   `nat.reachability_grace` (AutoNAT v2 reports no failure when the
//!   server's dial times out, which a NAT that drops unsolicited packets
//!   makes it do).
//! - **Reservations**: an unreachable node reserves a slot on up to
//!   `nat.reservations` connected peers that serve as relays (identify
//!   lists the hop protocol), at the address it reached each at; the
//!   relayed addresses are listen addresses, which identify pushes to the
//!   peers and peer exchange passes on. A reservation that fails or ends
//!   is not asked of that relay again for [`RELAY_RETRY`]; a node that
//!   becomes reachable gives them up.
//! - **Direct connections**: DCUtR punches a hole for every relayed
//!   connection; once a direct connection to the peer exists, the relayed
//!   ones are closed (when no stream uses the peer's connections, else at a
//!   later tick), so that no rpc, flood or file block depends on a circuit.

use std::time::Duration;

use libp2p::multiaddr::Protocol;
use libp2p::swarm::ConnectionId;
use libp2p::{Multiaddr, PeerId, autonat, dcutr, relay, upnp};
use tokio::time::Instant;

use super::Driver;
use crate::addrs::{Scope, is_relayed, scope};

/// How long a relay whose reservation failed or ended is not asked again.
pub(super) const RELAY_RETRY: Duration = Duration::from_secs(30);

impl Driver {
    /// Whether this node takes itself for unreachable (and wants relays).
    pub(super) fn unreachable(&self, now: Instant) -> bool {
        if self.own.reachable() {
            return false;
        }
        self.nat.dial_back_failed
            || self
                .nat
                .observed_since
                .is_some_and(|since| now >= since + self.config.nat.reachability_grace)
    }

    /// Keeps the relay reservations the node's reachability calls for.
    pub(super) fn keep_relays(&mut self) {
        let now = Instant::now();
        if !self.unreachable(now) {
            for (relay, listener) in std::mem::take(&mut self.nat.relays) {
                tracing::info!(%relay, "reachable without a relay; giving up the reservation");
                self.swarm.remove_listener(listener);
            }
            return;
        }
        self.nat.relay_retry.retain(|_, until| *until > now);
        let wanted = self.config.nat.reservations;
        if self.nat.relays.len() >= wanted {
            return;
        }
        let mut candidates: Vec<(PeerId, Multiaddr)> = self
            .nat
            .relay_capable
            .iter()
            .filter(|p| !self.nat.relays.contains_key(p) && !self.nat.relay_retry.contains_key(p))
            .filter_map(|peer| Some((*peer, self.relay_addr(peer)?)))
            .collect();
        // Deterministic order (the set's is not).
        candidates.sort();
        for (relay, addr) in candidates.into_iter().take(wanted - self.nat.relays.len()) {
            let circuit = addr.with(Protocol::P2p(relay)).with(Protocol::P2pCircuit);
            match self.swarm.listen_on(circuit.clone()) {
                Ok(listener) => {
                    tracing::info!(%relay, %circuit, "not reachable: asking a peer to relay for us");
                    self.nat.relays.insert(relay, listener);
                }
                Err(e) => {
                    tracing::warn!(%relay, error = %e, "cannot ask the peer to relay for us");
                    self.nat.relay_retry.insert(relay, now + RELAY_RETRY);
                }
            }
        }
    }

    /// The address to reach relay `peer` at: the one our connection to it
    /// uses, if we dialed it directly, else a known one of network scope.
    fn relay_addr(&self, peer: &PeerId) -> Option<Multiaddr> {
        if !self.swarm.is_connected(peer) {
            return None;
        }
        let usable = |a: &Multiaddr| {
            scope(a) == Some(Scope::Network)
                && !is_relayed(a)
                && a.iter().all(|p| !matches!(p, Protocol::P2p(_)))
        };
        self.via
            .get(peer)
            .filter(|a| usable(a) && self.addrs.get(peer).is_some_and(|k| k.contains(a)))
            .cloned()
            .or_else(|| self.addrs.get(peer)?.iter().find(|a| usable(a)).cloned())
    }

    /// A relayed listener (a reservation) closed.
    pub(super) fn relay_listener_closed(
        &mut self,
        listener: libp2p::core::transport::ListenerId,
        reason: &str,
    ) {
        let relay = self
            .nat
            .relays
            .iter()
            .find(|(_, id)| **id == listener)
            .map(|(relay, _)| *relay);
        if let Some(relay) = relay {
            tracing::info!(%relay, reason, "the relay's reservation ended; asking another later");
            self.nat.relays.remove(&relay);
            self.nat.relay_reserved.remove(&relay);
            self.nat
                .relay_retry
                .insert(relay, Instant::now() + RELAY_RETRY);
        }
    }

    /// A connection to `peer` came; `relayed` if through a relay.
    pub(super) fn nat_connected(&mut self, peer: PeerId, id: ConnectionId, relayed: bool) {
        if relayed {
            let entry = self
                .nat
                .relayed
                .entry(peer)
                .or_insert_with(|| (Instant::now(), Vec::new()));
            entry.1.push(id);
        } else {
            *self.nat.direct.entry(peer).or_default() += 1;
            self.close_relayed(peer);
        }
    }

    /// A connection to `peer` closed.
    pub(super) fn nat_disconnected(&mut self, peer: PeerId, id: ConnectionId, remaining: u32) {
        let was_relayed = match self.nat.relayed.get_mut(&peer) {
            Some((_, ids)) if ids.contains(&id) => {
                ids.retain(|c| *c != id);
                if ids.is_empty() {
                    self.nat.relayed.remove(&peer);
                }
                true
            }
            _ => false,
        };
        if !was_relayed && let Some(n) = self.nat.direct.get_mut(&peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.nat.direct.remove(&peer);
            }
        }
        if remaining == 0 {
            self.nat.relay_capable.remove(&peer);
            self.nat.relayed.remove(&peer);
            self.nat.direct.remove(&peer);
        }
    }

    /// Closes the relayed connections to `peer` if it has a direct one and
    /// no stream uses its connections (else a later tick does).
    fn close_relayed(&mut self, peer: PeerId) {
        if self.swarm.behaviour().streams.in_use(&peer) {
            return;
        }
        if let Some((_, ids)) = self.nat.relayed.get(&peer) {
            for id in ids.clone() {
                tracing::debug!(%peer, "direct connection up; closing the relayed one");
                self.swarm.close_connection(id);
            }
        }
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
        self.keep_relays();
        let doubled: Vec<PeerId> = self.nat.relayed.keys().copied().collect();
        for peer in doubled {
            let direct = self.connections_direct(&peer);
            if direct {
                self.close_relayed(peer);
            }
        }
    }

    /// Whether a direct connection to `peer` is open.
    fn connections_direct(&self, peer: &PeerId) -> bool {
        self.nat.direct.get(peer).is_some_and(|n| *n > 0)
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
                    self.nat.dial_back_failed = true;
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
                self.nat.relay_reserved.insert(relay_peer_id);
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
        let since = self.nat.relayed.get(&peer).map(|(at, _)| at.elapsed());
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

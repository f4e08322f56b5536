//! How the event loop takes libp2p's events: connections, identify, ping,
//! floods, rpc requests and peer exchange.

use libp2p::TransportError;
use libp2p::core::ConnectedPoint;
use libp2p::core::upgrade::NegotiationError;
use libp2p::request_response::{self, InboundFailure};
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{DialError, SwarmEvent};
use libp2p::{Multiaddr, PeerId, identify, mdns, ping};
use zorilla_core::neighbours::keeper::DialFailure;
use zorilla_core::vivaldi::Position;

use crate::wire::{
    Checked, CoordinateFrame, FloodAck, FloodFrame, PeerRecord, RpcRequest, RpcResponse,
};

use super::super::swarm::{BehaviourEvent, dialable, tcp_port};
use super::super::types::{Event, RequestError, Responder};
use super::{Driver, Facts};
use crate::addrs::{is_relayed, passable_to, reachable_from};
use crate::membership::gate::{GateEvent, GateOut};

/// Most addresses remembered per peer.
const MAX_ADDRS_PER_PEER: usize = 8;
/// Most peers in one peer-exchange answer.
const MAX_PEER_RECORDS: usize = 32;

/// Whether a dial reached an address of the peer but failed in the
/// connection's handshake (protocol negotiation or noise), rather than for
/// want of an answer. Dials reuse our listen port, so two peers dialing
/// each other at the same moment make one TCP connection (simultaneous
/// open) on which both act as the dialer and both handshakes fail; the
/// keeper tries such a peer again rather than take it for dead.
fn failed_in_handshake(error: &DialError) -> bool {
    let DialError::Transport(errors) = error else {
        return false;
    };
    errors.iter().any(|(_, error)| {
        let TransportError::Other(error) = error else {
            return false;
        };
        // The transport's layers (timeout, upgrades) each give their
        // cause as the error's source.
        let mut cause: Option<&(dyn std::error::Error + 'static)> = error.get_ref().map(|e| e as _);
        while let Some(e) = cause {
            if e.is::<libp2p::noise::Error>() || e.is::<NegotiationError>() {
                return true;
            }
            cause = e.source();
        }
        false
    })
}

impl Driver {
    pub(super) async fn on_swarm_event(&mut self, event: SwarmEvent<GateOut<BehaviourEvent>>) {
        match event {
            SwarmEvent::NewListenAddr { address, .. } => {
                if let (Some(latency), Some(port)) = (&self.config.latency, tcp_port(&address))
                    && !is_relayed(&address)
                {
                    latency.topology.assign_port(port, &latency.site);
                }
                if !self.listen_addrs.contains(&address) {
                    self.listen_addrs.push(address.clone());
                }
                self.own.listening(address.clone());
                self.emit(Event::Listening { addr: address }).await;
            }
            SwarmEvent::ExpiredListenAddr { address, .. } => {
                self.listen_addrs.retain(|a| *a != address);
                self.own.expired(&address);
            }
            SwarmEvent::ListenerClosed {
                listener_id,
                reason,
                ..
            } => {
                let reason = match reason {
                    Ok(()) => "closed".to_string(),
                    Err(e) => e.to_string(),
                };
                self.relay_listener_closed(listener_id, &reason);
            }
            SwarmEvent::ExternalAddrConfirmed { address } => {
                // A dial-back (AutoNAT), a UPnP mapping or a relay's
                // reservation confirmed it; a loopback or link address is
                // no address for others (AutoNAT confirms one over
                // loopback), so it is not advertised.
                if is_relayed(&address) || self.own.dialed_back(&address) {
                    tracing::info!(addr = %address, "an address of ours is confirmed; advertising it");
                } else {
                    self.swarm.remove_external_address(&address);
                }
            }
            SwarmEvent::ExternalAddrExpired { address } => {
                self.own.dial_back_failed(&address);
            }
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                endpoint,
                ..
            } => {
                self.stats.connections += 1;
                let relayed = endpoint.is_relayed();
                self.nat_connected(peer_id, connection_id, relayed);
                // A relayed connection says nothing of where the peer is;
                // a direct one does.
                if !relayed || !self.via.contains_key(&peer_id) {
                    self.via
                        .insert(peer_id, endpoint.get_remote_address().clone());
                }
                match &endpoint {
                    ConnectedPoint::Dialer { address, .. } => {
                        self.remember_addrs(peer_id, [address.clone()]);
                    }
                    ConnectedPoint::Listener {
                        local_addr,
                        send_back_addr,
                    } => self.own.reached(local_addr, &peer_id, send_back_addr),
                }
                let now = self.now();
                self.keeper
                    .connected(peer_id, connection_id, endpoint.is_dialer(), now);
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                connection_id,
                num_established,
                ..
            } => {
                self.nat_disconnected(peer_id, connection_id, num_established);
                let now = self.now();
                if self.keeper.disconnected(&peer_id, &connection_id, now) {
                    self.emit(Event::PeerLost { peer: peer_id }).await;
                }
                if num_established == 0 {
                    self.via.remove(&peer_id);
                }
                if num_established == 0
                    && !self.keeper.remembers(&peer_id)
                    && !self.swarm.behaviour().streams.recently_used(&peer_id)
                {
                    // The address book keeps only peers the keeper
                    // remembers, and those streams may have to dial again
                    // (a circuit that ended at its relay's limit).
                    self.addrs.remove(&peer_id);
                }
                self.execute().await;
            }
            SwarmEvent::OutgoingConnectionError { peer_id, error, .. } => match error {
                DialError::DialPeerConditionFalse(_) | DialError::Aborted => {}
                DialError::Denied { cause } => {
                    // We are full (a neighbour is dialed again at a tick).
                    tracing::debug!(?peer_id, %cause, "dial denied locally");
                    if let Some(peer) = peer_id {
                        let now = self.now();
                        self.keeper.dial_failed(&peer, DialFailure::Denied, now);
                    }
                }
                error => {
                    let failure = if failed_in_handshake(&error) {
                        DialFailure::Handshake
                    } else {
                        DialFailure::Unreachable
                    };
                    tracing::debug!(?peer_id, %error, ?failure, "dial failed");
                    if let Some(peer) = peer_id {
                        let now = self.now();
                        self.keeper.dial_failed(&peer, failure, now);
                        self.execute().await;
                    }
                }
            },
            SwarmEvent::IncomingConnectionError {
                send_back_addr,
                error,
                ..
            } => {
                self.stats.failed_incoming += 1;
                tracing::debug!(%send_back_addr, %error, "incoming connection failed");
            }
            SwarmEvent::Behaviour(event) => self.on_gated_event(event).await,
            _ => {}
        }
    }

    pub(super) async fn on_gated_event(&mut self, event: GateOut<BehaviourEvent>) {
        match event {
            GateOut::Inner(event) => self.on_behaviour_event(event).await,
            GateOut::Gate(event) => self.on_gate_event(*event).await,
        }
    }

    /// What the membership gate of a closed grid reports.
    async fn on_gate_event(&mut self, event: GateEvent) {
        match event {
            GateEvent::Admitted { peer, membership } => {
                self.stats.members_admitted += 1;
                tracing::debug!(%peer, expires = membership.expires, inviter = ?membership.inviter, "peer's membership credential checked");
                let vouched_by = membership.inviter.unwrap_or(peer);
                self.emit(Event::Member { peer, vouched_by }).await;
            }
            GateEvent::Refused {
                peer,
                reason,
                offence,
            } => {
                self.stats.membership_refused += 1;
                tracing::info!(%peer, %reason, "refused a peer without a valid membership credential");
                // Its direct rank connections go too (a revoked member's
                // would otherwise last until they broke).
                if let Some(plane) = &self.direct {
                    plane.cut(&peer);
                }
                if offence {
                    self.strike(peer, &format!("no valid membership credential: {reason}"))
                        .await;
                }
            }
            GateEvent::RefusedUs { peer, reason } => {
                tracing::warn!(%peer, %reason, "a peer refused this node's membership credential");
            }
            GateEvent::Revoked { from, targets } => {
                for target in targets {
                    tracing::info!(?from, %target, "revocation kept and passed on");
                }
            }
        }
    }

    pub(super) async fn on_behaviour_event(&mut self, event: BehaviourEvent) {
        match event {
            BehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. }) => {
                self.on_identified(peer_id, info).await;
            }
            // Pushes (a peer's new addresses, say a relayed one, or
            // protocols) arrive as `Received` too.
            BehaviourEvent::Identify(_) => {}
            BehaviourEvent::Autonat(event) => self.on_autonat(event),
            BehaviourEvent::AutonatServer(_) => {}
            BehaviourEvent::Relay(event) => self.on_relay_server(event),
            BehaviourEvent::RelayClient(event) => self.on_relay_client(event),
            BehaviourEvent::Dcutr(event) => self.on_dcutr(event),
            BehaviourEvent::Upnp(event) => self.on_upnp(event),
            BehaviourEvent::Ping(ping::Event {
                peer,
                connection,
                result,
            }) => match result {
                Ok(rtt) => {
                    let now = self.now();
                    self.keeper.rtt(peer, rtt, now);
                    // A coordinate exchange, if one is due.
                    self.execute().await;
                }
                Err(error) => {
                    // A peer that does not answer pings is as good as dead
                    // (frozen, or cut off): replace it now rather than wait
                    // for TCP to notice.
                    tracing::info!(%peer, %error, "ping failed; dropping the peer");
                    let now = self.now();
                    self.keeper.ping_failed(peer, connection, now);
                    self.execute().await;
                }
            },
            BehaviourEvent::Mdns(mdns::Event::Discovered(found)) => {
                let mut learned = Vec::new();
                for (peer, addr) in found {
                    if peer == self.local || self.keeper.refused(&peer) {
                        continue;
                    }
                    self.remember_addrs(peer, [addr]);
                    learned.push(peer);
                }
                self.learned(learned).await;
            }
            BehaviourEvent::Mdns(mdns::Event::Expired(_)) => {}
            BehaviourEvent::Flood(event) => self.on_flood_event(event).await,
            BehaviourEvent::Rpc(event) => self.on_rpc_event(event).await,
            BehaviourEvent::Limits(never) => match never {},
            BehaviourEvent::Blocked(never) => match never {},
            BehaviourEvent::Streams(()) => {}
        }
    }

    async fn on_identified(&mut self, peer: PeerId, info: identify::Info) {
        if info.protocol_version != self.identify_version {
            tracing::warn!(
                %peer,
                theirs = %info.protocol_version,
                ours = %self.identify_version,
                "peer belongs to another network; refusing it"
            );
            // Both sides ask for the other's identify at once. Cut off at
            // once, the peer might not have read our answer yet: it would
            // never learn that we are foreign, and would dial us again
            // whenever mDNS showed us anew. So the keeper bans it only a
            // moment later; it cannot use our protocols meanwhile.
            let now = self.now();
            self.keeper.identified(peer, false, now);
            return;
        }
        self.note_protocols(peer, &info);
        // Where it sees us: a candidate address of ours until a dial-back
        // (AutoNAT) confirms it, or without AutoNAT enough peers agree
        // (crate::addrs), then advertised (identify sends our external
        // addresses with the listen addresses).
        if let Some(via) = self.via.get(&peer).filter(|v| !is_relayed(v)) {
            let via = via.clone();
            if let Some(confirmed) = self.own.observed(&info.observed_addr, &peer, &via) {
                tracing::info!(addr = %confirmed, "peers confirm an address of ours; advertising it");
                self.swarm.add_external_address(confirmed);
            }
            if self.own.behind_nat() {
                let now = self.now();
                self.nat.policy.seen_behind_nat(now);
            }
        }
        // Of what it says it listens on, what is true for us (not its
        // loopback address unless it runs on our machine).
        let via = self.via.get(&peer);
        let addrs: Vec<Multiaddr> = info
            .listen_addrs
            .into_iter()
            .filter(|a| dialable(a) && reachable_from(a, via))
            .collect();
        if !addrs.is_empty() {
            self.addrs.insert(peer, Vec::new());
            self.remember_addrs(peer, addrs);
        }
        let now = self.now();
        if self.keeper.identified(peer, true, now) {
            self.emit(Event::PeerConnected { peer }).await;
        }
        self.execute().await;
    }

    async fn on_flood_event(
        &mut self,
        event: request_response::Event<Checked<FloodFrame>, FloodAck>,
    ) {
        match event {
            request_response::Event::Message {
                peer,
                message:
                    request_response::Message::Request {
                        request, channel, ..
                    },
                ..
            } => {
                let _ = self
                    .swarm
                    .behaviour_mut()
                    .flood
                    .send_response(channel, FloodAck);
                match request {
                    Checked::Valid(frame) => self.on_flood(peer, frame).await,
                    Checked::Invalid(reason) => self.strike(peer, &reason).await,
                }
            }
            request_response::Event::Message { .. }
            | request_response::Event::ResponseSent { .. } => {}
            request_response::Event::OutboundFailure { peer, error, .. } => {
                self.stats.flood_send_failures += 1;
                tracing::debug!(%peer, %error, "flood copy not delivered");
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                self.on_inbound_failure(peer, error).await;
            }
        }
    }

    async fn on_rpc_event(
        &mut self,
        event: request_response::Event<Checked<RpcRequest>, RpcResponse>,
    ) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => {
                    self.stats.requests_received += 1;
                    match request {
                        // Dropping the channel tells the sender it failed.
                        Checked::Invalid(reason) => self.strike(peer, &reason).await,
                        Checked::Valid(RpcRequest::Link(on)) => {
                            // Not waiting for identify (it may still be on
                            // its way). Anyone who knows the network's name
                            // can speak this protocol, but a link only
                            // makes us forward floods to the peer.
                            self.keeper.link_requested(peer, on);
                            let _ = self
                                .swarm
                                .behaviour_mut()
                                .rpc
                                .send_response(channel, RpcResponse::Done);
                        }
                        Checked::Valid(RpcRequest::Peers) => {
                            let records = self.peer_records(&peer);
                            let _ = self
                                .swarm
                                .behaviour_mut()
                                .rpc
                                .send_response(channel, RpcResponse::Peers(records));
                        }
                        Checked::Valid(RpcRequest::Coordinates(CoordinateFrame(theirs))) => {
                            let ours = CoordinateFrame(self.keeper.position());
                            let _ = self
                                .swarm
                                .behaviour_mut()
                                .rpc
                                .send_response(channel, RpcResponse::Coordinates(ours));
                            self.coordinates_received(peer, theirs).await;
                        }
                        Checked::Valid(RpcRequest::App(payload)) => {
                            let now = self.now();
                            self.keeper.app_traffic(peer, now);
                            let rtt = self.keeper.table().rtt(&peer);
                            self.emit(Event::Request {
                                peer,
                                payload,
                                responder: Responder { channel },
                                rtt,
                            })
                            .await;
                        }
                    }
                }
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some((peer, reply)) = self.pending_requests.remove(&request_id) {
                        let result = match response {
                            RpcResponse::App(payload) => Ok(payload),
                            RpcResponse::Peers(_)
                            | RpcResponse::Done
                            | RpcResponse::Coordinates(_) => {
                                Err(RequestError::UnexpectedResponse(peer))
                            }
                        };
                        let _ = reply.send(result);
                    } else if let Some(from) = self.peer_exchanges.remove(&request_id)
                        && self.keeper.exchange_ended(&from)
                        && let RpcResponse::Peers(records) = response
                    {
                        self.on_peer_records(from, records).await;
                    } else if let RpcResponse::Coordinates(CoordinateFrame(theirs)) = response {
                        self.coordinates_received(peer, theirs).await;
                    }
                }
            },
            request_response::Event::OutboundFailure {
                peer,
                request_id,
                error,
                ..
            } => {
                if let Some(from) = self.peer_exchanges.remove(&request_id) {
                    self.keeper.exchange_ended(&from);
                }
                // A response that does not decode is the responder's fault.
                if let request_response::OutboundFailure::Io(e) = &error
                    && e.kind() == std::io::ErrorKind::InvalidData
                {
                    self.strike(peer, &e.to_string()).await;
                }
                if let Some((_, reply)) = self.pending_requests.remove(&request_id) {
                    let _ = reply.send(Err(RequestError::Failed {
                        peer,
                        reason: error.to_string(),
                    }));
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                self.on_inbound_failure(peer, error).await;
            }
            request_response::Event::ResponseSent { peer, .. } => {
                // A newcomer that came in above our limit has what it came
                // for once it has our peer records.
                let now = self.now();
                let facts = Facts {
                    addrs: &self.addrs,
                    pending_requests: &self.pending_requests,
                    streams: &self.swarm.behaviour().streams,
                };
                self.keeper.peers_sent(&peer, now, &facts);
                self.execute().await;
            }
        }
    }

    /// `peer` told us its network coordinate (checked when decoded).
    async fn coordinates_received(&mut self, peer: PeerId, theirs: Position) {
        let now = self.now();
        if let Err(why) = self.keeper.coordinates_received(peer, theirs, now) {
            // Out-of-range frames do not decode; the keeper checks anyway
            // and counts an offence.
            tracing::warn!(%peer, %why, "refused a peer's network coordinate");
        }
        self.execute().await;
    }

    async fn on_inbound_failure(&mut self, peer: PeerId, error: InboundFailure) {
        // Bad frames arrive as `Checked::Invalid`; what is left here
        // (timeouts, closed connections, omitted responses) is nobody's
        // misbehaviour.
        tracing::debug!(%peer, %error, "inbound request failed");
    }

    pub(super) fn request_peers(&mut self, peer: PeerId) {
        let id = self.send_rpc(peer, RpcRequest::Peers);
        self.peer_exchanges.insert(id, peer);
    }

    /// Some peers for a peer exchange, in the keeper's order (neighbours
    /// first, then other connected peers, then other measured ones).
    fn peer_records(&mut self, asker: &PeerId) -> Vec<PeerRecord> {
        // All of them: only those with an address true for the asker are
        // sent (no loopback address to a node on another host, no
        // link-local address to anyone).
        let via = self.via.get(asker);
        self.keeper
            .peers_requested(asker, usize::MAX)
            .into_iter()
            .filter_map(|peer| {
                let addrs: Vec<Multiaddr> = self
                    .addrs
                    .get(&peer)?
                    .iter()
                    .filter(|a| passable_to(a, via))
                    .cloned()
                    .collect();
                (!addrs.is_empty()).then_some(PeerRecord { peer, addrs })
            })
            .take(MAX_PEER_RECORDS)
            .collect()
    }

    /// The answer to our peer exchange from a peer of our network.
    async fn on_peer_records(&mut self, from: PeerId, records: Vec<PeerRecord>) {
        // What `from` tells is true for it; a loopback address from a peer
        // on another host is not true for us, nor a link-local one of a
        // third peer from anyone.
        let via = self.via.get(&from).cloned();
        let mut learned = Vec::new();
        for record in records.into_iter().take(MAX_PEER_RECORDS) {
            let peer = record.peer;
            // A peer taken for dead is heard of again if an address is new
            // (see `PeerKeeper::new_address`); banned and foreign ones not.
            if peer == self.local || (self.keeper.refused(&peer) && !self.keeper.is_dead(&peer)) {
                continue;
            }
            let addrs: Vec<Multiaddr> = record
                .addrs
                .into_iter()
                .filter(|a| dialable(a) && passable_to(a, via.as_ref()))
                .collect();
            if addrs.is_empty() {
                continue;
            }
            // New addresses of a known peer too (a relayed one comes
            // after the peer's first, unreachable, ones); bounded per peer.
            if self.remember_addrs(peer, addrs) {
                self.keeper.new_address(&peer);
            }
            if !self.keeper.refused(&peer) {
                learned.push(peer);
            }
        }
        self.learned(learned).await;
    }

    /// Peers learned of become the keeper's candidates (and probes start).
    async fn learned(&mut self, peers: Vec<PeerId>) {
        let now = self.now();
        let facts = Facts {
            addrs: &self.addrs,
            pending_requests: &self.pending_requests,
            streams: &self.swarm.behaviour().streams,
        };
        self.keeper.learned(peers, now, &facts);
        self.execute().await;
    }

    /// Whether `peer` serves as a relay (identify lists the hop protocol).
    fn note_protocols(&mut self, peer: PeerId, info: &identify::Info) {
        let capable = info.protocols.contains(&libp2p::relay::HOP_PROTOCOL_NAME)
            && self.swarm.is_connected(&peer);
        self.nat.policy.relay_capable(peer, capable);
    }

    /// Adds `addrs` to what we know of `peer` (dialable ones, at most
    /// `MAX_ADDRS_PER_PEER` in all); returns whether one was new.
    fn remember_addrs(&mut self, peer: PeerId, addrs: impl IntoIterator<Item = Multiaddr>) -> bool {
        let known = self.addrs.entry(peer).or_default();
        let mut added = false;
        for addr in addrs {
            if dialable(&addr) && !known.contains(&addr) && known.len() < MAX_ADDRS_PER_PEER {
                known.push(addr);
                added = true;
            }
        }
        added
    }

    /// Dials `peer` at its known addresses unless connected or dialing.
    /// Returns false if there is no address to dial.
    pub(super) fn dial_peer(&mut self, peer: PeerId) -> bool {
        let Some(addrs) = self.addrs.get(&peer).filter(|a| !a.is_empty()).cloned() else {
            return false;
        };
        let opts = DialOpts::peer_id(peer)
            .addresses(addrs)
            .condition(PeerCondition::DisconnectedAndNotDialing)
            .build();
        match self.swarm.dial(opts) {
            Ok(()) => true,
            Err(DialError::DialPeerConditionFalse(_)) => true,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "cannot dial");
                false
            }
        }
    }

    /// Counts an offence against `peer`; at the limit it is banned.
    pub(super) async fn strike(&mut self, peer: PeerId, reason: &str) {
        self.stats.misbehaviour += 1;
        let now = self.now();
        let offences = self.keeper.offence(peer, now);
        tracing::warn!(%peer, reason, offences = offences.count, "dropped a bad message");
        if offences.banned {
            tracing::warn!(%peer, "too many bad messages; disconnecting and refusing the peer");
        }
        self.execute().await;
    }

    /// The periodic work: the keeper's tick (expiries, probes, the
    /// neighbour set, closing unneeded connections, peer exchange), then
    /// the address book pruned to the peers the keeper remembers or streams
    /// used lately.
    pub(super) async fn maintain(&mut self) {
        let now = self.now();
        let facts = Facts {
            addrs: &self.addrs,
            pending_requests: &self.pending_requests,
            streams: &self.swarm.behaviour().streams,
        };
        self.keeper.tick(now, &facts);
        self.execute().await;
        self.nat_tick();
        self.swarm.behaviour_mut().tick();
        let keeper = &self.keeper;
        let streams = &self.swarm.behaviour().streams;
        self.addrs
            .retain(|peer, _| keeper.remembers(peer) || streams.recently_used(peer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transport_error(error: std::io::Error) -> DialError {
        let addr: Multiaddr = "/ip4/127.0.0.1/tcp/1".parse().unwrap();
        DialError::Transport(vec![(addr, TransportError::Other(error))])
    }

    #[test]
    fn a_failed_handshake_is_told_from_a_peer_that_does_not_answer() {
        // As the transport's layers wrap it: the noise error is a cause.
        #[derive(Debug, thiserror::Error)]
        #[error("Handshake failed")]
        struct Layer(#[source] libp2p::noise::Error);
        let noise = libp2p::noise::Error::Io(std::io::Error::other("input error"));
        assert!(failed_in_handshake(&transport_error(
            std::io::Error::other(Layer(noise))
        )));
        assert!(failed_in_handshake(&transport_error(
            std::io::Error::other(NegotiationError::Failed)
        )));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!failed_in_handshake(&transport_error(refused)));
        assert!(!failed_in_handshake(&DialError::NoAddresses));
    }

    /// A TCP simultaneous open, as our transport sees it: what we send
    /// comes back as if from the other dialer. Our dial fails in its
    /// handshake, and is told so.
    #[tokio::test]
    async fn a_simultaneous_open_is_a_failed_handshake() {
        let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = echo.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (socket, _) = echo.accept().await.unwrap();
            let (mut rx, mut tx) = socket.into_split();
            let _ = tokio::io::copy(&mut rx, &mut tx).await;
        });
        let config = crate::config::OverlayConfig::local("echo");
        let key = libp2p::identity::Keypair::generate_ed25519();
        let mut swarm = super::super::super::swarm::build_swarm(&config, &key).unwrap();
        let addr: Multiaddr = format!("/ip4/127.0.0.1/tcp/{port}").parse().unwrap();
        let opts = DialOpts::peer_id(PeerId::random())
            .addresses(vec![addr])
            .build();
        swarm.dial(opts).unwrap();
        let error = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            loop {
                if let SwarmEvent::OutgoingConnectionError { error, .. } =
                    futures::StreamExt::select_next_some(&mut swarm).await
                {
                    return error;
                }
            }
        })
        .await
        .expect("the dial ends");
        assert!(failed_in_handshake(&error), "{error}");
    }
}

//! The overlay's event loop: it feeds the core's peer keeper and flood
//! router libp2p's events and the time, and executes what they decide and
//! what the node asks ([`Command`]s).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use futures::StreamExt;
use libp2p::core::transport::ListenerId;
use libp2p::request_response::OutboundRequestId;
use libp2p::swarm::ConnectionId;
use libp2p::{Multiaddr, PeerId, Swarm};
use tokio::sync::mpsc;
use tokio::time::Instant;
use zorilla_core::Time;
use zorilla_core::advert::FloodHeader;
use zorilla_core::bounded::make_room;
use zorilla_core::flood::{DropReason, FloodId, FloodRouter, HomeDistance, Verdict};
use zorilla_core::neighbours::keeper::{
    Action, DialFailure, DisconnectReason, PeerFacts, PeerKeeper,
};
use zorilla_core::neighbours::nat::NatPolicy;

use crate::addrs::OwnAddrs;
use crate::config::OverlayConfig;
use crate::wire::{
    self, Checked, CoordinateFrame, FloodFrame, MAX_FLOOD_RECIPIENTS, RpcRequest, RpcResponse,
};

use super::handle::{Command, ReplySlot};
use super::swarm::{BehaviourEvent, Gated};
use super::types::{Event, KnownPeer, Neighbour, OverlayError, OverlayStats, RequestError};
use crate::membership::gate::GateOut;

mod events;
mod nat;

/// How often we ask our peers for the addresses of one peer we want to
/// reach and know none of ([`Driver::look_up`]).
const LOOKUP_EVERY: Duration = Duration::from_secs(1);
/// How many peers one look-up asks.
const LOOKUP_FANOUT: usize = 3;
/// The most peers whose last look-up we remember.
const MAX_LOOKUPS: usize = 256;

/// What only the event loop knows about a peer, for the keeper.
struct Facts<'a> {
    addrs: &'a HashMap<PeerId, Vec<Multiaddr>>,
    pending_requests: &'a HashMap<OutboundRequestId, (PeerId, ReplySlot)>,
    streams: &'a crate::streams::Behaviour,
}

impl PeerFacts<PeerId> for Facts<'_> {
    fn busy(&self, peer: &PeerId) -> bool {
        self.pending_requests.values().any(|(p, _)| p == peer) || self.streams.in_use(peer)
    }

    fn dialable(&self, peer: &PeerId) -> bool {
        self.addrs.get(peer).is_some_and(|a| !a.is_empty())
    }
}

pub(super) struct Driver {
    pub(super) config: OverlayConfig,
    pub(super) local: PeerId,
    pub(super) identify_version: String,
    pub(super) swarm: Swarm<Gated>,
    pub(super) commands: mpsc::Receiver<Command>,
    pub(super) events: mpsc::Sender<Event>,
    /// The peer-keeping policy.
    pub(super) keeper: PeerKeeper<PeerId, ConnectionId>,
    pub(super) router: FloodRouter<PeerId>,
    pub(super) start: Instant,
    pub(super) listen_addrs: Vec<Multiaddr>,
    /// Our addresses and what we believe of each ([`crate::addrs`]).
    pub(super) own: OwnAddrs<PeerId>,
    /// Listen addresses of peers, for dialing; pruned to known peers.
    pub(super) addrs: HashMap<PeerId, Vec<Multiaddr>>,
    /// Where each connected peer's connection comes from (its remote
    /// address): which of the addresses we know are true for it
    /// ([`crate::addrs`]).
    pub(super) via: HashMap<PeerId, Multiaddr>,
    pub(super) pending_requests: HashMap<OutboundRequestId, (PeerId, ReplySlot)>,
    /// Our outstanding peer-exchange requests, with whom.
    pub(super) peer_exchanges: HashMap<OutboundRequestId, PeerId>,
    /// When we last asked our peers for the addresses of each peer the
    /// application wanted to reach and we knew none of ([`Driver::look_up`]).
    pub(super) lookups: BTreeMap<PeerId, Time>,
    pub(super) stats: OverlayStats,
    /// NAT traversal's state ([`nat`]).
    pub(super) nat: NatState,
    /// The rank data plane, if on: a peer the membership gate refuses is
    /// cut off there too.
    pub(super) direct: Option<std::sync::Arc<crate::direct::DirectPlane>>,
}

/// What the event loop keeps for NAT traversal: the core's policy, and the
/// listeners of the reservations it asked for (at most its configured
/// number).
pub(super) struct NatState {
    /// The decisions: reachability, which relays, which relayed
    /// connections to close.
    pub(super) policy: NatPolicy<PeerId, ConnectionId>,
    /// The relayed listener of each reservation asked for.
    pub(super) listeners: BTreeMap<PeerId, ListenerId>,
    /// Whether our relay server offers the hop protocol (`None` before the
    /// first tick).
    pub(super) serving: Option<bool>,
}

impl NatState {
    pub(super) fn new(config: &crate::config::NatConfig) -> NatState {
        NatState {
            policy: NatPolicy::new(zorilla_core::neighbours::nat::NatConfig {
                reservations: config.reservations,
                reachability_grace: config.reachability_grace,
                relay_retry: nat::RELAY_RETRY,
            }),
            listeners: BTreeMap::new(),
            serving: None,
        }
    }
}

impl Driver {
    pub(super) async fn run(mut self, early: Vec<GateOut<BehaviourEvent>>) {
        for event in early {
            self.on_gated_event(event).await;
        }
        let mut tick = tokio::time::interval(self.config.refresh_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let bootstrap_at = self.bootstrap_at();
            tokio::select! {
                command = self.commands.recv() => match command {
                    None | Some(Command::Shutdown) => break,
                    Some(Command::Misbehaved { peer, reason }) => self.strike(peer, &reason).await,
                    Some(command) => self.on_command(command),
                },
                event = self.swarm.select_next_some() => self.on_swarm_event(event).await,
                _ = tick.tick() => self.maintain().await,
                () = tokio::time::sleep_until(bootstrap_at.unwrap_or_else(Instant::now)),
                    if bootstrap_at.is_some() => {
                    let now = self.now();
                    self.keeper.bootstrap_retry(now);
                    self.execute().await;
                }
            }
        }
        tracing::debug!(peer = %self.local, "overlay stopped");
    }

    /// When to dial the bootstrap peers again: the keeper's time while the
    /// node is alone, and no dial is under way.
    fn bootstrap_at(&self) -> Option<Instant> {
        let pending = self
            .swarm
            .network_info()
            .connection_counters()
            .num_pending_outgoing();
        let at = self.keeper.bootstrap_due().filter(|_| pending == 0)?;
        Some(self.start + at)
    }

    /// Executes the keeper's actions.
    async fn execute(&mut self) {
        while let Some(action) = self.keeper.poll_action() {
            match action {
                Action::Dial(peer) => {
                    if !self.dial_peer(peer) {
                        let now = self.now();
                        self.keeper.dial_failed(&peer, DialFailure::NotStarted, now);
                    }
                }
                Action::DialBootstrap => {
                    for addr in self.config.bootstrap.clone() {
                        if let Err(e) = self.swarm.dial(addr.clone()) {
                            tracing::debug!(%addr, error = %e, "cannot dial bootstrap peer");
                        }
                    }
                }
                Action::Close(id) => {
                    self.swarm.close_connection(id);
                }
                Action::Disconnect { peer, reason } => {
                    match reason {
                        DisconnectReason::Silent => tracing::info!(
                            %peer,
                            "no ping answered for a ping interval and timeout; dropping the peer"
                        ),
                        DisconnectReason::NotIdentified => {
                            tracing::debug!(%peer, "peer did not identify itself; closing");
                        }
                    }
                    let _ = self.swarm.disconnect_peer_id(peer);
                }
                Action::Link { peer, on } => self.send_link(peer, on),
                Action::AskPeers(peer) => self.request_peers(peer),
                Action::ExchangeCoordinates(peer) => self.send_coordinates(peer),
                Action::Ban(peer) => {
                    self.stats.bans += 1;
                    self.swarm.behaviour_mut().blocked.block_peer(peer);
                    self.addrs.remove(&peer);
                }
                Action::Unban(peer) => {
                    self.swarm.behaviour_mut().blocked.unblock_peer(peer);
                }
                Action::Forgotten(peer) => self.router.peer_lost(&peer),
                Action::NeighboursChanged { added, removed } => {
                    tracing::debug!(
                        added = added.len(),
                        removed = removed.len(),
                        "neighbour set changed"
                    );
                    self.emit(Event::NeighboursChanged { added, removed }).await;
                }
            }
        }
    }

    /// The core's notion of now.
    fn now(&self) -> Time {
        self.start.elapsed()
    }

    async fn emit(&mut self, event: Event) {
        // Back-pressure rather than loss; a node that dropped its receiver
        // simply gets nothing.
        let _ = self.events.send(event).await;
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Flood {
                id,
                header,
                payload,
                reply,
            } => {
                let result = self.originate(id, header, payload);
                let _ = reply.send(result);
            }
            Command::Request {
                peer,
                payload,
                reply,
            } => {
                let size = payload.len();
                let max = self.config.max_message_size;
                // The frame adds a few bytes of CBOR around the payload.
                if size + 16 > max {
                    let _ = reply.send(Err(RequestError::TooLarge { size, max }));
                    return;
                }
                self.look_up(peer);
                let id = self.send_rpc(peer, RpcRequest::App(payload));
                self.pending_requests.insert(id, (peer, reply));
                let now = self.now();
                self.keeper.app_traffic(peer, now);
            }
            Command::OpenStream { peer, reply } => {
                self.look_up(peer);
                let addrs = self.addrs.get(&peer).cloned().unwrap_or_default();
                let now = self.now();
                self.keeper.app_traffic(peer, now);
                self.swarm.behaviour_mut().streams.open(peer, addrs, reply);
            }
            Command::AcceptStreams(tx) => self.swarm.behaviour_mut().streams.accept(tx),
            Command::Revoke { items, reply } => {
                let items = items.into_iter().map(serde_bytes::ByteBuf::from).collect();
                let result = self
                    .swarm
                    .behaviour_mut()
                    .revoke(items, None)
                    .map_err(OverlayError::Revocation);
                let _ = reply.send(result);
            }
            Command::Respond {
                responder,
                payload,
                reply,
            } => {
                let size = payload.len();
                let max = self.config.max_message_size;
                let result = if size + 16 > max {
                    Err(OverlayError::TooLarge { size, max })
                } else {
                    self.swarm
                        .behaviour_mut()
                        .rpc
                        .send_response(responder.channel, RpcResponse::App(payload))
                        .map_err(|_| OverlayError::ResponseFailed)
                };
                let _ = reply.send(result);
            }
            Command::Dial { addr, reply } => {
                let result = self
                    .swarm
                    .dial(addr.clone())
                    .map_err(|e| OverlayError::Dial {
                        addr,
                        reason: e.to_string(),
                    });
                let _ = reply.send(result);
            }
            Command::Neighbours(reply) => {
                let neighbours = self
                    .keeper
                    .table()
                    .neighbours()
                    .map(|(peer, kind, rtt)| Neighbour {
                        peer: *peer,
                        kind,
                        rtt,
                    })
                    .collect();
                let _ = reply.send(neighbours);
            }
            Command::Links(reply) => {
                let _ = reply.send(self.keeper.links());
            }
            Command::KnownPeers(reply) => {
                let table = self.keeper.table();
                let known = table
                    .known()
                    .map(|(peer, rtt)| KnownPeer {
                        peer: *peer,
                        rtt,
                        kind: table.kind(peer),
                        connected: self.swarm.is_connected(peer),
                        addrs: self.addrs.get(peer).cloned().unwrap_or_default(),
                        coord: self.keeper.peer_position(peer).map(|p| p.coord),
                    })
                    .collect();
                let _ = reply.send(known);
            }
            Command::Position(reply) => {
                let _ = reply.send(self.keeper.position());
            }
            Command::ListenAddrs(reply) => {
                let _ = reply.send(self.listen_addrs.clone());
            }
            Command::OwnAddrs(reply) => {
                let _ = reply.send(self.own.report());
            }
            Command::Stats(reply) => {
                let open = self
                    .swarm
                    .network_info()
                    .connection_counters()
                    .num_established();
                let stats = OverlayStats {
                    router: self.router.stats(),
                    relay_reservations: self.nat.policy.reserved() as u64,
                    open_connections: u64::from(open),
                    foreign_peers: self.keeper.foreign_peers() as u64,
                    banned_peers: self.keeper.banned_peers() as u64,
                    pending_bans: self.keeper.pending_bans() as u64,
                    revocations: self.swarm.behaviour().revocations() as u64,
                    ..self.stats
                };
                let _ = reply.send(stats);
            }
            // Handled in the loop, which can await the ban.
            Command::Misbehaved { .. } | Command::Shutdown => {}
        }
    }

    fn originate(
        &mut self,
        id: FloodId,
        header: FloodHeader,
        payload: Vec<u8>,
    ) -> Result<usize, OverlayError> {
        let probe = FloodFrame {
            id,
            origin: self.local,
            header,
            payload,
            also: Vec::new(),
        };
        let size = wire::encode(&probe).map_or(usize::MAX, |b| b.len());
        let max = self.config.max_message_size;
        if size > max {
            return Err(OverlayError::TooLarge { size, max });
        }
        let neighbours = self.keeper.links();
        let forward = self.router.originate(id, header, &neighbours);
        let copies = forward.len();
        self.send_copies(id, self.local, &probe.payload, forward);
        Ok(copies)
    }

    /// Sends `request` to `peer` on the rpc protocol, dialing the
    /// addresses we know of it if we are not connected.
    /// The application wants to reach `peer`, which is not connected and
    /// of which we know no address: asks up to [`LOOKUP_FANOUT`] connected
    /// peers (neighbours first) for their peers, out of the exchange's
    /// turn, at most once per [`LOOKUP_EVERY`] per peer. The answers are
    /// taken as any peer exchange's. Without this a job's ranks on two
    /// nodes that had not met waited for the next exchange (every
    /// `peer_exchange_interval`) before they could reach each other.
    fn look_up(&mut self, peer: PeerId) {
        if peer == self.local
            || self.swarm.is_connected(&peer)
            || self.addrs.get(&peer).is_some_and(|a| !a.is_empty())
        {
            return;
        }
        let now = self.now();
        if self
            .lookups
            .get(&peer)
            .is_some_and(|at| now.saturating_sub(*at) < LOOKUP_EVERY)
        {
            return;
        }
        make_room(&mut self.lookups, &peer, MAX_LOOKUPS, |at| *at);
        self.lookups.insert(peer, now);
        let neighbours: Vec<PeerId> = self
            .keeper
            .table()
            .neighbours()
            .map(|(p, _, _)| *p)
            .filter(|p| self.swarm.is_connected(p))
            .collect();
        let others: Vec<PeerId> = self.swarm.connected_peers().copied().collect();
        let mut asked = BTreeSet::new();
        for partner in neighbours.into_iter().chain(others) {
            if asked.len() >= LOOKUP_FANOUT {
                break;
            }
            if partner != peer && asked.insert(partner) {
                self.request_peers(partner);
            }
        }
    }

    pub(super) fn send_rpc(&mut self, peer: PeerId, request: RpcRequest) -> OutboundRequestId {
        let addrs = self.addrs.get(&peer).cloned().unwrap_or_default();
        self.stats.requests_sent += 1;
        self.swarm.behaviour_mut().rpc.send_request_with_addresses(
            &peer,
            Checked::Valid(request),
            addrs,
        )
    }

    /// Tells `peer` whether it is our neighbour.
    fn send_link(&mut self, peer: PeerId, on: bool) {
        self.send_rpc(peer, RpcRequest::Link(on));
    }

    /// Sends `peer` our network coordinate; its answer carries its own.
    fn send_coordinates(&mut self, peer: PeerId) {
        let ours = CoordinateFrame(self.keeper.position());
        self.send_rpc(peer, RpcRequest::Coordinates(ours));
    }

    fn send_copies(
        &mut self,
        id: FloodId,
        origin: PeerId,
        payload: &[u8],
        forward: Vec<(PeerId, FloodHeader)>,
    ) {
        let recipients: Vec<(PeerId, u64)> = if forward.len() <= MAX_FLOOD_RECIPIENTS + 1 {
            forward
                .iter()
                .map(|(peer, _)| (*peer, wire::peer_digest(peer)))
                .collect()
        } else {
            Vec::new()
        };
        for (peer, header) in forward {
            let mut frame = FloodFrame {
                id,
                origin,
                header,
                payload: payload.to_vec(),
                also: recipients
                    .iter()
                    .filter(|(p, _)| *p != peer)
                    .map(|(_, digest)| *digest)
                    .collect(),
            };
            let mut size = wire::encode(&frame).map_or(0, |b| b.len());
            if size > self.config.max_message_size {
                // The list would make the frame too large for the
                // receiver: the copy goes without it (more duplicates).
                frame.also.clear();
                size = wire::encode(&frame).map_or(0, |b| b.len());
            }
            self.stats.flood_frames_sent += 1;
            self.stats.flood_bytes_sent += size as u64;
            let addrs = self.addrs.get(&peer).cloned().unwrap_or_default();
            self.swarm
                .behaviour_mut()
                .flood
                .send_request_with_addresses(&peer, Checked::Valid(frame), addrs);
        }
    }

    async fn on_flood(&mut self, from: PeerId, frame: FloodFrame) {
        self.stats.flood_frames_received += 1;
        if !self.keeper.is_verified(&from) {
            tracing::debug!(%from, "flood from a peer not identified yet; dropped");
            return;
        }
        if frame.also.len() > MAX_FLOOD_RECIPIENTS {
            self.strike(from, "flood copy naming too many other recipients")
                .await;
            return;
        }
        let home = Origin {
            home: frame.origin,
            rtt: self.keeper.table().rtt(&frame.origin),
        };
        let neighbours = self.keeper.links();
        let also: Vec<PeerId> = neighbours
            .iter()
            .map(|(peer, _)| *peer)
            .filter(|peer| frame.also.contains(&wire::peer_digest(peer)))
            .collect();
        let now = self.now();
        match self.router.receive_with(
            &from,
            frame.id,
            frame.header,
            &also,
            &home,
            &neighbours,
            now,
        ) {
            Verdict::Deliver { forward, distance } => {
                self.send_copies(frame.id, frame.origin, &frame.payload, forward);
                self.emit(Event::Flood {
                    id: frame.id,
                    origin: frame.origin,
                    header: frame.header,
                    payload: frame.payload,
                    from,
                    distance,
                })
                .await;
            }
            Verdict::Reforward { forward } => {
                self.send_copies(frame.id, frame.origin, &frame.payload, forward);
            }
            Verdict::Drop(DropReason::NoTtl) => self.strike(from, "flood copy without TTL").await,
            Verdict::Drop(reason) => {
                tracing::trace!(%from, ?reason, id = ?frame.id, "flood copy dropped");
            }
        }
    }
}

/// What this node knows of a flood's home: which node it is (so that the
/// router keeps its neighbours' distances per home), and its own measured
/// RTT to it, if any (the path's sum decides the rest).
struct Origin {
    home: PeerId,
    rtt: Option<Duration>,
}

impl HomeDistance<PeerId> for Origin {
    fn own(&self) -> Option<Duration> {
        self.rtt
    }

    fn peer(&self, _: &PeerId) -> Option<Duration> {
        None
    }

    fn home(&self) -> Option<&PeerId> {
        Some(&self.home)
    }
}

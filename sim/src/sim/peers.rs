//! The simulated nodes' overlay: ours is the real peer keeping of
//! `zorilla-core` ([`PeerKeeper`], what `zorilla-overlay` runs over
//! libp2p) over simulated connections; the paper's is a Bamboo-like
//! overlay built by the simulator (see [`Sim::build_overlay_bamboo`]).
//!
//! A simulated connection opens at once when a node dials a live node (a
//! dial of a failed node fails at once); both sides identify themselves at
//! once and measure the connection's RTT (`samples` pings each); a peer
//! exchange is answered at once. The keeper's ticks (one a second in the
//! real overlay) run for `warmup_ticks` seconds before the first job, and
//! as many for a node that rejoins. During the run a keeper ticks (once a
//! ping interval, [`Event::KeeperTick`], at a phase drawn from the seed)
//! only while its node is connected to a failed peer, and for a ping
//! interval and a ping timeout after: each tick answers the node's pings
//! within the tick (a live peer with the RTT the keeper already has, so
//! the near sets do not move; a failed one not at all), then ticks the
//! keeper. So a failure is noticed in two ways, as in the real overlay:
//! its connections close when the failure is detected (the scenario's
//! `detect_after_s`), and a peer that answered no ping for a ping interval
//! and a ping timeout is disconnected by the keeper of each node connected
//! to it (and replaced if it was a neighbour), whichever comes first. A
//! run without failures has no ticks; the ticks go on only while other
//! events are pending, so a run still ends when its work does.
//!
//! The pings themselves go on after the warm-up, as in the real overlay
//! ([`Event::PingRound`], once a ping interval per node at its phase,
//! answered like a tick's and without the tick), for the scenario's
//! `ping_rounds` intervals (120 by default, again after a node rejoins):
//! they change no neighbour set, but they are what the keepers' network
//! coordinates learn from, and the coordinate exchanges a keeper asks for
//! ([`Action::ExchangeCoordinates`]) are delivered at once, like a peer
//! exchange. The rounds' number is bounded so that a run's cost does not
//! grow with its length: every round is every connection's peer keeping
//! (10 `full` topologies took 2.3 times as long to simulate with pings
//! for the whole run, 1.8 times with 120 rounds), while coordinates move
//! little after the first two minutes on a grid whose RTTs do not change
//! (BENCHMARKS.md, "Network coordinates").

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use zorilla_core::Time;
use zorilla_core::neighbours::keeper::{Action, DialFailure, KeeperConfig, PeerFacts, PeerKeeper};
use zorilla_core::neighbours::{LinkKind, NeighbourConfig};

use super::node_overlay::NodeOverlay;
use super::{Event, Sim};

/// Most peers in one peer-exchange answer (the overlay's limit).
const MAX_PEER_RECORDS: usize = 32;
/// A bound on the actions one burst of peer keeping may take, so that a
/// policy that never settles stops the run with a clear message.
const MAX_ACTIONS_PER_BURST: usize = 50_000_000;

/// Every simulated peer can be dialed, and no application keeps a
/// connection busy (the jobs' own connections are not modelled).
struct SimFacts;

impl PeerFacts<u32> for SimFacts {
    fn busy(&self, _: &u32) -> bool {
        false
    }

    fn dialable(&self, _: &u32) -> bool {
        true
    }
}

impl Sim {
    /// The keeper's settings: the overlay's defaults with the scenario's
    /// neighbour counts.
    pub(super) fn keeper_config(&self) -> KeeperConfig {
        let setup = &self.scenario.overlay;
        KeeperConfig {
            neighbours: NeighbourConfig {
                near: setup.near,
                far: setup.far,
                ..NeighbourConfig::default()
            },
            ..KeeperConfig::default()
        }
    }

    /// The keeper's clock: the warm-up, then the simulation's time.
    fn keeper_now(&self) -> Time {
        self.epoch + self.now
    }

    fn keeper(&mut self, node: u32) -> Option<&mut PeerKeeper<u32, u64>> {
        if !self.up[node as usize] {
            return None;
        }
        match &mut self.nodes[node as usize].overlay {
            NodeOverlay::Ours(keeper) => Some(keeper),
            NodeOverlay::Paper(_) => None,
        }
    }

    /// Our overlay: each node starts knowing a few random peers (bootstrap
    /// and mDNS), then the keepers run `warmup_ticks` ticks, a second
    /// apart, before the first job.
    pub(super) fn build_overlay_ours(&mut self) {
        let n = self.grid.len() as u32;
        let alive: Vec<u32> = (0..n).collect();
        self.epoch = Duration::ZERO;
        for node in 0..n {
            self.bootstrap(node, &alive);
        }
        for tick in 1..=self.scenario.overlay.warmup_ticks as u64 {
            self.epoch = Duration::from_secs(tick);
            for node in 0..n {
                self.tick(node);
            }
        }
    }

    /// `node` learns of a few random live peers and dials them.
    pub(super) fn bootstrap(&mut self, node: u32, alive: &[u32]) {
        let count = self
            .scenario
            .overlay
            .bootstrap
            .min(alive.len().saturating_sub(1));
        let picks: Vec<u32> = alive
            .choose_multiple(&mut self.rng, count + 1)
            .copied()
            .filter(|p| *p != node)
            .take(count)
            .collect();
        let now = self.keeper_now();
        if let Some(keeper) = self.keeper(node) {
            keeper.learned(picks, now, &SimFacts);
        }
        self.keep_peers(node);
    }

    /// One tick of `node`'s keeper: the live peers it is connected to
    /// answered their pings since the last one.
    pub(super) fn tick(&mut self, node: u32) {
        let now = self.keeper_now();
        let peers: Vec<u32> = match &self.nodes[node as usize].overlay {
            NodeOverlay::Ours(keeper) if self.up[node as usize] => keeper
                .connected_peers()
                .copied()
                .filter(|p| self.up[*p as usize])
                .collect(),
            _ => return,
        };
        for peer in peers {
            let rtt = self.sample(node, peer);
            if let Some(keeper) = self.keeper(node) {
                keeper.rtt(peer, rtt, now);
            }
        }
        if let Some(keeper) = self.keeper(node) {
            keeper.tick(now, &SimFacts);
        }
        self.keep_peers(node);
    }

    /// Draws every node's phase of its keeper's ticks within a ping
    /// interval (from the seed, with a generator apart from the run's
    /// other random choices, which stay unchanged).
    pub(super) fn keeper_phases(&mut self) {
        let interval = self.keeper_config().ping_interval;
        let mut phases = ChaCha8Rng::seed_from_u64(self.seed ^ 0x7ec4_e7ee);
        let n = self.grid.len();
        self.keeper_phase = (0..n)
            .map(|_| interval.mul_f64(phases.random::<f64>()))
            .collect();
        self.keeper_ticking = vec![false; n];
    }

    /// The latest tick time of `node` at or before `at`, and the next one
    /// after it (its ticks fall at its phase plus whole ping intervals).
    fn tick_times(&self, node: u32, at: Time) -> (Option<Time>, Time) {
        let interval = self.keeper_config().ping_interval;
        let phase = self.keeper_phase[node as usize];
        if at < phase {
            return (None, phase);
        }
        let since = (at - phase).as_nanos() % interval.as_nanos().max(1);
        let last = at - Duration::from_nanos(since as u64);
        (Some(last), last + interval)
    }

    /// `failed` has just failed, silently: every live node connected to
    /// it saw its last answer at its own last tick (a ping interval
    /// apart), and its keeper starts ticking, so that it notices the
    /// silence through its ping timeout as the real overlay would. Nodes
    /// watching no silent peer do not tick during the run: their ticks
    /// would only feed answers of live peers, which change nothing (see
    /// [`Sim::keeper_tick`]), so a run without failures has no ticks.
    pub(super) fn watch_silent(&mut self, failed: u32) {
        if !self.mode.our_overlay() {
            return;
        }
        let watchers: BTreeSet<u32> = self.node_connections[failed as usize]
            .iter()
            .filter_map(|id| {
                let &(a, b) = self.connections.get(id)?;
                Some(if a == failed { b } else { a })
            })
            .filter(|n| self.nodes[*n as usize].alive)
            .collect();
        for node in watchers {
            let (last, next) = self.tick_times(node, self.now);
            let answered = self.epoch + last.unwrap_or(self.now);
            if let Some(keeper) = self.keeper(node)
                && let Some(rtt) = keeper.table().rtt(&failed)
            {
                keeper.rtt(failed, rtt, answered);
            }
            if !self.keeper_ticking[node as usize] {
                self.keeper_ticking[node as usize] = true;
                self.push_keeper_tick(next, node);
            }
        }
    }

    fn push_keeper_tick(&mut self, at: Time, node: u32) {
        self.keeper_ticks += 1;
        self.push(at, Event::KeeperTick { node });
    }

    /// `node`'s keeper tick of the run is due. Its pings are answered in
    /// the tick itself: a live connected peer answers with the RTT the
    /// keeper already has of it (its minimum, so nothing in the near sets
    /// moves; the simulated RTT if it has none yet), a failed one does not;
    /// then the keeper ticks. The node ticks again a ping interval later
    /// while it is connected to a failed peer, and for a ping interval and
    /// a ping timeout after (so that a replacement's probes end), and only
    /// while other events are pending, so a run still ends when its work
    /// does.
    pub(super) fn keeper_tick(&mut self, node: u32) {
        self.keeper_ticks -= 1;
        let now = self.keeper_now();
        let config = self.keeper_config();
        let Some(silent) = self.answer_pings(node) else {
            // A failed node ticks again once it rejoined and watches a
            // silent peer.
            self.keeper_ticking[node as usize] = false;
            return;
        };
        if let Some(keeper) = self.keeper(node) {
            keeper.tick(now, &SimFacts);
        }
        self.keep_peers(node);
        let n = &mut self.nodes[node as usize];
        if silent {
            n.quiet_since = None;
        } else if n.quiet_since.is_none() {
            n.quiet_since = Some(now);
        }
        let settled = n.quiet_since.is_some_and(|since| {
            now.saturating_sub(since) >= config.ping_interval + config.ping_timeout
        });
        if settled || self.heap.len() <= self.keeper_ticks + self.ping_rounds {
            self.nodes[node as usize].quiet_since = None;
            self.keeper_ticking[node as usize] = false;
        } else {
            let at = self.now + config.ping_interval;
            self.push_keeper_tick(at, node);
        }
    }

    /// The pings of one ping interval of `node` during the run: each live
    /// connected peer answers with the RTT the keeper already has of it
    /// (the simulated RTT if it has none yet), so nothing in the near sets
    /// moves; a failed one does not answer. Returns whether one did not,
    /// or `None` if `node` runs no live keeper of ours.
    fn answer_pings(&mut self, node: u32) -> Option<bool> {
        let now = self.keeper_now();
        let peers: Vec<u32> = match &self.nodes[node as usize].overlay {
            NodeOverlay::Ours(keeper) if self.up[node as usize] => {
                keeper.connected_peers().copied().collect()
            }
            _ => return None,
        };
        let mut silent = false;
        for peer in peers {
            if !self.up[peer as usize] {
                silent = true;
                continue;
            }
            let simulated = Duration::from_micros(self.grid.rtt_us(node, peer));
            if let Some(keeper) = self.keeper(node) {
                let rtt = keeper.table().rtt(&peer).unwrap_or(simulated);
                keeper.rtt(peer, rtt, now);
            }
        }
        Some(silent)
    }

    /// Schedules every node's ping rounds during the run, from its phase
    /// on.
    pub(super) fn start_ping_rounds(&mut self) {
        let rounds = self.scenario.overlay.ping_rounds;
        self.ping_rounds_left = vec![0; self.keeper_phase.len()];
        for node in 0..self.keeper_phase.len() as u32 {
            self.more_ping_rounds(node, self.keeper_phase[node as usize], rounds);
        }
    }

    /// Gives `node` `rounds` ping rounds from `at` on (a pending one goes
    /// on with the new count).
    fn more_ping_rounds(&mut self, node: u32, at: Time, rounds: usize) {
        let left = &mut self.ping_rounds_left[node as usize];
        let pending = *left > 0;
        *left = rounds;
        if !pending && rounds > 0 {
            self.push_ping_round(at, node);
        }
    }

    fn push_ping_round(&mut self, at: Time, node: u32) {
        self.ping_rounds += 1;
        self.push(at, Event::PingRound { node });
    }

    /// `node`'s pings of one ping interval during the run, without its
    /// keeper's tick ([`Event::PingRound`]): they move its network
    /// coordinate, and the coordinate exchanges its keeper asks for are
    /// delivered; nothing else changes. Skipped while its keeper ticks
    /// (the tick answers its pings). Goes on a ping interval later while
    /// the node has rounds left and other events are pending, so a run
    /// still ends when its work does.
    pub(super) fn ping_round(&mut self, node: u32) {
        self.ping_rounds -= 1;
        let left = &mut self.ping_rounds_left[node as usize];
        *left = left.saturating_sub(1);
        let more = *left > 0;
        if !self.keeper_ticking[node as usize] && self.answer_pings(node).is_some() {
            // Only coordinate exchanges come of pings: no links to bring
            // up to date (what `keep_peers` does for every node it
            // touches), unless an exchange made a keeper act.
            let mut work = VecDeque::new();
            while let Some(action) = self.keeper(node).and_then(|k| k.poll_action()) {
                self.act(node, action, &mut work);
            }
            for touched in work {
                self.keep_peers(touched);
            }
        }
        if more && self.heap.len() > self.keeper_ticks + self.ping_rounds {
            let at = self.now + self.keeper_config().ping_interval;
            self.push_ping_round(at, node);
        } else {
            self.ping_rounds_left[node as usize] = 0;
        }
    }

    /// A node that rejoins: a fresh keeper, a few random peers, then as
    /// many ticks as the warm-up at this moment.
    pub(super) fn rejoin_ours(&mut self, node: u32, alive: &[u32]) {
        self.bootstrap(node, alive);
        for _ in 0..self.scenario.overlay.warmup_ticks {
            self.tick(node);
        }
        let rounds = self.scenario.overlay.ping_rounds;
        let at = self.now + self.keeper_config().ping_interval;
        self.more_ping_rounds(node, at, rounds);
    }

    /// `failed` is noticed: every connection to it closes. Returns the
    /// nodes that were connected to it or had measured it, in node order.
    /// In our overlay a node measures only peers it is connected to, so
    /// only the nodes that met `failed` (`met`) are asked; they are
    /// pruned to those that still know it.
    pub(super) fn connections_fail(&mut self, failed: u32) -> Vec<u32> {
        let ids: Vec<u64> = self
            .node_connections
            .get(failed as usize)
            .cloned()
            .unwrap_or_default();
        let candidates: Vec<u32> = match self.met.get_mut(failed as usize) {
            Some(met) => {
                met.sort_unstable();
                met.dedup();
                std::mem::take(met)
            }
            None => (0..self.nodes.len() as u32).collect(),
        };
        let knowers: Vec<u32> = candidates
            .into_iter()
            .filter(|n| {
                *n != failed
                    && self.nodes[*n as usize].alive
                    && match &self.nodes[*n as usize].overlay {
                        NodeOverlay::Ours(k) => {
                            k.is_connected(&failed) || k.table().rtt(&failed).is_some()
                        }
                        NodeOverlay::Paper(rtts) => rtts.contains_key(&failed),
                    }
            })
            .collect();
        if let Some(met) = self.met.get_mut(failed as usize) {
            met.clone_from(&knowers);
        }
        for id in ids {
            self.close(id);
        }
        knowers
    }

    /// Executes the actions of `node`'s keeper, and those of every keeper
    /// they make act, until all are done; then the flood links of every
    /// node touched are brought up to date.
    pub(super) fn keep_peers(&mut self, node: u32) {
        let mut work = VecDeque::from([node]);
        let mut done = 0usize;
        while let Some(node) = work.pop_front() {
            while let Some(action) = self.keeper(node).and_then(|k| k.poll_action()) {
                done += 1;
                assert!(
                    done < MAX_ACTIONS_PER_BURST,
                    "peer keeping did not settle after {done} actions"
                );
                self.act(node, action, &mut work);
            }
            self.relink(node);
        }
    }

    fn act(&mut self, node: u32, action: Action<u32, u64>, work: &mut VecDeque<u32>) {
        let now = self.keeper_now();
        match action {
            Action::Dial(peer) => self.dial(node, peer, work),
            Action::Close(id) => {
                for touched in self.close(id) {
                    work.push_back(touched);
                }
            }
            // A ban closes the peer's connections too; the keeper itself
            // refuses the peer until it unbans it.
            Action::Disconnect { peer, .. } | Action::Ban(peer) => {
                let ids: Vec<u64> = self.node_connections[node as usize]
                    .iter()
                    .copied()
                    .filter(|id| {
                        self.connections
                            .get(id)
                            .is_some_and(|ends| *ends == (node, peer) || *ends == (peer, node))
                    })
                    .collect();
                for id in ids {
                    for touched in self.close(id) {
                        work.push_back(touched);
                    }
                }
            }
            Action::Link { peer, on } => {
                if let Some(keeper) = self.keeper(peer) {
                    keeper.link_requested(node, on);
                    work.push_back(peer);
                }
            }
            Action::AskPeers(peer) => {
                let answer = match self.keeper(peer) {
                    Some(keeper) if keeper.is_connected(&node) => {
                        let records = keeper.peers_requested(&node, MAX_PEER_RECORDS);
                        keeper.peers_sent(&node, now, &SimFacts);
                        work.push_back(peer);
                        Some(records)
                    }
                    _ => None,
                };
                if let Some(keeper) = self.keeper(node)
                    && keeper.exchange_ended(&peer)
                    && let Some(records) = answer
                {
                    keeper.learned(records.into_iter().filter(|p| *p != node), now, &SimFacts);
                }
            }
            // Delivered at once, like a peer exchange (the keeper asks at
            // most once a ping interval per peer): each side gets the
            // other's coordinate.
            Action::ExchangeCoordinates(peer) => {
                let Some(ours) = self.keeper(node).map(|k| k.position()) else {
                    return;
                };
                let theirs = match self.keeper(peer) {
                    Some(keeper) if keeper.is_connected(&node) => {
                        if keeper.coordinates_received(node, ours, now).is_err() {
                            work.push_back(peer);
                        }
                        Some(keeper.position())
                    }
                    _ => None,
                };
                if let (Some(theirs), Some(keeper)) = (theirs, self.keeper(node)) {
                    // Refused (an offence) only if out of range, which a
                    // keeper's own position never is.
                    let _ = keeper.coordinates_received(peer, theirs, now);
                }
            }
            Action::Forgotten(peer) => self.nodes[node as usize].router.peer_lost(&peer),
            // Nobody has bootstrap addresses; the links are brought up to
            // date after the burst.
            Action::Unban(_) | Action::DialBootstrap | Action::NeighboursChanged { .. } => {}
        }
    }

    /// `node` dials `peer`: a connection opens at once if `peer` is alive
    /// and not connected yet; both identify themselves and measure it.
    fn dial(&mut self, node: u32, peer: u32, work: &mut VecDeque<u32>) {
        let now = self.keeper_now();
        if self.keeper(peer).is_none() {
            if let Some(keeper) = self.keeper(node) {
                keeper.dial_failed(&peer, DialFailure::Unreachable, now);
            }
            return;
        }
        if self.keeper(node).is_none_or(|k| k.is_connected(&peer)) {
            return;
        }
        self.next_connection += 1;
        let id = self.next_connection;
        self.connections.insert(id, (node, peer));
        // Ids only grow: each list stays ascending.
        self.node_connections[node as usize].push(id);
        self.node_connections[peer as usize].push(id);
        self.met[node as usize].push(peer);
        self.met[peer as usize].push(node);
        for (a, b, dialer) in [(node, peer, true), (peer, node, false)] {
            if let Some(keeper) = self.keeper(a) {
                keeper.connected(b, id, dialer, now);
            }
        }
        for (a, b) in [(node, peer), (peer, node)] {
            if let Some(keeper) = self.keeper(a) {
                keeper.identified(b, true, now);
            }
        }
        for _ in 0..self.scenario.overlay.samples.max(1) {
            for (a, b) in [(node, peer), (peer, node)] {
                let rtt = self.sample(a, b);
                if let Some(keeper) = self.keeper(a) {
                    keeper.rtt(b, rtt, now);
                }
            }
        }
        work.push_back(peer);
    }

    /// Closes connection `id` at both of its live ends; returns them.
    fn close(&mut self, id: u64) -> Vec<u32> {
        let now = self.keeper_now();
        let Some((a, b)) = self.connections.remove(&id) else {
            return Vec::new();
        };
        for end in [a, b] {
            let ids = &mut self.node_connections[end as usize];
            if let Ok(at) = ids.binary_search(&id) {
                ids.remove(at);
            }
        }
        let mut touched = Vec::new();
        for (x, y) in [(a, b), (b, a)] {
            if let Some(keeper) = self.keeper(x) {
                keeper.disconnected(&y, &id, now);
                touched.push(x);
            }
        }
        touched
    }

    /// Brings the links `node` floods over up to date: ours are the
    /// keeper's (its neighbours and the peers that chose it).
    fn relink(&mut self, node: u32) {
        let n = &mut self.nodes[node as usize];
        if let NodeOverlay::Ours(keeper) = &n.overlay {
            n.neighbours = keeper.links();
        }
        self.tell_links(node);
    }

    /// The neighbours each node chose as its nearest (the `near` links).
    pub fn near_links(&self) -> Vec<Vec<u32>> {
        self.nodes
            .iter()
            .map(|n| match &n.overlay {
                NodeOverlay::Ours(keeper) => keeper
                    .table()
                    .neighbours()
                    .filter(|(_, kind, _)| *kind == LinkKind::Near)
                    .map(|(p, _, _)| *p)
                    .collect(),
                NodeOverlay::Paper(_) => Vec::new(),
            })
            .collect()
    }
}

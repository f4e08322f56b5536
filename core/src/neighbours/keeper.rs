//! Peer keeping: which peers the overlay connects to, measures, keeps,
//! closes and refuses, and what it tells in peer exchange, as a sans-IO
//! state machine.
//!
//! [`PeerKeeper`] owns the [`NeighbourTable`] and everything the overlay
//! knows of its peers' connections. The driver (the libp2p overlay, or the
//! simulator) feeds it what happened (a connection opened or closed, a peer
//! identified itself, an RTT sample, a ping or dial that failed, a peer
//! exchange, an offence, application traffic) and the current time, calls
//! [`PeerKeeper::tick`] periodically, and executes the [`Action`]s it takes
//! from [`PeerKeeper::poll_action`]: dial, close, tell a peer it is our
//! neighbour, ask for peers, ban and unban. Maps are ordered and choices are
//! drawn from a seeded generator, so the same inputs give the same actions.
//!
//! # The policy
//!
//! - **Measuring**: each RTT sample of a peer that identified itself as of
//!   our network goes to the table. A failed ping closes that connection,
//!   and a neighbour that fails one is dropped and replaced at once; a
//!   connected peer that answered no ping for a ping interval and a timeout
//!   is disconnected (and replaced if it was a neighbour).
//! - **Probing**: unmeasured candidates (from bootstrap, mDNS, identify and
//!   peer exchange) are dialed, at most `max_probes` at a time and only on
//!   free connections, so that ping can measure them; a probe ends after
//!   `probe_samples` samples or a deadline. A known non-neighbour whose
//!   measurement is older than `remeasure_after` is probed again.
//! - **Neighbours**: at every tick, and at once when a neighbour is lost,
//!   the table recomputes the set; new neighbours are dialed and told so
//!   ([`Action::Link`]), former ones are told too and their connection
//!   lingers for [`LINGER`].
//! - **Closing**: a connection is closed by the side that dialed it when it
//!   needs it no more (not a neighbour, not probing, not chosen by the
//!   peer, no application traffic for [`LINGER`], and no longer getting to
//!   know it: identified, measured, peer exchange answered). A connection
//!   whose peer does not identify itself within [`IDENTIFY_GRACE`] is
//!   closed.
//! - **Failures**: a neighbour whose connection closes is redialed; if the
//!   dial fails, or the link breaks again within [`LINGER`], it is removed
//!   from the table, not tried again for `dead_retry_after`, and replaced.
//!   A neighbour still without a link after a ping interval and a timeout
//!   is replaced too. A dial that failed in its handshake, not for want of
//!   an answer, is tried again once after [`HANDSHAKE_RETRY`], randomised
//!   by half either way, and only a second such failure counts as
//!   unreachable: two peers that learn of each other at the same moment
//!   (from the same peer exchange) dial each other at once from their
//!   listen ports, the two dials become one TCP connection on which both
//!   handshakes fail, and each would otherwise take the other for dead
//!   (and refuse it in peer exchange) for `dead_retry_after`.
//! - **Introductions**: above `kept_connections`, connections are
//!   introductions: the surplus is closed, least needed first (never a
//!   neighbour's, a probe's or a busy one; a peer gets our peer records
//!   before it is let go unless it stayed [`IDENTIFY_GRACE`]; peers that
//!   chose us go last, newest connections first). So a full node still
//!   lets newcomers join through it.
//! - **Peer exchange**: every new peer of our network is asked for peers,
//!   and a random neighbour every `peer_exchange_interval`; we answer with
//!   neighbours first, then connected peers, then measured ones.
//! - **Misbehaviour**: `misbehaviour_limit` offences within `ban_duration`
//!   ban a peer for `ban_duration`; a peer of another network is banned
//!   [`FAREWELL_GRACE`] after it identified itself (so that it reads our
//!   identify first) and remembered as foreign: it is never dialed again on
//!   our own initiative.
//! - **Coordinates**: the keeper runs the node's network coordinate
//!   ([`Vivaldi`]). Each RTT sample of a peer whose coordinate came within
//!   [`COORD_FRESH_INTERVALS`] ping intervals moves ours (by the peer's
//!   smoothed RTT, which queueing does not inflate). On an RTT sample of a
//!   peer we neither sent our coordinate nor heard its coordinate from
//!   within a ping interval, the driver is asked to exchange coordinates
//!   with it ([`Action::ExchangeCoordinates`]): at most one exchange per
//!   peer and ping interval from each side. A peer's coordinate is kept in
//!   the table's entry of it (forgotten with it); one out of range counts
//!   as an offence and is not used.
//! - **Bootstrap**: a node alone retries its bootstrap peers after 0.5 s,
//!   then 1, 2, 4 and 5 s, each wait randomised by half either way, and
//!   with them the neighbours it lost to silence within [`REJOIN_FOR`]
//!   (whose addresses the driver keeps): a node cut off from everyone
//!   rejoins once the network heals, even one that is the others'
//!   bootstrap peer and has none of its own.
//!
//! Everything a peer can make grow is bounded: connections by the driver's
//! limit, the table by `max_known`, and the dead, banned, foreign,
//! offence and handshake-retry lists by [`MAX_REMEMBERED`] each, the
//! neighbours to rejoin by [`MAX_REJOIN`] (oldest forgotten first).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use std::time::Duration;

use rand::seq::IteratorRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::NeighbourTable;
pub use super::keeper_io::{
    Action, DialFailure, DisconnectReason, KeeperConfig, Offences, PeerFacts,
};
use super::remembered::Remembered;
use crate::bounded::make_room;
use crate::vivaldi::{Position, Refused, Vivaldi, VivaldiConfig};
use crate::{PeerKey, Time};

/// The longest peer-exchange answer whose repeats are found by searching
/// it (see [`PeerKeeper::peers_requested`]).
const SHORT_ANSWER: usize = 64;

/// A former neighbour's connection is kept this long after it stopped being
/// one, so that flood copies already sent on it arrive and a neighbour that
/// flaps in and out of the set (equal RTTs) is not redialed each time; a
/// connection with application traffic is kept as long after it.
pub const LINGER: Duration = Duration::from_secs(10);
/// A connection whose peer has not identified itself after this long is
/// closed.
pub const IDENTIFY_GRACE: Duration = Duration::from_secs(10);
/// How long a connection to a peer of another network stays open once we
/// know it is one.
pub const FAREWELL_GRACE: Duration = Duration::from_secs(1);
/// The first wait before the bootstrap peers are dialed again (see the
/// module documentation).
pub const BOOTSTRAP_RETRY_MIN: Duration = Duration::from_millis(500);
/// The longest wait between two bootstrap attempts.
pub const BOOTSTRAP_RETRY_MAX: Duration = Duration::from_secs(5);
/// A peer's reported coordinate moves ours for this many ping intervals
/// after it came; an older one may no longer be where the peer is.
pub const COORD_FRESH_INTERVALS: u32 = 3;
/// A dial that failed in its handshake is tried again after this long,
/// randomised by half either way so that two peers whose dials collided do
/// not collide again (see the module documentation).
pub const HANDSHAKE_RETRY: Duration = Duration::from_secs(1);
/// The most peers remembered as dead, banned, foreign, offending or with a
/// failed handshake, each; beyond it the oldest entry is forgotten.
pub const MAX_REMEMBERED: usize = 1024;
/// Neighbours that fell silent are dialed again this long whenever the
/// node has no connection left (see [`PeerKeeper::bootstrap_due`]): a node
/// cut off from everyone (its link down, a partition) rejoins when the
/// network heals, also when it has no bootstrap peer of its own (it was
/// the others' bootstrap peer).
pub const REJOIN_FOR: Duration = Duration::from_secs(600);
/// The most silent neighbours remembered for rejoining.
pub const MAX_REJOIN: usize = 32;

#[derive(Debug, Clone)]
struct Conn<C> {
    id: C,
    dialer: bool,
    since: Time,
}

/// The overlay's peer keeping. See the [module documentation](self).
///
/// `P` identifies a peer, `C` a connection (both chosen by the driver).
#[derive(Debug, Clone)]
pub struct PeerKeeper<P, C> {
    config: KeeperConfig,
    table: NeighbourTable<P>,
    rng: ChaCha8Rng,
    connections: BTreeMap<P, Vec<Conn<C>>>,
    /// The number of connections in `connections`.
    open: usize,
    /// Connected peers that identified themselves as of our network.
    verified: BTreeSet<P>,
    /// Connected peers that chose us as their neighbour.
    chosen_by: BTreeSet<P>,
    /// Former neighbours, with when they stopped being one.
    former: BTreeMap<P, Time>,
    /// When the application last used a peer's connection.
    app_traffic: BTreeMap<P, Time>,
    /// RTT samples since the peer's connection opened (for probes).
    samples: BTreeMap<P, usize>,
    /// When each connected peer last answered a ping (or connected).
    last_pong: BTreeMap<P, Time>,
    /// Peers dialed to measure them, with when.
    probing: BTreeMap<P, Time>,
    /// Peers that could not be reached.
    dead: Remembered<P>,
    /// Neighbours that fell silent, dialed again while the node has no
    /// connection (see [`REJOIN_FOR`]).
    rejoin: Remembered<P>,
    /// Peers whose dial failed in its handshake once, with when they may
    /// be dialed again; a second such failure makes them dead.
    retry_handshake: BTreeMap<P, Time>,
    /// Refused peers.
    banned: Remembered<P>,
    /// Peers of other networks (never expire; oldest forgotten first).
    foreign: Remembered<P>,
    /// Peers of other networks to be banned, with since when.
    farewells: BTreeMap<P, Time>,
    /// Offences per peer, with the time of the last one.
    strikes: BTreeMap<P, (u32, Time)>,
    /// Our outstanding peer-exchange requests per peer.
    exchanges: BTreeMap<P, u32>,
    /// Peers we sent our peer records on their current connection.
    introduced: BTreeSet<P>,
    /// Neighbours whose link broke and that we dialed again, with when.
    redialed: BTreeMap<P, Time>,
    /// Neighbours without a link, with since when a tick noticed.
    unlinked: BTreeMap<P, Time>,
    /// Our network coordinate.
    coords: Vivaldi,
    /// When we last sent our coordinate to each connected peer.
    coords_sent: BTreeMap<P, Time>,
    next_peer_exchange: Time,
    next_bootstrap: Time,
    bootstrap_backoff: Duration,
    actions: VecDeque<Action<P, C>>,
}

impl<P: PeerKey, C: Clone + Ord + std::fmt::Debug> PeerKeeper<P, C> {
    /// A keeper that knows nobody yet; `seed` makes its choices (far links,
    /// probes, peer-exchange partners, bootstrap waits) reproducible.
    pub fn new(config: KeeperConfig, seed: u64, now: Time) -> Self {
        PeerKeeper {
            table: NeighbourTable::new(config.neighbours.clone(), seed),
            rng: ChaCha8Rng::seed_from_u64(seed),
            connections: BTreeMap::new(),
            open: 0,
            verified: BTreeSet::new(),
            chosen_by: BTreeSet::new(),
            former: BTreeMap::new(),
            app_traffic: BTreeMap::new(),
            samples: BTreeMap::new(),
            last_pong: BTreeMap::new(),
            probing: BTreeMap::new(),
            dead: Remembered::new(MAX_REMEMBERED),
            rejoin: Remembered::new(MAX_REJOIN),
            retry_handshake: BTreeMap::new(),
            banned: Remembered::new(MAX_REMEMBERED),
            foreign: Remembered::new(MAX_REMEMBERED),
            farewells: BTreeMap::new(),
            strikes: BTreeMap::new(),
            exchanges: BTreeMap::new(),
            introduced: BTreeSet::new(),
            redialed: BTreeMap::new(),
            unlinked: BTreeMap::new(),
            coords: Vivaldi::new(VivaldiConfig::default(), seed),
            coords_sent: BTreeMap::new(),
            next_peer_exchange: now + config.peer_exchange_interval,
            next_bootstrap: now + BOOTSTRAP_RETRY_MIN,
            bootstrap_backoff: BOOTSTRAP_RETRY_MIN * 2,
            actions: VecDeque::new(),
            config,
        }
    }

    /// The next action to execute, oldest first.
    pub fn poll_action(&mut self) -> Option<Action<P, C>> {
        self.actions.pop_front()
    }

    /// The configuration.
    pub fn config(&self) -> &KeeperConfig {
        &self.config
    }

    /// The neighbour table (RTTs, neighbours, known peers).
    pub fn table(&self) -> &NeighbourTable<P> {
        &self.table
    }

    /// Whether a connection to `peer` is open.
    pub fn is_connected(&self, peer: &P) -> bool {
        self.connections.contains_key(peer)
    }

    /// The peers a connection is open to, in peer order.
    pub fn connected_peers(&self) -> impl Iterator<Item = &P> {
        self.connections.keys()
    }

    /// Whether `peer` is connected and identified itself as of our network.
    pub fn is_verified(&self, peer: &P) -> bool {
        self.verified.contains(peer)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open
    }

    /// Peers remembered as of another network.
    pub fn foreign_peers(&self) -> usize {
        self.foreign.len()
    }

    /// Peers banned now (for misbehaviour, or as of another network),
    /// until their ban runs out at a tick.
    pub fn banned_peers(&self) -> usize {
        self.banned.len()
    }

    /// Peers of another network that identified themselves and are to be
    /// banned at the first tick [`FAREWELL_GRACE`] later.
    pub fn pending_bans(&self) -> usize {
        self.farewells.len()
    }

    /// Entries held in all of the keeper's maps and lists together: what
    /// its memory grows with. Every part is bounded (see the module
    /// documentation), so this is too, whatever peers send.
    pub fn footprint(&self) -> usize {
        self.table.known_len()
            + self.connections.values().map(Vec::len).sum::<usize>()
            + self.verified.len()
            + self.chosen_by.len()
            + self.former.len()
            + self.app_traffic.len()
            + self.samples.len()
            + self.last_pong.len()
            + self.probing.len()
            + self.dead.len()
            + self.rejoin.len()
            + self.retry_handshake.len()
            + self.banned.len()
            + self.foreign.len()
            + self.farewells.len()
            + self.strikes.len()
            + self.exchanges.len()
            + self.introduced.len()
            + self.redialed.len()
            + self.unlinked.len()
            + self.coords_sent.len()
            + self.actions.len()
    }

    /// Whether a dial of `peer` waits for its retry after a failed
    /// handshake.
    fn retry_pending(&self, peer: &P, now: Time) -> bool {
        self.retry_handshake.get(peer).is_some_and(|at| now < *at)
    }

    /// Peers that are not to be dialed nor learned of now: banned, dead or
    /// of another network.
    pub fn refused(&self, peer: &P) -> bool {
        self.banned.contains(peer) || self.dead.contains(peer) || self.foreign.contains(peer)
    }

    /// Whether `peer` is refused only for having been unreachable (not
    /// banned, not of another network): a new address may revive it
    /// ([`Self::new_address`]).
    pub fn is_dead(&self, peer: &P) -> bool {
        self.dead.contains(peer) && !self.banned.contains(peer) && !self.foreign.contains(peer)
    }

    /// Peer exchange told of an address of `peer` not known before: if it
    /// was taken for dead (unreachable at the addresses known then), it
    /// may be tried again at once. A node behind a NAT is told of first at
    /// its private address, and at a relayed one only once a relay holds a
    /// reservation for it; without this, the relayed address would go
    /// unheard for `dead_retry_after` (and a job's ranks on the two nodes
    /// would wait that long to reach each other). The driver keeps a
    /// bounded number of addresses per peer, so a peer cannot be revived
    /// for ever by addresses made up.
    pub fn new_address(&mut self, peer: &P) {
        if self.is_dead(peer) {
            self.dead.remove(peer);
        }
    }

    /// Whether the driver should keep what it knows of `peer` (addresses):
    /// it is in the table or connected.
    pub fn remembers(&self, peer: &P) -> bool {
        self.table.contains(peer)
            || self.connections.contains_key(peer)
            || self.rejoin.contains(peer)
    }

    /// The links floods travel, with RTTs: our neighbours, then the
    /// connected peers that chose us (in peer order). Links work both
    /// ways, which keeps the flood graph connected even when nobody chose
    /// some node as a neighbour.
    pub fn links(&self) -> Vec<(P, Duration)> {
        let mut links = self.table.neighbour_rtts();
        links.extend(
            self.chosen_by
                .iter()
                .filter(|p| self.table.kind(p).is_none())
                .filter_map(|p| self.table.rtt(p).map(|rtt| (p.clone(), rtt))),
        );
        links
    }

    /// When the bootstrap peers are to be dialed again, if the node has
    /// some and no connection at all (the driver also waits while a dial
    /// is under way).
    pub fn bootstrap_due(&self) -> Option<Time> {
        let someone = self.config.bootstrap || !self.rejoin.is_empty();
        (someone && self.connections.is_empty()).then_some(self.next_bootstrap)
    }

    /// The bootstrap retry is due: dials the bootstrap peers and schedules
    /// the next attempt.
    pub fn bootstrap_retry(&mut self, now: Time) {
        let jitter = self.rng.random_range(0.5..1.5);
        self.next_bootstrap = now + self.bootstrap_backoff.mul_f64(jitter);
        self.bootstrap_backoff = (self.bootstrap_backoff * 2).min(BOOTSTRAP_RETRY_MAX);
        if self.config.bootstrap {
            self.actions.push_back(Action::DialBootstrap);
        }
        for peer in self.rejoin.peers() {
            if !self.banned.contains(&peer) && !self.foreign.contains(&peer) {
                self.actions.push_back(Action::Dial(peer));
            }
        }
    }

    /// A connection opened (`dialer`: we dialed it).
    pub fn connected(&mut self, peer: P, conn: C, dialer: bool, now: Time) {
        self.last_pong.insert(peer.clone(), now);
        self.open += 1;
        self.connections.entry(peer).or_default().push(Conn {
            id: conn,
            dialer,
            since: now,
        });
    }

    /// A connection closed. Returns whether it was the peer's last and the
    /// peer had identified itself as of our network (it is lost).
    pub fn disconnected(&mut self, peer: &P, conn: &C, now: Time) -> bool {
        // A connection the keeper never heard of (one that opened before
        // the driver's loop ran) closing counts as the peer's last.
        if let Some(conns) = self.connections.get_mut(peer) {
            let before = conns.len();
            conns.retain(|c| c.id != *conn);
            self.open -= before - conns.len();
            if !conns.is_empty() {
                return false;
            }
        }
        self.connections.remove(peer);
        self.samples.remove(peer);
        self.last_pong.remove(peer);
        self.chosen_by.remove(peer);
        self.introduced.remove(peer);
        // Answers to our requests, and the application's use of the
        // connection, end with it.
        self.exchanges.remove(peer);
        self.app_traffic.remove(peer);
        self.coords_sent.remove(peer);
        let lost = self.verified.remove(peer);
        // A neighbour's link broke: redial at once; if that fails, or the
        // link breaks again soon after (a full peer sheds us), replace it.
        if self.table.kind(peer).is_some() {
            let again = self
                .redialed
                .get(peer)
                .is_some_and(|at| now.saturating_sub(*at) < LINGER);
            if again {
                self.redialed.remove(peer);
                self.unreachable(peer.clone(), now);
            } else {
                self.redialed.insert(peer.clone(), now);
                self.actions.push_back(Action::Dial(peer.clone()));
            }
        }
        lost
    }

    /// A dial of `peer` failed.
    pub fn dial_failed(&mut self, peer: &P, failure: DialFailure, now: Time) {
        match failure {
            DialFailure::Denied => {
                // We are full; a neighbour is dialed again at the next tick.
                self.probing.remove(peer);
            }
            DialFailure::NotStarted => {
                if self.probing.remove(peer).is_none() && self.table.kind(peer).is_some() {
                    self.unreachable(peer.clone(), now);
                }
            }
            DialFailure::Unreachable => {
                if !self.is_connected(peer) {
                    self.unreachable(peer.clone(), now);
                }
            }
            DialFailure::Handshake => {
                if self.is_connected(peer) {
                    // The peer's own dial got through.
                    self.probing.remove(peer);
                } else if self.retry_handshake.remove(peer).is_some() {
                    // Failed twice: not a collision.
                    self.unreachable(peer.clone(), now);
                } else {
                    // Most likely both sides dialed at once: try again
                    // once, each side after its own random wait.
                    self.probing.remove(peer);
                    let wait = HANDSHAKE_RETRY.mul_f64(self.rng.random_range(0.5..1.5));
                    make_room(&mut self.retry_handshake, peer, MAX_REMEMBERED, |at| *at);
                    self.retry_handshake.insert(peer.clone(), now + wait);
                }
            }
        }
    }

    /// `peer` identified itself: as of our network (`ours`) or of another.
    /// Returns whether it is newly verified (the driver tells the
    /// application that it connected).
    pub fn identified(&mut self, peer: P, ours: bool, now: Time) -> bool {
        if !ours {
            self.rejoin.remove(&peer);
            self.foreign.insert(peer.clone(), now);
            // Banned only a moment later, so that it reads our identify too
            // and learns that we are foreign to it.
            self.farewells.entry(peer).or_insert(now);
            return false;
        }
        self.foreign.remove(&peer);
        self.dead.remove(&peer);
        self.rejoin.remove(&peer);
        self.retry_handshake.remove(&peer);
        if !self.verified.insert(peer.clone()) {
            return false;
        }
        self.bootstrap_backoff = BOOTSTRAP_RETRY_MIN;
        self.table.add_candidate(peer.clone());
        if self.table.kind(&peer).is_some() {
            self.actions.push_back(Action::Link {
                peer: peer.clone(),
                on: true,
            });
        }
        self.ask_peers(peer);
        true
    }

    /// An RTT sample of `peer`.
    pub fn rtt(&mut self, peer: P, rtt: Duration, now: Time) {
        if self.verified.contains(&peer) {
            let seen = self.table.observe(peer.clone(), rtt, now);
            *self.samples.entry(peer.clone()).or_default() += 1;
            self.last_pong.insert(peer.clone(), now);
            self.follow_coordinates(peer, seen, now);
        }
    }

    /// After an RTT sample of `peer` (`seen`: the table's smoothed RTT and
    /// the peer's reported coordinate after it): our coordinate moves if
    /// the peer's is fresh, and coordinates are exchanged if neither side
    /// told the other within a ping interval.
    fn follow_coordinates(
        &mut self,
        peer: P,
        seen: Option<(Duration, Option<(Position, Time)>)>,
        now: Time,
    ) {
        let interval = self.config.ping_interval;
        let reported = seen.and_then(|(_, position)| position);
        if let (Some((theirs, at)), Some(rtt)) = (reported, seen.map(|(rtt, _)| rtt))
            && now.saturating_sub(at) <= interval * COORD_FRESH_INTERVALS
        {
            // Their report was checked when it came; an RTT out of range
            // (our own measurement) is simply not used.
            let _ = self.coords.observe(rtt, theirs.coord, theirs.error);
        }
        let recent = |at: Time| now.saturating_sub(at) < interval;
        let heard = reported.is_some_and(|(_, at)| recent(at));
        let sent = self.coords_sent.get(&peer).is_some_and(|at| recent(*at));
        if !heard && !sent {
            self.coords_sent.insert(peer.clone(), now);
            self.actions.push_back(Action::ExchangeCoordinates(peer));
        }
    }

    /// `peer` told us its coordinate (asking for ours, or answering our
    /// [`Action::ExchangeCoordinates`]). A coordinate or error out of range
    /// is refused and counts as an offence; a report from a peer not
    /// verified, or not in the table, is not kept.
    pub fn coordinates_received(
        &mut self,
        peer: P,
        theirs: Position,
        now: Time,
    ) -> Result<(), Refused> {
        if let Err(why) = theirs.check() {
            self.offence(peer, now);
            return Err(why);
        }
        if self.verified.contains(&peer) {
            self.table.set_position(&peer, theirs, now);
        }
        Ok(())
    }

    /// Our network coordinate and how sure we are of it: what we tell
    /// peers.
    pub fn position(&self) -> Position {
        self.coords.position()
    }

    /// The coordinate `peer` last reported, if it is in the table and
    /// reported one.
    pub fn peer_position(&self, peer: &P) -> Option<Position> {
        self.table.position(peer).map(|(position, _)| position)
    }

    /// A ping on `conn` failed: the connection is closed, and a neighbour
    /// replaced at once rather than when TCP notices.
    pub fn ping_failed(&mut self, peer: P, conn: C, now: Time) {
        self.actions.push_back(Action::Close(conn));
        if self.table.kind(&peer).is_some() {
            self.unreachable(peer, now);
        }
    }

    /// Peers learned of (mDNS, peer exchange, bootstrap) become candidates,
    /// unless refused; then probes start.
    pub fn learned(
        &mut self,
        peers: impl IntoIterator<Item = P>,
        now: Time,
        facts: &dyn PeerFacts<P>,
    ) {
        for peer in peers {
            if !self.refused(&peer) {
                self.table.add_candidate(peer);
            }
        }
        self.start_probes(now, facts, false);
    }

    /// `peer` says whether it chose us as its neighbour.
    pub fn link_requested(&mut self, peer: P, on: bool) {
        if on && self.is_connected(&peer) {
            self.chosen_by.insert(peer);
        } else {
            self.chosen_by.remove(&peer);
        }
    }

    /// `asker` asked for peers: at most `max` peers to tell it, best
    /// first (neighbours, then connected peers of our network, then
    /// measured ones), without duplicates.
    pub fn peers_requested(&mut self, asker: &P, max: usize) -> Vec<P> {
        if self.is_connected(asker) {
            self.introduced.insert(asker.clone());
        }
        // A short answer (the simulator asks for 32) finds repeats in
        // what it told so far; a long one (the overlay asks for all, and
        // filters them by address) keeps a set, so that neither the
        // allocation nor the search follows `max`.
        let short = max <= SHORT_ANSWER;
        let mut told: Vec<&P> = Vec::with_capacity(max.min(SHORT_ANSWER));
        let mut seen: BTreeSet<&P> = BTreeSet::new();
        let best = self
            .table
            .neighbour_peers()
            .chain(self.verified.iter())
            .chain(self.table.measured_peers());
        for peer in best {
            if told.len() >= max {
                break;
            }
            let new = peer != asker
                && if short {
                    !told.contains(&peer)
                } else {
                    seen.insert(peer)
                };
            if new {
                told.push(peer);
            }
        }
        told.into_iter().cloned().collect()
    }

    /// Our answer to `asker`'s peer exchange was sent: a newcomer that came
    /// in above the kept connections has what it came for.
    pub fn peers_sent(&mut self, asker: &P, now: Time, facts: &dyn PeerFacts<P>) {
        if self.introduced.contains(asker) {
            self.shed_surplus(now, facts);
        }
    }

    /// Our peer-exchange request to `peer` ended (answered or failed).
    /// Returns whether its answer is to be used: the peer is of our network.
    pub fn exchange_ended(&mut self, peer: &P) -> bool {
        if let Some(count) = self.exchanges.get_mut(peer) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.exchanges.remove(peer);
            }
        }
        self.verified.contains(peer)
    }

    /// The application sent a request to `peer` or got one from it: the
    /// connection is in use for [`LINGER`].
    pub fn app_traffic(&mut self, peer: P, now: Time) {
        self.app_traffic.insert(peer, now);
    }

    /// An offence of `peer` (a bad frame, a flood without TTL, an
    /// out-of-range message); at the limit within the window it is banned.
    pub fn offence(&mut self, peer: P, now: Time) -> Offences {
        let window = self.config.ban_duration;
        // When full, the offender whose last offence is oldest is forgotten.
        make_room(&mut self.strikes, &peer, MAX_REMEMBERED, |(_, at)| *at);
        let entry = self.strikes.entry(peer.clone()).or_insert((0, now));
        if now.saturating_sub(entry.1) > window {
            *entry = (0, now);
        }
        entry.0 = entry.0.saturating_add(1);
        entry.1 = now;
        let count = entry.0;
        let banned = count >= self.config.misbehaviour_limit;
        if banned {
            self.ban(peer, now);
        }
        Offences { count, banned }
    }

    /// Bans `peer` for the ban duration: it is disconnected, refused and
    /// forgotten.
    pub fn ban(&mut self, peer: P, now: Time) {
        for old in self.banned.insert(peer.clone(), now) {
            self.actions.push_back(Action::Unban(old));
        }
        self.strikes.remove(&peer);
        self.farewells.remove(&peer);
        self.probing.remove(&peer);
        self.chosen_by.remove(&peer);
        self.rejoin.remove(&peer);
        self.actions.push_back(Action::Ban(peer.clone()));
        self.forget(&peer, now);
    }

    /// The periodic work: expiries, ended probes, the neighbour set, links
    /// to neighbours, silent peers, closing what nobody needs, new probes,
    /// peer exchange.
    pub fn tick(&mut self, now: Time, facts: &dyn PeerFacts<P>) {
        for peer in self.banned.expire(now, self.config.ban_duration) {
            self.actions.push_back(Action::Unban(peer));
        }
        let farewells: Vec<P> = self
            .farewells
            .iter()
            .filter(|(_, since)| now.saturating_sub(**since) >= FAREWELL_GRACE)
            .map(|(p, _)| p.clone())
            .collect();
        for peer in farewells {
            self.farewells.remove(&peer);
            self.ban(peer, now);
        }
        let recent = |since: &Time| now.saturating_sub(*since) < LINGER;
        self.former.retain(|_, since| recent(since));
        self.app_traffic.retain(|_, since| recent(since));
        self.redialed.retain(|_, since| recent(since));
        let window = self.config.ban_duration;
        self.strikes
            .retain(|_, (_, at)| now.saturating_sub(*at) <= window);
        self.dead.expire(now, self.config.dead_retry_after);
        self.rejoin.expire(now, REJOIN_FOR);
        // A retry that did not fail in its handshake again within a linger
        // time (it connected, or failed otherwise) is over.
        self.retry_handshake
            .retain(|_, at| now.saturating_sub(*at) < LINGER);

        // End probes that measured enough, or that took too long.
        let probe_deadline = self.config.ping_interval * (self.config.probe_samples as u32 + 1)
            + self.config.ping_timeout
            + self.config.handshake_timeout / 4;
        let ended: Vec<P> = self
            .probing
            .iter()
            .filter(|(peer, since)| {
                self.samples.get(*peer).copied().unwrap_or(0) >= self.config.probe_samples
                    || now.saturating_sub(**since) > probe_deadline
            })
            .map(|(p, _)| p.clone())
            .collect();
        for peer in ended {
            self.probing.remove(&peer);
            // Connected but not measured yet (a slow identify) is not dead.
            if self.table.rtt(&peer).is_none() && !self.is_connected(&peer) {
                self.unreachable(peer, now);
            }
        }

        self.refresh(now);

        // Keep a link to every neighbour: a dial refused for want of a free
        // connection is tried again here. A neighbour still without a link
        // after a ping interval and timeout (a dial stalled in its
        // handshake, unwatched by ping) is replaced.
        let link_deadline = self.config.ping_interval + self.config.ping_timeout;
        let unlinked: BTreeSet<P> = self
            .table
            .neighbour_peers()
            .filter(|p| !self.is_connected(p))
            .cloned()
            .collect();
        self.unlinked.retain(|p, _| unlinked.contains(p));
        for peer in unlinked {
            let since = *self.unlinked.entry(peer.clone()).or_insert(now);
            if now.saturating_sub(since) > link_deadline || !facts.dialable(&peer) {
                self.unreachable(peer, now);
            } else if !self.retry_pending(&peer, now) {
                self.actions.push_back(Action::Dial(peer));
            }
        }

        // A peer that answered no ping for an interval and a timeout is
        // dead or cut off (libp2p ping reports only the second failure in a
        // row, after a substream timeout).
        let silent_after = self.config.ping_interval + self.config.ping_timeout;
        let silent: Vec<P> = self
            .last_pong
            .iter()
            .filter(|(_, at)| now.saturating_sub(**at) > silent_after)
            .map(|(p, _)| p.clone())
            .collect();
        for peer in silent {
            self.last_pong.remove(&peer);
            self.actions.push_back(Action::Disconnect {
                peer: peer.clone(),
                reason: DisconnectReason::Silent,
            });
            if self.table.kind(&peer).is_some() {
                self.rejoin.insert(peer.clone(), now);
                self.unreachable(peer, now);
            }
        }

        // Close what nobody needs: links we dialed to non-neighbours, and
        // connections of peers that never identified themselves.
        let connected: Vec<P> = self.connections.keys().cloned().collect();
        for peer in connected {
            let stale = !self.verified.contains(&peer)
                && self.connections.get(&peer).is_some_and(|conns| {
                    conns
                        .iter()
                        .all(|c| now.saturating_sub(c.since) > IDENTIFY_GRACE)
                });
            if stale {
                self.actions.push_back(Action::Disconnect {
                    peer,
                    reason: DisconnectReason::NotIdentified,
                });
            } else {
                self.close_if_unneeded(&peer, now, facts);
            }
        }

        self.shed_surplus(now, facts);
        self.start_probes(now, facts, true);

        if now >= self.next_peer_exchange {
            self.next_peer_exchange = now + self.config.peer_exchange_interval;
            let partner = self
                .table
                .neighbour_peers()
                .filter(|p| self.verified.contains(*p))
                .choose(&mut self.rng)
                .or_else(|| self.verified.iter().choose(&mut self.rng))
                .cloned();
            if let Some(peer) = partner {
                self.ask_peers(peer);
            }
            // Announce our links again, in case an announcement was lost
            // with a connection that closed while it was under way.
            let neighbours: Vec<P> = self
                .table
                .neighbour_peers()
                .filter(|p| self.verified.contains(*p))
                .cloned()
                .collect();
            for peer in neighbours {
                self.actions.push_back(Action::Link { peer, on: true });
            }
        }
    }

    fn ask_peers(&mut self, peer: P) {
        *self.exchanges.entry(peer.clone()).or_default() += 1;
        self.actions.push_back(Action::AskPeers(peer));
    }

    /// Recomputes the neighbour set; new neighbours are dialed or told.
    fn refresh(&mut self, now: Time) {
        let changes = self.table.refresh();
        if changes.added.is_empty() && changes.removed.is_empty() {
            return;
        }
        for peer in &changes.added {
            self.former.remove(peer);
            if self.verified.contains(peer) {
                self.actions.push_back(Action::Link {
                    peer: peer.clone(),
                    on: true,
                });
            } else if !self.is_connected(peer) && !self.retry_pending(peer, now) {
                // The link is announced once the peer has identified itself
                // (a peer waiting for its handshake retry is dialed by a
                // tick).
                self.actions.push_back(Action::Dial(peer.clone()));
            }
        }
        for peer in &changes.removed {
            if self.verified.contains(peer) {
                self.actions.push_back(Action::Link {
                    peer: peer.clone(),
                    on: false,
                });
            }
            // Closed at a tick once the linger time is over.
            self.former.insert(peer.clone(), now);
        }
        self.actions.push_back(Action::NeighboursChanged {
            added: changes.added,
            removed: changes.removed,
        });
    }

    /// `peer` could not be reached: forget it for a while, and replace it
    /// if it was a neighbour.
    fn unreachable(&mut self, peer: P, now: Time) {
        self.probing.remove(&peer);
        self.chosen_by.remove(&peer);
        self.unlinked.remove(&peer);
        self.dead.insert(peer.clone(), now);
        self.forget(&peer, now);
    }

    /// Takes `peer` out of the table (and the neighbour set).
    fn forget(&mut self, peer: &P, now: Time) {
        self.former.remove(peer);
        self.retry_handshake.remove(peer);
        let was_neighbour = self.table.kind(peer).is_some();
        self.table.remove(peer);
        self.actions.push_back(Action::Forgotten(peer.clone()));
        if was_neighbour {
            self.refresh(now);
        }
    }

    /// Closes the connections we dialed to `peer` if we need it neither as
    /// a neighbour nor for a probe, nor to get to know it (identify, a
    /// measurement, our peer exchange: closing a bootstrap connection
    /// before those would leave a new node knowing nobody). Connections it
    /// dialed are its business.
    fn close_if_unneeded(&mut self, peer: &P, now: Time, facts: &dyn PeerFacts<P>) {
        let recent = |since: Option<&Time>| since.is_some_and(|s| now.saturating_sub(*s) < LINGER);
        let lingering =
            recent(self.former.get(peer)) || recent(self.app_traffic.get(peer)) || facts.busy(peer);
        let getting_to_know = !self.verified.contains(peer)
            || self.table.rtt(peer).is_none()
            || self.exchanges.contains_key(peer);
        if getting_to_know
            || self.table.kind(peer).is_some()
            || self.probing.contains_key(peer)
            || self.chosen_by.contains(peer)
            || lingering
        {
            return;
        }
        let ours: Vec<C> = self
            .connections
            .get(peer)
            .map(|conns| {
                conns
                    .iter()
                    .filter(|c| c.dialer)
                    .map(|c| c.id.clone())
                    .collect()
            })
            .unwrap_or_default();
        for id in ours {
            self.actions.push_back(Action::Close(id));
        }
    }

    /// How many more connections the node may open for itself (probes)
    /// without eating into the introduction slots.
    fn free_connections(&self) -> usize {
        self.config
            .kept_connections
            .saturating_sub(self.open_connections())
    }

    /// Closes the connections above the kept ones, least needed first (see
    /// the module documentation).
    fn shed_surplus(&mut self, now: Time, facts: &dyn PeerFacts<P>) {
        let surplus = self
            .open_connections()
            .saturating_sub(self.config.kept_connections);
        if surplus == 0 {
            return;
        }
        let mut sheddable: Vec<(bool, std::cmp::Reverse<Time>, C)> = self
            .connections
            .iter()
            .filter(|(peer, _)| {
                self.table.kind(peer).is_none()
                    && !self.probing.contains_key(*peer)
                    && !facts.busy(peer)
                    && self
                        .app_traffic
                        .get(*peer)
                        .is_none_or(|since| now.saturating_sub(*since) >= LINGER)
            })
            .flat_map(|(peer, conns)| conns.iter().map(move |c| (peer, c)))
            .filter(|(peer, c)| {
                self.introduced.contains(*peer) || now.saturating_sub(c.since) >= IDENTIFY_GRACE
            })
            .map(|(peer, c)| {
                (
                    self.chosen_by.contains(peer),
                    std::cmp::Reverse(c.since),
                    c.id.clone(),
                )
            })
            .collect();
        sheddable.sort_by_key(|a| (a.0, a.1));
        for (_, _, id) in sheddable.into_iter().take(surplus) {
            self.actions.push_back(Action::Close(id));
        }
    }

    /// Dials unmeasured candidates, a few at a time, so that their RTT can
    /// be measured; at a tick (`remeasure`), also one known peer whose
    /// measurement is old.
    fn start_probes(&mut self, now: Time, facts: &dyn PeerFacts<P>, remeasure: bool) {
        let budget = self
            .config
            .max_probes
            .saturating_sub(self.probing.len())
            .min(self.free_connections());
        if budget > 0 {
            let candidates: Vec<P> = self
                .table
                .unmeasured()
                .filter(|p| {
                    !self.probing.contains_key(*p)
                        && !self.is_connected(p)
                        && !self.refused(p)
                        && !self.retry_pending(p, now)
                        && facts.dialable(p)
                })
                .cloned()
                .collect();
            let picks = candidates
                .into_iter()
                .choose_multiple(&mut self.rng, budget);
            for peer in picks {
                self.probe(peer, now);
            }
        }
        if remeasure && self.probing.len() < self.config.max_probes && self.free_connections() > 0 {
            let stale =
                self.table
                    .known()
                    .filter(|(peer, rtt)| {
                        rtt.is_some()
                            && self.table.kind(peer).is_none()
                            && !self.is_connected(peer)
                            && !self.retry_pending(peer, now)
                            && facts.dialable(peer)
                            && self.table.last_measured(peer).is_some_and(|t| {
                                now.saturating_sub(t) > self.config.remeasure_after
                            })
                    })
                    .map(|(p, _)| p.clone())
                    .next();
            if let Some(peer) = stale {
                self.samples.remove(&peer);
                self.probe(peer, now);
            }
        }
    }

    fn probe(&mut self, peer: P, now: Time) {
        self.probing.insert(peer.clone(), now);
        self.actions.push_back(Action::Dial(peer));
    }
}

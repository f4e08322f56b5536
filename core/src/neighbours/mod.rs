//! Choice of overlay neighbours from measured round-trip times.
//!
//! A flood reaches the nodes that are near in the *overlay*; for that to mean
//! near in the *network*, each node keeps as neighbours the peers it measured
//! to be nearest, plus a few random far links. The far links are what keep
//! the overlay connected when the grid consists of sites joined by slow links:
//! with near links only, every site would be an island.
//!
//! [`NeighbourTable`] is pure data: the driver reports measurements
//! ([`NeighbourTable::observe_rtt`]), peers it heard of
//! ([`NeighbourTable::add_candidate`]) and peers it lost
//! ([`NeighbourTable::remove`]); [`NeighbourTable::refresh`] recomputes the
//! neighbour set and says which links to open and which to close.
//!
//! A link is a connection and works both ways: floods go over the links a
//! node chose and over the links other nodes chose to it. That matters:
//! choices by RTT are lopsided (a node that measures well is chosen by many,
//! another by almost none), and a node nobody chose would never hear a
//! flood if links were one-way.
//!
//! RTT samples are smoothed by taking the minimum of the most recent samples:
//! queueing only ever adds delay, so the minimum is the best estimate of the
//! path's propagation delay.
//!
//! [`keeper::PeerKeeper`] is the overlay's whole peer-keeping policy around
//! this table: connections, probes, closing, bans and peer exchange, as a
//! sans-IO state machine both the real overlay and the simulator drive;
//! [`nat::NatPolicy`] is its NAT traversal beside it (reachability, relay
//! reservations, relayed connections closed once direct).

pub mod keeper;
mod keeper_io;
pub mod nat;
mod remembered;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use rand::SeedableRng;
use rand::seq::IteratorRandom;
use rand_chacha::ChaCha8Rng;

use crate::vivaldi::Position;
use crate::{PeerKey, Time};

/// How many neighbours to keep, and how much to remember.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NeighbourConfig {
    /// The number of nearest peers kept as neighbours (`k`).
    pub near: usize,
    /// The number of random far links kept besides the near ones.
    pub far: usize,
    /// How many recent RTT samples per peer are kept; the smoothed RTT is
    /// their minimum.
    pub samples: usize,
    /// The most peers remembered at all (measured or not). When full, the
    /// farthest peer that is not a neighbour is forgotten.
    pub max_known: usize,
    /// How much nearer (as a fraction of its RTT) a peer must be to displace
    /// a current near neighbour, so that near sets do not flap between
    /// peers whose RTTs differ only by noise.
    pub hysteresis: f64,
}

impl Default for NeighbourConfig {
    fn default() -> Self {
        // Links are connections and floods use them both ways, so a node
        // floods over about twice this many links. Four near and two far
        // gave oracle-level locality in the simulator at fewer messages per
        // job than the paper's overlay (BENCHMARKS.md).
        NeighbourConfig {
            near: 4,
            far: 2,
            samples: 8,
            max_known: 512,
            hysteresis: 0.1,
        }
    }
}

/// Whether a neighbour is one of the nearest or a random far link.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum LinkKind {
    /// One of the `near` peers with the smallest RTT.
    Near,
    /// A random far link that keeps the overlay connected.
    Far,
}

/// What the table knows of one peer: its smoothed RTT and one pointer.
/// Most known peers are candidates nobody measured yet, and a table holds
/// up to `max_known` of them on every node (the simulator runs 100,000
/// tables), so what only a measured peer or one that reported its
/// coordinate has lives behind one box of its own (its samples inline, so
/// that a sample reads one allocation, not three); the smoothed RTT, which
/// the table's choices read for every known peer, stays in place, in
/// nanoseconds (RTTs are kept in nanoseconds up to 584 years, far beyond
/// any a ping measures: see [`nanos`]).
#[derive(Debug, Clone)]
struct PeerInfo {
    /// The minimum of the samples in nanoseconds, kept up to date by
    /// `observe`; [`UNMEASURED`] exactly when `more` has no samples.
    min: u64,
    more: Option<Box<More>>,
}

impl Default for PeerInfo {
    fn default() -> Self {
        PeerInfo {
            min: UNMEASURED,
            more: None,
        }
    }
}

/// `PeerInfo::min` of a peer not measured yet.
const UNMEASURED: u64 = u64::MAX;

/// An RTT in nanoseconds, below [`UNMEASURED`]: saturated at 584 years,
/// which no measured RTT comes near (a ping times out in seconds).
fn nanos(rtt: Duration) -> u64 {
    u64::try_from(rtt.as_nanos()).map_or(UNMEASURED - 1, |n| n.min(UNMEASURED - 1))
}

/// What a measured peer, or one that reported its coordinate, has.
#[derive(Debug, Clone)]
struct More {
    /// Its most recent RTT samples once it was measured (empty before).
    samples: Samples,
    /// When it was last measured (`Some` exactly when `samples` has some).
    last_measured: Option<Time>,
    /// The network coordinate the peer last reported, with when.
    position: Option<(Position, Time)>,
}

/// Samples kept in place when the table keeps at most this many per peer
/// (the default 8), else in a list of their own.
const INLINE_SAMPLES: usize = 8;

/// A peer's most recent RTT samples, in nanoseconds: at most the table's
/// `config.samples`, the oldest leaving first.
#[derive(Debug, Clone)]
enum Samples {
    /// A ring: the oldest at `head` once `len` reached the limit (until
    /// then `head` is 0 and the samples are `ring[..len]`).
    Inline {
        ring: [u64; INLINE_SAMPLES],
        head: u8,
        len: u8,
    },
    List(VecDeque<u64>),
}

impl Samples {
    fn new(limit: usize) -> Self {
        if limit <= INLINE_SAMPLES {
            Samples::Inline {
                ring: [0; INLINE_SAMPLES],
                head: 0,
                len: 0,
            }
        } else {
            Samples::List(VecDeque::new())
        }
    }

    /// Adds `sample`; returns the oldest one if it left to make room
    /// (`limit` samples were kept).
    fn push(&mut self, sample: u64, limit: usize) -> Option<u64> {
        match self {
            Samples::Inline { ring, head, len } => {
                let (at, full) = (usize::from(*head), usize::from(*len));
                if full == limit {
                    let gone = std::mem::replace(&mut ring[at], sample);
                    *head = ((at + 1) % limit) as u8;
                    Some(gone)
                } else {
                    ring[full] = sample;
                    *len += 1;
                    None
                }
            }
            Samples::List(list) => {
                let gone = (list.len() == limit).then(|| list.pop_front()).flatten();
                list.push_back(sample);
                gone
            }
        }
    }

    fn min(&self) -> Option<u64> {
        match self {
            Samples::Inline { ring, len, .. } => ring[..usize::from(*len)].iter().min().copied(),
            Samples::List(list) => list.iter().min().copied(),
        }
    }
}

impl PeerInfo {
    fn smoothed(&self) -> Option<Duration> {
        (self.min != UNMEASURED).then(|| Duration::from_nanos(self.min))
    }

    fn is_measured(&self) -> bool {
        self.min != UNMEASURED
    }

    fn position(&self) -> Option<(Position, Time)> {
        self.more.as_ref().and_then(|more| more.position)
    }

    fn more(&mut self, limit: usize) -> &mut More {
        self.more.get_or_insert_with(|| {
            Box::new(More {
                samples: Samples::new(limit),
                last_measured: None,
                position: None,
            })
        })
    }
}

/// The links to open and to close after a [`NeighbourTable::refresh`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NeighbourChanges<P> {
    /// Peers that became neighbours.
    pub added: Vec<P>,
    /// Peers that are no longer neighbours.
    pub removed: Vec<P>,
}

/// Known peers with their measured RTTs, and the neighbour set chosen from
/// them. See the [module documentation](self).
#[derive(Debug, Clone)]
pub struct NeighbourTable<P> {
    config: NeighbourConfig,
    known: BTreeMap<P, PeerInfo>,
    near: BTreeSet<P>,
    far: BTreeSet<P>,
    rng: ChaCha8Rng,
}

impl<P: PeerKey> NeighbourTable<P> {
    /// An empty table; `seed` makes the choice of far links reproducible.
    pub fn new(config: NeighbourConfig, seed: u64) -> Self {
        NeighbourTable {
            config,
            known: BTreeMap::new(),
            near: BTreeSet::new(),
            far: BTreeSet::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// The configuration this table was made with.
    pub fn config(&self) -> &NeighbourConfig {
        &self.config
    }

    /// Records a peer we heard of (peer exchange, mDNS, bootstrap) but have
    /// not measured yet. Returns whether it was new. Ignored when the table is
    /// full, so that gossip cannot push measured peers out.
    pub fn add_candidate(&mut self, peer: P) -> bool {
        // A full table (most of a run) answers without a search.
        if self.known.len() >= self.config.max_known || self.known.contains_key(&peer) {
            return false;
        }
        self.known.insert(peer, PeerInfo::default());
        true
    }

    /// Records one RTT sample to `peer`, measured at `now`. A new peer
    /// when the table is full takes the place of the farthest
    /// non-neighbour; if every known peer is a neighbour (`max_known` not
    /// above `near + far`), the sample is ignored.
    pub fn observe_rtt(&mut self, peer: P, rtt: Duration, now: Time) {
        self.observe(peer, rtt, now);
    }

    /// [`observe_rtt`](Self::observe_rtt), returning the peer's smoothed
    /// RTT and reported coordinate after the sample (`None` if it was
    /// ignored): what the keeper reads next, without a second search.
    pub(crate) fn observe(
        &mut self,
        peer: P,
        rtt: Duration,
        now: Time,
    ) -> Option<(Duration, Option<(Position, Time)>)> {
        let limit = self.config.samples.max(1);
        let sample = nanos(rtt);
        // A known peer (almost every sample) is found with one search.
        if let Some(info) = self.known.get_mut(&peer) {
            return Some(Self::add_sample(info, sample, limit, now));
        }
        if self.known.len() >= self.config.max_known {
            self.forget_one_non_neighbour();
            if self.known.len() >= self.config.max_known {
                return None;
            }
        }
        let info = self.known.entry(peer).or_default();
        Some(Self::add_sample(info, sample, limit, now))
    }

    /// One sample (in nanoseconds) of a known peer: its smoothed RTT and
    /// reported coordinate after it.
    fn add_sample(
        info: &mut PeerInfo,
        sample: u64,
        limit: usize,
        now: Time,
    ) -> (Duration, Option<(Position, Time)>) {
        let min = info.min;
        let more = info.more(limit);
        let gone = more.samples.push(sample, limit);
        more.last_measured = Some(now);
        // The minimum changes only if the sample that left was it (or the
        // new one is below it); the first sample is the minimum.
        let min = if gone == Some(min) {
            more.samples.min().unwrap_or(sample)
        } else {
            min.min(sample)
        };
        let position = more.position;
        info.min = min;
        (Duration::from_nanos(min), position)
    }

    /// Forgets a peer (it failed, left, or was refused). It stops being a
    /// neighbour at the next [`refresh`](Self::refresh).
    pub fn remove(&mut self, peer: &P) {
        self.known.remove(peer);
    }

    /// Whether `peer` is known (measured or not).
    pub fn contains(&self, peer: &P) -> bool {
        self.known.contains_key(peer)
    }

    /// The smoothed RTT to `peer`, if it was measured.
    pub fn rtt(&self, peer: &P) -> Option<Duration> {
        self.known.get(peer).and_then(PeerInfo::smoothed)
    }

    /// When `peer` was last measured.
    pub fn last_measured(&self, peer: &P) -> Option<Time> {
        self.known
            .get(peer)
            .and_then(|info| info.more.as_ref().and_then(|more| more.last_measured))
    }

    /// Records the network coordinate `peer` reported at `now` (checked by
    /// the caller), if the peer is known: it is forgotten with the peer.
    pub fn set_position(&mut self, peer: &P, position: Position, now: Time) {
        let limit = self.config.samples.max(1);
        if let Some(info) = self.known.get_mut(peer) {
            info.more(limit).position = Some((position, now));
        }
    }

    /// The network coordinate `peer` last reported, with when.
    pub fn position(&self, peer: &P) -> Option<(Position, Time)> {
        self.known.get(peer).and_then(PeerInfo::position)
    }

    /// Known peers not measured yet: the driver should connect to them so that
    /// their RTT can be measured.
    pub fn unmeasured(&self) -> impl Iterator<Item = &P> {
        self.known
            .iter()
            .filter(|(_, info)| !info.is_measured())
            .map(|(peer, _)| peer)
    }

    /// Every known peer with its smoothed RTT (`None` if not measured).
    pub fn known(&self) -> impl Iterator<Item = (&P, Option<Duration>)> {
        self.known
            .iter()
            .map(|(peer, info)| (peer, info.smoothed()))
    }

    /// The number of known peers.
    pub fn known_len(&self) -> usize {
        self.known.len()
    }

    /// What kind of neighbour `peer` is, if it is one.
    pub fn kind(&self, peer: &P) -> Option<LinkKind> {
        if self.near.contains(peer) {
            Some(LinkKind::Near)
        } else if self.far.contains(peer) {
            Some(LinkKind::Far)
        } else {
            None
        }
    }

    /// The current neighbours with their kind and smoothed RTT, near ones
    /// first, each group in peer order.
    pub fn neighbours(&self) -> impl Iterator<Item = (&P, LinkKind, Duration)> {
        let rtt = |peer: &P| self.rtt(peer).unwrap_or(Duration::MAX);
        self.near
            .iter()
            .map(move |p| (p, LinkKind::Near, rtt(p)))
            .chain(self.far.iter().map(move |p| (p, LinkKind::Far, rtt(p))))
    }

    /// The current neighbours, near ones first, each group in peer order
    /// (what [`neighbours`](Self::neighbours) gives, without a search for
    /// each one's RTT).
    pub fn neighbour_peers(&self) -> impl Iterator<Item = &P> {
        self.near.iter().chain(self.far.iter())
    }

    /// The measured peers, in peer order.
    pub fn measured_peers(&self) -> impl Iterator<Item = &P> {
        self.known
            .iter()
            .filter(|(_, info)| info.is_measured())
            .map(|(peer, _)| peer)
    }

    /// The current neighbours with their smoothed RTT, as the flood router
    /// takes them.
    pub fn neighbour_rtts(&self) -> Vec<(P, Duration)> {
        self.neighbours()
            .map(|(peer, _, rtt)| (peer.clone(), rtt))
            .collect()
    }

    /// The number of current neighbours.
    pub fn len(&self) -> usize {
        self.near.len() + self.far.len()
    }

    /// Whether there are no neighbours.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Recomputes the neighbour set from the current measurements: the `near`
    /// measured peers with the smallest RTT, plus `far` random far links.
    /// Existing far links are kept while they remain known and measured, so
    /// that the overlay does not churn on every refresh.
    pub fn refresh(&mut self) -> NeighbourChanges<P> {
        let before: BTreeSet<P> = self.near.union(&self.far).cloned().collect();

        // Current near neighbours rank as if they were a little nearer.
        let keep = 1.0 - self.config.hysteresis.clamp(0.0, 1.0);
        let mut measured: Vec<(Duration, &P)> = self
            .known
            .iter()
            .filter_map(|(peer, info)| {
                let rtt = info.smoothed()?;
                let rank = if self.near.contains(peer) {
                    rtt.mul_f64(keep)
                } else {
                    rtt
                };
                Some((rank, peer))
            })
            .collect();
        // The `near` smallest first (ranks are distinct: peers are); the
        // rest is sorted only if far links are to be drawn from it in order
        // (see below).
        let split = self.config.near.min(measured.len());
        if split < measured.len() {
            measured.select_nth_unstable(split);
        }
        let near: BTreeSet<P> = measured[..split]
            .iter()
            .map(|(_, peer)| (*peer).clone())
            .collect();

        let mut far: BTreeSet<P> = self
            .far
            .iter()
            .filter(|peer| !near.contains(*peer) && self.rtt(peer).is_some())
            .cloned()
            .collect();
        while far.len() > self.config.far {
            let drop = far.iter().next_back().cloned();
            if let Some(drop) = drop {
                far.remove(&drop);
            }
        }
        let wanted = self.config.far - far.len();
        // Drawing none still draws a number for every peer of the pool, but
        // what is drawn does not depend on their order: the pool is sorted
        // only when picks are to be made from it (most refreshes keep their
        // far links).
        let rest = &mut measured[split..];
        if wanted > 0 {
            rest.sort_unstable();
        }
        let pool = rest
            .iter()
            .map(|(_, peer)| *peer)
            .filter(|peer| !far.contains(*peer));
        let picks = pool.choose_multiple(&mut self.rng, wanted);
        far.extend(picks.into_iter().cloned());

        self.near = near;
        self.far = far;
        let after: BTreeSet<P> = self.near.union(&self.far).cloned().collect();
        NeighbourChanges {
            added: after.difference(&before).cloned().collect(),
            removed: before.difference(&after).cloned().collect(),
        }
    }

    fn forget_one_non_neighbour(&mut self) {
        // Forget an unmeasured peer first (the last in peer order), else
        // the farthest measured one (the last of equals). Unmeasured peers
        // are most of a full table, so the search from the back for one
        // seldom goes far; the farthest measured needs every entry.
        let neighbour = |peer: &P| self.near.contains(peer) || self.far.contains(peer);
        let victim = self
            .known
            .iter()
            .rev()
            .find(|(peer, info)| !info.is_measured() && !neighbour(peer))
            .or_else(|| {
                self.known
                    .iter()
                    .filter(|(peer, _)| !neighbour(peer))
                    .max_by_key(|(_, info)| info.smoothed())
            })
            .map(|(peer, _)| peer.clone());
        if let Some(victim) = victim {
            self.known.remove(&victim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    #[test]
    fn keeps_the_nearest_and_a_far_link() {
        let config = NeighbourConfig {
            near: 2,
            far: 1,
            samples: 4,
            max_known: 16,
            hysteresis: 0.1,
        };
        let mut table = NeighbourTable::new(config, 7);
        for (peer, rtt) in [(1u32, 30), (2, 1), (3, 2), (4, 50), (5, 3)] {
            table.observe_rtt(peer, ms(rtt), ms(0));
        }
        let changes = table.refresh();
        assert_eq!(table.kind(&2), Some(LinkKind::Near));
        assert_eq!(table.kind(&3), Some(LinkKind::Near));
        let far: Vec<_> = table
            .neighbours()
            .filter(|(_, kind, _)| *kind == LinkKind::Far)
            .map(|(p, _, _)| *p)
            .collect();
        assert_eq!(far.len(), 1);
        assert!([1, 4, 5].contains(&far[0]));
        assert_eq!(changes.added.len(), 3);
        assert!(changes.removed.is_empty());
    }

    #[test]
    fn smoothing_takes_the_minimum_of_recent_samples() {
        let mut table = NeighbourTable::new(
            NeighbourConfig {
                samples: 2,
                ..NeighbourConfig::default()
            },
            0,
        );
        table.observe_rtt(1u32, ms(1), ms(0));
        table.observe_rtt(1, ms(9), ms(1));
        assert_eq!(table.rtt(&1), Some(ms(1)));
        // The 1 ms sample falls out of the window of two.
        table.observe_rtt(1, ms(5), ms(2));
        assert_eq!(table.rtt(&1), Some(ms(5)));
    }

    #[test]
    fn lost_peers_are_replaced_and_far_links_are_stable() {
        let config = NeighbourConfig {
            near: 2,
            far: 2,
            samples: 1,
            max_known: 64,
            hysteresis: 0.1,
        };
        let mut table = NeighbourTable::new(config, 1);
        for peer in 0u32..20 {
            table.observe_rtt(peer, ms(u64::from(peer) + 1), ms(0));
        }
        table.refresh();
        let far_before: Vec<u32> = table
            .neighbours()
            .filter(|(_, k, _)| *k == LinkKind::Far)
            .map(|(p, _, _)| *p)
            .collect();
        assert_eq!(table.refresh(), NeighbourChanges::default());

        table.remove(&0);
        let changes = table.refresh();
        assert_eq!(changes.removed, vec![0]);
        assert_eq!(table.kind(&1), Some(LinkKind::Near));
        assert_eq!(table.kind(&2), Some(LinkKind::Near));
        for peer in far_before.iter().filter(|p| **p != 2) {
            assert_eq!(
                table.kind(peer),
                Some(LinkKind::Far),
                "far link {peer} kept"
            );
        }
        assert_eq!(table.len(), 4);
    }

    #[test]
    fn a_slightly_nearer_peer_does_not_displace_a_near_neighbour() {
        let config = NeighbourConfig {
            near: 1,
            far: 0,
            samples: 1,
            max_known: 8,
            hysteresis: 0.1,
        };
        let mut table = NeighbourTable::new(config, 1);
        let us = Duration::from_micros;
        table.observe_rtt(1u32, us(1000), ms(0));
        table.refresh();
        table.observe_rtt(2, us(950), ms(0));
        assert_eq!(
            table.refresh(),
            NeighbourChanges::default(),
            "5% nearer is noise"
        );
        assert!(table.contains(&2));
        table.observe_rtt(3, us(800), ms(0));
        let changes = table.refresh();
        assert_eq!(changes.added, vec![3], "20% nearer wins");
        assert_eq!(changes.removed, vec![1]);
    }

    #[test]
    fn a_full_table_forgets_far_non_neighbours_not_neighbours() {
        let config = NeighbourConfig {
            near: 1,
            far: 0,
            samples: 1,
            max_known: 2,
            hysteresis: 0.1,
        };
        let mut table = NeighbourTable::new(config, 1);
        table.observe_rtt(1u32, ms(1), ms(0));
        table.observe_rtt(2, ms(9), ms(0));
        table.refresh();
        table.observe_rtt(3, ms(5), ms(0));
        assert_eq!(table.known_len(), 2);
        assert!(table.rtt(&1).is_some());
        assert!(table.rtt(&2).is_none(), "the farthest non-neighbour went");
        assert!(
            !table.add_candidate(4),
            "gossip cannot push out measured peers"
        );
    }

    mod properties {
        use proptest::prelude::{prop_assert, prop_assert_eq, prop_oneof, proptest};
        use proptest::strategy::{Just, Strategy};

        use super::*;

        #[derive(Debug, Clone)]
        enum Op {
            Measure(u32, u64),
            Candidate(u32),
            Remove(u32),
            Refresh,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0u32..40, 1u64..100_000).prop_map(|(p, us)| Op::Measure(p, us)),
                1 => (0u32..40).prop_map(Op::Candidate),
                1 => (0u32..40).prop_map(Op::Remove),
                2 => Just(Op::Refresh),
            ]
        }

        proptest! {
            /// After every refresh: at most `near` near and `far` far links,
            /// disjoint, all measured; exactly `near` near links when that
            /// many peers are measured; every near link no farther (up to
            /// the hysteresis) than any measured peer left out; and the far
            /// links as many as the other measured peers allow.
            #[test]
            fn the_nearest_measured_peers_are_chosen_and_links_are_bounded(
                near in 0usize..6,
                far in 0usize..4,
                samples in 1usize..4,
                max_known in 1usize..50,
                hysteresis in 0.0f64..0.5,
                seed in 0u64..1000,
                ops in proptest::collection::vec(op(), 1..120),
            ) {
                let config = NeighbourConfig { near, far, samples, max_known, hysteresis };
                let mut table = NeighbourTable::new(config, seed);
                for (i, op) in ops.into_iter().enumerate() {
                    let now = Duration::from_millis(i as u64);
                    match op {
                        Op::Measure(peer, us) => {
                            table.observe_rtt(peer, Duration::from_micros(us), now)
                        }
                        Op::Candidate(peer) => {
                            table.add_candidate(peer);
                        }
                        Op::Remove(peer) => table.remove(&peer),
                        Op::Refresh => {
                            table.refresh();
                            check(&table, near, far, hysteresis)?;
                        }
                    }
                    prop_assert!(table.known_len() <= max_known);
                }
            }
        }

        fn check(
            table: &NeighbourTable<u32>,
            near: usize,
            far: usize,
            hysteresis: f64,
        ) -> Result<(), proptest::test_runner::TestCaseError> {
            let near_links: Vec<(u32, Duration)> = table
                .neighbours()
                .filter(|(_, kind, _)| *kind == LinkKind::Near)
                .map(|(p, _, rtt)| (*p, rtt))
                .collect();
            let far_links = table.len() - near_links.len();
            let measured: Vec<(u32, Duration)> = table
                .known()
                .filter_map(|(p, rtt)| rtt.map(|rtt| (*p, rtt)))
                .collect();
            prop_assert!(near_links.len() <= near && far_links <= far);
            prop_assert_eq!(near_links.len(), near.min(measured.len()));
            prop_assert_eq!(far_links, far.min(measured.len() - near_links.len()));
            for (peer, kind, rtt) in table.neighbours() {
                prop_assert_eq!(
                    table.rtt(peer),
                    Some(rtt),
                    "{:?} link {} unmeasured",
                    kind,
                    peer
                );
            }
            for (out, out_rtt) in measured
                .iter()
                .filter(|(p, _)| table.kind(p) != Some(LinkKind::Near))
            {
                for (chosen, rtt) in &near_links {
                    prop_assert!(
                        rtt.mul_f64(1.0 - hysteresis) <= *out_rtt,
                        "near link {} ({:?}) while {} ({:?}) is left out",
                        chosen,
                        rtt,
                        out,
                        out_rtt
                    );
                }
            }
            Ok(())
        }
    }
}

//! Forwarding of flooded adverts: the pure "forward or not, to whom" logic.
//!
//! Rules, in the order they are applied to a copy arriving from a peer:
//! 1. **Rate limit**: each peer may send at most `adverts_per_peer_per_sec`
//!    adverts per second (a token bucket with a burst of as many); excess
//!    copies are dropped.
//! 2. **Latency budget**: a node whose distance to the home (its own
//!    measurement or estimate if it has one and it is shorter, else the RTT
//!    summed along the path the copy took; see [`HomeDistance`]) exceeds the
//!    advert's budget neither joins nor forwards.
//! 3. **Duplicates**: every flood `(job, seq)` is delivered to the local node
//!    once. A later copy is forwarded again only if it may travel farther
//!    (more TTL left) or came by a clearly shorter path; otherwise it is
//!    dropped. Without that rule, a copy that first arrived the long way round
//!    with little TTL left would stop the flood short of nodes within its
//!    radius.
//! 4. **Forwarding**: to every neighbour but the sender, the peers the
//!    sender says it also sent the copy to, and the neighbours known to get
//!    the flood by a way shorter than through this node (see below), with
//!    the TTL less one (capped by the node's own `max_forward_ttl`) and the
//!    link's RTT added to the path; nothing when no TTL is left, and
//!    nothing to a neighbour that the path through this node takes past the
//!    latency budget unless its estimated distance to the home is within it
//!    (the receiver would only drop it).
//!
//! **Reverse-path pruning.** A flood's copies cross every link of the ball
//! it reaches, and most arrive where a copy came first: a home floods the
//! same balls again and again (a growing budget, the next job). So a node
//! remembers, per home (or per job where the driver does not say the
//! home), how far from the home each neighbour is known to be: a
//! neighbour's own copy tells its path (the copy's path less the link),
//! and a neighbour the sender also served is no farther than this node's
//! path and the link between them (the sender reached it directly). A
//! later flood goes to a neighbour only if the path through this node
//! would be no longer than that: otherwise the neighbour's copy comes
//! sooner by the way it came before, and this node's would be a
//! duplicate. (Where two ways are equal, both send: pruning both would
//! leave the neighbour with none.)
//! That is reverse-path forwarding, learnt from the floods themselves. The
//! overlay changes, so a distance is believed for [`DISTANCE_KEPT`]; then
//! the neighbour gets copies again until one tells it afresh.
//!
//! The seen-cache holds at most `seen_capacity` floods (oldest forgotten
//! first), the neighbours' distances at most `seen_capacity` homes or jobs
//! (each with at most [`MAX_DISTANCES_PER_HOME`] neighbours, the oldest
//! forgotten first), and the rate limiter tracks at most
//! `rate_peers_capacity` peers.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::advert::{FloodHeader, JobId};
use crate::bounded::make_room;
use crate::{PeerKey, Time};

/// What a node knows of distances to a flood's home besides the path its
/// copy took: its own measurement or estimate, and estimates of its
/// neighbours' (network coordinates, [`crate::vivaldi`]). A distance that
/// does not depend on the path lets a flood reach a near node whose only
/// overlay way from the home passes through a far site, and keeps a copy
/// from a neighbour that is farther than the budget whatever the path.
pub trait HomeDistance<P> {
    /// This node's distance to the home, if it knows one.
    fn own(&self) -> Option<Duration>;
    /// A neighbour's estimated distance to the home, if known.
    fn peer(&self, peer: &P) -> Option<Duration>;
    /// The home (the flood's origin), if the driver knows it: the
    /// neighbours' distances the copies tell are then kept per home, so
    /// that the first flood of a home's next job is pruned too (rule 4);
    /// otherwise per job.
    fn home(&self) -> Option<&P> {
        None
    }
}

/// Only a direct measurement of this node's RTT to the home (or none): the
/// path decides everything else.
impl<P> HomeDistance<P> for Option<Duration> {
    fn own(&self) -> Option<Duration> {
        *self
    }

    fn peer(&self, _: &P) -> Option<Duration> {
        None
    }
}

/// Node-side limits on flooding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloodConfig {
    /// The largest TTL this node forwards with: a cap on the radius a
    /// far-away home can make this node spend bandwidth on.
    pub max_forward_ttl: u8,
    /// How many floods the duplicate cache remembers.
    pub seen_capacity: usize,
    /// How many adverts one peer may send per second (and in a burst).
    pub adverts_per_peer_per_sec: u32,
    /// How many peers the rate limiter tracks.
    pub rate_peers_capacity: usize,
    /// Whether to send no copy to the peers the sender also served nor to
    /// neighbours known to have a way shorter than through this node
    /// (rule 4, reverse-path pruning); off, a node floods to all
    /// its neighbours but the sender, as the original Zorilla did.
    #[serde(default = "default_prune")]
    pub prune: bool,
}

fn default_prune() -> bool {
    true
}

impl Default for FloodConfig {
    fn default() -> Self {
        FloodConfig {
            max_forward_ttl: 15,
            seen_capacity: 8192,
            adverts_per_peer_per_sec: 200,
            rate_peers_capacity: 1024,
            prune: true,
        }
    }
}

/// The identity of one flood: a job and the flood's sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FloodId {
    /// The job advertised.
    pub job: JobId,
    /// Which flood of the job.
    pub seq: u32,
}

/// Why a copy of an advert was not delivered nor forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DropReason {
    /// The sender exceeded its advert rate.
    RateLimited,
    /// This node is farther from the home than the advert's latency budget.
    OutsideBudget,
    /// A copy that went at least as far was seen before.
    Duplicate,
    /// The copy arrived with no TTL at all (a malformed advert).
    NoTtl,
}

/// What to do with a copy of an advert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<P> {
    /// First copy of this flood: forward it, then let the local node decide
    /// whether to join. `distance` is the node's estimate of its RTT to the
    /// home.
    Deliver {
        /// Copies to send: neighbour and the header to send it with.
        forward: Vec<(P, FloodHeader)>,
        /// The estimated distance to the home.
        distance: Duration,
    },
    /// A better copy of a flood already delivered: forward it again, do not
    /// deliver it again.
    Reforward {
        /// Copies to send.
        forward: Vec<(P, FloodHeader)>,
    },
    /// Drop the copy.
    Drop(DropReason),
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    best_ttl: u8,
    best_path: Duration,
    delivered: bool,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Time,
}

/// Counters of what the router did, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloodStats {
    /// Floods this node started.
    pub originated: u64,
    /// Copies delivered to the local node.
    pub delivered: u64,
    /// Copies sent on to neighbours.
    pub forwarded: u64,
    /// Copies dropped as duplicates.
    pub duplicates: u64,
    /// Copies dropped by the rate limit.
    pub rate_limited: u64,
    /// Copies dropped as outside the latency budget.
    pub outside_budget: u64,
}

/// The flood router of one node. See the [module documentation](self).
#[derive(Debug, Clone)]
pub struct FloodRouter<P> {
    config: FloodConfig,
    seen: BTreeMap<FloodId, Seen>,
    seen_order: VecDeque<FloodId>,
    buckets: BTreeMap<P, Bucket>,
    /// Per home (or per job, where the driver does not say the home), the
    /// neighbours' known distances to the home (see the module
    /// documentation).
    nearer: BTreeMap<NearerKey<P>, BTreeMap<P, Told>>,
    nearer_order: VecDeque<NearerKey<P>>,
    stats: FloodStats,
}

/// How long a neighbour's distance to a home is believed (reverse-path
/// pruning, see the module documentation): the overlay changes, and a
/// neighbour whose shorter way went away must get copies again.
pub const DISTANCE_KEPT: Duration = Duration::from_secs(60);

/// The most neighbours whose distance to one home a router keeps: a peer
/// may send copies without being a neighbour, and each would take an entry.
pub const MAX_DISTANCES_PER_HOME: usize = 256;

/// A neighbour's distance to a home, the shortest learnt since `at`.
#[derive(Debug, Clone, Copy)]
struct Told {
    distance: Duration,
    at: Time,
}

/// What the neighbours' distances to a home are kept under.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum NearerKey<P> {
    /// The home: every flood of its jobs.
    Home(P),
    /// One job, where the driver does not say the home.
    Job(JobId),
}

/// A path shorter by less than this fraction is not worth a re-forward.
const PATH_IMPROVEMENT: f64 = 0.8;

impl<P: PeerKey> FloodRouter<P> {
    /// A router with empty caches.
    pub fn new(config: FloodConfig) -> Self {
        FloodRouter {
            config,
            seen: BTreeMap::new(),
            seen_order: VecDeque::new(),
            buckets: BTreeMap::new(),
            nearer: BTreeMap::new(),
            nearer_order: VecDeque::new(),
            stats: FloodStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FloodConfig {
        &self.config
    }

    /// What the router did so far.
    pub fn stats(&self) -> FloodStats {
        self.stats
    }

    /// Starts a flood from this node: the copies to send to `neighbours`
    /// (each with its RTT). `header.ttl` is the radius; `header.path_rtt` is
    /// ignored and starts at zero.
    pub fn originate(
        &mut self,
        id: FloodId,
        header: FloodHeader,
        neighbours: &[(P, Duration)],
    ) -> Vec<(P, FloodHeader)> {
        self.remember(
            id,
            Seen {
                best_ttl: u8::MAX,
                best_path: Duration::ZERO,
                delivered: true,
            },
        );
        self.stats.originated += 1;
        if header.ttl == 0 {
            return Vec::new();
        }
        let header = FloodHeader {
            path_rtt: Duration::ZERO,
            ..header
        };
        self.copies(None, &[], header, header.ttl, neighbours, &None)
    }

    /// Decides what to do with a copy of flood `id` that arrived from `from`.
    /// `direct_distance` is this node's own measured RTT to the home, if any;
    /// `neighbours` are the current neighbours with their RTTs. Same as
    /// [`receive_from`](Self::receive_from) with no list of the sender's
    /// other copies.
    pub fn receive(
        &mut self,
        from: &P,
        id: FloodId,
        header: FloodHeader,
        direct_distance: Option<Duration>,
        neighbours: &[(P, Duration)],
        now: Time,
    ) -> Verdict<P> {
        self.receive_from(from, id, header, &[], direct_distance, neighbours, now)
    }

    /// Like [`receive`](Self::receive), where `also_sent` are the peers the
    /// sender sent this flood to besides this node (the peers of its
    /// `forward` list, carried in the copy): this node sends them no copy,
    /// since theirs came straight from the sender, one hop earlier. In an
    /// overlay where neighbours share neighbours, that saves most
    /// duplicates.
    #[allow(clippy::too_many_arguments)]
    pub fn receive_from(
        &mut self,
        from: &P,
        id: FloodId,
        header: FloodHeader,
        also_sent: &[P],
        direct_distance: Option<Duration>,
        neighbours: &[(P, Duration)],
        now: Time,
    ) -> Verdict<P> {
        self.receive_with(
            from,
            id,
            header,
            also_sent,
            &direct_distance,
            neighbours,
            now,
        )
    }

    /// Like [`receive_from`](Self::receive_from), with distances to the
    /// home that do not depend on the path: this node's own (a measurement
    /// or an estimate) decides whether it is within the budget (the path's
    /// sum still counts where it is shorter), and a neighbour is sent a
    /// copy when its estimated distance, or the path through this node, is
    /// within the budget.
    #[allow(clippy::too_many_arguments)]
    pub fn receive_with(
        &mut self,
        from: &P,
        id: FloodId,
        header: FloodHeader,
        also_sent: &[P],
        distances: &dyn HomeDistance<P>,
        neighbours: &[(P, Duration)],
        now: Time,
    ) -> Verdict<P> {
        let direct_distance = distances.own();
        if !self.take_token(from, now) {
            self.stats.rate_limited += 1;
            return Verdict::Drop(DropReason::RateLimited);
        }
        if header.ttl == 0 {
            return Verdict::Drop(DropReason::NoTtl);
        }
        let distance = direct_distance.map_or(header.path_rtt, |d| d.min(header.path_rtt));
        if header
            .latency_budget
            .is_some_and(|budget| distance > budget)
        {
            self.stats.outside_budget += 1;
            return Verdict::Drop(DropReason::OutsideBudget);
        }
        let key = distances
            .home()
            .map_or(NearerKey::Job(id.job), |home| NearerKey::Home(home.clone()));
        if self.config.prune {
            let link = |peer: &P| {
                neighbours
                    .iter()
                    .find(|(p, _)| p == peer)
                    .map(|(_, rtt)| *rtt)
            };
            let sender = header
                .path_rtt
                .saturating_sub(link(from).unwrap_or_default());
            self.note_distance(&key, from, sender, now);
            // The sender served them directly: no farther than this
            // node's path and the link from here.
            for peer in also_sent {
                if let Some(rtt) = link(peer) {
                    self.note_distance(&key, peer, header.path_rtt.saturating_add(rtt), now);
                }
            }
        }
        let forward_ttl = (header.ttl - 1).min(self.config.max_forward_ttl);
        // A copy that carries more TTL than the one seen goes again also to
        // peers nearer the home: they may have had the flood with too little
        // TTL left to pass it on (nearer in latency is not fewer hops).
        let more_ttl = self
            .seen
            .get(&id)
            .is_some_and(|seen| forward_ttl > seen.best_ttl);
        let mut skip: Vec<P> = Vec::new();
        if self.config.prune {
            skip.extend_from_slice(also_sent);
        }
        if self.config.prune
            && !more_ttl
            && let Some(known) = self.nearer.get(&key)
        {
            // Reverse-path pruning: no copy where the neighbour's own way
            // is shorter than the one through this node.
            skip.extend(
                neighbours
                    .iter()
                    .filter(|(peer, rtt)| {
                        known.get(peer).is_some_and(|told| {
                            now.saturating_sub(told.at) < DISTANCE_KEPT
                                && told.distance < header.path_rtt.saturating_add(*rtt)
                        })
                    })
                    .map(|(peer, _)| peer.clone()),
            );
        }
        let also_sent = &skip[..];
        let first = match self.seen.get_mut(&id) {
            Some(seen) => {
                let shorter = header.latency_budget.is_some()
                    && header.path_rtt.as_secs_f64()
                        < seen.best_path.as_secs_f64() * PATH_IMPROVEMENT;
                if !(more_ttl || shorter) {
                    self.stats.duplicates += 1;
                    return Verdict::Drop(DropReason::Duplicate);
                }
                seen.best_ttl = seen.best_ttl.max(forward_ttl);
                seen.best_path = seen.best_path.min(header.path_rtt);
                false
            }
            None => {
                self.remember(
                    id,
                    Seen {
                        best_ttl: forward_ttl,
                        best_path: header.path_rtt,
                        delivered: true,
                    },
                );
                self.stats.delivered += 1;
                true
            }
        };
        let forward = self.copies(
            Some(from),
            also_sent,
            header,
            forward_ttl,
            neighbours,
            distances,
        );
        if first {
            Verdict::Deliver { forward, distance }
        } else {
            Verdict::Reforward { forward }
        }
    }

    /// Whether flood `id` was delivered here (or started here).
    pub fn has_seen(&self, id: &FloodId) -> bool {
        self.seen.get(id).is_some_and(|seen| seen.delivered)
    }

    /// Forgets the rate-limit state of a peer that left.
    pub fn peer_lost(&mut self, peer: &P) {
        self.buckets.remove(peer);
    }

    #[allow(clippy::too_many_arguments)]
    fn copies(
        &mut self,
        from: Option<&P>,
        also_sent: &[P],
        header: FloodHeader,
        ttl: u8,
        neighbours: &[(P, Duration)],
        distances: &dyn HomeDistance<P>,
    ) -> Vec<(P, FloodHeader)> {
        if ttl == 0 {
            return Vec::new();
        }
        let within_budget = |peer: &P, rtt: &Duration| {
            header.latency_budget.is_none_or(|budget| {
                let by_path = header.path_rtt.saturating_add(*rtt);
                distances
                    .peer(peer)
                    .map_or(by_path, |estimate| estimate.min(by_path))
                    <= budget
            })
        };
        let forward: Vec<(P, FloodHeader)> = neighbours
            .iter()
            .filter(|(peer, rtt)| {
                Some(peer) != from && !also_sent.contains(peer) && within_budget(peer, rtt)
            })
            .map(|(peer, rtt)| {
                let copy = FloodHeader {
                    ttl,
                    path_rtt: header.path_rtt.saturating_add(*rtt),
                    ..header
                };
                (peer.clone(), copy)
            })
            .collect();
        self.stats.forwarded += forward.len() as u64;
        forward
    }

    /// Learns that `peer` is at most `distance` from the home of `key`:
    /// the shortest since the entry was made, or afresh once it is stale.
    fn note_distance(&mut self, key: &NearerKey<P>, peer: &P, distance: Duration, now: Time) {
        if !self.nearer.contains_key(key) {
            self.nearer_order.push_back(key.clone());
            while self.nearer_order.len() > self.config.seen_capacity {
                if let Some(old) = self.nearer_order.pop_front() {
                    self.nearer.remove(&old);
                }
            }
        }
        let known = self.nearer.entry(key.clone()).or_default();
        make_room(known, peer, MAX_DISTANCES_PER_HOME, |told| told.at);
        let fresh = Told { distance, at: now };
        let told = known.entry(peer.clone()).or_insert(fresh);
        if distance <= told.distance || now.saturating_sub(told.at) >= DISTANCE_KEPT {
            *told = fresh;
        }
    }

    fn remember(&mut self, id: FloodId, seen: Seen) {
        if self.seen.insert(id, seen).is_none() {
            self.seen_order.push_back(id);
        }
        while self.seen_order.len() > self.config.seen_capacity {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen.remove(&old);
            }
        }
    }

    fn take_token(&mut self, from: &P, now: Time) -> bool {
        let rate = f64::from(self.config.adverts_per_peer_per_sec.max(1));
        // When full, the peer idle longest is forgotten: it has the
        // fullest bucket anyway.
        make_room(
            &mut self.buckets,
            from,
            self.config.rate_peers_capacity,
            |bucket| bucket.updated,
        );
        let bucket = self.buckets.entry(from.clone()).or_insert(Bucket {
            tokens: rate,
            updated: now,
        });
        let elapsed = now.saturating_sub(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    fn header(ttl: u8) -> FloodHeader {
        FloodHeader {
            seq: 0,
            ttl,
            latency_budget: None,
            path_rtt: Duration::ZERO,
        }
    }

    /// Where the driver says the home, what a copy told of a neighbour's
    /// distance holds for every job of that home: the first flood of the
    /// next job is pruned too. Without the home, only later floods of the
    /// same job are.
    #[test]
    fn nearer_neighbours_are_remembered_per_home_where_the_home_is_known() {
        struct Home(u32);
        impl HomeDistance<u32> for Home {
            fn own(&self) -> Option<Duration> {
                None
            }
            fn peer(&self, _: &u32) -> Option<Duration> {
                None
            }
            fn home(&self) -> Option<&u32> {
                Some(&self.0)
            }
        }
        let neighbours = [(1, ms(1)), (2, ms(1)), (3, ms(1))];
        let at = |path: u64| FloodHeader {
            path_rtt: ms(path),
            ..header(5)
        };
        let flood = |job: u64| FloodId {
            job: JobId(job),
            seq: 0,
        };
        let peers = |verdict: Verdict<u32>| match verdict {
            Verdict::Deliver { forward, .. } => forward.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        for (distances, pruned) in [(&Home(7) as &dyn HomeDistance<u32>, true), (&None, false)] {
            let mut router: FloodRouter<u32> = FloodRouter::new(FloodConfig::default());
            // Job 1's copy from peer 1 says peer 1 is 2 ms from the home;
            // peer 3's duplicate, 1 ms.
            router.receive_with(&1, flood(1), at(3), &[], distances, &neighbours, ms(0));
            router.receive_with(&3, flood(1), at(2), &[], distances, &neighbours, ms(1));
            // Job 2's first flood, from the same home, comes by peer 2 at
            // 4 ms: peers 1 and 3 are nearer the home.
            let sent =
                peers(router.receive_with(&2, flood(2), at(4), &[], distances, &neighbours, ms(2)));
            if pruned {
                assert_eq!(sent, Vec::<u32>::new());
            } else {
                assert_eq!(sent, vec![1, 3]);
            }
        }
    }

    /// A copy is not sent back to the peers its sender also sent it to;
    /// and a later flood of the same job goes to a neighbour only where the
    /// way through this node is no longer than the one the neighbour is
    /// known to have (its own copy told it, or the sender served it
    /// directly).
    #[test]
    fn no_copy_to_peers_the_sender_served_nor_where_a_shorter_way_is_known() {
        let mut router: FloodRouter<u32> = FloodRouter::new(FloodConfig::default());
        let neighbours = [(1, ms(1)), (2, ms(1)), (3, ms(1)), (4, ms(1))];
        let at = |path: u64, seq: u32| FloodHeader {
            seq,
            path_rtt: ms(path),
            ..header(5)
        };
        let flood = |seq: u32| FloodId { job: JobId(9), seq };
        let peers = |verdict: Verdict<u32>| match verdict {
            Verdict::Deliver { forward, .. } => forward.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        // Peer 1 (2 ms from the home: 3 ms less its link) sent the first
        // flood here and to peer 2, so peer 2 is at most 4 ms away.
        let sent =
            peers(router.receive_from(&1, flood(0), at(3, 0), &[2], None, &neighbours, ms(0)));
        assert_eq!(sent, vec![3, 4]);
        // Peer 3's duplicate says it is 1 ms from the home.
        let dup = router.receive_from(&3, flood(0), at(2, 0), &[], None, &neighbours, ms(1));
        assert_eq!(dup, Verdict::Drop(DropReason::Duplicate));
        // The next flood, from peer 4 at 4 ms (so peer 4 is 3 ms away): the
        // way through here is 5 ms, and each of 1 (2 ms), 2 (4 ms) and 3
        // (1 ms) has a shorter one.
        let sent =
            peers(router.receive_from(&4, flood(1), at(4, 1), &[], None, &neighbours, ms(2)));
        assert_eq!(sent, Vec::<u32>::new());
        // The one after comes by peer 3 at 2 ms: 3 ms through here is
        // longer than peer 1's 2 ms, and no longer than 2's 4 ms and 4's
        // 3 ms (equal ways both send).
        let sent =
            peers(router.receive_from(&3, flood(2), at(2, 2), &[], None, &neighbours, ms(3)));
        assert_eq!(sent, vec![2, 4]);
        // A minute later nothing learnt holds: the overlay may have changed.
        let later = ms(3) + DISTANCE_KEPT;
        let sent =
            peers(router.receive_from(&4, flood(3), at(4, 3), &[], None, &neighbours, later));
        assert_eq!(sent, vec![1, 2, 3]);
        // Without pruning (the paper's plain flood): all but the sender.
        let mut plain: FloodRouter<u32> = FloodRouter::new(FloodConfig {
            prune: false,
            ..FloodConfig::default()
        });
        let sent =
            peers(plain.receive_from(&1, flood(0), at(3, 0), &[2], None, &neighbours, ms(0)));
        assert_eq!(sent, vec![2, 3, 4]);
    }

    /// A stranger's copies cannot grow the distances a router keeps per
    /// home past their bound.
    #[test]
    fn distances_kept_per_home_are_bounded() {
        let mut router: FloodRouter<u32> = FloodRouter::new(FloodConfig {
            adverts_per_peer_per_sec: 1_000_000,
            ..FloodConfig::default()
        });
        let flood = FloodId {
            job: JobId(1),
            seq: 0,
        };
        let senders = MAX_DISTANCES_PER_HOME as u32 + 50;
        for from in 0..senders {
            let also: Vec<u32> = (10_000..10_064).collect();
            router.receive_from(
                &from,
                flood,
                header(5),
                &also,
                None,
                &[],
                ms(u64::from(from)),
            );
        }
        let kept: usize = router.nearer.values().map(BTreeMap::len).sum();
        assert_eq!(kept, MAX_DISTANCES_PER_HOME);
    }

    /// Distances that do not depend on the path: a node whose path is long
    /// but whose own distance is within the budget delivers, and a
    /// neighbour estimated within the budget gets a copy the path alone
    /// would not send it; one estimated beyond it gets none.
    #[test]
    fn distances_that_do_not_depend_on_the_path_decide_the_budget() {
        struct Known;
        impl HomeDistance<u32> for Known {
            fn own(&self) -> Option<Duration> {
                Some(ms(4))
            }
            fn peer(&self, peer: &u32) -> Option<Duration> {
                match peer {
                    2 => Some(ms(5)),
                    3 => Some(ms(30)),
                    _ => None,
                }
            }
        }
        let mut router = FloodRouter::new(FloodConfig::default());
        let copy = FloodHeader {
            latency_budget: Some(ms(10)),
            path_rtt: ms(9),
            ..header(5)
        };
        // Links of 8 ms: by the path (17 ms) no copy would go anywhere.
        let neighbours = [(2u32, ms(8)), (3, ms(8)), (4, ms(8))];
        let verdict = router.receive_with(&1, ID, copy, &[], &Known, &neighbours, ms(0));
        let Verdict::Deliver { forward, distance } = verdict else {
            panic!("{verdict:?}");
        };
        assert_eq!(distance, ms(4));
        let peers: Vec<u32> = forward.iter().map(|(p, _)| *p).collect();
        assert_eq!(peers, vec![2]);
        assert_eq!(forward[0].1.path_rtt, ms(17), "the path still grows");
    }

    const ID: FloodId = FloodId {
        job: JobId(1),
        seq: 0,
    };

    #[test]
    fn forwards_to_all_but_the_sender_with_one_less_ttl_and_the_path_grown() {
        let mut router = FloodRouter::new(FloodConfig::default());
        let neighbours = [(1u32, ms(1)), (2, ms(2)), (3, ms(3))];
        let verdict = router.receive(&1, ID, header(3), None, &neighbours, ms(0));
        let Verdict::Deliver { forward, distance } = verdict else {
            panic!("expected delivery, got {verdict:?}");
        };
        assert_eq!(distance, Duration::ZERO);
        assert_eq!(
            forward,
            vec![
                (
                    2,
                    FloodHeader {
                        ttl: 2,
                        path_rtt: ms(2),
                        ..header(3)
                    }
                ),
                (
                    3,
                    FloodHeader {
                        ttl: 2,
                        path_rtt: ms(3),
                        ..header(3)
                    }
                ),
            ]
        );
        // The same copy again is a duplicate.
        assert_eq!(
            router.receive(&2, ID, header(3), None, &neighbours, ms(1)),
            Verdict::Drop(DropReason::Duplicate)
        );
    }

    #[test]
    fn last_hop_delivers_without_forwarding() {
        let mut router = FloodRouter::new(FloodConfig::default());
        let verdict = router.receive(&1u32, ID, header(1), None, &[(2, ms(1))], ms(0));
        assert_eq!(
            verdict,
            Verdict::Deliver {
                forward: vec![],
                distance: Duration::ZERO
            }
        );
    }

    #[test]
    fn a_copy_with_more_ttl_is_forwarded_again_but_not_delivered_again() {
        let mut router = FloodRouter::new(FloodConfig::default());
        let neighbours = [(1u32, ms(1)), (2, ms(1)), (3, ms(1))];
        assert!(matches!(
            router.receive(&1, ID, header(1), None, &neighbours, ms(0)),
            Verdict::Deliver { .. }
        ));
        let verdict = router.receive(&2, ID, header(3), None, &neighbours, ms(1));
        let Verdict::Reforward { forward } = verdict else {
            panic!("expected a re-forward, got {verdict:?}");
        };
        assert_eq!(forward.len(), 2);
        assert!(forward.iter().all(|(_, h)| h.ttl == 2));
    }

    #[test]
    fn node_cap_limits_the_forwarded_ttl() {
        let mut router = FloodRouter::new(FloodConfig {
            max_forward_ttl: 2,
            ..FloodConfig::default()
        });
        let verdict = router.receive(&1u32, ID, header(200), None, &[(2, ms(1))], ms(0));
        let Verdict::Deliver { forward, .. } = verdict else {
            panic!("{verdict:?}")
        };
        assert_eq!(forward[0].1.ttl, 2);
    }

    #[test]
    fn outside_the_latency_budget_neither_delivers_nor_forwards() {
        let mut router = FloodRouter::new(FloodConfig::default());
        let copy = FloodHeader {
            latency_budget: Some(ms(5)),
            path_rtt: ms(8),
            ..header(5)
        };
        assert_eq!(
            router.receive(&1u32, ID, copy, None, &[(2, ms(1))], ms(0)),
            Verdict::Drop(DropReason::OutsideBudget)
        );
        // A direct measurement below the budget wins over the long path.
        let verdict = router.receive(&1u32, ID, copy, Some(ms(4)), &[(2, ms(1))], ms(0));
        assert!(
            matches!(verdict, Verdict::Deliver { distance, .. } if distance == ms(4)),
            "{verdict:?}"
        );
    }

    #[test]
    fn rate_limit_per_peer_refills_over_time() {
        let mut router = FloodRouter::new(FloodConfig {
            adverts_per_peer_per_sec: 2,
            ..FloodConfig::default()
        });
        let mut id = ID;
        let mut verdicts = Vec::new();
        for seq in 0..3 {
            id.seq = seq;
            verdicts.push(router.receive(&1u32, id, header(1), None, &[], ms(0)));
        }
        assert!(matches!(verdicts[0], Verdict::Deliver { .. }));
        assert!(matches!(verdicts[1], Verdict::Deliver { .. }));
        assert_eq!(verdicts[2], Verdict::Drop(DropReason::RateLimited));
        // Another peer is not affected, and after a second peer 1 may send.
        id.seq = 10;
        assert!(matches!(
            router.receive(&2u32, id, header(1), None, &[], ms(0)),
            Verdict::Deliver { .. }
        ));
        id.seq = 11;
        assert!(matches!(
            router.receive(&1u32, id, header(1), None, &[], ms(1000)),
            Verdict::Deliver { .. }
        ));
    }

    #[test]
    fn seen_cache_is_bounded() {
        let mut router = FloodRouter::new(FloodConfig {
            seen_capacity: 4,
            adverts_per_peer_per_sec: 1000,
            ..FloodConfig::default()
        });
        for seq in 0..10 {
            let id = FloodId { job: JobId(1), seq };
            router.receive(&1u32, id, header(1), None, &[], ms(0));
        }
        assert_eq!(router.seen.len(), 4);
        assert!(router.has_seen(&FloodId {
            job: JobId(1),
            seq: 9
        }));
        assert!(!router.has_seen(&FloodId {
            job: JobId(1),
            seq: 0
        }));
    }

    mod properties {
        use std::collections::{BTreeMap, BTreeSet, VecDeque};

        use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};
        use rand::{Rng, SeedableRng};
        use rand_chacha::ChaCha8Rng;

        use super::*;

        /// Hop distances from node 0 over undirected `links`.
        fn hops_from_origin(
            n: usize,
            links: &BTreeMap<u32, Vec<(u32, Duration)>>,
        ) -> Vec<Option<u8>> {
            let mut hops = vec![None; n];
            hops[0] = Some(0u8);
            let mut queue = VecDeque::from([0u32]);
            while let Some(node) = queue.pop_front() {
                let d = hops[node as usize].unwrap_or(0);
                for (peer, _) in links.get(&node).into_iter().flatten() {
                    if hops[*peer as usize].is_none() {
                        hops[*peer as usize] = Some(d.saturating_add(1));
                        queue.push_back(*peer);
                    }
                }
            }
            hops
        }

        proptest! {
            /// Floods from node 0 over a random graph, copies handled in a
            /// random order: each node delivers each flood at most once, a
            /// copy never leaves a node with more TTL than it arrived with
            /// (less one), paths only grow, no delivered node is outside
            /// the budget, and a hop-limited flood reaches every node
            /// within its radius, whatever the order.
            #[test]
            fn each_node_delivers_a_flood_once_and_ttl_never_grows(
                n in 2usize..30,
                edges in proptest::collection::vec((0u32..30, 0u32..30, 1u64..20), 1..90),
                radius in 1u8..8,
                budget in proptest::option::of(1u64..60),
                floods in 1u32..3,
                order_seed in any::<u64>(),
            ) {
                let ms = Duration::from_millis;
                let mut links: BTreeMap<u32, Vec<(u32, Duration)>> = BTreeMap::new();
                let mut seen_edges = BTreeSet::new();
                for (a, b, rtt) in edges {
                    let (a, b) = (a % n as u32, b % n as u32);
                    if a != b && seen_edges.insert((a.min(b), a.max(b))) {
                        links.entry(a).or_default().push((b, ms(rtt)));
                        links.entry(b).or_default().push((a, ms(rtt)));
                    }
                }
                let config = FloodConfig {
                    adverts_per_peer_per_sec: 1_000_000,
                    ..FloodConfig::default()
                };
                let mut routers: Vec<FloodRouter<u32>> =
                    (0..n).map(|_| FloodRouter::new(config.clone())).collect();
                let neighbours = |node: u32| links.get(&node).cloned().unwrap_or_default();
                let mut rng = ChaCha8Rng::seed_from_u64(order_seed);
                let mut in_flight: Vec<(u32, u32, FloodId, FloodHeader)> = Vec::new();
                for seq in 0..floods {
                    let id = FloodId { job: JobId(1), seq };
                    let header = FloodHeader {
                        seq,
                        ttl: radius,
                        latency_budget: budget.map(ms),
                        path_rtt: Duration::ZERO,
                    };
                    for (to, copy) in routers[0].originate(id, header, &neighbours(0)) {
                        prop_assert_eq!(copy.ttl, radius);
                        in_flight.push((to, 0, id, copy));
                    }
                }
                let mut delivered: BTreeMap<(u32, FloodId), u32> = BTreeMap::new();
                while !in_flight.is_empty() {
                    let (to, from, id, copy) = in_flight.swap_remove(rng.random_range(0..in_flight.len()));
                    let verdict = routers[to as usize].receive(
                        &from, id, copy, None, &neighbours(to), Time::ZERO,
                    );
                    let forward = match verdict {
                        Verdict::Deliver { forward, distance } => {
                            *delivered.entry((to, id)).or_default() += 1;
                            prop_assert!(to != 0, "the origin delivered its own flood");
                            if let Some(budget) = copy.latency_budget {
                                prop_assert!(distance <= budget);
                            }
                            forward
                        }
                        Verdict::Reforward { forward } => forward,
                        Verdict::Drop(_) => Vec::new(),
                    };
                    for (next, out) in forward {
                        prop_assert!(out.ttl < copy.ttl, "TTL grew from {} to {}", copy.ttl, out.ttl);
                        prop_assert!(out.ttl >= 1);
                        prop_assert!(out.path_rtt > copy.path_rtt);
                        prop_assert!(next != from);
                        prop_assert_eq!((out.seq, out.latency_budget), (copy.seq, copy.latency_budget));
                        in_flight.push((next, to, id, out));
                    }
                }
                for ((node, id), count) in &delivered {
                    prop_assert_eq!(*count, 1, "node {} delivered {:?} {} times", node, id, count);
                }
                if budget.is_none() {
                    let hops = hops_from_origin(n, &links);
                    for seq in 0..floods {
                        let id = FloodId { job: JobId(1), seq };
                        for node in 1..n as u32 {
                            let within = hops[node as usize].is_some_and(|h| h <= radius);
                            prop_assert_eq!(
                                delivered.contains_key(&(node, id)),
                                within,
                                "node {} at {:?} hops, radius {}", node, hops[node as usize], radius
                            );
                        }
                    }
                }
            }
        }
    }
}

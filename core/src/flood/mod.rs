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
        // Only in a latency-bounded flood: in one limited by hops alone, a
        // neighbour nearer in latency may be more hops away, have had the
        // flood with too little TTL to pass it on, and never get this
        // copy's (a proptest found a node 4 hops out missed by a flood of
        // radius 5 so).
        if self.config.prune
            && header.latency_budget.is_some()
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
mod tests;

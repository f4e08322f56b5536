//! Distances to a flood's home that do not depend on the path the flood
//! took (issue 17): what a simulated node knows of them when its flood
//! router decides, and how good our overlay's network coordinates are.
//!
//! The scenario's `overlay.home_distances` chooses ([`HomeDistances`]):
//!
//! - `measured` (the default): a node knows only its own measured RTT to
//!   the home, if it has one (the path's sum decides the rest), as the
//!   real node does.
//! - `exact` ([`Sim::exact_distances`] too), a diagnostic: every node
//!   knows its own and its neighbours' true RTTs to the home, the best any
//!   coordinate system could estimate. On the generated topologies it did
//!   not improve locality and cost messages (BENCHMARKS.md, "Generated
//!   topologies"), which is how the cause of the workers placed out of
//!   order was found to lie elsewhere.
//! - `vivaldi`: our overlay's network coordinates, as the peer keepers
//!   learnt them: a node's own RTT to the home if it measured it, else its
//!   coordinate's distance to the home's; a neighbour's, the distance of
//!   the coordinate it last reported to the home's. The home's coordinate
//!   is read when the copy arrives (an advert would carry it as of its
//!   sending; coordinates move little during a run without failures,
//!   whose keepers do not tick).

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use zorilla_core::advert::Advert;
use zorilla_core::flood::HomeDistance;
use zorilla_core::vivaldi::Coord;

use super::Sim;
use super::node_overlay::NodeOverlay;
use crate::scenario::HomeDistances;

/// Pairs of nodes whose coordinates are judged at most: beyond it, this
/// many pairs drawn from the seed.
const MAX_JUDGED_PAIRS: usize = 20_000;

/// A node's distances to one flood's home.
pub(super) struct Distances {
    /// The flood's home.
    home: u32,
    own: Option<Duration>,
    /// Its links' distances to the home, where known (`exact` and
    /// `vivaldi` only).
    links: Vec<(u32, Duration)>,
}

impl HomeDistance<u32> for Distances {
    fn own(&self) -> Option<Duration> {
        self.own
    }

    fn peer(&self, peer: &u32) -> Option<Duration> {
        self.links.iter().find(|(p, _)| p == peer).map(|(_, d)| *d)
    }

    fn home(&self) -> Option<&u32> {
        Some(&self.home)
    }
}

impl Sim {
    /// Makes every node know its own and its neighbours' true RTTs to a
    /// flood's home (a diagnostic: see the [module documentation](self)).
    pub fn exact_distances(&mut self) {
        self.scenario.overlay.home_distances = HomeDistances::Exact;
    }

    /// What `node` knows of its and its links' distances to the home of
    /// `advert`.
    pub(super) fn home_distances(&self, node: u32, advert: &Advert<u32>) -> Distances {
        let n = &self.nodes[node as usize];
        let measured = n.overlay.rtt(&advert.home);
        let links = n.neighbours.iter().map(|(p, _)| *p);
        match self.scenario.overlay.home_distances {
            HomeDistances::Measured => Distances {
                home: advert.home,
                own: measured,
                links: Vec::new(),
            },
            HomeDistances::Exact => {
                let rtt = |p: u32| Duration::from_micros(self.grid.rtt_us(p, advert.home));
                Distances {
                    home: advert.home,
                    own: Some(rtt(node)),
                    links: links.map(|p| (p, rtt(p))).collect(),
                }
            }
            HomeDistances::Vivaldi => match (&n.overlay, self.coordinate(advert.home)) {
                (NodeOverlay::Ours(keeper), Some(home)) => Distances {
                    home: advert.home,
                    own: measured.or(Some(keeper.position().coord.distance(&home))),
                    links: links
                        .filter_map(|p| {
                            let theirs = keeper.peer_position(&p)?.coord;
                            Some((p, theirs.distance(&home)))
                        })
                        .collect(),
                },
                _ => Distances {
                    home: advert.home,
                    own: measured,
                    links: Vec::new(),
                },
            },
        }
    }

    /// `node`'s own network coordinate, if it runs our overlay.
    fn coordinate(&self, node: u32) -> Option<Coord> {
        match &self.nodes[node as usize].overlay {
            NodeOverlay::Ours(keeper) => Some(keeper.position().coord),
            NodeOverlay::Paper(_) => None,
        }
    }

    /// How well the network coordinates of our overlay's live nodes
    /// estimate their true RTTs now: the median of |estimated − true| /
    /// true over every pair of them, or over [`MAX_JUDGED_PAIRS`] pairs
    /// drawn from the seed when there are more. `None` for the paper's
    /// overlay (or fewer than two nodes).
    pub fn coordinate_error(&self) -> Option<f64> {
        let at: Vec<(u32, Coord)> = (0..self.nodes.len() as u32)
            .filter(|n| self.nodes[*n as usize].alive)
            .filter_map(|n| Some((n, self.coordinate(n)?)))
            .collect();
        let count = at.len();
        let pairs = count.saturating_mul(count.saturating_sub(1)) / 2;
        let pairs: Vec<(usize, usize)> = if pairs <= MAX_JUDGED_PAIRS {
            (0..count)
                .flat_map(|a| (a + 1..count).map(move |b| (a, b)))
                .collect()
        } else {
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0xc00a_d14a);
            (0..MAX_JUDGED_PAIRS)
                .map(|_| {
                    let a = rng.random_range(0..count);
                    let b = (a + rng.random_range(1..count)) % count;
                    (a, b)
                })
                .collect()
        };
        let mut errors: Vec<f64> = pairs
            .into_iter()
            .filter_map(|(a, b)| {
                let (na, ca) = at[a];
                let (nb, cb) = at[b];
                let real = self.grid.rtt_us(na, nb) as f64 / 1000.0;
                (real > 0.0).then(|| (ca.distance_ms(&cb) - real).abs() / real)
            })
            .collect();
        if errors.is_empty() {
            return None;
        }
        errors.sort_by(f64::total_cmp);
        Some(errors[errors.len() / 2])
    }
}

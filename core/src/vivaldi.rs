//! Network coordinates (Vivaldi with height): each node keeps a point whose
//! distance to another node's point estimates the round-trip time between
//! them, learnt from the RTT samples the overlay takes anyway.
//!
//! Why: the flood's latency budget compares a node's *summed path* RTT
//! along the flood with the budget. Where a node's overlay links to a
//! nearer site pass through a far one, the summed path is much longer than
//! the node's real distance to the home, and near sites are reached after
//! far ones (issue 17). With coordinates a node can compare its own
//! estimated distance to the home, whatever path the flood took.
//!
//! The algorithm is Dabek, Cox, Kaashoek and Morris, "Vivaldi: A
//! Decentralized Network Coordinate System" (SIGCOMM 2004), section 5.5
//! with heights: a point in the plane plus a height, the height standing
//! for the access link every path to the node crosses. Distance is the
//! Euclidean distance of the planar parts plus both heights. Each sample
//! moves the node's point toward or away from the remote point by a step
//! weighted by the confidence of both (their error estimates), so that
//! nodes that know their place well are not pulled around by new ones.
//!
//! Pure and deterministic: the only randomness (a direction when two
//! points coincide) comes from a seeded generator. Everything a peer sends
//! (its coordinate and error) is checked before use: non-finite or
//! out-of-range values are refused, so a hostile peer can move a node's
//! coordinate only as far as one plausible sample can.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::limits::MAX_RTT;

/// The largest value of any component of a coordinate, in milliseconds:
/// [`MAX_RTT`]. No real distance is larger, so nothing a correct node
/// computes exceeds it.
pub const MAX_COMPONENT_MS: f64 = MAX_RTT.as_millis() as f64;

/// The smallest height (ms): a node is never exactly on the plane, which
/// keeps distances between distinct nodes above zero.
pub const MIN_HEIGHT_MS: f64 = 0.01;

/// A network coordinate: a point in the plane and a height, in
/// milliseconds of RTT.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Coord {
    /// Position in the plane.
    pub x: f64,
    /// Position in the plane.
    pub y: f64,
    /// The height above the plane (access delay), at least
    /// [`MIN_HEIGHT_MS`].
    pub height: f64,
}

impl Default for Coord {
    /// The origin, at the smallest height: where every node starts.
    fn default() -> Self {
        Coord {
            x: 0.0,
            y: 0.0,
            height: MIN_HEIGHT_MS,
        }
    }
}

impl Coord {
    /// The estimated RTT between the nodes at `self` and `other`, in
    /// milliseconds.
    pub fn distance_ms(&self, other: &Coord) -> f64 {
        (self.x - other.x).hypot(self.y - other.y) + self.height + other.height
    }

    /// The estimated RTT between the nodes at `self` and `other`.
    pub fn distance(&self, other: &Coord) -> Duration {
        Duration::from_secs_f64(self.distance_ms(other).clamp(0.0, MAX_COMPONENT_MS) / 1000.0)
    }

    /// Whether every component is finite and within range (a peer's
    /// coordinate is checked with this before use).
    pub fn is_valid(&self) -> bool {
        let within = |v: f64| v.is_finite() && v.abs() <= MAX_COMPONENT_MS;
        within(self.x) && within(self.y) && within(self.height) && self.height >= MIN_HEIGHT_MS
    }
}

/// A node's coordinate with its relative error estimate: what a node tells
/// its peers of itself.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Position {
    /// Where the node is.
    pub coord: Coord,
    /// How sure it is: 0 (sure) to 1 (knows nothing).
    pub error: f64,
}

impl Position {
    /// Whether a peer's report may be used: every component of the
    /// coordinate finite and within range, the error a finite number in
    /// `0..=1`.
    pub fn check(&self) -> Result<(), Refused> {
        if !self.coord.is_valid() {
            return Err(Refused::Coord);
        }
        if !(self.error.is_finite() && (0.0..=1.0).contains(&self.error)) {
            return Err(Refused::Error);
        }
        Ok(())
    }
}

/// How a node's coordinate follows its samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VivaldiConfig {
    /// How fast the error estimate follows new samples (the paper's
    /// `c_e`).
    pub error_gain: f64,
    /// The largest step, as a share of the sample's error (the paper's
    /// `c_c`).
    pub step_gain: f64,
}

impl Default for VivaldiConfig {
    /// The paper's values: 0.25 for both.
    fn default() -> Self {
        VivaldiConfig {
            error_gain: 0.25,
            step_gain: 0.25,
        }
    }
}

/// Why a sample was not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The RTT is zero or above [`MAX_RTT`].
    #[error("an RTT of zero or above the maximum")]
    Rtt,
    /// The remote coordinate has a non-finite or out-of-range component.
    #[error("a coordinate out of range")]
    Coord,
    /// The remote error estimate is not a finite number in `0..=1`.
    #[error("an error estimate out of range")]
    Error,
}

/// One node's coordinate and how sure it is of it.
#[derive(Clone, Debug)]
pub struct Vivaldi {
    config: VivaldiConfig,
    coord: Coord,
    /// Relative error estimate, 0 (sure) to 1 (knows nothing).
    error: f64,
    rng: ChaCha8Rng,
    samples: u64,
}

impl Vivaldi {
    /// A node at the origin that knows nothing yet.
    pub fn new(config: VivaldiConfig, seed: u64) -> Self {
        Vivaldi {
            config,
            coord: Coord::default(),
            error: 1.0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            samples: 0,
        }
    }

    /// This node's coordinate.
    pub fn coord(&self) -> Coord {
        self.coord
    }

    /// This node's relative error estimate, 0 (sure) to 1 (knows nothing).
    pub fn error(&self) -> f64 {
        self.error
    }

    /// This node's coordinate and error, as it tells its peers.
    pub fn position(&self) -> Position {
        Position {
            coord: self.coord,
            error: self.error,
        }
    }

    /// Samples used so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Moves this node's coordinate after measuring `rtt` to a node that
    /// says it is at `remote` with relative error `remote_error`.
    pub fn observe(
        &mut self,
        rtt: Duration,
        remote: Coord,
        remote_error: f64,
    ) -> Result<(), Refused> {
        if rtt.is_zero() || rtt > MAX_RTT {
            return Err(Refused::Rtt);
        }
        Position {
            coord: remote,
            error: remote_error,
        }
        .check()?;
        let rtt = rtt.as_secs_f64() * 1000.0;
        let estimate = self.coord.distance_ms(&remote);
        // Weight of this sample: how sure we are against how sure they are.
        let weight = if self.error + remote_error > 0.0 {
            self.error / (self.error + remote_error)
        } else {
            0.5
        };
        let sample_error = (estimate - rtt).abs() / rtt;
        let gain = self.config.error_gain * weight;
        self.error = (sample_error * gain + self.error * (1.0 - gain)).clamp(0.0, 1.0);
        // The unit vector from the remote point to ours, heights included
        // (both point up: pushing apart raises both).
        let (dx, dy) = (self.coord.x - remote.x, self.coord.y - remote.y);
        let mut planar = dx.hypot(dy);
        let (mut ux, mut uy) = if planar > 1e-9 {
            (dx / planar, dy / planar)
        } else {
            // Same place: a random direction, so that they can separate.
            let angle = self.rng.random_range(0.0..std::f64::consts::TAU);
            planar = 0.0;
            (angle.cos(), angle.sin())
        };
        let heights = self.coord.height + remote.height;
        let length = planar + heights;
        let uh = if length > 0.0 { heights / length } else { 0.0 };
        if length > 0.0 && planar > 0.0 {
            ux *= planar / length;
            uy *= planar / length;
        }
        let step = self.config.step_gain * weight * (rtt - estimate);
        let clamp = |v: f64| v.clamp(-MAX_COMPONENT_MS, MAX_COMPONENT_MS);
        self.coord = Coord {
            x: clamp(self.coord.x + step * ux),
            y: clamp(self.coord.y + step * uy),
            height: (self.coord.height + step * uh).clamp(MIN_HEIGHT_MS, MAX_COMPONENT_MS),
        };
        self.samples += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nodes in a plane with access delays: the RTT is the planar distance
    /// plus both heights, as the model assumes.
    struct World {
        at: Vec<Coord>,
    }

    impl World {
        fn random(n: usize, seed: u64) -> World {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            World {
                at: (0..n)
                    .map(|_| Coord {
                        x: rng.random_range(0.0..150.0),
                        y: rng.random_range(0.0..80.0),
                        height: rng.random_range(0.1..5.0),
                    })
                    .collect(),
            }
        }

        fn rtt(&self, a: usize, b: usize) -> Duration {
            Duration::from_secs_f64(self.at[a].distance_ms(&self.at[b]) / 1000.0)
        }
    }

    /// Each round every node samples one random peer (what the overlay's
    /// probes and pings give); returns the nodes' states.
    fn run(world: &World, rounds: usize, seed: u64) -> Vec<Vivaldi> {
        let n = world.at.len();
        let mut nodes: Vec<Vivaldi> = (0..n)
            .map(|i| Vivaldi::new(VivaldiConfig::default(), seed ^ i as u64))
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..rounds {
            for i in 0..n {
                let j = (i + rng.random_range(1..n)) % n;
                let (remote, error) = (nodes[j].coord(), nodes[j].error());
                nodes[i].observe(world.rtt(i, j), remote, error).unwrap();
            }
        }
        nodes
    }

    fn median_relative_error(world: &World, nodes: &[Vivaldi]) -> f64 {
        let n = nodes.len();
        let mut errors = Vec::new();
        for i in 0..n {
            for j in i + 1..n {
                let real = world.rtt(i, j).as_secs_f64() * 1000.0;
                let estimate = nodes[i].coord().distance_ms(&nodes[j].coord());
                errors.push((estimate - real).abs() / real);
            }
        }
        errors.sort_by(f64::total_cmp);
        errors[errors.len() / 2]
    }

    #[test]
    fn coordinates_learn_the_rtts_of_a_plane_with_access_delays() {
        let world = World::random(80, 7);
        let nodes = run(&world, 300, 1);
        let median = median_relative_error(&world, &nodes);
        assert!(median < 0.05, "median relative error {median:.3}");
        // And the nodes know they are right.
        let mut errors: Vec<f64> = nodes.iter().map(Vivaldi::error).collect();
        errors.sort_by(f64::total_cmp);
        assert!(errors[errors.len() / 2] < 0.1, "{errors:?}");
    }

    /// Sites: a node's nearest by coordinates are the nodes of its own site,
    /// and sites keep their order of distance (what the flood's budget
    /// needs).
    #[test]
    fn sites_keep_their_order_of_distance() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let centres = [(0.0, 0.0), (10.0, 0.0), (40.0, 30.0), (120.0, 10.0)];
        let at: Vec<Coord> = centres
            .iter()
            .flat_map(|&(cx, cy)| {
                (0..10)
                    .map(|_| Coord {
                        x: cx + rng.random_range(-0.3..0.3),
                        y: cy + rng.random_range(-0.3..0.3),
                        height: rng.random_range(0.05..0.5),
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let world = World { at };
        let nodes = run(&world, 300, 2);
        let distance = |a: usize, b: usize| nodes[a].coord().distance_ms(&nodes[b].coord());
        for home in [0, 10, 20, 30] {
            let site = home / 10;
            // Farthest node of its own site against the nearest of any other.
            let own = (0..40)
                .filter(|&i| i / 10 == site && i != home)
                .map(|i| distance(home, i))
                .fold(0.0, f64::max);
            let other = (0..40)
                .filter(|&i| i / 10 != site)
                .map(|i| distance(home, i))
                .fold(f64::INFINITY, f64::min);
            assert!(
                own < other,
                "home {home}: own site up to {own:.2} ms, others from {other:.2} ms"
            );
        }
    }

    #[test]
    fn hostile_samples_are_refused_and_change_nothing() {
        let mut node = Vivaldi::new(VivaldiConfig::default(), 9);
        let ok = Coord {
            x: 3.0,
            y: 4.0,
            height: 1.0,
        };
        node.observe(Duration::from_millis(10), ok, 0.5).unwrap();
        let (before, error) = (node.coord(), node.error());
        let bad = [
            (Duration::ZERO, ok, 0.5, Refused::Rtt),
            (MAX_RTT + Duration::from_millis(1), ok, 0.5, Refused::Rtt),
            (
                Duration::from_millis(5),
                Coord { x: f64::NAN, ..ok },
                0.5,
                Refused::Coord,
            ),
            (
                Duration::from_millis(5),
                Coord {
                    y: f64::INFINITY,
                    ..ok
                },
                0.5,
                Refused::Coord,
            ),
            (
                Duration::from_millis(5),
                Coord { x: 1e300, ..ok },
                0.5,
                Refused::Coord,
            ),
            (
                Duration::from_millis(5),
                Coord { height: -1.0, ..ok },
                0.5,
                Refused::Coord,
            ),
            (Duration::from_millis(5), ok, f64::NAN, Refused::Error),
            (Duration::from_millis(5), ok, -0.1, Refused::Error),
            (Duration::from_millis(5), ok, 7.0, Refused::Error),
        ];
        for (rtt, coord, remote_error, why) in bad {
            assert_eq!(node.observe(rtt, coord, remote_error), Err(why));
            assert_eq!((node.coord(), node.error()), (before, error));
        }
        // The most a valid but lying sample can do: one bounded step.
        let far = Coord {
            x: MAX_COMPONENT_MS,
            y: -MAX_COMPONENT_MS,
            height: MAX_COMPONENT_MS,
        };
        node.observe(MAX_RTT, far, 0.0).unwrap();
        assert!(node.coord().is_valid(), "{:?}", node.coord());
    }

    #[test]
    fn the_same_samples_give_the_same_coordinates() {
        let world = World::random(20, 5);
        let a = run(&world, 50, 4);
        let b = run(&world, 50, 4);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.coord(), y.coord());
            assert_eq!(x.error(), y.error());
        }
    }
}

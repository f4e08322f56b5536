//! Random scenarios, to check that locality and message cost hold on
//! topologies nobody tuned the scheduler for (issue 17).
//!
//! A generated grid has sites of very different sizes (from one machine to
//! hundreds) and cores (1 to 16 per machine), placed at random in a plane
//! with an access delay each: the RTT between two sites is their distance
//! plus both access delays, so RTTs keep the triangle inequality roughly as
//! real ones do (a straight line is the shortest path; access links are
//! crossed once at each end). The workload mixes rigid and malleable jobs
//! of random sizes, submitted from random nodes or from one fixed site.
//! Everything is drawn from the seed: the same seed gives the same
//! scenario.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use zorilla_core::advert::Strategy;

use crate::scenario::{Cluster, Contention, Latency, OverlaySetup, Scenario, SitePair, Workload};

/// How large generated scenarios are.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    /// Sites, drawn from `1..=sites`.
    pub sites: u32,
    /// Machines of the largest site (a site has 1 to this many; about one
    /// in five has a single machine).
    pub machines: u32,
    /// Jobs per run.
    pub jobs: u32,
    /// The largest job, in workers.
    pub workers: u32,
    /// The plane's side, in ms of RTT (sites are placed in a square of it).
    pub span_ms: f64,
}

impl Size {
    /// What CI can run in seconds: up to 6 sites of up to 30 machines.
    pub const SMALL: Size = Size {
        sites: 6,
        machines: 30,
        jobs: 12,
        workers: 40,
        span_ms: 100.0,
    };

    /// The evaluation: up to 12 sites of up to 500 machines, jobs
    /// of up to 1,000 workers.
    pub const FULL: Size = Size {
        sites: 12,
        machines: 500,
        jobs: 30,
        workers: 1000,
        span_ms: 150.0,
    };
}

/// The random scenario of `seed`.
pub fn scenario(seed: u64, size: Size) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9e4e_7a7e);
    let sites = rng.random_range(1..=size.sites.max(1));
    let mut clusters = Vec::new();
    let mut places = Vec::new();
    let mut total_cores = 0u64;
    for s in 0..sites {
        let machines = if rng.random_bool(0.2) {
            1
        } else {
            // Sizes spread over orders of magnitude: a small lab next to a
            // large cluster.
            let exp = rng.random_range(0.0..=f64::from(size.machines.max(1)).ln());
            (exp.exp().round() as u32).clamp(1, size.machines.max(1))
        };
        let cores = *[1u32, 2, 4, 8, 16]
            .get(rng.random_range(0..5))
            .unwrap_or(&1);
        total_cores += u64::from(machines) * u64::from(cores);
        clusters.push(Cluster {
            site: format!("s{s}"),
            machines,
            cores,
            memory_mib: 64 * 1024,
            speed: None,
        });
        places.push((
            rng.random_range(0.0..size.span_ms),
            rng.random_range(0.0..size.span_ms),
            // Access delay, ms.
            rng.random_range(0.2..5.0),
        ));
    }
    let mut between = Vec::new();
    for a in 0..places.len() {
        for b in a + 1..places.len() {
            let (xa, ya, da): (f64, f64, f64) = places[a];
            let (xb, yb, db) = places[b];
            between.push(SitePair {
                a: format!("s{a}"),
                b: format!("s{b}"),
                rtt_ms: ((xa - xb).hypot(ya - yb) + da + db).max(0.5),
            });
        }
    }
    // Jobs up to half the grid, so that most can be placed while others
    // run.
    let largest = u64::from(size.workers).min((total_cores / 2).max(1)) as u32;
    let home_site = rng
        .random_bool(0.5)
        .then(|| format!("s{}", rng.random_range(0..sites)));
    let strategy = if rng.random_bool(0.5) {
        Strategy::Concentrate
    } else {
        Strategy::Spread
    };
    Scenario {
        name: format!("random-{seed}"),
        description: format!("generated from seed {seed}"),
        seeds: vec![seed],
        clusters,
        latency: Latency {
            within_site_ms: 0.2,
            default_between_ms: None,
            random_between_ms: None,
            between,
            jitter: 0.1,
        },
        overlay: OverlaySetup::default(),
        workload: Workload {
            home_site,
            jobs: size.jobs,
            interval_s: 5.0,
            poisson: true,
            workers: (1, largest.max(1)),
            malleable: rng.random_range(0.0..=0.5),
            malleable_min: 0.5,
            strategy,
            duration_s: Some((5.0, 30.0)),
            lifetime_s: 120.0,
            memory_mib: None,
            sweep: None,
        },
        churn: None,
        failover: None,
        until_s: f64::from(size.jobs) * 5.0 + 300.0,
        contention: None,
    }
}

/// The random scenario of `seed` ([`scenario`]) on heterogeneous machines
/// (issue 17): every machine a CPU speed of its own, drawn from 0.5 to 2
/// times the reference machine's (a desktop grid mixes machine
/// generations, within a site too), co-located workers slowed down by
/// the multi-core desktop grids paper's contention model with its
/// parameters ([`Contention::default`]), and each job's workers needing
/// 0.5 to 8 GiB of memory (so that workers that fill a machine's memory
/// slow each other down more than the 10% of any sharing). The grid's
/// sites, RTTs and jobs are those of [`scenario`] with the same seed; the
/// speeds and memory come from streams of their own.
pub fn heterogeneous(seed: u64, size: Size) -> Scenario {
    let mut scenario = scenario(seed, size);
    scenario.name = format!("hetero-{seed}");
    scenario.description = format!("generated from seed {seed}, heterogeneous machines");
    for cluster in &mut scenario.clusters {
        cluster.speed = Some((0.5, 2.0));
    }
    scenario.workload.memory_mib = Some((512, 8 * 1024));
    scenario.contention = Some(Contention::default());
    // Workers on slow, crowded machines run up to some 2 x 1.1 times
    // their 30 s; jobs wait for each other more: time to finish.
    scenario.until_s += 600.0;
    scenario
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_grid_and_rtts_keep_the_triangle_inequality() {
        for seed in 0..40 {
            let a = scenario(seed, Size::FULL);
            let b = scenario(seed, Size::FULL);
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
            let grid = a.grid(seed).unwrap();
            let n = grid.sites.len();
            for x in 0..n {
                for y in 0..n {
                    for z in 0..n {
                        if x == y || y == z || x == z {
                            continue;
                        }
                        let (xy, yz, xz) =
                            (grid.rtt_us[x][y], grid.rtt_us[y][z], grid.rtt_us[x][z]);
                        // Access delays count twice on the way round: a
                        // detour is never shorter than the direct path.
                        assert!(xz <= xy + yz + 1, "seed {seed}: {xz} > {xy} + {yz}");
                    }
                }
            }
        }
    }

    #[test]
    fn sites_differ_in_size_by_orders_of_magnitude() {
        let sizes: Vec<u32> = (0..40)
            .flat_map(|seed| scenario(seed, Size::FULL).clusters)
            .map(|c| c.machines)
            .collect();
        assert!(sizes.contains(&1));
        assert!(sizes.iter().any(|&m| m >= 100), "{sizes:?}");
        assert!(sizes.iter().all(|&m| (1..=500).contains(&m)));
    }
}

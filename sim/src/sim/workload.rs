//! The workload: the jobs a scenario submits, drawn from a seed, and the
//! single jobs of a sweep.

use std::time::Duration;

use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use zorilla_core::Time;
use zorilla_core::advert::{Strategy, WorkerCount};
use zorilla_core::node::{JobSpec, LostPolicy};
use zorilla_core::resources::Resources;

use super::record::JobPlan;
use crate::scenario::{Grid, Scenario};

/// The jobs of a scenario's workload (not a sweep), drawn from `seed`.
pub fn plan_jobs(scenario: &Scenario, grid: &Grid, seed: u64) -> Vec<JobPlan> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0b5e_55ed);
    let w = &scenario.workload;
    let homes: Vec<u32> = match &w.home_site {
        Some(site) => {
            let site = grid.site(site).unwrap_or(0);
            (0..grid.len() as u32)
                .filter(|m| grid.site_of[*m as usize] == site)
                .collect()
        }
        None => (0..grid.len() as u32).collect(),
    };
    // A fixed home for a home site: its first machine.
    let fixed_home = w.home_site.as_ref().map(|_| homes[0]);
    // Memory per worker from a stream of its own, so that workloads
    // without it draw everything else as before.
    let mut memory = ChaCha8Rng::seed_from_u64(seed ^ 0x3e3_0e1c);
    let mut at = 0.0;
    (0..w.jobs)
        .map(|i| {
            if i > 0 {
                at += if w.poisson {
                    let u: f64 = rng.random_range(f64::EPSILON..1.0);
                    -u.ln() * w.interval_s
                } else {
                    w.interval_s
                };
            }
            let workers = rng.random_range(w.workers.0..=w.workers.1.max(w.workers.0));
            // Drawn only when some jobs are malleable, so that all-rigid
            // workloads keep their random streams.
            let malleable = w.malleable > 0.0 && rng.random::<f64>() < w.malleable;
            let min = if malleable {
                ((f64::from(workers) * w.malleable_min).ceil() as u32).clamp(1, workers)
            } else {
                workers
            };
            let duration = w
                .duration_s
                .map(|(lo, hi)| Duration::from_secs_f64(rng.random_range(lo..=hi.max(lo))));
            let home = fixed_home.unwrap_or_else(|| *homes.choose(&mut rng).unwrap_or(&0));
            let memory_mib = w
                .memory_mib
                .map_or(0, |(lo, hi)| memory.random_range(lo..=hi.max(lo)));
            JobPlan {
                at: Duration::from_secs_f64(at),
                home,
                spec: JobSpec {
                    runs: 1,
                    per_worker: Resources::new(1, memory_mib, 0),
                    workers: WorkerCount { min, max: workers },
                    strategy: w.strategy,
                    lifetime: Duration::from_secs_f64(w.lifetime_s),
                    on_worker_lost: LostPolicy::Replace,
                    kind: zorilla_core::advert::WorkKind::Wasm,
                    priority: 0,
                    tasks: None,
                },
                duration,
            }
        })
        .collect()
}

/// One job of `n` workers with `strategy` at the workload's home, as in the
/// P2P-MPI sweep.
pub fn sweep_job(scenario: &Scenario, grid: &Grid, n: u32, strategy: Strategy) -> JobPlan {
    let site = scenario
        .workload
        .home_site
        .as_ref()
        .and_then(|s| grid.site(s))
        .unwrap_or(0);
    let home = (0..grid.len() as u32)
        .find(|m| grid.site_of[*m as usize] == site)
        .unwrap_or(0);
    JobPlan {
        at: Time::ZERO,
        home,
        spec: JobSpec {
            runs: 1,
            per_worker: Resources::new(1, 0, 0),
            workers: WorkerCount::rigid(n),
            strategy,
            lifetime: Duration::from_secs_f64(scenario.workload.lifetime_s),
            on_worker_lost: LostPolicy::Fail,
            kind: zorilla_core::advert::WorkKind::Wasm,
            priority: 0,
            tasks: None,
        },
        duration: None,
    }
}

/// Shuffles for tests that want a random order.
pub fn shuffled<T>(mut items: Vec<T>, seed: u64) -> Vec<T> {
    items.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    items
}

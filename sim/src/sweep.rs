//! The P2P-MPI co-allocation sweep (Genaud and Rattanapoka, Table 1 and
//! Figures 2-3): one job of `n` workers in a fresh grid, with `spread` or
//! `concentrate`, compared with what the paper's algorithms give when they
//! see every host sorted by its true RTT (the reference).

use std::time::Duration;

use zorilla_core::advert::Strategy;
use zorilla_core::allocation::{Candidate, allocate};
use zorilla_core::resources::Machine;

use crate::scenario::{Grid, Scenario};
use crate::sim::{Mode, RunReport, Sim, sweep_job};

/// Hosts and workers per site.
pub type PerSite = Vec<(u32, u32)>;

/// One case of the sweep.
#[derive(Debug, Clone)]
pub struct SweepCase {
    /// Strategy.
    pub strategy: Strategy,
    /// Job size.
    pub n: u32,
    /// Where the simulated grid put the workers.
    pub simulated: PerSite,
    /// Where the paper's algorithms put them, knowing every true RTT.
    pub reference: PerSite,
    /// When the job got its workers (simulated time), if it did.
    pub allocated_after: Option<Duration>,
    /// The run.
    pub run: RunReport,
}

impl SweepCase {
    /// Whether the simulated placement matches the reference per site.
    pub fn matches(&self) -> bool {
        self.simulated == self.reference
    }
}

/// The reference placement: the allocation strategy (`zorilla_core`'s
/// [`allocate`]) over all hosts sorted by true RTT from `home`, each offering
/// `min(P, cores)`: what a home that knew the whole grid would choose. It
/// checks discovery and RTT measurement in the simulated grid, not the
/// strategies themselves; `tests/simulator.rs` checks those against a naive
/// transcription of the paper's pseudocode.
pub fn reference(grid: &Grid, home: u32, strategy: Strategy, n: u32, p: Option<u32>) -> PerSite {
    let candidates: Vec<Candidate<u32>> = (0..grid.len() as u32)
        .map(|m| Candidate {
            node: m,
            rtt: Duration::from_micros(grid.rtt_us(home, m)),
            offered: p.map_or(grid.cores[m as usize], |p| p.min(grid.cores[m as usize])),
            machine: Machine::default(),
        })
        .collect();
    let mut sites = vec![(0, 0); grid.sites.len()];
    for a in allocate(strategy, &candidates, n).unwrap_or_default() {
        let s = &mut sites[grid.site_of[a.node as usize]];
        s.0 += 1;
        s.1 += a.workers;
    }
    sites
}

/// Runs one case of the sweep.
pub fn run_case(
    scenario: &Scenario,
    mode: Mode,
    seed: u64,
    strategy: Strategy,
    n: u32,
) -> anyhow::Result<SweepCase> {
    let grid = scenario.grid(seed)?;
    let p = scenario
        .workload
        .sweep
        .as_ref()
        .and_then(|s| s.max_workers_per_machine);
    let plan = sweep_job(scenario, &grid, n, strategy);
    let home = plan.home;
    let sim = Sim::with_limit(scenario, mode, seed, vec![plan], p)?;
    let run = sim.run();
    let job = &run.jobs[0];
    let simulated = run.per_site(&job.placement, &grid.site_of);
    Ok(SweepCase {
        strategy,
        n,
        simulated,
        reference: reference(&grid, home, strategy, n, p),
        allocated_after: job.full_at.map(|t| t - job.submitted),
        run,
    })
}

//! The simulator running the real core: invariants checked after every
//! event on small grids, aggregate bounds on scaled-down versions of the
//! papers' scenarios, and the P2P-MPI placements against the paper's
//! algorithms.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use std::time::Duration;

use proptest::prelude::{ProptestConfig, prop_assert, proptest};
use zorilla_core::advert::{Advert, FloodHeader, JobId, Strategy, WorkerCount};
use zorilla_core::node::{Input, JobEvent, JobSpec, LostPolicy, Output, Phase};
use zorilla_core::resources::Resources;
use zorilla_sim::scenario::{Churn, Scenario};
use zorilla_sim::sim::{JobPlan, Mode, Sim, plan_jobs, run_scenario};
use zorilla_sim::sweep::run_case;

mod churn;
mod cli;
mod contention;
mod failover;
mod invariants;
mod jobs;
mod overlay;
mod papers;

fn scenario(toml: &str) -> Scenario {
    toml::from_str(toml).expect("test scenario parses")
}

fn shipped(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name);
    Scenario::load(&path).expect("shipped scenario loads")
}

/// Three sites, jobs that finish, and nodes that fail and come back.
fn small_grid(seed_jobs: u32, churn: bool) -> Scenario {
    let churn = if churn {
        "[churn]\nfailures_per_s = 0.2\nrejoin_after_s = 5.0\ndetect_after_s = 1.0\n"
    } else {
        ""
    };
    scenario(&format!(
        r#"
name = "small"
until_s = 120.0
[[clusters]]
site = "a"
machines = 12
cores = 2
[[clusters]]
site = "b"
machines = 12
cores = 4
[[clusters]]
site = "c"
machines = 8
cores = 1
[latency]
within_site_ms = 0.2
default_between_ms = 10.0
between = [{{ a = "a", b = "c", rtt_ms = 25.0 }}]
[workload]
jobs = {seed_jobs}
interval_s = 1.0
poisson = true
workers = [1, 12]
duration_s = [2.0, 20.0]
lifetime_s = 30.0
{churn}
"#
    ))
}

fn run_checked(scenario: &Scenario, mode: Mode, seed: u64) -> usize {
    let grid = scenario.grid(seed).unwrap();
    let plans = plan_jobs(scenario, &grid, seed);
    let mut sim = Sim::new(scenario, mode, seed, plans).unwrap();
    let mut steps = 0;
    while sim.step() {
        steps += 1;
        if let Err(violation) = sim.check_invariants() {
            panic!("after {steps} events at {:?}: {violation}", sim.now());
        }
    }
    // Jobs stop arriving at about 40 s and live at most 30 s; by the end
    // every reservation was used or released.
    assert_eq!(sim.held_workers(), 0, "holds left at the end of the run");
    steps
}

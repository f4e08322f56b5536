//! Jobs on a busy grid: malleable jobs, reproducible runs, every worker
//! released.

use super::*;

/// Malleable jobs on a busy grid: checked after every event, they start
/// with at least their min, some with fewer than their max, and some of
/// those grow to their max later.
#[test]
fn malleable_jobs_start_with_their_min_and_grow() {
    let mut scenario = small_grid(60, false);
    scenario.workload.malleable = 1.0;
    scenario.workload.malleable_min = 0.5;
    scenario.workload.workers = (4, 16);
    scenario.workload.interval_s = 0.5;
    let (mut short, mut grown) = (0, 0);
    for seed in 1..=2 {
        let grid = scenario.grid(seed).unwrap();
        let plans = plan_jobs(&scenario, &grid, seed);
        assert!(
            plans
                .iter()
                .all(|p| p.spec.workers.min * 2 >= p.spec.workers.max)
        );
        let mut sim = Sim::new(&scenario, Mode::Ours, seed, plans).unwrap();
        while sim.step() {
            if let Err(v) = sim.check_invariants() {
                panic!("seed {seed} at {:?}: {v}", sim.now());
            }
        }
        let report = sim.run();
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        for job in report.jobs.iter().filter(|j| j.started_at.is_some()) {
            assert!(job.started_with >= job.min_workers && job.started_with <= job.workers);
            if job.started_with < job.workers {
                short += 1;
                if job.full_at.is_some_and(|full| Some(full) > job.started_at) {
                    grown += 1;
                }
            }
        }
    }
    assert!(
        short >= 40,
        "{short} jobs started with fewer than their max"
    );
    assert!(grown >= 20, "{grown} jobs grew to their max after starting");
}

#[test]
fn runs_are_reproducible_from_the_seed() {
    let scenario = small_grid(30, true);
    let run = |seed| {
        let grid = scenario.grid(seed).unwrap();
        let report = run_scenario(&scenario, Mode::Ours, seed).unwrap();
        (report.events, report.messages, report.csv(&grid.site_of))
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7).2, run(8).2);
}

#[test]
fn jobs_that_fit_all_finish_and_every_worker_is_released() {
    let mut scenario = small_grid(40, false);
    // About 22 workers busy on average, on 80 slots; time for the last
    // jobs to finish.
    scenario.workload.interval_s = 3.0;
    scenario.until_s = 250.0;
    let report = run_scenario(&scenario, Mode::Ours, 1).unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    for job in &report.jobs {
        // 12 workers fit the grid (80 slots); lifetimes are long enough.
        assert!(job.full_at.is_some(), "{} never got its workers", job.id);
        let (phase, _) = job.ended.as_ref().expect("finished");
        assert_eq!(format!("{phase:?}"), "Completed");
    }
    let running: i64 = report.timeline.iter().map(|(_, _, d)| d).sum();
    assert_eq!(running, 0, "every started worker ended");
}

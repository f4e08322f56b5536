//! Generated topologies (issue 17): the real core on random grids, ours
//! and the paper's scheduler side by side. The simulator is deterministic,
//! so the bounds below are regression bounds on fixed seeds, set a little
//! above what the code gives (BENCHMARKS.md, "Generated topologies", has
//! the figures and the full evaluation, `zorilla-sim --random 200`).

use zorilla_sim::generate::Size;
use zorilla_sim::random::{self, Run, spread};
use zorilla_sim::report::Summary;
use zorilla_sim::scenario::{HomeDistances, Scenario};
use zorilla_sim::sim::Mode;

/// Median, 95th percentile and worst of one figure of one mode's runs.
fn figure(runs: &[Run], mode: Mode, f: fn(&Summary) -> f64) -> (f64, f64, f64) {
    spread(
        runs.iter()
            .filter(|r| r.mode == mode)
            .map(|r| f(&r.summary))
            .collect(),
    )
}

#[test]
fn on_random_topologies_ours_places_workers_nearer_than_the_papers_scheduler() {
    let runs = random::run(
        1..=16,
        Size::SMALL,
        &[Mode::Ours, Mode::Paper],
        &|_: &mut Scenario| {},
    )
    .unwrap();
    assert_eq!(runs.len(), 32);
    for run in &runs {
        assert_eq!(run.violations, 0, "seed {} {:?}", run.seed, run.mode);
        assert!(
            run.summary.allocated > 0,
            "seed {} {:?}: nothing allocated",
            run.seed,
            run.mode
        );
    }
    let extra = |s: &Summary| s.extra_rtt_ms;
    let ooo = |s: &Summary| s.out_of_order * 100.0;
    let messages = |s: &Summary| s.messages_per_job;
    let allocation = |s: &Summary| s.mean_allocation.as_secs_f64();
    let never = |s: &Summary| 100.0 * (s.jobs - s.allocated) as f64 / s.jobs.max(1) as f64;

    // Locality: the median topology at the oracle and the 95th percentile
    // within a tenth of a millisecond per worker (0.000 and 0.000 ms when
    // written), far below the paper's scheduler (2.2 and 8.9 ms). Issue
    // 17's target is a 95th percentile of 0.1 ms over 200 topologies.
    let (ours, paper) = (
        figure(&runs, Mode::Ours, extra),
        figure(&runs, Mode::Paper, extra),
    );
    assert!(
        ours.0 <= 0.05 && ours.1 <= 0.1,
        "extra RTT per worker, ours {ours:?}"
    );
    assert!(
        ours.0 < paper.0 && ours.1 < paper.1,
        "ours {ours:?}, paper {paper:?}"
    );
    let (ours, paper) = (
        figure(&runs, Mode::Ours, ooo),
        figure(&runs, Mode::Paper, ooo),
    );
    // 0.0% and 0.0% when written (the paper's 3.3% and 24%); the target
    // is a 95th percentile of 2%.
    assert!(
        ours.0 <= 0.5 && ours.1 <= 2.0,
        "out of order (%), ours {ours:?}"
    );
    assert!(
        ours.0 < paper.0 && ours.1 < paper.1,
        "ours {ours:?}, paper {paper:?}"
    );

    // Allocation: faster at the median, and no more jobs left without
    // their workers at the 95th percentile.
    let (ours, paper) = (
        figure(&runs, Mode::Ours, allocation),
        figure(&runs, Mode::Paper, allocation),
    );
    assert!(
        ours.0 <= paper.0,
        "allocation (s): ours {ours:?}, paper {paper:?}"
    );
    let (ours, paper) = (
        figure(&runs, Mode::Ours, never),
        figure(&runs, Mode::Paper, never),
    );
    assert!(
        ours.1 <= paper.1,
        "never allocated (%): ours {ours:?}, paper {paper:?}"
    );

    // Messages: ours sends 0.39 of the paper's messages per job at the
    // median and 0.44 at the 95th percentile here (113.25 against 293.0,
    // and 382.9 against 871.3, 2026-11-29; the simulator is deterministic).
    // The bounds sit just above, so that losing the gain fails.
    let (ours, paper) = (
        figure(&runs, Mode::Ours, messages),
        figure(&runs, Mode::Paper, messages),
    );
    assert!(
        ours.0 <= 0.45 * paper.0 && ours.1 <= 0.5 * paper.1,
        "messages per job (median, p95, worst): ours {ours:?}, paper {paper:?}"
    );
}

/// Network coordinates (issue 17): the keepers' Vivaldi coordinates,
/// learnt from the pings of the warm-up and of the run, estimate the true
/// RTTs of generated topologies, and a flood router that judges distances
/// to the home by them keeps ours' locality.
#[test]
fn network_coordinates_estimate_the_rtts_and_can_bound_floods() {
    let modes = [Mode::Ours, Mode::Paper];
    // Topology 1 (3 sites, 33 machines): a median relative error over
    // every pair of 0.019 when written (0.033 at the median of 200
    // topologies, BENCHMARKS.md); the paper's overlay has none.
    let runs = random::run([1], Size::SMALL, &modes, &|_| {}).unwrap();
    let error = |mode: Mode| {
        runs.iter()
            .find(|r| r.mode == mode)
            .and_then(|r| r.summary.coordinate_error)
    };
    let ours = error(Mode::Ours).expect("our overlay has coordinates");
    assert!(ours < 0.05, "median relative error {ours:.3}");
    assert_eq!(error(Mode::Paper), None);

    // The budget judged by coordinates (own and neighbours' estimated
    // distances to the home) on eight topologies: no invariant broken,
    // and locality within issue 17's target (median and p95 extra RTT
    // 0.000 and 0.034 ms per worker when written).
    let vivaldi = |s: &mut Scenario| s.overlay.home_distances = HomeDistances::Vivaldi;
    let runs = random::run(1..=8, Size::SMALL, &[Mode::Ours], &vivaldi).unwrap();
    for run in &runs {
        assert_eq!(run.violations, 0, "seed {}", run.seed);
    }
    let (median, p95, _) = figure(&runs, Mode::Ours, |s| s.extra_rtt_ms);
    assert!(
        median <= 0.05 && p95 <= 0.1,
        "extra RTT {median} / {p95} ms"
    );
}

/// Heterogeneous machines (issue 17): CPU speeds from 0.5 to 2 times the
/// reference and the multi-core desktop grids paper's contention model.
/// Preferring idle, then faster nodes among equally near offers shortens
/// job turnaround against ours without the preference (nearest first
/// only), at a locality cost within issue 17's target.
#[test]
fn on_heterogeneous_machines_preferring_idle_and_fast_nodes_shortens_turnaround() {
    let modes = [Mode::Ours, Mode::OursNearest];
    let runs = random::turnarounds(1..=16, Size::SMALL, &modes).unwrap();
    for run in &runs {
        assert_eq!(run.violations, 0, "seed {} {:?}", run.seed, run.mode);
    }
    let (ours, ours_done, jobs) = random::turnaround_spread(&runs, Mode::Ours);
    let (nearest, nearest_done, _) = random::turnaround_spread(&runs, Mode::OursNearest);
    // No more than one job of the 192 left unfinished for it (the
    // turnarounds compared are of every job that completed): 187 against
    // 188 when written; over 200 topologies ours completes more, 2,349
    // against 2,341 of 2,400 (BENCHMARKS.md).
    assert!(
        ours_done + 1 >= nearest_done,
        "{ours_done} < {nearest_done} of {jobs}"
    );
    // Median and 95th percentile of every job's turnaround, in seconds:
    // 27.7 and 127.8 against 31.8 and 137.3 (0.87 and 0.93 times; over
    // 200 topologies 0.86 and 0.82, BENCHMARKS.md). The bounds keep most
    // of that.
    assert!(
        ours.0 <= 0.95 * nearest.0 && ours.1 <= 0.96 * nearest.1,
        "turnaround (s): preferring {ours:?}, nearest first {nearest:?}"
    );
    // What it costs in locality: a worker may go to an equally near node
    // of another site (within 5% of the RTT).
    let extra = |mode: Mode| {
        spread(
            runs.iter()
                .filter(|r| r.mode == mode)
                .map(|r| r.summary.extra_rtt_ms)
                .collect(),
        )
    };
    let (ours, nearest) = (extra(Mode::Ours), extra(Mode::OursNearest));
    assert!(
        ours.1 <= 0.1,
        "extra RTT per worker (ms): preferring {ours:?}, nearest {nearest:?}"
    );
}

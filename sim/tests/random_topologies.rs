//! Generated topologies (issue 17): the real core on random grids, ours
//! and the paper's scheduler side by side. The simulator is deterministic,
//! so the bounds below are regression bounds on fixed seeds; the full
//! evaluation is `zorilla-sim --random 200 --size full` (BENCHMARKS.md).

use zorilla_sim::generate::Size;
use zorilla_sim::random::{self, spread};
use zorilla_sim::sim::Mode;

#[test]
fn on_random_topologies_ours_places_workers_nearer_than_the_papers_scheduler() {
    let runs = random::run(1..=8, Size::SMALL, &[Mode::Ours, Mode::Paper]).unwrap();
    assert_eq!(runs.len(), 16);
    for run in &runs {
        assert_eq!(run.violations, 0, "seed {} {:?}", run.seed, run.mode);
        assert!(
            run.summary.allocated > 0,
            "seed {} {:?}: nothing allocated",
            run.seed,
            run.mode
        );
    }
    let median = |mode: Mode, f: &dyn Fn(&zorilla_sim::report::Summary) -> f64| {
        spread(
            runs.iter()
                .filter(|r| r.mode == mode)
                .map(|r| f(&r.summary))
                .collect(),
        )
        .0
    };
    let extra = |s: &zorilla_sim::report::Summary| s.extra_rtt_ms;
    let ooo = |s: &zorilla_sim::report::Summary| s.out_of_order;
    let (ours, paper) = (median(Mode::Ours, &extra), median(Mode::Paper, &extra));
    assert!(
        ours <= paper,
        "median extra RTT per worker: ours {ours:.3} ms, paper {paper:.3} ms"
    );
    let (ours, paper) = (median(Mode::Ours, &ooo), median(Mode::Paper, &ooo));
    assert!(
        ours <= paper,
        "median out of order: ours {ours:.3}, paper {paper:.3}"
    );
}

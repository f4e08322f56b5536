//! Preemption (issue 33, item 2): on a small seeded grid whose cores
//! strangers' long replaceable tasks hold, contributors' short tasks wait
//! far less when members preempt for them than when nothing may be
//! preempted, and every task completes all the same.

use zorilla_sim::fairshare::median_p95;
use zorilla_sim::fairshare::preemption::{Outcome, Setup, Variant, run};

fn outcome(variant: Variant, seed: u64) -> Outcome {
    let o = run(&Setup::SMALL, variant, seed).unwrap();
    let (short, _) = median_p95(o.short.turnarounds.clone());
    let (long, _) = median_p95(o.long.turnarounds.clone());
    eprintln!(
        "{}: short median {short:.0} s ({} of {}), long median {long:.0} s ({} of {}), {} \
         preempted, {:.0} core-s lost",
        variant.key(),
        o.short.completed,
        o.short.tasks,
        o.long.completed,
        o.long.tasks,
        o.long.preempted,
        o.long.wasted_s
    );
    assert!(o.violations.is_empty(), "{:?}", o.violations);
    assert_eq!(o.short.completed, o.short.tasks, "{}", variant.key());
    assert_eq!(o.long.completed, o.long.tasks, "{}", variant.key());
    o
}

/// With preemption the contributors' median turnaround is under half of
/// what it is with the same long tasks not replaceable (or first come,
/// first served), the long tasks lose workers and only they do; without
/// preemption nothing is preempted. Fails if members stop preempting.
#[test]
fn preemption_serves_contributors_before_strangers_long_tasks_end() {
    for seed in [1, 2] {
        let with = outcome(Variant::Preempt, seed);
        let (with_median, _) = median_p95(with.short.turnarounds.clone());
        assert!(with.long.preempted > 0, "seed {seed}: nothing preempted");
        assert_eq!(with.short.preempted, 0, "seed {seed}");
        assert!(with.long.wasted_s > 0.0, "seed {seed}");
        for variant in [Variant::NoPreempt, Variant::Fcfs] {
            let without = outcome(variant, seed);
            let (median, _) = median_p95(without.short.turnarounds.clone());
            assert_eq!(without.long.preempted, 0, "seed {seed}, {}", variant.key());
            assert!(
                2.0 * with_median < median,
                "seed {seed}: short tasks' median {with_median:.0} s with preemption, \
                 {median:.0} s {}",
                variant.key()
            );
        }
    }
}

/// The same seed, the same figures.
#[test]
fn runs_are_reproducible_from_the_seed() {
    let a = run(&Setup::SMALL, Variant::Preempt, 3).unwrap();
    let b = run(&Setup::SMALL, Variant::Preempt, 3).unwrap();
    assert_eq!(a.short.turnarounds, b.short.turnarounds);
    assert_eq!(a.long.preempted, b.long.preempted);
}

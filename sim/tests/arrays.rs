//! Job arrays in the simulator (issue 33, item 4): the real core's arrays
//! run task by task on generated topologies, and fair sharing divides the
//! machines among many users' arrays by what they contributed.

use std::collections::BTreeMap;

use zorilla_core::advert::Phase;
use zorilla_sim::fairshare::Class;
use zorilla_sim::fairshare::arrays::{Outcome, Setup, Submission, measure, plan, run};
use zorilla_sim::sim::{Mode, RunEnd, Sim};

fn shares(o: &Outcome) -> (f64, f64, f64) {
    eprintln!(
        "{}: {} contributors, {} tasks an array: contributors {:.1}% ({:.1}% each, {:.0}% of what \
         they asked, rank correlation {:?}), free riders {:.1}% ({:.1}% each, {:.0}%), identities \
         {:.1}%; completed {:?} {:?} {:?}",
        o.mode.name(),
        o.contributors,
        o.tasks,
        o.share(Class::Contributor),
        o.user_share(Class::Contributor),
        o.satisfaction(Class::Contributor),
        o.contribution_correlation(),
        o.share(Class::FreeRider),
        o.user_share(Class::FreeRider),
        o.satisfaction(Class::FreeRider),
        o.share(Class::Identity),
        o.completed(Class::Contributor),
        o.completed(Class::FreeRider),
        o.completed(Class::Identity),
    );
    assert!(o.violations.is_empty(), "{:?}", o.violations);
    (
        o.user_share(Class::Contributor),
        o.user_share(Class::FreeRider),
        o.share(Class::Identity),
    )
}

/// Every array of a seed's plan completes, each of its tasks completed
/// exactly once, none twice at the same time, and no more of them running
/// at once than the array allows.
#[test]
fn every_task_of_every_array_completes_once() {
    let setup = Setup::SMALL;
    let plan = plan(&setup, 1, Submission::Arrays).unwrap();
    let report = Sim::new(&plan.scenario, Mode::Ours, 1, plan.jobs.clone())
        .unwrap()
        .run();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(!report.jobs.is_empty());
    for job in &report.jobs {
        let tasks = job.tasks.expect("an array");
        assert!(
            matches!(job.ended, Some((Phase::Completed, _))),
            "{}: {:?}",
            job.id,
            job.ended
        );
        let mut completed: BTreeMap<u32, u32> = BTreeMap::new();
        for run in &job.runs {
            if let Some((_, RunEnd::Completed)) = run.ended {
                *completed.entry(run.rank).or_default() += 1;
            }
        }
        assert_eq!(completed.len() as u32, tasks, "{}", job.id);
        assert!(
            completed.values().all(|&n| n == 1),
            "{}: {completed:?}",
            job.id
        );
        assert!(job.runs.iter().all(|r| r.ended.is_some()));
    }
    let outcome = measure(&setup, &plan, &report);
    shares(&outcome);
}

/// The direction of the result on the small setup's topology of seed 1:
/// with fair sharing a contributor's user gets clearly more of the work
/// than under first come, first served and than a free rider, a free
/// rider less than under first come, first served, and the fresh
/// identities together not much more than one free rider (splitting a
/// load over identities gains little).
#[test]
fn contributors_arrays_get_more_than_free_riders_and_fresh_identities_gain_little() {
    let setup = Setup::SMALL;
    let (contributor, free_rider, identities) =
        shares(&run(&setup, Mode::Ours, Submission::Arrays, 1).unwrap());
    let (fcfs_contributor, fcfs_free_rider, _) =
        shares(&run(&setup, Mode::OursFcfs, Submission::Arrays, 1).unwrap());
    assert!(
        contributor >= 1.3 * free_rider,
        "a contributor {contributor:.1}%, a free rider {free_rider:.1}%"
    );
    assert!(
        contributor >= 1.1 * fcfs_contributor && free_rider <= 0.85 * fcfs_free_rider,
        "a contributor {contributor:.1}% ({fcfs_contributor:.1}% first come, first served), a \
         free rider {free_rider:.1}% ({fcfs_free_rider:.1}%)"
    );
    assert!(
        identities <= 1.5 * free_rider,
        "identities together {identities:.1}%, a free rider {free_rider:.1}%"
    );
}

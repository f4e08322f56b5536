//! Spot checks measured (issue 34, item 3): how often a node that lies
//! about a share `p` of its results is caught when a job array's home
//! re-runs a share `f` of its tasks elsewhere
//! (`zorilla_core::node::TaskProgress`), and what the checks cost.
//!
//! The grid is the fair-sharing experiment's one site
//! ([`fairshare::Setup::scenario`]): [`Setup::nodes`] nodes of
//! [`Setup::cores`] cores, node 0 the liar, and a home without cores that
//! submits one array of [`Setup::tasks`] one-core tasks of
//! [`Setup::task_s`] seconds, all of which may run at once. The real
//! core decides everything: which ends it checks (its seeded random
//! picks), where checks and third runs go, whom it catches and which
//! tasks run again. The simulator only makes up the digests: a worker's
//! is its task's own, unless its node lies about it (drawn per worker,
//! with the liar's `p`; see [`Sim::with_liars`]).
//!
//! Per run: whether the liar was caught, how many of its made-up results
//! the finished array kept (a task whose last reported result was made
//! up: a task re-run or settled by a check ends on another node's), and
//! how many more workers ran than tasks. Beside the measured rate, the
//! rate a simple model expects from the results the liar reported in the
//! run: `n1` first results of a task, each picked with `f` and a lie with
//! `p`, and `n2` results of other nodes' checks, every one compared: it
//! is caught with `1 - (1 - p f)^n1 (1 - p)^n2` (a lie compared leads to
//! a third run that catches it). A liar caught early reports fewer
//! results, so the model, fed the run's own counts, falls short of the
//! measured rate where catching is likely.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::fairshare;
use crate::sim::{JobPlan, Mode, Sim};

/// The experiment's size.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// Nodes with cores (node 0 lies).
    pub nodes: u32,
    /// Cores of each.
    pub cores: u32,
    /// Tasks of the array.
    pub tasks: u32,
    /// Seconds a task runs.
    pub task_s: f64,
}

impl Setup {
    /// The benchmark's: 16 nodes of 2 cores, 320 tasks of 10 s (the liar
    /// does about 20 of them).
    pub const DEFAULT: Setup = Setup {
        nodes: 16,
        cores: 2,
        tasks: 320,
        task_s: 10.0,
    };
}

/// One run's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Whether the array completed.
    pub completed: bool,
    /// Whether the home caught the liar.
    pub caught: bool,
    /// Results the liar reported (its workers that ended).
    pub liar_results: u32,
    /// Of those, made up.
    pub lies: u32,
    /// Tasks whose kept result was made up.
    pub kept_lies: u32,
    /// Workers that ran in all (tasks, checks, third runs, re-runs).
    pub workers: u32,
    /// The array's tasks.
    pub tasks: u32,
    /// When the array ended (from its submission).
    pub makespan: Duration,
    /// What the model expects: `1 - (1 - p f)^n1 (1 - p)^n2`, `n1` the
    /// liar's first results of a task and `n2` its results of checks.
    pub expected: f64,
}

/// Runs the experiment once: the liar lies about `share` of its results,
/// the home checks `percent` % of the tasks.
pub fn run(setup: &Setup, share: f64, percent: u8, seed: u64) -> anyhow::Result<Outcome> {
    let grid = fairshare::Setup {
        contributors: setup.nodes,
        cores: setup.cores,
        free_riders: 1,
        identities: 0,
        ..fairshare::Setup::DEFAULT
    };
    let mut scenario = grid.scenario();
    scenario.clusters.retain(|c| c.machines > 0);
    scenario.name = "spotcheck".into();
    scenario.description = "a job array beside a lying node".into();
    // Long enough for every check and re-run.
    scenario.until_s = setup.task_s * f64::from(setup.tasks) * 4.0;
    let lifetime = Duration::from_secs_f64(scenario.until_s);
    let mut spec = fairshare::arrays::array(setup.tasks, 0, lifetime);
    if let Some(tasks) = &mut spec.tasks {
        tasks.spot_checks = percent;
    }
    let home = setup.nodes;
    let plan = JobPlan {
        at: Duration::ZERO,
        home,
        spec,
        duration: Some(Duration::from_secs_f64(setup.task_s)),
    };
    let liar = 0u32;
    let report = Sim::new(&scenario, Mode::Ours, seed, vec![plan])?
        .with_liars(BTreeMap::from([(liar, share)]))
        .run();
    let job = report
        .jobs
        .first()
        .ok_or_else(|| anyhow::anyhow!("the array was not submitted"))?;
    let completed = matches!(job.ended, Some((zorilla_core::advert::Phase::Completed, _)));
    let ends = job.reports.values().flatten();
    let liar_results = ends.clone().filter(|(node, _)| *node == liar).count() as u32;
    let lies = ends.clone().filter(|(_, lied)| *lied).count() as u32;
    let kept_lies = job
        .reports
        .values()
        .filter(|runs| runs.last().is_some_and(|(_, lied)| *lied))
        .count() as u32;
    let workers = job.reports.values().map(|r| r.len() as u32).sum();
    let firsts = job
        .reports
        .values()
        .filter(|runs| runs.first().is_some_and(|(node, _)| *node == liar))
        .count() as i32;
    let checks = liar_results as i32 - firsts;
    let pf = share * f64::from(percent) / 100.0;
    Ok(Outcome {
        completed,
        caught: job.caught.contains(&liar),
        liar_results,
        lies,
        kept_lies,
        workers,
        tasks: setup.tasks,
        makespan: job.ended_at.unwrap_or_default(),
        expected: 1.0 - (1.0 - pf).powi(firsts) * (1.0 - share).powi(checks),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Setup = Setup {
        nodes: 6,
        cores: 1,
        tasks: 30,
        task_s: 5.0,
    };

    #[test]
    fn checking_every_task_catches_a_liar_and_keeps_none_of_its_lies() {
        let o = run(&SMALL, 1.0, 100, 1).unwrap();
        assert!(o.completed && o.caught, "{o:?}");
        assert!(o.lies > 0, "{o:?}");
        assert_eq!(o.kept_lies, 0, "{o:?}");
        assert!(o.workers > o.tasks, "{o:?}");
    }

    #[test]
    fn without_checks_the_liar_is_never_caught_and_its_lies_are_kept() {
        let o = run(&SMALL, 1.0, 0, 1).unwrap();
        assert!(o.completed && !o.caught, "{o:?}");
        assert!(o.lies > 0 && o.kept_lies == o.lies, "{o:?}");
        assert_eq!(o.workers, o.tasks, "{o:?}");
    }

    #[test]
    fn an_honest_grid_is_checked_without_anyone_caught() {
        let o = run(&SMALL, 0.0, 50, 2).unwrap();
        assert!(o.completed && !o.caught && o.lies == 0, "{o:?}");
        assert!(o.workers > o.tasks, "{o:?}");
    }
}

//! Preemption measured (issue 33, item 2): strangers' long jobs hold
//! every core when contributors' short tasks arrive; with fair sharing a
//! member stops a stranger's worker for a creditor (`Output::Preempted`)
//! when the stranger's job can lose it (`LostPolicy::Replace`), and its
//! home replaces the rank elsewhere, starting over.
//!
//! The grid is one site of contributors (cores, submitting short tasks)
//! and free riders (no cores). The run has three acts:
//!
//! 1. warm-up: each contributor submits a few short tasks, which run on
//!    the others, so that members hold balances for (some) contributors;
//! 2. the free riders submit one-worker tasks of [`Setup::long_s`], as
//!    many as there are cores and more, which take every core;
//! 3. the contributors submit bags of short tasks while the long ones run.
//!
//! The same plans run three ways ([`Variant`]): fair sharing with the
//! long tasks replaceable (preemption), fair sharing with them not
//! replaceable (`LostPolicy::Fail`: nothing may be preempted), and first
//! come, first served (`SchedulerConfig::fair_share` off, which preempts
//! nothing either). Figures: the turnaround of the contributors' act-3
//! tasks and of the long tasks, the workers preempted and the core time
//! they had run (lost: the replacement starts over), and whether every
//! task completed.
//!
//! Not modelled: checkpoints (`LostPolicy::Rollback` would lose less),
//! owners' own users, churn.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use zorilla_core::advert::Phase;
use zorilla_core::node::LostPolicy;

use crate::scenario::Scenario;
use crate::sim::{JobPlan, Mode, RunReport, Sim};

/// The experiment's size and workload.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// Nodes that offer cores and submit tasks.
    pub contributors: u32,
    /// Cores of each contributor.
    pub cores: u32,
    /// Nodes that submit long tasks and offer no core.
    pub free_riders: u32,
    /// Warm-up tasks per contributor, submitted within the first
    /// [`Setup::short_s`] seconds.
    pub warmup: u32,
    /// When the free riders submit their long tasks (each at a phase of
    /// its own within 5 s).
    pub long_at_s: f64,
    /// Long tasks per free rider.
    pub long_tasks: u32,
    /// Seconds a long task runs.
    pub long_s: f64,
    /// When the contributors' first bag comes (each at a phase of its
    /// own within a period).
    pub short_at_s: f64,
    /// Bags per contributor after the long tasks took the cores.
    pub bags: u32,
    /// Tasks per bag.
    pub bag: u32,
    /// Seconds a short task runs.
    pub short_s: f64,
    /// Seconds between a contributor's bags.
    pub period_s: f64,
}

impl Setup {
    /// The benchmark's: 8 contributors of 2 cores, 4 free riders with 5
    /// tasks of 250 s each (20 for 16 cores), then 3 bags of 4 tasks of
    /// 10 s per contributor, one every 40 s.
    pub const DEFAULT: Setup = Setup {
        contributors: 8,
        cores: 2,
        free_riders: 4,
        warmup: 4,
        long_at_s: 30.0,
        long_tasks: 5,
        long_s: 250.0,
        short_at_s: 50.0,
        bags: 3,
        bag: 4,
        short_s: 10.0,
        period_s: 40.0,
    };

    /// A smaller one for tests: 4 contributors of 2 cores, 2 free riders
    /// with 5 tasks of 200 s each, 2 bags of 3 tasks per contributor.
    pub const SMALL: Setup = Setup {
        contributors: 4,
        cores: 2,
        free_riders: 2,
        warmup: 4,
        long_at_s: 30.0,
        long_tasks: 5,
        long_s: 200.0,
        short_at_s: 50.0,
        bags: 2,
        bag: 3,
        short_s: 10.0,
        period_s: 40.0,
    };

    /// The nodes: contributors first, then free riders.
    pub fn nodes(&self) -> u32 {
        self.contributors + self.free_riders
    }

    /// The grid: the fair-sharing experiment's (one site, 1 ms between
    /// any two nodes), without fresh identities.
    pub fn scenario(&self) -> Scenario {
        let mut scenario = super::Setup {
            contributors: self.contributors,
            cores: self.cores,
            free_riders: self.free_riders,
            identities: 0,
            ..super::Setup::DEFAULT
        }
        .scenario();
        scenario.clusters.retain(|c| c.machines > 0);
        scenario.name = "preemption".into();
        scenario.description = "contributors' short tasks after free riders' long ones".into();
        // Long enough for the long tasks preempted to run again.
        scenario.until_s = self.short_at_s + 10.0 * self.long_s;
        scenario
    }

    /// Every task, drawn from `seed`; the long tasks lose workers by
    /// `long_policy`.
    pub fn plans(&self, seed: u64, long_policy: LostPolicy) -> Vec<JobPlan> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9ee_3971);
        let lifetime = Duration::from_secs_f64(self.short_at_s + 10.0 * self.long_s);
        // Tasks wait as long as it takes.
        let task = |at: f64, home: u32, run_s: f64, policy: LostPolicy| {
            super::task(at, home, run_s, lifetime, policy)
        };
        let mut plans = Vec::new();
        for home in 0..self.contributors {
            let at = rng.random_range(0.0..self.short_s);
            for _ in 0..self.warmup {
                plans.push(task(at, home, self.short_s, LostPolicy::Fail));
            }
        }
        for rider in 0..self.free_riders {
            let at = self.long_at_s + rng.random_range(0.0..5.0);
            for _ in 0..self.long_tasks {
                plans.push(task(
                    at,
                    self.contributors + rider,
                    self.long_s,
                    long_policy,
                ));
            }
        }
        for home in 0..self.contributors {
            let phase = rng.random_range(0.0..self.period_s);
            for k in 0..self.bags {
                let at = self.short_at_s + phase + f64::from(k) * self.period_s;
                for _ in 0..self.bag {
                    plans.push(task(at, home, self.short_s, LostPolicy::Fail));
                }
            }
        }
        // Submitted in time order (ties: in plan order).
        plans.sort_by_key(|p| p.at);
        plans
    }
}

/// How the same plans are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Variant {
    /// Fair sharing, long tasks replaceable: members preempt them.
    Preempt,
    /// Fair sharing, long tasks not replaceable (`LostPolicy::Fail`).
    NoPreempt,
    /// First come, first served (long tasks replaceable, never preempted).
    Fcfs,
}

impl Variant {
    /// Every variant, in report order.
    pub const ALL: [Variant; 3] = [Variant::Preempt, Variant::NoPreempt, Variant::Fcfs];

    /// Short name, for RESULT lines.
    pub fn key(self) -> &'static str {
        match self {
            Variant::Preempt => "preempt",
            Variant::NoPreempt => "nopreempt",
            Variant::Fcfs => "fcfs",
        }
    }

    /// What it is, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Variant::Preempt => "fair sharing, long tasks replaceable (preemption)",
            Variant::NoPreempt => "fair sharing, long tasks LostPolicy::Fail (no preemption)",
            Variant::Fcfs => "first come, first served (no preemption)",
        }
    }

    fn mode(self) -> Mode {
        match self {
            Variant::Preempt | Variant::NoPreempt => Mode::Ours,
            Variant::Fcfs => Mode::OursFcfs,
        }
    }

    fn long_policy(self) -> LostPolicy {
        match self {
            Variant::Preempt | Variant::Fcfs => LostPolicy::Replace,
            Variant::NoPreempt => LostPolicy::Fail,
        }
    }
}

/// One kind of task's figures in one run.
#[derive(Debug, Clone, Default)]
pub struct TaskFigures {
    /// Tasks submitted.
    pub tasks: u32,
    /// Tasks completed by the end of the run.
    pub completed: u32,
    /// Every completed task's turnaround (submission to end), seconds.
    pub turnarounds: Vec<f64>,
    /// Workers preempted.
    pub preempted: u32,
    /// Ranks the homes counted lost (withdrawn) and granted again.
    pub replaced: u32,
    /// The most times one task's worker was preempted.
    pub most_preempted: u32,
    /// Core-seconds the preempted workers had run.
    pub wasted_s: f64,
}

/// One run's figures.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How it was scheduled.
    pub variant: Variant,
    /// The seed.
    pub seed: u64,
    /// The contributors' tasks after the long ones came (act 3).
    pub short: TaskFigures,
    /// The free riders' long tasks.
    pub long: TaskFigures,
    /// The simulator's invariant checks that failed.
    pub violations: Vec<String>,
}

/// Runs the experiment once.
pub fn run(setup: &Setup, variant: Variant, seed: u64) -> anyhow::Result<Outcome> {
    let plans = setup.plans(seed, variant.long_policy());
    let report = Sim::new(&setup.scenario(), variant.mode(), seed, plans)?.run();
    Ok(measure(setup, variant, &report))
}

/// The figures of a run of [`Setup::plans`].
pub fn measure(setup: &Setup, variant: Variant, report: &RunReport) -> Outcome {
    let mut kinds: BTreeMap<bool, TaskFigures> = BTreeMap::new();
    for job in &report.jobs {
        let long = job.home >= setup.contributors;
        // The warm-up is not measured.
        if !long && job.submitted.as_secs_f64() < setup.short_at_s {
            continue;
        }
        let figures = kinds.entry(long).or_default();
        figures.tasks += 1;
        if let (Some((Phase::Completed, _)), Some(end)) = (&job.ended, job.ended_at) {
            figures.completed += 1;
            figures
                .turnarounds
                .push(end.saturating_sub(job.submitted).as_secs_f64());
        }
        figures.preempted += job.preempted_workers;
        figures.replaced += job.replaced_ranks;
        figures.most_preempted = figures.most_preempted.max(job.preempted_workers);
        figures.wasted_s += job.preempted_work_s;
    }
    Outcome {
        variant,
        seed: report.seed,
        short: kinds.remove(&false).unwrap_or_default(),
        long: kinds.remove(&true).unwrap_or_default(),
        violations: report.violations.clone(),
    }
}

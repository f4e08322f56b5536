//! Fair sharing measured (issue 33, item 4): the Network of Favors
//! (`zorilla_core::favours`) against first come, first served, on a grid
//! where cores are scarce, as OurGrid's papers measure it.
//!
//! The grid is one site of three kinds of nodes:
//!
//! - *contributors*, which offer their cores and submit bags of short
//!   independent one-worker tasks (a parameter sweep as separate jobs, as
//!   before job arrays existed; [`arrays`] measures arrays, on generated
//!   topologies);
//! - *free riders*, which submit the same bags and offer no core;
//! - *fresh identities*: one more free rider's load split over many
//!   nodes without cores (a whitewasher, or a Sybil), each submitting a
//!   task now and then.
//!
//! Every user submits a bag every period, at a phase of its own drawn
//! from the seed, during a window; together they ask for more core time
//! than the contributors have ([`Setup::load`]), so that queues grow and
//! the members' order of turns decides who runs. The same plans run twice
//! with the same seed: with fair sharing ([`Mode::Ours`]) and with the
//! members' queues in arrival order ([`Mode::OursFcfs`]). Each class's
//! figures: the share of the core time the grid delivered during the
//! window that went to its jobs (its contribution beside it: the core time
//! its machines ran others' jobs), and its tasks' turnaround (submission
//! to end) over the whole run, backlog included.
//!
//! Not modelled here: preemption (every task is `LostPolicy::Fail`, so
//! no member may stop one for a creditor; [`preemption`] measures it),
//! balances kept across restarts (no node restarts
//! here), owners' own users (every job is submitted without an owner, so
//! a contributor's own tasks take their turns on its own machine as a
//! stranger's would).

use std::collections::BTreeMap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use zorilla_core::advert::{Phase, Strategy, WorkerCount};
use zorilla_core::node::{JobSpec, LostPolicy};
use zorilla_core::resources::Resources;

use crate::scenario::{Cluster, Latency, OverlaySetup, Scenario, Workload};
use crate::sim::{JobPlan, Mode, RunReport, Sim};

pub mod arrays;
pub mod preemption;

/// The experiment's size and workload.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// Nodes that offer cores and submit bags.
    pub contributors: u32,
    /// Cores of each contributor.
    pub cores: u32,
    /// Nodes that submit bags and offer no core.
    pub free_riders: u32,
    /// Nodes without cores that share one free rider's bags between them.
    pub identities: u32,
    /// Tasks per bag.
    pub bag: u32,
    /// Seconds a task runs.
    pub task_s: f64,
    /// Seconds between a user's bags.
    pub period_s: f64,
    /// Seconds during which bags are submitted: the contended window the
    /// shares are measured over.
    pub window_s: f64,
}

impl Setup {
    /// The benchmark's: 8 contributors of 2 cores, 4 free riders and 24
    /// fresh identities, 1.6 times the cores asked for during 400 s.
    pub const DEFAULT: Setup = Setup {
        contributors: 8,
        cores: 2,
        free_riders: 4,
        identities: 24,
        bag: 10,
        task_s: 10.0,
        period_s: 50.0,
        window_s: 400.0,
    };

    /// A smaller one for tests (a tenth of a second in a debug build),
    /// 1.75 times the cores asked for during 300 s.
    pub const SMALL: Setup = Setup {
        contributors: 4,
        cores: 2,
        free_riders: 2,
        identities: 8,
        bag: 10,
        task_s: 10.0,
        period_s: 50.0,
        window_s: 300.0,
    };

    /// The nodes: contributors first, then free riders, then identities.
    pub fn nodes(&self) -> u32 {
        self.contributors + self.free_riders + self.identities
    }

    /// The core time asked for over the core time there is, during the
    /// window (every free rider, the identities together, and every
    /// contributor ask for one bag a period).
    pub fn load(&self) -> f64 {
        let users = f64::from(self.contributors + self.free_riders + 1);
        let asked = users * f64::from(self.bag) * self.task_s / self.period_s;
        asked / f64::from(self.contributors * self.cores)
    }

    /// The class of node `node`.
    pub fn class_of(&self, node: u32) -> Class {
        if node < self.contributors {
            Class::Contributor
        } else if node < self.contributors + self.free_riders {
            Class::FreeRider
        } else {
            Class::Identity
        }
    }

    /// The grid: one site, 1 ms between any two nodes.
    pub fn scenario(&self) -> Scenario {
        let cluster = |machines, cores| Cluster {
            site: "lab".into(),
            machines,
            cores,
            memory_mib: 16 * 1024,
            speed: None,
        };
        Scenario {
            name: "fairshare".into(),
            description: "contributors, free riders and fresh identities".into(),
            seeds: vec![1],
            clusters: vec![
                cluster(self.contributors, self.cores),
                cluster(self.free_riders, 0),
                cluster(self.identities, 0),
            ],
            latency: Latency {
                within_site_ms: 1.0,
                default_between_ms: None,
                random_between_ms: None,
                between: Vec::new(),
                jitter: 0.1,
            },
            overlay: OverlaySetup::default(),
            // Unused: the plans come from `plans`.
            workload: Workload {
                home_site: None,
                jobs: 0,
                interval_s: 1.0,
                poisson: false,
                workers: (1, 1),
                malleable: 0.0,
                malleable_min: 0.5,
                strategy: Strategy::default(),
                duration_s: None,
                lifetime_s: 3600.0,
                memory_mib: None,
                sweep: None,
            },
            churn: None,
            failover: None,
            // Long enough for the backlog to drain.
            until_s: self.window_s * 10.0,
            contention: None,
        }
    }

    /// Every user's bags, drawn from `seed`: each user's first bag at a
    /// phase of its own within the first period, then one a period until
    /// the window closes. The identities' bags are one user's, task `j`
    /// of its `k`-th bag submitted by identity `(k * bag + j) mod
    /// identities`.
    pub fn plans(&self, seed: u64) -> Vec<JobPlan> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xfa1_5ba2e);
        let users = self.contributors + self.free_riders + 1;
        let mut plans = Vec::new();
        for user in 0..users {
            let phase = rng.random_range(0.0..self.period_s);
            let mut k = 0u32;
            loop {
                let at = phase + f64::from(k) * self.period_s;
                if at >= self.window_s {
                    break;
                }
                for j in 0..self.bag {
                    let home = if user < self.contributors + self.free_riders {
                        user
                    } else {
                        let identity = (k * self.bag + j) % self.identities.max(1);
                        self.contributors + self.free_riders + identity
                    };
                    // Tasks wait as long as it takes.
                    let lifetime = Duration::from_secs_f64(self.window_s * 10.0);
                    plans.push(task(at, home, self.task_s, lifetime, LostPolicy::Fail));
                }
                k += 1;
            }
        }
        // Submitted in time order (ties: in user order).
        plans.sort_by_key(|p| p.at);
        plans
    }
}

/// What a node is in the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Offers cores, submits bags.
    Contributor,
    /// Submits bags, offers nothing.
    FreeRider,
    /// One of many fresh identities sharing one free rider's bags.
    Identity,
}

impl Class {
    /// Plural, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Class::Contributor => "contributors",
            Class::FreeRider => "free riders",
            Class::Identity => "identities",
        }
    }

    /// In figures' names (`RESULT` lines).
    pub fn key(self) -> &'static str {
        match self {
            Class::Contributor => "contributor",
            Class::FreeRider => "free_rider",
            Class::Identity => "identities",
        }
    }
}

/// One class's figures in one run.
#[derive(Debug, Clone, Default)]
pub struct ClassFigures {
    /// Nodes of the class.
    pub users: u32,
    /// Tasks submitted.
    pub tasks: u32,
    /// Tasks completed by the end of the run.
    pub completed: u32,
    /// Core-seconds its tasks got during the window.
    pub got_s: f64,
    /// Core-seconds its machines ran other homes' tasks during the window.
    pub contributed_s: f64,
    /// Every completed task's turnaround (submission to end), seconds.
    pub turnarounds: Vec<f64>,
}

/// One run's figures.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Fair sharing or first come, first served.
    pub mode: Mode,
    /// The seed.
    pub seed: u64,
    /// Per class.
    pub classes: BTreeMap<Class, ClassFigures>,
    /// Per submitting node: core-seconds its tasks got during the window.
    pub per_user: BTreeMap<u32, f64>,
    /// Core-seconds delivered during the window, to every class.
    pub delivered_s: f64,
    /// Core-seconds the contributors had during the window.
    pub capacity_s: f64,
    /// The simulator's invariant checks that failed.
    pub violations: Vec<String>,
}

impl Outcome {
    /// The share of the core time delivered during the window that went
    /// to `class`'s tasks, all its nodes together, in percent.
    pub fn share(&self, class: Class) -> f64 {
        let got = self.classes.get(&class).map_or(0.0, |c| c.got_s);
        100.0 * got / self.delivered_s.max(f64::MIN_POSITIVE)
    }

    /// The same per node of the class (the identities count as one user:
    /// they are one free rider's load).
    pub fn user_share(&self, class: Class) -> f64 {
        let users = match class {
            Class::Identity => 1,
            _ => self.classes.get(&class).map_or(1, |c| c.users.max(1)),
        };
        self.share(class) / f64::from(users)
    }
}

/// A one-worker task of one core submitted at `at_s` to `home`, running
/// `run_s` seconds, waiting at most `lifetime` for its worker, losing it by
/// `policy`.
pub(crate) fn task(
    at_s: f64,
    home: u32,
    run_s: f64,
    lifetime: Duration,
    policy: LostPolicy,
) -> JobPlan {
    JobPlan {
        at: Duration::from_secs_f64(at_s),
        home,
        spec: JobSpec {
            runs: 1,
            per_worker: Resources::new(1, 0, 0),
            workers: WorkerCount::rigid(1),
            strategy: Strategy::default(),
            lifetime,
            on_worker_lost: policy,
            kind: zorilla_core::advert::WorkKind::Wasm,
            priority: 0,
            tasks: None,
        },
        duration: Some(Duration::from_secs_f64(run_s)),
    }
}

/// Runs the experiment once with `mode` and `seed`.
pub fn run(setup: &Setup, mode: Mode, seed: u64) -> anyhow::Result<Outcome> {
    let scenario = setup.scenario();
    let report = Sim::new(&scenario, mode, seed, setup.plans(seed))?.run();
    Ok(measure(setup, &report))
}

/// The figures of a run of [`Setup::plans`].
pub fn measure(setup: &Setup, report: &RunReport) -> Outcome {
    let window = setup.window_s;
    let mut classes: BTreeMap<Class, ClassFigures> = BTreeMap::new();
    for node in 0..setup.nodes() {
        classes.entry(setup.class_of(node)).or_default().users += 1;
    }
    let mut per_user: BTreeMap<u32, f64> = BTreeMap::new();
    let mut delivered_s = 0.0;
    for job in &report.jobs {
        let class = setup.class_of(job.home);
        // A one-worker task runs from its start for `task_s` (its worker
        // starts as the grant arrives, a millisecond after the home's
        // start): its core time within the window.
        let in_window = job.started_at.map_or(0.0, |s| {
            let s = s.as_secs_f64();
            ((s + setup.task_s).min(window) - s).max(0.0)
        });
        delivered_s += in_window;
        *per_user.entry(job.home).or_default() += in_window;
        let figures = classes.entry(class).or_default();
        figures.tasks += 1;
        figures.got_s += in_window;
        if let (Some((Phase::Completed, _)), Some(end)) = (&job.ended, job.ended_at) {
            figures.completed += 1;
            figures
                .turnarounds
                .push(end.saturating_sub(job.submitted).as_secs_f64());
        }
        // Where it ran (one worker: one machine), if not at its home.
        if let Some(&machine) = job.placement.keys().next()
            && machine != job.home
        {
            let by = classes.entry(setup.class_of(machine)).or_default();
            by.contributed_s += in_window;
        }
    }
    Outcome {
        mode: report.mode,
        seed: report.seed,
        classes,
        per_user,
        delivered_s,
        capacity_s: f64::from(setup.contributors * setup.cores) * window,
        violations: report.violations.clone(),
    }
}

/// The median and 95th percentile of `values` (zeros when empty).
pub fn median_p95(mut values: Vec<f64>) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

//! Fair sharing with job arrays on generated topologies (issue 33, item
//! 4): many users, each submitting arrays of short tasks, on the grids of
//! [`generate::heterogeneous`] (sites of very different sizes, 1 to 16
//! cores a machine, CPU speeds from 0.5 to 2, the multi-core desktop grids
//! paper's contention model), with free riders and with fresh identities.
//!
//! - Every machine with cores is a *contributor*: its owner's user
//!   submits one array every period from it.
//! - *Free riders* are machines without cores at random sites, submitting
//!   the same arrays.
//! - The *fresh identities* are one more free rider (a whitewasher, or a
//!   Sybil) whose arrays come each from an identity not used before, as
//!   long as there are unused ones.
//!
//! Every array asks for the same core time, and all of them together for
//! [`Setup::load`] times what the contributors' cores can do during the
//! window (at their speeds), so that queues grow and the members' order
//! decides who runs. Each task needs [`Setup::task_s`] seconds of the
//! reference machine and a user's share of memory (drawn per user, from
//! 0.5 to 8 GiB: tasks that fill a machine's memory slow each other down
//! more than the 10% of any sharing).
//!
//! The same plans run with fair sharing ([`Mode::Ours`]) and with the
//! members' queues in arrival order ([`Mode::OursFcfs`]). Per user: the
//! work its tasks got done during the window (from every worker's run,
//! [`WorkerRun`], in reference seconds, so that a slow or crowded machine's
//! longer run counts for the same task) against the work its machine did
//! for other users' tasks (its contribution), and its arrays' turnaround
//! (submission to the array's end, the paper's measure for a bag of
//! tasks).
//!
//! Not modelled: preemption (no array here allows it; see
//! [`preemption`](super::preemption)), owners' own users (every job is
//! submitted without an owner), churn.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use zorilla_core::Time;
use zorilla_core::advert::{Phase, Strategy, WorkKind};
use zorilla_core::node::{JobSpec, LostPolicy, TaskArray};
use zorilla_core::resources::Resources;

use super::Class;
use crate::generate::{self, Size};
use crate::scenario::{Cluster, Scenario};
use crate::sim::{JobPlan, Mode, RunEnd, RunReport, Sim, WorkerRun};

/// The experiment's size and workload.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// The generated topologies' size (its `jobs` and `workers` unused).
    pub size: Size,
    /// Machines without cores that submit arrays.
    pub free_riders: u32,
    /// Machines without cores that share one free rider's arrays.
    pub identities: u32,
    /// Reference seconds a task needs.
    pub task_s: f64,
    /// Seconds between a user's arrays.
    pub period_s: f64,
    /// Seconds during which arrays are submitted: the contended window
    /// the shares are measured over.
    pub window_s: f64,
    /// The reference core time asked for over what the contributors'
    /// cores can do during the window.
    pub load: f64,
}

impl Setup {
    /// The benchmark's: up to 6 sites of up to 16 machines, 6 free riders
    /// and 24 fresh identities, 1.6 times the cores asked for during
    /// 400 s.
    pub const DEFAULT: Setup = Setup {
        size: Size {
            sites: 6,
            machines: 16,
            jobs: 0,
            workers: 1,
            span_ms: 100.0,
        },
        free_riders: 6,
        identities: 24,
        task_s: 10.0,
        period_s: 50.0,
        window_s: 400.0,
        load: 1.6,
    };

    /// A smaller one for tests: up to 3 sites of up to 6 machines, 1.75
    /// times the cores asked for during 300 s.
    pub const SMALL: Setup = Setup {
        size: Size {
            sites: 3,
            machines: 6,
            jobs: 0,
            workers: 1,
            span_ms: 60.0,
        },
        free_riders: 3,
        identities: 8,
        task_s: 10.0,
        period_s: 50.0,
        window_s: 300.0,
        load: 1.75,
    };
}

/// One seed's grid and plans.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The grid: the generated sites, then a machine of each free rider,
    /// then the identities (at random sites).
    pub scenario: Scenario,
    /// Every array (or bag's job), in submission order.
    pub jobs: Vec<JobPlan>,
    /// Machines with cores (nodes `0..contributors`).
    pub contributors: u32,
    /// Cores of each contributor.
    pub cores: Vec<u32>,
    /// Reference core-seconds the contributors can do during the window.
    pub capacity_s: f64,
    /// Tasks in each array (or bag).
    pub tasks: u32,
}

impl Plan {
    /// The class of machine `node`.
    pub fn class_of(&self, setup: &Setup, node: u32) -> Class {
        if node < self.contributors {
            Class::Contributor
        } else if node < self.contributors + setup.free_riders {
            Class::FreeRider
        } else {
            Class::Identity
        }
    }

    /// The user machine `node` submits for (the identities are one user:
    /// the first identity's machine).
    pub fn user_of(&self, setup: &Setup, node: u32) -> u32 {
        match self.class_of(setup, node) {
            Class::Identity => self.contributors + setup.free_riders,
            _ => node,
        }
    }
}

/// How users submit their tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submission {
    /// Each period's tasks as one job array.
    Arrays,
    /// Each period's tasks as as many one-worker jobs (a bag), as before
    /// arrays existed.
    Bags,
}

impl Submission {
    /// For reports.
    pub fn name(self) -> &'static str {
        match self {
            Submission::Arrays => "arrays",
            Submission::Bags => "bags of one-worker jobs",
        }
    }
}

/// The grid and plans of `seed`, the tasks submitted as `submission`.
pub fn plan(setup: &Setup, seed: u64, submission: Submission) -> anyhow::Result<Plan> {
    let mut scenario = generate::heterogeneous(seed, setup.size);
    scenario.name = format!("arrays-{seed}");
    scenario.description = format!("job arrays on the grid generated from seed {seed}");
    // The generated workload is not used: the plans are ours.
    scenario.workload.home_site = None;
    let grid = scenario.grid(seed)?;
    let contributors = grid.cores.len() as u32;
    let capacity_s: f64 = grid
        .cores
        .iter()
        .zip(&grid.speed)
        .map(|(c, s)| f64::from(*c) * s)
        .sum::<f64>()
        * setup.window_s;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xa44a_75ba);
    let sites: Vec<String> = scenario.clusters.iter().map(|c| c.site.clone()).collect();
    let coreless = |rng: &mut ChaCha8Rng| Cluster {
        site: sites[rng.random_range(0..sites.len())].clone(),
        machines: 1,
        cores: 0,
        memory_mib: 16 * 1024,
        speed: None,
    };
    for _ in 0..setup.free_riders + setup.identities {
        let cluster = coreless(&mut rng);
        scenario.clusters.push(cluster);
    }
    scenario.workload.jobs = 0;
    // Long enough for the backlog to drain, slowed down by contention.
    scenario.until_s = setup.window_s * 6.0;

    let users = contributors + setup.free_riders + 1;
    let periods = (setup.window_s / setup.period_s).ceil().max(1.0);
    let asked_s = setup.load * capacity_s;
    let tasks = (asked_s / (f64::from(users) * periods * setup.task_s)).ceil() as u32;
    let tasks = tasks.clamp(1, zorilla_core::limits::MAX_TASKS);
    let lifetime = Duration::from_secs_f64(scenario.until_s);
    let mut jobs = Vec::new();
    let mut next_identity = 0u32;
    let first_identity = contributors + setup.free_riders;
    for user in 0..users {
        let phase = rng.random_range(0.0..setup.period_s);
        let memory_mib = rng.random_range(256..=4 * 1024);
        let mut k = 0u32;
        loop {
            let at = phase + f64::from(k) * setup.period_s;
            if at >= setup.window_s {
                break;
            }
            let home = if user < first_identity {
                user
            } else {
                // A fresh identity for each array while there are any.
                let identity = next_identity % setup.identities.max(1);
                next_identity += 1;
                first_identity + identity
            };
            let at = Duration::from_secs_f64(at);
            let duration = Some(Duration::from_secs_f64(setup.task_s));
            match submission {
                Submission::Arrays => jobs.push(JobPlan {
                    at,
                    home,
                    spec: array(tasks, memory_mib, lifetime),
                    duration,
                }),
                Submission::Bags => {
                    let mut spec = array(1, memory_mib, lifetime);
                    spec.tasks = None;
                    jobs.extend((0..tasks).map(|_| JobPlan {
                        at,
                        home,
                        spec: spec.clone(),
                        duration,
                    }));
                }
            }
            k += 1;
        }
    }
    jobs.sort_by_key(|p| p.at);
    Ok(Plan {
        scenario,
        jobs,
        contributors,
        cores: grid.cores.clone(),
        capacity_s,
        tasks,
    })
}

/// An array of `tasks` one-core tasks of `memory_mib` each, all of which
/// may run at once, waiting at most `lifetime`.
pub(crate) fn array(tasks: u32, memory_mib: u64, lifetime: Duration) -> JobSpec {
    let tasks = TaskArray {
        count: tasks,
        max_running: tasks,
        retries: 0,
        spot_checks: 0,
    };
    JobSpec {
        runs: 1,
        per_worker: Resources::new(1, memory_mib, 0),
        workers: tasks.workers(),
        strategy: Strategy::default(),
        lifetime,
        on_worker_lost: LostPolicy::Replace,
        kind: WorkKind::Wasm,
        priority: 0,
        tasks: Some(tasks),
    }
}

/// One user's figures in one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserFigures {
    /// Arrays (or bags) submitted.
    pub arrays: u32,
    /// Arrays (or bags) completed by the end of the run.
    pub completed: u32,
    /// Reference seconds of work its tasks got done during the window
    /// (a task's [`Setup::task_s`], in proportion to the part of its run
    /// within the window; nothing for a task stopped before its end).
    pub got_s: f64,
    /// The same of other users' tasks its machine ran.
    pub contributed_s: f64,
    /// Reference seconds of work its tasks asked for: every task it
    /// submitted.
    pub asked_s: f64,
    /// Cores of its machine (0 for free riders and identities).
    pub cores: u32,
    /// Every completed array's (or bag's) turnaround: from its
    /// submission to its last task's end, seconds.
    pub turnarounds: Vec<f64>,
}

/// One run's figures.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Fair sharing or first come, first served.
    pub mode: Mode,
    /// The seed.
    pub seed: u64,
    /// Per user (the machine it submits from; the identities as one).
    pub users: BTreeMap<u32, (Class, UserFigures)>,
    /// Reference seconds of work delivered during the window, to every
    /// user.
    pub delivered_s: f64,
    /// Machines with cores.
    pub contributors: u32,
    /// Tasks per array.
    pub tasks: u32,
    /// Tasks submitted in all.
    pub tasks_total: u64,
    /// Messages sent in all.
    pub messages: u64,
    /// The simulator's invariant checks that failed.
    pub violations: Vec<String>,
}

impl Outcome {
    /// The users of `class`.
    pub fn of(&self, class: Class) -> impl Iterator<Item = &UserFigures> {
        self.users
            .values()
            .filter(move |(c, _)| *c == class)
            .map(|(_, f)| f)
    }

    /// The share of the work done during the window that went to
    /// `class`'s tasks, all its users together, in percent.
    pub fn share(&self, class: Class) -> f64 {
        let got: f64 = self.of(class).map(|f| f.got_s).sum();
        100.0 * got / self.delivered_s.max(f64::MIN_POSITIVE)
    }

    /// The same per user of the class (the identities are one user).
    pub fn user_share(&self, class: Class) -> f64 {
        self.share(class) / self.of(class).count().max(1) as f64
    }

    /// The work `class`'s tasks got done during the window over the work
    /// they asked for (every task submitted, at [`Setup::task_s`] each), in
    /// percent.
    pub fn satisfaction(&self, class: Class) -> f64 {
        let got: f64 = self.of(class).map(|f| f.got_s).sum();
        let asked: f64 = self.of(class).map(|f| f.asked_s).sum();
        100.0 * got / asked.max(f64::MIN_POSITIVE)
    }

    /// Spearman's rank correlation between a contributor's contribution
    /// and the work its tasks got (1: shares follow contributions
    /// exactly; `None` with fewer than three contributors).
    pub fn contribution_correlation(&self) -> Option<f64> {
        let figures: Vec<&UserFigures> = self.of(Class::Contributor).collect();
        if figures.len() < 3 {
            return None;
        }
        let gave = ranks(figures.iter().map(|f| f.contributed_s).collect());
        let got = ranks(figures.iter().map(|f| f.got_s).collect());
        Some(pearson(&gave, &got))
    }

    /// Every completed array's turnaround of `class`'s users, seconds.
    pub fn turnarounds(&self, class: Class) -> Vec<f64> {
        self.of(class)
            .flat_map(|f| f.turnarounds.iter().copied())
            .collect()
    }

    /// Arrays of `class` completed, of those submitted.
    pub fn completed(&self, class: Class) -> (u32, u32) {
        self.of(class)
            .fold((0, 0), |(c, a), f| (c + f.completed, a + f.arrays))
    }
}

/// Runs the experiment once with `mode`, `submission` and `seed`.
pub fn run(
    setup: &Setup,
    mode: Mode,
    submission: Submission,
    seed: u64,
) -> anyhow::Result<Outcome> {
    let plan = plan(setup, seed, submission)?;
    let report = Sim::new(&plan.scenario, mode, seed, plan.jobs.clone())?.run();
    Ok(measure(setup, &plan, &report))
}

/// The figures of a run of [`plan`].
pub fn measure(setup: &Setup, plan: &Plan, report: &RunReport) -> Outcome {
    let window = Duration::from_secs_f64(setup.window_s);
    let mut users: BTreeMap<u32, (Class, UserFigures)> = BTreeMap::new();
    for node in 0..plan.contributors + setup.free_riders + setup.identities {
        let user = plan.user_of(setup, node);
        let figures = UserFigures {
            cores: plan.cores.get(node as usize).copied().unwrap_or(0),
            ..UserFigures::default()
        };
        users
            .entry(user)
            .or_insert_with(|| (plan.class_of(setup, node), figures));
    }
    // Work, not core time: a task on a machine twice as fast, or alone on
    // it, holds its core for less time and is worth the same; a stopped
    // task's work is lost.
    let work = |run: &WorkerRun| match run.ended {
        Some((end, RunEnd::Completed)) => {
            let held = end.saturating_sub(run.started).as_secs_f64();
            let within = run.core_s(Time::ZERO, window, report.end);
            setup.task_s * (within / held.max(f64::MIN_POSITIVE)).min(1.0)
        }
        _ => 0.0,
    };
    let mut delivered_s = 0.0;
    // Per array (or bag: the one-worker jobs a home submitted at once):
    // its user, jobs, jobs completed and the last one's end.
    let mut groups: BTreeMap<(u32, Time), (u32, u32, u32, Time)> = BTreeMap::new();
    for job in &report.jobs {
        let user = plan.user_of(setup, job.home);
        let got: f64 = job.runs.iter().map(work).sum();
        delivered_s += got;
        if let Some((_, f)) = users.get_mut(&user) {
            f.got_s += got;
            f.asked_s += f64::from(job.tasks.unwrap_or(1)) * setup.task_s;
        }
        let group = groups
            .entry((job.home, job.submitted))
            .or_insert((user, 0, 0, Time::ZERO));
        group.1 += 1;
        if let (Some((Phase::Completed, _)), Some(end)) = (&job.ended, job.ended_at) {
            group.2 += 1;
            group.3 = group.3.max(end);
        }
        for run in &job.runs {
            let by = plan.user_of(setup, run.node);
            if by != user
                && let Some((_, f)) = users.get_mut(&by)
            {
                f.contributed_s += work(run);
            }
        }
    }
    for ((_, submitted), (user, jobs, completed, end)) in groups {
        if let Some((_, f)) = users.get_mut(&user) {
            f.arrays += 1;
            if completed == jobs {
                f.completed += 1;
                f.turnarounds
                    .push(end.saturating_sub(submitted).as_secs_f64());
            }
        }
    }
    Outcome {
        mode: report.mode,
        seed: report.seed,
        users,
        delivered_s,
        contributors: plan.contributors,
        tasks: plan.tasks,
        tasks_total: report
            .jobs
            .iter()
            .map(|j| u64::from(j.tasks.unwrap_or(1)))
            .sum(),
        messages: report.messages,
        violations: report.violations.clone(),
    }
}

/// The ranks of `values` (1 for the least; ties get their mean rank).
fn ranks(values: Vec<f64>) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|a, b| values[*a].total_cmp(&values[*b]));
    let mut out = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let mean = (i + j) as f64 / 2.0 + 1.0;
        for k in i..=j {
            out[order[k]] = mean;
        }
        i = j + 1;
    }
    out
}

/// Pearson's correlation of two equally long series (0 when either is
/// constant).
fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().max(1) as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
    if va == 0.0 || vb == 0.0 {
        return 0.0;
    }
    cov / (va * vb).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_and_correlation() {
        assert_eq!(ranks(vec![3.0, 1.0, 2.0, 2.0]), vec![4.0, 1.0, 2.5, 2.5]);
        let r = pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]);
        assert!((r - 1.0).abs() < 1e-12);
        let r = pearson(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]);
        assert!((r + 1.0).abs() < 1e-12);
        assert_eq!(pearson(&[1.0, 1.0], &[1.0, 2.0]), 0.0);
    }
}

//! `zorilla-sim`: runs a scenario file with thousands of simulated nodes,
//! each running the real Zorilla core, and reports locality against an
//! oracle, messages per job and allocation times, side by side for our
//! schedule and the paper's baseline.
//!
//! ```text
//! zorilla-sim sim/scenarios/zorilla-4.2.toml --mode both --out out/sim
//! zorilla-sim sim/scenarios/zorilla-4.2.toml --mode ours,ours-hop   # ablation
//! zorilla-sim --random 200 --size full --out out/random   # generated topologies
//! zorilla-sim --fairshare 5    # Network of Favors against first come, first served
//! zorilla-sim --preemption 5   # preempting strangers' long jobs for contributors
//! zorilla-sim --arrays 5       # many users' job arrays on generated topologies
//! zorilla-sim --spot-checks 50 # a job array's spot checks beside a lying node
//! ```

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use zorilla_sim::generate::Size;
use zorilla_sim::random;
use zorilla_sim::report::{plot_sites, summary_line};
use zorilla_sim::scenario::{HomeDistances, Scenario};
use zorilla_sim::sim::{Mode, RunReport, run_scenario};
use zorilla_sim::sweep::run_case;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Modes {
    /// Latency-bounded floods, adaptive waits, nearest-k overlay.
    Ours,
    /// The paper's baseline.
    Paper,
    /// Ours with hop-limited floods only: isolates the latency budget.
    OursHop,
    /// Ours without the preference of idle, faster nodes.
    OursNearest,
    /// Ours with queues first come, first served: isolates fair sharing.
    OursFcfs,
    /// Ours and the paper's baseline.
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Distances {
    /// A node's own measured RTT to the home, if any (the real node's).
    Measured,
    /// True RTTs of the node and its neighbours (a diagnostic).
    Exact,
    /// Our overlay's network coordinates.
    Vivaldi,
}

impl From<Distances> for HomeDistances {
    fn from(d: Distances) -> Self {
        match d {
            Distances::Measured => HomeDistances::Measured,
            Distances::Exact => HomeDistances::Exact,
            Distances::Vivaldi => HomeDistances::Vivaldi,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Sizes {
    /// Up to 6 sites of up to 30 machines (seconds per topology).
    Small,
    /// Up to 12 sites of up to 500 machines, jobs of up to 1,000 workers.
    Full,
}

/// Runs a Zorilla grid simulation scenario.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The scenario file (TOML), e.g. sim/scenarios/zorilla-4.2.toml.
    #[arg(required_unless_present_any = [
        "random", "plot", "hetero", "fairshare", "preemption", "arrays", "spot_checks"
    ])]
    scenario: Option<PathBuf>,
    /// Instead of a scenario file: this many generated topologies (seeds 1
    /// to N; random sites, sizes, cores, RTTs and workloads), each run with
    /// every mode, and the distribution of the figures over them.
    #[arg(long, conflicts_with = "scenario")]
    random: Option<u64>,
    /// Instead of a scenario file: this many generated topologies on
    /// heterogeneous machines (CPU speeds and the multi-core desktop grids
    /// paper's contention), each run with every mode, and the distribution
    /// of job turnaround (submission to end).
    #[arg(long, conflicts_with_all = ["scenario", "random"])]
    hetero: Option<u64>,
    /// Instead of a scenario file: the fair-sharing experiment
    /// (`zorilla_sim::fairshare`) on seeds 1 to N, each with fair sharing
    /// (ours) and first come, first served (ours-fcfs): each class's share
    /// of the core time and its tasks' turnaround.
    #[arg(long, conflicts_with_all = ["scenario", "random", "hetero"])]
    fairshare: Option<u64>,
    /// Instead of a scenario file: the preemption experiment
    /// (`zorilla_sim::fairshare::preemption`) on seeds 1 to N, each with
    /// fair sharing and preemption, fair sharing without, and first come,
    /// first served: turnarounds, workers preempted, core time lost.
    #[arg(long, conflicts_with_all = ["scenario", "random", "hetero", "fairshare"])]
    preemption: Option<u64>,
    /// Instead of a scenario file: fair sharing with job arrays
    /// (`zorilla_sim::fairshare::arrays`) on the generated heterogeneous
    /// topologies of seeds 1 to N, with contributors, free riders and
    /// fresh identities, each with fair sharing and first come, first
    /// served: each class's share of the work against its contribution,
    /// and its arrays' turnaround. `--size small` for the tests' setup.
    #[arg(long, conflicts_with_all = ["scenario", "random", "hetero", "fairshare", "preemption"])]
    arrays: Option<u64>,
    /// Instead of a scenario file: spot checks of a job array beside a
    /// node that lies about a share of its results
    /// (`zorilla_sim::spotcheck`), on seeds 1 to N, for several shares
    /// lied about and shares checked: how often the liar is caught, the
    /// made-up results kept, the workers the checks add.
    #[arg(long, conflicts_with_all = ["scenario", "random", "hetero", "fairshare", "preemption", "arrays"])]
    spot_checks: Option<u64>,
    /// Instead of running: plot again the `random.csv` a `--random` run
    /// wrote, into `random.svg` in `--out`.
    #[arg(long, conflicts_with_all = ["scenario", "random"])]
    plot: Option<PathBuf>,
    /// The size of generated topologies: small (up to 6 sites of 30
    /// machines) or full (up to 12 sites of 500, jobs up to 1,000 workers).
    #[arg(long, value_enum, default_value = "full")]
    size: Sizes,
    /// Which schedulers to run on the same seeds (comma-separated): ours,
    /// the paper's baseline, ours with hop floods only, or both (ours and
    /// paper).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "both")]
    mode: Vec<Modes>,
    /// Seeds to run, overriding the scenario's (comma-separated).
    #[arg(long, value_delimiter = ',')]
    seeds: Option<Vec<u64>>,
    /// Directory for the CSV files and the SVG plot.
    #[arg(long, default_value = "out/sim")]
    out: PathBuf,
    /// Number of jobs, overriding the scenario's (for quick runs).
    #[arg(long)]
    jobs: Option<u32>,
    /// Bits per id digit of the paper's Bamboo-like overlay, overriding the
    /// scenario's (1, binary, by default: about ten neighbours per node on
    /// a few hundred nodes, as the paper says; 4, hexadecimal, gives ~28).
    #[arg(long)]
    baseline_digit_bits: Option<u32>,
    /// Routing-table rows of the Bamboo-like overlay, overriding the
    /// scenario's (by default every row of the 64-bit id).
    #[arg(long)]
    baseline_rows: Option<u32>,
    /// Where the flood routers' distances to a job's home come from,
    /// overriding the scenario's (`overlay.home_distances`; generated
    /// topologies: measured).
    #[arg(long, value_enum)]
    home_distances: Option<Distances>,
    /// Ping intervals simulated after the warm-up (what network
    /// coordinates learn from), overriding the scenario's
    /// (`overlay.ping_rounds`, 120 by default).
    #[arg(long)]
    ping_rounds: Option<usize>,
}

impl Args {
    /// Applies the options that change a scenario's overlay.
    fn tweak(&self, scenario: &mut Scenario) {
        if let Some(distances) = self.home_distances {
            scenario.overlay.home_distances = distances.into();
        }
        if let Some(rounds) = self.ping_rounds {
            scenario.overlay.ping_rounds = rounds;
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let modes = modes(&args.mode);
    if let Some(n) = args.hetero {
        return hetero(&args, n, &modes);
    }
    if let Some(n) = args.fairshare {
        return fairshare(&args, n);
    }
    if let Some(n) = args.preemption {
        return preemption(&args, n);
    }
    if let Some(n) = args.arrays {
        return arrays(&args, n);
    }
    if let Some(n) = args.spot_checks {
        return spot_checks(&args, n);
    }
    if let Some(n) = args.random {
        return random(&args, n, &modes);
    }
    if let Some(csv) = &args.plot {
        let text = std::fs::read_to_string(csv)
            .with_context(|| format!("cannot read {}", csv.display()))?;
        let runs = random::from_csv(&text)?;
        std::fs::create_dir_all(&args.out)
            .with_context(|| format!("cannot create output directory {}", args.out.display()))?;
        let svg = args.out.join("random.svg");
        zorilla_sim::random::plot_random(&svg, "generated topologies", &runs)?;
        println!("wrote {}", svg.display());
        return Ok(());
    }
    let path = args.scenario.clone().context("no scenario file")?;
    let mut scenario = Scenario::load(&path)?;
    if let Some(jobs) = args.jobs {
        scenario.workload.jobs = jobs;
    }
    if let Some(bits) = args.baseline_digit_bits {
        scenario.overlay.baseline_digit_bits = bits;
    }
    if let Some(rows) = args.baseline_rows {
        scenario.overlay.baseline_rows = Some(rows);
    }
    args.tweak(&mut scenario);
    let seeds = args.seeds.clone().unwrap_or_else(|| scenario.seeds.clone());
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create output directory {}", args.out.display()))?;
    let grid = scenario.grid(seeds.first().copied().unwrap_or(1))?;
    println!(
        "scenario {}: {} machines, {} worker slots, {} sites; {}",
        scenario.name,
        grid.len(),
        grid.cores.iter().map(|c| u64::from(*c)).sum::<u64>(),
        grid.sites.len(),
        scenario.description.trim()
    );
    if scenario.workload.sweep.is_some() {
        return sweep(&scenario, &modes, &seeds);
    }
    let started = Instant::now();
    let mut reports: Vec<RunReport> = Vec::new();
    for &seed in &seeds {
        for &mode in &modes {
            let grid = scenario.grid(seed)?;
            let report = run_scenario(&scenario, mode, seed)?;
            println!("{}", summary_line(&report));
            println!(
                "         {} floods; messages by kind: {:?}",
                report.floods, report.by_kind
            );
            let csv = args
                .out
                .join(format!("{}-{}-{seed}.csv", scenario.name, mode.name()));
            std::fs::write(&csv, report.csv(&grid.site_of))
                .with_context(|| format!("cannot write {}", csv.display()))?;
            for v in report.violations.iter().take(5) {
                println!("  violation: {v}");
            }
            reports.push(report);
        }
    }
    // Side by side, averaged over the seeds.
    println!("\nmean over {} seed(s):", seeds.len());
    for &mode in &modes {
        let runs: Vec<_> = reports
            .iter()
            .filter(|r| r.mode == mode)
            .map(RunReport::summary)
            .collect();
        let k = runs.len().max(1) as f64;
        let mean =
            |f: &dyn Fn(&zorilla_sim::report::Summary) -> f64| runs.iter().map(f).sum::<f64>() / k;
        println!(
            "  {:<8} extra RTT {:.4} ms/worker | out of order {:.2}% | {:.0} msgs/job | allocation mean {:.3} s, max {:.3} s | jobs allocated {:.1}",
            mode.name(),
            mean(&|s| s.extra_rtt_ms),
            mean(&|s| s.out_of_order * 100.0),
            mean(&|s| s.messages_per_job),
            mean(&|s| s.mean_allocation.as_secs_f64()),
            mean(&|s| s.max_allocation.as_secs_f64()),
            mean(&|s| s.allocated as f64),
        );
    }
    let first: Vec<&RunReport> = reports.iter().filter(|r| r.seed == seeds[0]).collect();
    let svg = args.out.join(format!("{}.svg", scenario.name));
    plot_sites(&svg, &scenario.name, &first)?;
    println!(
        "\nwrote CSVs and {} in {:.1} s",
        svg.display(),
        started.elapsed().as_secs_f64()
    );
    let violations: usize = reports.iter().map(|r| r.violations.len()).sum();
    anyhow::ensure!(violations == 0, "{violations} invariant violations");
    Ok(())
}

/// The schedulers asked for, each once, in order.
fn modes(asked: &[Modes]) -> Vec<Mode> {
    let mut modes: Vec<Mode> = Vec::new();
    for mode in asked {
        let add: &[Mode] = match mode {
            Modes::Ours => &[Mode::Ours],
            Modes::Paper => &[Mode::Paper],
            Modes::OursHop => &[Mode::OursHop],
            Modes::OursNearest => &[Mode::OursNearest],
            Modes::OursFcfs => &[Mode::OursFcfs],
            Modes::Both => &[Mode::Ours, Mode::Paper],
        };
        for m in add {
            if !modes.contains(m) {
                modes.push(*m);
            }
        }
    }
    modes
}

/// `--hetero N`: generated topologies on heterogeneous machines, and the
/// distribution of job turnaround per mode, against the first mode's.
fn hetero(args: &Args, n: u64, modes: &[Mode]) -> anyhow::Result<()> {
    let size = match args.size {
        Sizes::Small => Size::SMALL,
        Sizes::Full => Size::FULL,
    };
    let started = Instant::now();
    let seeds = seeds_or(args, n);
    let runs = random::turnarounds(seeds.iter().copied(), size, modes)?;
    println!(
        "{} heterogeneous topologies ({:?}), every completed job's turnaround (submission to end):",
        seeds.len(),
        args.size
    );
    let base = modes
        .first()
        .map(|&m| random::turnaround_spread(&runs, m).0);
    for &mode in modes {
        let ((median, p95, worst), completed, jobs) = random::turnaround_spread(&runs, mode);
        let ratio = base.map_or(String::new(), |(bm, bp, _)| {
            format!("  ({:.3}x, {:.3}x the first mode's)", median / bm, p95 / bp)
        });
        println!(
            "  {:<13} median {median:>7.1} s, p95 {p95:>7.1} s, worst {worst:>7.1} s; {completed} of {jobs} jobs completed{ratio}",
            mode.name()
        );
    }
    for &mode in modes {
        let extra: Vec<f64> = runs
            .iter()
            .filter(|r| r.mode == mode)
            .map(|r| r.summary.extra_rtt_ms)
            .collect();
        let (median, p95, _) = random::spread(extra);
        println!(
            "  {:<13} extra RTT per worker over the oracle: median {median:.3} ms, p95 {p95:.3} ms",
            mode.name()
        );
    }
    let violations: usize = runs.iter().map(|r| r.violations).sum();
    println!("in {:.1} s", started.elapsed().as_secs_f64());
    anyhow::ensure!(violations == 0, "{violations} invariant violations");
    Ok(())
}

/// The seeds `--seeds` names, else 1 to `n`.
fn seeds_or(args: &Args, n: u64) -> Vec<u64> {
    match &args.seeds {
        Some(seeds) => seeds.clone(),
        None => (1..=n).collect(),
    }
}

/// `--fairshare N`: the fair-sharing experiment on seeds 1 to N (or
/// `--seeds`), with and without fair sharing; per class the mean over the
/// seeds of its share of the core time delivered during the window, and
/// its tasks' turnaround over every seed; RESULT lines for bench-report.
fn fairshare(args: &Args, n: u64) -> anyhow::Result<()> {
    use zorilla_sim::fairshare::{Class, Outcome, Setup, median_p95, run};
    let setup = Setup::DEFAULT;
    let seeds = seeds_or(args, n);
    let started = Instant::now();
    println!(
        "fair sharing: {} contributors of {} cores, {} free riders, {} fresh identities sharing one \
         free rider's load; every user a bag of {} one-worker tasks of {} s every {} s for {} s \
         ({:.2} times the cores asked for); {} seed(s)",
        setup.contributors,
        setup.cores,
        setup.free_riders,
        setup.identities,
        setup.bag,
        setup.task_s,
        setup.period_s,
        setup.window_s,
        setup.load(),
        seeds.len()
    );
    let classes = [Class::Contributor, Class::FreeRider, Class::Identity];
    let mut violations = 0;
    for (mode, key) in [(Mode::Ours, "ours"), (Mode::OursFcfs, "fcfs")] {
        let runs: Vec<Outcome> = seeds
            .iter()
            .map(|&seed| run(&setup, mode, seed))
            .collect::<anyhow::Result<_>>()?;
        violations += runs.iter().map(|r| r.violations.len()).sum::<usize>();
        let k = runs.len().max(1) as f64;
        let mean = |f: &dyn Fn(&Outcome) -> f64| runs.iter().map(f).sum::<f64>() / k;
        println!(
            "\n{}: core time delivered during the window {:.1}% of the contributors' (mean)",
            mode.name(),
            mean(&|o| 100.0 * o.delivered_s / o.capacity_s)
        );
        println!(
            "  {:<13} {:>5} {:>14} {:>14} {:>14} {:>22} {:>15}",
            "class",
            "users",
            "share",
            "per user",
            "contributed",
            "turnaround med / p95",
            "completed"
        );
        for class in classes {
            let figures = |o: &Outcome| o.classes.get(&class).cloned().unwrap_or_default();
            let share = mean(&|o| o.share(class));
            let user = mean(&|o| o.user_share(class));
            let contributed = mean(&|o| 100.0 * figures(o).contributed_s / o.delivered_s);
            let turnarounds: Vec<f64> = runs.iter().flat_map(|o| figures(o).turnarounds).collect();
            let (median, p95) = median_p95(turnarounds);
            let completed: u32 = runs.iter().map(|o| figures(o).completed).sum();
            let tasks: u32 = runs.iter().map(|o| figures(o).tasks).sum();
            println!(
                "  {:<13} {:>5} {:>13.1}% {:>13.1}% {:>13.1}% {:>12.0} s / {:>4.0} s {:>6} of {:<6}",
                class.name(),
                runs.first().map_or(0, |o| figures(o).users),
                share,
                user,
                contributed,
                median,
                p95,
                completed,
                tasks
            );
            let name = class.key();
            if class == Class::Identity {
                println!(
                    "RESULT fairshare.{key}.{name}_share {share:.1} % of the core time, all together"
                );
            } else {
                println!("RESULT fairshare.{key}.{name}_share {user:.1} % of the core time, each");
            }
            println!("RESULT fairshare.{key}.{name}_turnaround {median:.0} s median");
            println!("RESULT fairshare.{key}.{name}_completed {completed} of {tasks} tasks");
        }
    }
    println!("\nin {:.1} s", started.elapsed().as_secs_f64());
    anyhow::ensure!(violations == 0, "{violations} invariant violations");
    Ok(())
}

/// `--arrays N`: fair sharing with job arrays on the generated
/// topologies of seeds 1 to N (or `--seeds`), with and without fair
/// sharing; per class the mean over the seeds of its share of the work
/// done during the window and of its contribution, and its arrays'
/// turnaround over every seed; RESULT lines for bench-report.
fn arrays(args: &Args, n: u64) -> anyhow::Result<()> {
    use zorilla_sim::fairshare::arrays::{Outcome, Setup, Submission, run};
    use zorilla_sim::fairshare::{Class, median_p95};
    let setup = match args.size {
        Sizes::Small => Setup::SMALL,
        Sizes::Full => Setup::DEFAULT,
    };
    let seeds = seeds_or(args, n);
    let started = Instant::now();
    println!(
        "job arrays: generated heterogeneous topologies (up to {} sites of up to {} machines, \
         contention), every machine with cores a contributor, {} free riders, {} fresh identities \
         sharing one free rider's arrays; every user an array of one-core tasks of {} reference \
         seconds every {} s for {} s ({:.2} times the cores asked for); {} seed(s)",
        setup.size.sites,
        setup.size.machines,
        setup.free_riders,
        setup.identities,
        setup.task_s,
        setup.period_s,
        setup.window_s,
        setup.load,
        seeds.len()
    );
    let classes = [Class::Contributor, Class::FreeRider, Class::Identity];
    let mut violations = 0;
    for (mode, submission, key) in [
        (Mode::Ours, Submission::Arrays, "ours"),
        (Mode::OursFcfs, Submission::Arrays, "fcfs"),
        (Mode::Ours, Submission::Bags, "bags"),
    ] {
        let runs: Vec<Outcome> = seeds
            .iter()
            .map(|&seed| run(&setup, mode, submission, seed))
            .collect::<anyhow::Result<_>>()?;
        violations += runs.iter().map(|r| r.violations.len()).sum::<usize>();
        let k = runs.len().max(1) as f64;
        let mean = |f: &dyn Fn(&Outcome) -> f64| runs.iter().map(f).sum::<f64>() / k;
        let messages: u64 = runs.iter().map(|o| o.messages).sum();
        let tasks: u64 = runs.iter().map(|o| o.tasks_total).sum();
        let per_task = messages as f64 / tasks.max(1) as f64;
        println!(
            "\n{}, {}: {per_task:.1} messages per task",
            mode.name(),
            submission.name()
        );
        println!("RESULT fairarrays.{key}.messages_per_task {per_task:.1} messages per task");
        for o in &runs {
            println!(
                "  seed {}: {} contributors, {} tasks a submission; rank correlation of a \
                 contributor's contribution and the work it got {}",
                o.seed,
                o.contributors,
                o.tasks,
                o.contribution_correlation()
                    .map_or("-".into(), |r| format!("{r:.2}"))
            );
        }
        // Each user of the first seed: what it gave against what it got.
        if let Some(o) = runs.first() {
            println!(
                "  seed {}, each user (work in % of the work done in the window):",
                o.seed
            );
            println!(
                "    {:>5} {:<13} {:>5} {:>12} {:>9} {:>9}",
                "node", "class", "cores", "contributed", "got", "of asked"
            );
            for (node, (class, f)) in &o.users {
                let pct = |x: f64| 100.0 * x / o.delivered_s.max(f64::MIN_POSITIVE);
                println!(
                    "    {:>5} {:<13} {:>5} {:>11.1}% {:>8.1}% {:>8.0}%",
                    node,
                    class.name(),
                    f.cores,
                    pct(f.contributed_s),
                    pct(f.got_s),
                    100.0 * f.got_s / f.asked_s.max(f64::MIN_POSITIVE)
                );
            }
        }
        println!(
            "  {:<13} {:>14} {:>14} {:>14} {:>10} {:>22} {:>15}",
            "class", "share", "per user", "contributed", "of asked", "turnaround med / p95", "done"
        );
        for class in classes {
            let share = mean(&|o| o.share(class));
            let user = mean(&|o| o.user_share(class));
            let contributed = mean(&|o| {
                let gave: f64 = o.of(class).map(|f| f.contributed_s).sum();
                100.0 * gave / o.delivered_s.max(f64::MIN_POSITIVE)
            });
            let satisfied = mean(&|o| o.satisfaction(class));
            let turnarounds: Vec<f64> = runs.iter().flat_map(|o| o.turnarounds(class)).collect();
            let (median, p95) = median_p95(turnarounds);
            let (completed, submitted) = runs.iter().fold((0, 0), |(c, a), o| {
                let (oc, oa) = o.completed(class);
                (c + oc, a + oa)
            });
            println!(
                "  {:<13} {:>13.1}% {:>13.1}% {:>13.1}% {:>9.0}% {:>12.0} s / {:>4.0} s {:>6} of {:<6}",
                class.name(),
                share,
                user,
                contributed,
                satisfied,
                median,
                p95,
                completed,
                submitted
            );
            let name = class.key();
            if class == Class::Identity {
                println!(
                    "RESULT fairarrays.{key}.{name}_share {share:.1} % of the work, all together"
                );
            } else {
                println!("RESULT fairarrays.{key}.{name}_share {user:.1} % of the work, each");
            }
            println!(
                "RESULT fairarrays.{key}.{name}_satisfied {satisfied:.0} % of the work asked for"
            );
            println!("RESULT fairarrays.{key}.{name}_turnaround {median:.0} s median");
            println!(
                "RESULT fairarrays.{key}.{name}_completed {completed} of {submitted} submissions"
            );
        }
        let correlations: Vec<f64> = runs
            .iter()
            .filter_map(|o| o.contribution_correlation())
            .collect();
        let correlation = correlations.iter().sum::<f64>() / correlations.len().max(1) as f64;
        println!("RESULT fairarrays.{key}.correlation {correlation:.2} rank correlation (mean)");
    }
    println!("\nin {:.1} s", started.elapsed().as_secs_f64());
    anyhow::ensure!(violations == 0, "{violations} invariant violations");
    Ok(())
}

/// `--spot-checks N`: the spot-check experiment on seeds 1 to N (or
/// `--seeds`) for each share lied about and share checked: the share of
/// runs in which the liar was caught (and what the model expects), the
/// made-up results the arrays kept per 1,000 tasks, and the workers the
/// checks added; RESULT lines for bench-report.
fn spot_checks(args: &Args, n: u64) -> anyhow::Result<()> {
    use zorilla_sim::spotcheck::{Outcome, Setup, run};
    let setup = Setup::DEFAULT;
    let seeds = seeds_or(args, n);
    let started = Instant::now();
    println!(
        "spot checks: {} nodes of {} cores, node 0 lying about a share p of its results, a home \
         without cores submitting one array of {} one-core tasks of {} s with a share f checked; \
         {} seed(s) each",
        setup.nodes,
        setup.cores,
        setup.tasks,
        setup.task_s,
        seeds.len()
    );
    println!(
        "\n{:>5} {:>5} {:>9} {:>9} {:>13} {:>13} {:>13} {:>9}",
        "p", "f", "caught", "expected", "liar results", "kept lies/1k", "extra workers", "makespan"
    );
    for share in [0.1, 0.5, 1.0] {
        for percent in [0u8, 5, 10, 20] {
            let runs: Vec<Outcome> = seeds
                .iter()
                .map(|&seed| run(&setup, share, percent, seed))
                .collect::<anyhow::Result<_>>()?;
            let incomplete = runs.iter().filter(|o| !o.completed).count();
            anyhow::ensure!(
                incomplete == 0,
                "{incomplete} arrays did not complete (p {share}, f {percent} %)"
            );
            let k = runs.len().max(1) as f64;
            let mean = |f: &dyn Fn(&Outcome) -> f64| runs.iter().map(f).sum::<f64>() / k;
            let caught = mean(&|o| f64::from(u8::from(o.caught))) * 100.0;
            let expected = mean(&|o| o.expected) * 100.0;
            let results = mean(&|o| f64::from(o.liar_results));
            let kept = mean(&|o| f64::from(o.kept_lies) * 1000.0 / f64::from(o.tasks.max(1)));
            let extra = mean(&|o| f64::from(o.workers) / f64::from(o.tasks.max(1)) - 1.0) * 100.0;
            let makespan = mean(&|o| o.makespan.as_secs_f64());
            println!(
                "{share:>5} {:>4}% {caught:>8.0}% {expected:>8.0}% {results:>13.1} {kept:>13.2} \
                 {extra:>12.1}% {makespan:>8.0}s",
                percent
            );
            let key = format!("spotcheck.p{:.0}.f{percent}", share * 100.0);
            println!("RESULT {key}.caught {caught:.0} % of runs");
            println!("RESULT {key}.expected {expected:.0} % of runs");
            println!("RESULT {key}.kept_lies {kept:.2} per 1000 tasks");
            println!("RESULT {key}.extra_workers {extra:.1} %");
            println!("RESULT {key}.makespan {makespan:.0} s");
        }
    }
    println!("\nin {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// `--preemption N`: the preemption experiment on seeds 1 to N (or
/// `--seeds`), three ways; turnarounds over every seed, preemptions and
/// core time lost summed over them; RESULT lines for bench-report.
fn preemption(args: &Args, n: u64) -> anyhow::Result<()> {
    use zorilla_sim::fairshare::median_p95;
    use zorilla_sim::fairshare::preemption::{Outcome, Setup, TaskFigures, Variant, run};
    let setup = Setup::DEFAULT;
    let seeds = seeds_or(args, n);
    let started = Instant::now();
    println!(
        "preemption: {} contributors of {} cores ({} warm-up tasks each), then {} free riders with \
         {} one-worker tasks of {} s each at {} s, then per contributor {} bags of {} tasks of {} s \
         every {} s from {} s; {} seed(s)",
        setup.contributors,
        setup.cores,
        setup.warmup,
        setup.free_riders,
        setup.long_tasks,
        setup.long_s,
        setup.long_at_s,
        setup.bags,
        setup.bag,
        setup.short_s,
        setup.period_s,
        setup.short_at_s,
        seeds.len()
    );
    let mut violations = 0;
    for variant in Variant::ALL {
        let runs: Vec<Outcome> = seeds
            .iter()
            .map(|&seed| run(&setup, variant, seed))
            .collect::<anyhow::Result<_>>()?;
        violations += runs.iter().map(|r| r.violations.len()).sum::<usize>();
        println!("\n{}:", variant.describe());
        println!(
            "  {:<20} {:>22} {:>15} {:>10} {:>9} {:>14} {:>15}",
            "tasks",
            "turnaround med / p95",
            "completed",
            "preempted",
            "replaced",
            "most per task",
            "core time lost"
        );
        let key = variant.key();
        let short: fn(&Outcome) -> &TaskFigures = |o| &o.short;
        let long: fn(&Outcome) -> &TaskFigures = |o| &o.long;
        for (name, label, figures) in [
            ("short", "contributors' short", short),
            ("long", "free riders' long", long),
        ] {
            let all: Vec<&TaskFigures> = runs.iter().map(figures).collect();
            let (median, p95) =
                median_p95(all.iter().flat_map(|f| f.turnarounds.clone()).collect());
            let completed: u32 = all.iter().map(|f| f.completed).sum();
            let tasks: u32 = all.iter().map(|f| f.tasks).sum();
            let preempted: u32 = all.iter().map(|f| f.preempted).sum();
            let replaced: u32 = all.iter().map(|f| f.replaced).sum();
            let most = all.iter().map(|f| f.most_preempted).max().unwrap_or(0);
            let lost: f64 = all.iter().map(|f| f.wasted_s).sum();
            println!(
                "  {:<20} {:>12.0} s / {:>4.0} s {:>6} of {:<6} {:>10} {:>9} {:>14} {:>11.0} c-s",
                label, median, p95, completed, tasks, preempted, replaced, most, lost
            );
            println!("RESULT preemption.{key}.{name}_turnaround {median:.0} s median");
            println!("RESULT preemption.{key}.{name}_turnaround_p95 {p95:.0} s");
            println!("RESULT preemption.{key}.{name}_completed {completed} of {tasks} tasks");
            if name == "long" {
                println!("RESULT preemption.{key}.preempted {preempted} workers");
                println!("RESULT preemption.{key}.lost {lost:.0} core-seconds");
            }
        }
    }
    println!("\nin {:.1} s", started.elapsed().as_secs_f64());
    anyhow::ensure!(violations == 0, "{violations} invariant violations");
    Ok(())
}

/// `--random N`: generated topologies, the distribution of every figure,
/// and a CSV of every run.
fn random(args: &Args, n: u64, modes: &[Mode]) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let size = match args.size {
        Sizes::Small => Size::SMALL,
        Sizes::Full => Size::FULL,
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create output directory {}", args.out.display()))?;
    let started = Instant::now();
    let mut runs = Vec::new();
    let mut csv = String::from(
        "seed,mode,sites,machines,jobs,allocated,extra_rtt_ms,out_of_order,messages_per_job,mean_allocation_s,violations,coordinate_error\n",
    );
    // `--seeds` picks topologies out of the N to look at closely: only
    // those run, and each run's per-job CSV is written beside random.csv.
    let seeds = seeds_or(args, n);
    for &seed in &seeds {
        if args.seeds.is_some() {
            let mut scenario = zorilla_sim::generate::scenario(seed, size);
            args.tweak(&mut scenario);
            let grid = scenario.grid(seed)?;
            for &mode in modes {
                let report = run_scenario(&scenario, mode, seed)?;
                println!(
                    "topology {seed:>4} {:<8}: {} floods; messages by kind: {:?}",
                    mode.name(),
                    report.floods,
                    report.by_kind
                );
                for v in report.violations.iter().take(5) {
                    println!("  violation: {v}");
                }
                let path = args.out.join(format!("random-{seed}-{}.csv", mode.name()));
                std::fs::write(&path, report.csv(&grid.site_of))
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
        for run in random::run([seed], size, modes, &|s| args.tweak(s))? {
            let s = &run.summary;
            println!(
                "topology {seed:>4} ({:>2} sites, {:>5} machines) {:<8}: extra RTT {:.4} ms/worker, out of order {:.2}%, {:.0} msgs/job, allocation {:.3} s, {}/{} jobs{}",
                run.sites,
                run.machines,
                run.mode.name(),
                s.extra_rtt_ms,
                s.out_of_order * 100.0,
                s.messages_per_job,
                s.mean_allocation.as_secs_f64(),
                s.allocated,
                s.jobs,
                s.coordinate_error.map_or(String::new(), |e| format!(
                    ", coordinates' median relative error {e:.3}"
                )),
            );
            let _ = writeln!(
                csv,
                "{seed},{},{},{},{},{},{:.4},{:.4},{:.1},{:.4},{},{}",
                run.mode.name(),
                run.sites,
                run.machines,
                s.jobs,
                s.allocated,
                s.extra_rtt_ms,
                s.out_of_order,
                s.messages_per_job,
                s.mean_allocation.as_secs_f64(),
                run.violations,
                s.coordinate_error
                    .map_or(String::new(), |e| format!("{e:.4}")),
            );
            runs.push(run);
        }
    }
    println!("\nover {} generated topologies:", seeds.len());
    for &mode in modes {
        for line in random::distribution(&runs, mode) {
            println!("{line}");
        }
    }
    if modes.contains(&Mode::Ours) && modes.contains(&Mode::Paper) {
        let (both, fewer, no_slower) = random::compare(&runs, Mode::Ours, Mode::Paper);
        println!(
            "  ours sent at most the paper's messages per job on {fewer} of {both} topologies, and allocated no slower on {no_slower}"
        );
    }
    let path = args.out.join("random.csv");
    std::fs::write(&path, csv).with_context(|| format!("cannot write {}", path.display()))?;
    let svg = args.out.join("random.svg");
    zorilla_sim::random::plot_random(&svg, "generated topologies", &runs)?;
    println!("wrote {}", svg.display());
    println!(
        "\nwrote {} in {:.1} s",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    let violations: usize = runs.iter().map(|r| r.violations).sum();
    anyhow::ensure!(violations == 0, "{violations} invariant violations");
    Ok(())
}

fn sweep(scenario: &Scenario, modes: &[Mode], seeds: &[u64]) -> anyhow::Result<()> {
    let sweep = scenario.workload.sweep.as_ref().context("no sweep")?;
    let grid = scenario.grid(seeds[0])?;
    let mut mismatches = 0;
    for &mode in modes {
        for &strategy in &sweep.strategies {
            println!(
                "\n{} / {strategy:?}: hosts/workers per site (reference from the paper's algorithm in brackets)",
                mode.name()
            );
            print!("{:>5} ", "n");
            for site in &grid.sites {
                print!("{site:>16} ");
            }
            println!("  time      match");
            for &n in &sweep.sizes {
                let case = run_case(scenario, mode, seeds[0], strategy, n)?;
                print!("{n:>5} ");
                for ((h, w), (rh, rw)) in case.simulated.iter().zip(&case.reference) {
                    print!("{:>16} ", format!("{h}/{w} [{rh}/{rw}]"));
                }
                let time = case
                    .allocated_after
                    .map_or("never".to_string(), |t| format!("{:.3}s", t.as_secs_f64()));
                println!("  {time:>8}  {}", if case.matches() { "yes" } else { "NO" });
                if !case.matches() {
                    mismatches += 1;
                }
            }
        }
    }
    println!("\n{mismatches} case(s) differ from the reference");
    Ok(())
}

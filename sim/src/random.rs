//! Runs many generated scenarios ([`crate::generate`]) with several
//! schedulers side by side and reports the distribution of the figures
//! over the topologies: what `zorilla-sim --random N` prints.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::generate::{self, Size};
use crate::report::{Summary, draw_lines, mode_color};
use crate::scenario::Scenario;
use crate::sim::{Mode, run_scenario};

/// The figures of one scheduler on one generated topology.
#[derive(Debug, Clone)]
pub struct Run {
    /// The topology's seed.
    pub seed: u64,
    /// The scheduler.
    pub mode: Mode,
    /// Machines in the grid.
    pub machines: usize,
    /// Sites in the grid.
    pub sites: usize,
    /// The run's aggregates.
    pub summary: Summary,
    /// Invariant violations (none expected).
    pub violations: usize,
}

/// Runs seeds `seeds` of generated scenarios of `size` with every mode,
/// each scenario changed by `tweak` first (options of the command line).
pub fn run(
    seeds: impl IntoIterator<Item = u64>,
    size: Size,
    modes: &[Mode],
    tweak: &dyn Fn(&mut Scenario),
) -> anyhow::Result<Vec<Run>> {
    let mut runs = Vec::new();
    for seed in seeds {
        let mut scenario = generate::scenario(seed, size);
        tweak(&mut scenario);
        let grid = scenario.grid(seed)?;
        for &mode in modes {
            let report = run_scenario(&scenario, mode, seed)?;
            runs.push(Run {
                seed,
                mode,
                machines: grid.len(),
                sites: grid.sites.len(),
                summary: report.summary(),
                violations: report.violations.len(),
            });
        }
    }
    Ok(runs)
}

/// The jobs of one scheduler on one heterogeneous generated topology
/// ([`generate::heterogeneous`]): how long each took from submission to
/// its end.
#[derive(Debug, Clone)]
pub struct Turnarounds {
    /// The topology's seed.
    pub seed: u64,
    /// The scheduler.
    pub mode: Mode,
    /// Jobs submitted.
    pub jobs: usize,
    /// The turnaround of every job that completed, in seconds, in job
    /// order.
    pub seconds: Vec<f64>,
    /// The run's aggregates of placement (locality, messages).
    pub summary: Summary,
    /// Invariant violations (none expected).
    pub violations: usize,
}

/// Runs seeds `seeds` of heterogeneous generated scenarios of `size`
/// with every mode, for job turnaround.
pub fn turnarounds(
    seeds: impl IntoIterator<Item = u64>,
    size: Size,
    modes: &[Mode],
) -> anyhow::Result<Vec<Turnarounds>> {
    let mut runs = Vec::new();
    for seed in seeds {
        let scenario = generate::heterogeneous(seed, size);
        for &mode in modes {
            let report = run_scenario(&scenario, mode, seed)?;
            runs.push(Turnarounds {
                seed,
                mode,
                jobs: report.jobs.len(),
                seconds: report
                    .jobs
                    .iter()
                    .filter_map(|j| j.turnaround())
                    .map(|t| t.as_secs_f64())
                    .collect(),
                summary: report.summary(),
                violations: report.violations.len(),
            });
        }
    }
    Ok(runs)
}

/// Every completed job's turnaround of `mode` over all topologies, in
/// seconds: its median, 95th percentile and worst ([`spread`]), and how
/// many jobs completed of how many.
pub fn turnaround_spread(runs: &[Turnarounds], mode: Mode) -> ((f64, f64, f64), usize, usize) {
    let of_mode = || runs.iter().filter(move |r| r.mode == mode);
    let all: Vec<f64> = of_mode().flat_map(|r| r.seconds.iter().copied()).collect();
    let completed = all.len();
    (spread(all), completed, of_mode().map(|r| r.jobs).sum())
}

/// Median, 95th percentile and worst of `values` (`NaN`s left out).
pub fn spread(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.retain(|v| !v.is_nan());
    values.sort_by(f64::total_cmp);
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95), values[values.len() - 1])
}

/// The distribution of each figure of `mode`'s runs, as text lines.
pub fn distribution(runs: &[Run], mode: Mode) -> Vec<String> {
    let of = |f: &dyn Fn(&Summary) -> f64| {
        spread(
            runs.iter()
                .filter(|r| r.mode == mode)
                .map(|r| f(&r.summary))
                .collect(),
        )
    };
    let line = |name: &str, unit: &str, (median, p95, worst): (f64, f64, f64)| -> String {
        format!(
            "  {:<8} {name:<26} median {median:>9.3}{unit}, p95 {p95:>9.3}{unit}, worst {worst:>9.3}{unit}",
            mode.name()
        )
    };
    vec![
        line("extra RTT per worker", " ms", of(&|s| s.extra_rtt_ms)),
        line("out of order", " %", of(&|s| s.out_of_order * 100.0)),
        line("messages per job", "", of(&|s| s.messages_per_job)),
        line(
            "mean allocation time",
            " s",
            of(&|s| s.mean_allocation.as_secs_f64()),
        ),
        line(
            "jobs not allocated",
            " %",
            of(&|s| 100.0 * (s.jobs - s.allocated) as f64 / s.jobs.max(1) as f64),
        ),
    ]
    .into_iter()
    .chain(
        // Only our overlay has coordinates.
        runs.iter()
            .any(|r| r.mode == mode && r.summary.coordinate_error.is_some())
            .then(|| {
                line(
                    "coordinates' rel. error",
                    "",
                    of(&|s| s.coordinate_error.unwrap_or(f64::NAN)),
                )
            }),
    )
    .collect()
}

/// On how many topologies `a` sent at most as many messages per job as
/// `b`, and allocated no slower (mean allocation time), of those both ran.
pub fn compare(runs: &[Run], a: Mode, b: Mode) -> (usize, usize, usize) {
    let mut both = 0;
    let (mut fewer_messages, mut no_slower) = (0, 0);
    for ra in runs.iter().filter(|r| r.mode == a) {
        if let Some(rb) = runs.iter().find(|r| r.mode == b && r.seed == ra.seed) {
            both += 1;
            fewer_messages +=
                usize::from(ra.summary.messages_per_job <= rb.summary.messages_per_job);
            no_slower += usize::from(
                ra.summary.mean_allocation <= rb.summary.mean_allocation + Duration::from_millis(1),
            );
        }
    }
    (both, fewer_messages, no_slower)
}

/// Reads back the runs of a `random.csv` that `zorilla-sim --random`
/// wrote (to plot them again without running them again). The longest
/// allocation time and the workers placed are not in the file: zero. The
/// coordinates' error is its twelfth column, empty for the paper's
/// overlay (files written before it have eleven).
pub fn from_csv(text: &str) -> anyhow::Result<Vec<Run>> {
    let mut runs = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let bad = || anyhow::anyhow!("line {} of the CSV is not a run: {line}", i + 1);
        if f.len() != 11 && f.len() != 12 {
            return Err(bad());
        }
        let mode = [
            Mode::Ours,
            Mode::Paper,
            Mode::OursHop,
            Mode::OursNearest,
            Mode::OursFcfs,
        ]
        .into_iter()
        .find(|m| m.name() == f[1])
        .ok_or_else(bad)?;
        let num = |k: usize| f[k].parse::<f64>().map_err(|_| bad());
        let int = |k: usize| f[k].parse::<usize>().map_err(|_| bad());
        runs.push(Run {
            seed: f[0].parse().map_err(|_| bad())?,
            mode,
            sites: int(2)?,
            machines: int(3)?,
            summary: Summary {
                jobs: int(4)?,
                allocated: int(5)?,
                workers: 0,
                extra_rtt_ms: num(6)?,
                out_of_order: num(7)?,
                messages_per_job: num(8)?,
                mean_allocation: Duration::from_secs_f64(num(9)?.max(0.0)),
                max_allocation: Duration::ZERO,
                coordinate_error: match f.get(11) {
                    Some(e) if !e.is_empty() => Some(num(11)?),
                    _ => None,
                },
            },
            violations: int(10)?,
        });
    }
    Ok(runs)
}

/// One figure of the generated-topology plot: its name, unit and value.
type Figure = (&'static str, &'static str, fn(&Summary) -> f64);

/// Plots the distribution over generated topologies (this module) of
/// each figure (extra RTT per worker, out of order, messages per job, mean
/// allocation time), one panel each: every mode's per-topology values
/// sorted, against the share of topologies at or below them, so that the
/// median and the 95th percentile read off at 50% and 95%.
pub fn plot_random(path: &Path, title: &str, runs: &[Run]) -> anyhow::Result<()> {
    let figures: [Figure; 4] = [
        ("extra RTT per worker over the oracle", "ms", |s| {
            s.extra_rtt_ms
        }),
        ("workers placed out of order", "%", |s| {
            s.out_of_order * 100.0
        }),
        ("messages per job (log)", "", |s| {
            s.messages_per_job.max(1.0)
        }),
        ("mean allocation time (log)", "s", |s| {
            s.mean_allocation.as_secs_f64().max(1e-3)
        }),
    ];
    let mut modes: Vec<Mode> = runs.iter().map(|r| r.mode).collect();
    modes.sort();
    modes.dedup();
    let topologies = runs
        .iter()
        .map(|r| r.seed)
        .collect::<std::collections::BTreeSet<_>>();
    let root = SVGBackend::new(path, (1000, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let root = root
        .titled(
            &format!("{title}: {} topologies", topologies.len()),
            ("sans-serif", 20),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let panels = root.split_evenly((2, 2));
    for (index, (panel, (name, unit, value))) in panels.iter().zip(figures).enumerate() {
        let series: Vec<(Mode, Vec<(f64, f64)>)> = modes
            .iter()
            .map(|&mode| {
                let mut values: Vec<f64> = runs
                    .iter()
                    .filter(|r| r.mode == mode)
                    .map(|r| value(&r.summary))
                    .filter(|v| v.is_finite())
                    .collect();
                values.sort_by(f64::total_cmp);
                let n = values.len().max(1) as f64;
                let points = values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (*v, 100.0 * (i + 1) as f64 / n))
                    .collect();
                (mode, points)
            })
            .collect();
        let x_max = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
            .fold(0.0f64, f64::max);
        let caption = if unit.is_empty() {
            name.to_string()
        } else {
            format!("{name} ({unit})")
        };
        let mut builder = ChartBuilder::on(panel);
        builder
            .caption(caption, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(44);
        let x_min = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
            .fold(f64::INFINITY, f64::min)
            .min(x_max)
            .max(1e-3);
        let lines = series
            .into_iter()
            .map(|(mode, points)| (mode.name().to_string(), mode_color(mode), points));
        // Messages and allocation times span orders of magnitude.
        if index >= 2 {
            let mut chart = builder
                .build_cartesian_2d((x_min..x_max.max(x_min * 10.0)).log_scale(), 0.0..100.0)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            cdf_mesh(&mut chart)?;
            draw_lines(&mut chart, lines, SeriesLabelPosition::LowerRight)?;
        } else {
            let mut chart = builder
                .build_cartesian_2d(0.0..x_max.max(1e-3) * 1.05, 0.0..100.0)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            cdf_mesh(&mut chart)?;
            draw_lines(&mut chart, lines, SeriesLabelPosition::LowerRight)?;
        }
    }
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The grid and the y axis of a distribution panel.
fn cdf_mesh<'a, DB, X>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, RangedCoordf64>>,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    X: Ranged + ValueFormatter<X::ValueType>,
{
    chart
        .configure_mesh()
        .y_desc("topologies at or below (%)")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

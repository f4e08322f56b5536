//! What `zorilla-sim` reports: per-run aggregates (locality against the
//! oracle, messages per job, allocation times), the CSV of every job, the
//! P2P-MPI sweep table, and the SVG plot of workers per site over time.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use plotters::prelude::*;

use crate::sim::{Mode, RunReport};

/// The aggregate figures of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Jobs submitted.
    pub jobs: usize,
    /// Jobs that got all their workers.
    pub allocated: usize,
    /// Workers placed in allocated jobs.
    pub workers: u64,
    /// Mean extra RTT per worker over the oracle, ms.
    pub extra_rtt_ms: f64,
    /// Share of workers placed while a nearer free worker existed.
    pub out_of_order: f64,
    /// Mean messages per job.
    pub messages_per_job: f64,
    /// Mean time from submission to full allocation.
    pub mean_allocation: Duration,
    /// Longest time from submission to full allocation.
    pub max_allocation: Duration,
    /// The median relative error of our overlay's network coordinates at
    /// the end (`None` for the paper's overlay).
    pub coordinate_error: Option<f64>,
}

impl RunReport {
    /// The aggregates of this run.
    pub fn summary(&self) -> Summary {
        let allocated: Vec<_> = self.jobs.iter().filter(|j| j.full_at.is_some()).collect();
        let workers: u64 = allocated.iter().map(|j| u64::from(j.workers)).sum();
        // Per worker judged: a replaced rank's new worker is judged too.
        let judged: u64 = allocated.iter().map(|j| u64::from(j.judged_workers)).sum();
        let extra: f64 = allocated.iter().map(|j| j.judged_extra_us).sum();
        let ooo: u64 = allocated.iter().map(|j| u64::from(j.out_of_order)).sum();
        let times: Vec<Duration> = allocated
            .iter()
            .filter_map(|j| j.full_at.map(|at| at - j.submitted))
            .collect();
        let messages: u64 = self.jobs.iter().map(|j| j.messages).sum();
        Summary {
            jobs: self.jobs.len(),
            allocated: allocated.len(),
            workers,
            extra_rtt_ms: if judged == 0 {
                0.0
            } else {
                extra / judged as f64 / 1000.0
            },
            out_of_order: if judged == 0 {
                0.0
            } else {
                ooo as f64 / judged as f64
            },
            messages_per_job: if self.jobs.is_empty() {
                0.0
            } else {
                messages as f64 / self.jobs.len() as f64
            },
            mean_allocation: if times.is_empty() {
                Duration::ZERO
            } else {
                times.iter().sum::<Duration>() / times.len() as u32
            },
            max_allocation: times.iter().max().copied().unwrap_or_default(),
            coordinate_error: self.coordinate_error,
        }
    }

    /// Workers per site of one job's placement, given each machine's site.
    pub fn per_site(
        &self,
        placement: &std::collections::BTreeMap<u32, u32>,
        site_of: &[usize],
    ) -> Vec<(u32, u32)> {
        let mut sites = vec![(0u32, 0u32); self.sites.len()];
        for (node, workers) in placement {
            let s = &mut sites[site_of[*node as usize]];
            s.0 += 1;
            s.1 += workers;
        }
        sites
    }

    /// The CSV of every job: a header, then one line per job with its id,
    /// home site, workers (max and min), when it was submitted, started and
    /// fully allocated (seconds), its locality, messages and how it ended,
    /// and then its workers on each site, one column per site.
    pub fn csv(&self, site_of: &[usize]) -> String {
        let mut out = String::from(
            "job,home_site,workers,min_workers,submitted_s,started_s,allocated_s,extra_rtt_ms,out_of_order,messages,ended",
        );
        for site in &self.sites {
            write!(out, ",{site}").ok();
        }
        out.push('\n');
        for job in &self.jobs {
            write!(
                out,
                "{},{},{},{},{:.6},{},{},{},{},{},{}",
                job.id,
                self.sites[site_of[job.home as usize]],
                job.workers,
                job.min_workers,
                job.submitted.as_secs_f64(),
                job.started_at
                    .map_or(String::new(), |t| format!("{:.6}", t.as_secs_f64())),
                job.full_at
                    .map_or(String::new(), |t| format!("{:.6}", t.as_secs_f64())),
                job.extra_rtt_us()
                    .map_or(String::new(), |x| format!("{:.4}", x / 1000.0)),
                job.out_of_order,
                job.messages,
                job.ended
                    .as_ref()
                    .map_or(String::new(), |(phase, _)| format!("{phase:?}")
                        .to_lowercase()),
            )
            .ok();
            for (_, workers) in self.per_site(&job.placement, site_of) {
                write!(out, ",{workers}").ok();
            }
            out.push('\n');
        }
        out
    }

    /// Workers running per site after each change, for the plot.
    pub fn site_series(&self) -> Vec<Vec<(f64, i64)>> {
        let mut series = vec![vec![(0.0, 0i64)]; self.sites.len()];
        let mut current = vec![0i64; self.sites.len()];
        for (at, site, delta) in &self.timeline {
            current[*site] += delta;
            series[*site].push((at.as_secs_f64(), current[*site]));
        }
        let end = self.end.as_secs_f64();
        for (site, s) in series.iter_mut().enumerate() {
            s.push((end, current[site]));
        }
        series
    }
}

/// One line of the human summary.
pub fn summary_line(report: &RunReport) -> String {
    let s = report.summary();
    format!(
        "{:<8} seed {:>3}: {}/{} jobs allocated, {} workers; extra RTT {:.4} ms/worker; out of order {:.2}%; {:.0} msgs/job; allocation mean {:.3} s, max {:.3} s{}; {} events in {:.2} s wall{}",
        report.mode.name(),
        report.seed,
        s.allocated,
        s.jobs,
        s.workers,
        s.extra_rtt_ms,
        s.out_of_order * 100.0,
        s.messages_per_job,
        s.mean_allocation.as_secs_f64(),
        s.max_allocation.as_secs_f64(),
        s.coordinate_error.map_or(String::new(), |e| format!(
            "; coordinates' median relative error {e:.3}"
        )),
        report.events,
        report.wall.as_secs_f64(),
        if report.violations.is_empty() {
            String::new()
        } else {
            format!("; {} INVARIANT VIOLATIONS", report.violations.len())
        }
    )
}

/// The points of a step line through `points`: each value held until the
/// next change.
pub fn step_line<Y: Copy>(points: &[(f64, Y)]) -> Vec<(f64, Y)> {
    let mut steps = Vec::with_capacity(points.len() * 2);
    for pair in points.windows(2) {
        steps.push(pair[0]);
        steps.push((pair[1].0, pair[0].1));
    }
    steps.extend(points.last());
    steps
}

/// Plots workers running per site over time, one panel per run (the shape
/// of Figure 5 of the Zorilla paper), into an SVG file.
pub fn plot_sites(path: &Path, title: &str, runs: &[&RunReport]) -> anyhow::Result<()> {
    let height = 360 * runs.len().max(1) as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let panels = root.split_evenly((runs.len().max(1), 1));
    for (panel, run) in panels.iter().zip(runs) {
        let series = run.site_series();
        let x_max = run.end.as_secs_f64().max(1e-3);
        let y_max = series
            .iter()
            .flat_map(|s| s.iter().map(|(_, y)| *y))
            .max()
            .unwrap_or(1)
            .max(1);
        let caption = format!("{title}: {} (seed {})", mode_label(run.mode), run.seed);
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..x_max, 0i64..(y_max + y_max / 10 + 1))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("simulated time (s)")
            .y_desc("workers running")
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let lines = series.iter().enumerate().map(|(site, points)| {
            let color = Palette99::pick(site).to_rgba();
            (run.sites[site].clone(), color, step_line(points))
        });
        draw_lines(&mut chart, lines, SeriesLabelPosition::UpperLeft)?;
    }
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Draws each of `lines` (a label, a colour, its points) on `chart`, and
/// their legend at `position` (the simulator's plots and bench-report's).
pub fn draw_lines<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    lines: impl IntoIterator<Item = (String, RGBAColor, Vec<(X::ValueType, Y::ValueType)>)>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    X: Ranged,
    Y: Ranged,
    X::ValueType: Clone + 'static,
    Y::ValueType: Clone + 'static,
{
    for (label, color, points) in lines {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(position)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

fn mode_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Ours => "latency-bounded floods, adaptive waits, nearest-k overlay",
        Mode::Paper => "paper baseline: hop floods, 1 s doubling, Bamboo-like overlay",
        Mode::OursHop => "ours with hop floods only (no latency budget)",
        Mode::OursNearest => "ours, nearest offers first only (no idle/fast preference)",
        Mode::OursFcfs => "ours, queues first come first served (no fair sharing)",
    }
}

/// The colour of a mode's series in the plots.
pub(crate) fn mode_color(mode: Mode) -> RGBAColor {
    match mode {
        Mode::Ours => BLUE.to_rgba(),
        Mode::Paper => RED.to_rgba(),
        Mode::OursHop => GREEN.to_rgba(),
        Mode::OursNearest => MAGENTA.to_rgba(),
        Mode::OursFcfs => CYAN.to_rgba(),
    }
}

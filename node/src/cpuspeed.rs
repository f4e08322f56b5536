//! The node's CPU speed figure (`cpu_speed`): how fast one of its cores
//! is against the reference machine
//! ([`REFERENCE_SPEED`](zorilla_core::resources::REFERENCE_SPEED)). Offers
//! carry it, and among equally near offers a home prefers idle, then
//! faster nodes.
//!
//! The owner may configure it (a benchmark score of their own); otherwise
//! the node measures it at its first start with a short calibrated run of
//! integer work on one core (about 25 ms) and keeps the figure in its state
//! directory (`cpu-speed`), so that later starts read it back. A figure
//! kept by another version or build of the node is measured again.
//!
//! The reference is the project's build machine (2 cores, release build):
//! it measures [`REFERENCE_ROUNDS_PER_SEC`] rounds a second, 1000. A debug
//! build of the node runs the same work several times slower and says so
//! in its figure; only ratios between nodes of one build mean anything.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use zorilla_core::limits::{self, MAX_SPEED};
use zorilla_core::resources::REFERENCE_SPEED;

/// The file in the state directory that keeps a measured figure.
pub(crate) const FILE: &str = "cpu-speed";

/// Rounds of [`work`] a second on one core of the reference machine, the
/// project's 2-core build machine (release build, the fastest window of a
/// measurement: 3.31e8 to 3.52e8 over five, 2026-11-29; a debug build
/// measured 0.78e8 to 0.82e8 there).
const REFERENCE_ROUNDS_PER_SEC: f64 = 3.4e8;

/// Rounds per timed call of [`work`].
const CHUNK: u32 = 16_384;
/// Windows of work; the fastest counts (the others may have shared the
/// core with other processes).
const WINDOWS: u32 = 8;
/// Length of one window.
const WINDOW: Duration = Duration::from_millis(3);

/// What identifies the code that measured: a figure kept by another
/// version or build is measured again.
fn build() -> String {
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    format!("{}-{profile}", env!("CARGO_PKG_VERSION"))
}

/// Where a node's figure came from, for its status page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `cpu_speed` in the configuration.
    Configured,
    /// Measured at this start (and kept).
    Measured,
    /// Measured at an earlier start and read back.
    Kept,
}

impl Source {
    /// A few words for the status page.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Source::Configured => "configured (cpu_speed)",
            Source::Measured => "measured at this start",
            Source::Kept => "measured at an earlier start",
        }
    }
}

/// The node's figure and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpuSpeed {
    /// Against [`REFERENCE_SPEED`], 1 to [`MAX_SPEED`].
    pub(crate) figure: u32,
    /// Where it came from.
    pub(crate) source: Source,
}

/// Integer work on one core: a xorshift generator feeding a multiply,
/// shift and rotate chain, each round depending on the last.
#[inline(never)]
fn work(rounds: u32, seed: u64) -> u64 {
    let (mut x, mut acc) = (seed | 1, 0u64);
    for _ in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        acc = acc.wrapping_add(x.wrapping_mul(0x9E37_79B9_7F4A_7C15)) ^ (acc >> 3);
        if x & 1 == 0 {
            acc = acc.rotate_left(5);
        }
    }
    acc
}

/// Rounds of [`work`] a second on this core: the fastest of [`WINDOWS`]
/// windows.
fn rounds_per_sec() -> f64 {
    let mut best = 0.0_f64;
    let mut seed = 0x2545_F491_4F6C_DD1D_u64;
    for _ in 0..WINDOWS {
        let start = Instant::now();
        let mut chunks = 0u64;
        // Bounded in time by the window and in count, whatever the clock.
        while start.elapsed() < WINDOW && chunks < 1_000_000 {
            seed = std::hint::black_box(work(std::hint::black_box(CHUNK), seed));
            chunks += 1;
        }
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        best = best.max(chunks as f64 * f64::from(CHUNK) / secs);
    }
    best
}

/// `rate` rounds a second as a speed figure: against the reference, to two
/// significant digits (the last ones are noise), within 1 to
/// [`MAX_SPEED`].
fn figure(rate: f64) -> u32 {
    let raw = f64::from(REFERENCE_SPEED) * rate / REFERENCE_ROUNDS_PER_SEC;
    if !raw.is_finite() || raw < 1.0 {
        return 1;
    }
    let magnitude = 10f64.powi(raw.log10().floor() as i32 - 1).max(1.0);
    let rounded = (raw / magnitude).round() * magnitude;
    (rounded as u64).clamp(1, u64::from(MAX_SPEED)) as u32
}

/// Measures this machine's figure (about 25 ms on one core).
pub(crate) fn measure() -> u32 {
    figure(rounds_per_sec())
}

/// The figure kept in `file` by this build, if any.
fn kept(file: &Path) -> Option<u32> {
    use std::io::Read;
    let mut text = String::new();
    // A few bytes are enough; a file made larger by someone else is not
    // read whole.
    std::fs::File::open(file)
        .ok()?
        .take(256)
        .read_to_string(&mut text)
        .ok()?;
    let (speed, by) = text.trim().split_once(' ')?;
    let speed: u32 = speed.parse().ok()?;
    (by == build() && (1..=MAX_SPEED).contains(&speed)).then_some(speed)
}

/// The node's figure: `configured` if given (checked), else the one kept in
/// `state_dir`, else measured now and kept there.
pub(crate) fn resolve(configured: Option<u32>, state_dir: &Path) -> anyhow::Result<CpuSpeed> {
    let speed = |figure, source| CpuSpeed { figure, source };
    if let Some(figure) = configured {
        limits::one_to("cpu_speed", figure, MAX_SPEED)?;
        return Ok(speed(figure, Source::Configured));
    }
    let file = state_dir.join(FILE);
    if let Some(figure) = kept(&file) {
        return Ok(speed(figure, Source::Kept));
    }
    let figure = measure();
    std::fs::write(&file, format!("{figure} {}\n", build()))
        .with_context(|| format!("cannot keep the measured CPU speed in {}", file.display()))?;
    tracing::info!(
        figure,
        "measured this machine's CPU speed (1000 is the reference)"
    );
    Ok(speed(figure, Source::Measured))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_relative_to_the_reference_rounded_and_bounded() {
        assert_eq!(figure(REFERENCE_ROUNDS_PER_SEC), REFERENCE_SPEED);
        assert_eq!(figure(REFERENCE_ROUNDS_PER_SEC * 1.234), 1200);
        assert_eq!(figure(REFERENCE_ROUNDS_PER_SEC * 0.0567), 57);
        assert_eq!(figure(REFERENCE_ROUNDS_PER_SEC / 1e6), 1);
        assert_eq!(figure(0.0), 1);
        assert_eq!(figure(f64::NAN), 1);
        assert_eq!(figure(f64::INFINITY), 1);
        assert_eq!(figure(REFERENCE_ROUNDS_PER_SEC * 1e9), MAX_SPEED);
    }

    #[test]
    fn a_measurement_is_within_bounds_and_near_a_second_one() {
        let (a, b) = (measure(), measure());
        assert!((1..=MAX_SPEED).contains(&a), "{a}");
        // The same core twice: within a factor of two even on a loaded
        // machine (the fastest of eight windows counts).
        assert!(a <= 2 * b && b <= 2 * a, "{a} then {b}");
    }

    #[test]
    fn a_measured_figure_is_kept_and_read_back_and_a_configured_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let measured = resolve(None, dir.path()).unwrap();
        assert_eq!(measured.source, Source::Measured);
        let first = measured.figure;
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert_eq!(text, format!("{first} {}\n", build()));
        let again = resolve(None, dir.path()).unwrap();
        assert_eq!((again.figure, again.source), (first, Source::Kept));
        let configured = resolve(Some(1500), dir.path()).unwrap();
        assert_eq!(
            (configured.figure, configured.source),
            (1500, Source::Configured)
        );
        assert!(resolve(Some(0), dir.path()).is_err());
        assert!(resolve(Some(MAX_SPEED + 1), dir.path()).is_err());
    }

    #[test]
    fn a_figure_of_another_build_or_out_of_range_is_measured_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(FILE);
        for text in [
            "777 0.0.0-other\n".to_string(),
            format!("0 {}\n", build()),
            format!("{} {}\n", u64::from(MAX_SPEED) + 1, build()),
            "not a figure".to_string(),
            "7".repeat(10_000),
        ] {
            std::fs::write(&file, &text).unwrap();
            let speed = resolve(None, dir.path()).unwrap();
            assert_eq!(speed.source, Source::Measured, "{text:?}");
            assert!((1..=MAX_SPEED).contains(&speed.figure));
        }
    }
}

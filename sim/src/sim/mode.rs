//! Which Zorilla a run simulates: ours, the paper's, or an ablation.

use zorilla_core::allocation::SameDistance;
use zorilla_core::schedule::{FloodMode, ScheduleConfig};

/// Which Zorilla runs: ours, the paper's as the baseline, or an ablation
/// of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// Latency-bounded floods, adaptive waits, nearest-k-plus-far overlay.
    Ours,
    /// The original: hop floods, doubling waits from 1 s, Bamboo-like
    /// overlay (random leaf set plus proximity-chosen routing entries).
    Paper,
    /// Ours with hop-limited floods only (no latency budget): the same
    /// overlay, adaptive waits and settling, so that a comparison with
    /// [`Mode::Ours`] isolates what the latency budget does.
    OursHop,
    /// Ours without the preference of idle and faster nodes among equally
    /// near offers (nearest first only, as the paper's home): a comparison
    /// with [`Mode::Ours`] isolates what the preference does.
    OursNearest,
    /// Ours with the members' queues served first come, first served
    /// instead of by the Network of Favors (`SchedulerConfig::fair_share`
    /// off): a comparison with [`Mode::Ours`] isolates what fair sharing
    /// does (`crate::fairshare`).
    OursFcfs,
}

impl Mode {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ours => "ours",
            Mode::Paper => "paper",
            Mode::OursHop => "ours-hop",
            Mode::OursNearest => "ours-nearest",
            Mode::OursFcfs => "ours-fcfs",
        }
    }

    /// The flooding schedule a home uses in this mode.
    pub fn schedule(self) -> ScheduleConfig {
        match self {
            Mode::Ours | Mode::OursNearest | Mode::OursFcfs => ScheduleConfig::default(),
            Mode::Paper => ScheduleConfig::paper(),
            Mode::OursHop => ScheduleConfig {
                flood_mode: FloodMode::Hops,
                ..ScheduleConfig::default()
            },
        }
    }

    /// Among offers at the same distance, whether (and with which
    /// tolerance) the home prefers idle and faster nodes: ours does, the
    /// paper's takes the nearest first only.
    pub fn prefer(self) -> Option<SameDistance> {
        match self {
            Mode::Ours | Mode::OursHop | Mode::OursFcfs => Some(SameDistance::DEFAULT),
            Mode::Paper | Mode::OursNearest => None,
        }
    }

    /// Whether members serve their queues by the favours the jobs' homes
    /// did them (every mode but [`Mode::OursFcfs`]; the paper's too, so
    /// that its figures stay those of our scheduler's core).
    pub fn fair_share(self) -> bool {
        self != Mode::OursFcfs
    }

    /// Whether the overlay is ours (nearest `k` plus far links) rather than
    /// the Bamboo-like baseline.
    pub fn our_overlay(self) -> bool {
        self != Mode::Paper
    }
}

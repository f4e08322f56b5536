//! Why a job still waits, in words, and the holds a node keeps for homes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::advert::{DeclineReason, JobId, RefuseReason};

/// Why a job is (or was) waiting: what the home knows of its floods.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingReport {
    /// Floods sent.
    pub floods: u32,
    /// Radius of the last flood.
    pub radius: u8,
    /// Latency budget of the last flood, if latency-bounded.
    pub budget: Option<Duration>,
    /// Nodes that answered (offers and declines).
    pub nodes_answered: u64,
    /// Offers received.
    pub offers: u64,
    /// Workers offered in all.
    pub workers_offered: u64,
    /// Declines received, by reason.
    pub declines: BTreeMap<DeclineReason, u64>,
    /// Offers the home refused, by reason.
    pub refusals: BTreeMap<RefuseReason, u64>,
    /// Workers granted so far.
    pub granted: u32,
    /// Workers the job needs to start (`min`).
    pub needed: u32,
    /// Of the workers offered, those of nodes the job's other ranks could
    /// not reach directly (a native job's: behind another NAT, or public
    /// when they are behind one; see
    /// [`reachable_together`](crate::allocation::reachable_together)).
    #[serde(default)]
    pub apart: u32,
}

impl PendingReport {
    /// One sentence on why the job waits.
    pub fn explain(&self) -> String {
        let reach = match self.budget {
            Some(budget) => format!(
                "{} floods so far, up to {:.1} ms from home",
                self.floods,
                budget.as_secs_f64() * 1e3
            ),
            None => format!("{} floods so far, radius {}", self.floods, self.radius),
        };
        let mut why = format!(
            "{} of {} workers granted; {reach}; {} nodes answered, {} offered {} workers",
            self.granted, self.needed, self.nodes_answered, self.offers, self.workers_offered,
        );
        let lists = [
            ("declined", list(&self.declines)),
            ("offers refused", list(&self.refusals)),
        ];
        for (what, list) in lists {
            if !list.is_empty() {
                write!(why, "; {what}: {list}").ok();
            }
        }
        if self.apart > 0 {
            write!(
                why,
                "; {} workers offered by nodes the other ranks cannot reach directly \
                 (behind another NAT: a native job's ranks connect to each other)",
                self.apart
            )
            .ok();
        }
        why
    }
}

/// "2 busy, 1 owner denies ...": counts by reason, in reason order.
fn list<R: std::fmt::Display>(counts: &BTreeMap<R, u64>) -> String {
    counts
        .iter()
        .map(|(reason, n)| format!("{n} {reason}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Workers a member holds for a job (see [`Scheduler::holds`](super::Scheduler::holds)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold<'a, P> {
    /// The job.
    pub job: JobId,
    /// Its home, which the offer went to.
    pub home: &'a P,
    /// Workers held.
    pub workers: u32,
    /// When the node offered them.
    pub since: Time,
    /// When the node gives the hold up by itself (and withdraws): at most
    /// `hold_timeout` after `since`, sooner if the advert expires sooner.
    pub until: Time,
}

//! What a simulated run's replication did and how it is set up (issue 16):
//! the public side of [`super::failover`], kept apart from the simulator
//! so that the simulator can name it without a cycle.

use std::time::Duration;

use zorilla_core::advert::JobId;
use zorilla_core::replica::Timing;

/// How long after its job ended a worker may still run: the stop on its
/// way, or a member that learns of a new home first.
pub const STOP_BOUND: Duration = Duration::from_secs(3);

/// How a run replicates its home jobs.
#[derive(Debug, Clone, Copy)]
pub struct FailoverConfig {
    /// The lease and the election.
    pub timing: Timing,
    /// The fewest copies a job has besides its home.
    pub degree: usize,
}

impl Default for FailoverConfig {
    fn default() -> Self {
        FailoverConfig {
            timing: Timing::default(),
            degree: zorilla_core::copies::DEFAULT_DEGREE,
        }
    }
}

/// A copy took a job over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Takeover {
    /// The job.
    pub job: JobId,
    /// The primary it took over from.
    pub from: u32,
    /// The new primary.
    pub to: u32,
    /// Its term.
    pub term: u64,
    /// From the old primary's failure (or isolation) to the new one
    /// acting; `None` when the simulator knows of no loss (an election
    /// with the old primary alive).
    pub after: Option<Duration>,
}

/// What the replication did in a run.
#[derive(Debug, Clone, Default)]
pub struct FailoverReport {
    /// Every takeover, in order.
    pub takeovers: Vec<Takeover>,
    /// Replica messages sent (appends, heartbeats, acks, standings).
    pub replica_messages: u64,
    /// Rank ends acknowledged by the primaries (committed first).
    pub acknowledged: usize,
    /// Old primaries that learnt of a newer epoch and dropped the job.
    pub stepped_down: u64,
    /// Jobs all of whose state holders failed (lost beyond the degree).
    pub orphaned: Vec<JobId>,
    /// Job events of old primaries not counted (a primary cut off that did
    /// not know yet it had been succeeded).
    pub stale_events: u64,
    /// Jobs whose old home ended them but whose end no copy held: the new
    /// home ends them again.
    pub ends_redone: u64,
    /// Workers a member stopped because the new home's placement did not
    /// place them there (the grant was lost with the old home).
    pub orphan_workers: u64,
}

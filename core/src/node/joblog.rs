//! A job's replicated log (issue 16): what a home logs of its job for the
//! job's copies ([`JobEntry`]: the spec, then the home's own
//! [`JobEvent`]s), and the home's state rebuilt from it ([`JobState`]).
//! The events are the decisions the rank table is made of (a grant, a
//! loss, an end), so replaying them rebuilds the table exactly; see
//! [`Scheduler::adopt`](super::Scheduler::adopt) for a successor taking
//! the job over from there.

use serde::{Deserialize, Serialize};

use super::events::JobEvent;
use super::outcome::LostReason;
use super::ranks::RankTable;
use super::spec::JobSpec;
use crate::advert::{JobId, Phase};
use crate::checkpoint::CheckpointIndex;

/// One entry of a job's replicated log: the spec first, then the home's
/// events for the job, in the order the home made them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobEntry<P> {
    /// The job as it was submitted (the log's first entry).
    Submitted {
        /// What the job needs.
        spec: JobSpec,
        /// The user who owns it (see [`super::Input::Submit`]).
        #[serde(default = "crate::advert::no_owner")]
        owner: Option<P>,
    },
    /// Something the home decided.
    Event(JobEvent<P>),
}

impl<P: Clone> JobEntry<P> {
    /// The entry for a home's event, if it belongs in the log (a refused
    /// job never had one).
    pub fn of(event: &JobEvent<P>) -> Option<Self> {
        match event {
            JobEvent::Rejected { .. } => None,
            event => Some(JobEntry::Event(event.clone())),
        }
    }
}

/// A home's state of one job, rebuilt from its log.
#[derive(Debug, Clone)]
pub struct JobState<P> {
    /// What the job needs.
    pub spec: JobSpec,
    /// The user who owns it.
    pub owner: Option<P>,
    /// How far it got.
    pub phase: Phase,
    /// Its ranks.
    pub ranks: RankTable<P>,
    /// Grants made so far (the next grant's incarnation).
    pub grants: u32,
    /// Whether the home stopped flooding because the job had all its
    /// workers.
    pub full: bool,
    /// Where the checkpoints of its ranks are, as far as the log says
    /// (those of a job whose ranks roll back together: see
    /// [`JobEvent::Checkpointed`]).
    pub checkpoints: CheckpointIndex<P>,
    /// How many [`JobEvent::Checkpointed`] entries the log holds.
    pub logged_checkpoints: u32,
}

impl<P: Clone + Ord> JobState<P> {
    /// The state a log describes: `None` if it does not begin with the
    /// job's spec. Entries that do not fit the state so far (a loss of a
    /// rank that is not placed, say) change nothing, as at the home.
    pub fn replay<'a>(entries: impl IntoIterator<Item = &'a JobEntry<P>>) -> Option<Self>
    where
        P: 'a,
    {
        let mut entries = entries.into_iter();
        let Some(JobEntry::Submitted { spec, owner }) = entries.next() else {
            return None;
        };
        let mut state = JobState {
            spec: spec.clone(),
            owner: owner.clone(),
            phase: Phase::Scheduling,
            ranks: RankTable::for_spec(spec),
            grants: 0,
            full: false,
            checkpoints: CheckpointIndex::new(),
            logged_checkpoints: 0,
        };
        for entry in entries {
            if let JobEntry::Event(event) = entry {
                state.apply(event);
            }
        }
        Some(state)
    }

    fn apply(&mut self, event: &JobEvent<P>) {
        match event {
            JobEvent::Rejected { .. } => {}
            JobEvent::Granted {
                node,
                ranks,
                incarnation,
                ..
            } => {
                self.ranks.restore(node, *incarnation, ranks);
                self.grants = self.grants.max(incarnation.saturating_add(1));
                // A home runs from its first grant (`Started` follows in
                // the same step), and grants go out once a copy holds
                // them: a log cut between the two is of a running job.
                self.phase.advance(Phase::Running);
            }
            JobEvent::Started { .. } => {
                self.phase.advance(Phase::Running);
            }
            JobEvent::Full { .. } => self.full = true,
            JobEvent::WorkersLost {
                node,
                ranks,
                reason,
                ..
            } => {
                self.ranks.lose(node, Some(ranks), *reason);
                // A job that lost workers floods afresh for them.
                self.full = false;
            }
            JobEvent::RankEnded {
                node,
                rank,
                outcome,
                digest,
                check,
                ..
            } => {
                if let Some(incarnation) = self.ranks.get(*rank).map(|r| r.incarnation) {
                    self.ranks
                        .end(node, *rank, incarnation, outcome.clone(), *digest, *check);
                }
            }
            JobEvent::Checkpointed {
                job: JobId(job),
                rank,
                checkpoint,
            } => {
                self.logged_checkpoints = self.logged_checkpoints.saturating_add(1);
                // One out of range changes nothing, as at the home.
                let _ = self.checkpoints.record(*job, *rank, checkpoint.clone());
            }
            JobEvent::RolledBack {
                job: JobId(job),
                generation,
                ..
            } => {
                self.ranks.lose_all(LostReason::RolledBack);
                self.checkpoints.roll_back(*job, *generation);
                self.full = false;
            }
            JobEvent::Ended { phase, .. } => {
                self.phase.advance(*phase);
            }
        }
    }
}

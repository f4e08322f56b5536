//! Whether a job's ranks all wait on one another with nothing in flight: a
//! job that can never go on, which its home ends with a sentence rather
//! than let it hang for ever (issue 31).
//!
//! The classic case: a rank of a message-passing job is lost and replaced
//! (`on_worker_lost = "replace"`) by a fresh worker that starts its program
//! over, while the others had sent its predecessor what it now waits for;
//! or a program that deadlocks on its own. Nothing the grid does wakes
//! such ranks: a worker blocked in a receive wakes only for a message (or
//! a change of the job's members, which the home rules out before it
//! believes a stall; see [`crate::node::Input::Stalled`]).
//!
//! # What the nodes say
//!
//! With every answer to the home's liveness question (see
//! [`crate::liveness`]) a node says, for each asked job, which of its ranks
//! wait in a receive *without a deadline* and for how long, and for how
//! long no message of the job's workers there has been in flight (sent and
//! not yet acknowledged by the receiving node, or asking for credit):
//! [`Waits`]. The home's own ranks are asked of its own node the same way.
//! A receive with a deadline does not count (the worker wakes by itself),
//! nor does a worker that computes, sends, or waits in a barrier.
//!
//! # When the home believes it
//!
//! A node's answer was made at some instant between the question and the
//! answer's arrival. So a rank that the answer says waited for `d` waited
//! at least over `[heard - d, asked]`, and the node had nothing in flight
//! over `[heard - quiet, asked]`. If these intervals of every rank of the
//! job and of every node holding them share an instant (by at least
//! [`OVERLAP`]), then at that instant every rank waited and nothing was in
//! flight: no rank could ever send again, so none will ever be woken. A
//! rank that woke in between (a message reached it) would have said so
//! with a shorter wait, and a message in flight to it would keep its
//! sender's node from being quiet.
//!
//! Messages of ranks that *ended* are settled by their node before it
//! reports the end (the driver's rule), and only answers asked after the
//! job's ranks last changed ([`StallWatch::changed`]: a rank ended, was
//! placed or lost) count, and only for an instant after that change: so
//! nothing an ended rank sent can be in flight at the instant found.
//!
//! Sans-IO: the driver reports what it heard ([`StallWatch::heard`]) and
//! asks ([`StallWatch::stalled`]) with the ranks the home places.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::advert::JobId;
use crate::{PeerKey, Time};

/// How long the instant at which every rank waited must at least last: a
/// message acknowledged is handed to its rank's inbox a moment later.
pub const OVERLAP: Duration = Duration::from_secs(1);

/// The longest wait a node's answer can say (a longer one counts as this):
/// far longer than any question's round trip, so nothing is lost by it.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// What a node says of one job's workers it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waits {
    /// The ranks whose worker waits in a receive without a deadline, each
    /// with how long it has waited.
    pub ranks: BTreeMap<u32, Duration>,
    /// How long no message of the job's workers here has been in flight
    /// (sent and not acknowledged by the receiving node, or asking for
    /// credit); `None` if one is now.
    pub quiet: Option<Duration>,
}

#[derive(Debug, Clone)]
struct Heard {
    asked: Time,
    heard: Time,
    waits: Waits,
}

/// The home's record of what the nodes of its jobs said of their waits.
/// See the [module documentation](self).
#[derive(Debug, Clone)]
pub struct StallWatch<P> {
    jobs: BTreeMap<JobId, Job<P>>,
}

#[derive(Debug, Clone)]
struct Job<P> {
    /// When the job's ranks last changed.
    changed: Time,
    nodes: BTreeMap<P, Heard>,
}

impl<P> Default for StallWatch<P> {
    fn default() -> Self {
        StallWatch {
            jobs: BTreeMap::new(),
        }
    }
}

impl<P: PeerKey> StallWatch<P> {
    /// Nothing heard yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The ranks of `job` changed at `now` (one ended, was placed, or was
    /// lost): what was heard before says nothing of the ranks now.
    pub fn changed(&mut self, now: Time, job: JobId) {
        let entry = self.jobs.entry(job).or_insert_with(|| Job {
            changed: now,
            nodes: BTreeMap::new(),
        });
        entry.changed = entry.changed.max(now);
        entry.nodes.clear();
    }

    /// `node` answered a question about `job` asked at `asked` with
    /// `waits`, heard at `now`. An answer to a question older than the
    /// one heard before is ignored (answers can overtake each other).
    pub fn heard(&mut self, now: Time, asked: Time, job: JobId, node: P, waits: Waits) {
        let entry = self.jobs.entry(job).or_insert_with(|| Job {
            changed: Time::ZERO,
            nodes: BTreeMap::new(),
        });
        if asked < entry.changed {
            return;
        }
        if entry.nodes.get(&node).is_some_and(|h| h.asked > asked) {
            return;
        }
        let heard = Heard {
            asked,
            heard: now.max(asked),
            waits,
        };
        entry.nodes.insert(node, heard);
    }

    /// Forgets a job (it ended).
    pub fn forget_job(&mut self, job: JobId) {
        self.jobs.remove(&job);
    }

    /// Whether, by what the nodes said since the job's ranks last changed,
    /// every rank of `ranks` (each with the node it runs on) waited, and
    /// none of those nodes had a message of the job in flight, at one
    /// instant (for at least [`OVERLAP`]). An empty `ranks` never stalls.
    pub fn stalled(&self, job: JobId, ranks: &BTreeMap<u32, P>) -> bool {
        let Some(entry) = self.jobs.get(&job) else {
            return false;
        };
        if ranks.is_empty() {
            return false;
        }
        // The latest start and the earliest end of every interval.
        let mut start = entry.changed;
        let mut end = Time::MAX;
        let mut widen = |from: Time, waited: Duration, asked: Time| {
            start = start.max(from.saturating_sub(waited.min(MAX_WAIT)));
            end = end.min(asked);
        };
        for (rank, node) in ranks {
            let Some(heard) = entry.nodes.get(node) else {
                return false;
            };
            let Some(waited) = heard.waits.ranks.get(rank) else {
                return false;
            };
            let Some(quiet) = heard.waits.quiet else {
                return false;
            };
            widen(heard.heard, *waited, heard.asked);
            widen(heard.heard, quiet, heard.asked);
        }
        start.saturating_add(OVERLAP) <= end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: JobId = JobId(7);

    fn s(secs: u64) -> Time {
        Duration::from_secs(secs)
    }

    fn waits(ranks: &[(u32, u64)], quiet: Option<u64>) -> Waits {
        Waits {
            ranks: ranks.iter().map(|&(r, d)| (r, s(d))).collect(),
            quiet: quiet.map(s),
        }
    }

    fn placed(ranks: &[(u32, u8)]) -> BTreeMap<u32, u8> {
        ranks.iter().copied().collect()
    }

    #[test]
    fn ranks_that_all_waited_at_one_instant_with_nothing_in_flight_are_stalled() {
        let mut watch = StallWatch::new();
        watch.changed(s(0), JOB);
        // Node 1 asked at 10 s, heard at 11 s: rank 0 waited 5 s, quiet 6 s.
        watch.heard(s(11), s(10), JOB, 1u8, waits(&[(0, 5)], Some(6)));
        // Node 2 asked at 12 s, heard at 12 s: rank 1 waited 4 s.
        watch.heard(s(12), s(12), JOB, 2u8, waits(&[(1, 4)], Some(4)));
        // Rank 0 waited over [6, 10], rank 1 over [8, 12]: [8, 10].
        assert!(watch.stalled(JOB, &placed(&[(0, 1), (1, 2)])));
    }

    #[test]
    fn waits_that_do_not_overlap_by_a_second_are_not_a_stall() {
        let mut watch = StallWatch::new();
        watch.changed(s(0), JOB);
        watch.heard(s(11), s(10), JOB, 1u8, waits(&[(0, 5)], Some(60)));
        // Rank 1 began to wait at 9.5 s: the shared wait is [9.5, 10].
        watch.heard(
            s(12),
            s(12),
            JOB,
            2u8,
            Waits {
                ranks: [(1, Duration::from_millis(2500))].into(),
                quiet: Some(s(60)),
            },
        );
        assert!(!watch.stalled(JOB, &placed(&[(0, 1), (1, 2)])));
    }

    #[test]
    fn a_message_in_flight_or_a_rank_not_waiting_is_no_stall() {
        let mut watch = StallWatch::new();
        watch.changed(s(0), JOB);
        watch.heard(s(20), s(20), JOB, 1u8, waits(&[(0, 15)], None));
        watch.heard(s(20), s(20), JOB, 2u8, waits(&[(1, 15)], Some(15)));
        assert!(!watch.stalled(JOB, &placed(&[(0, 1), (1, 2)])));
        // Quiet now, but rank 1's node has not said anything of rank 2.
        watch.heard(s(21), s(21), JOB, 1u8, waits(&[(0, 16)], Some(1)));
        assert!(!watch.stalled(JOB, &placed(&[(0, 1), (1, 2), (2, 2)])));
        // Quiet since 20 s, but node 2 was last heard at 20 s: no instant
        // a second long after 20 s is known for it yet.
        watch.heard(s(25), s(25), JOB, 1u8, waits(&[(0, 20)], Some(5)));
        assert!(!watch.stalled(JOB, &placed(&[(0, 1), (1, 2)])));
        watch.heard(s(30), s(30), JOB, 2u8, waits(&[(1, 25)], Some(25)));
        assert!(watch.stalled(JOB, &placed(&[(0, 1), (1, 2)])));
    }

    /// A message that an ended rank sent may be in flight before the end
    /// was reported: nothing heard before the change counts, and the
    /// instant must come after it.
    #[test]
    fn what_was_heard_before_the_ranks_changed_counts_for_nothing() {
        let mut watch = StallWatch::new();
        watch.heard(s(10), s(10), JOB, 1u8, waits(&[(0, 10)], Some(10)));
        watch.changed(s(11), JOB);
        assert!(!watch.stalled(JOB, &placed(&[(0, 1)])));
        // An answer to a question asked before the change is ignored.
        watch.heard(s(12), s(10), JOB, 1u8, waits(&[(0, 12)], Some(12)));
        assert!(!watch.stalled(JOB, &placed(&[(0, 1)])));
        // Asked after, but the waits shared only [11, 11.5] after it.
        watch.heard(
            s(12),
            Duration::from_millis(11_500),
            JOB,
            1u8,
            waits(&[(0, 12)], Some(12)),
        );
        assert!(!watch.stalled(JOB, &placed(&[(0, 1)])));
        watch.heard(s(13), s(13), JOB, 1u8, waits(&[(0, 13)], Some(13)));
        assert!(watch.stalled(JOB, &placed(&[(0, 1)])));
    }

    #[test]
    fn an_older_answer_does_not_replace_a_newer_one() {
        let mut watch = StallWatch::new();
        watch.changed(s(0), JOB);
        watch.heard(s(20), s(20), JOB, 1u8, waits(&[(0, 15)], Some(15)));
        watch.heard(s(21), s(5), JOB, 1u8, waits(&[], None));
        assert!(watch.stalled(JOB, &placed(&[(0, 1)])));
        watch.forget_job(JOB);
        assert!(!watch.stalled(JOB, &placed(&[(0, 1)])));
        assert!(!watch.stalled(JOB, &BTreeMap::new()));
    }
}

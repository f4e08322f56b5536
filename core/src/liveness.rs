//! Whether the ranks a home placed still run: the home's view of each node
//! that holds ranks of its jobs, and when a rank counts as lost.
//!
//! A lost connection is not a lost node (the overlay closes connections it
//! does not need), and a node killed and restarted within seconds under the
//! same identity (what a service manager does) answers every liveness probe
//! while it has forgotten every worker it ran. So the home does not judge a
//! node by its connection: it asks every node holding placed ranks, every
//! [`LivenessConfig::ask_every`], which of them it runs, and judges by the
//! answer:
//!
//! - The answer carries the node's **boot id** (a random number the node
//!   picks at every start and never stores) and its **uptime**. A boot id
//!   other than the one the node answered with before (or took the grant
//!   with: [`RankLiveness::booted`]), or an uptime shorter
//!   than the time since a rank was placed (by more than
//!   [`LivenessConfig::slack`]), means the node restarted since: every rank
//!   placed before that it does not list is lost at once
//!   ([`LostCause::Restarted`]).
//! - A rank the answer does not list is lost once it was placed more than
//!   [`LivenessConfig::grace`] ago ([`LostCause::NotRunning`]): a rank
//!   granted a moment ago may not have reached the node when it answered.
//! - A node that has not answered for [`LivenessConfig::silence`] (since the
//!   first rank was placed there, or since its last answer) loses every rank
//!   ([`LostCause::Silent`]).
//!
//! Each rank is reported lost at most once: it is forgotten as it is
//! reported, as it is when the driver says it ended ([`RankLiveness::ended`])
//! or was lost by other means ([`RankLiveness::forget`]).
//!
//! # Driving contract
//!
//! Sans-IO, like the [scheduler](crate::node): the driver calls
//! [`placed`](RankLiveness::placed) when ranks are granted to a node;
//! [`due`](RankLiveness::due) and [`check`](RankLiveness::check) at
//! [`next_timeout`](RankLiveness::next_timeout) (or more often: harmless);
//! sends each question `due` returns and feeds the answers to
//! [`answer`](RankLiveness::answer). Time only comes in through these calls.
//! Uptimes are durations, so no two clocks need to agree; the answer's
//! transit time only makes a restart look earlier than it was, which
//! [`LivenessConfig::slack`] covers.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::advert::JobId;
use crate::{PeerKey, Time};

/// How often the home asks and how long it waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivenessConfig {
    /// How often each node holding ranks is asked which it runs.
    pub ask_every: Duration,
    /// How long after its placement a rank missing from an answer is still
    /// taken to be on its way.
    pub grace: Duration,
    /// How long a node holding ranks may stay without answering before
    /// they all count as lost.
    pub silence: Duration,
    /// How much earlier than it did a node may seem to have started: the
    /// answer's transit time, by which `now - uptime` overestimates the
    /// start.
    pub slack: Duration,
}

impl Default for LivenessConfig {
    fn default() -> Self {
        LivenessConfig {
            ask_every: Duration::from_secs(2),
            grace: Duration::from_secs(5),
            silence: Duration::from_secs(10),
            slack: Duration::from_secs(1),
        }
    }
}

/// Why ranks count as lost. Shown as what the node did ("restarted and
/// forgot it"), to follow the node's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LostCause {
    /// The node restarted after the ranks were placed: it forgot them.
    Restarted,
    /// The node answered without them, well after they were placed.
    NotRunning,
    /// The node did not answer for [`LivenessConfig::silence`].
    Silent,
}

impl std::fmt::Display for LostCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostCause::Restarted => "restarted and forgot it",
            LostCause::NotRunning => "does not run it",
            LostCause::Silent => "stopped answering",
        })
    }
}

/// Ranks of one job on one node that count as lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost<P> {
    /// The job.
    pub job: JobId,
    /// The node they were placed on.
    pub node: P,
    /// The ranks, in order.
    pub ranks: Vec<u32>,
    /// Why.
    pub cause: LostCause,
}

/// A node's answer: who it is this time and which ranks it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// The node's boot id.
    pub boot: u64,
    /// How long the node has been up.
    pub uptime: Duration,
    /// The ranks it runs (or is starting) of the jobs it was asked about.
    pub running: BTreeMap<JobId, BTreeSet<u32>>,
}

/// A question for a node: the ranks of each job placed on it.
pub type Question = BTreeMap<JobId, Vec<u32>>;

#[derive(Debug, Clone)]
struct Watched {
    /// The boot id of the last answer.
    boot: Option<u64>,
    /// When the node last answered (or, before that, when it was first
    /// given ranks).
    heard: Time,
    /// When it was last asked.
    asked: Option<Time>,
    /// Ranks placed there, with when.
    ranks: BTreeMap<JobId, BTreeMap<u32, Time>>,
}

/// The home's view of the nodes holding its ranks. See the [module
/// documentation](self).
#[derive(Debug, Clone)]
pub struct RankLiveness<P> {
    config: LivenessConfig,
    nodes: BTreeMap<P, Watched>,
}

impl<P: PeerKey> RankLiveness<P> {
    /// Nothing watched yet.
    pub fn new(config: LivenessConfig) -> Self {
        RankLiveness {
            config,
            nodes: BTreeMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LivenessConfig {
        &self.config
    }

    /// Ranks of `job` were granted to `node` at `now`.
    pub fn placed(&mut self, now: Time, job: JobId, node: P, ranks: &[u32]) {
        let watched = self.nodes.entry(node).or_insert(Watched {
            boot: None,
            heard: now,
            asked: None,
            ranks: BTreeMap::new(),
        });
        if watched.ranks.is_empty() {
            // Silence counts from the first rank it holds.
            watched.heard = watched.heard.max(now);
        }
        let placed = watched.ranks.entry(job).or_default();
        for rank in ranks {
            placed.insert(*rank, now);
        }
    }

    /// Forgets ranks of `job` on `node`: they ended (and said so), or were
    /// lost by other means.
    pub fn forget(&mut self, job: JobId, node: &P, ranks: &[u32]) {
        let Some(watched) = self.nodes.get_mut(node) else {
            return;
        };
        if let Some(placed) = watched.ranks.get_mut(&job) {
            for rank in ranks {
                placed.remove(rank);
            }
            if placed.is_empty() {
                watched.ranks.remove(&job);
            }
        }
        if watched.ranks.is_empty() {
            self.nodes.remove(node);
        }
    }

    /// Forgets ranks of `job` wherever they were placed (the job rolled
    /// back and stopped them).
    pub fn forget_ranks(&mut self, job: JobId, ranks: &[u32]) {
        self.nodes.retain(|_, watched| {
            if let Some(placed) = watched.ranks.get_mut(&job) {
                for rank in ranks {
                    placed.remove(rank);
                }
                if placed.is_empty() {
                    watched.ranks.remove(&job);
                }
            }
            !watched.ranks.is_empty()
        });
    }

    /// Rank `rank` of `job` on `node` ended and said so.
    pub fn ended(&mut self, job: JobId, node: &P, rank: u32) {
        self.forget(job, node, &[rank]);
    }

    /// Forgets a job (it is over).
    pub fn forget_job(&mut self, job: JobId) {
        self.nodes.retain(|_, watched| {
            watched.ranks.remove(&job);
            !watched.ranks.is_empty()
        });
    }

    /// Nodes holding ranks, and how many ranks each.
    pub fn watched(&self) -> impl Iterator<Item = (&P, usize)> {
        self.nodes
            .iter()
            .map(|(node, w)| (node, w.ranks.values().map(BTreeMap::len).sum()))
    }

    /// The questions to send now (node, and the ranks placed there per
    /// job); each node is asked at most once per `ask_every`.
    pub fn due(&mut self, now: Time) -> Vec<(P, Question)> {
        let every = self.config.ask_every;
        self.nodes
            .iter_mut()
            .filter(|(_, w)| w.asked.is_none_or(|at| at.saturating_add(every) <= now))
            .map(|(node, w)| {
                w.asked = Some(now);
                let question = w
                    .ranks
                    .iter()
                    .map(|(job, ranks)| (*job, ranks.keys().copied().collect()))
                    .collect();
                (node.clone(), question)
            })
            .collect()
    }

    /// `node` took a grant at `now` and said which run of it took it
    /// (`boot`). Ranks placed up to now went to that run, so an answer
    /// with another boot id loses them at once, however soon after their
    /// placement the node restarted: without this, a node restarted
    /// before the home's first question (and within
    /// [`LivenessConfig::slack`] of the placement, so that its uptime does
    /// not tell either) only lost them [`LivenessConfig::grace`] later.
    ///
    /// A boot id other than the one already known is no news here: that
    /// run got the grant after restarting, and the next answer judges the
    /// ranks placed on the earlier run by the boot id it brings.
    pub fn booted(&mut self, now: Time, node: &P, boot: u64) {
        let Some(watched) = self.nodes.get_mut(node) else {
            return;
        };
        if watched.boot.is_none_or(|b| b == boot) {
            watched.boot = Some(boot);
            watched.heard = watched.heard.max(now);
        }
    }

    /// `node` answered at `now`: the ranks placed there that it does not
    /// run and that count as lost.
    pub fn answer(&mut self, now: Time, node: &P, answer: &Answer) -> Vec<Lost<P>> {
        let Some(watched) = self.nodes.get_mut(node) else {
            return Vec::new();
        };
        let new_boot = watched.boot.is_some_and(|b| b != answer.boot);
        // Ranks placed before this were placed on an earlier run of the
        // node: before its last answer with another boot id, or before it
        // started (as far as the home can tell).
        let started = now.saturating_sub(answer.uptime);
        let (grace, slack) = (self.config.grace, self.config.slack);
        let earlier_run = |placed: Time| {
            (new_boot && placed <= watched.heard) || placed.saturating_add(slack) < started
        };
        let mut lost = Vec::new();
        for (job, placed) in &mut watched.ranks {
            let running = answer.running.get(job);
            let mut restarted = Vec::new();
            let mut missing = Vec::new();
            for (rank, at) in placed.iter() {
                if running.is_some_and(|r| r.contains(rank)) {
                    continue;
                }
                if earlier_run(*at) {
                    restarted.push(*rank);
                } else if at.saturating_add(grace) <= now {
                    missing.push(*rank);
                }
            }
            for (ranks, cause) in [
                (restarted, LostCause::Restarted),
                (missing, LostCause::NotRunning),
            ] {
                if ranks.is_empty() {
                    continue;
                }
                for rank in &ranks {
                    placed.remove(rank);
                }
                lost.push(Lost {
                    job: *job,
                    node: node.clone(),
                    ranks,
                    cause,
                });
            }
        }
        watched.ranks.retain(|_, placed| !placed.is_empty());
        watched.boot = Some(answer.boot);
        watched.heard = watched.heard.max(now);
        if watched.ranks.is_empty() {
            self.nodes.remove(node);
        }
        lost
    }

    /// Nodes silent for too long at `now`: every rank they hold is lost.
    pub fn check(&mut self, now: Time) -> Vec<Lost<P>> {
        let silence = self.config.silence;
        let silent: Vec<P> = self
            .nodes
            .iter()
            .filter(|(_, w)| w.heard.saturating_add(silence) <= now)
            .map(|(node, _)| node.clone())
            .collect();
        let mut lost = Vec::new();
        for node in silent {
            let Some(watched) = self.nodes.remove(&node) else {
                continue;
            };
            for (job, placed) in watched.ranks {
                lost.push(Lost {
                    job,
                    node: node.clone(),
                    ranks: placed.into_keys().collect(),
                    cause: LostCause::Silent,
                });
            }
        }
        lost
    }

    /// When [`due`](Self::due) or [`check`](Self::check) next has work.
    pub fn next_timeout(&self) -> Option<Time> {
        self.nodes
            .values()
            .flat_map(|w| {
                let ask = w
                    .asked
                    .map_or(Time::ZERO, |at| at.saturating_add(self.config.ask_every));
                [ask, w.heard.saturating_add(self.config.silence)]
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const J: JobId = JobId(7);
    const K: JobId = JobId(8);

    fn s(x: u64) -> Duration {
        Duration::from_secs(x)
    }

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    fn answer(boot: u64, uptime: Duration, running: &[(JobId, &[u32])]) -> Answer {
        Answer {
            boot,
            uptime,
            running: running
                .iter()
                .map(|(job, ranks)| (*job, ranks.iter().copied().collect()))
                .collect(),
        }
    }

    fn liveness() -> RankLiveness<u32> {
        RankLiveness::new(LivenessConfig::default())
    }

    #[test]
    fn a_node_running_its_ranks_keeps_them_and_is_asked_every_two_seconds() {
        let mut l = liveness();
        l.placed(s(0), J, 1, &[0, 1]);
        l.placed(s(0), K, 1, &[3]);
        assert_eq!(l.next_timeout(), Some(s(0)));
        let asked = l.due(s(0));
        assert_eq!(
            asked,
            vec![(1, [(J, vec![0, 1]), (K, vec![3])].into_iter().collect())]
        );
        assert!(l.due(ms(1999)).is_empty());
        assert_eq!(l.next_timeout(), Some(s(2)));
        let a = answer(5, s(100), &[(J, &[0, 1]), (K, &[3])]);
        assert!(l.answer(ms(100), &1, &a).is_empty());
        assert_eq!(l.due(s(2)).len(), 1);
        // Answers every time: never silent.
        for t in 1..20 {
            assert!(l.answer(s(2 * t), &1, &a).is_empty());
            assert!(l.check(s(2 * t) + ms(1)).is_empty());
        }
        assert_eq!(l.watched().collect::<Vec<_>>(), vec![(&1, 3)]);
    }

    #[test]
    fn a_new_boot_id_loses_the_ranks_it_does_not_list_at_once_and_only_once() {
        let mut l = liveness();
        l.placed(s(0), J, 1, &[0, 1]);
        let first = answer(5, s(100), &[(J, &[0, 1])]);
        assert!(l.answer(s(1), &1, &first).is_empty());
        // Killed and restarted within a second; its uptime (3 s) is longer
        // than the time since the placement, so only the boot id tells.
        let again = answer(6, s(3), &[]);
        assert_eq!(
            l.answer(ms(1500), &1, &again),
            vec![Lost {
                job: J,
                node: 1,
                ranks: vec![0, 1],
                cause: LostCause::Restarted
            }]
        );
        assert!(l.answer(s(2), &1, &again).is_empty());
        assert!(l.check(s(60)).is_empty(), "forgotten once lost");
        assert_eq!(l.watched().count(), 0);
    }

    #[test]
    fn a_restart_right_after_the_grant_is_told_by_the_boot_id_that_took_it() {
        let mut l = liveness();
        l.placed(s(10), J, 1, &[0]);
        // The run that took the grant said who it is; it was killed and
        // restarted 100 ms later, before the home's first question, so
        // neither an earlier answer nor the uptime (within the slack)
        // tells. The grant's boot id does, at the first answer.
        l.booted(ms(10_050), &1, 5);
        let a = answer(6, ms(300), &[]);
        assert_eq!(
            l.answer(ms(10_400), &1, &a),
            vec![Lost {
                job: J,
                node: 1,
                ranks: vec![0],
                cause: LostCause::Restarted
            }]
        );
        // A grant taken by a run other than the one known says nothing:
        // the next answer judges by its boot id, and ranks placed on the
        // new run after the old run was last heard are kept.
        let mut l = liveness();
        l.placed(s(0), J, 1, &[0]);
        l.booted(ms(50), &1, 5);
        l.placed(s(4), J, 1, &[2]);
        l.booted(ms(4050), &1, 6);
        assert_eq!(
            l.answer(s(5), &1, &answer(6, s(3), &[(J, &[2])])),
            vec![Lost {
                job: J,
                node: 1,
                ranks: vec![0],
                cause: LostCause::Restarted
            }]
        );
        assert_eq!(l.watched().collect::<Vec<_>>(), vec![(&1, 1)]);
        // Nothing is watched for a node that holds no ranks.
        l.booted(s(6), &2, 1);
        assert_eq!(l.watched().count(), 1);
    }

    #[test]
    fn an_uptime_shorter_than_the_placement_means_a_restart_even_on_the_first_answer() {
        let mut l = liveness();
        l.placed(s(10), J, 1, &[0]);
        // Up for 1 s at 20 s: started at 19 s, after the placement.
        let a = answer(9, s(1), &[]);
        assert_eq!(
            l.answer(s(20), &1, &a),
            vec![Lost {
                job: J,
                node: 1,
                ranks: vec![0],
                cause: LostCause::Restarted
            }]
        );
    }

    #[test]
    fn a_missing_rank_is_lost_only_after_the_grace() {
        let mut l = liveness();
        l.placed(s(0), J, 1, &[0]);
        l.placed(s(3), J, 1, &[1]);
        let a = answer(5, s(100), &[(J, &[0])]);
        // Rank 1 may still be on its way.
        assert!(l.answer(s(4), &1, &a).is_empty());
        assert!(l.answer(ms(7999), &1, &a).is_empty());
        assert_eq!(
            l.answer(s(8), &1, &a),
            vec![Lost {
                job: J,
                node: 1,
                ranks: vec![1],
                cause: LostCause::NotRunning
            }]
        );
        // The same boot id with a restart-free uptime keeps rank 0.
        assert!(l.answer(s(9), &1, &a).is_empty());
        assert_eq!(l.watched().collect::<Vec<_>>(), vec![(&1, 1)]);
    }

    #[test]
    fn after_a_restart_ranks_granted_to_the_new_run_are_kept() {
        let mut l = liveness();
        l.placed(s(0), J, 1, &[0]);
        assert!(
            l.answer(s(1), &1, &answer(5, s(100), &[(J, &[0])]))
                .is_empty()
        );
        // The node restarted at about 2 s, offered again and got rank 2 at
        // 4 s; its first answer since (new boot id) lists rank 2 only.
        l.placed(s(4), J, 1, &[2]);
        assert_eq!(
            l.answer(s(5), &1, &answer(6, s(3), &[(J, &[2])])),
            vec![Lost {
                job: J,
                node: 1,
                ranks: vec![0],
                cause: LostCause::Restarted
            }]
        );
        assert_eq!(l.watched().collect::<Vec<_>>(), vec![(&1, 1)]);
    }

    #[test]
    fn a_silent_node_loses_every_rank_after_ten_seconds() {
        let mut l = liveness();
        l.placed(s(0), J, 1, &[0, 1]);
        l.placed(s(2), K, 1, &[0]);
        l.placed(s(1), J, 2, &[2]);
        assert!(
            l.answer(s(3), &2, &answer(1, s(100), &[(J, &[2])]))
                .is_empty()
        );
        assert_eq!(l.next_timeout(), Some(s(0)), "node 1 not asked yet");
        l.due(s(0));
        l.due(s(3));
        assert!(l.check(ms(9999)).is_empty());
        assert_eq!(
            l.check(s(10)),
            vec![
                Lost {
                    job: J,
                    node: 1,
                    ranks: vec![0, 1],
                    cause: LostCause::Silent
                },
                Lost {
                    job: K,
                    node: 1,
                    ranks: vec![0],
                    cause: LostCause::Silent
                }
            ]
        );
        assert!(l.check(s(10)).is_empty());
        // Node 2 answered at 3 s: silent from 13 s.
        assert!(l.check(ms(12999)).is_empty());
        assert_eq!(l.check(s(13)).len(), 1);
        assert_eq!(l.next_timeout(), None);
    }

    #[test]
    fn ended_and_forgotten_ranks_are_never_lost() {
        let mut l = liveness();
        l.placed(s(0), J, 1, &[0, 1]);
        l.placed(s(0), K, 1, &[5]);
        l.ended(J, &1, 0);
        l.forget_job(K);
        assert_eq!(l.watched().collect::<Vec<_>>(), vec![(&1, 1)]);
        l.forget(J, &1, &[1]);
        assert_eq!(l.watched().count(), 0);
        assert!(l.check(s(60)).is_empty());
        assert!(l.answer(s(60), &1, &answer(1, s(1), &[])).is_empty());
    }
}

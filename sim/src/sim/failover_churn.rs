//! Failures in a run with replication (issue 16): a node or a home that
//! fails, is cut off and comes back, and the invariants checked after every
//! event (see [`super::failover`] for the replication itself).

use std::collections::BTreeSet;

use rand::seq::IndexedRandom;
use zorilla_core::advert::JobId;
use zorilla_core::node::{JobEntry, JobEvent};

use super::Sim;
use super::failover_report::*;

impl Sim {
    /// `node` fails: the jobs whose primary in charge it was are lost to
    /// their copies from now; a job none of whose other state holders is up
    /// is orphaned; the member's unacknowledged ends and knowledge go with
    /// it.
    pub(super) fn failover_fail(&mut self, node: u32) {
        let now = self.now;
        if self.failover.is_none() {
            return;
        }
        let jobs = self.watched_jobs();
        for job in jobs {
            let held = self.nodes[node as usize].machine.replica(job);
            let Some(primary) = held.map(|rep| rep.is_primary()) else {
                if let Some(r) = self.failover.as_mut().and_then(|f| f.jobs.get_mut(&job)) {
                    r.failed.insert(node);
                }
                continue;
            };
            let in_charge = self.jobs.get(&job).is_some_and(|rec| rec.home == node);
            let retired = self.retired(job);
            let ended = self.jobs.get(&job).is_some_and(|rec| rec.ended.is_some());
            let holders_alive = self.replica_holders(job).iter().any(|n| *n != node);
            let Some(r) = self.failover.as_mut().and_then(|f| f.jobs.get_mut(&job)) else {
                continue;
            };
            r.failed.insert(node);
            if primary && in_charge && !retired {
                r.lost_at.get_or_insert((node, now));
            }
            if !holders_alive && !ended {
                r.orphaned = true;
            }
        }
        if let Some(f) = self.failover.as_mut() {
            f.unacked.retain(|(n, _), _| *n != node);
            f.known_home.retain(|(n, _), _| *n != node);
        }
    }

    /// The jobs the simulator watches the replication of.
    fn watched_jobs(&self) -> Vec<JobId> {
        self.failover
            .as_ref()
            .map(|f| f.jobs.keys().copied().collect())
            .unwrap_or_default()
    }

    /// `node` is cut off: the jobs whose primary in charge it is are lost
    /// to their copies from now.
    pub(super) fn isolate(&mut self, node: u32) {
        self.isolated.insert(node);
        let now = self.now;
        let jobs = self.watched_jobs();
        for job in jobs {
            let in_charge = self.jobs.get(&job).is_some_and(|rec| rec.home == node);
            if in_charge
                && !self.retired(job)
                && let Some(r) = self.failover.as_mut().and_then(|f| f.jobs.get_mut(&job))
            {
                r.lost_at.get_or_insert((node, now));
            }
        }
    }

    /// Fails the home of a random job that runs (the scenario's
    /// `home_failures_per_s`).
    pub(super) fn fail_a_home(&mut self) {
        let homes: Vec<u32> = self
            .jobs
            .values()
            .filter(|rec| rec.started_at.is_some() && rec.ended.is_none())
            .map(|rec| rec.home)
            .filter(|home| self.nodes[*home as usize].alive)
            .collect();
        if let Some(home) = homes.choose(&mut self.rng).copied() {
            self.fail(home);
        }
    }

    /// The failover invariants that hold after every event: at most one
    /// primary per epoch of a job, every acknowledged rank end in the log
    /// of the job's primary in charge, and no worker running
    /// [`STOP_BOUND`] after its job ended.
    pub fn check_failover(&self) -> Result<(), String> {
        let Some(f) = self.failover.as_ref() else {
            return Ok(());
        };
        let now = self.now;
        for (job, r) in &f.jobs {
            for (node, n) in self.nodes.iter().enumerate() {
                let Some(rep) = n.machine.replica(*job) else {
                    continue;
                };
                if !rep.is_primary() || !n.alive {
                    continue;
                }
                let node = node as u32;
                let term = rep.epoch().term;
                if f.primaries.get(&(*job, term)) != Some(&node) {
                    return Err(format!(
                        "{now:?}: {job}: node {node} is primary in term {term}, which node {:?} \
                         took (at most one primary per epoch)",
                        f.primaries.get(&(*job, term))
                    ));
                }
            }
            if r.orphaned {
                continue;
            }
            if let (Some(primary), Some(acked)) = (self.primary_of(*job), f.acknowledged.get(job))
                && let Some(rep) = self.nodes[primary as usize].machine.replica(*job)
            {
                let held: BTreeSet<(u32, u32)> = rep
                    .entries()
                    .filter_map(|e| match e {
                        JobEntry::Event(JobEvent::RankEnded { node, rank, .. }) => {
                            Some((*node, *rank))
                        }
                        _ => None,
                    })
                    .collect();
                if let Some((node, rank)) = acked.difference(&held).next() {
                    return Err(format!(
                        "{now:?}: {job}: the end of rank {rank} on node {node} was acknowledged \
                         but is not in the log of its primary, node {primary} (no output lost)"
                    ));
                }
            }
            if let Some(ended) = r.ended_at
                && now > ended + STOP_BOUND
            {
                let running: Vec<u32> = self
                    .running
                    .iter()
                    .filter(|((node, j), ranks)| {
                        j == job && !ranks.is_empty() && self.nodes[*node as usize].alive
                    })
                    .map(|((node, _), _)| *node)
                    .collect();
                if !running.is_empty() {
                    let phase = self.jobs.get(job).and_then(|rec| rec.ended.as_ref());
                    return Err(format!(
                        "{now:?}: {job}: nodes {running:?} still run its workers {:?} after it \
                         ended {:?} at {ended:?} (no worker left running for a job that ended)",
                        now - ended,
                        phase.map(|(p, _)| *p)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Where a job stands, for failure messages: its home, the home's
    /// phase and ranks, its replicas, the workers running and the ends not
    /// acknowledged.
    pub fn describe_job(&self, job: JobId) -> String {
        let Some(rec) = self.jobs.get(&job) else {
            return format!("{job} unknown");
        };
        let home = &self.nodes[rec.home as usize];
        let table = home.machine.scheduler().ranks(job).map(|t| {
            t.iter()
                .map(|(rank, r)| format!("{rank}@{}#{}:{:?}", r.node, r.incarnation, r.outcome))
                .collect::<Vec<_>>()
        });
        let lost: Vec<u32> = home
            .machine
            .scheduler()
            .ranks(job)
            .map(|t| t.lost().collect())
            .unwrap_or_default();
        let running: Vec<_> = self
            .running
            .iter()
            .filter(|((_, j), _)| *j == job)
            .map(|((n, _), ranks)| (*n, ranks.clone()))
            .collect();
        let f = self.failover.as_ref();
        let unacked: Vec<_> = f
            .map(|f| {
                f.unacked
                    .iter()
                    .filter(|((_, j), _)| *j == job)
                    .map(|((n, _), ranks)| (*n, ranks.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let replicas: Vec<String> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(n, node)| node.machine.replica(job).map(|rep| (n, node, rep)))
            .map(|(n, node, rep)| {
                format!(
                    "{n}{}:t{}p{}{}len{}",
                    if node.alive { "" } else { "(down)" },
                    rep.epoch().term,
                    rep.epoch().primary,
                    if rep.is_primary() { "*" } else { "" },
                    rep.len()
                )
            })
            .collect();
        format!(
            "home node {} ({}, moved {} times), phase {:?}, ranks {table:?}, lost {lost:?}, \
             running {running:?}, unacknowledged {unacked:?}, replicas {replicas:?}",
            rec.home,
            if home.alive { "up" } else { "down" },
            rec.home_moves,
            home.machine.scheduler().phase(job)
        )
    }

    /// No job lost, checked at the end of a run: every job submitted to a
    /// live home ended, but those all of whose state holders failed.
    pub fn check_jobs_ended(&self) -> Result<(), String> {
        let orphaned: BTreeSet<JobId> = self
            .failover
            .as_ref()
            .map(|f| {
                f.jobs
                    .iter()
                    .filter(|(_, r)| r.orphaned)
                    .map(|(job, _)| *job)
                    .collect()
            })
            .unwrap_or_default();
        for (job, rec) in &self.jobs {
            if orphaned.contains(job) {
                continue;
            }
            if rec.ended.is_none() {
                return Err(format!(
                    "{:?}: {job} never ended (no job lost): {}",
                    self.now,
                    self.describe_job(*job)
                ));
            }
        }
        Ok(())
    }
}

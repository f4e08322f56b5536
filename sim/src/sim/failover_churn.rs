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
    /// `node` fails: its replicas, unacknowledged ends and knowledge go
    /// with it.
    pub(super) fn failover_fail(&mut self, node: u32) {
        let now = self.now;
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        let ended: BTreeSet<JobId> = self
            .jobs
            .iter()
            .filter(|(_, rec)| rec.ended.is_some())
            .map(|(job, _)| *job)
            .collect();
        for (job, r) in f.jobs.iter_mut() {
            // What the node remembered is gone with it.
            r.dropped.remove(&node);
            r.failed.insert(node);
            let Some(rep) = r.replicas.remove(&node) else {
                continue;
            };
            let in_charge = self.jobs.get(job).is_some_and(|rec| rec.home == node);
            if rep.is_primary() && in_charge && !r.retired {
                r.lost_at.get_or_insert((node, now));
            }
            r.outboxes.remove(&node);
            let holders_alive = r
                .replicas
                .keys()
                .any(|n| self.nodes[*n as usize].alive && *n != node);
            if !holders_alive && !ended.contains(job) {
                r.orphaned = true;
            }
        }
        f.unacked.retain(|(n, _), _| *n != node);
        f.known_home.retain(|(n, _), _| *n != node);
    }

    /// Peers notice that `failed` is gone: every replica of every job is
    /// told (a copy whose primary it was stands at once), and primaries
    /// place copies elsewhere.
    pub(super) fn failover_detect(&mut self, failed: u32) {
        let now = self.now;
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        let mut replace = Vec::new();
        let mut actions = Vec::new();
        for (job, r) in f.jobs.iter_mut() {
            r.gone.insert(failed);
            if r.retired {
                continue;
            }
            for (node, rep) in r.replicas.iter_mut() {
                if *node == failed || !self.nodes[*node as usize].alive {
                    continue;
                }
                if rep.is_primary() && rep.copies().contains(&failed) {
                    replace.push(*job);
                }
                let out = rep.peer_gone(now, &failed);
                if !out.is_empty() {
                    actions.push((*node, *job, out));
                }
            }
        }
        for (node, job, out) in actions {
            self.replica_actions(node, job, out);
        }
        for job in replace {
            self.place_copies(job);
        }
    }

    /// `node` rejoined with a fresh state: it may hold copies again.
    pub(super) fn failover_rejoin(&mut self, node: u32) {
        if let Some(f) = self.failover.as_mut() {
            for r in f.jobs.values_mut() {
                r.gone.remove(&node);
            }
        }
    }

    /// `node` is cut off: the jobs whose primary in charge it is are lost
    /// to their copies from now.
    pub(super) fn isolate(&mut self, node: u32) {
        self.isolated.insert(node);
        let now = self.now;
        let Some(f) = self.failover.as_mut() else {
            return;
        };
        for (job, r) in f.jobs.iter_mut() {
            let in_charge = self.jobs.get(job).is_some_and(|rec| rec.home == node);
            if in_charge && !r.retired {
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
            for (node, rep) in &r.replicas {
                if !rep.is_primary() || !self.nodes[*node as usize].alive {
                    continue;
                }
                let term = rep.epoch().term;
                if f.primaries.get(&(*job, term)) != Some(node) {
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
                && let Some(rep) = r.replicas.get(&primary)
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
        let table = home.scheduler.ranks(job).map(|t| {
            t.iter()
                .map(|(rank, r)| format!("{rank}@{}#{}:{:?}", r.node, r.incarnation, r.outcome))
                .collect::<Vec<_>>()
        });
        let lost: Vec<u32> = home
            .scheduler
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
        let replicas: Vec<String> = f
            .and_then(|f| f.jobs.get(&job))
            .map(|r| {
                r.replicas
                    .iter()
                    .map(|(n, rep)| {
                        format!(
                            "{n}{}:t{}p{}{}len{}",
                            if self.nodes[*n as usize].alive {
                                ""
                            } else {
                                "(down)"
                            },
                            rep.epoch().term,
                            rep.epoch().primary,
                            if rep.is_primary() { "*" } else { "" },
                            rep.len()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        format!(
            "home node {} ({}, moved {} times), phase {:?}, ranks {table:?}, lost {lost:?}, \
             running {running:?}, unacknowledged {unacked:?}, replicas {replicas:?}",
            rec.home,
            if home.alive { "up" } else { "down" },
            rec.home_moves,
            home.scheduler.phase(job)
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

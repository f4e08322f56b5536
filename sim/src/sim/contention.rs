//! How long workers run on heterogeneous, shared machines (issue 17).
//!
//! A job's workers each need an amount of *work*: the seconds they would
//! run alone on the reference machine (the scenario's `duration_s`). On a
//! machine of speed `s` that runs `n` workers in all, they progress at
//! `s / alpha` reference seconds a second, where `alpha` is the
//! multi-core desktop grids paper's expected running-time ratio (its
//! equation 5, section 4.3):
//!
//! `alpha = max(1 + p, n * (C / R)^m)` for `n >= 2`, and 1 alone,
//!
//! with `C` the memory the machine's workers use together and `R` the
//! machine's memory. The paper measured `p` (the slow-down of sharing a
//! machine with workers that are not memory intensive) at about 10%, and
//! a memory-bound pair at about 2 (STREAM on a dual core), and simulated
//! with `p = 0.1` and `m = 4`: the scenario's [`Contention`](crate::scenario::Contention) defaults.
//!
//! The paper fixes a job's `alpha` when the job is placed. Here it holds
//! while the machine's set of workers does not change: whenever a worker
//! starts or ends on a machine, the workers there are settled at the rate
//! they had and go on at the new one (a fluid model), so that a worker
//! alone at its start is slowed down by those that join it later, and
//! sped up when they leave. Each change reschedules the ends of the
//! machine's workers; an end event of an earlier schedule is stale and
//! ignored (its generation no longer matches).
//!
//! Runs without contention and with every speed 1.0 keep the plain model
//! (workers end their duration after they start), event for event.

use std::time::Duration;

use zorilla_core::advert::JobId;

use super::contention_model::{Work, alpha};
use super::{Event, Sim};

impl Sim {
    /// Whether workers run by work, speed and contention rather than for
    /// their plain duration.
    pub(super) fn work_model(&self) -> bool {
        self.scenario.contention.is_some() || self.grid.speed.iter().any(|&s| s != 1.0)
    }

    /// Reference seconds a worker on `node` does per second now.
    fn rate(&self, node: u32) -> f64 {
        let m = node as usize;
        let alpha = self.scenario.contention.map_or(1.0, |model| {
            alpha(
                &model,
                self.used[m],
                self.memory_used[m],
                self.grid.memory_mib[m],
            )
        });
        self.grid.speed[m] / alpha
    }

    /// The work of `node`'s workers advances to now at the rate they had
    /// since it last changed. Call before the machine's workers change.
    pub(super) fn settle(&mut self, node: u32) {
        let elapsed = self.now.saturating_sub(self.settled_at[node as usize]);
        let done = elapsed.as_secs_f64() * self.rate(node);
        for (_, work) in self.work.range_mut(keys(node)) {
            work.remaining = (work.remaining - done).max(0.0);
        }
        self.settled_at[node as usize] = self.now;
    }

    /// Workers of `job` with `work` reference seconds each start on
    /// `node` (already settled and counted in `used`).
    /// (`task`: one task of a job array, which ends on its own).
    pub(super) fn add_work(&mut self, node: u32, job: JobId, task: Option<u32>, work: Duration) {
        let entry = self.work.entry((node, job, task)).or_insert(Work {
            remaining: 0.0,
            generation: 0,
        });
        // One end per job and machine ends all its ranks there, as in the
        // plain model: the group lasts as long as its longest need.
        entry.remaining = entry.remaining.max(work.as_secs_f64());
    }

    /// The ends of `node`'s workers at the rate they have now.
    pub(super) fn reschedule(&mut self, node: u32) {
        let rate = self.rate(node).max(f64::MIN_POSITIVE);
        let now = self.now;
        let ends: Vec<(JobId, Option<u32>, u64, Duration)> = self
            .work
            .range_mut(keys(node))
            .map(|((_, job, task), work)| {
                work.generation += 1;
                let left = Duration::from_secs_f64((work.remaining / rate).min(1e9));
                (*job, *task, work.generation, now + left)
            })
            .collect();
        for (job, task, generation, at) in ends {
            self.push(
                at,
                Event::WorkersEnd {
                    node,
                    job,
                    generation,
                    task,
                },
            );
        }
    }

    /// Whether an end event of `job` on `node` is the current one (always,
    /// in the plain model).
    pub(super) fn current_end(
        &self,
        node: u32,
        job: JobId,
        task: Option<u32>,
        generation: u64,
    ) -> bool {
        match self.work.get(&(node, job, task)) {
            Some(work) => work.generation == generation,
            // The plain model: not ended early by a preemption since.
            None => {
                !self.work_model()
                    && self.preemptions.get(&(node, job)).copied().unwrap_or(0) == generation
            }
        }
    }

    /// The work of `job`'s workers on `node` is gone (they ended or
    /// stopped; `node` settled before): all of them (`task` `None`), or
    /// one task of an array.
    pub(super) fn drop_work(&mut self, node: u32, job: JobId, task: Option<u32>) {
        match task {
            Some(task) => {
                self.work.remove(&(node, job, Some(task)));
            }
            None => {
                let gone: Vec<_> = self
                    .work
                    .range((node, job, None)..=(node, job, Some(u32::MAX)))
                    .map(|(key, _)| *key)
                    .collect();
                for key in gone {
                    self.work.remove(&key);
                }
            }
        }
    }
}

/// Every job's key on `node`.
fn keys(node: u32) -> std::ops::RangeInclusive<(u32, JobId, Option<u32>)> {
    (node, JobId(0), None)..=(node, JobId(u64::MAX), Some(u32::MAX))
}

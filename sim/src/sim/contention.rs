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
//! with `p = 0.1` and `m = 4`: the scenario's [`Contention`] defaults.
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

use super::{Event, Sim};
use crate::scenario::Contention;

/// The workers of one job on one machine, and the work they have left.
#[derive(Debug, Clone)]
pub(super) struct Work {
    /// Reference seconds of work each has left (they started together,
    /// or the later ones' work is what the group still needs).
    remaining: f64,
    /// Which schedule of the machine's ends is current.
    generation: u64,
}

/// The paper's running-time ratio of a worker on a machine that runs `n`
/// workers in all, using `used_mib` of its `memory_mib` together.
pub fn alpha(model: &Contention, n: u32, used_mib: u64, memory_mib: u64) -> f64 {
    if n <= 1 {
        return 1.0;
    }
    let share = if memory_mib == 0 {
        0.0
    } else {
        (used_mib as f64 / memory_mib as f64).min(1.0)
    };
    (1.0 + model.p).max(f64::from(n) * share.powf(model.m))
}

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
    pub(super) fn add_work(&mut self, node: u32, job: JobId, work: Duration) {
        let entry = self.work.entry((node, job)).or_insert(Work {
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
        let ends: Vec<(JobId, u64, Duration)> = self
            .work
            .range_mut(keys(node))
            .map(|((_, job), work)| {
                work.generation += 1;
                let left = Duration::from_secs_f64((work.remaining / rate).min(1e9));
                (*job, work.generation, now + left)
            })
            .collect();
        for (job, generation, at) in ends {
            self.push(
                at,
                Event::WorkersEnd {
                    node,
                    job,
                    generation,
                },
            );
        }
    }

    /// Whether an end event of `job` on `node` is the current one (always,
    /// in the plain model).
    pub(super) fn current_end(&self, node: u32, job: JobId, generation: u64) -> bool {
        match self.work.get(&(node, job)) {
            Some(work) => work.generation == generation,
            None => !self.work_model(),
        }
    }

    /// The work of `job`'s workers on `node` is gone (they ended or
    /// stopped; `node` settled before).
    pub(super) fn drop_work(&mut self, node: u32, job: JobId) {
        self.work.remove(&(node, job));
    }
}

/// Every job's key on `node`.
fn keys(node: u32) -> std::ops::RangeInclusive<(u32, JobId)> {
    (node, JobId(0))..=(node, JobId(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_model_slows_shared_machines_by_p_and_memory_bound_ones_by_up_to_n() {
        let paper = Contention::default();
        // Alone: no slow-down, whatever the memory.
        assert_eq!(alpha(&paper, 1, 64 << 10, 64 << 10), 1.0);
        assert_eq!(alpha(&paper, 0, 0, 0), 1.0);
        // Sharing with little memory in use: the 10% the paper measured.
        assert_eq!(alpha(&paper, 2, 1024, 64 << 10), 1.1);
        assert_eq!(alpha(&paper, 16, 8 << 10, 64 << 10), 1.1);
        // Memory full: n times (STREAM on a dual core: about 2).
        assert_eq!(alpha(&paper, 2, 2048, 2048), 2.0);
        assert_eq!(alpha(&paper, 16, 64 << 10, 64 << 10), 16.0);
        // Three quarters full with 8 workers: 8 * 0.75^4 = 2.53.
        let a = alpha(&paper, 8, 48 << 10, 64 << 10);
        assert!((a - 8.0 * 0.75f64.powi(4)).abs() < 1e-9, "{a}");
        // More workers, or more memory, never run faster.
        let mut last = 0.0;
        for n in 1..=16 {
            let a = alpha(&paper, n, u64::from(n) * 4096, 64 << 10);
            assert!(a >= last, "n {n}: {a} < {last}");
            last = a;
        }
        // Hostile figures stay finite.
        assert!(alpha(&paper, u32::MAX, u64::MAX, 1).is_finite());
    }
}

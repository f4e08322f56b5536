//! The oracle the simulator measures locality against: where the free
//! workers nearest to a job's home were (omniscient bookkeeping, never seen
//! by a node).

use std::time::Duration;

use zorilla_core::advert::{JobId, Strategy};
use zorilla_core::allocation::{Candidate, allocate};

use super::Sim;

impl Sim {
    /// The oracle: the placement the job's strategy gives over every free
    /// worker of the grid right now (before this job's workers start),
    /// sorted by true RTT from its home, against where its workers went.
    /// Returns the mean extra RTT per worker (µs) and the count of workers
    /// placed while a free one nearer by more than the within-site RTT
    /// existed.
    pub fn locality(&self, job: JobId) -> Option<(f64, u32)> {
        let record = self.jobs.get(&job)?;
        let home = record.home;
        let n = record.placement.values().sum::<u32>() as usize;
        if n == 0 {
            return None;
        }
        let mut chosen: Vec<u64> = Vec::with_capacity(n);
        for (node, count) in &record.placement {
            for _ in 0..*count {
                chosen.push(self.grid.rtt_us(home, *node));
            }
        }
        chosen.sort_unstable();
        // Free workers per machine, from the omniscient bookkeeping;
        // workers of this job have not started yet at its home's Full
        // event, except on the home itself.
        let strategy = self
            .plans
            .get((job.0 as usize).wrapping_sub(1))
            .map_or(Strategy::Concentrate, |plan| plan.spec.strategy);
        let candidates: Vec<Candidate<u32>> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, node)| node.alive)
            .map(|(m, _)| {
                let mine = self
                    .running
                    .get(&(m as u32, job))
                    .map_or(0, |r| r.len() as u32);
                Candidate {
                    node: m as u32,
                    rtt: Duration::from_micros(self.grid.rtt_us(home, m as u32)),
                    offered: self.grid.cores[m] - self.used[m] + mine,
                }
            })
            .collect();
        // The job's own strategy over every free worker by true RTT: a
        // spread job's best placement is one worker on each of the nearest
        // machines, not every core of the nearest ones. Where the strategy
        // cannot place them all (spread over too few free machines), the
        // nearest free workers.
        let assignments = allocate(strategy, &candidates, n as u32)
            .or_else(|| allocate(Strategy::Concentrate, &candidates, n as u32))
            .unwrap_or_default();
        let mut oracle: Vec<u64> = Vec::with_capacity(n);
        for a in &assignments {
            let rtt = self.grid.rtt_us(home, a.node);
            oracle.extend(std::iter::repeat_n(rtt, a.workers as usize));
        }
        oracle.sort_unstable();
        let home_site = self.grid.site_of[home as usize];
        let within = self.grid.rtt_us[home_site][home_site];
        let extra: f64 = chosen.iter().sum::<u64>() as f64 - oracle.iter().sum::<u64>() as f64;
        let out_of_order = chosen
            .iter()
            .zip(&oracle)
            .filter(|(c, o)| **c > **o + within)
            .count() as u32;
        Some(((extra / n as f64).max(0.0), out_of_order))
    }
}

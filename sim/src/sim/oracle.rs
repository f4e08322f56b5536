//! The oracle the simulator measures locality against: where the free
//! workers nearest to a job's home were when its home granted them
//! (omniscient bookkeeping, never seen by a node).

use std::time::Duration;

use zorilla_core::advert::{JobId, Strategy};
use zorilla_core::allocation::{Candidate, allocate};
use zorilla_core::resources::Machine;

use super::Sim;

impl Sim {
    /// Judges the workers `home` has just granted to `job` (its
    /// `granting`): the placement the job's strategy gives over every
    /// worker free right now, sorted by true RTT from its home, against
    /// where the grant put them. Adds their extra RTT (µs) and the count of
    /// workers granted while a free one nearer by more than the within-site
    /// RTT existed to the job's record.
    ///
    /// Each grant is judged when it is made: a malleable job that grew as
    /// cores freed up is not held to cores that were busy when its first
    /// workers were placed. Free means running nothing, held for no other
    /// job (offered to its home, or granted with the grant on its way):
    /// cores another job has are not this job's to take; and free for long
    /// enough that a message could have told the home (half the RTT
    /// between them): no scheduler can place a worker on a core it cannot
    /// have heard of. Nor is a core of this job's earlier grant whose grant
    /// is still on its way (the member holds it until the grant comes).
    pub(super) fn judge_grant(&mut self, home: u32, job: JobId) {
        let Some(record) = self.jobs.get(&job) else {
            return;
        };
        let granting = &record.granting;
        let n: u32 = granting.values().sum();
        if n == 0 {
            return;
        }
        let mut chosen: Vec<u64> = Vec::with_capacity(n as usize);
        for (node, count) in granting {
            chosen.extend(std::iter::repeat_n(
                self.grid.rtt_us(record.home, *node),
                *count as usize,
            ));
        }
        chosen.sort_unstable();
        let strategy = self
            .plans
            .get((job.0 as usize).wrapping_sub(1))
            .map_or(Strategy::Concentrate, |plan| plan.spec.strategy);
        let candidates: Vec<Candidate<u32>> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, node)| node.alive)
            .map(|(m, node)| {
                // The grant's workers on the home itself started in the
                // same call, and count as free for it.
                let started = if m as u32 == home {
                    let running = self.running.get(&(home, job)).map_or(0, |r| r.len() as u32);
                    running.min(granting.get(&home).copied().unwrap_or(0))
                } else {
                    0
                };
                // Cores freed so lately that no message from them could
                // have reached the home yet are not free to it.
                let one_way = Duration::from_micros(self.grid.rtt_us(record.home, m as u32) / 2);
                let unheard: u32 = self.freed[m]
                    .iter()
                    .filter(|(at, _)| self.now.saturating_sub(*at) < one_way)
                    .map(|(_, count)| *count)
                    .sum();
                let held: u32 = node
                    .machine
                    .scheduler()
                    .holds()
                    .filter(|h| h.job != job)
                    .map(|h| h.workers)
                    .sum();
                // This job's earlier grants still on their way (the member
                // holds their cores until the grant comes); this grant's
                // own are the ones judged.
                let m32 = m as u32;
                let not_started = record.ranks.get(&m32).map_or(0, |ranks| {
                    let started = record.started.get(&m32);
                    ranks
                        .iter()
                        .filter(|r| !started.is_some_and(|s| s.contains(r)))
                        .count() as u32
                });
                let in_flight = if m32 == home {
                    not_started
                } else {
                    not_started.saturating_sub(granting.get(&m32).copied().unwrap_or(0))
                };
                Candidate {
                    node: m as u32,
                    rtt: Duration::from_micros(self.grid.rtt_us(record.home, m as u32)),
                    offered: (self.grid.cores[m] - self.used[m] + started)
                        .saturating_sub(held)
                        .saturating_sub(in_flight)
                        .saturating_sub(unheard),
                    // The oracle is about distance only: nearest first.
                    machine: Machine::default(),
                }
            })
            .collect();
        // The job's own strategy over every free worker by true RTT: a
        // spread job's best placement is one worker on each of the nearest
        // machines, not every core of the nearest ones. Where the strategy
        // cannot place them all (spread over too few free machines), the
        // nearest free workers.
        let assignments = allocate(strategy, &candidates, n)
            .or_else(|| allocate(Strategy::Concentrate, &candidates, n))
            .unwrap_or_default();
        let mut oracle: Vec<u64> = Vec::with_capacity(n as usize);
        for a in &assignments {
            let rtt = self.grid.rtt_us(record.home, a.node);
            oracle.extend(std::iter::repeat_n(rtt, a.workers as usize));
        }
        oracle.sort_unstable();
        // The granted workers themselves were free to the job: an oracle
        // that cannot place as many has its bookkeeping wrong.
        // A grant that crossed the member's withdrawal (its hold ran out)
        // names cores that are not free: the oracle places fewer workers
        // than were granted, and only as many of the nearest granted ones
        // are judged (the others' grant fails and they are placed again).
        chosen.truncate(oracle.len());
        let n = chosen.len() as u32;
        if n == 0 {
            if let Some(record) = self.jobs.get_mut(&job) {
                record.granting.clear();
            }
            return;
        }
        let home_site = self.grid.site_of[record.home as usize];
        let within = self.grid.rtt_us[home_site][home_site];
        let extra = chosen.iter().sum::<u64>() as f64 - oracle.iter().sum::<u64>() as f64;
        let out_of_order = chosen
            .iter()
            .zip(&oracle)
            .filter(|(c, o)| **c > **o + within)
            .count() as u32;
        if let Some(record) = self.jobs.get_mut(&job) {
            record.granting.clear();
            record.judged_extra_us += extra.max(0.0);
            record.judged_workers += n;
            record.out_of_order += out_of_order;
        }
    }
}

//! The oracle the simulator measures locality against: where the free
//! workers nearest to a job's home were (omniscient bookkeeping, never seen
//! by a node).

use zorilla_core::advert::JobId;

use super::Sim;

impl Sim {
    /// The oracle: the free workers nearest to the job's home right now
    /// (before this job's workers start), against where its workers went.
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
        // Free workers per site (and the home's own machine), from the
        // omniscient bookkeeping; workers of this job have not started yet
        // at its home's Full event, except on the home itself.
        let home_site = self.grid.site_of[home as usize];
        let mut free_by_site = vec![0u64; self.grid.sites.len()];
        let mut free_home = 0u64;
        for (m, alive) in self.nodes.iter().map(|n| n.alive).enumerate() {
            if !alive {
                continue;
            }
            let mine = self
                .running
                .get(&(m as u32, job))
                .map_or(0, |r| r.len() as u32);
            let free = u64::from(self.grid.cores[m] - self.used[m] + mine);
            if m as u32 == home {
                free_home = free;
            } else {
                free_by_site[self.grid.site_of[m]] += free;
            }
        }
        let mut oracle: Vec<u64> = Vec::with_capacity(n);
        oracle.extend(std::iter::repeat_n(0, (free_home as usize).min(n)));
        let mut sites: Vec<usize> = (0..self.grid.sites.len()).collect();
        sites.sort_by_key(|s| self.grid.rtt_us[home_site][*s]);
        for site in sites {
            if oracle.len() >= n {
                break;
            }
            let take = (free_by_site[site] as usize).min(n - oracle.len());
            oracle.extend(std::iter::repeat_n(self.grid.rtt_us[home_site][site], take));
        }
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

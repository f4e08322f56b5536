//! The invariants the simulator checks after every event (see
//! [`Sim::check_invariants`]): what the real core must never do, however
//! the grid churns.

use zorilla_core::advert::JobId;
use zorilla_core::node::{LostPolicy, Phase, Scheduler};

use super::Sim;

impl Sim {
    /// Checks the invariants that must hold after every event:
    /// - no node runs or holds more workers than it has cores;
    /// - no job has more workers than its max, and no rank is granted twice;
    /// - a job is granted nothing before it starts; a rigid job starts with
    ///   all its workers (ranks exactly `0..max`), a malleable one with
    ///   `min..=max`, and no worker starts before its job started (these
    ///   are recorded as the events happen and reported here);
    /// - every reservation is released or used in time: no hold outlives
    ///   its hold timeout (nor the advert), and no home keeps offers for a
    ///   job that ended or has all its workers;
    /// - expired adverts are gone from pending queues;
    /// - the simulator's copy of which nodes are up is every node's own.
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(v) = self.violations.first() {
            return Err(v.clone());
        }
        self.check_failover()?;
        for (i, node) in self.nodes.iter().enumerate() {
            if self.up[i] != node.alive {
                return Err(format!(
                    "node {i}: alive {} but up {}",
                    node.alive, self.up[i]
                ));
            }
            if !node.alive {
                continue;
            }
            let s = node.machine.scheduler();
            let running: u32 = s.running().map(|(_, ranks)| ranks.len() as u32).sum();
            if running + s.held_workers() > self.grid.cores[i] {
                return Err(format!(
                    "node {i} runs {running} and holds {} workers on {} cores",
                    s.held_workers(),
                    self.grid.cores[i]
                ));
            }
            if let Some((advert, _)) = s.pending().find(|(_, at)| *at < self.now) {
                return Err(format!("node {i} keeps expired advert of {}", advert.job));
            }
            let hold_timeout = s.config().hold_timeout;
            for hold in s.holds() {
                // At `until` itself the wake-up may still be queued behind
                // other events of the same instant.
                if hold.until < self.now || hold.until > hold.since + hold_timeout {
                    return Err(format!(
                        "node {i} holds {} workers for {} since {:?} until {:?} at {:?} \
                         (hold timeout {hold_timeout:?})",
                        hold.workers, hold.job, hold.since, hold.until, self.now
                    ));
                }
            }
            for (job, phase) in s
                .home_jobs()
                .filter(|(job, _)| self.in_charge(i as u32, *job))
            {
                let offers = s.held_offers(job).count();
                let full = s.placement(job).is_some_and(|p| {
                    p.values().map(Vec::len).sum::<usize>() >= self.jobs[&job].workers as usize
                });
                if offers > 0 && (phase > Phase::Running || full) {
                    return Err(format!(
                        "home {i} keeps {offers} offers for {job}, {phase:?}{}",
                        if full { " with all its workers" } else { "" }
                    ));
                }
            }
            for (job, phase) in s
                .home_jobs()
                .filter(|(job, _)| self.in_charge(i as u32, *job))
            {
                let placement = s.placement(job).expect("home job has a placement");
                let granted: usize = placement.values().map(Vec::len).sum();
                let record = &self.jobs[&job];
                if granted > record.workers as usize {
                    return Err(format!("{job}: {granted} granted, max {}", record.workers));
                }
                let mut ranks: Vec<u32> = placement.values().flatten().copied().collect();
                let before = ranks.len();
                ranks.sort_unstable();
                ranks.dedup();
                if ranks.len() != before {
                    return Err(format!("{job}: a rank was granted twice"));
                }
                if phase == Phase::Scheduling && granted != 0 {
                    return Err(format!(
                        "{job}: {granted} workers granted before the job started"
                    ));
                }
                self.check_rank_lifecycle(job, phase, s)?;
            }
        }
        Ok(())
    }

    /// Whether `node` is the home in charge of `job`: with failover, an
    /// old primary cut off from its copies may still take itself for the
    /// home until it hears of its successor; only the one in charge is
    /// checked.
    fn in_charge(&self, node: u32, job: JobId) -> bool {
        self.failover.is_none() || self.jobs.get(&job).is_some_and(|r| r.home == node)
    }

    /// The rank lifecycle of one job its home still remembers: it ended
    /// once and stays ended (its home's phase is the one its `Ended` event
    /// gave), and every lost rank is replaced or the job failed (a job
    /// that does not replace lost workers runs with none lost, and no job
    /// completes with one).
    fn check_rank_lifecycle(
        &self,
        job: JobId,
        phase: Phase,
        home: &Scheduler<u32>,
    ) -> Result<(), String> {
        let record = &self.jobs[&job];
        match &record.ended {
            Some((ended, _)) if *ended != phase => {
                return Err(format!("{job}: ended {ended:?}, its home has it {phase:?}"));
            }
            None if phase > Phase::Running => {
                return Err(format!("{job}: {phase:?} without an end event"));
            }
            _ => {}
        }
        let Some(table) = home.ranks(job) else {
            return Ok(());
        };
        let lost: Vec<u32> = table.lost().collect();
        if lost.is_empty() {
            return Ok(());
        }
        let replaces = !record.is_rigid()
            || self
                .plans
                .get((job.0 as usize).wrapping_sub(1))
                .is_some_and(|p| p.spec.on_worker_lost == LostPolicy::Replace);
        match phase {
            Phase::Completed => Err(format!("{job}: completed with ranks {lost:?} lost")),
            Phase::Running if !replaces => Err(format!(
                "{job}: runs on with ranks {lost:?} lost though it cannot replace them"
            )),
            _ => Ok(()),
        }
    }
}

//! Resources a node offers and a worker needs: cores, memory and disk.

use serde::{Deserialize, Serialize};

/// An amount of cores, memory and disk: what a node has free, or what one
/// worker of a job needs.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Resources {
    /// Whole cores.
    pub cores: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Disk in MiB.
    pub disk_mib: u64,
}

impl Resources {
    /// Nothing at all.
    pub const ZERO: Resources = Resources {
        cores: 0,
        memory_mib: 0,
        disk_mib: 0,
    };

    /// A convenience constructor.
    pub const fn new(cores: u32, memory_mib: u64, disk_mib: u64) -> Self {
        Resources {
            cores,
            memory_mib,
            disk_mib,
        }
    }

    /// How many workers needing `per_worker` each fit into `self`. A worker
    /// that needs nothing at all (all zero) would fit without end; it is
    /// counted as needing one core, because every worker runs on some core.
    pub fn workers_that_fit(&self, per_worker: &Resources) -> u32 {
        let cores = per_worker.cores.max(1);
        let by_cores = self.cores / cores;
        // A worker needing no memory (or disk) is not limited by it.
        let by_memory = self
            .memory_mib
            .checked_div(per_worker.memory_mib)
            .unwrap_or(u64::MAX);
        let by_disk = self
            .disk_mib
            .checked_div(per_worker.disk_mib)
            .unwrap_or(u64::MAX);
        let fit = u64::from(by_cores).min(by_memory).min(by_disk);
        u32::try_from(fit).unwrap_or(u32::MAX)
    }

    /// `self` times `n`, saturating.
    pub fn times(&self, n: u32) -> Resources {
        Resources {
            cores: self.cores.max(1).saturating_mul(n),
            memory_mib: self.memory_mib.saturating_mul(u64::from(n)),
            disk_mib: self.disk_mib.saturating_mul(u64::from(n)),
        }
    }

    /// `self` minus `other`, never below zero.
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        Resources {
            cores: self.cores.saturating_sub(other.cores),
            memory_mib: self.memory_mib.saturating_sub(other.memory_mib),
            disk_mib: self.disk_mib.saturating_sub(other.disk_mib),
        }
    }

    /// `self` plus `other`, saturating.
    pub fn saturating_add(&self, other: &Resources) -> Resources {
        Resources {
            cores: self.cores.saturating_add(other.cores),
            memory_mib: self.memory_mib.saturating_add(other.memory_mib),
            disk_mib: self.disk_mib.saturating_add(other.disk_mib),
        }
    }
}

impl std::fmt::Display for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cores, {} MiB memory, {} MiB disk",
            self.cores, self.memory_mib, self.disk_mib
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_workers_fit_a_multicore_node_limited_by_memory() {
        let node = Resources::new(8, 4096, 100_000);
        assert_eq!(node.workers_that_fit(&Resources::new(1, 1024, 10)), 4);
        assert_eq!(node.workers_that_fit(&Resources::new(2, 0, 0)), 4);
        assert_eq!(node.workers_that_fit(&Resources::new(0, 0, 0)), 8);
        assert_eq!(node.workers_that_fit(&Resources::new(9, 0, 0)), 0);
        let residue = node.saturating_sub(&Resources::new(1, 1024, 10).times(3));
        assert_eq!(residue, Resources::new(5, 1024, 99_970));
    }
}

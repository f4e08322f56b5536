//! Resources a node offers and a worker needs: cores, memory and disk;
//! and what an offering node says of its machine ([`Machine`]: all its
//! cores, how many are busy, how fast they are), so that a home can prefer
//! idle and faster nodes among equally near ones (issue 17, after the
//! multi-core desktop grids paper).

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

/// The CPU speed figure of the reference machine: a node as fast as it
/// says 1000, one twice as fast 2000. The figure is relative (a benchmark
/// score the owner configures or the node measures), so only ratios
/// between nodes mean anything.
pub const REFERENCE_SPEED: u32 = 1000;

/// What an offering node says of its machine besides what it has left: the
/// home ranks equally near offers by it (see
/// [`crate::allocation::SameDistance`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Machine {
    /// The cores the node offers to jobs in all.
    pub cores: u32,
    /// Of those, the cores running workers or held for offers when this
    /// offer was made, this offer's own hold not counted. Zero: the node is
    /// idle, and a worker placed there shares its memory and caches with
    /// no other (the paper's contention model slows co-located workers
    /// down by 10% at the least).
    pub busy: u32,
    /// How fast a core of the node is, against [`REFERENCE_SPEED`].
    pub speed: u32,
    /// Where the node can be reached from, as it sees itself: a native
    /// job's ranks are placed only on nodes that reach each other
    /// ([`Reachability::together`]).
    #[serde(default)]
    pub reach: Reachability,
}

/// Where a node can be reached from, as it sees itself (its overlay's
/// address checks). A native job's ranks connect to each other directly,
/// over their MPI library's own transport, without the overlay's relays
/// or hole punching: so its home places them only on nodes that reach each
/// other (see [`crate::allocation::reachable_together`]).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Reachability {
    /// Not known: no peer on another host confirmed an address of the
    /// node or failed to reach it (a grid on one machine, a LAN without
    /// dial-backs). Taken to reach every node: nothing says otherwise.
    #[default]
    Unknown,
    /// Peers on other hosts connected to an address of the node, or dialed
    /// back to it: reachable from anywhere they are.
    Public,
    /// Behind a NAT whose outside address is this one (peers saw the node
    /// there and could not dial back): reachable from the nodes behind the
    /// same NAT only.
    BehindNat(std::net::IpAddr),
}

impl Reachability {
    /// Whether ranks on a node of `self` and one of `other` can connect
    /// to each other directly (each way): the same kind, or one unknown.
    pub fn together(self, other: Reachability) -> bool {
        self == Reachability::Unknown || other == Reachability::Unknown || self == other
    }
}

impl std::fmt::Display for Reachability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reachability::Unknown => f.write_str("reachability unknown"),
            Reachability::Public => f.write_str("reachable"),
            Reachability::BehindNat(ip) => write!(f, "behind the NAT at {ip}"),
        }
    }
}

impl Machine {
    /// Whether no core of the node runs or holds workers.
    pub fn is_idle(&self) -> bool {
        self.busy == 0
    }

    /// The busy share of the node's cores, in per mille (0 for a node of no
    /// cores; saturating, so that any values are safe).
    pub fn load_permille(&self) -> u32 {
        if self.cores == 0 {
            return 0;
        }
        let permille = u64::from(self.busy.min(self.cores)) * 1000 / u64::from(self.cores);
        permille as u32
    }
}

impl Default for Machine {
    /// An idle machine of no stated cores at the reference speed.
    fn default() -> Self {
        Machine {
            cores: 0,
            busy: 0,
            speed: REFERENCE_SPEED,
            reach: Reachability::Unknown,
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

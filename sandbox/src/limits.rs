//! Resource limits of a worker, how a job's request is capped by the node
//! owner's configuration, and the pieces that enforce them while it runs:
//! the memory limiter and the flag that records which limit was crossed.
//! (Output is limited in [`crate::output`], files in [`crate::diskquota`],
//! time in [`crate::worker`]; all of them set the [`LimitFlag`].)

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use wasmtime::ResourceLimiter;

/// The resources one worker may use. Exceeding any of them ends the worker
/// with the matching [`crate::Outcome`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest size of the worker's linear memory, in bytes
    /// ([`crate::Outcome::OutOfMemory`]).
    pub memory_bytes: u64,
    /// CPU time the guest may use ([`crate::Outcome::CpuLimit`]): the CPU
    /// clock of the threads that ran it, summed over every slice it ran.
    /// Time spent blocked in the host (waiting for a message, a barrier,
    /// output back-pressure) is not CPU time. Checked at every epoch tick,
    /// so a worker can overshoot by about one tick.
    pub cpu_time: Duration,
    /// Wall-clock time from the start of the guest's code
    /// ([`crate::Outcome::TimeLimit`]).
    pub wall_time: Duration,
    /// Total bytes the worker may write to stdout and stderr together
    /// ([`crate::Outcome::OutputLimit`]). Files written to `/outputs` are not
    /// metered here.
    pub output_bytes: u64,
    /// Bytes the worker may keep in its `/outputs` directory
    /// ([`crate::Outcome::DiskLimit`]). WASI has no quotas, so the sandbox
    /// measures the directory every [`crate::DISK_POLL`]: a worker can
    /// overshoot by what it writes in that time, then it is stopped. Files
    /// count by their apparent size (a sparse file in full), links count
    /// nothing and are not followed, and a directory tree of more than
    /// [`crate::jobfs::MAX_ENTRIES`] entries counts as over the limit.
    /// The node's workers together are held to
    /// [`crate::SandboxConfig::disk_bytes`] besides.
    pub disk_bytes: u64,
}

impl Limits {
    /// No limit of its own: a job that asks for this gets the owner's caps.
    pub const UNLIMITED: Limits = Limits {
        memory_bytes: u64::MAX,
        cpu_time: Duration::MAX,
        wall_time: Duration::MAX,
        output_bytes: u64::MAX,
        disk_bytes: u64::MAX,
    };

    /// These limits, each lowered to the owner's cap where it is higher.
    pub fn capped_by(&self, caps: &Limits) -> Limits {
        Limits {
            memory_bytes: self.memory_bytes.min(caps.memory_bytes),
            cpu_time: self.cpu_time.min(caps.cpu_time),
            wall_time: self.wall_time.min(caps.wall_time),
            output_bytes: self.output_bytes.min(caps.output_bytes),
            disk_bytes: self.disk_bytes.min(caps.disk_bytes),
        }
    }
}

impl Default for Limits {
    /// Owner caps for a node whose owner set none of their own: 512 MiB of
    /// memory, 64 MiB of output, 1 GiB of files, and no limit on CPU or
    /// wall-clock time (a worker runs as long as its job asks).
    fn default() -> Self {
        Limits {
            memory_bytes: 512 * 1024 * 1024,
            cpu_time: Duration::MAX,
            wall_time: Duration::MAX,
            output_bytes: 64 * 1024 * 1024,
            disk_bytes: 1024 * 1024 * 1024,
        }
    }
}

/// Which limit a worker crossed, as recorded by the limiter or the output
/// streams at the moment it happened (the trap that follows is generic, so
/// the reason is taken from here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LimitHit {
    Memory = 1,
    Output = 2,
    /// A write to a file would have passed the disk limit.
    Disk = 3,
}

/// The first limit hit by a worker, shared between the places that detect
/// limits and the task that reports the outcome.
#[derive(Default)]
pub(crate) struct LimitFlag(AtomicU8);

impl LimitFlag {
    pub(crate) fn set(&self, hit: LimitHit) {
        // Only the first limit counts: it is what ended the worker.
        let _ = self
            .0
            .compare_exchange(0, hit as u8, Ordering::Relaxed, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Option<LimitHit> {
        match self.0.load(Ordering::Relaxed) {
            1 => Some(LimitHit::Memory),
            2 => Some(LimitHit::Output),
            3 => Some(LimitHit::Disk),
            _ => None,
        }
    }
}

/// Caps linear memory (and tables) of one worker. Growing past the cap is a
/// trap, not a failed `memory.grow`: a guest whose `malloc` returns NULL
/// usually dies in some unrelated way, and the owner wants to see
/// "out of memory".
pub(crate) struct MemoryLimiter {
    pub(crate) memory_bytes: usize,
    pub(crate) flag: Arc<LimitFlag>,
}

/// Table elements a worker may have (C guests use one small function table).
const MAX_TABLE_ELEMENTS: usize = 100_000;

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.flag.set(LimitHit::Memory);
            wasmtime::bail!(
                "memory limit of {} bytes exceeded (wanted {desired})",
                self.memory_bytes
            );
        }
        Ok(maximum.is_none_or(|max| desired <= max))
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS && maximum.is_none_or(|max| desired <= max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_limits_are_capped_field_by_field() {
        let caps = Limits {
            cpu_time: Duration::from_secs(60),
            ..Limits::default()
        };
        let job = Limits {
            memory_bytes: 1 << 20,
            wall_time: Duration::from_secs(10),
            ..Limits::UNLIMITED
        };
        let effective = job.capped_by(&caps);
        assert_eq!(effective.memory_bytes, 1 << 20);
        assert_eq!(effective.cpu_time, Duration::from_secs(60));
        assert_eq!(effective.wall_time, Duration::from_secs(10));
        assert_eq!(effective.output_bytes, caps.output_bytes);
        assert_eq!(effective.disk_bytes, caps.disk_bytes);
    }

    #[test]
    fn by_default_time_is_not_capped() {
        let effective = Limits::UNLIMITED.capped_by(&Limits::default());
        assert_eq!(effective.cpu_time, Duration::MAX);
        assert_eq!(effective.wall_time, Duration::MAX);
    }

    #[test]
    fn the_first_limit_hit_wins() {
        let flag = LimitFlag::default();
        assert_eq!(flag.get(), None);
        flag.set(LimitHit::Output);
        flag.set(LimitHit::Memory);
        assert_eq!(flag.get(), Some(LimitHit::Output));
    }

    #[test]
    fn memory_growth_past_the_cap_traps_and_is_recorded() {
        let flag = Arc::new(LimitFlag::default());
        let mut limiter = MemoryLimiter {
            memory_bytes: 1 << 20,
            flag: flag.clone(),
        };
        assert!(limiter.memory_growing(0, 1 << 20, None).unwrap());
        assert!(!limiter.memory_growing(0, 1 << 19, Some(1 << 18)).unwrap());
        assert!(
            limiter
                .memory_growing(1 << 20, (1 << 20) + 1, None)
                .is_err()
        );
        assert_eq!(flag.get(), Some(LimitHit::Memory));
    }
}

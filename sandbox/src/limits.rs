//! Resource limits of a worker, and how a job's request is capped by the node
//! owner's configuration.

use std::time::Duration;

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
}

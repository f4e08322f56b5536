//! Resource limits of a worker, and how a job's request is capped by the node
//! owner's configuration.

use std::time::Duration;

/// Fuel units per second of CPU time, for converting a CPU-time budget into
/// fuel. One unit is roughly one WebAssembly instruction; wasmtime runs about
/// 2 billion per second on the machines we measured, so this errs on the
/// generous side. Fuel makes the budget independent of the machine's speed:
/// a job gets the same amount of work done wherever it lands.
pub const FUEL_PER_CPU_SECOND: u64 = 1_000_000_000;

/// The resources one worker may use. Exceeding any of them ends the worker
/// with the matching [`crate::Outcome`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest size of the worker's linear memory, in bytes
    /// ([`crate::Outcome::OutOfMemory`]).
    pub memory_bytes: u64,
    /// CPU budget in fuel units, see [`FUEL_PER_CPU_SECOND`]
    /// ([`crate::Outcome::CpuLimit`]). Time spent blocked in the host (waiting
    /// for a message, a barrier, output back-pressure) costs no fuel.
    pub cpu_fuel: u64,
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
        cpu_fuel: u64::MAX,
        wall_time: Duration::MAX,
        output_bytes: u64::MAX,
        disk_bytes: u64::MAX,
    };

    /// These limits, each lowered to the owner's cap where it is higher.
    pub fn capped_by(&self, caps: &Limits) -> Limits {
        Limits {
            memory_bytes: self.memory_bytes.min(caps.memory_bytes),
            cpu_fuel: self.cpu_fuel.min(caps.cpu_fuel),
            wall_time: self.wall_time.min(caps.wall_time),
            output_bytes: self.output_bytes.min(caps.output_bytes),
            disk_bytes: self.disk_bytes.min(caps.disk_bytes),
        }
    }

    /// The fuel that corresponds to `cpu` of CPU time.
    pub fn fuel_for(cpu: Duration) -> u64 {
        let fuel = cpu.as_secs_f64() * FUEL_PER_CPU_SECOND as f64;
        // `as` saturates for floats that do not fit.
        fuel as u64
    }
}

impl Default for Limits {
    /// Conservative owner caps: 512 MiB of memory, 60 s of CPU, one hour of
    /// wall-clock time, 64 MiB of output, 1 GiB of files.
    fn default() -> Self {
        Limits {
            memory_bytes: 512 * 1024 * 1024,
            cpu_fuel: 60 * FUEL_PER_CPU_SECOND,
            wall_time: Duration::from_secs(3600),
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
        let caps = Limits::default();
        let job = Limits {
            memory_bytes: 1 << 20,
            ..Limits::UNLIMITED
        };
        let effective = job.capped_by(&caps);
        assert_eq!(effective.memory_bytes, 1 << 20);
        assert_eq!(effective.cpu_fuel, caps.cpu_fuel);
        assert_eq!(effective.wall_time, caps.wall_time);
        assert_eq!(effective.output_bytes, caps.output_bytes);
        assert_eq!(effective.disk_bytes, caps.disk_bytes);
    }

    #[test]
    fn cpu_time_converts_to_fuel() {
        assert_eq!(Limits::fuel_for(Duration::from_millis(1500)), 1_500_000_000);
        assert_eq!(Limits::fuel_for(Duration::MAX), u64::MAX);
    }
}

//! The contention model of the multi-core desktop grids paper, alone: the
//! running-time ratio of workers that share a machine (see
//! [`contention`](super::contention) for how the simulator runs workers
//! by it), and what one job's workers on a machine have left to do.

use crate::scenario::Contention;

/// The workers of one job on one machine, and the work they have left.
#[derive(Debug, Clone)]
pub(super) struct Work {
    /// Reference seconds of work each has left (they started together,
    /// or the later ones' work is what the group still needs).
    pub(super) remaining: f64,
    /// Which schedule of the machine's ends is current.
    pub(super) generation: u64,
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

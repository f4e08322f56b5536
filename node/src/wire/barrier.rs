//! Barrier traffic between a job's ranks: ranks enter at rank 0, rank 0
//! releases them (see `net`).

use serde::{Deserialize, Serialize};

use crate::validate::{self, Invalid};

/// A barrier message from rank `from` to rank `to` of `job`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BarrierRpc {
    pub(crate) job: u64,
    pub(crate) to: u32,
    pub(crate) from: u32,
    pub(crate) msg: BarrierMsg,
}

impl BarrierRpc {
    /// Checks both ranks.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        validate::rank("sending rank", self.from)?;
        validate::rank("receiving rank", self.to)
    }
}

/// What a [`BarrierRpc`] says. Every barrier call of a worker has a token
/// of its own, so that rank 0 can tell a call that was abandoned from a
/// later one, and a worker can tell its release from one meant for an
/// earlier call or an earlier worker of its rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum BarrierMsg {
    /// To rank 0: the sender waits in its barrier call `token`.
    Enter { token: u64 },
    /// To rank 0: the sender's call `token` was dropped before the barrier
    /// completed (its worker was cancelled or hit a limit while waiting).
    Withdraw { token: u64 },
    /// From rank 0: the call `token` of the receiver may return.
    Release { token: u64 },
}

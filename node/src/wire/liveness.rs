//! Liveness between a home and the nodes holding its ranks: the home asks
//! which of the ranks it placed on a node still run there (see
//! `node::liveness` and [`zorilla_core::liveness`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zorilla_core::limits::{self, MAX_WORKERS};

use crate::validate::{self, Invalid};

/// The most jobs one [`RanksRpc`] asks about: far more than a node runs
/// workers for at once (its owner's limit on jobs), so a question above it
/// is refused as malformed.
pub(crate) const MAX_ASKED_JOBS: usize = 4096;

/// Home to a node holding ranks of its jobs: which of these ranks do you
/// run? `jobs` holds, per job, the ranks the home places on the receiver
/// (at most [`MAX_ASKED_JOBS`] jobs). Answered with `PeerReply::Ranks`; a
/// node stops workers of the sender's jobs that the sender no longer
/// places on it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RanksRpc {
    pub(crate) jobs: BTreeMap<u64, Vec<u32>>,
}

impl RanksRpc {
    /// Checks the number of jobs and of ranks, and each rank.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        limits::at_most("jobs asked about", self.jobs.len(), MAX_ASKED_JOBS)?;
        for ranks in self.jobs.values() {
            limits::at_most("ranks of one job", ranks.len(), MAX_WORKERS as usize)?;
            for r in ranks {
                validate::rank("rank", *r)?;
            }
        }
        Ok(())
    }
}

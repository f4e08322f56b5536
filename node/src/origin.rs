//! A job's id, bound to the node that accepted it (issue 28).
//!
//! The node that accepts a job (its first home) draws a random nonce and
//! takes the job's id from a hash of its own peer id and that nonce
//! ([`JobOrigin::id`]); the job's copy carries both ([`JobOrigin`]). So any
//! node can tell, from the job alone, which node the job's first epoch
//! names as primary, and a new copy starts from there
//! ([`zorilla_core::replica::Replica::copy`]): it follows a later home
//! only by the chain of mandates that elected it. A node that learnt a
//! job's id cannot invite copies of the job under an epoch of its own, or
//! hand out a grant that pretends the job began with it: making an id
//! name another first home takes a preimage of 64 bits of SHA-256.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use zorilla_overlay::PeerId;

/// What makes a job's id: the node that accepted it and a nonce it drew.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobOrigin {
    /// The job's first home.
    pub(crate) home: PeerId,
    /// Drawn by the first home when it accepted the job.
    pub(crate) nonce: [u8; 16],
}

impl JobOrigin {
    /// A new job accepted by `home`, with a fresh nonce.
    pub(crate) fn new(home: PeerId) -> Self {
        let mut nonce = [0u8; 16];
        // A machine without a random source cannot run a node at all.
        rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut nonce)
            .expect("the system's random number source");
        JobOrigin { home, nonce }
    }

    /// The job's id: the first eight bytes of SHA-256 over a label, the
    /// first home's peer id and the nonce.
    pub(crate) fn id(&self) -> u64 {
        let mut hash = Sha256::new();
        hash.update(b"zorilla job id 1\0");
        hash.update(self.home.to_bytes());
        hash.update(self.nonce);
        let digest = hash.finalize();
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(id)
    }

    /// The job's first home, if this origin is `job`'s.
    pub(crate) fn first_home(&self, job: u64) -> Option<PeerId> {
        (self.id() == job).then_some(self.home)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_gives_its_jobs_id_and_no_other_home_does() {
        let home = PeerId::random();
        let origin = JobOrigin::new(home);
        let job = origin.id();
        assert_eq!(origin.first_home(job), Some(home));
        assert_eq!(origin.first_home(job ^ 1), None);
        let other = JobOrigin {
            home: PeerId::random(),
            ..origin
        };
        assert_eq!(other.first_home(job), None);
        assert_ne!(JobOrigin::new(home).id(), job, "a fresh nonce each time");
    }
}

//! The revocations a node of a closed grid knows: checked, bounded in
//! count, kept in its state directory across restarts, and handed on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use libp2p::PeerId;
use serde_bytes::ByteBuf;

use super::credential::{
    CredentialError, CredentialId, GridPublicKey, MAX_REVOCATION_BYTES, Revocation,
    RevocationTarget, read_bounded,
};

/// The most revocations kept. Past it the one that would expire first
/// makes room (a grid that must revoke more live credentials than this
/// needs a new grid key).
pub const MAX_REVOCATIONS: usize = 4096;

/// The file in the state directory that holds them.
pub const REVOCATIONS_FILE: &str = "revocations.cbor";

/// The longest revocations file read, and the longest frame of them.
pub const MAX_REVOCATIONS_BYTES: usize = MAX_REVOCATIONS * (MAX_REVOCATION_BYTES + 8);

/// The revocations known, one per target.
#[derive(Debug)]
pub struct Revocations {
    grid: GridPublicKey,
    by_target: HashMap<RevocationTarget, Revocation>,
    file: Option<PathBuf>,
}

impl Revocations {
    /// The revocations of `grid` kept in `state_dir` (none if there is no
    /// state directory or file). A file that does not decode is reported
    /// and replaced at the next change; revocations in it that fail their
    /// check are dropped.
    pub fn load(grid: GridPublicKey, state_dir: Option<&Path>) -> Revocations {
        let file = state_dir.map(|d| d.join(REVOCATIONS_FILE));
        let mut list = Revocations {
            grid,
            by_target: HashMap::new(),
            file: file.clone(),
        };
        if let Some(path) = file.filter(|p| p.exists()) {
            match read_bounded(&path, MAX_REVOCATIONS_BYTES).and_then(|bytes| {
                crate::wire::decode::<Vec<ByteBuf>>(&bytes)
                    .map_err(|e| CredentialError::Malformed(e.to_string()))
            }) {
                Ok(items) => {
                    let now = super::credential::unix_now();
                    for item in items {
                        if let Ok(revocation) = Revocation::from_bytes(&item, &grid) {
                            list.insert(revocation, now);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "revocations file unreadable; starting without it");
                }
            }
        }
        list
    }

    /// How many are kept.
    pub fn len(&self) -> usize {
        self.by_target.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.by_target.is_empty()
    }

    /// Whether a revocation names `peer` or credential `id`.
    pub fn revokes(&self, peer: &PeerId, id: &CredentialId) -> bool {
        self.by_target.contains_key(&RevocationTarget::Peer(*peer))
            || self
                .by_target
                .contains_key(&RevocationTarget::Credential(*id))
    }

    /// Adds a checked revocation; returns whether it was new (and so must
    /// be passed on). One that is past its `until` is not kept.
    pub fn insert(&mut self, revocation: Revocation, now: u64) -> bool {
        let body = revocation.body();
        if body.grid != self.grid || body.until <= now {
            return false;
        }
        if self.by_target.contains_key(&body.target) {
            return false;
        }
        if self.by_target.len() >= MAX_REVOCATIONS {
            self.prune(now);
        }
        if self.by_target.len() >= MAX_REVOCATIONS
            && let Some(first) = self
                .by_target
                .iter()
                .min_by_key(|(_, r)| r.body().until)
                .map(|(t, _)| *t)
        {
            self.by_target.remove(&first);
        }
        self.by_target.insert(body.target, revocation);
        true
    }

    /// Forgets revocations past their `until`.
    pub fn prune(&mut self, now: u64) {
        self.by_target.retain(|_, r| r.body().until > now);
    }

    /// Every revocation kept, encoded, for a peer that connects.
    pub fn encoded(&self) -> Vec<Vec<u8>> {
        self.by_target.values().map(Revocation::to_bytes).collect()
    }

    /// Writes them to the state directory's file (a temporary file
    /// renamed, so that a crash leaves the old or the new list).
    pub fn save(&self) -> Result<(), CredentialError> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let file_error = |e: std::io::Error| CredentialError::File {
            path: path.clone(),
            reason: e.to_string(),
        };
        let items: Vec<ByteBuf> = self.encoded().into_iter().map(ByteBuf::from).collect();
        let mut bytes = Vec::new();
        ciborium::into_writer(&items, &mut bytes)
            .map_err(|e| CredentialError::Malformed(e.to_string()))?;
        let tmp = path.with_extension("cbor.tmp");
        crate::identity::write_private_replacing(path, &tmp, &bytes).map_err(file_error)
    }
}

#[cfg(test)]
mod tests {
    use super::super::credential::GridKey;
    use super::*;

    #[test]
    fn revocations_survive_a_restart_and_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let grid = GridKey::generate();
        let now = super::super::credential::unix_now();
        let mut list = Revocations::load(grid.public(), Some(dir.path()));
        let peer = PeerId::random();
        assert!(list.insert(grid.revoke(RevocationTarget::Peer(peer), u64::MAX), now));
        assert!(!list.insert(grid.revoke(RevocationTarget::Peer(peer), u64::MAX), now));
        // Past its time: not kept.
        assert!(!list.insert(
            grid.revoke(RevocationTarget::Peer(PeerId::random()), now),
            now
        ));
        list.save().unwrap();
        let again = Revocations::load(grid.public(), Some(dir.path()));
        assert_eq!(again.len(), 1);
        assert!(again.revokes(&peer, &"00000000000000000000000000000000".parse().unwrap()));
        // Another grid's list does not take them.
        assert!(Revocations::load(GridKey::generate().public(), Some(dir.path())).is_empty());

        let mut full = Revocations::load(grid.public(), None);
        for i in 0..MAX_REVOCATIONS as u64 + 10 {
            full.insert(
                grid.revoke(RevocationTarget::Peer(PeerId::random()), now + 100 + i),
                now,
            );
        }
        assert_eq!(full.len(), MAX_REVOCATIONS);
    }
}

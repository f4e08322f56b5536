//! The node's Network of Favors ledger in the store (see
//! `zorilla_core::favours`), so that a restart loses no balance, and the
//! nodes it avoids as a home (see `zorilla_core::runs::Avoided`), so that
//! a restart forgets no liar: each written whole when it changed, read
//! back when the node starts.

use redb::ReadableTable;
use zorilla_core::favours::MAX_CONSUMERS;
use zorilla_core::runs::MAX_AVOIDED;
use zorilla_overlay::PeerId;

use super::db::Store;
use super::schema::{AVOIDED, FAVOURS, StoreError};

impl Store {
    /// Replaces the stored accounts with `accounts` (consumer, favours
    /// received, favours given). Not kept for later if the disk cannot be
    /// written: the next change writes them all again.
    pub(crate) fn put_favours<'a>(
        &self,
        accounts: impl Iterator<Item = (&'a PeerId, u64, u64)>,
    ) -> Result<(), StoreError> {
        self.write_now(|tx| {
            let mut table = tx.open_table(FAVOURS)?;
            table.retain(|_, _| false)?;
            for (peer, received, given) in accounts.take(MAX_CONSUMERS) {
                table.insert(peer.to_string().as_str(), (received, given))?;
            }
            Ok(true)
        })
    }

    /// The stored accounts (at most [`MAX_CONSUMERS`]); a consumer whose
    /// name is not a peer id is skipped.
    pub(crate) fn favours(&self) -> Result<Vec<(PeerId, u64, u64)>, StoreError> {
        self.read(|tx| {
            let table = tx.open_table(FAVOURS)?;
            let mut out = Vec::new();
            for entry in table.iter()?.take(MAX_CONSUMERS) {
                let (key, value) = entry?;
                let (received, given) = value.value();
                if let Ok(peer) = key.value().parse::<PeerId>() {
                    out.push((peer, received, given));
                }
            }
            Ok(out)
        })
    }

    /// Replaces the stored avoided nodes with `nodes` (peer, when it was
    /// found out in Unix milliseconds).
    pub(crate) fn put_avoided(
        &self,
        nodes: impl Iterator<Item = (PeerId, u64)>,
    ) -> Result<(), StoreError> {
        self.write_now(|tx| {
            let mut table = tx.open_table(AVOIDED)?;
            table.retain(|_, _| false)?;
            for (peer, at) in nodes.take(MAX_AVOIDED) {
                table.insert(peer.to_string().as_str(), at)?;
            }
            Ok(true)
        })
    }

    /// The stored avoided nodes (at most [`MAX_AVOIDED`]), the one found
    /// out longest ago first; a name that is not a peer id is skipped.
    pub(crate) fn avoided(&self) -> Result<Vec<PeerId>, StoreError> {
        self.read(|tx| {
            let table = tx.open_table(AVOIDED)?;
            let mut out = Vec::new();
            for entry in table.iter()?.take(MAX_AVOIDED) {
                let (key, value) = entry?;
                if let Ok(peer) = key.value().parse::<PeerId>() {
                    out.push((value.value(), peer));
                }
            }
            out.sort();
            Ok(out.into_iter().map(|(_, peer)| peer).collect())
        })
    }
}

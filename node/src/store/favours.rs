//! The node's Network of Favors ledger in the store (see
//! `zorilla_core::favours`), so that a restart loses no balance: written
//! whole when it changed, read back when the node starts.

use redb::ReadableTable;
use zorilla_core::favours::MAX_CONSUMERS;
use zorilla_overlay::PeerId;

use super::db::Store;
use super::schema::{FAVOURS, StoreError};

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
}

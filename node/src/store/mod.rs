//! Durable state of a node in redb: the jobs it is home to, the files of
//! those jobs (module and inputs, by SHA-256), and the logs and outputs
//! collected from their workers. A submission is committed before the node
//! acknowledges it, and every later change before the node acts on it, so
//! a node killed at any point comes back with everything it accepted.
//!
//! A disk that cannot be written (full, failing) does not stop the node for
//! good: see [`Store`]. While it cannot, changes of accepted jobs wait in
//! memory (bounded) and new jobs are refused.
//!
//! Log chunks are kept as they arrived, with their arrival time beside them
//! (its own table, so that databases written before it still read): the
//! status page shows when each line came.
//!
//! Output files are not in the database: each is a file of its own under
//! `outputs/<job>/<sha256 of its name>` beside it, written at the offset a
//! block names (so a block costs its own bytes, whatever the file's size),
//! and the database holds only which names a job has
//! ([`OUTPUT_FILES`](schema::OUTPUT_FILES)). A file's size is its length on disk. Logs and
//! outputs are written by a thread of their own ([`Writer`]), many at a
//! time in one transaction, never by the node's event loop.
//!
//! Parts: [`schema`] (tables, records, errors), [`db`] (the database, its
//! transactions, and writes that wait for a disk that failed), [`jobs`],
//! [`logs`] and [`outputs`] (what the node stores of each), [`favours`]
//! (the node's Network of Favors balances), [`files`] (the
//! output files beside the database), [`writer`] (the thread that writes
//! logs and outputs).

use std::path::Path;

use redb::Database;

pub(crate) mod checkpoints;
mod db;
mod favours;
mod files;
mod jobs;
mod logs;
mod outputs;
mod schema;
#[cfg(test)]
pub(crate) mod tests;
mod writer;

pub(crate) use db::Store;
pub(crate) use schema::{FileRef, JobRecord, StoreError, StoredPeer, decode_record, unix_ms};
pub use writer::bench_append;
pub(crate) use writer::{Append, Writer};

pub(crate) use db::CACHE_BYTES;
use db::Opener;

impl Store {
    /// Opens (or creates) the database at `path`, with a page cache of
    /// [`CACHE_BYTES`].
    pub(crate) fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_with_cache(path, CACHE_BYTES)
    }

    /// Opens (or creates) the database at `path`, with a page cache of
    /// `cache_bytes` (see [`CACHE_BYTES`]).
    pub(crate) fn open_with_cache(path: &Path, cache_bytes: usize) -> Result<Store, StoreError> {
        let file = path.to_owned();
        Store::with_opener(
            path,
            Box::new(move || -> Result<Database, redb::Error> {
                Ok(redb::Builder::new()
                    .set_cache_size(cache_bytes)
                    .create(&file)?)
            }),
        )
    }

    /// Opens the database with `open`, its tables created and an older
    /// version's outputs moved to files; a disk that cannot be written
    /// leaves the store unwritable rather than failing (it may be full at
    /// start).
    fn with_opener(path: &Path, open: Opener) -> Result<Store, StoreError> {
        let store = Store::new(path, open)?;
        match store
            .create_tables()
            .and_then(|()| store.move_old_outputs())
        {
            Ok(()) | Err(StoreError::Unwritable(_)) => Ok(store),
            Err(e) => Err(e),
        }
    }
}

//! The database itself and a disk that cannot be written: [`Store`] opens
//! redb, runs read and write transactions, and when a write fails for the
//! disk keeps the accepted writes ([`Deferred`]) in memory, bounded, until
//! [`Store::retry`] can write them. The parts of the store that read and
//! write jobs, logs and outputs build on these transactions.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redb::{Database, ReadTransaction, ReadableDatabase, ReadableTable, WriteTransaction};

use super::files::write_output;
use super::schema::{
    AVOIDED, BLOBS, FAVOURS, JOBS, JobRecord, LOG_TIMES, LOGS, META, OUTPUT_FILES, OUTPUTS,
    StoreError, classify, err, unix_ms,
};

/// redb's page cache (and write buffer, at most half of it). Every page
/// written or read goes into it until it is full, so it is memory the node
/// holds for good: its default, 1 GiB, grew the home's memory with each
/// finished job and with every flood of output; 16 MiB still took 8,000
/// jobs or one flood of logs to fill. The file's pages are in the
/// operating system's page cache anyway: this one only saves a read call
/// per page of the few tables' upper levels, which 4 MiB holds.
pub(crate) const CACHE_BYTES: usize = 4 * 1024 * 1024;
/// The most bytes of accepted writes (job records, log chunks, output
/// blocks) kept in memory while the disk cannot be written. Past it, log
/// and output writes are refused (the worker is told so); a job's record
/// is always kept, one per job, the newest.
pub(super) const MAX_DEFERRED_BYTES: usize = 64 * 1024 * 1024;
/// The first pause before the store tries a disk that failed again; it
/// doubles with each failed try, up to [`RETRY_MAX`].
pub(super) const RETRY_MIN: Duration = Duration::from_secs(1);
/// The longest pause between two tries of a failed disk.
pub(super) const RETRY_MAX: Duration = Duration::from_secs(5);
/// The free space a failed disk must have, besides twice what waits to be
/// written, before the store tries it again (a try reopens, and so
/// repairs, the database).
const MIN_FREE_BYTES: u64 = 1024 * 1024;

/// Opens the database again (after a failed write, redb refuses every
/// later call until it is closed and opened again).
pub(super) type Opener = Box<dyn Fn() -> Result<Database, redb::Error> + Send + Sync>;

/// A write of data the node has accepted, waiting for the disk.
pub(super) enum Deferred {
    Job {
        id: u64,
        bytes: Vec<u8>,
    },
    Log {
        job: u64,
        chunk: Vec<u8>,
        at_ms: u64,
    },
    Output {
        job: u64,
        name: String,
        offset: u64,
        data: Vec<u8>,
        /// The file's last block: its bytes go to the disk before the
        /// write counts as done.
        last: bool,
    },
}

impl Deferred {
    pub(super) fn bytes(&self) -> usize {
        match self {
            Deferred::Job { bytes, .. } => bytes.len(),
            Deferred::Log { chunk, .. } => chunk.len(),
            Deferred::Output { name, data, .. } => name.len() + data.len(),
        }
    }

    /// Makes the write; returns whether it changed the database (an
    /// output block that continues a file changes only the file).
    pub(super) fn apply(&self, tx: &WriteTransaction, outputs: &Path) -> Result<bool, redb::Error> {
        match self {
            Deferred::Job { id, bytes } => {
                tx.open_table(JOBS)?.insert(*id, bytes.as_slice())?;
            }
            Deferred::Log { job, chunk, at_ms } => {
                let mut table = tx.open_table(LOGS)?;
                let next = table
                    .range((*job, 0)..=(*job, u64::MAX))?
                    .next_back()
                    .transpose()?
                    .map_or(0, |(k, _)| k.value().1 + 1);
                table.insert((*job, next), chunk.as_slice())?;
                tx.open_table(LOG_TIMES)?.insert((*job, next), *at_ms)?;
            }
            Deferred::Output {
                job,
                name,
                offset,
                data,
                last,
            } => {
                let registered = *offset == 0;
                if registered {
                    tx.open_table(OUTPUT_FILES)?
                        .insert((*job, name.as_str()), 0)?;
                }
                write_output(outputs, *job, name, *offset, data, *last)?;
                return Ok(registered);
            }
        }
        Ok(true)
    }
}

/// Why the disk cannot be written, and when to try it again.
struct Fault {
    reason: String,
    next_try: Instant,
    pause: Duration,
}

/// The store's side of a failed disk.
#[derive(Default)]
struct Health {
    fault: Option<Fault>,
    /// Accepted writes waiting for the disk, in order (not empty only
    /// while there is a fault).
    deferred: VecDeque<Deferred>,
    deferred_bytes: usize,
}

impl Health {
    /// Notes a failed try: the next one after a longer pause.
    fn failed(&mut self, reason: String) {
        let pause = self
            .fault
            .as_ref()
            .map_or(RETRY_MIN, |f| (f.pause * 2).min(RETRY_MAX));
        if self.fault.is_none() {
            tracing::error!(
                "cannot write the state database: {reason}; the node accepts no jobs until it can"
            );
        }
        self.fault = Some(Fault {
            reason,
            next_try: Instant::now() + pause,
            pause,
        });
    }

    fn reason(&self) -> String {
        self.fault
            .as_ref()
            .map_or_else(|| "closed".into(), |f| f.reason.clone())
    }
}

/// The node's database. Reads and writes may come from several threads
/// (the loop writes; the status page reads).
///
/// A write that fails for the disk (full, failing) does not stop the node:
/// the store marks itself unwritable ([`Store::unwritable`]), reopens the
/// database (redb refuses everything after a failed write until then) so
/// that reads go on, and keeps the accepted writes that could not be made
/// (job records, log chunks, output blocks; at most
/// [`MAX_DEFERRED_BYTES`]) in memory. [`Store::retry`], called by the loop
/// every second and before each write, tries the disk again after a pause
/// of [`RETRY_MIN`] to [`RETRY_MAX`] once it has room, writes what waited,
/// and the store is writable again. New jobs are never deferred: a
/// submission is acknowledged only once it is on disk.
pub(crate) struct Store {
    /// The database's directory, whose free space says when to try again.
    dir: PathBuf,
    /// Where output files are (`outputs/` beside the database).
    pub(super) outputs: PathBuf,
    open: Opener,
    /// `None` while the database could not be reopened.
    db: RwLock<Option<Database>>,
    /// Locked before `db` when both are (never the other way round).
    health: Mutex<Health>,
    /// Whether `health` holds a fault, for a check without the lock.
    unwritable: AtomicBool,
}

impl Store {
    /// The store of the database `open` opens, at `path` (whose directory
    /// holds the output files too).
    pub(super) fn new(path: &Path, open: Opener) -> Result<Store, StoreError> {
        let db = open().map_err(classify)?;
        let dir = path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_owned);
        Ok(Store {
            outputs: dir.join("outputs"),
            dir,
            open,
            db: RwLock::new(Some(db)),
            health: Mutex::new(Health::default()),
            unwritable: AtomicBool::new(false),
        })
    }

    /// Creates the tables that do not exist yet (in a new database, or in
    /// one of an older version).
    pub(super) fn create_tables(&self) -> Result<(), StoreError> {
        self.write_now(|tx| {
            tx.open_table(JOBS)?;
            tx.open_table(BLOBS)?;
            tx.open_table(LOGS)?;
            tx.open_table(OUTPUTS)?;
            tx.open_table(LOG_TIMES)?;
            tx.open_table(META)?;
            tx.open_table(OUTPUT_FILES)?;
            tx.open_table(FAVOURS)?;
            tx.open_table(AVOIDED)?;
            Ok(true)
        })
    }

    /// How many writes waiting for the disk `which` picks.
    #[cfg(test)]
    pub(super) fn deferred_count(&self, which: impl Fn(&Deferred) -> bool) -> usize {
        self.lock_health()
            .deferred
            .iter()
            .filter(|d| which(d))
            .count()
    }

    /// Why the disk cannot be written now, if it cannot.
    pub(crate) fn unwritable(&self) -> Option<String> {
        if !self.unwritable.load(Ordering::Acquire) {
            return None;
        }
        self.lock_health().fault.as_ref().map(|f| f.reason.clone())
    }

    fn lock_health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tries a disk that could not be written again, if the pause since the
    /// last try is over and it has room: reopens the database, writes what
    /// waited (and a mark, so that an empty queue tries the disk too).
    /// Returns whether the store is writable.
    pub(crate) fn retry(&self) -> bool {
        if !self.unwritable.load(Ordering::Acquire) {
            return true;
        }
        let mut health = self.lock_health();
        let Some(fault) = &health.fault else {
            return true;
        };
        if Instant::now() < fault.next_try {
            return false;
        }
        let needed = MIN_FREE_BYTES.saturating_add(2 * health.deferred_bytes as u64);
        if let Some(free) = free_bytes(&self.dir)
            && free < needed
        {
            let reason = fault.reason.clone();
            health.failed(reason);
            return false;
        }
        if let Err(e) = self.reopen() {
            health.failed(reason_of(&e));
            return false;
        }
        let outputs = &self.outputs;
        let result = self.transact(|tx| {
            for item in &health.deferred {
                item.apply(tx, outputs)?;
            }
            tx.open_table(META)?.insert("written", unix_ms())?;
            Ok(true)
        });
        match result {
            Ok(()) => {
                tracing::info!(
                    writes = health.deferred.len(),
                    bytes = health.deferred_bytes,
                    "the state database can be written again; what waited is written"
                );
                health.deferred.clear();
                health.deferred_bytes = 0;
                health.fault = None;
                self.unwritable.store(false, Ordering::Release);
                true
            }
            Err(e) => {
                health.failed(reason_of(&e));
                // Reads go on from a reopened database.
                let _ = self.reopen();
                false
            }
        }
    }

    /// Closes the database and opens it again (redb repairs it if a write
    /// was cut short). The database is `None` if that fails.
    fn reopen(&self) -> Result<(), StoreError> {
        let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
        // Closed first: redb refuses to open a file it has open.
        drop(db.take());
        *db = Some((self.open)().map_err(classify)?);
        Ok(())
    }

    /// Runs `f` in a read transaction.
    pub(super) fn read<T>(
        &self,
        f: impl FnOnce(&ReadTransaction) -> Result<T, redb::Error>,
    ) -> Result<T, StoreError> {
        let result = {
            let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
            db.as_ref().map(|db| {
                db.begin_read()
                    .map_err(redb::Error::from)
                    .and_then(|tx| f(&tx))
                    .map_err(classify)
            })
        };
        // The health lock is taken only once the database's is released.
        result.unwrap_or_else(|| Err(StoreError::Unwritable(self.lock_health().reason())))
    }

    /// Runs `f` in a write transaction and commits it if `f` says it
    /// changed something (a commit costs a sync of the disk), without
    /// looking at or changing the store's health.
    fn transact(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<bool, redb::Error>,
    ) -> Result<(), StoreError> {
        let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
        let Some(db) = db.as_ref() else {
            return Err(StoreError::Unwritable("the database is closed".into()));
        };
        let tx = db.begin_write().map_err(|e| classify(e.into()))?;
        if f(&tx).map_err(classify)? {
            tx.commit().map_err(|e| classify(e.into()))
        } else {
            tx.abort().map_err(|e| classify(e.into()))
        }
    }

    /// Writes now if the disk can be written (trying it again first if it
    /// could not); a failure for the disk marks the store unwritable.
    pub(super) fn write_now(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<bool, redb::Error>,
    ) -> Result<(), StoreError> {
        if !self.retry() {
            return Err(StoreError::Unwritable(self.lock_health().reason()));
        }
        let result = self.transact(f);
        if let Err(StoreError::Unwritable(reason)) = &result {
            self.lock_health().failed(reason.clone());
            self.unwritable.store(true, Ordering::Release);
            // redb refuses reads too after a failed write: reopen for them.
            if let Err(e) = self.reopen() {
                tracing::warn!("cannot reopen the state database: {e}");
            }
        }
        result
    }

    /// Writes accepted data now, or keeps it for when the disk can be
    /// written again (refused only past [`MAX_DEFERRED_BYTES`]).
    pub(super) fn write_or_defer(&self, item: Deferred) -> Result<(), StoreError> {
        match self.write_now(|tx| item.apply(tx, &self.outputs)) {
            Err(StoreError::Unwritable(reason)) => self.defer(item, reason),
            other => other,
        }
    }

    /// [`Store::write_or_defer`] for many writes at once, in one
    /// transaction (one commit, one sync of the database for all of them);
    /// the result of each, in order.
    pub(super) fn write_or_defer_all(&self, items: Vec<Deferred>) -> Vec<Result<(), StoreError>> {
        let result = self.write_now(|tx| {
            let mut changed = false;
            for item in &items {
                changed |= item.apply(tx, &self.outputs)?;
            }
            Ok(changed)
        });
        match result {
            Ok(()) => items.iter().map(|_| Ok(())).collect(),
            // Output blocks already written go again: the same bytes at the
            // same place.
            Err(StoreError::Unwritable(reason)) => items
                .into_iter()
                .map(|item| self.defer(item, reason.clone()))
                .collect(),
            Err(e) => items.iter().map(|_| Err(e.clone())).collect(),
        }
    }

    fn defer(&self, item: Deferred, reason: String) -> Result<(), StoreError> {
        let mut health = self.lock_health();
        let health = &mut *health;
        if let Deferred::Job { id, .. } = &item {
            // Only the newest record of a job matters.
            let mut freed = 0;
            health.deferred.retain(|d| match d {
                Deferred::Job { id: other, bytes } if other == id => {
                    freed += bytes.len();
                    false
                }
                _ => true,
            });
            health.deferred_bytes -= freed;
        } else if health.deferred_bytes + item.bytes() > MAX_DEFERRED_BYTES {
            return Err(StoreError::Unwritable(reason));
        }
        health.deferred_bytes += item.bytes();
        health.deferred.push_back(item);
        Ok(())
    }

    /// Job records waiting for the disk, newest per job.
    pub(super) fn deferred_jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        let health = self.lock_health();
        health
            .deferred
            .iter()
            .filter_map(|d| match d {
                Deferred::Job { bytes, .. } => {
                    Some(ciborium::from_reader(bytes.as_slice()).map_err(err))
                }
                _ => None,
            })
            .collect()
    }
}

/// The reason in an error of the disk.
fn reason_of(e: &StoreError) -> String {
    match e {
        StoreError::Unwritable(reason) | StoreError::Failed(reason) => reason.clone(),
    }
}

/// Bytes free for this user on the file system holding `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

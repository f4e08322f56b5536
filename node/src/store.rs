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
//! ([`OUTPUT_FILES`]). A file's size is its length on disk. Logs and
//! outputs are written by a thread of their own ([`Writer`]), many at a
//! time in one transaction, never by the node's event loop.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redb::{
    Database, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction,
};
use serde::{Deserialize, Serialize};

use sha2::{Digest, Sha256};

use crate::protocol::{JobPhase, JobRequest, LogChunk, RankStatus};

mod writer;

pub use writer::bench_append;
pub(crate) use writer::{Append, Writer};

const JOBS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("jobs");
const BLOBS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("blobs");
const LOGS: TableDefinition<'_, (u64, u64), &[u8]> = TableDefinition::new("logs");
/// Output files of older versions, whole in one value: moved to files
/// (see [`OUTPUT_FILES`]) when the store opens.
const OUTPUTS: TableDefinition<'_, (u64, &str), &[u8]> = TableDefinition::new("outputs");
/// The output files of each job, by name (`rank/path`); the bytes are in
/// the file [`output_path`] names. The value is unused (0).
const OUTPUT_FILES: TableDefinition<'_, (u64, &str), u64> = TableDefinition::new("output_files");
/// When each log chunk arrived, in milliseconds since the Unix epoch; same
/// keys as [`LOGS`].
const LOG_TIMES: TableDefinition<'_, (u64, u64), u64> = TableDefinition::new("log_times");
/// The store's own marks: when it last wrote after the disk failed.
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");

/// A content-addressed file of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileRef {
    pub(crate) name: String,
    pub(crate) sha256: String,
    pub(crate) size: u64,
}

/// The primary copy of a job, at its home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobRecord {
    pub(crate) id: u64,
    pub(crate) phase: JobPhase,
    pub(crate) reason: String,
    pub(crate) request: JobRequest,
    pub(crate) module: FileRef,
    pub(crate) inputs: Vec<FileRef>,
    pub(crate) ranks: std::collections::BTreeMap<u32, RankStatus>,
    /// When the job was accepted, seconds since the Unix epoch.
    #[serde(default)]
    pub(crate) submitted_unix: u64,
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl JobRecord {
    /// Moves the job to `phase` if that is forward; returns whether it moved.
    /// A job that ends has no rank running any more: a rank without an
    /// outcome gets "stopped with the job" (callers that know better, such
    /// as a restarted home, say so first with [`close_ranks`]).
    ///
    /// [`close_ranks`]: JobRecord::close_ranks
    pub(crate) fn advance(&mut self, phase: JobPhase, reason: impl Into<String>) -> bool {
        if phase <= self.phase || self.phase.is_terminal() {
            return false;
        }
        self.phase = phase;
        self.reason = reason.into();
        if phase.is_terminal() {
            self.close_ranks("stopped with the job");
        }
        true
    }

    /// Gives every rank still counted as running the outcome `outcome`.
    pub(crate) fn close_ranks(&mut self, outcome: &str) {
        for rank in self.ranks.values_mut() {
            rank.outcome.get_or_insert_with(|| outcome.to_string());
        }
    }
}

/// Why the store could not do something. Callers act on the kind: a disk
/// that cannot be written refuses new work with the reason, anything else
/// is an internal error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StoreError {
    /// The disk cannot be written (full, or failing), with the reason the
    /// system gave. The store tries again by itself (see [`Store::retry`]).
    #[error("this node cannot write to its disk ({0})")]
    Unwritable(String),
    /// Anything else: a record that does not decode, a bug.
    #[error("state database: {0}")]
    Failed(String),
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Failed(e.to_string())
}

/// A redb error as the store's: errors of the disk are [`StoreError::Unwritable`].
fn classify(e: redb::Error) -> StoreError {
    match e {
        redb::Error::Io(io) => StoreError::Unwritable(io_reason(&io)),
        redb::Error::PreviousIo | redb::Error::DatabaseClosed => {
            StoreError::Unwritable("an earlier write to it failed".into())
        }
        other => StoreError::Failed(other.to_string()),
    }
}

/// An I/O error in words, without Rust's " (os error 28)".
fn io_reason(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::StorageFull {
        return "No space left on device".into();
    }
    let text = e.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

fn corrupt(e: impl std::fmt::Display) -> redb::Error {
    redb::Error::Corrupted(e.to_string())
}

/// Decodes a record read back from the database (a file anyone with
/// access to the state directory could have changed): declared lengths are
/// checked against the bytes there before anything is allocated.
fn decode_stored<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, redb::Error> {
    zorilla_overlay::cbor::check_lengths(bytes).map_err(corrupt)?;
    ciborium::from_reader(bytes).map_err(corrupt)
}

/// [`decode_stored`] for callers outside a transaction (and the fuzz
/// harness).
pub(crate) fn decode_record<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    decode_stored(bytes).map_err(err)
}

/// redb's page cache (and write buffer). Its default, 1 GiB, keeps every
/// page the node ever wrote or read in memory up to that size: the home's
/// memory grew with each finished job and after every flood of output.
const CACHE_BYTES: usize = 16 * 1024 * 1024;
/// The most bytes of accepted writes (job records, log chunks, output
/// blocks) kept in memory while the disk cannot be written. Past it, log
/// and output writes are refused (the worker is told so); a job's record
/// is always kept, one per job, the newest.
pub(crate) const MAX_DEFERRED_BYTES: usize = 64 * 1024 * 1024;
/// The first pause before the store tries a disk that failed again; it
/// doubles with each failed try, up to [`RETRY_MAX`].
pub(crate) const RETRY_MIN: Duration = Duration::from_secs(1);
/// The longest pause between two tries of a failed disk.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(5);
/// The free space a failed disk must have, besides twice what waits to be
/// written, before the store tries it again (a try reopens, and so
/// repairs, the database).
const MIN_FREE_BYTES: u64 = 1024 * 1024;

/// Opens the database again (after a failed write, redb refuses every
/// later call until it is closed and opened again).
type Opener = Box<dyn Fn() -> Result<Database, redb::Error> + Send + Sync>;

/// A write of data the node has accepted, waiting for the disk.
enum Deferred {
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
    fn bytes(&self) -> usize {
        match self {
            Deferred::Job { bytes, .. } => bytes.len(),
            Deferred::Log { chunk, .. } => chunk.len(),
            Deferred::Output { name, data, .. } => name.len() + data.len(),
        }
    }

    /// Makes the write; returns whether it changed the database (an
    /// output block that continues a file changes only the file).
    fn apply(&self, tx: &WriteTransaction, outputs: &Path) -> Result<bool, redb::Error> {
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

/// The file holding output `name` of `job` below the outputs directory:
/// named by the hash of the name, so that no name a worker sends becomes a
/// path.
fn output_path(outputs: &Path, job: u64, name: &str) -> PathBuf {
    let hash = Sha256::digest(name.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in hash {
        use std::fmt::Write;
        let _ = write!(hex, "{b:02x}");
    }
    outputs.join(job.to_string()).join(hex)
}

/// Opens an output file of the node's own, never through a link.
fn open_output(path: &Path, write: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .create(write)
        .truncate(false)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// Writes `data` at `offset` of an output file and cuts the file there (a
/// file sent again from 0 does not keep its old tail); the last block is
/// synced to the disk.
fn write_output(
    outputs: &Path,
    job: u64,
    name: &str,
    offset: u64,
    data: &[u8],
    last: bool,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let path = output_path(outputs, job, name);
    if offset == 0
        && let Some(dir) = path.parent()
    {
        std::fs::create_dir_all(dir)?;
    }
    let file = open_output(&path, true)?;
    file.write_all_at(data, offset)?;
    let end = offset.saturating_add(data.len() as u64);
    if file.metadata()?.len() != end {
        file.set_len(end)?;
    }
    if last {
        file.sync_data()?;
    }
    Ok(())
}

/// An output file a job has at its home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutputFile {
    /// `rank/path`.
    pub(crate) name: String,
    /// Its bytes so far.
    pub(crate) size: u64,
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
    outputs: PathBuf,
    open: Opener,
    /// `None` while the database could not be reopened.
    db: RwLock<Option<Database>>,
    /// Locked before `db` when both are (never the other way round).
    health: Mutex<Health>,
    /// Whether `health` holds a fault, for a check without the lock.
    unwritable: AtomicBool,
}

impl Store {
    /// Opens (or creates) the database at `path`.
    pub(crate) fn open(path: &Path) -> Result<Store, StoreError> {
        let file = path.to_owned();
        Store::with_opener(
            path,
            Box::new(move || -> Result<Database, redb::Error> {
                Ok(redb::Builder::new()
                    .set_cache_size(CACHE_BYTES)
                    .create(&file)?)
            }),
        )
    }

    /// Opens the database with `open`; a disk that cannot be written leaves
    /// the store unwritable rather than failing (it may be full at start).
    fn with_opener(path: &Path, open: Opener) -> Result<Store, StoreError> {
        let db = open().map_err(classify)?;
        let dir = path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_owned);
        let store = Store {
            outputs: dir.join("outputs"),
            dir,
            open,
            db: RwLock::new(Some(db)),
            health: Mutex::new(Health::default()),
            unwritable: AtomicBool::new(false),
        };
        let tables = store.write_now(|tx| {
            tx.open_table(JOBS)?;
            tx.open_table(BLOBS)?;
            tx.open_table(LOGS)?;
            tx.open_table(OUTPUTS)?;
            tx.open_table(LOG_TIMES)?;
            tx.open_table(META)?;
            tx.open_table(OUTPUT_FILES)?;
            Ok(true)
        });
        match tables.and_then(|()| store.move_old_outputs()) {
            Ok(()) | Err(StoreError::Unwritable(_)) => Ok(store),
            Err(e) => Err(e),
        }
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
    fn read<T>(
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
    fn write_now(
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
    fn write_or_defer(&self, item: Deferred) -> Result<(), StoreError> {
        match self.write_now(|tx| item.apply(tx, &self.outputs)) {
            Err(StoreError::Unwritable(reason)) => self.defer(item, reason),
            other => other,
        }
    }

    /// [`Store::write_or_defer`] for many writes at once, in one
    /// transaction (one commit, one sync of the database for all of them);
    /// the result of each, in order.
    fn write_or_defer_all(&self, items: Vec<Deferred>) -> Vec<Result<(), StoreError>> {
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
    fn deferred_jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
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

    /// Stores a job's record (kept in memory until the disk can be written
    /// if it cannot now).
    pub(crate) fn put_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        ciborium::into_writer(job, &mut bytes).map_err(err)?;
        self.write_or_defer(Deferred::Job { id: job.id, bytes })
    }

    /// Stores a new job and its files (by hash) in one transaction: one
    /// durable commit per submission, and a file already stored (the same
    /// module submitted again) is not written again. Never deferred: a job
    /// is accepted only once this returns `Ok`.
    pub(crate) fn put_submission(
        &self,
        job: &JobRecord,
        files: &[(&str, &[u8])],
    ) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        ciborium::into_writer(job, &mut bytes).map_err(err)?;
        self.write_now(|tx| {
            let mut blobs = tx.open_table(BLOBS)?;
            for (sha256, data) in files {
                if blobs.get(*sha256)?.is_none() {
                    blobs.insert(*sha256, *data)?;
                }
            }
            tx.open_table(JOBS)?.insert(job.id, bytes.as_slice())?;
            Ok(true)
        })
    }

    /// Every stored job (those whose newest record waits for the disk as
    /// that record).
    pub(crate) fn jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        let mut jobs: BTreeMap<u64, JobRecord> = self.read(|tx| {
            let table = tx.open_table(JOBS)?;
            let mut out = BTreeMap::new();
            for entry in table.iter()? {
                let (key, value) = entry?;
                let job: JobRecord = decode_stored(value.value())?;
                out.insert(key.value(), job);
            }
            Ok(out)
        })?;
        for job in self.deferred_jobs()? {
            jobs.insert(job.id, job);
        }
        Ok(jobs.into_values().collect())
    }

    /// One job's record.
    pub(crate) fn job(&self, id: u64) -> Result<Option<JobRecord>, StoreError> {
        if let Some(job) = self.deferred_jobs()?.into_iter().find(|j| j.id == id) {
            return Ok(Some(job));
        }
        self.read(|tx| {
            let table = tx.open_table(JOBS)?;
            let Some(value) = table.get(id)? else {
                return Ok(None);
            };
            Ok(Some(decode_stored(value.value())?))
        })
    }

    /// A block of a stored file: `len` bytes from `offset`.
    pub(crate) fn blob_block(
        &self,
        sha256: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(|tx| {
            let table = tx.open_table(BLOBS)?;
            Ok(table.get(sha256)?.map(|v| {
                let data = v.value();
                let start = (offset as usize).min(data.len());
                let end = start.saturating_add(len).min(data.len());
                data[start..end].to_vec()
            }))
        })
    }

    /// Appends a log chunk of a job (kept in memory until the disk can be
    /// written if it cannot now). The node appends through the [`Writer`].
    #[cfg(test)]
    pub(crate) fn append_log(&self, job: u64, chunk: &LogChunk) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        ciborium::into_writer(chunk, &mut bytes).map_err(err)?;
        self.write_or_defer(Deferred::Log {
            job,
            chunk: bytes,
            at_ms: unix_ms(),
        })
    }

    /// The newest log chunks of a job, oldest first, with when each arrived
    /// (milliseconds since the Unix epoch, 0 if not recorded): as many as
    /// hold `max_newlines` line ends, but at most about `max_bytes`.
    pub(crate) fn log_tail(
        &self,
        job: u64,
        max_newlines: usize,
        max_bytes: usize,
    ) -> Result<Vec<(u64, LogChunk)>, StoreError> {
        self.read(|tx| {
            let table = tx.open_table(LOGS)?;
            let times = tx.open_table(LOG_TIMES)?;
            let mut out = Vec::new();
            let (mut newlines, mut bytes) = (0, 0);
            for entry in table.range((job, 0)..=(job, u64::MAX))?.rev() {
                let (key, value) = entry?;
                let chunk: LogChunk = decode_stored(value.value())?;
                let at = times.get(key.value())?.map_or(0, |t| t.value());
                newlines += chunk.data.iter().filter(|b| **b == b'\n').count();
                bytes += chunk.data.len();
                out.push((at, chunk));
                if newlines > max_newlines || bytes >= max_bytes {
                    break;
                }
            }
            out.reverse();
            Ok(out)
        })
    }

    /// A job's log chunks from sequence number `from` on, as many as fit in
    /// `max_bytes` of data (at least one, so a reader always moves on), and
    /// the sequence number to ask for next. Chunks waiting for the disk
    /// come once they are written.
    pub(crate) fn logs_from(
        &self,
        job: u64,
        from: u64,
        max_bytes: usize,
    ) -> Result<(Vec<LogChunk>, u64), StoreError> {
        self.read(|tx| {
            let table = tx.open_table(LOGS)?;
            let mut out = Vec::new();
            let mut next = from;
            let mut bytes = 0usize;
            for entry in table.range((job, from)..=(job, u64::MAX))? {
                let (key, value) = entry?;
                let chunk: LogChunk = decode_stored(value.value())?;
                if !out.is_empty() && bytes + chunk.data.len() > max_bytes {
                    break;
                }
                bytes += chunk.data.len();
                next = key.value().1 + 1;
                out.push(chunk);
            }
            Ok((out, next))
        })
    }

    /// Writes `data` at `offset` of output file `name` of a job (`offset`
    /// 0 starts it afresh, so a resent file does not double), in O(`data`);
    /// kept in memory until the disk can be written if it cannot now.
    /// `last`: the file's last block, synced before this returns. The node
    /// appends through the [`Writer`], off the event loop.
    #[cfg(test)]
    pub(crate) fn append_output(
        &self,
        job: u64,
        name: &str,
        offset: u64,
        data: &[u8],
        last: bool,
    ) -> Result<(), StoreError> {
        self.write_or_defer(Deferred::Output {
            job,
            name: name.to_owned(),
            offset,
            data: data.to_vec(),
            last,
        })
    }

    /// A job's output files in name order after `after` (all of them for
    /// ""), at most `max`, and whether more follow. Blocks waiting for the
    /// disk are not counted until they are written.
    pub(crate) fn output_files(
        &self,
        job: u64,
        after: &str,
        max: usize,
    ) -> Result<(Vec<OutputFile>, bool), StoreError> {
        use std::ops::Bound;
        let names = self.read(|tx| {
            let table = tx.open_table(OUTPUT_FILES)?;
            let start = if after.is_empty() {
                Bound::Included((job, ""))
            } else {
                Bound::Excluded((job, after))
            };
            let mut names = Vec::new();
            for entry in table.range::<(u64, &str)>((start, Bound::Unbounded))? {
                let (key, _) = entry?;
                let (j, name) = key.value();
                if j != job || names.len() > max {
                    break;
                }
                names.push(name.to_owned());
            }
            Ok(names)
        })?;
        let more = names.len() > max;
        let files = names
            .into_iter()
            .take(max)
            .map(|name| {
                let size = std::fs::symlink_metadata(output_path(&self.outputs, job, &name))
                    .map_or(0, |m| m.len());
                OutputFile { name, size }
            })
            .collect();
        Ok((files, more))
    }

    /// Bytes of all of a job's output files.
    pub(crate) fn output_bytes(&self, job: u64) -> Result<u64, StoreError> {
        let (files, _) = self.output_files(job, "", usize::MAX - 1)?;
        Ok(files.iter().map(|f| f.size).sum())
    }

    /// Up to `len` bytes of output file `name` of a job from `offset`, and
    /// the file's size; `None` if the job has no such file.
    pub(crate) fn output_block(
        &self,
        job: u64,
        name: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<(Vec<u8>, u64)>, StoreError> {
        use std::os::unix::fs::FileExt;
        let known = self.read(|tx| Ok(tx.open_table(OUTPUT_FILES)?.get((job, name))?.is_some()))?;
        if !known {
            return Ok(None);
        }
        let file = match open_output(&output_path(&self.outputs, job, name), false) {
            Ok(file) => file,
            // Named, but its first block waits for the disk.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some((Vec::new(), 0))),
            Err(e) => return Err(StoreError::Failed(io_reason(&e))),
        };
        let size = file.metadata().map_err(|e| err(io_reason(&e)))?.len();
        let want = (len as u64).min(size.saturating_sub(offset)) as usize;
        let mut data = vec![0; want];
        let mut got = 0;
        while got < want {
            match file.read_at(&mut data[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StoreError::Failed(io_reason(&e))),
            }
        }
        data.truncate(got);
        Ok(Some((data, size)))
    }

    /// Moves output files of an older version's database (whole values in
    /// [`OUTPUTS`]) to files, once.
    fn move_old_outputs(&self) -> Result<(), StoreError> {
        let any = self.read(|tx| Ok(tx.open_table(OUTPUTS)?.first()?.is_some()))?;
        if !any {
            return Ok(());
        }
        let outputs = &self.outputs;
        self.write_now(|tx| {
            let mut old = tx.open_table(OUTPUTS)?;
            let mut files = tx.open_table(OUTPUT_FILES)?;
            while let Some((key, value)) = old.pop_first()? {
                let (job, name) = key.value();
                write_output(outputs, job, name, 0, value.value(), true)?;
                files.insert((job, name), 0)?;
            }
            Ok(true)
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let job = JobRecord {
            id: 7,
            phase: JobPhase::Running,
            reason: "running".into(),
            request: JobRequest::default(),
            module: FileRef {
                name: "m".into(),
                sha256: "ab".into(),
                size: 3,
            },
            inputs: vec![],
            ranks: Default::default(),
            submitted_unix: 0,
        };
        {
            let store = Store::open(&path).unwrap();
            store.put_submission(&job, &[("ab", b"xyz")]).unwrap();
            for data in [b"one".to_vec(), b"two".to_vec()] {
                store
                    .append_log(
                        7,
                        &LogChunk {
                            rank: 0,
                            stderr: false,
                            data,
                        },
                    )
                    .unwrap();
            }
            store.append_output(7, "0/out", 0, b"he", false).unwrap();
            store.append_output(7, "0/out", 2, b"llo", true).unwrap();
            store.append_output(8, "0/out", 0, b"other", true).unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.jobs().unwrap(), vec![job]);
        assert_eq!(store.blob_block("ab", 1, 10).unwrap().unwrap(), b"yz");
        let (chunks, next) = store.logs_from(7, 0, usize::MAX).unwrap();
        let logs: Vec<Vec<u8>> = chunks.into_iter().map(|c| c.data).collect();
        assert_eq!(logs, vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(next, 2);
        // Pages: at least one chunk each, then on from `next`.
        let (page, next) = store.logs_from(7, 0, 1).unwrap();
        assert_eq!((page.len(), next), (1, 1));
        let (page, next) = store.logs_from(7, next, 1).unwrap();
        assert_eq!((page[0].data.as_slice(), next), (b"two".as_slice(), 2));
        assert!(store.logs_from(7, next, 1).unwrap().0.is_empty());
        let (files, more) = store.output_files(7, "", 10).unwrap();
        assert_eq!(
            (files, more),
            (
                vec![OutputFile {
                    name: "0/out".into(),
                    size: 5
                }],
                false
            )
        );
        assert_eq!(
            store.output_block(7, "0/out", 0, 100).unwrap(),
            Some((b"hello".to_vec(), 5))
        );
        assert_eq!(store.output_block(7, "0/other", 0, 100).unwrap(), None);
    }

    /// Bytes of the files below `dir`.
    fn tree_size(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let meta = e.metadata().unwrap();
                if meta.is_dir() {
                    tree_size(&e.path())
                } else {
                    meta.len()
                }
            })
            .sum()
    }

    /// An output of many blocks costs its own size on disk (each block is
    /// written where it goes, not the whole file again), reads back in
    /// blocks, and starts afresh when sent again from 0.
    #[test]
    fn outputs_grow_by_their_blocks_and_read_back_in_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.redb")).unwrap();
        let empty = tree_size(dir.path());
        let block: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
        let blocks = 128u64; // 32 MiB
        for i in 0..blocks {
            let offset = i * block.len() as u64;
            store
                .append_output(3, "0/big", offset, &block, i + 1 == blocks)
                .unwrap();
        }
        let size = blocks * block.len() as u64;
        let used = tree_size(dir.path()) - empty;
        assert!(
            used >= size && used < size + 1024 * 1024,
            "{used} bytes on disk for {size}"
        );
        let (files, _) = store.output_files(3, "", 10).unwrap();
        assert_eq!(files[0].size, size);
        // A block from the middle, and the end.
        let (data, total) = store.output_block(3, "0/big", 1000, 5000).unwrap().unwrap();
        assert_eq!((data.as_slice(), total), (&block[1000..6000], size));
        let (data, _) = store
            .output_block(3, "0/big", size - 10, 100)
            .unwrap()
            .unwrap();
        assert_eq!(data, &block[block.len() - 10..]);
        assert!(
            store
                .output_block(3, "0/big", size + 5, 100)
                .unwrap()
                .unwrap()
                .0
                .is_empty()
        );
        // Sent again from the start: the old tail goes.
        store.append_output(3, "0/big", 0, b"again", true).unwrap();
        assert_eq!(
            store.output_block(3, "0/big", 0, 100).unwrap(),
            Some((b"again".to_vec(), 5))
        );
    }

    /// Listing pages: at most `max` names, in order, after the one given.
    #[test]
    fn output_listing_pages_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.redb")).unwrap();
        for name in ["0/a", "0/b", "1/a", "1/sub/c"] {
            store
                .append_output(5, name, 0, name.as_bytes(), true)
                .unwrap();
        }
        store
            .append_output(6, "0/z", 0, b"other job", true)
            .unwrap();
        let names =
            |files: Vec<OutputFile>| -> Vec<String> { files.into_iter().map(|f| f.name).collect() };
        let (page, more) = store.output_files(5, "", 2).unwrap();
        assert_eq!(
            (names(page), more),
            (vec!["0/a".into(), "0/b".into()], true)
        );
        let (page, more) = store.output_files(5, "0/b", 2).unwrap();
        assert_eq!(
            (names(page), more),
            (vec!["1/a".into(), "1/sub/c".into()], false)
        );
        assert_eq!(store.output_bytes(5).unwrap(), 3 + 3 + 3 + 7);
        assert!(store.output_files(7, "", 2).unwrap().0.is_empty());
    }

    /// The writer thread: what many senders hand it at once is all
    /// written, each sender's in its order, and answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writer_writes_what_many_senders_hand_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(Store::open(&dir.path().join("state.redb")).unwrap());
        let writer = Writer::start(store.clone()).unwrap();
        let mut tasks = Vec::new();
        for rank in 0..8u32 {
            let writer = writer.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..50u32 {
                    let chunk = LogChunk {
                        rank,
                        stderr: false,
                        data: format!("{rank}:{i}\n").into_bytes(),
                    };
                    writer.append(Append::Log { job: 9, chunk }).await.unwrap();
                    let item = Append::Output {
                        job: 9,
                        name: format!("{rank}/out"),
                        offset: u64::from(i) * 4,
                        data: i.to_le_bytes().to_vec(),
                        last: i == 49,
                    };
                    writer.append(item).await.unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let (logs, next) = store.logs_from(9, 0, usize::MAX).unwrap();
        assert_eq!(next, 400);
        for rank in 0..8u32 {
            let lines: Vec<String> = logs
                .iter()
                .filter(|c| c.rank == rank)
                .map(|c| String::from_utf8_lossy(&c.data).into_owned())
                .collect();
            let expected: Vec<String> = (0..50).map(|i| format!("{rank}:{i}\n")).collect();
            assert_eq!(lines, expected);
            let (data, size) = store
                .output_block(9, &format!("{rank}/out"), 0, 1000)
                .unwrap()
                .unwrap();
            assert_eq!(size, 200);
            let expected: Vec<u8> = (0..50u32).flat_map(|i| i.to_le_bytes()).collect();
            assert_eq!(data, expected);
        }
    }

    /// Outputs that an older version kept whole in the database move to
    /// files when the store opens.
    #[test]
    fn outputs_of_an_older_database_move_to_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let db = redb::Database::create(&path).unwrap();
            let tx = db.begin_write().unwrap();
            tx.open_table(OUTPUTS)
                .unwrap()
                .insert((4, "0/old.txt"), b"kept".as_slice())
                .unwrap();
            tx.commit().unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(
            store.output_block(4, "0/old.txt", 0, 100).unwrap(),
            Some((b"kept".to_vec(), 4))
        );
        drop(store);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.output_files(4, "", 10).unwrap().0.len(), 1);
    }

    #[test]
    fn log_tail_is_the_newest_chunks_with_their_arrival_times() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.redb")).unwrap();
        let before = unix_ms();
        for i in 0..10 {
            let chunk = LogChunk {
                rank: i % 2,
                stderr: false,
                data: format!("line {i}\n").into_bytes(),
            };
            store.append_log(1, &chunk).unwrap();
        }
        let other = LogChunk {
            rank: 0,
            stderr: true,
            data: b"other job\n".to_vec(),
        };
        store.append_log(2, &other).unwrap();
        // Enough chunks for more than 3 lines, oldest first.
        let tail = store.log_tail(1, 3, 1 << 20).unwrap();
        let texts: Vec<&[u8]> = tail.iter().map(|(_, c)| c.data.as_slice()).collect();
        assert_eq!(texts, [b"line 6\n", b"line 7\n", b"line 8\n", b"line 9\n"]);
        assert!(tail.iter().all(|(at, _)| *at >= before), "{tail:?}");
        // The byte bound stops it too, after at least one chunk.
        let tail = store.log_tail(1, 100, 1).unwrap();
        assert_eq!(tail.len(), 1);
        assert_eq!(tail[0].1.data, b"line 9\n");
        assert!(store.log_tail(3, 100, 1 << 20).unwrap().is_empty());
    }

    /// A file backend whose writes fail with "No space left on device"
    /// while `full` is set: a disk that fills up and is freed again.
    #[derive(Debug)]
    struct Disk {
        inner: redb::backends::FileBackend,
        full: std::sync::Arc<AtomicBool>,
    }

    impl Disk {
        fn check(&self) -> std::io::Result<()> {
            if self.full.load(Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            Ok(())
        }
    }

    impl redb::StorageBackend for Disk {
        fn len(&self) -> std::io::Result<u64> {
            self.inner.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
            self.inner.read(offset, out)
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.check()?;
            self.inner.set_len(len)
        }
        fn sync_data(&self) -> std::io::Result<()> {
            self.check()?;
            self.inner.sync_data()
        }
        fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
            self.check()?;
            self.inner.write(offset, data)
        }
        fn close(&self) -> std::io::Result<()> {
            self.inner.close()
        }
    }

    fn store_on(path: &Path, full: &std::sync::Arc<AtomicBool>) -> Store {
        let (file, full) = (path.to_owned(), full.clone());
        Store::with_opener(
            path,
            Box::new(move || -> Result<Database, redb::Error> {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&file)?;
                let disk = Disk {
                    inner: redb::backends::FileBackend::new(f)?,
                    full: full.clone(),
                };
                Ok(redb::Builder::new()
                    .set_cache_size(CACHE_BYTES)
                    .create_with_backend(disk)?)
            }),
        )
        .unwrap()
    }

    fn job(id: u64, phase: JobPhase) -> JobRecord {
        JobRecord {
            id,
            phase,
            reason: format!("{phase:?}"),
            request: JobRequest::default(),
            module: FileRef {
                name: "m".into(),
                sha256: "ab".into(),
                size: 3,
            },
            inputs: vec![],
            ranks: Default::default(),
            submitted_unix: 0,
        }
    }

    /// The store through a full disk: new jobs are refused with the reason,
    /// changes of accepted jobs wait in memory, and once the disk has room
    /// again the store writes them by itself, without a restart.
    #[test]
    fn a_full_disk_refuses_new_jobs_keeps_accepted_writes_and_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let full = std::sync::Arc::new(AtomicBool::new(false));
        let store = store_on(&path, &full);
        store
            .put_submission(&job(1, JobPhase::Scheduling), &[("ab", b"xyz")])
            .unwrap();
        assert_eq!(store.unwritable(), None);

        full.store(true, Ordering::SeqCst);
        let refused = store.put_submission(&job(2, JobPhase::Scheduling), &[]);
        let reason = "No space left on device".to_string();
        assert_eq!(refused, Err(StoreError::Unwritable(reason.clone())));
        assert_eq!(
            refused.unwrap_err().to_string(),
            "this node cannot write to its disk (No space left on device)"
        );
        assert_eq!(store.unwritable(), Some(reason.clone()));
        // Changes of the accepted job are kept, not refused.
        store.put_job(&job(1, JobPhase::Running)).unwrap();
        store.put_job(&job(1, JobPhase::Completed)).unwrap();
        let chunk = LogChunk {
            rank: 0,
            stderr: false,
            data: b"line\n".to_vec(),
        };
        store.append_log(1, &chunk).unwrap();
        store.append_output(1, "0/out", 0, b"he", false).unwrap();
        store.append_output(1, "0/out", 2, b"llo", true).unwrap();
        assert_eq!(store.job(1).unwrap().unwrap().phase, JobPhase::Completed);
        // Still full: tries fail, and nothing waiting is dropped.
        for _ in 0..3 {
            assert!(!store.retry());
        }
        assert_eq!(
            store.put_submission(&job(2, JobPhase::Scheduling), &[]),
            Err(StoreError::Unwritable(reason))
        );

        full.store(false, Ordering::SeqCst);
        let start = Instant::now();
        while !store.retry() {
            assert!(
                start.elapsed() < RETRY_MAX * 3,
                "the store did not try the disk again"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(store.unwritable(), None);
        store
            .put_submission(&job(2, JobPhase::Scheduling), &[])
            .unwrap();
        let check = |store: &Store| {
            let phases: Vec<(u64, JobPhase)> = store
                .jobs()
                .unwrap()
                .iter()
                .map(|j| (j.id, j.phase))
                .collect();
            assert_eq!(
                phases,
                [(1, JobPhase::Completed), (2, JobPhase::Scheduling)]
            );
            let (logs, next) = store.logs_from(1, 0, usize::MAX).unwrap();
            assert_eq!((logs, next), (vec![chunk.clone()], 1));
            assert_eq!(
                store.output_block(1, "0/out", 0, 100).unwrap(),
                Some((b"hello".to_vec(), 5))
            );
            assert_eq!(store.blob_block("ab", 0, 10).unwrap().unwrap(), b"xyz");
        };
        check(&store);
        drop(store);
        check(&Store::open(&path).unwrap());
    }

    /// An output block whose file cannot be written (here: a file stands
    /// where the job's directory goes) makes the store unwritable; the
    /// block and those after it wait in memory, in order, and are written
    /// once the obstacle is gone, without a restart.
    #[test]
    fn an_output_that_cannot_be_written_waits_and_is_written_later() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.redb")).unwrap();
        std::fs::create_dir_all(dir.path().join("outputs")).unwrap();
        let obstacle = dir.path().join("outputs").join("2");
        std::fs::write(&obstacle, b"in the way").unwrap();
        store
            .append_output(2, "0/out", 0, b"first ", false)
            .unwrap();
        assert!(store.unwritable().is_some());
        store.append_output(2, "0/out", 6, b"second", true).unwrap();
        assert!(store.output_files(2, "", 10).unwrap().0.is_empty());
        std::fs::remove_file(&obstacle).unwrap();
        let start = Instant::now();
        while !store.retry() {
            assert!(
                start.elapsed() < RETRY_MAX * 3,
                "the store did not try the disk again"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            store.output_block(2, "0/out", 0, 100).unwrap(),
            Some((b"first second".to_vec(), 12))
        );
    }

    /// What waits for the disk is bounded: past [`MAX_DEFERRED_BYTES`]
    /// output is refused, while a job's record is always kept (the newest).
    #[test]
    fn deferred_writes_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let full = std::sync::Arc::new(AtomicBool::new(false));
        let store = store_on(&path, &full);
        full.store(true, Ordering::SeqCst);
        let block = vec![7u8; MAX_DEFERRED_BYTES / 4 - 1024];
        for i in 0..4 {
            let offset = (i * block.len()) as u64;
            store
                .append_output(1, "0/big", offset, &block, false)
                .unwrap();
        }
        assert!(matches!(
            store.append_output(1, "0/big", 4 * block.len() as u64, &block, false),
            Err(StoreError::Unwritable(_))
        ));
        for phase in [JobPhase::Running, JobPhase::Completed] {
            store.put_job(&job(1, phase)).unwrap();
        }
        let health = store.lock_health();
        let jobs = health
            .deferred
            .iter()
            .filter(|d| matches!(d, Deferred::Job { .. }))
            .count();
        assert_eq!(jobs, 1);
    }

    #[test]
    fn phases_only_move_forward() {
        let mut job = JobRecord {
            id: 1,
            phase: JobPhase::Scheduling,
            reason: String::new(),
            request: JobRequest::default(),
            module: FileRef {
                name: String::new(),
                sha256: String::new(),
                size: 0,
            },
            inputs: vec![],
            ranks: Default::default(),
            submitted_unix: 0,
        };
        assert!(!job.advance(JobPhase::Submitted, "back"));
        assert!(job.advance(JobPhase::Running, "go"));
        assert!(job.advance(JobPhase::Cancelled, "stop"));
        assert!(!job.advance(JobPhase::Failed, "late"));
        assert_eq!(job.phase, JobPhase::Cancelled);
    }

    #[test]
    fn a_job_that_ends_lists_no_rank_running() {
        let rank = |outcome: Option<&str>| RankStatus {
            node: "n".into(),
            outcome: outcome.map(str::to_string),
        };
        let mut job = JobRecord {
            id: 7,
            phase: JobPhase::Running,
            reason: "running".into(),
            request: JobRequest::default(),
            module: FileRef {
                name: "m".into(),
                sha256: "ab".into(),
                size: 3,
            },
            inputs: vec![],
            ranks: [
                (0, rank(None)),
                (1, rank(Some("exited with status 0"))),
                (2, rank(None)),
            ]
            .into_iter()
            .collect(),
            submitted_unix: 0,
        };
        job.close_ranks("lost: the home node restarted");
        assert!(job.advance(JobPhase::Failed, "the home node restarted"));
        let outcomes: Vec<Option<&str>> =
            job.ranks.values().map(|r| r.outcome.as_deref()).collect();
        assert_eq!(
            outcomes,
            [
                Some("lost: the home node restarted"),
                Some("exited with status 0"),
                Some("lost: the home node restarted")
            ]
        );
        let mut cancelled = job.clone();
        cancelled.phase = JobPhase::Running;
        cancelled.ranks.get_mut(&0).unwrap().outcome = None;
        assert!(cancelled.advance(JobPhase::Cancelled, "cancelled by user"));
        assert_eq!(
            cancelled.ranks[&0].outcome.as_deref(),
            Some("stopped with the job")
        );
    }
}

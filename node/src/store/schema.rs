//! What the database holds and how: its tables, the records stored in
//! them (a job's primary copy, its files by reference), the store's error
//! and how redb's errors become it, and the decoding of records read back.

use serde::{Deserialize, Serialize};

use redb::TableDefinition;
use zorilla_overlay::PeerId;

use crate::protocol::{JobPhase, JobRequest, OutcomeCode, RankStatus};

pub(super) const JOBS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("jobs");
pub(super) const BLOBS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("blobs");
pub(super) const LOGS: TableDefinition<'_, (u64, u64), &[u8]> = TableDefinition::new("logs");
/// Output files of older versions, whole in one value: moved to files
/// (see [`OUTPUT_FILES`]) when the store opens.
pub(super) const OUTPUTS: TableDefinition<'_, (u64, &str), &[u8]> = TableDefinition::new("outputs");
/// The output files of each job, by name (`rank/path`); the bytes are in
/// the file [`super::files::output_path`] names. The value is unused (0).
pub(super) const OUTPUT_FILES: TableDefinition<'_, (u64, &str), u64> =
    TableDefinition::new("output_files");
/// When each log chunk arrived, in milliseconds since the Unix epoch; same
/// keys as [`LOGS`].
pub(super) const LOG_TIMES: TableDefinition<'_, (u64, u64), u64> =
    TableDefinition::new("log_times");
/// The node's Network of Favors accounts (see `zorilla_core::favours`):
/// a consumer's peer id (text) to the favours received from it and given
/// to it, in this machine's core-milliseconds.
pub(super) const FAVOURS: TableDefinition<'_, &str, (u64, u64)> = TableDefinition::new("favours");
/// The nodes this home avoids (see `zorilla_core::runs::Avoided`): a
/// peer id (text) to when it was found out, Unix milliseconds.
pub(super) const AVOIDED: TableDefinition<'_, &str, u64> = TableDefinition::new("avoided");
/// The store's own marks: when it last wrote after the disk failed.
pub(super) const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");

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
    /// Where each rank runs or ran, and how it ended.
    pub(crate) ranks: std::collections::BTreeMap<u32, RankStatus<StoredPeer>>,
    /// When the job was accepted, seconds since the Unix epoch.
    #[serde(default)]
    pub(crate) submitted_unix: u64,
    /// The node this one took the job over from (its first home, lost).
    #[serde(default)]
    pub(crate) moved_from: Option<StoredPeer>,
    /// The node that took the job over from this one: the record is kept
    /// for the log, but the job is that node's (requests go there).
    #[serde(default)]
    pub(crate) moved_to: Option<StoredPeer>,
    /// The user who submitted the job (see [`crate::owner`]); none: its
    /// home's admin.
    #[serde(default)]
    pub(crate) owner: Option<crate::owner::UserId>,
    /// The owner's signature of the submission (see
    /// [`crate::owner::SubmitProof`]).
    #[serde(default)]
    pub(crate) owner_proof: Option<crate::owner::SubmitProof>,
    /// The job's first home and the nonce its id was made from (see
    /// [`crate::origin`]); none for a job accepted before ids were bound.
    #[serde(default)]
    pub(crate) origin: Option<crate::origin::JobOrigin>,
    /// A job array's progress, as the core's table last said (its `ranks`
    /// above are then the tasks running).
    #[serde(default)]
    pub(crate) tasks: Option<crate::protocol::TaskStatus<StoredPeer>>,
    /// Of a job that ran more than once (see `zorilla_core::runs`), the
    /// run whose results were kept: its clients see that run's outputs
    /// and logs as the job's ([`JobRecord::kept`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) kept_run: Option<u32>,
}

impl JobRecord {
    /// Of a job that ran more than once and kept a run's results: the
    /// first worker of that run at the home and the run's size, so that
    /// its rank `r` is worker `first + r` (clients see only these, as
    /// ranks `0..size`). `None` for any other job: every worker is seen
    /// as it is.
    pub(crate) fn kept(&self) -> Option<(u32, u32)> {
        if self.request.runs() <= 1 {
            return None;
        }
        let size = self.request.max_workers.max(1);
        self.kept_run.map(|run| (run.saturating_mul(size), size))
    }
}

/// A node named in a job's record: a peer id, kept as its text (as records
/// written before it was typed hold it), so that a record whose name is
/// not a peer id does not decode rather than match nothing later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct StoredPeer(pub(crate) PeerId);

impl std::ops::Deref for StoredPeer {
    type Target = PeerId;

    fn deref(&self) -> &PeerId {
        &self.0
    }
}

impl std::fmt::Display for StoredPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl serde::Serialize for StoredPeer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for StoredPeer {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse()
            .map(StoredPeer)
            .map_err(|e| serde::de::Error::custom(format!("node {text:?}: {e}")))
    }
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
            self.close_ranks(OutcomeCode::Stopped, "stopped with the job");
        }
        true
    }

    /// Gives every rank still counted as running the end `code`, with
    /// `sentence` for people.
    pub(crate) fn close_ranks(&mut self, code: OutcomeCode, sentence: &str) {
        for rank in self.ranks.values_mut() {
            rank.close(code, sentence);
        }
    }
}

/// Why the store could not do something. Callers act on the kind: a disk
/// that cannot be written refuses new work with the reason, anything else
/// is an internal error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StoreError {
    /// The disk cannot be written (full, or failing), with the reason the
    /// system gave. The store tries again by itself (see [`super::Store::retry`]).
    #[error("this node cannot write to its disk ({0})")]
    Unwritable(String),
    /// Anything else: a record that does not decode, a bug.
    #[error("state database: {0}")]
    Failed(String),
}

pub(super) fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Failed(e.to_string())
}

/// A redb error as the store's: errors of the disk are [`StoreError::Unwritable`].
pub(super) fn classify(e: redb::Error) -> StoreError {
    match e {
        redb::Error::Io(io) => StoreError::Unwritable(io_reason(&io)),
        redb::Error::PreviousIo | redb::Error::DatabaseClosed => {
            StoreError::Unwritable("an earlier write to it failed".into())
        }
        other => StoreError::Failed(other.to_string()),
    }
}

/// An I/O error in words, without Rust's " (os error 28)".
pub(super) fn io_reason(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::StorageFull {
        return "No space left on device".into();
    }
    let text = e.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

pub(super) fn corrupt(e: impl std::fmt::Display) -> redb::Error {
    redb::Error::Corrupted(e.to_string())
}

/// Decodes a record read back from the database (a file anyone with
/// access to the state directory could have changed): declared lengths are
/// checked against the bytes there before anything is allocated.
pub(super) fn decode_stored<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Result<T, redb::Error> {
    zorilla_overlay::cbor::check_lengths(bytes).map_err(corrupt)?;
    ciborium::from_reader(bytes).map_err(corrupt)
}

/// [`decode_stored`] for callers outside a transaction (and the fuzz
/// harness).
pub(crate) fn decode_record<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    decode_stored(bytes).map_err(err)
}

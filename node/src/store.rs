//! Durable state of a node in redb: the jobs it is home to, the files of
//! those jobs (module and inputs, by SHA-256), and the logs and outputs
//! collected from their workers. Every change is committed before the node
//! acts on it or acknowledges it, so a node killed at any point comes back
//! with everything it accepted.
//!
//! Log chunks are kept as they arrived, with their arrival time beside them
//! (its own table, so that databases written before it still read): the
//! status page shows when each line came.

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::protocol::{JobPhase, JobRequest, LogChunk, NamedFile, RankStatus};

const JOBS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("jobs");
const BLOBS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("blobs");
const LOGS: TableDefinition<'_, (u64, u64), &[u8]> = TableDefinition::new("logs");
const OUTPUTS: TableDefinition<'_, (u64, &str), &[u8]> = TableDefinition::new("outputs");
/// When each log chunk arrived, in milliseconds since the Unix epoch; same
/// keys as [`LOGS`].
const LOG_TIMES: TableDefinition<'_, (u64, u64), u64> = TableDefinition::new("log_times");

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
    pub(crate) fn advance(&mut self, phase: JobPhase, reason: impl Into<String>) -> bool {
        if phase <= self.phase || self.phase.is_terminal() {
            return false;
        }
        self.phase = phase;
        self.reason = reason.into();
        true
    }
}

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
#[error("state database: {0}")]
pub(crate) struct StoreError(String);

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError(e.to_string())
}

/// Decodes a record read back from the database (a file anyone with
/// access to the state directory could have changed).
pub(crate) fn decode_record<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    zorilla_overlay::cbor::check_lengths(bytes).map_err(err)?;
    ciborium::from_reader(bytes).map_err(err)
}

/// The node's database.
pub(crate) struct Store {
    db: Database,
}

impl Store {
    /// Opens (or creates) the database at `path`.
    pub(crate) fn open(path: &Path) -> Result<Store, StoreError> {
        let db = Database::create(path).map_err(err)?;
        let tx = db.begin_write().map_err(err)?;
        {
            tx.open_table(JOBS).map_err(err)?;
            tx.open_table(BLOBS).map_err(err)?;
            tx.open_table(LOGS).map_err(err)?;
            tx.open_table(OUTPUTS).map_err(err)?;
            tx.open_table(LOG_TIMES).map_err(err)?;
        }
        tx.commit().map_err(err)?;
        Ok(Store { db })
    }

    /// Stores a job's record.
    pub(crate) fn put_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        ciborium::into_writer(job, &mut bytes).map_err(err)?;
        let tx = self.db.begin_write().map_err(err)?;
        tx.open_table(JOBS)
            .map_err(err)?
            .insert(job.id, bytes.as_slice())
            .map_err(err)?;
        tx.commit().map_err(err)
    }

    /// Stores a new job and its files (by hash) in one transaction: one
    /// durable commit per submission, and a file already stored (the same
    /// module submitted again) is not written again.
    pub(crate) fn put_submission(
        &self,
        job: &JobRecord,
        files: &[(&str, &[u8])],
    ) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        ciborium::into_writer(job, &mut bytes).map_err(err)?;
        let tx = self.db.begin_write().map_err(err)?;
        {
            let mut blobs = tx.open_table(BLOBS).map_err(err)?;
            for (sha256, data) in files {
                if blobs.get(*sha256).map_err(err)?.is_none() {
                    blobs.insert(*sha256, *data).map_err(err)?;
                }
            }
            tx.open_table(JOBS)
                .map_err(err)?
                .insert(job.id, bytes.as_slice())
                .map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// Every stored job.
    pub(crate) fn jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let table = tx.open_table(JOBS).map_err(err)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(err)? {
            let (_, value) = entry.map_err(err)?;
            out.push(decode_record(value.value())?);
        }
        Ok(out)
    }

    /// A block of a stored file: `len` bytes from `offset`.
    pub(crate) fn blob_block(
        &self,
        sha256: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let table = tx.open_table(BLOBS).map_err(err)?;
        Ok(table.get(sha256).map_err(err)?.map(|v| {
            let data = v.value();
            let start = (offset as usize).min(data.len());
            let end = start.saturating_add(len).min(data.len());
            data[start..end].to_vec()
        }))
    }

    /// Appends a log chunk of a job.
    pub(crate) fn append_log(&self, job: u64, chunk: &LogChunk) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        ciborium::into_writer(chunk, &mut bytes).map_err(err)?;
        let tx = self.db.begin_write().map_err(err)?;
        {
            let mut table = tx.open_table(LOGS).map_err(err)?;
            let next = table
                .range((job, 0)..=(job, u64::MAX))
                .map_err(err)?
                .next_back()
                .transpose()
                .map_err(err)?
                .map_or(0, |(k, _)| k.value().1 + 1);
            table.insert((job, next), bytes.as_slice()).map_err(err)?;
            tx.open_table(LOG_TIMES)
                .map_err(err)?
                .insert((job, next), unix_ms())
                .map_err(err)?;
        }
        tx.commit().map_err(err)
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
        let tx = self.db.begin_read().map_err(err)?;
        let table = tx.open_table(LOGS).map_err(err)?;
        let times = tx.open_table(LOG_TIMES).map_err(err)?;
        let mut out = Vec::new();
        let (mut newlines, mut bytes) = (0, 0);
        for entry in table.range((job, 0)..=(job, u64::MAX)).map_err(err)?.rev() {
            let (key, value) = entry.map_err(err)?;
            let chunk: LogChunk = decode_record(value.value())?;
            let at = times
                .get(key.value())
                .map_err(err)?
                .map_or(0, |t| t.value());
            newlines += chunk.data.iter().filter(|b| **b == b'\n').count();
            bytes += chunk.data.len();
            out.push((at, chunk));
            if newlines > max_newlines || bytes >= max_bytes {
                break;
            }
        }
        out.reverse();
        Ok(out)
    }

    /// A job's log chunks from sequence number `from` on, as many as fit in
    /// `max_bytes` of data (at least one, so a reader always moves on), and
    /// the sequence number to ask for next.
    pub(crate) fn logs_from(
        &self,
        job: u64,
        from: u64,
        max_bytes: usize,
    ) -> Result<(Vec<LogChunk>, u64), StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let table = tx.open_table(LOGS).map_err(err)?;
        let mut out = Vec::new();
        let mut next = from;
        let mut bytes = 0usize;
        for entry in table.range((job, from)..=(job, u64::MAX)).map_err(err)? {
            let (key, value) = entry.map_err(err)?;
            let chunk: LogChunk = decode_record(value.value())?;
            if !out.is_empty() && bytes + chunk.data.len() > max_bytes {
                break;
            }
            bytes += chunk.data.len();
            next = key.value().1 + 1;
            out.push(chunk);
        }
        Ok((out, next))
    }

    /// Appends `data` to output file `name` of a job (`offset` 0 starts it
    /// afresh, so a resent file does not double).
    pub(crate) fn append_output(
        &self,
        job: u64,
        name: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(err)?;
        {
            let mut table = tx.open_table(OUTPUTS).map_err(err)?;
            let mut current = if offset == 0 {
                Vec::new()
            } else {
                table
                    .get((job, name))
                    .map_err(err)?
                    .map(|v| v.value().to_vec())
                    .unwrap_or_default()
            };
            current.truncate(offset as usize);
            current.extend_from_slice(data);
            table.insert((job, name), current.as_slice()).map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// A job's output files.
    pub(crate) fn outputs(&self, job: u64) -> Result<Vec<NamedFile>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let table = tx.open_table(OUTPUTS).map_err(err)?;
        let mut out = Vec::new();
        for entry in table.range((job, "")..).map_err(err)? {
            let (key, value) = entry.map_err(err)?;
            let (j, name) = key.value();
            if j != job {
                break;
            }
            out.push(NamedFile {
                name: name.to_owned(),
                data: value.value().to_vec(),
            });
        }
        Ok(out)
    }
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
            store.append_output(7, "0/out", 0, b"he").unwrap();
            store.append_output(7, "0/out", 2, b"llo").unwrap();
            store.append_output(8, "0/out", 0, b"other").unwrap();
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
        let outputs = store.outputs(7).unwrap();
        assert_eq!(outputs.len(), 1);
        assert_eq!(outputs[0].data, b"hello");
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
}

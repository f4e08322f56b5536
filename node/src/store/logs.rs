//! Jobs' logs in the store: the chunks of their workers' stdout and
//! stderr, as they arrived, with their arrival times beside them (a table
//! of their own, so that databases written before it still read).

#[cfg(test)]
use super::db::Deferred;
use super::db::Store;
use super::schema::{LOG_TIMES, LOGS, StoreError, decode_stored};
#[cfg(test)]
use super::schema::{err, unix_ms};
use crate::protocol::LogChunk;

impl Store {
    /// Appends a log chunk of a job (kept in memory until the disk can be
    /// written if it cannot now). The node appends through the [`super::Writer`].
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
    /// `max_bytes` of data (at least one, so a reader always moves on), the
    /// sequence number to ask for next, and how many chunks the job has
    /// stored (the number the next one will get), read together. Chunks
    /// waiting for the disk come once they are written.
    pub(crate) fn logs_from(
        &self,
        job: u64,
        from: u64,
        max_bytes: usize,
    ) -> Result<(Vec<LogChunk>, u64, u64), StoreError> {
        self.read(|tx| {
            let table = tx.open_table(LOGS)?;
            let stored = match table.range((job, 0)..=(job, u64::MAX))?.next_back() {
                Some(entry) => entry?.0.value().1.saturating_add(1),
                None => 0,
            };
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
            Ok((out, next, stored))
        })
    }
}

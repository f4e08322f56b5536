//! Jobs in the store: a job's record (its primary copy, at its home) and
//! its files (module and inputs, by SHA-256), written in one transaction
//! when the job is submitted.

use std::collections::BTreeMap;

use redb::ReadableTable;

use super::db::{Deferred, Store};
use super::schema::{BLOBS, JOBS, JobRecord, StoreError, decode_stored, err};

impl Store {
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
}

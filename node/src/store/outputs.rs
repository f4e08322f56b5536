//! Jobs' output files in the store: which names a job has (a table), the
//! bytes in files of their own ([`super::files`]), read in blocks; and the
//! move of an older version's outputs, kept whole in the database, to
//! files.

use redb::ReadableTable;

#[cfg(test)]
use super::db::Deferred;
use super::db::Store;
use super::files::{open_output, output_path, write_output};
use super::schema::{OUTPUT_FILES, OUTPUTS, StoreError, err, io_reason};

/// An output file a job has at its home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutputFile {
    /// `rank/path`.
    pub(crate) name: String,
    /// Its bytes so far.
    pub(crate) size: u64,
}

impl Store {
    /// Writes `data` at `offset` of output file `name` of a job (`offset`
    /// 0 starts it afresh, so a resent file does not double), in O(`data`);
    /// kept in memory until the disk can be written if it cannot now.
    /// `last`: the file's last block, synced before this returns. The node
    /// appends through the [`super::Writer`], off the event loop.
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
    pub(super) fn move_old_outputs(&self) -> Result<(), StoreError> {
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

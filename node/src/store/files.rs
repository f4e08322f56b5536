//! The output files on disk, beside the database: each output file of a
//! job is a file of its own under `outputs/<job>/<sha256 of its name>`,
//! written at the offset a block names, opened never through a link.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The file holding output `name` of `job` below the outputs directory:
/// named by the hash of the name, so that no name a worker sends becomes a
/// path.
pub(super) fn output_path(outputs: &Path, job: u64, name: &str) -> PathBuf {
    let hash = Sha256::digest(name.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in hash {
        use std::fmt::Write;
        let _ = write!(hex, "{b:02x}");
    }
    outputs.join(job.to_string()).join(hex)
}

/// Opens an output file of the node's own, never through a link.
pub(super) fn open_output(path: &Path, write: bool) -> std::io::Result<std::fs::File> {
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
pub(super) fn write_output(
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

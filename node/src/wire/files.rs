//! A job's files between nodes: a member fetches a job's module and inputs
//! by hash, block by block, from the home or another node of the job.

use serde::{Deserialize, Serialize};
use zorilla_core::limits;

use crate::validate::{self, Invalid};

/// Largest block of a file (or of output) sent in one rpc: well under the
/// overlay's 1 MiB frame cap, large enough that a module of a few hundred
/// KiB moves in a handful of round trips.
pub(crate) const BLOCK_BYTES: usize = 256 * 1024;

/// Largest module or input file of a job a node fetches: a job is submitted
/// in one client frame, so none of its files can be larger.
pub(crate) const MAX_FILE_BYTES: u64 = crate::protocol::frame::DEFAULT_MAX_FRAME as u64;

/// A request for a file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum FileRpc {
    /// A block of a content-addressed file. Answered with
    /// `PeerReply::Block`.
    GetBlock {
        sha256: String,
        offset: u64,
        len: u32,
    },
}

impl FileRpc {
    /// Checks the hash's form and the block's length.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        match self {
            FileRpc::GetBlock { sha256, len, .. } => {
                if !zorilla_sandbox::jobfs::is_sha256_hex(sha256) {
                    return Err(Invalid::BadName {
                        what: "file hash",
                        name: validate::printable(sha256),
                        why: "a SHA-256 is 64 hex digits, in lowercase",
                    });
                }
                limits::at_most("block length", *len as usize, BLOCK_BYTES)?;
            }
        }
        Ok(())
    }
}

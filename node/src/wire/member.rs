//! What a member (a node running workers of a job) says to the job's home:
//! it asks for the job's state, streams its ranks' logs and outputs, and
//! reports each worker's end. The home takes them only from the nodes of
//! its ranks (see `node::reports`).

use serde::{Deserialize, Serialize};
use zorilla_core::limits::{self, LimitError};
use zorilla_core::node::{Failure, WorkerEnd};
use zorilla_core::runs::ResultDigest;

use super::files::BLOCK_BYTES;
use crate::protocol::LogChunk;
use crate::validate::{self, Invalid, MAX_OUTCOME_BYTES};

/// A member's request to a job's home.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum MemberRpc {
    /// The job's state (a member whose home said nothing for a while).
    /// Answered with `PeerReply::Job`.
    GetJob { job: u64 },
    /// Output of a rank (at most [`BLOCK_BYTES`]).
    Log { job: u64, chunk: LogChunk },
    /// A piece of an output file, named `<rank>/<path>` (at most
    /// [`BLOCK_BYTES`]).
    Output {
        job: u64,
        name: String,
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// A rank's worker ended (after all its output was sent).
    /// `incarnation` is the grant that started it, so that the home tells
    /// a replaced worker's late report from the current one's. `digest`:
    /// of what it computed, for a job that runs more than once (see
    /// `crate::node::digest`); left out of the encoding otherwise.
    WorkerEnded {
        job: u64,
        rank: u32,
        incarnation: u32,
        end: WorkerEnd,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        digest: Option<ResultDigest>,
    },
}

impl MemberRpc {
    /// Checks ranks, sizes, offsets and output names.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        match self {
            MemberRpc::GetJob { .. } => {}
            MemberRpc::Log { chunk, .. } => {
                validate::rank("rank", chunk.rank)?;
                limits::at_most("log chunk size in bytes", chunk.data.len(), BLOCK_BYTES)?;
            }
            MemberRpc::Output {
                name, offset, data, ..
            } => {
                // "<rank>/<path>", as the worker's node names outputs (a
                // path below the rank's outputs directory, subdirectories
                // included).
                let (r, file) = name.split_once('/').unwrap_or(("", name));
                match r.parse::<u32>() {
                    Ok(r) => validate::rank("output rank", r)?,
                    Err(_) => {
                        return Err(Invalid::BadName {
                            what: "output file",
                            name: validate::printable(name),
                            why: "it is not <rank>/<path>",
                        });
                    }
                }
                if zorilla_sandbox::jobfs::check_relative(file).is_err() {
                    return Err(Invalid::BadName {
                        what: "output file",
                        name: validate::printable(name),
                        why: "it is not a plain relative path (no '..', no leading '/', no NUL)",
                    });
                }
                limits::at_most("output block size in bytes", data.len(), BLOCK_BYTES)?;
                if offset.checked_add(data.len() as u64).is_none() {
                    return Err(Invalid::OutOfRange(LimitError {
                        field: "output offset".into(),
                        value: offset.to_string(),
                        range: "such that offset plus length fits 64 bits".into(),
                    }));
                }
            }
            MemberRpc::WorkerEnded { rank, end, .. } => {
                validate::rank("rank", *rank)?;
                if let WorkerEnd::Failed(Failure::Trapped(why) | Failure::NotStarted(why)) = end {
                    limits::at_most("outcome length in bytes", why.len(), MAX_OUTCOME_BYTES)?;
                }
            }
        }
        Ok(())
    }
}

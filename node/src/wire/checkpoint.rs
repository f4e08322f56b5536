//! What nodes say to each other about checkpoints (see
//! [`crate::checkpoint`]): a worker's node sends a rank's checkpoint to its
//! holders as blocks and a manifest and tells the job's home where it is;
//! the node of a fresh worker of that rank asks the home where the latest
//! is and fetches it from a holder; the home tells the holders when the job
//! ended. All of it travels as [`super::PeerRpc::Checkpoint`] and
//! [`super::PeerReply::Checkpoint`].

use serde::{Deserialize, Serialize};
use zorilla_overlay::PeerId;

use zorilla_core::limits;

use crate::store::checkpoints::{BlockHash, Manifest};
use crate::validate::{self, Invalid};

/// A request about checkpoints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum CheckpointRpc {
    /// Worker node to a holder: a block (at most
    /// [`crate::store::checkpoints::MAX_BLOCK_BYTES`]) of checkpoint `seq`
    /// of `rank` of `job`, whose home is `home`. The holder names it by
    /// the hash it computes.
    Put {
        job: u64,
        home: PeerId,
        rank: u32,
        seq: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Worker node to a holder: checkpoint `manifest.seq` is complete.
    /// `copies` are the job's copies as the worker's node knows them (at
    /// most [`zorilla_core::replica::MAX_COPIES`]): one of them becomes
    /// the job's home if the home is lost, so the holder takes its tickets
    /// too.
    Commit {
        job: u64,
        rank: u32,
        manifest: Manifest,
        #[serde(default)]
        copies: Vec<PeerId>,
    },
    /// Worker node to the home: the rank's checkpoint `seq` of `size`
    /// bytes (of `generation`, if the ranks took it together: at most
    /// [`zorilla_core::checkpoint::MAX_GENERATION`]) is held whole by
    /// `holders` (at most [`zorilla_core::checkpoint::MAX_REPLICAS`]).
    Stored {
        job: u64,
        rank: u32,
        seq: u64,
        generation: Option<u64>,
        size: u64,
        holders: Vec<PeerId>,
    },
    /// Worker node to the home: where is the rank's latest checkpoint?
    /// Answered with [`CheckpointReply::At`].
    Where { job: u64, rank: u32 },
    /// To a holder: the manifest of the rank's complete checkpoint `seq`
    /// (the latest if `None`). Answered with [`CheckpointReply::Manifest`].
    Manifest {
        job: u64,
        rank: u32,
        seq: Option<u64>,
        /// The home's leave for a node that neither wrote the rank's
        /// checkpoint nor is the job's home ([`Located::ticket`]).
        #[serde(with = "serde_bytes")]
        ticket: Vec<u8>,
    },
    /// To a holder: a block of the rank's checkpoint. Answered with
    /// [`super::PeerReply::Block`].
    Get {
        job: u64,
        rank: u32,
        hash: BlockHash,
        /// As [`CheckpointRpc::Manifest`]'s.
        #[serde(with = "serde_bytes")]
        ticket: Vec<u8>,
    },
    /// Home to a holder: the job ended; its checkpoints can go.
    Drop { job: u64 },
}

/// Where a rank's latest checkpoint is, as the home knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Located {
    pub(crate) seq: u64,
    pub(crate) generation: Option<u64>,
    pub(crate) size: u64,
    pub(crate) holders: Vec<PeerId>,
    /// The home's signature that the node asking may read the rank's
    /// checkpoint from its holders (see [`crate::checkpoint::ticket`]):
    /// holders serve only the node that wrote it, the home it named, and
    /// nodes the home lets.
    #[serde(with = "serde_bytes")]
    pub(crate) ticket: Vec<u8>,
}

/// An answer about checkpoints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum CheckpointReply {
    /// Answer to [`CheckpointRpc::Where`]: `None` if no checkpoint of the
    /// rank was stored.
    At(Option<Located>),
    /// Answer to [`CheckpointRpc::Manifest`]: `None` if it is not held.
    Manifest(Option<Manifest>),
}

impl CheckpointRpc {
    /// Checks ranks of a job, blocks, manifests and holder lists within
    /// [`crate::store::checkpoints`]' maxima.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        use crate::store::checkpoints::{MAX_BLOCK_BYTES, MAX_BLOCKS, MAX_CHECKPOINT_BYTES};
        match self {
            CheckpointRpc::Put { rank: r, data, .. } => {
                validate::rank("checkpoint rank", *r)?;
                limits::at_most(
                    "checkpoint block size in bytes",
                    data.len(),
                    MAX_BLOCK_BYTES,
                )?;
            }
            CheckpointRpc::Commit {
                rank: r,
                manifest,
                copies,
                ..
            } => {
                validate::rank("checkpoint rank", *r)?;
                limits::at_most(
                    "job copies",
                    copies.len(),
                    zorilla_core::replica::MAX_COPIES,
                )?;
                limits::at_most("checkpoint blocks", manifest.blocks.len(), MAX_BLOCKS)?;
                limits::at_most(
                    "checkpoint size in bytes",
                    manifest.size,
                    MAX_CHECKPOINT_BYTES,
                )?;
                validate::generation(manifest.generation)?;
            }
            CheckpointRpc::Stored {
                rank: r,
                size,
                holders,
                generation: g,
                ..
            } => {
                validate::generation(*g)?;
                validate::rank("checkpoint rank", *r)?;
                limits::at_most("checkpoint size in bytes", *size, MAX_CHECKPOINT_BYTES)?;
                limits::at_most(
                    "checkpoint holders",
                    holders.len(),
                    zorilla_core::checkpoint::MAX_REPLICAS,
                )?;
            }
            CheckpointRpc::Manifest {
                rank: r, ticket, ..
            }
            | CheckpointRpc::Get {
                rank: r, ticket, ..
            } => {
                validate::rank("checkpoint rank", *r)?;
                limits::at_most(
                    "ticket bytes",
                    ticket.len(),
                    zorilla_core::replica::MAX_SIGNATURE,
                )?;
            }
            CheckpointRpc::Where { rank: r, .. } => validate::rank("checkpoint rank", *r)?,
            CheckpointRpc::Drop { .. } => {}
        }
        Ok(())
    }
}

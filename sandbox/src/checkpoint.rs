//! Application-level checkpoints, as the sandbox sees them.
//!
//! A guest hands the host its state as bytes (`zorilla.checkpoint_save`)
//! and, when a fresh worker of its rank starts (after the old one was lost),
//! gets the latest one back (`zorilla.checkpoint_load`). Where the bytes
//! live is not the sandbox's business: the node implements [`Checkpoints`]
//! by storing them on other machines of the grid, [`MemoryCheckpoints`]
//! keeps them in this process (tests, single-machine runs).
//!
//! A checkpoint is at most [`Checkpoints::limit`] bytes (never more than
//! [`MAX_CHECKPOINT_BYTES`]); the host holds one copy of it while it is
//! saved or loaded, outside the guest's memory limit, so that limit bounds
//! what a guest can make the host allocate.

use std::sync::{Arc, Mutex};

use crate::transport::BoxFuture;

/// The largest checkpoint any store takes (256 MiB; `ZORILLA_MAX_CHECKPOINT`
/// in `examples/include/zorilla.h`). A node may set a smaller limit.
pub const MAX_CHECKPOINT_BYTES: u64 = 256 * 1024 * 1024;

/// The highest generation a checkpoint may carry (as
/// `zorilla_core::checkpoint::MAX_GENERATION`; `ZORILLA_MAX_GENERATION` in
/// `zorilla.h`).
pub const MAX_GENERATION: u64 = 1 << 48;

/// Why a checkpoint was not saved or loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// Larger than the store's limit.
    #[error("a checkpoint of {len} bytes is larger than the {max} bytes allowed")]
    TooLarge {
        /// The checkpoint's length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// No checkpoint was saved for this rank (or none can be found).
    #[error("no checkpoint saved for this rank")]
    None,
    /// The worker has no checkpoint store.
    #[error("this worker has no checkpoint store")]
    Unsupported,
    /// The store could not keep or give back the checkpoint (no holder
    /// answered, a holder refused); the sentence says why.
    #[error("checkpoint store: {0}")]
    Store(String),
}

/// A stored checkpoint: its number (higher is newer) and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Increases with every save of the rank, across its workers.
    pub seq: u64,
    /// The generation the job's ranks took it at together, if they did
    /// (`zorilla_checkpoint_save_generation`).
    pub generation: Option<u64>,
    /// The guest's bytes.
    pub data: Arc<Vec<u8>>,
}

/// Where one worker's checkpoints go. Shared by reference: the host calls
/// it from the worker's task only, one call at a time.
pub trait Checkpoints: Send + Sync + 'static {
    /// The largest checkpoint this store takes, at most
    /// [`MAX_CHECKPOINT_BYTES`].
    fn limit(&self) -> u64;

    /// Stores `data` as the rank's latest checkpoint, of `generation` (at
    /// most [`MAX_GENERATION`]) if the job's ranks take it together.
    /// Returns on how many places it is kept (at least 1).
    fn save(
        &self,
        data: Vec<u8>,
        generation: Option<u64>,
    ) -> BoxFuture<'_, Result<u32, CheckpointError>>;

    /// The rank's latest complete checkpoint.
    fn load(&self) -> BoxFuture<'_, Result<Checkpoint, CheckpointError>>;
}

/// Checkpoints kept in this process, shared by the workers given clones of
/// it: what a rank's worker saved, a later worker of the same rank loads.
#[derive(Clone)]
pub struct MemoryCheckpoints {
    limit: u64,
    latest: Arc<Mutex<Option<Checkpoint>>>,
}

impl MemoryCheckpoints {
    /// A store that takes checkpoints of up to `limit` bytes (capped at
    /// [`MAX_CHECKPOINT_BYTES`]).
    pub fn new(limit: u64) -> MemoryCheckpoints {
        MemoryCheckpoints {
            limit: limit.min(MAX_CHECKPOINT_BYTES),
            latest: Arc::default(),
        }
    }

    fn latest(&self) -> std::sync::MutexGuard<'_, Option<Checkpoint>> {
        self.latest.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Checkpoints for MemoryCheckpoints {
    fn limit(&self) -> u64 {
        self.limit
    }

    fn save(
        &self,
        data: Vec<u8>,
        generation: Option<u64>,
    ) -> BoxFuture<'_, Result<u32, CheckpointError>> {
        Box::pin(async move {
            let len = data.len() as u64;
            if len > self.limit {
                return Err(CheckpointError::TooLarge {
                    len,
                    max: self.limit,
                });
            }
            let mut latest = self.latest();
            let seq = latest.as_ref().map_or(1, |c| c.seq.saturating_add(1));
            *latest = Some(Checkpoint {
                seq,
                generation,
                data: Arc::new(data),
            });
            Ok(1)
        })
    }

    fn load(&self) -> BoxFuture<'_, Result<Checkpoint, CheckpointError>> {
        Box::pin(async move { self.latest().clone().ok_or(CheckpointError::None) })
    }
}

//! A worker's checkpoints on the grid: the node's [`Checkpoints`] for the
//! sandbox.
//!
//! A save cuts the checkpoint into blocks of at most
//! [`MAX_BLOCK_BYTES`], sends them to the holders [`choose_holders`] picks
//! among this node's overlay neighbours (the overlay keeps near nodes as
//! neighbours, so these are near ones; never this node while there is
//! another), several blocks in flight per holder, then a manifest that
//! makes it the rank's latest there, and finally tells the job's home on
//! which holders it is whole (the home's
//! [`zorilla_core::checkpoint::CheckpointIndex`]). A load asks the home
//! where the rank's latest is and fetches it from the first holder that
//! gives all of it, each block checked against its hash.
//!
//! Checkpoint numbers are the worker's incarnation (the grant that placed
//! it, which grows when a rank is replaced) above a count of its saves
//! ([`zorilla_core::checkpoint::checkpoint_seq`]), so that a fresh
//! worker's checkpoints are newer than its predecessor's. A load fetches
//! the checkpoint the home names by its number (after a job rolled back,
//! one of the generation it rolled back to, which a holder keeps beside a
//! newer one).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use sha2::{Digest, Sha256};
use zorilla_core::checkpoint::{MAX_REPLICAS, Shortfall, checkpoint_seq, choose_holders};
use zorilla_overlay::PeerId;
use zorilla_sandbox::transport::BoxFuture;
use zorilla_sandbox::{Checkpoint, CheckpointError, Checkpoints};

use crate::config::{Config, DEFAULT_CHECKPOINT_STORE_MIB, MAX_CHECKPOINT_MIB};
use crate::net::{CallError, Net};
use crate::store::checkpoints::{BlockHash, HolderLimits, MAX_BLOCK_BYTES, MAX_BLOCKS, Manifest};
use crate::wire::checkpoint::{CheckpointReply, CheckpointRpc, Located};
use crate::wire::{PeerReply, PeerRpc};

// A checkpoint's blocks are cut as the files' blocks are.
const _: () = assert!(MAX_BLOCK_BYTES == crate::wire::files::BLOCK_BYTES);
// A guest's generations are the ones the core takes.
const _: () = assert!(zorilla_sandbox::MAX_GENERATION == zorilla_core::checkpoint::MAX_GENERATION);

/// Blocks in flight to one holder at once.
const WINDOW: usize = 4;

/// How a node stores its workers' checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckpointSettings {
    /// The largest checkpoint of a worker here, bytes (at most
    /// [`zorilla_sandbox::MAX_CHECKPOINT_BYTES`]).
    pub(crate) limit: u64,
    /// On how many other nodes each is kept (1 to [`MAX_REPLICAS`]).
    pub(crate) replicas: usize,
    /// What this node holds of other nodes' checkpoints.
    pub(crate) holder: HolderLimits,
}

impl Default for CheckpointSettings {
    /// 256 MiB, on 2 other nodes; the holder's defaults.
    fn default() -> Self {
        CheckpointSettings {
            limit: zorilla_sandbox::MAX_CHECKPOINT_BYTES,
            replicas: zorilla_core::checkpoint::DEFAULT_REPLICAS,
            holder: HolderLimits::default(),
        }
    }
}

impl CheckpointSettings {
    /// The settings `config` names, each checked against its bounds.
    pub(crate) fn from_config(config: &Config) -> anyhow::Result<CheckpointSettings> {
        let mut settings = CheckpointSettings::default();
        if let Some(mib) = config.checkpoint_max_mib {
            if !(1..=MAX_CHECKPOINT_MIB).contains(&mib) {
                anyhow::bail!(
                    "checkpoint_max_mib: {mib} is not between 1 and {MAX_CHECKPOINT_MIB}"
                );
            }
            settings.limit = mib << 20;
        }
        if let Some(n) = config.checkpoint_replicas {
            if !(1..=MAX_REPLICAS).contains(&n) {
                anyhow::bail!("checkpoint_replicas: {n} is not between 1 and {MAX_REPLICAS}");
            }
            settings.replicas = n;
        }
        let store_mib = config
            .checkpoint_store_mib
            .unwrap_or(DEFAULT_CHECKPOINT_STORE_MIB);
        // A larger store than a disk holds is the disk's problem, but the
        // arithmetic stays in range.
        let store_bytes = store_mib.min(u64::MAX >> 21) << 20;
        settings.holder.total_bytes = store_bytes;
        settings.holder.per_peer_bytes = store_bytes / 2;
        Ok(settings)
    }
}

/// The nodes a checkpoint may go to: the overlay's neighbours, kept up to
/// date by the node's loop.
pub(crate) type Neighbours = Arc<RwLock<Vec<PeerId>>>;

/// The checkpoints of one worker (rank `rank` of `job`, incarnation
/// `incarnation`).
pub(crate) struct NetCheckpoints {
    pub(crate) net: Net,
    pub(crate) neighbours: Neighbours,
    pub(crate) settings: CheckpointSettings,
    pub(crate) job: u64,
    /// The job's home as the worker's node knows it now (the job may
    /// change home while the worker runs).
    pub(crate) home: tokio::sync::watch::Receiver<PeerId>,
    /// The job's copies as the worker's node knows them now: the holders
    /// take tickets from them too (one becomes the home if it is lost).
    pub(crate) copies: tokio::sync::watch::Receiver<Vec<PeerId>>,
    pub(crate) rank: u32,
    pub(crate) incarnation: u32,
    pub(crate) saves: AtomicU32,
}

fn store_error(e: impl std::fmt::Display) -> CheckpointError {
    CheckpointError::Store(e.to_string())
}

/// Why one holder could not keep or give a checkpoint (the caller says
/// which holder, and goes on with the others).
#[derive(Debug, thiserror::Error)]
enum HolderError {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("it holds no checkpoint of the rank")]
    Missing,
    #[error("it answered something else")]
    Unexpected,
    #[error(
        "its checkpoint ({seq} of {size} bytes) is not the one asked for, or larger than allowed"
    )]
    Unfit { seq: u64, size: u64 },
    #[error("it sent a block that is not the checkpoint's")]
    ForeignBlock,
    #[error("its blocks do not add up to the checkpoint")]
    Short,
}

impl NetCheckpoints {
    /// Sends every block and then the manifest to `holder`, naming the
    /// job's home and copies as they are now.
    async fn send_to(
        &self,
        holder: PeerId,
        data: Arc<Vec<u8>>,
        manifest: Manifest,
    ) -> Result<(), HolderError> {
        let (net, job, rank) = (&self.net, self.job, self.rank);
        let home = *self.home.borrow();
        let copies: Vec<PeerId> = self
            .copies
            .borrow()
            .iter()
            .take(zorilla_core::replica::MAX_COPIES)
            .copied()
            .collect();
        let blocks = data.len().div_ceil(MAX_BLOCK_BYTES).max(1);
        let seq = manifest.seq;
        let mut puts = futures::stream::iter(0..blocks)
            .map(|i| {
                let (net, data) = (net.clone(), data.clone());
                async move {
                    let end = ((i + 1) * MAX_BLOCK_BYTES).min(data.len());
                    let rpc = PeerRpc::Checkpoint(CheckpointRpc::Put {
                        job,
                        home,
                        rank,
                        seq,
                        data: data[i * MAX_BLOCK_BYTES..end].to_vec(),
                    });
                    net.call_ok(holder, rpc).await.map(|_| ())
                }
            })
            .buffer_unordered(WINDOW);
        while let Some(put) = puts.next().await {
            put?;
        }
        let commit = PeerRpc::Checkpoint(CheckpointRpc::Commit {
            job,
            rank,
            manifest,
            copies,
        });
        net.call_ok(holder, commit).await?;
        Ok(())
    }

    async fn save_now(
        &self,
        data: Vec<u8>,
        generation: Option<u64>,
    ) -> Result<u32, CheckpointError> {
        let started = std::time::Instant::now();
        let size = data.len() as u64;
        if size > self.settings.limit {
            return Err(CheckpointError::TooLarge {
                len: size,
                max: self.settings.limit,
            });
        }
        let count = self.saves.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        let seq = checkpoint_seq(self.incarnation, count);
        let blocks: Vec<BlockHash> = if data.is_empty() {
            vec![Sha256::digest([]).into()]
        } else {
            data.chunks(MAX_BLOCK_BYTES)
                .map(|b| Sha256::digest(b).into())
                .collect()
        };
        let manifest = Manifest {
            seq,
            generation,
            size,
            blocks,
        };
        let candidates: Vec<(PeerId, Option<std::time::Duration>)> = self
            .neighbours
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|p| (*p, None))
            .collect();
        let me = self.net.me;
        let chosen = choose_holders(
            self.job,
            self.rank,
            &me,
            &candidates,
            self.settings.replicas,
        );
        match chosen.short {
            Some(Shortfall::OnlyThisNode) => tracing::warn!(
                job = %zorilla_core::advert::JobId(self.job),
                rank = self.rank,
                "no other node known: the checkpoint is kept on this node only"
            ),
            Some(Shortfall::FewerNodes { found }) => tracing::info!(
                job = %zorilla_core::advert::JobId(self.job),
                rank = self.rank,
                "only {found} other node(s) known: the checkpoint is kept on fewer than {}",
                self.settings.replicas
            ),
            None => {}
        }
        let data = Arc::new(data);
        let sends = chosen.peers.iter().map(|holder| {
            let send = self.send_to(*holder, data.clone(), manifest.clone());
            async move { (*holder, send.await) }
        });
        let mut holders = Vec::new();
        let mut failures = Vec::new();
        for (holder, result) in futures::future::join_all(sends).await {
            match result {
                Ok(()) => holders.push(holder),
                Err(e) => failures.push(format!("{holder}: {e}")),
            }
        }
        if !failures.is_empty() {
            tracing::warn!(
                job = %zorilla_core::advert::JobId(self.job),
                rank = self.rank,
                "checkpoint {seq} not stored on some holders: {}",
                failures.join("; ")
            );
        }
        if holders.is_empty() {
            return Err(store_error(format!(
                "no holder took the checkpoint ({})",
                failures.join("; ")
            )));
        }
        let copies = holders.len() as u32;
        let holder_ids: Vec<String> = holders.iter().map(PeerId::to_string).collect();
        let stored = PeerRpc::Checkpoint(CheckpointRpc::Stored {
            job: self.job,
            rank: self.rank,
            seq,
            generation,
            size,
            holders,
        });
        let home = *self.home.borrow();
        self.net
            .call_ok(home, stored)
            .await
            .map_err(|e| store_error(format!("the job's home was not told: {e}")))?;
        tracing::info!(
            job = %zorilla_core::advert::JobId(self.job),
            rank = self.rank,
            seq,
            ?generation,
            bytes = size,
            copies,
            sent_bytes = size.saturating_mul(u64::from(copies)),
            holders = %holder_ids.join(","),
            ms = started.elapsed().as_millis() as u64,
            "checkpoint stored"
        );
        Ok(copies)
    }

    /// Fetches checkpoint `located` whole from `holder`.
    async fn fetch_from(
        &self,
        holder: PeerId,
        located: &Located,
    ) -> Result<Checkpoint, HolderError> {
        let (job, rank) = (self.job, self.rank);
        let ask = PeerRpc::Checkpoint(CheckpointRpc::Manifest {
            job,
            rank,
            seq: Some(located.seq),
            ticket: located.ticket.clone(),
        });
        let manifest = match self.net.call_ok(holder, ask).await? {
            PeerReply::Checkpoint(CheckpointReply::Manifest(Some(m))) => m,
            PeerReply::Checkpoint(CheckpointReply::Manifest(None)) => {
                return Err(HolderError::Missing);
            }
            _ => return Err(HolderError::Unexpected),
        };
        if manifest.seq != located.seq
            || manifest.generation != located.generation
            || manifest.size > self.settings.limit
            || manifest.blocks.len() > MAX_BLOCKS
        {
            return Err(HolderError::Unfit {
                seq: manifest.seq,
                size: manifest.size,
            });
        }
        let size = manifest.size as usize;
        let mut data = Vec::with_capacity(size);
        for hash in &manifest.blocks {
            let get = PeerRpc::Checkpoint(CheckpointRpc::Get {
                job,
                rank,
                hash: *hash,
                ticket: located.ticket.clone(),
            });
            let block = match self.net.call_ok(holder, get).await? {
                PeerReply::Block(block) => block,
                _ => return Err(HolderError::Unexpected),
            };
            let got: BlockHash = Sha256::digest(&block).into();
            if got != *hash || data.len() + block.len() > size {
                return Err(HolderError::ForeignBlock);
            }
            data.extend_from_slice(&block);
        }
        if data.len() != size {
            return Err(HolderError::Short);
        }
        Ok(Checkpoint {
            seq: manifest.seq,
            generation: manifest.generation,
            data: Arc::new(data),
        })
    }

    async fn load_now(&self) -> Result<Checkpoint, CheckpointError> {
        let started = std::time::Instant::now();
        let (job, rank) = (self.job, self.rank);
        let ask = PeerRpc::Checkpoint(CheckpointRpc::Where { job, rank });
        let home = *self.home.borrow();
        let located = match self.net.call_ok(home, ask).await {
            Ok(PeerReply::Checkpoint(CheckpointReply::At(Some(located)))) => located,
            Ok(PeerReply::Checkpoint(CheckpointReply::At(None))) => {
                // A worker that finds nothing starts from the beginning:
                // say so, and why it may be (for a replacement, the work is
                // redone).
                tracing::info!(
                    job = %zorilla_core::advert::JobId(job),
                    rank,
                    %home,
                    "no checkpoint of the rank is known at the job's home (none was saved yet, \
                     or it was saved under an earlier home of the job): it starts from the beginning"
                );
                return Err(CheckpointError::None);
            }
            Ok(_) => return Err(store_error("the job's home answered something else")),
            Err(e) => return Err(store_error(format!("the job's home did not answer: {e}"))),
        };
        if located.holders.len() > MAX_REPLICAS || located.size > self.settings.limit {
            return Err(store_error(
                "the job's home names a checkpoint beyond the limits",
            ));
        }
        let mut failures = Vec::new();
        for holder in &located.holders {
            match self.fetch_from(*holder, &located).await {
                Ok(checkpoint) => {
                    tracing::info!(
                        job = %zorilla_core::advert::JobId(job),
                        rank,
                        seq = checkpoint.seq,
                        bytes = checkpoint.data.len(),
                        from = %holder,
                        ms = started.elapsed().as_millis() as u64,
                        "checkpoint loaded"
                    );
                    return Ok(checkpoint);
                }
                Err(e) => failures.push(format!("{holder}: {e}")),
            }
        }
        Err(store_error(format!(
            "no holder gave checkpoint {} whole ({})",
            located.seq,
            failures.join("; ")
        )))
    }
}

impl Checkpoints for NetCheckpoints {
    fn limit(&self) -> u64 {
        self.settings.limit
    }

    fn save(
        &self,
        data: Vec<u8>,
        generation: Option<u64>,
    ) -> BoxFuture<'_, Result<u32, CheckpointError>> {
        Box::pin(self.save_now(data, generation))
    }

    fn load(&self) -> BoxFuture<'_, Result<Checkpoint, CheckpointError>> {
        Box::pin(self.load_now())
    }
}

/// What a home signs to let `reader` read `rank` of `job`'s checkpoint from
/// its holders ([`Located::ticket`]): a holder checks it with the key of
/// the home the rank's writer named.
pub(crate) fn ticket(job: u64, rank: u32, reader: &PeerId) -> Vec<u8> {
    crate::wire::encode(&("zorilla checkpoint reader 1", job, rank, reader))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_against_their_bounds() {
        let config = |max, replicas, store| Config {
            checkpoint_max_mib: max,
            checkpoint_replicas: replicas,
            checkpoint_store_mib: store,
            ..Config::default()
        };
        let default = CheckpointSettings::from_config(&config(None, None, None)).unwrap();
        assert_eq!(default.limit, 256 << 20);
        assert_eq!(default.replicas, 2);
        assert_eq!(default.holder.total_bytes, 2048 << 20);
        assert_eq!(default.holder.per_peer_bytes, 1024 << 20);
        let set = CheckpointSettings::from_config(&config(Some(16), Some(3), Some(0))).unwrap();
        assert_eq!(
            (set.limit, set.replicas, set.holder.total_bytes),
            (16 << 20, 3, 0)
        );
        for (max, replicas, why) in [
            (Some(0), None, "checkpoint_max_mib: 0"),
            (Some(257), None, "checkpoint_max_mib: 257"),
            (None, Some(0), "checkpoint_replicas: 0"),
            (None, Some(MAX_REPLICAS + 1), "checkpoint_replicas: 9"),
        ] {
            let e = CheckpointSettings::from_config(&config(max, replicas, None)).unwrap_err();
            assert!(e.to_string().starts_with(why), "{e}");
        }
        // A huge store stays in range.
        let huge = CheckpointSettings::from_config(&config(None, None, Some(u64::MAX))).unwrap();
        assert!(huge.holder.total_bytes > 0);
    }
}

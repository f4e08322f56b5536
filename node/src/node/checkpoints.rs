//! The loop's side of checkpoints (see [`crate::checkpoint`]): this node as
//! a holder of other nodes' checkpoint blocks (written and read off the
//! loop, in the holder's own database), and as the home that knows where
//! each rank's latest checkpoint is and tells the holders when a job ended.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use zorilla_core::advert::JobId;
use zorilla_core::checkpoint::Latest;
use zorilla_core::node::CheckpointRefused;
use zorilla_overlay::PeerId;
use zorilla_overlay::identity::PeerSigner;

use super::{Done, Node, Reply};
use crate::checkpoint::{CheckpointSettings, Neighbours, NetCheckpoints, ticket};
use crate::store::checkpoints::{Holder, HolderError};
use crate::wire::checkpoint::{CheckpointReply, CheckpointRpc, Located};
use crate::wire::{PeerReply, PeerRpc, RefusalKind};

/// How often the holder deletes ranks nobody wrote for too long.
const EXPIRE_CHECK: Duration = Duration::from_secs(600);

/// What the loop keeps about checkpoints.
pub(super) struct CheckpointState {
    /// The checkpoints this node holds for others (`None`: its database
    /// could not be opened; blocks are refused with the reason).
    holder: Result<Arc<Mutex<Holder>>, String>,
    /// The overlay's neighbours, for the workers' saves.
    pub(super) neighbours: Neighbours,
    pub(super) settings: CheckpointSettings,
    last_expire: Instant,
}

impl CheckpointState {
    /// Opens the holder's database in `dir`.
    pub(super) fn open(dir: &Path, settings: CheckpointSettings) -> CheckpointState {
        let holder = Holder::open(&dir.join("checkpoints.redb"), settings.holder)
            .map(|h| Arc::new(Mutex::new(h)))
            .map_err(|e| {
                tracing::error!("cannot open the checkpoint holder's database: {e}");
                format!("this node holds no checkpoints: {e}")
            });
        CheckpointState {
            holder,
            neighbours: Neighbours::default(),
            settings,
            last_expire: Instant::now(),
        }
    }
}

/// The answer to a read of `rank` of `job`'s checkpoint by `reader` that
/// is not the node that wrote it, nor the home or a copy of the job it
/// named, nor one that one of those let ([`crate::checkpoint::ticket`]);
/// `None` if it may read. Not counted as misbehaviour: a fresh worker's
/// node holding a ticket of a home the writer never knew of asks in good
/// faith.
fn refuse_reader(
    holder: &Holder,
    reader: PeerId,
    job: u64,
    rank: u32,
    ticket: &[u8],
) -> Result<Option<PeerReply>, HolderError> {
    let let_by = |granter: &str| {
        granter.parse::<PeerId>().is_ok_and(|granter| {
            PeerSigner::verify(
                &granter,
                &crate::checkpoint::ticket(job, rank, &reader),
                ticket,
            )
        })
    };
    if holder.may_read(job, rank, &reader.to_string(), let_by)? {
        return Ok(None);
    }
    let why = format!(
        "it asked for checkpoints of rank {rank} of job {} without the home's leave",
        JobId(job)
    );
    tracing::info!(%reader, "refused: {why}");
    Ok(Some(PeerReply::refused(RefusalKind::NotAllowed, why)))
}

/// What a holder's error tells the writer or reader.
fn holder_refusal(e: &HolderError) -> PeerReply {
    let kind = match e {
        HolderError::BlockTooLarge(_)
        | HolderError::TooLarge { .. }
        | HolderError::Stale { .. }
        | HolderError::Incomplete => RefusalKind::Malformed,
        HolderError::NotOwner => RefusalKind::NotAllowed,
        HolderError::Quota { .. } | HolderError::Store(_) => RefusalKind::Unavailable,
    };
    PeerReply::refused(kind, e.to_string())
}

/// What a home's refusal of a checkpoint request tells its sender.
fn checkpoint_refusal(e: &CheckpointRefused) -> RefusalKind {
    match e {
        CheckpointRefused::UnknownJob(_) | CheckpointRefused::Ended(_) => RefusalKind::NotHere,
        CheckpointRefused::NotPlaced { .. } => RefusalKind::NotAllowed,
        _ => RefusalKind::Malformed,
    }
}

impl Node {
    /// The checkpoint store of a worker of `rank` of `job` starting here.
    pub(super) fn worker_checkpoints(
        &self,
        job: u64,
        home: watch::Receiver<PeerId>,
        copies: watch::Receiver<Vec<PeerId>>,
        rank: u32,
        incarnation: u32,
    ) -> Arc<dyn zorilla_sandbox::Checkpoints> {
        Arc::new(NetCheckpoints {
            net: self.net.clone(),
            neighbours: self.checkpoints.neighbours.clone(),
            settings: self.checkpoints.settings,
            job,
            home,
            copies,
            rank,
            incarnation,
            saves: Default::default(),
        })
    }

    /// The overlay's neighbours changed: saves choose among the new ones.
    pub(super) fn checkpoint_neighbours(&self) {
        let mut shared = self
            .checkpoints
            .neighbours
            .write()
            .unwrap_or_else(|e| e.into_inner());
        *shared = self.neighbours.iter().copied().collect();
    }

    /// Runs `f` on the holder off the loop and answers `to` with its
    /// result.
    fn on_holder(
        &mut self,
        to: Reply,
        f: impl FnOnce(&mut Holder) -> Result<PeerReply, HolderError> + Send + 'static,
    ) {
        let holder = self.checkpoints.holder.clone();
        self.answer_later(to, async move {
            match holder {
                Err(e) => PeerReply::refused(RefusalKind::Unavailable, e),
                Ok(holder) => tokio::task::spawn_blocking(move || {
                    let mut holder = holder.lock().unwrap_or_else(|e| e.into_inner());
                    f(&mut holder).unwrap_or_else(|e| holder_refusal(&e))
                })
                .await
                .unwrap_or_else(|e| {
                    PeerReply::refused(RefusalKind::Unavailable, format!("checkpoint holder: {e}"))
                }),
            }
        });
    }

    /// Answers a request about checkpoints.
    pub(super) fn checkpoint_rpc(&mut self, from: PeerId, rpc: CheckpointRpc, reply: Reply) {
        let answer = match rpc {
            CheckpointRpc::Put {
                job,
                home,
                rank,
                seq,
                data,
            } => {
                let (owner, home) = (from.to_string(), home.to_string());
                return self.on_holder(reply, move |h| {
                    h.put(&owner, &home, job, rank, seq, &data)
                        .map(|_| PeerReply::Ack)
                });
            }
            CheckpointRpc::Commit {
                job,
                rank,
                manifest,
                copies,
            } => {
                let owner = from.to_string();
                let copies = copies.iter().map(PeerId::to_string).collect();
                return self.on_holder(reply, move |h| {
                    h.commit(&owner, job, rank, manifest, copies)
                        .map(|()| PeerReply::Ack)
                });
            }
            CheckpointRpc::Manifest {
                job,
                rank,
                seq,
                ticket,
            } => {
                return self.on_holder(reply, move |h| {
                    if let Some(refused) = refuse_reader(h, from, job, rank, &ticket)? {
                        return Ok(refused);
                    }
                    h.manifest(job, rank, seq)
                        .map(|m| PeerReply::Checkpoint(CheckpointReply::Manifest(m)))
                });
            }
            CheckpointRpc::Get {
                job,
                rank,
                hash,
                ticket,
            } => {
                return self.on_holder(reply, move |h| {
                    if let Some(refused) = refuse_reader(h, from, job, rank, &ticket)? {
                        return Ok(refused);
                    }
                    Ok(match h.block(job, rank, &hash)? {
                        Some(block) => PeerReply::Block(block),
                        None => PeerReply::refused(
                            RefusalKind::NotHere,
                            "no such checkpoint block here",
                        ),
                    })
                });
            }
            CheckpointRpc::Drop { job } => {
                let home = from.to_string();
                return self.on_holder(reply, move |h| {
                    let ranks = h.drop_job(&home, job)?;
                    if ranks > 0 {
                        tracing::info!(job = %JobId(job), ranks, "checkpoints of an ended job dropped");
                    }
                    Ok(PeerReply::Ack)
                });
            }
            CheckpointRpc::Stored {
                job,
                rank,
                seq,
                generation,
                size,
                holders,
            } => {
                let latest = Latest {
                    seq,
                    generation,
                    size,
                    holders,
                };
                self.checkpoint_stored(from, job, rank, latest)
            }
            // Told only to the node the rank is placed on: its fresh
            // worker is the one that loads it.
            CheckpointRpc::Where { job, rank } => {
                match self
                    .machine
                    .scheduler()
                    .checkpoint_of(JobId(job), &from, rank)
                {
                    Ok(latest) => {
                        let ticket = self.overlay.signer().sign(&ticket(job, rank, &from));
                        PeerReply::Checkpoint(CheckpointReply::At(latest.map(|l| Located {
                            seq: l.seq,
                            generation: l.generation,
                            size: l.size,
                            holders: l.holders.clone(),
                            ticket,
                        })))
                    }
                    Err(e) => PeerReply::refused(checkpoint_refusal(&e), e.to_string()),
                }
            }
        };
        self.reply(reply, answer);
    }

    /// A node running `rank` of `job` stored a checkpoint: the home's
    /// index (the core's) keeps it if the job is under way here and the
    /// sender's worker is the one placed for the rank.
    fn checkpoint_stored(
        &mut self,
        from: PeerId,
        job: u64,
        rank: u32,
        latest: Latest<PeerId>,
    ) -> PeerReply {
        let (seq, generation, holders) = (latest.seq, latest.generation, latest.holders.len());
        let now = self.now();
        match self
            .machine
            .checkpoint_stored(now, JobId(job), &from, rank, latest)
        {
            Ok(out) => {
                tracing::debug!(
                    job = %JobId(job),
                    rank,
                    seq,
                    ?generation,
                    holders,
                    "checkpoint recorded"
                );
                self.execute(out);
                PeerReply::Ack
            }
            Err(e) => PeerReply::refused(checkpoint_refusal(&e), e.to_string()),
        }
    }

    /// Tells the holders of checkpoints of jobs that ended here to drop
    /// them, and lets the holder delete ranks unwritten for too long.
    pub(super) fn collect_checkpoints(&mut self) {
        let jobs = self.machine.scheduler().checkpoints().jobs();
        for job in jobs {
            if self.jobs.is_under_way(job) {
                continue;
            }
            for holder in self.machine.forget_checkpoints(JobId(job)) {
                let net = self.net.clone();
                self.tasks.spawn(async move {
                    let rpc = PeerRpc::Checkpoint(CheckpointRpc::Drop { job });
                    if let Err(e) = net.call_ok(holder, rpc).await {
                        tracing::debug!(job = %JobId(job), %holder, "dropping checkpoints: {e}");
                    }
                    Done::Nothing
                });
            }
        }
        if self.checkpoints.last_expire.elapsed() >= EXPIRE_CHECK
            && let Ok(holder) = &self.checkpoints.holder
        {
            self.checkpoints.last_expire = Instant::now();
            let holder = holder.clone();
            drop(tokio::task::spawn_blocking(move || {
                let mut holder = holder.lock().unwrap_or_else(|e| e.into_inner());
                match holder.expire() {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(ranks = n, "checkpoints unwritten too long dropped"),
                    Err(e) => tracing::warn!("expiring checkpoints: {e}"),
                }
            }));
        }
    }
}

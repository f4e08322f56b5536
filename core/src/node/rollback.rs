//! The home's side of checkpoints (issue 16): the index of where each
//! rank's checkpoints are ([`Scheduler::checkpoint_stored`],
//! [`Scheduler::checkpoint_of`]), and the coordinated rollback of a rigid
//! job whose ranks roll back together
//! ([`LostPolicy::Rollback`](super::LostPolicy::Rollback), the LBG-SQUARE
//! way).
//!
//! # Rollback
//!
//! When a rank of such a job is lost, the home
//! 1. computes the latest checkpoint generation every rank holds
//!    ([`CheckpointIndex::common_generation`]): ranks take their
//!    checkpoints at a barrier, each under the same generation, and the
//!    index keeps each rank's two latest, so one is common while a save is
//!    on its way;
//! 2. stops every worker the job still has ([`RefuseReason::RolledBack`]
//!    to their nodes) and counts every rank lost
//!    ([`LostReason::RolledBack`]), the ones that had ended too: they must
//!    compute again from that generation with the others;
//! 3. drops the checkpoints of the abandoned timeline from the index
//!    ([`CheckpointIndex::roll_back`]), so that every rank's fresh worker
//!    is told of the generation chosen and nothing newer;
//! 4. floods for the whole job afresh and grants its ranks together, as
//!    at its start (so every fresh worker's grant names where all the
//!    others are, and the job's size): every rank gets a new incarnation.
//!
//! A rank's messages are carried by channels named by the incarnations of
//! both ends ([`crate::channel::ChannelId`]), so nothing a worker of the
//! old incarnation sent, or was sent, reaches a fresh one; and the home
//! takes a worker's end or checkpoint only from the incarnation it places
//! now. A rank lost while the job is rolling back rolls it back again,
//! from the generation common then. It is all logged
//! ([`JobEvent::RolledBack`], [`JobEvent::Checkpointed`]), so a home that
//! takes the job over decides the same.

use super::*;
use crate::checkpoint::{Latest, NotRecorded, incarnation_of};

impl<P: PeerKey> Scheduler<P> {
    /// The worker of `rank` of `job` on `node` stored `checkpoint`: the
    /// home's index takes it if the job is under way here and the worker
    /// is the one placed for the rank now (its incarnation is in the
    /// checkpoint's number, see [`crate::checkpoint::checkpoint_seq`]).
    /// The outputs log it for a job whose ranks roll back together.
    pub fn checkpoint_stored(
        &mut self,
        job_id: JobId,
        node: &P,
        rank: u32,
        checkpoint: Latest<P>,
    ) -> Result<Vec<Output<P>>, CheckpointRefused> {
        let job = self
            .home
            .get_mut(&job_id)
            .ok_or(CheckpointRefused::UnknownJob(job_id))?;
        if job.phase > Phase::Running {
            return Err(CheckpointRefused::Ended(job_id));
        }
        let placed = job.ranks.get(rank).is_some_and(|r| {
            r.node == *node
                && r.incarnation == incarnation_of(checkpoint.seq)
                && !matches!(r.outcome, Some(RankOutcome::Lost(_)))
        });
        if !placed {
            return Err(CheckpointRefused::NotPlaced { job: job_id, rank });
        }
        self.checkpoints
            .record(job_id.0, rank, checkpoint.clone())
            .map_err(|e| match e {
                NotRecorded::Older => CheckpointRefused::Older { rank },
                NotRecorded::OutOfRange => CheckpointRefused::OutOfRange,
            })?;
        let mut out = Vec::new();
        let logged = job.spec.on_worker_lost == LostPolicy::Rollback
            && checkpoint.generation.is_some()
            && job.logged_checkpoints < MAX_LOGGED_CHECKPOINTS;
        if logged {
            job.logged_checkpoints += 1;
            out.push(Output::Job(JobEvent::Checkpointed {
                job: job_id,
                rank,
                checkpoint,
            }));
        }
        Ok(out)
    }

    /// The checkpoint a fresh worker of `rank` of `job` on `node` starts
    /// from: the rank's latest known (after a rollback, the one of the
    /// generation the job rolled back to). `Err` if the job is not under
    /// way here or the rank is not placed on `node`.
    pub fn checkpoint_of(
        &self,
        job_id: JobId,
        node: &P,
        rank: u32,
    ) -> Result<Option<&Latest<P>>, CheckpointRefused> {
        let job = self
            .home
            .get(&job_id)
            .ok_or(CheckpointRefused::UnknownJob(job_id))?;
        if job.ranks.get(rank).is_none_or(|r| r.node != *node) {
            return Err(CheckpointRefused::NotPlaced { job: job_id, rank });
        }
        Ok(self.checkpoints.latest(job_id.0, rank))
    }

    /// The home's index of its jobs' checkpoints.
    pub fn checkpoints(&self) -> &CheckpointIndex<P> {
        &self.checkpoints
    }

    /// Forgets the checkpoints of `job` (it is over, and the driver tells
    /// their holders to drop them); returns the nodes that hold them.
    pub fn forget_checkpoints(&mut self, job: JobId) -> BTreeSet<P> {
        self.checkpoints.end_job(job.0)
    }

    /// Rolls `job_id` back (see the module docs): called once a rank of a
    /// running rigid job with [`LostPolicy::Rollback`] was lost (its
    /// [`JobEvent::WorkersLost`] given).
    pub(super) fn roll_back(&mut self, now: Time, job_id: JobId, out: &mut Vec<Output<P>>) {
        let Some(job) = self.home.get_mut(&job_id) else {
            return;
        };
        let ranks: Vec<u32> = job.ranks.iter().map(|(r, _)| r).collect();
        let generation = self.checkpoints.common_generation(job_id.0, ranks);
        let nodes = job.ranks.nodes();
        let stopped = job.ranks.lose_all(LostReason::RolledBack);
        self.checkpoints.roll_back(job_id.0, generation);
        job.report.granted = job.granted_workers();
        out.push(Output::Job(JobEvent::RolledBack {
            job: job_id,
            generation,
            stopped,
        }));
        for node in nodes {
            let msg = Message::Refuse {
                job: job_id,
                hold: None,
                reason: RefuseReason::RolledBack,
            };
            if node == self.id {
                // This node's own workers stop now, before its next offer
                // for the job (which a refusal looped back later would
                // take back).
                self.message(now, node, msg, None, out);
            } else {
                out.push(Output::Send { to: node, msg });
            }
        }
        if let Some(job) = self.home.get_mut(&job_id) {
            let max = job.spec.workers.max;
            job.flood_afresh(now, max);
        }
    }
}

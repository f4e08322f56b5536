//! The home's side of its members' reports: a member asks for its job's
//! state, streams its ranks' logs and outputs, and reports each worker's
//! end ([`MemberRpc`]). The home takes them only from the nodes of the
//! job's ranks, and outputs only up to what it keeps for a job.

use std::collections::BTreeMap;

use zorilla_core::advert::JobId;
use zorilla_core::machine;
use zorilla_overlay::PeerId;

use super::client::output_room;
use super::files::check_output_name;
use super::{Node, Reply};
use crate::store::{Append, JobRecord};
use crate::wire::files::BLOCK_BYTES;
use crate::wire::job_copy::JobInfo;
use crate::wire::member::MemberRpc;
use crate::wire::{PeerReply, RefusalKind};

impl Node {
    /// Answers a member's request, or hands it to the store's writer (logs
    /// and outputs) or to the job machine (a worker's end, acknowledged
    /// once a copy holds it), which answer later.
    pub(super) fn member_rpc(&mut self, from: PeerId, rpc: MemberRpc, reply: Reply) {
        let answer = match rpc {
            MemberRpc::GetJob { job } if !self.of_job(job, &from) => self.refuse_data(
                from,
                format!("it asked for job {} of which it holds no part", JobId(job)),
            ),
            MemberRpc::GetJob { job } => match self.job_info(job) {
                Some(info) => PeerReply::Job(Box::new(info)),
                None => PeerReply::refused(
                    RefusalKind::NotHere,
                    format!("job {} unknown here", JobId(job)),
                ),
            },
            MemberRpc::Log { job, chunk } => match self.logs_refused(from, job) {
                None => return self.append(reply, Append::Log { job, chunk }),
                Some(refused) => refused,
            },
            MemberRpc::Output {
                job,
                name,
                offset,
                data,
            } => match self.accept_output(from, job, &name, data.len()) {
                Ok(()) => {
                    let last = data.len() < BLOCK_BYTES;
                    let item = Append::Output {
                        job,
                        name,
                        offset,
                        data,
                        last,
                    };
                    return self.append(reply, item);
                }
                Err(e) => PeerReply::refused(RefusalKind::NotAllowed, e),
            },
            MemberRpc::WorkerEnded {
                job,
                rank,
                incarnation,
                end,
                digest,
            } => {
                // Acknowledged once a copy holds the end (the member
                // forgets the rank then): see `zorilla_core::machine`.
                return self.feed(machine::Input::EndReported {
                    job: JobId(job),
                    node: from,
                    rank,
                    incarnation,
                    end,
                    digest,
                    reply,
                });
            }
        };
        self.reply(reply, answer);
    }

    /// Whether a block of `len` bytes of output `name` of `job` from
    /// `from` is taken: only while the job is under way here, from a node
    /// running the rank the name starts with, and while the job's outputs
    /// stay within what this home keeps for a job ([`output_room`]). A
    /// refusal says why in one sentence, which the sender puts in the
    /// job's log.
    fn accept_output(
        &mut self,
        from: PeerId,
        job: u64,
        name: &str,
        len: usize,
    ) -> Result<(), String> {
        let Some(record) = self.jobs.under_way(job) else {
            return Err(format!(
                "job {} is over (or unknown here): its outputs are no longer taken",
                JobId(job)
            ));
        };
        // Clients write outputs under these names: one that could leave
        // their directory, or that names a rank the sender does not run,
        // is refused here already.
        check_output_name(name, |rank| {
            record.ranks.get(&rank).is_some_and(|r| *r.node == from)
        })
        .map_err(|e| e.to_string())?;
        let room = output_room(
            &record.request,
            self.machine.scheduler().config().resources.disk_mib,
        );
        let store = &self.store;
        self.jobs
            .take_output(job, len as u64, room, || {
                store.output_bytes(job).unwrap_or(0)
            })
            .map_err(|_| {
                format!(
                    "the outputs of job {} reached the {} MiB its home keeps for one job",
                    JobId(job),
                    room / (1024 * 1024)
                )
            })
    }

    /// Refuses a log chunk of `job` from a node that neither runs nor ran
    /// one of its ranks (late output of a finished job is checked against
    /// its stored record).
    fn logs_refused(&self, from: PeerId, job: u64) -> Option<PeerReply> {
        let from_rank = |j: &JobRecord| j.ranks.values().any(|r| *r.node == from);
        let known = match self.jobs.under_way(job) {
            Some(j) => from_rank(j),
            None => self.record(job).is_some_and(|j| from_rank(&j)),
        };
        (!known).then(|| {
            PeerReply::refused(
                RefusalKind::NotAllowed,
                format!("job {} has no worker on {from}", JobId(job)),
            )
        })
    }

    /// Whether `peer` is of `job` as this node knows it: its home, a node
    /// holding a copy of its state, or a node running its ranks. Only they
    /// get the job's copy, files and checkpoints.
    pub(super) fn of_job(&self, job: u64, peer: &PeerId) -> bool {
        self.shares_job_replica(job, peer)
            || self
                .jobs
                .under_way(job)
                .is_some_and(|record| record.ranks.values().any(|r| *r.node == *peer))
            || self.members.get(&job).is_some_and(|m| m.home == *peer)
    }

    /// Refuses a request for a job's data from a node that is not of the
    /// job. Not counted as misbehaviour: an honest copy asks late for the
    /// files of a job that has ended meanwhile (and counting it banned the
    /// job's own nodes from each other under a run of short jobs).
    pub(super) fn refuse_data(&self, from: PeerId, why: String) -> PeerReply {
        tracing::info!(%from, "refused: {why}");
        PeerReply::refused(RefusalKind::NotAllowed, why)
    }

    pub(super) fn job_info(&self, job: u64) -> Option<JobInfo> {
        let record = self.record(job)?;
        Some(JobInfo {
            id: job,
            home: self.me,
            phase: record.phase,
            request: record.request.clone(),
            module: record.module.clone(),
            inputs: record.inputs.clone(),
            // A finished job's placement went out with its last change.
            ranks: if record.phase.is_terminal() {
                BTreeMap::new()
            } else {
                self.machine
                    .scheduler()
                    .ranks(JobId(job))
                    .map(|table| table.placement())
                    .unwrap_or_default()
            },
        })
    }
}

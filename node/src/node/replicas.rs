//! The loop's side of a job's replicated state (issue 16; the decisions
//! are the core's [`zorilla_core::machine`]): a copy invited by a job's
//! home fetches the job's files; a copy that took a job over writes the
//! job's record; an old home that stepped down marks its record as the new
//! home's; the workers of a job follow its home. Replica messages reach
//! the machine only with a job copy whose fields are checked.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use zorilla_core::advert::JobId;
use zorilla_core::machine;
use zorilla_core::machine::{Notice, Origin};
use zorilla_core::node::JobState;
use zorilla_core::replica::{Signature, Signer, Statement};
use zorilla_overlay::PeerId;
use zorilla_overlay::identity::PeerSigner;

use super::files::{check_job_copy, fetch};
use super::{Done, Node};
use crate::protocol::{JobPhase, RankStatus};
use crate::store::{FileRef, JobRecord, StoredPeer};
use crate::wire::job_copy::JobCopy;
use crate::wire::replica::{ReplicaMsg, ReplicaRpc};
use crate::wire::{PeerRpc, encode};

/// How many extra copies fetch their job's files at once.
pub(super) const MAX_COPY_FETCHES: usize = 4;

impl Origin<PeerId> for JobCopy {
    fn first_home(&self, job: JobId) -> Option<PeerId> {
        JobCopy::first_home(self, job.0)
    }
}

/// Signs this node's statements about its jobs' replicas (votes, and as a
/// primary the copies) with its peer key, and checks other nodes' with
/// theirs (the core's [`Signer`]).
#[derive(Debug)]
pub(super) struct StatementSigner(pub(super) PeerSigner);

/// What a statement's signature covers besides it: no signature made for
/// another purpose passes for one.
const STATEMENT_CONTEXT: &str = "zorilla replica statement 1";

impl Signer<PeerId> for StatementSigner {
    fn sign(&self, statement: &Statement<'_, PeerId>) -> Signature {
        Signature(self.0.sign(&encode(&(STATEMENT_CONTEXT, statement))))
    }

    fn verify(
        &self,
        signer: &PeerId,
        statement: &Statement<'_, PeerId>,
        signature: &Signature,
    ) -> bool {
        PeerSigner::verify(
            signer,
            &encode(&(STATEMENT_CONTEXT, statement)),
            &signature.0,
        )
    }
}

impl Node {
    /// An extra copy (a node that runs none of the job's ranks) gets the
    /// job's module and inputs into its file cache, so that if it takes
    /// the job over it can hand them to the workers it places: the files
    /// are then held by at least two nodes. At most [`MAX_COPY_FETCHES`]
    /// fetches run at once; the others wait their turn.
    pub(super) fn fetch_job_files(&mut self, job: u64, primary: PeerId, copy: &JobCopy) {
        let net = self.net.clone();
        let files = self.dir.join("files");
        let wanted: Vec<FileRef> = std::iter::once(copy.module.clone())
            .chain(copy.inputs.iter().cloned())
            .collect();
        let slots = self.copy_fetches.clone();
        self.tasks.spawn(async move {
            let Ok(_slot) = slots.acquire_owned().await else {
                return Done::Nothing;
            };
            if let Err(e) = tokio::fs::create_dir_all(&files).await {
                tracing::warn!(job = %JobId(job), "as a copy of the job, cannot keep its files: {e}");
                return Done::Nothing;
            }
            for file in &wanted {
                if let Err(e) = fetch(&net, &[primary], &files, file).await {
                    tracing::warn!(job = %JobId(job), "as a copy of the job, could not get its file {}: {e}", file.name);
                }
            }
            Done::Nothing
        });
    }

    /// A replica message from `from`, with the job's copy if it came with
    /// it: a copy whose fields do not hold is refused here (the machine
    /// decides the rest).
    pub(super) fn replica_message(
        &mut self,
        from: PeerId,
        job: u64,
        msg: ReplicaMsg,
        copy: Option<JobCopy>,
    ) {
        if let Some(copy) = &copy
            && let Err(e) = check_job_copy(copy)
        {
            tracing::warn!(job = %JobId(job), %from, "refused to hold a copy of the job: {e}");
            return;
        }
        self.feed(machine::Input::Replica {
            from,
            job: JobId(job),
            msg,
            copy,
        });
    }

    /// The job's primary as this node's replica knows it.
    pub(super) fn primary_of(&self, job: u64) -> Option<PeerId> {
        self.machine.primary_of(JobId(job)).copied()
    }

    /// Whether this node holds a replica of `job` that is not its primary
    /// (its workers wait for the job's next home rather than stop).
    pub(super) fn is_copy(&self, job: u64) -> bool {
        self.machine.is_copy(JobId(job))
    }

    /// Whether `peer` is the primary or a copy of a job this node holds a
    /// replica of.
    pub(super) fn shares_replica_with(&self, peer: &PeerId) -> bool {
        self.machine.shares_replica_with(peer)
    }

    /// Whether `peer` is the primary or a copy of `job` as this node's
    /// replica knows it.
    pub(super) fn shares_job_replica(&self, job: u64, peer: &PeerId) -> bool {
        self.machine.shares_job_replica(JobId(job), peer)
    }

    /// The jobs this node holds a copy of whose copy `uses` says yes to.
    pub(super) fn replica_jobs_using(
        &self,
        uses: impl Fn(&JobCopy) -> bool,
    ) -> impl Iterator<Item = u64> {
        self.machine
            .copies_held()
            .filter(move |(_, copy)| uses(copy))
            .map(|(job, _)| job.0)
    }

    /// A job with no worker running here any more that this node holds no
    /// live copy of is forgotten here (what its ended ranks kept goes).
    pub(super) fn forget_idle_member(&mut self, job: u64) {
        let idle = self
            .members
            .get(&job)
            .is_some_and(|m| m.workers.is_empty() && m.pending.is_empty());
        if idle && !self.is_copy(job) {
            self.members.remove(&job);
        }
    }

    /// Tells `peer`, which acts as `job`'s home, of the primary in charge
    /// now, if this node's replica knows a newer one (it steps down on
    /// hearing it).
    pub(super) fn tell_newer_primary(&mut self, job: u64, peer: PeerId) {
        if let Some(msg) = self.machine.newer_primary_notice(JobId(job), &peer) {
            self.send(
                peer,
                PeerRpc::Replica(ReplicaRpc {
                    job,
                    msg: Box::new(msg),
                    copy: None,
                }),
            );
        }
    }

    /// Hands the client connections the primaries of the jobs this node
    /// holds copies of (see [`crate::forward`]), when they changed.
    pub(super) fn publish_primaries(&mut self) {
        let now: BTreeMap<u64, PeerId> = self
            .machine
            .primaries()
            .map(|(job, primary)| (job.0, *primary))
            .collect();
        let mut shared = self.primaries.write().unwrap_or_else(|e| e.into_inner());
        if *shared != now {
            *shared = now;
        }
    }

    /// Tells the workers of `job` here (if any) the job's copies, for
    /// their checkpoints' holders.
    pub(super) fn publish_copies(&self, job: u64, copies: BTreeSet<PeerId>) {
        if let Some(member) = self.members.get(&job) {
            member.copies_tx.send_if_modified(|now| {
                let changed = !now.iter().eq(copies.iter());
                if changed {
                    *now = copies.iter().copied().collect();
                }
                changed
            });
        }
    }

    /// The job's copy as this node can hand it on: its record's if it is
    /// home, else the one it was given.
    pub(super) fn replica_copy(&self, job: u64) -> Option<JobCopy> {
        self.job_copy(job)
            .or_else(|| self.machine.copy_of(JobId(job)).cloned())
    }

    /// The copies chose this node and the machine adopted the job: its
    /// record, in the state the log describes.
    pub(super) fn took_over(
        &mut self,
        job: u64,
        term: u64,
        state: &JobState<PeerId>,
        copy: JobCopy,
        old_home: Option<PeerId>,
    ) {
        let old = old_home.map_or_else(|| "its home".to_owned(), |h| format!("node {h}"));
        tracing::warn!(job = %JobId(job), term, "took the job over from {old}, which fell silent");
        let mut ranks = BTreeMap::new();
        for (rank, r) in state.ranks.iter() {
            let mut status = RankStatus::running(StoredPeer(r.node));
            if let Some(outcome) = &r.outcome {
                status.ended(outcome, &r.node);
            }
            ranks.insert(rank, status);
        }
        let phase = JobPhase::from(state.phase);
        let record = JobRecord {
            kept_run: None,
            id: job,
            phase,
            reason: format!("taken over from {old} (term {term})"),
            request: copy.request,
            module: copy.module,
            inputs: copy.inputs,
            ranks,
            submitted_unix: copy.submitted_unix,
            moved_from: old_home.map(StoredPeer),
            moved_to: None,
            owner: copy.owner,
            owner_proof: copy.owner_proof,
            origin: copy.origin,
            tasks: crate::protocol::TaskStatus::of(&state.ranks, |node| StoredPeer(*node)),
        };
        self.persist(&record);
        if phase.is_terminal() {
            self.jobs.add_finished(record);
        } else {
            self.jobs.start(record);
        }
    }

    /// A newer primary is in charge: this node is no longer the job's home.
    pub(super) fn stepped_down(&mut self, job: u64, primary: PeerId) {
        tracing::warn!(job = %JobId(job), %primary, "another node is the job's home now: stepped down");
        self.stall.forget_job(JobId(job));
        // The record stays for what it holds, marked as the new home's (also
        // when this node ended the job on stale knowledge before it heard
        // of the new primary: that end is not the job's).
        let record = self.jobs.remove(job).or_else(|| {
            self.jobs
                .get(job)
                .cloned()
                .or_else(|| self.store.job(job).ok().flatten())
        });
        if let Some(mut record) = record {
            record.moved_to = Some(StoredPeer(primary));
            self.persist(&record);
            self.jobs.update(record);
        }
    }

    /// The job's home is `home` now: the ranks here report there, and
    /// what ranks that ended here sent to the old home is sent again.
    pub(super) fn home_moved(&mut self, job: u64, home: PeerId) {
        let Some(member) = self.members.get_mut(&job) else {
            return;
        };
        if member.home == home {
            return;
        }
        tracing::info!(job = %JobId(job), %home, "the job's home moved");
        member.home = home;
        member.heard = Instant::now();
        let _ = member.home_tx.send(home);
    }
}

/// Writes what the machine noticed into the log.
pub(super) fn notice_log(notice: Notice<PeerId>) {
    match notice {
        Notice::NotLogged(job) => {
            tracing::warn!(job = %job, "cannot log the job's event: its log is full");
        }
        Notice::TooManyReplicas(job) => {
            tracing::warn!(job = %job, "holding replicas of as many jobs as allowed: no copy of this one");
        }
        Notice::HoldingCopy { job, home } => {
            tracing::info!(job = %job, %home, "holding a copy of the job's state");
        }
        Notice::NotOfTheJob { job, from } => {
            tracing::debug!(job = %job, %from, "replica message from a node not of the job: ignored");
        }
        Notice::Refused { job, from, why } => {
            tracing::debug!(job = %job, %from, "replica message refused: {why}");
        }
        Notice::EntriesDropped { job, count } => tracing::warn!(
            job = %job,
            entries = count,
            "entries of a primary that stepped down are not in the new primary's log"
        ),
        Notice::CannotTakeOver(job) => {
            tracing::warn!(job = %job, "took over a job whose log lacks its spec, or of which this node has no copy: nothing to run");
        }
        Notice::VerdictHeld { job, peer } => tracing::warn!(
            job = %job,
            %peer,
            "peer does not answer, nor do most copies of a job it serves: this node may be the one cut off, so it waits before treating it as lost"
        ),
        Notice::PeerLost { peer, held: false } => {
            tracing::warn!(%peer, "peer does not answer; treating it as lost");
        }
        Notice::PeerLost { peer, held: true } => {
            tracing::warn!(%peer, "peer does not answer, nor do most copies of a job it serves, for a while: treating it as lost");
        }
    }
}

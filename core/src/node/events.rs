//! What goes into the scheduler and what comes out of it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::outcome::{LostReason, RankOutcome, WorkerEnd};
use super::ranks::EndReason;
use super::spec::{Admitted, SpecError};
use crate::advert::{Advert, JobId, Message, Phase, Placed, RefuseReason};
use crate::checkpoint::Latest;
use crate::liveness::LostCause;
use crate::runs::ResultDigest;

/// An event for the scheduler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<P> {
    /// A user submitted a job to this node, which becomes its home.
    Submit {
        /// The job's identity (the driver picks it at random).
        job: JobId,
        /// What the job needs, admitted by this scheduler
        /// ([`Scheduler::admit`](super::Scheduler::admit)).
        spec: Admitted,
        /// The user who owns it (whose signature the driver checked), if
        /// any: its adverts name it, for the nodes' owners' policies.
        owner: Option<P>,
    },
    /// A user cancelled a job this node is home to.
    Cancel(JobId),
    /// A node reported how a worker of a job this node is home to ended
    /// (see [`RankTable`](super::RankTable) for what the home makes of
    /// it). A report from a worker the home no longer places there is
    /// ignored.
    RankEnded {
        /// The job.
        job: JobId,
        /// The node that ran the worker (the report's sender).
        node: P,
        /// The rank.
        rank: u32,
        /// The worker's incarnation (the grant that started it).
        incarnation: u32,
        /// How it ended.
        end: WorkerEnd,
        /// The digest of what it computed, of a job that runs more than
        /// once (see [`crate::runs`]); `None` otherwise.
        digest: Option<ResultDigest>,
    },
    /// The flood router delivered an advert (first copy of a flood).
    AdvertDelivered {
        /// The advert.
        advert: Advert<P>,
        /// This node's estimated RTT to the home.
        distance: Duration,
    },
    /// A direct message from another node.
    Message {
        /// The sender.
        from: P,
        /// The message (never an advert: those come through the router).
        msg: Message<P>,
        /// The driver's own measured RTT to the sender, if it has one.
        rtt: Option<Duration>,
    },
    /// Workers of a job ended on this node; their resources are free again.
    WorkersEnded {
        /// The job.
        job: JobId,
        /// The ranks that ended.
        ranks: Vec<u32>,
    },
    /// A peer failed or left the grid.
    PeerLost(P),
    /// Ranks of a job this node is home to no longer run on `node`,
    /// though the node may still be there (it restarted and forgot them,
    /// or it stopped answering for them: see [`crate::liveness`]). Ranks
    /// not granted to `node` (any more) are ignored, so each loss counts
    /// once.
    RanksLost {
        /// The job.
        job: JobId,
        /// The node the ranks were granted to.
        node: P,
        /// The ranks.
        ranks: Vec<u32>,
        /// Why they count as lost.
        cause: LostCause,
    },
    /// Every rank of a job this node is home to that has not ended waited
    /// for a message at one instant, with nothing in flight (see
    /// [`crate::stall`]): `ranks`, each with the node it ran on. The home
    /// ends the job ([`EndReason::Stalled`]) if these are exactly the
    /// ranks it places and runs, and nothing could still wake them: no
    /// lost rank waits for a replacement, and a malleable job cannot grow.
    Stalled {
        /// The job.
        job: JobId,
        /// The ranks that waited, and their nodes.
        ranks: BTreeMap<u32, P>,
    },
}

/// An action for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output<P> {
    /// Send a message directly to a node.
    Send {
        /// The receiver.
        to: P,
        /// The message.
        msg: Message<P>,
    },
    /// Start a flood of this advert (through the flood router's
    /// `originate`).
    Flood(Advert<P>),
    /// Start workers of a job on this node.
    StartWorkers {
        /// The job.
        job: JobId,
        /// Its home.
        home: P,
        /// The ranks to start.
        ranks: Vec<u32>,
        /// Their incarnation (see [`Message::Grant`]).
        incarnation: u32,
        /// Where every rank of the job runs, these included (from the
        /// grant: the member asks nothing more before it starts them).
        placement: BTreeMap<u32, Placed<P>>,
    },
    /// The placement or phase of a job this node runs ranks of changed
    /// (see [`Message::Placement`]): the workers here learn where their
    /// peers are now, and stop if the job was cancelled or failed.
    PlacementChanged {
        /// The job.
        job: JobId,
        /// Its home (the message's sender).
        home: P,
        /// The job's phase.
        phase: Phase,
        /// Where every rank runs now.
        placement: BTreeMap<u32, Placed<P>>,
        /// Ranks that got a fresh worker since the last change.
        replaced: Vec<u32>,
    },
    /// Stop every worker of `job` on this node: its cores go to
    /// `for_job`, a job of a node this one owes favours (see
    /// [`crate::favours`]). The job's home was told (a withdrawal of its
    /// ranks here) and replaces them elsewhere.
    Preempted {
        /// The job whose workers stop.
        job: JobId,
        /// The creditor's job that gets their cores.
        for_job: JobId,
    },
    /// Stop every worker of a job on this node.
    StopWorkers {
        /// The job.
        job: JobId,
        /// Why.
        reason: RefuseReason,
    },
    /// Something happened to a job this node is home to.
    Job(JobEvent<P>),
}

/// What happened to a job, as seen by its home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobEvent<P> {
    /// The job was refused.
    Rejected {
        /// The job.
        job: JobId,
        /// Why.
        error: SpecError,
    },
    /// Workers were granted to a node (one event per node and grant).
    Granted {
        /// The job.
        job: JobId,
        /// The node.
        node: P,
        /// The ranks it runs.
        ranks: Vec<u32>,
        /// The grant's number (see [`Message::Grant`]).
        incarnation: u32,
        /// The RTT from the home to the node, as the home knew it.
        rtt: Duration,
        /// Those of `ranks` that were lost before and are replaced now.
        replaced: Vec<u32>,
    },
    /// The job got its `min` workers and started.
    Started {
        /// The job.
        job: JobId,
        /// Workers it started with.
        workers: u32,
    },
    /// The job has all the workers it can use; flooding stopped.
    Full {
        /// The job.
        job: JobId,
    },
    /// A node running workers of the job was lost.
    WorkersLost {
        /// The job.
        job: JobId,
        /// The node.
        node: P,
        /// The ranks lost.
        ranks: Vec<u32>,
        /// Why.
        reason: LostReason,
    },
    /// A node reported the end of a rank's worker, and the home recorded
    /// it (stale and repeated reports give no event).
    RankEnded {
        /// The job.
        job: JobId,
        /// The node the worker ran on.
        node: P,
        /// The rank.
        rank: u32,
        /// How it ended.
        outcome: RankOutcome,
        /// The digest of what it computed (a job that runs more than
        /// once: see [`crate::runs`]; a spot-checked job array's task).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        digest: Option<ResultDigest>,
        /// Whether the home picked this end of a spot-checked array's task
        /// for a check (see [`TaskProgress`](super::TaskProgress)): logged,
        /// as the pick was random.
        #[serde(default, skip_serializing_if = "is_false")]
        check: bool,
    },
    /// A rank of a job whose ranks roll back together
    /// ([`LostPolicy::Rollback`](super::LostPolicy::Rollback)) stored a
    /// checkpoint of a generation, and the home's index took it: logged,
    /// so that a home that takes the job over knows where each rank's
    /// checkpoints are. At most
    /// [`MAX_LOGGED_CHECKPOINTS`](super::MAX_LOGGED_CHECKPOINTS) per job.
    Checkpointed {
        /// The job.
        job: JobId,
        /// The rank.
        rank: u32,
        /// The checkpoint: its number, generation, size and holders.
        checkpoint: Latest<P>,
    },
    /// A job whose ranks roll back together lost a rank: every worker it
    /// still had was stopped, and every rank waits for a fresh worker that
    /// starts from `generation` (from the start if `None`: the ranks held
    /// no checkpoint generation in common).
    RolledBack {
        /// The job.
        job: JobId,
        /// The generation every rank restarts from.
        generation: Option<u64>,
        /// The ranks whose workers were stopped (running or ended) for it;
        /// the lost ones are in the [`JobEvent::WorkersLost`] before.
        stopped: Vec<u32>,
    },
    /// The job ended: completed, cancelled or failed. Exactly once per
    /// job; nothing changes its phase afterwards.
    Ended {
        /// The job.
        job: JobId,
        /// How.
        phase: Phase,
        /// Why.
        reason: EndReason<P>,
    },
}

impl<P> JobEvent<P> {
    /// The job the event is about.
    pub fn job(&self) -> JobId {
        match self {
            JobEvent::Rejected { job, .. }
            | JobEvent::Granted { job, .. }
            | JobEvent::Started { job, .. }
            | JobEvent::Full { job }
            | JobEvent::WorkersLost { job, .. }
            | JobEvent::RankEnded { job, .. }
            | JobEvent::Checkpointed { job, .. }
            | JobEvent::RolledBack { job, .. }
            | JobEvent::Ended { job, .. } => *job,
        }
    }
}

/// Why the home did not take a rank's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointRefused {
    /// This node is not the job's home (or forgot it).
    #[error("job {0} is not under way here")]
    UnknownJob(JobId),
    /// The job is over.
    #[error("job {0} is over")]
    Ended(JobId),
    /// The sender's worker is not the one the home places for the rank now
    /// (another node, an older incarnation, or the rank is lost).
    #[error("rank {rank} of job {job} does not run on the sender as this worker")]
    NotPlaced {
        /// The job.
        job: JobId,
        /// The rank.
        rank: u32,
    },
    /// A newer checkpoint of the rank is known.
    #[error("a newer checkpoint of rank {rank} is known")]
    Older {
        /// The rank.
        rank: u32,
    },
    /// The rank, holders or generation are beyond their maxima.
    #[error("the checkpoint's rank, holders or generation are beyond their maxima")]
    OutOfRange,
}

fn is_false(b: &bool) -> bool {
    !*b
}

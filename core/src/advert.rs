//! Job adverts, and the messages nodes exchange while scheduling a job.
//!
//! The home node of a job floods an [`Advert`] through the overlay. A node
//! that can run workers answers the home directly with an
//! [`Message::Offer`] (holding the offered resources meanwhile); the home
//! answers with [`Message::Grant`] (start these ranks) or
//! [`Message::Refuse`] (release the hold). A node that cannot run workers
//! says why once per job with [`Message::Decline`], which is what lets the
//! home explain to its user why a job is still pending.
//!
//! A grant is the one message a member needs to start its ranks: it names
//! the ranks and their incarnation and carries the job's whole placement
//! (where every rank runs), so the member asks the home nothing before it
//! starts. Later changes of the placement or the phase reach the nodes of
//! the job as [`Message::Placement`].

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::resources::{Machine, Resources};

/// A job's identity, unique in the grid (the home picks it at random).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobId(pub u64);

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// How many workers a job wants. `min == max` for a rigid job, which gets
/// all its workers or none; a malleable job starts with `min` and grows up to
/// `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerCount {
    /// The workers a job needs before it can start.
    pub min: u32,
    /// The most workers a job can use.
    pub max: u32,
}

impl WorkerCount {
    /// A rigid job of exactly `n` workers.
    pub const fn rigid(n: u32) -> Self {
        WorkerCount { min: n, max: n }
    }

    /// Whether the job starts only with all its workers.
    pub fn is_rigid(&self) -> bool {
        self.min == self.max
    }
}

/// How the home maps a job's workers onto the nodes that offered them, from
/// the P2P-MPI paper. Both take the nearest nodes first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// One worker per node first (round robin over the nearest nodes), so
    /// that each worker has a node's memory to itself.
    Spread,
    /// Fill each nearest node's offered cores first, so that workers are as
    /// close to each other as possible.
    #[default]
    Concentrate,
}

/// The limits carried by one flood of an advert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloodHeader {
    /// Which flood of the job this is (0, 1, 2, ...). Each flood is new to
    /// every node; copies of the same flood are duplicates.
    pub seq: u32,
    /// Hops this copy may still travel, including the hop that delivered it.
    pub ttl: u8,
    /// Latency-bounded floods: a node farther than this from the home
    /// neither joins nor forwards. `None` for a plain hop-limited flood.
    pub latency_budget: Option<Duration>,
    /// Sum of the RTTs of the overlay links this copy travelled: an upper
    /// bound of the receiver's distance to the home.
    pub path_rtt: Duration,
}

/// A job advert as flooded through the overlay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Advert<P> {
    /// The job.
    pub job: JobId,
    /// The node the job was submitted to, which schedules it.
    pub home: P,
    /// What each worker needs.
    pub per_worker: Resources,
    /// How many workers the job wants.
    pub workers: WorkerCount,
    /// How the home will map workers onto nodes.
    pub strategy: Strategy,
    /// How long the advert stays valid, counted from when this copy was
    /// sent. A duration, not a time, so that no clocks need to agree.
    pub expires_in: Duration,
    /// The flood this copy belongs to.
    pub flood: FloodHeader,
    /// The user who owns the job, as its home says: what a node's owner
    /// allows is decided by it (a node checks the owner's signature of
    /// the job before it runs a worker of it).
    #[serde(default = "no_owner")]
    pub owner: Option<P>,
    /// What the job's workers are: a node that cannot run them declines.
    #[serde(default)]
    pub kind: WorkKind,
    /// The job's priority among its owner's jobs ([`JobSpec::priority`](crate::node::JobSpec::priority)).
    #[serde(default)]
    pub priority: i8,
    /// Whether its workers may be stopped to give their cores to a job of
    /// a node the member owes favours (see [`crate::favours`]): its home
    /// replaces lost workers ([`LostPolicy`](crate::node::LostPolicy)
    /// other than `Fail`), so the job goes on elsewhere (from its
    /// checkpoints, if it takes them).
    #[serde(default)]
    pub preemptible: bool,
}

/// What a job's workers are.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum WorkKind {
    /// WebAssembly modules: any node runs them in its sandbox.
    #[default]
    Wasm,
    /// Native executables for this architecture: run only by nodes of it
    /// whose owner allows the job's owner native jobs.
    Native(Arch),
}

impl WorkKind {
    /// Whether the workers are WebAssembly modules.
    pub fn is_wasm(&self) -> bool {
        *self == WorkKind::Wasm
    }
}

/// A machine architecture native jobs are built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    /// x86-64 (ELF machine 62).
    X86_64,
    /// 64-bit ARM (ELF machine 183).
    Aarch64,
    /// 64-bit RISC-V (ELF machine 243).
    Riscv64,
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
            Arch::Riscv64 => "riscv64",
        })
    }
}

/// No owner named (adverts of nodes from before owners existed).
pub(crate) fn no_owner<P>() -> Option<P> {
    None
}

/// A member's hold of workers for one job, numbered by the member. An
/// offer that raises a hold keeps its number; a grant, refusal or
/// withdrawal names the hold it is about. Messages between a member and a
/// home may cross or overtake each other (a grant carries the job's
/// module and waits until a copy of the job holds it; a refusal is a few
/// bytes), so without the number a refusal of a raise that crossed the
/// grant using the hold would release the hold the grant needs, and the
/// member would give the granted ranks back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HoldId(pub u32);

/// Why a node does not offer workers to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DeclineReason {
    /// Not enough free cores, memory or disk now (the advert waits in the
    /// node's pending queue).
    Busy,
    /// The node could never run a worker of this size.
    TooLarge,
    /// The owner's limit on concurrent jobs (J) is reached.
    TooManyJobs,
    /// The owner allows no workers for jobs (P is zero).
    NoWorkersAllowed,
    /// The owner denies jobs from this home.
    Denied,
    /// The owner runs only named users' jobs, and not this job's owner's.
    NotThisUser,
    /// The job's owner has as many jobs or cores here as the node's owner
    /// allows one user.
    UserLimit,
    /// A native job, and the owner runs none.
    NoNativeJobs,
    /// A native job, and the owner runs only named users' native jobs,
    /// not this job's owner's.
    NativeNotThisUser,
    /// A native job built for another architecture than the node's.
    OtherArch,
    /// A native job, and the node cannot enforce its kernel sandbox (its
    /// log says which mechanism is missing).
    NoNativeSandbox,
}

impl std::fmt::Display for DeclineReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeclineReason::Busy => "busy (not enough free cores, memory or disk)",
            DeclineReason::TooLarge => "a worker needs more than the node has in all",
            DeclineReason::TooManyJobs => "owner's limit on concurrent jobs reached",
            DeclineReason::NoWorkersAllowed => "owner allows no workers",
            DeclineReason::Denied => "owner denies jobs from this node",
            DeclineReason::NotThisUser => "owner does not run this user's jobs",
            DeclineReason::UserLimit => "owner's limit for this user reached (jobs or cores)",
            DeclineReason::NoNativeJobs => "owner runs no native jobs",
            DeclineReason::NativeNotThisUser => "owner does not run this user's native jobs",
            DeclineReason::OtherArch => "a native job for another architecture",
            DeclineReason::NoNativeSandbox => "the node cannot enforce the sandbox of native jobs",
        })
    }
}

/// Why the home refuses an offer (or takes back a hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RefuseReason {
    /// The job has all the workers it can use.
    JobFull,
    /// The job was cancelled.
    Cancelled,
    /// The job expired before it got its workers.
    Expired,
    /// The job failed (a worker failed or was lost); its workers stop.
    Failed,
    /// The home chose nearer nodes.
    NotChosen,
    /// The home does not know the job (it finished or never existed).
    UnknownJob,
    /// The job rolls back to a common checkpoint: its workers stop, and
    /// every rank gets a fresh one (see
    /// [`LostPolicy::Rollback`](crate::node::LostPolicy::Rollback)).
    RolledBack,
}

impl RefuseReason {
    /// Whether the refusal is about the job rather than one offer: it
    /// ended (or rolls back), and the member releases every hold of it
    /// whichever the refusal names. The others (the job is full, nearer
    /// nodes were chosen, the home does not know the job) answer one
    /// offer.
    pub fn ends_the_job(self) -> bool {
        matches!(
            self,
            RefuseReason::Cancelled
                | RefuseReason::Expired
                | RefuseReason::Failed
                | RefuseReason::RolledBack
        )
    }
}

impl std::fmt::Display for RefuseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefuseReason::JobFull => "job already has its workers",
            RefuseReason::Cancelled => "job was cancelled",
            RefuseReason::Expired => "job expired",
            RefuseReason::Failed => "job failed",
            RefuseReason::NotChosen => "nearer nodes were chosen",
            RefuseReason::UnknownJob => "job unknown at its home",
            RefuseReason::RolledBack => "job rolls back to a common checkpoint",
        })
    }
}

/// A message of the scheduling protocol. Adverts travel by flooding; every
/// other message goes directly between a node and a job's home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message<P> {
    /// A flooded job advert.
    Advert(Advert<P>),
    /// Node to home: "I hold `workers` workers for you". The node keeps the
    /// resources until granted, refused, or its hold times out.
    Offer {
        /// The job.
        job: JobId,
        /// Which hold this offers (a raise keeps the number).
        hold: HoldId,
        /// How many workers the node holds for the job.
        workers: u32,
        /// The node's estimate of its RTT to the home (the home prefers its
        /// own measurement when it has one).
        distance: Duration,
        /// What the node has left after this offer.
        residue: Resources,
        /// The node's cores in all, how many are busy, and how fast they
        /// are: among equally near offers the home prefers idle, then
        /// faster nodes (see [`crate::allocation::SameDistance`]).
        machine: Machine,
    },
    /// Node to home, once per job: why the node offers nothing.
    Decline {
        /// The job.
        job: JobId,
        /// Why.
        reason: DeclineReason,
    },
    /// Node to home: the hold timed out (`ranks` empty), or a grant came
    /// after it and the node does not run the `ranks` granted.
    Withdraw {
        /// The job.
        job: JobId,
        /// The hold that timed out, or that the grant named.
        hold: HoldId,
        /// The granted ranks the node does not run; empty when only an
        /// offer is withdrawn. Workers of the job the node already runs are
        /// never among them: a node may run some ranks of a job and hold
        /// an offer for more.
        #[serde(default)]
        ranks: Vec<u32>,
    },
    /// Home to node: start workers with these ranks (possibly fewer than
    /// offered; the rest of the hold is released).
    Grant {
        /// The job.
        job: JobId,
        /// The hold the ranks start from; a node whose hold of that number
        /// is gone withdraws the ranks.
        hold: HoldId,
        /// The ranks to start on this node.
        ranks: Vec<u32>,
        /// Which grant of the job this is (the home numbers its grants from
        /// 0): the workers it starts are this *incarnation* of their
        /// ranks. A rank lost and granted again gets a higher one, so that
        /// messages meant for its earlier worker never reach the new one
        /// (see [`crate::channel::ChannelId`]).
        incarnation: u32,
        /// Where every rank of the job runs once this grant is made (the
        /// ranks granted here included; lost ranks not listed).
        placement: BTreeMap<u32, Placed<P>>,
    },
    /// Home to the nodes running ranks of a job: the job's placement or
    /// phase changed (ranks were granted elsewhere, lost, or replaced; the
    /// job started or ended).
    Placement {
        /// The job.
        job: JobId,
        /// The job's phase.
        phase: Phase,
        /// Where every rank runs now (lost ranks not listed).
        placement: BTreeMap<u32, Placed<P>>,
        /// Ranks that got a fresh worker (a new incarnation) since the last
        /// change: their peers' channels to them start afresh.
        replaced: Vec<u32>,
    },
    /// Home to node: nothing to start; release the hold.
    Refuse {
        /// The job.
        job: JobId,
        /// The hold refused: a member keeps a later hold when an older
        /// one's refusal comes late. `None`, or a reason that ends the job
        /// for the member ([`RefuseReason::ends_the_job`]): every hold and
        /// worker of the job.
        hold: Option<HoldId>,
        /// Why.
        reason: RefuseReason,
    },
}

impl<P> Message<P> {
    /// The job the message is about.
    pub fn job(&self) -> JobId {
        match self {
            Message::Advert(advert) => advert.job,
            Message::Offer { job, .. }
            | Message::Decline { job, .. }
            | Message::Withdraw { job, .. }
            | Message::Grant { job, .. }
            | Message::Placement { job, .. }
            | Message::Refuse { job, .. } => *job,
        }
    }
}

/// Where a rank runs: the node, and which incarnation of the rank its
/// worker is (the number of the grant that placed it there; see
/// [`crate::channel::ChannelId`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Placed<P> {
    /// The node.
    pub node: P,
    /// The grant that placed the rank there.
    pub incarnation: u32,
}

/// The scheduling phase of a job at its home. Phases only move forward
/// (in this order); the last three are ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Looking for workers.
    Scheduling,
    /// Workers are running.
    Running,
    /// Done.
    Completed,
    /// Cancelled by the user.
    Cancelled,
    /// Failed: expired before it got its workers, a worker failed, or a
    /// rigid job lost a worker.
    Failed,
}

impl Phase {
    /// Whether the job is over (completed, cancelled or failed).
    pub fn is_end(self) -> bool {
        self >= Phase::Completed
    }

    /// Moves to `to` if that is forward: a later phase, and never away
    /// from an end (a completed job does not become failed). Returns
    /// whether it moved. The only way the scheduler changes a phase.
    pub fn advance(&mut self, to: Phase) -> bool {
        if self.is_end() || to <= *self {
            return false;
        }
        *self = to;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::Phase;

    #[test]
    fn phases_only_move_forward_and_never_away_from_an_end() {
        use Phase::*;
        let all = [Scheduling, Running, Completed, Cancelled, Failed];
        for from in all {
            for to in all {
                let mut phase = from;
                let moved = phase.advance(to);
                let forward = !from.is_end() && to > from;
                assert_eq!(moved, forward, "{from:?} -> {to:?}");
                assert_eq!(phase, if forward { to } else { from });
            }
        }
    }
}

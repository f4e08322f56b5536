//! The client protocol: how tools (tests, the `zorilla` CLI) talk to a node.
//!
//! TCP (127.0.0.1 by default), length-prefixed CBOR frames ([`frame`]) read
//! and written by a [`Connection`]. The client opens with a [`Hello`]
//! carrying [`PROTOCOL_VERSION`] (and the node's token, if it has one); the
//! node answers with a [`Welcome`] or an [`Response::Error`] and closes.
//! After that every [`Request`] gets exactly one [`Response`]. Anything
//! wrong with a request (bad spec, unknown job, malformed frame) is answered
//! with [`Response::Error`] saying what was wrong; the node keeps running.
//!
//! `docs/protocol.md` describes the bytes on the wire for writing a client
//! in another language; the types here are the reference.

pub mod connection;
pub mod frame;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zorilla_core::advert::{Strategy, WorkKind, WorkerCount};
use zorilla_core::node::{Failure, JobSpec, LostPolicy, RankOutcome, RankTable, TaskArray};
use zorilla_core::resources::Resources;

pub use connection::{Connection, ConnectionError};

/// The version of this protocol; a node refuses clients of another one.
/// (2: outputs are listed and read in blocks, [`Request::Outputs`] and
/// [`Request::OutputBlock`], instead of sent whole. 3: jobs have owners:
/// signed submissions, [`Request::Challenge`] and [`Request::Owner`].)
pub const PROTOCOL_VERSION: u32 = 3;

/// The first frame of a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Must be [`PROTOCOL_VERSION`].
    pub version: u32,
    /// Free text naming the client, for the node's logs.
    pub client: String,
    /// The node's token: needed when the node has one configured (always
    /// the case off loopback), ignored otherwise.
    #[serde(default)]
    pub token: Option<String>,
}

/// The node's answer to a good [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The node's protocol version.
    pub version: u32,
    /// The node's peer id.
    pub peer: String,
    /// Fresh for this connection: a signed submission signs it (see
    /// [`Signed`]), so that it cannot be replayed on another.
    #[serde(default, with = "serde_bytes")]
    pub nonce: Vec<u8>,
}

/// A user's signature of a submission: its user id (as `zorilla whoami`
/// prints it) and its signature of [`crate::owner::submit_message`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signed {
    /// The user id.
    pub user: String,
    /// The signature.
    #[serde(with = "serde_bytes")]
    pub signature: Vec<u8>,
}

/// The proof that a job's owner asks a request: the nonce the job's home
/// gave ([`Request::Challenge`]), a sequence number higher than any used
/// with it before, and the owner's signature of them and the request
/// ([`crate::owner::owner_message`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerProof {
    /// The owner's user id.
    pub user: String,
    /// The home's nonce.
    #[serde(with = "serde_bytes")]
    pub nonce: Vec<u8>,
    /// The sequence number.
    pub seq: u64,
    /// The signature.
    #[serde(with = "serde_bytes")]
    pub signature: Vec<u8>,
}

/// What a job asks for, as a user writes it. Every field may be left out
/// of a request: it then takes its value in [`JobRequest::default`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobRequest {
    /// Least workers to start with (for a rigid job, `min == max`).
    pub min_workers: u32,
    /// Most workers the job can use.
    pub max_workers: u32,
    /// Cores per worker.
    pub cores: u32,
    /// Memory per worker, MiB (also the cap of the worker's linear memory).
    pub memory_mib: u64,
    /// Disk per worker, MiB.
    pub disk_mib: u64,
    /// Spread or concentrate the workers.
    pub strategy: Strategy,
    /// Seconds the job may wait for its workers before it expires.
    pub lifetime_secs: u64,
    /// What a rigid job does when it loses a worker.
    pub on_worker_lost: LostPolicy,
    /// Arguments given to every worker (after `argv[0]`).
    pub args: Vec<String>,
    /// Wall-clock limit per worker in seconds; 0 for the node's cap.
    pub wall_time_secs: u64,
    /// CPU-time limit per worker in seconds; 0 for the node's cap.
    pub cpu_time_secs: u64,
    /// What the workers are: a WebAssembly module (the default), or a
    /// native executable for an architecture, which runs only on nodes
    /// whose owner allows the job's owner native jobs. Left out of the
    /// encoding when WebAssembly, as before native jobs existed.
    #[serde(skip_serializing_if = "WorkKind::is_wasm")]
    pub kind: WorkKind,
    /// `Some(seed)`: the workers are deterministic (see
    /// `zorilla_sandbox::determinism`): their outputs depend only on the
    /// module, inputs, arguments, rank, job size and this seed, bit for
    /// bit, on whichever nodes they run. WebAssembly jobs of a fixed size
    /// only. Left out of the encoding when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deterministic: Option<u64>,
    /// Among the owner's own jobs waiting for the same cores of a node,
    /// higher goes first (-128 to 127). Orders one user's jobs only. Left
    /// out of the encoding when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub priority: i8,
    /// A job array: this many independent tasks of the module, at most
    /// `max_workers` running at once (`min_workers` is then 1), each a
    /// worker of its own that knows its task index (`ZORILLA_TASK`). Left
    /// out of the encoding when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Tasks>,
    /// How many times the job runs (1 to 3), each run on nodes no other
    /// run uses, the runs' results compared by digest at the home: the
    /// majority's are kept, and nodes that gave others are named and
    /// avoided (see `zorilla_core::runs`). More than 1 needs a
    /// deterministic job of a fixed size (each run is then a world of its
    /// own), or a job array: every task then runs twice, on two nodes, and
    /// a third time on a third node only if the two differ (spot checks
    /// of every task, [`Tasks::spot_checks`] 100). Left out of the
    /// encoding when 1.
    #[serde(skip_serializing_if = "is_one")]
    pub replicas: u8,
}

fn is_one(replicas: &u8) -> bool {
    *replicas == 1
}

/// A job array's tasks (see [`JobRequest::tasks`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tasks {
    /// How many tasks, numbered from 0.
    pub count: u32,
    /// How often a failed task runs again, on another node where the grid
    /// has one (0 to 10).
    #[serde(default)]
    pub retries: u8,
    /// An input file of the job with a line per task: task `i`'s worker
    /// gets the words of line `i` (split at white space) after the job's
    /// `args`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_file: Option<String>,
    /// The percentage (0 to 100) of the tasks that exit with status 0
    /// that run once more on another node, picked at random by the home
    /// after they ended; the two results are compared by digest, a third
    /// run settles a difference, and a node caught giving a wrong result
    /// has its other tasks run again and is avoided (see
    /// `zorilla_core::node::TaskProgress`). More than 0 needs a
    /// deterministic job. Left out of the encoding when 0.
    #[serde(default, skip_serializing_if = "is_zero_u8")]
    pub spot_checks: u8,
}

fn is_zero_u8(n: &u8) -> bool {
    *n == 0
}

/// The most failed tasks a job array's status lists (the count has them
/// all).
pub const MAX_LISTED_FAILED_TASKS: usize = 1000;

/// A job array's progress (see [`JobStatus::tasks`]): counts by phase,
/// and the tasks that failed for good. `N` names nodes, as in
/// [`RankStatus`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStatus<N = String> {
    /// Tasks in all.
    pub count: u32,
    /// Not started yet, or waiting to run again.
    pub waiting: u32,
    /// Running now.
    pub running: u32,
    /// Exited with status 0.
    pub done: u32,
    /// Failed for good (after their retries).
    pub failed: u32,
    /// The tasks that failed for good, lowest first, at most
    /// [`MAX_LISTED_FAILED_TASKS`], each with its last run's node and end.
    pub failed_tasks: BTreeMap<u32, RankStatus<N>>,
    /// Of a spot-checked array: the done or failed tasks a check settled.
    #[serde(default)]
    pub checked: u32,
    /// Tasks whose check (or its third run) has not settled yet.
    #[serde(default)]
    pub checking: u32,
    /// Nodes a check caught giving a result two other runs disagreed
    /// with (their tasks ran again; the home avoids them).
    #[serde(default = "Vec::new", skip_serializing_if = "Vec::is_empty")]
    pub caught: Vec<N>,
}

impl<N> TaskStatus<N> {
    /// A job array's progress from the core's table of its ranks, with
    /// its nodes named by `name` (`None` for a job of ranks).
    pub fn of<P: std::fmt::Display>(
        table: &RankTable<P>,
        name: impl Fn(&P) -> N,
    ) -> Option<TaskStatus<N>> {
        let progress = table.tasks()?;
        let counts = progress.counts(table.placed());
        let failed_tasks = progress
            .failed()
            .take(MAX_LISTED_FAILED_TASKS)
            .map(|(task, node, outcome)| {
                let mut status = RankStatus::running(name(node));
                status.ended(outcome, node);
                (task, status)
            })
            .collect();
        Some(TaskStatus {
            count: counts.count,
            waiting: counts.waiting,
            running: counts.running,
            done: counts.done,
            failed: counts.failed,
            failed_tasks,
            checked: counts.checked,
            checking: counts.checking,
            caught: progress.caught().iter().map(&name).collect(),
        })
    }

    /// The same progress with its nodes named by `name`.
    pub fn map_node<M>(self, mut name: impl FnMut(N) -> M) -> TaskStatus<M> {
        TaskStatus {
            count: self.count,
            waiting: self.waiting,
            running: self.running,
            done: self.done,
            failed: self.failed,
            failed_tasks: self
                .failed_tasks
                .into_iter()
                .map(|(task, status)| (task, status.map_node(&mut name)))
                .collect(),
            checked: self.checked,
            checking: self.checking,
            caught: self.caught.into_iter().map(&mut name).collect(),
        }
    }
}

fn is_zero(priority: &i8) -> bool {
    *priority == 0
}

impl Default for JobRequest {
    fn default() -> Self {
        JobRequest {
            min_workers: 1,
            max_workers: 1,
            cores: 1,
            memory_mib: 64,
            disk_mib: 0,
            strategy: Strategy::Concentrate,
            lifetime_secs: 60,
            on_worker_lost: LostPolicy::Fail,
            args: Vec::new(),
            wall_time_secs: 0,
            cpu_time_secs: 0,
            kind: WorkKind::Wasm,
            deterministic: None,
            priority: 0,
            tasks: None,
            replicas: 1,
        }
    }
}

impl JobRequest {
    /// How many times the job runs whole (see [`JobRequest::replicas`]):
    /// 1 for a job array, whose replicas are checks of each task.
    pub fn runs(&self) -> u8 {
        match self.tasks {
            Some(_) => 1,
            None => self.replicas.max(1),
        }
    }

    /// The percentage of a job array's tasks checked on another node: all
    /// of them with replicas, else [`Tasks::spot_checks`]; 0 for a job of
    /// ranks.
    pub fn spot_checks(&self) -> u8 {
        match &self.tasks {
            Some(_) if self.replicas > 1 => 100,
            Some(tasks) => tasks.spot_checks,
            None => 0,
        }
    }

    /// Whether the members report digests of what the job's workers
    /// computed, for the home to compare: it runs more than once, or its
    /// tasks are checked.
    pub fn compared(&self) -> bool {
        self.runs() > 1 || self.spot_checks() > 0
    }

    /// The core's view of the request.
    pub fn spec(&self) -> JobSpec {
        // Every run's workers: a job that runs r times has r times the
        // ranks at its home (see `zorilla_core::runs`). Saturating: the
        // counts are checked after.
        let runs = u32::from(self.runs());
        JobSpec {
            runs: self.runs(),
            per_worker: Resources::new(self.cores, self.memory_mib, self.disk_mib),
            workers: WorkerCount {
                min: self.min_workers.saturating_mul(runs),
                max: self.max_workers.saturating_mul(runs),
            },
            strategy: self.strategy,
            lifetime: std::time::Duration::from_secs(self.lifetime_secs),
            on_worker_lost: self.on_worker_lost,
            kind: self.kind,
            priority: self.priority,
            tasks: self.tasks.as_ref().map(|t| TaskArray {
                count: t.count,
                max_running: self.max_workers,
                retries: t.retries,
                spot_checks: self.spot_checks(),
            }),
        }
    }
}

/// A named file (input or output).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedFile {
    /// The file's name (no directories).
    pub name: String,
    /// Its bytes.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// A client request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Submit a job to this node, which becomes its home.
    Submit {
        /// The job.
        job: JobRequest,
        /// The WebAssembly module.
        #[serde(with = "serde_bytes")]
        module: Vec<u8>,
        /// Input files, visible to workers under `/inputs`.
        inputs: Vec<NamedFile>,
        /// The submitting user's signature: the job is that user's. A job
        /// submitted without is owned by nobody: only the admin of its
        /// home (a client with the node's token) sees and manages it.
        #[serde(default)]
        owner: Option<Signed>,
    },
    /// The status of one job.
    Status {
        /// The job id.
        job: u64,
    },
    /// Every job this node is home to.
    List,
    /// Cancel a job.
    Cancel {
        /// The job id.
        job: u64,
    },
    /// A job's stdout and stderr from chunk number `from` on (0: from
    /// the start). With `wait_secs` > 0 and nothing new yet, the node waits
    /// up to that long for more before it answers (how `logs -f` follows).
    Logs {
        /// The job id.
        job: u64,
        /// The first chunk number wanted.
        #[serde(default)]
        from: u64,
        /// How long to wait for new chunks, seconds (at most
        /// [`MAX_WAIT_SECS`]).
        #[serde(default)]
        wait_secs: u32,
    },
    /// The output files collected for a job so far, names and sizes, in
    /// name order: at most [`MAX_OUTPUT_LIST`] after `after` (from the
    /// first for ""); [`OutputPage::more`] says whether to ask again.
    Outputs {
        /// The job id.
        job: u64,
        /// The last name of the previous page ("" for the first page).
        #[serde(default)]
        after: String,
    },
    /// Bytes of one output file: up to `len` (at most
    /// [`MAX_OUTPUT_BLOCK_BYTES`]) from `offset` on.
    OutputBlock {
        /// The job id.
        job: u64,
        /// The file's name, `rank/path` as [`Request::Outputs`] lists it.
        name: String,
        /// Where to start, in bytes.
        offset: u64,
        /// How many bytes at most.
        len: u32,
    },
    /// What the node is and has.
    NodeInfo,
    /// Change the most workers a malleable job may use (see
    /// [`zorilla_core::node::Scheduler::resize`]).
    Resize {
        /// The job id.
        job: u64,
        /// The new maximum.
        max_workers: u32,
    },
    /// The peers this node knows, nearest first.
    Peers,
    /// A fresh nonce from the home of `job`, for its owner's proofs
    /// ([`OwnerProof`]). Answered with [`Response::Challenge`].
    Challenge {
        /// The job id.
        job: u64,
    },
    /// A request about a job (`Status`, `Logs`, `Outputs`, `OutputBlock`,
    /// `Cancel`, `Resize`) asked as its owner.
    Owner {
        /// The proof.
        proof: OwnerProof,
        /// The request.
        request: Box<Request>,
    },
    /// Revocations signed by the closed grid's key (`zorilla-node grid
    /// revoke` makes them) for the node to keep and flood: the revoked
    /// nodes are cut off from the whole grid within seconds. At most
    /// [`MAX_REVOCATIONS_PER_REQUEST`].
    Revoke {
        /// Each as its file holds it.
        revocations: Vec<serde_bytes::ByteBuf>,
    },
}

/// The most revocations in one [`Request::Revoke`].
pub const MAX_REVOCATIONS_PER_REQUEST: usize = 1024;

/// The longest a [`Request::Logs`] waits for new chunks.
pub const MAX_WAIT_SECS: u32 = 60;

/// The most log bytes in one [`LogPage`]: far below the frame cap.
pub const MAX_LOG_PAGE_BYTES: usize = 4 * 1024 * 1024;

/// The most bytes one [`Request::OutputBlock`] asks for: far below the
/// frame cap, large enough that a file streams at disk speed.
pub const MAX_OUTPUT_BLOCK_BYTES: u32 = 4 * 1024 * 1024;

/// The most files in one [`OutputPage`] (names are at most 1 KiB, so a
/// page stays far below the frame cap).
pub const MAX_OUTPUT_LIST: usize = 4096;

/// The phase of a job. Phases only move forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobPhase {
    /// Accepted, and looking for workers (a job is stored in this phase:
    /// the scheduler takes it in the same step).
    Scheduling,
    /// Workers run.
    Running,
    /// Every worker exited successfully.
    Completed,
    /// Cancelled by a user.
    Cancelled,
    /// Failed: expired, a worker failed, or a worker was lost.
    Failed,
}

impl JobPhase {
    /// Whether the job is over.
    pub fn is_terminal(self) -> bool {
        self >= JobPhase::Completed
    }
}

/// The core's phase of a job as clients read it (the one place the two
/// meet).
impl From<zorilla_core::node::Phase> for JobPhase {
    fn from(phase: zorilla_core::node::Phase) -> Self {
        use zorilla_core::node::Phase;
        match phase {
            Phase::Scheduling => JobPhase::Scheduling,
            Phase::Running => JobPhase::Running,
            Phase::Completed => JobPhase::Completed,
            Phase::Cancelled => JobPhase::Cancelled,
            Phase::Failed => JobPhase::Failed,
        }
    }
}

/// How one rank of a job stands. Clients read the node's name as text;
/// the home keeps it typed (`N` a peer id in its store, see
/// [`RankStatus::map_node`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankStatus<N = String> {
    /// The node running (or that ran) it.
    pub node: N,
    /// How it ended, as a sentence for people (with the figure of the
    /// limit it hit); `None` while it runs.
    pub outcome: Option<String>,
    /// How it ended, for programs: one stable code per kind of end
    /// (see [`OutcomeCode`]); `None` while it runs.
    #[serde(default)]
    pub code: Option<OutcomeCode>,
    /// The exit status, when the code is [`OutcomeCode::Exited`].
    #[serde(default)]
    pub exit_status: Option<i32>,
}

impl<N> RankStatus<N> {
    /// A rank placed on `node`, running (or starting).
    pub fn running(node: N) -> RankStatus<N> {
        RankStatus {
            node,
            outcome: None,
            code: None,
            exit_status: None,
        }
    }

    /// Records the core's outcome of the rank on `node`: the sentence,
    /// the code and the exit status, made here and nowhere else.
    pub(crate) fn ended(&mut self, outcome: &RankOutcome, node: &impl std::fmt::Display) {
        self.outcome = Some(outcome.display(node).to_string());
        self.code = Some(OutcomeCode::from(outcome));
        self.exit_status = match outcome {
            RankOutcome::Exited(status) => Some(*status),
            _ => None,
        };
    }

    /// The same rank with its node named by `name` (the home's typed
    /// record as clients read it).
    pub fn map_node<M>(self, name: impl FnOnce(N) -> M) -> RankStatus<M> {
        RankStatus {
            node: name(self.node),
            outcome: self.outcome,
            code: self.code,
            exit_status: self.exit_status,
        }
    }

    /// Gives a rank still running the end `code` with `sentence` (the
    /// job ended, or its home restarted); an ended rank keeps its end.
    pub(crate) fn close(&mut self, code: OutcomeCode, sentence: &str) {
        if self.outcome.is_none() {
            self.outcome = Some(sentence.to_string());
            self.code = Some(code);
            self.exit_status = None;
        }
    }
}

/// How a rank ended, for programs (beside the sentence for people in
/// [`RankStatus::outcome`]). The codes are stable; new ones may be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeCode {
    /// Its program exited by itself; the status is beside (0 is the only
    /// success).
    Exited,
    /// It crashed (a WebAssembly trap).
    Trapped,
    /// It would have needed more memory than its limit.
    OutOfMemory,
    /// It used up its CPU time.
    CpuLimit,
    /// It ran past its wall-clock time.
    TimeLimit,
    /// It wrote more than its output limit to stdout and stderr.
    OutputLimit,
    /// It kept more than its disk limit in `/outputs`.
    DiskLimit,
    /// A native worker tried to run more processes and threads than its
    /// limit.
    ProcessLimit,
    /// It could not start.
    NotStarted,
    /// It was cancelled.
    Cancelled,
    /// Its node was lost (or its home restarted and lost track of it).
    Lost,
    /// Its job ended while it ran.
    Stopped,
    /// A spot-checked task whose three runs gave three different results.
    Disputed,
}

impl OutcomeCode {
    /// The code as it goes on the wire (`"out_of_memory"`).
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeCode::Exited => "exited",
            OutcomeCode::Trapped => "trapped",
            OutcomeCode::OutOfMemory => "out_of_memory",
            OutcomeCode::CpuLimit => "cpu_limit",
            OutcomeCode::TimeLimit => "time_limit",
            OutcomeCode::OutputLimit => "output_limit",
            OutcomeCode::DiskLimit => "disk_limit",
            OutcomeCode::ProcessLimit => "process_limit",
            OutcomeCode::NotStarted => "not_started",
            OutcomeCode::Cancelled => "cancelled",
            OutcomeCode::Lost => "lost",
            OutcomeCode::Stopped => "stopped",
            OutcomeCode::Disputed => "disputed",
        }
    }
}

/// The core's outcome of a rank as a code (the one place the two meet).
impl From<&RankOutcome> for OutcomeCode {
    fn from(outcome: &RankOutcome) -> Self {
        match outcome {
            RankOutcome::Exited(_) => OutcomeCode::Exited,
            RankOutcome::Failed(failure) => match failure {
                Failure::Trapped(_) => OutcomeCode::Trapped,
                Failure::OutOfMemory { .. } => OutcomeCode::OutOfMemory,
                Failure::CpuLimit { .. } => OutcomeCode::CpuLimit,
                Failure::TimeLimit { .. } => OutcomeCode::TimeLimit,
                Failure::OutputLimit { .. } => OutcomeCode::OutputLimit,
                Failure::DiskLimit { .. } => OutcomeCode::DiskLimit,
                Failure::ProcessLimit { .. } => OutcomeCode::ProcessLimit,
                Failure::NotStarted(_) => OutcomeCode::NotStarted,
            },
            RankOutcome::Cancelled => OutcomeCode::Cancelled,
            RankOutcome::Lost(_) => OutcomeCode::Lost,
            RankOutcome::Disputed => OutcomeCode::Disputed,
        }
    }
}

/// What the home knows of a job's search for workers: why it waits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// Floods sent.
    pub floods: u32,
    /// Radius (hops) of the last flood.
    pub radius: u8,
    /// Latency budget of the last flood in milliseconds, if latency-bounded.
    pub budget_ms: Option<u64>,
    /// Nodes that answered (offers and declines).
    pub nodes_answered: u64,
    /// Offers received.
    pub offers: u64,
    /// Workers offered in all.
    pub workers_offered: u64,
    /// Declines by reason (as words: "busy", "too small", ...).
    pub declines: BTreeMap<String, u64>,
    /// Offers the home refused, by reason.
    pub refusals: BTreeMap<String, u64>,
    /// Workers granted so far.
    pub granted: u32,
    /// Workers the job needs to start.
    pub needed: u32,
    /// Of the workers offered, those of nodes the job's other ranks could
    /// not reach directly (a native job's ranks connect to each other:
    /// nodes behind another NAT are left out).
    #[serde(default)]
    pub apart: u32,
}

/// A job's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStatus {
    /// The job id.
    pub job: u64,
    /// Its phase.
    pub phase: JobPhase,
    /// Why it is in this phase (for a scheduling job: why it still waits).
    pub reason: String,
    /// Workers per rank.
    pub ranks: BTreeMap<u32, RankStatus>,
    /// What it asked for (with the current worker maximum).
    pub request: JobRequest,
    /// The search for workers, while the home still looks (scheduling, or
    /// running and growing).
    #[serde(default)]
    pub pending: Option<Pending>,
    /// When it was submitted, seconds since the Unix epoch.
    #[serde(default)]
    pub submitted_unix: u64,
    /// The node that is the job's home (the peer id), as the answer's
    /// node knows it: the node asked, or the one it asked on the client's
    /// behalf.
    #[serde(default)]
    pub home: Option<String>,
    /// The node the job's home moved from, if its first home was lost and
    /// a copy took the job over.
    #[serde(default)]
    pub moved_from: Option<String>,
    /// The user who submitted it (none: its home's admin).
    #[serde(default)]
    pub owner: Option<String>,
    /// A job array's progress (its `ranks` are the tasks running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TaskStatus>,
}

impl JobStatus {
    /// What anybody may see of the job: that it exists, whose it is, its
    /// phase and how many workers it asks for; none of its arguments,
    /// placement or reasons.
    pub fn public(&self) -> JobStatus {
        JobStatus {
            job: self.job,
            phase: self.phase,
            reason: String::new(),
            ranks: BTreeMap::new(),
            request: JobRequest {
                min_workers: self.request.min_workers,
                max_workers: self.request.max_workers,
                ..JobRequest::default()
            },
            pending: None,
            submitted_unix: 0,
            home: None,
            moved_from: None,
            owner: self.owner.clone(),
            tasks: None,
        }
    }

    /// Workers running now (placed and not ended).
    pub fn running_workers(&self) -> u32 {
        self.ranks.values().filter(|r| r.outcome.is_none()).count() as u32
    }
}

/// A page of a job's logs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPage {
    /// The chunks, in the order they arrived.
    pub chunks: Vec<LogChunk>,
    /// The chunk number to ask for next.
    pub next: u64,
    /// The job is over and every chunk the home has was sent.
    pub ended: bool,
}

/// An output file of a job, as [`Request::Outputs`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputEntry {
    /// `rank/path`: the rank that wrote it and its path below `/outputs`.
    pub name: String,
    /// Its size in bytes, so far.
    pub size: u64,
}

/// A page of a job's output files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputPage {
    /// The files, in name order.
    pub files: Vec<OutputEntry>,
    /// More files follow: ask again with `after` the last name here.
    pub more: bool,
}

/// Bytes of an output file, as [`Request::OutputBlock`] asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputData {
    /// The bytes from the offset asked (fewer than asked at the file's end;
    /// none past it).
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// The file's size now.
    pub size: u64,
}

/// A peer a node knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerEntry {
    /// Its peer id.
    pub peer: String,
    /// The smoothed RTT in microseconds, if measured.
    pub rtt_us: Option<u64>,
    /// `"near"` or `"far"` if it is a neighbour.
    pub link: Option<String>,
    /// Whether a connection is open now.
    pub connected: bool,
    /// Where it listens, as far as the node knows.
    pub addrs: Vec<String>,
}

/// One piece of a worker's stdout or stderr.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogChunk {
    /// The rank that wrote it.
    pub rank: u32,
    /// `true` for stderr.
    pub stderr: bool,
    /// The bytes.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// What a node is and has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Its peer id.
    pub peer: String,
    /// Its overlay listen addresses.
    pub listen: Vec<String>,
    /// Cores offered to jobs.
    pub cores: u32,
    /// Memory offered, MiB.
    pub memory_mib: u64,
    /// Disk offered, MiB.
    pub disk_mib: u64,
    /// Workers running on this node now, per job id.
    pub running: BTreeMap<u64, Vec<u32>>,
    /// Number of overlay neighbours.
    pub neighbours: usize,
    /// Overlay messages sent so far (flood frames and rpc requests).
    pub messages_sent: u64,
    /// The node's version.
    #[serde(default)]
    pub version: String,
    /// The network (grid) name.
    #[serde(default)]
    pub network: String,
    /// Seconds since the node started.
    #[serde(default)]
    pub uptime_secs: u64,
    /// Jobs this node is home to, by phase.
    #[serde(default)]
    pub jobs: BTreeMap<JobPhase, u64>,
    /// Why this node cannot write to its disk (and so takes no jobs and
    /// offers no workers), while it cannot: e.g. "No space left on device".
    #[serde(default)]
    pub disk_problem: Option<String>,
    /// Peers the scheduler knows the distance of (measured by the
    /// overlay; a home's first flood of a job that needs many nodes reaches
    /// as far as they are).
    #[serde(default)]
    pub peers_measured: usize,
    /// Who may join the node's grid: `None` in an open grid (anyone who
    /// can reach a node), else the closed grid's key and when this node's
    /// credential expires.
    #[serde(default)]
    pub grid: Option<GridInfo>,
}

/// A closed grid, as [`NodeInfo`] tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GridInfo {
    /// The grid key (64 hex digits).
    pub key: String,
    /// Its fingerprint.
    pub fingerprint: String,
    /// When this node's credential expires, Unix seconds.
    pub expires_unix: u64,
}

/// Kinds of error replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// The request (or job spec, or module) is invalid.
    BadRequest,
    /// No such job.
    NotFound,
    /// Wrong protocol version.
    Version,
    /// Missing or wrong token.
    Unauthorized,
    /// Too many clients at once, or the node takes no jobs now (its disk
    /// cannot be written); try again later.
    Busy,
    /// The node failed to do it.
    Internal,
    /// The job's home, which this node asked on the client's behalf, did
    /// not answer; try again (perhaps through another node).
    Unreachable,
    /// The nonce of an owner's proof is unknown at the job's home, or
    /// expired: ask for a new one ([`Request::Challenge`]).
    Stale,
}

/// A node's reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// Done, nothing to report.
    Ok,
    /// A job was accepted.
    Submitted {
        /// Its id.
        job: u64,
    },
    /// A job's status.
    Status(JobStatus),
    /// Every job.
    Jobs(Vec<JobStatus>),
    /// Logs of a job, in the order they arrived.
    Logs(LogPage),
    /// Output files of a job, named `rank/path`.
    Outputs(OutputPage),
    /// Bytes of an output file.
    OutputBlock(OutputData),
    /// The node.
    NodeInfo(NodeInfo),
    /// The peers a node knows.
    Peers(Vec<PeerEntry>),
    /// How many of the revocations were new to the node (and flooded).
    Revoked {
        /// That many.
        new: u64,
    },
    /// The handshake succeeded.
    Welcome(Welcome),
    /// A nonce for the owner's proofs about a job.
    Challenge {
        /// The nonce.
        #[serde(with = "serde_bytes")]
        nonce: Vec<u8>,
    },
    /// The request failed.
    Error {
        /// What kind of failure.
        kind: ErrorKind,
        /// What was wrong, in words.
        message: String,
    },
}

impl Response {
    /// An error reply.
    pub fn error(kind: ErrorKind, message: impl Into<String>) -> Self {
        Response::Error {
            kind,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use zorilla_core::liveness::LostCause;
    use zorilla_core::node::LostReason;

    use super::*;

    /// A job's kind as docs/protocol.md writes it, and left out when it is
    /// WebAssembly (so that what older clients signed still verifies).
    #[test]
    fn a_jobs_kind_is_written_as_documented_and_left_out_for_webassembly() {
        let json = |r: &JobRequest| serde_json::to_value(r).unwrap();
        assert!(json(&JobRequest::default()).get("kind").is_none());
        let native = JobRequest {
            kind: WorkKind::Native(zorilla_core::advert::Arch::X86_64),
            ..JobRequest::default()
        };
        assert_eq!(
            json(&native)["kind"],
            serde_json::json!({"native": "x86_64"})
        );
        let back: JobRequest = serde_json::from_value(json(&native)).unwrap();
        assert_eq!(back, native);
    }

    /// A request made before deterministic jobs encodes as it did (so
    /// its owner's signature still holds); a seed is written as a number.
    #[test]
    fn a_seed_is_written_only_for_a_deterministic_job() {
        let json = |r: &JobRequest| serde_json::to_value(r).unwrap();
        assert!(json(&JobRequest::default()).get("deterministic").is_none());
        let seeded = JobRequest {
            deterministic: Some(7),
            ..JobRequest::default()
        };
        assert_eq!(json(&seeded)["deterministic"], serde_json::json!(7));
        let back: JobRequest = serde_json::from_value(json(&seeded)).unwrap();
        assert_eq!(back, seeded);
    }

    /// Every kind of end: the code programs match on, as it goes on the
    /// wire, and the sentence people read, with its figure.
    #[test]
    fn every_end_has_its_code_and_its_sentence() {
        let cases = [
            (RankOutcome::Exited(0), "exited", "exited with status 0"),
            (RankOutcome::Exited(3), "exited", "exited with status 3"),
            (
                RankOutcome::Failed(Failure::Trapped(
                    "unreachable instruction executed in function nqueens::solve".into(),
                )),
                "trapped",
                "crashed: unreachable instruction executed in function nqueens::solve",
            ),
            (
                RankOutcome::Failed(Failure::OutOfMemory { limit_mib: 64 }),
                "out_of_memory",
                "used its memory limit of 64 MiB",
            ),
            (
                RankOutcome::Failed(Failure::CpuLimit {
                    limit: Duration::from_secs(60),
                }),
                "cpu_limit",
                "stopped: used its CPU-time limit of 1 min",
            ),
            (
                RankOutcome::Failed(Failure::TimeLimit {
                    limit: Duration::from_secs(10),
                }),
                "time_limit",
                "stopped: ran past its wall-clock limit of 10 s",
            ),
            (
                RankOutcome::Failed(Failure::OutputLimit { limit_mib: 64 }),
                "output_limit",
                "stopped: wrote more than its 64 MiB output limit",
            ),
            (
                RankOutcome::Failed(Failure::DiskLimit { limit_mib: 10 }),
                "disk_limit",
                "stopped: wrote more than its 10 MiB disk limit",
            ),
            (
                RankOutcome::Failed(Failure::NotStarted("module refused: bad magic".into())),
                "not_started",
                "could not start: module refused: bad magic",
            ),
            (RankOutcome::Cancelled, "cancelled", "was cancelled"),
            (
                RankOutcome::Lost(LostReason::Liveness(LostCause::Restarted)),
                "lost",
                "lost: node N restarted and forgot it",
            ),
        ];
        for (outcome, code, sentence) in cases {
            let mut status = RankStatus::running("N".to_string());
            status.ended(&outcome, &"N");
            assert_eq!(status.outcome.as_deref(), Some(sentence));
            let wire = serde_json::to_value(&status).unwrap();
            assert_eq!(wire["code"], code, "{outcome:?}");
            assert_eq!(status.code.map(OutcomeCode::as_str), Some(code));
            let exit = match outcome {
                RankOutcome::Exited(status) => serde_json::json!(status),
                _ => serde_json::Value::Null,
            };
            assert_eq!(wire["exit_status"], exit, "{outcome:?}");
        }
        let mut stopped = RankStatus::running("N".to_string());
        stopped.close(OutcomeCode::Stopped, "stopped with the job");
        assert_eq!(serde_json::to_value(&stopped).unwrap()["code"], "stopped");
        // A record stored before codes reads as one without.
        let old: RankStatus =
            serde_json::from_str(r#"{"node": "N", "outcome": "exited with status 0"}"#).unwrap();
        assert_eq!((old.code, old.exit_status), (None, None));
    }
}

//! The client protocol: how tools (tests, the `zorilla` CLI) talk to a node.
//!
//! TCP (127.0.0.1 by default), length-prefixed CBOR frames ([`frame`]) read
//! and written by a [`Connection`]. The client opens with a [`Hello`]
//! carrying [`PROTOCOL_VERSION`]; the node answers with a [`Welcome`] or an
//! [`Response::Error`] and closes. After that every [`Request`] gets exactly
//! one [`Response`]. Anything wrong with a request (bad spec, unknown job,
//! malformed frame) is answered with [`Response::Error`] saying what was
//! wrong; the node keeps running.

pub mod connection;
pub mod frame;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zorilla_core::advert::Strategy;
use zorilla_core::node::LostPolicy;

pub use connection::{Connection, ConnectionError};

/// The version of this protocol; a node refuses clients of another one.
pub const PROTOCOL_VERSION: u32 = 1;

/// The first frame of a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Must be [`PROTOCOL_VERSION`].
    pub version: u32,
    /// Free text naming the client, for the node's logs.
    pub client: String,
}

/// The node's answer to a good [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The node's protocol version.
    pub version: u32,
    /// The node's peer id.
    pub peer: String,
}

/// What a job asks for, as a user writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The stdout and stderr collected for a job so far.
    Logs {
        /// The job id.
        job: u64,
    },
    /// The output files collected for a job so far.
    Outputs {
        /// The job id.
        job: u64,
    },
    /// What the node is and has.
    NodeInfo,
}

/// The phase of a job. Phases only move forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobPhase {
    /// Accepted and stored, not yet advertised.
    Submitted,
    /// Looking for workers.
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

/// How one rank of a job stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankStatus {
    /// The node running (or that ran) it.
    pub node: String,
    /// How it ended, `None` while it runs.
    pub outcome: Option<String>,
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
    /// What it asked for.
    pub request: JobRequest,
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
    /// The node failed to do it.
    Internal,
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
    /// Logs of a job, in the order they arrived per rank and stream.
    Logs(Vec<LogChunk>),
    /// Outputs of a job, named `rank/filename`.
    Outputs(Vec<NamedFile>),
    /// The node.
    NodeInfo(NodeInfo),
    /// The handshake succeeded.
    Welcome(Welcome),
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

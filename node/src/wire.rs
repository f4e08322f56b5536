//! What nodes say to each other over the overlay's rpc protocol (CBOR): the
//! core's scheduling messages, job copies and placement pushes, file blocks,
//! rank-to-rank messages, worker output streaming to the home, and the
//! status page's remote views.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zorilla_core::advert::Message;
use zorilla_overlay::PeerId;
use zorilla_webui::model::{JobDetail, NodeSnapshot};

use crate::protocol::{JobPhase, JobRequest, LogChunk};
use crate::store::FileRef;

/// Largest block of a file (or of output) sent in one rpc: well under the
/// overlay's 1 MiB frame cap, large enough that a module of a few hundred
/// KiB moves in a handful of round trips.
pub(crate) const BLOCK_BYTES: usize = 256 * 1024;

/// A job's copy, as the home hands it to nodes running its workers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobInfo {
    pub(crate) id: u64,
    pub(crate) home: PeerId,
    pub(crate) phase: JobPhase,
    pub(crate) request: JobRequest,
    pub(crate) module: FileRef,
    pub(crate) inputs: Vec<FileRef>,
    pub(crate) ranks: BTreeMap<u32, PeerId>,
}

/// A request from one node to another.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum PeerRpc {
    /// A scheduling message of the core.
    Sched(Message<PeerId>),
    /// Worker node to home: the job's copy.
    GetJob { job: u64 },
    /// A block of a content-addressed file.
    GetBlock {
        sha256: String,
        offset: u64,
        len: u32,
    },
    /// Home to worker nodes: the job's placement and phase changed;
    /// `replaced` ranks got a fresh worker.
    Placement {
        job: u64,
        phase: JobPhase,
        ranks: BTreeMap<u32, PeerId>,
        replaced: Vec<u32>,
    },
    /// A message between two ranks of a job.
    Rank {
        job: u64,
        from: u32,
        to: u32,
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
    },
    /// Barrier traffic: ranks enter at rank 0, rank 0 releases them.
    Barrier {
        job: u64,
        to: u32,
        from: u32,
        msg: BarrierMsg,
    },
    /// Worker node to home: output of a rank.
    Log { job: u64, chunk: LogChunk },
    /// Worker node to home: a piece of an output file.
    Output {
        job: u64,
        name: String,
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Worker node to home: a rank ended (after all its output was sent).
    WorkerEnded {
        job: u64,
        rank: u32,
        success: bool,
        outcome: String,
    },
    /// Liveness probe.
    Ping,
    /// The status page's remote view: everything this node shows.
    Status,
    /// The status page's remote view of one job (its id as the pages
    /// print it).
    StatusJob { job: String },
}

/// What a [`PeerRpc::Barrier`] says. Every barrier call of a worker has a
/// token of its own, so that rank 0 can tell a call that was abandoned from
/// a later one, and a worker can tell its release from one meant for an
/// earlier call or an earlier worker of its rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum BarrierMsg {
    /// To rank 0: the sender waits in its barrier call `token`.
    Enter { token: u64 },
    /// To rank 0: the sender's call `token` was dropped before the barrier
    /// completed (its worker was cancelled or hit a limit while waiting).
    Withdraw { token: u64 },
    /// From rank 0: the call `token` of the receiver may return.
    Release { token: u64 },
}

/// The answer to a [`PeerRpc`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum PeerReply {
    Ack,
    Job(Box<JobInfo>),
    Block(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Answer to [`PeerRpc::Status`].
    Status(Box<NodeSnapshot>),
    /// Answer to [`PeerRpc::StatusJob`]; `None` if the job is unknown here.
    StatusJob(Option<Box<JobDetail>>),
    Error(String),
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail for these plain types.
    ciborium::into_writer(value, &mut out).expect("CBOR encoding into memory");
    out
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    zorilla_overlay::cbor::check_lengths(bytes).map_err(|e| e.to_string())?;
    ciborium::from_reader(bytes).map_err(|e| e.to_string())
}

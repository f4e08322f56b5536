//! What nodes say to each other over the overlay's rpc protocol (CBOR): the
//! core's scheduling messages, job copies and placement pushes, file blocks,
//! rank-to-rank messages, worker output streaming to the home, and the
//! status page's remote views and grid view.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zorilla_core::advert::Message;
use zorilla_core::node::WorkerEnd;
use zorilla_overlay::PeerId;

use crate::protocol::{JobPhase, JobRequest, LogChunk};
use crate::store::FileRef;

pub(crate) mod checkpoint;
pub(crate) mod view;

use checkpoint::{CheckpointReply, CheckpointRpc};

/// Largest block of a file (or of output) sent in one rpc: well under the
/// overlay's 1 MiB frame cap, large enough that a module of a few hundred
/// KiB moves in a handful of round trips.
pub(crate) const BLOCK_BYTES: usize = 256 * 1024;

/// Largest module or input file of a job a node fetches: a job is submitted
/// in one client frame, so none of its files can be larger.
pub(crate) const MAX_FILE_BYTES: u64 = crate::protocol::frame::DEFAULT_MAX_FRAME as u64;

/// The most jobs one [`PeerRpc::Ranks`] asks about: far more than a node
/// runs workers for at once (its owner's limit on jobs), so a question
/// above it is refused as malformed.
pub(crate) const MAX_ASKED_JOBS: usize = 4096;

/// A job's copy, as the home hands it to nodes running its workers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobInfo {
    pub(crate) id: u64,
    pub(crate) home: PeerId,
    pub(crate) phase: JobPhase,
    pub(crate) request: JobRequest,
    pub(crate) module: FileRef,
    pub(crate) inputs: Vec<FileRef>,
    pub(crate) ranks: BTreeMap<u32, Placed>,
}

/// What a member needs of a job to start its workers, besides the grant:
/// what to run and with what limits, and the files to fetch (by hash, from
/// the home or another node of the job). It travels with the grant
/// ([`PeerRpc::Grant`]), so a member starts without asking the home.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobCopy {
    pub(crate) request: JobRequest,
    pub(crate) module: FileRef,
    pub(crate) inputs: Vec<FileRef>,
    /// When the job was accepted, seconds since the Unix epoch (what a
    /// node that takes the job over shows).
    #[serde(default)]
    pub(crate) submitted_unix: u64,
    /// The user who owns the job (a node that takes the job over keeps it
    /// that user's).
    #[serde(default)]
    pub(crate) owner: Option<crate::owner::UserId>,
    /// The owner's signature of the submission: a node checks it before
    /// it runs a worker of the job.
    #[serde(default)]
    pub(crate) owner_proof: Option<crate::owner::SubmitProof>,
    /// The job's first home and the nonce its id was made from: a node
    /// takes a grant or an invitation to hold a copy only if they give the
    /// job's id (see [`crate::origin`]).
    #[serde(default)]
    pub(crate) origin: Option<crate::origin::JobOrigin>,
}

impl JobCopy {
    /// The job's first home, if the copy's origin makes `job`'s id (see
    /// [`crate::origin`]).
    pub(crate) fn first_home(&self, job: u64) -> Option<PeerId> {
        self.origin.and_then(|o| o.first_home(job))
    }
}

/// Where a rank runs (the core's [`zorilla_core::advert::Placed`]).
pub(crate) type Placed = zorilla_core::advert::Placed<PeerId>;

/// A message between the replicas of a job (the core's
/// [`zorilla_core::replica::Msg`] of its [`zorilla_core::node::JobEntry`]
/// log).
pub(crate) type ReplicaMsg =
    zorilla_core::replica::Msg<PeerId, zorilla_core::node::JobEntry<PeerId>>;

/// Why a node did not serve a peer's request: what kind of no, for the
/// asker to act on, and one sentence for its log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{why}")]
pub(crate) struct Refusal {
    pub(crate) kind: RefusalKind,
    pub(crate) why: String,
}

/// What kind of no a [`Refusal`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum RefusalKind {
    /// The request does not decode or is out of range: asking again will
    /// not help.
    Malformed,
    /// The asker may not have it: it is not of the job, or lacks the
    /// leave of the job's home.
    NotAllowed,
    /// What it asks about is not here (a job, a rank, a file or block this
    /// node does not hold, or no longer: the job may be over).
    NotHere,
    /// This node cannot serve it now (a full queue, its store failing):
    /// perhaps later, or elsewhere.
    Unavailable,
}

impl Refusal {
    pub(crate) fn new(kind: RefusalKind, why: impl Into<String>) -> Self {
        Refusal {
            kind,
            why: why.into(),
        }
    }
}

impl PeerReply {
    /// A [`PeerReply::Refused`] of `kind`.
    pub(crate) fn refused(kind: RefusalKind, why: impl Into<String>) -> Self {
        PeerReply::Refused(Refusal::new(kind, why))
    }
}

/// A request from one node to another.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum PeerRpc {
    /// A scheduling message of the core (a grant travels as
    /// [`PeerRpc::Grant`]).
    Sched(Message<PeerId>),
    /// Home to member: the core's [`Message::Grant`] (the ranks to start,
    /// their incarnation, the job's whole placement) with the job's copy:
    /// everything the member needs to start its workers, in one message.
    Grant {
        grant: Message<PeerId>,
        copy: Box<JobCopy>,
    },
    /// A member to the home that has said nothing for a while: the job's
    /// state (see `Node::refresh_stale_copies`).
    GetJob { job: u64 },
    /// A block of a content-addressed file.
    GetBlock {
        sha256: String,
        offset: u64,
        len: u32,
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
    /// Worker node to home: a rank's worker ended (after all its output
    /// was sent). `incarnation` is the grant that started it, so that the
    /// home tells a replaced worker's late report from the current one's.
    WorkerEnded {
        job: u64,
        rank: u32,
        incarnation: u32,
        end: WorkerEnd,
    },
    /// Liveness probe.
    Ping,
    /// Home to a node holding ranks of its jobs: which of these ranks do
    /// you run? `jobs` holds, per job, the ranks the home places on the
    /// receiver (at most [`MAX_ASKED_JOBS`] jobs). Answered with
    /// [`PeerReply::Ranks`]; a node stops workers of the sender's jobs that
    /// the sender no longer places on it (see `node::liveness`).
    Ranks { jobs: BTreeMap<u64, Vec<u32>> },
    /// The status page's remote view: everything this node shows.
    Status,
    /// The status page's remote view of one job (its id as the pages
    /// print it).
    StatusJob { job: String },
    /// Checkpoints: blocks to and from holders, where a rank's latest is
    /// (see [`checkpoint`]).
    Checkpoint(CheckpointRpc),
    /// Between the replicas of a job (its primary and its copies): the
    /// core's [`zorilla_core::replica::Msg`] of the job's log. `copy` goes
    /// with an append that may reach a node that does not hold the job yet
    /// (an extra copy, or one that fell behind), so that any copy can
    /// become the job's home.
    Replica {
        job: u64,
        msg: Box<ReplicaMsg>,
        copy: Option<Box<JobCopy>>,
    },
    /// Which node is the home of `job`, if the receiver knows? Answered
    /// with [`PeerReply::Home`] (see [`crate::forward`]).
    WhereIs { job: u64 },
    /// A client's request about a job whose home the receiver is, from
    /// the node the client asked (see [`crate::forward`]). Answered with
    /// [`PeerReply::Client`]; never forwarded again.
    Client(Box<crate::protocol::Request>),
    /// The status page's grid view: what the receiver says about itself
    /// (answered with [`PeerReply::Summary`]).
    Summary,
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
    /// Answer to a [`PeerRpc::Grant`]: which run of the node took it (its
    /// boot id, as in [`PeerReply::Ranks`]), so that the home can tell a
    /// restart however soon after the grant it came.
    Granted {
        boot: u64,
    },
    Job(Box<JobInfo>),
    Block(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Answer to [`PeerRpc::Status`].
    Status(Box<view::Snapshot>),
    /// Answer to [`PeerRpc::StatusJob`]; `None` if the job is unknown here.
    StatusJob(Option<Box<view::JobDetail>>),
    /// Answer to [`PeerRpc::Summary`].
    Summary(Box<view::Summary>),
    /// Answer to [`PeerRpc::Ranks`]: this run of the node (`boot`, random
    /// at every start, and how long it has been up) and the ranks it runs
    /// or is starting of the jobs asked about (jobs it does not know are
    /// left out).
    Ranks {
        boot: u64,
        uptime_ms: u64,
        running: BTreeMap<u64, Vec<u32>>,
        /// Per job asked about: which of those ranks wait in a receive
        /// without a deadline, and how long nothing of the job has been in
        /// flight from here (see [`zorilla_core::stall`]).
        #[serde(default)]
        waits: BTreeMap<u64, zorilla_core::stall::Waits>,
    },
    /// Answer to some [`PeerRpc::Checkpoint`]s.
    Checkpoint(CheckpointReply),
    /// The request was not served, and why.
    Refused(Refusal),
    /// Answer to [`PeerRpc::WhereIs`]: the job's home, if known.
    Home(Option<PeerId>),
    /// Answer to [`PeerRpc::Client`].
    Client(Box<crate::protocol::Response>),
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail for these plain types.
    ciborium::into_writer(value, &mut out).expect("CBOR encoding into memory");
    out
}

/// Why bytes from a peer are not a message: the one sentence a peer or a
/// log sees is the inner error's own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecodeError {
    /// A length or count declared beyond the bytes that follow it, refused
    /// before anything is allocated for it.
    #[error(transparent)]
    Lengths(#[from] zorilla_overlay::cbor::LengthError),
    /// Not CBOR, or not the expected shape.
    #[error("{0}")]
    Cbor(String),
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    zorilla_overlay::cbor::check_lengths(bytes)?;
    ciborium::from_reader(bytes).map_err(|e| DecodeError::Cbor(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use zorilla_core::advert::{Advert, FloodHeader, HoldId, JobId, Phase, Strategy, WorkerCount};
    use zorilla_core::limits;
    use zorilla_core::resources::{Machine, Resources};
    use zorilla_overlay::config::DEFAULT_MAX_MESSAGE_SIZE;

    use super::*;
    use crate::validate;

    /// The largest copies that pass validation must travel in one overlay
    /// message with room to spare: three quarters of the cap at most.
    const ROOM: usize = DEFAULT_MAX_MESSAGE_SIZE / 4 * 3;

    fn largest_request() -> JobRequest {
        let per_arg = limits::MAX_ARGS_BYTES / limits::MAX_ARGS;
        JobRequest {
            min_workers: limits::MAX_WORKERS,
            max_workers: limits::MAX_WORKERS,
            cores: limits::MAX_CORES,
            memory_mib: limits::MAX_MEMORY_MIB,
            disk_mib: limits::MAX_DISK_MIB,
            strategy: Strategy::Spread,
            lifetime_secs: limits::MAX_LIFETIME.as_secs(),
            on_worker_lost: zorilla_core::node::LostPolicy::Replace,
            // Multi-byte characters: the same bytes, more for JSON-like
            // escapes, none for CBOR.
            args: vec!["é".repeat(per_arg / 2); limits::MAX_ARGS],
            wall_time_secs: limits::MAX_WALL_TIME.as_secs(),
            cpu_time_secs: limits::MAX_WALL_TIME.as_secs(),
        }
    }

    fn placement() -> BTreeMap<u32, Placed> {
        (0..limits::MAX_WORKERS)
            .map(|rank| {
                let placed = Placed {
                    node: PeerId::random(),
                    incarnation: u32::MAX,
                };
                (rank, placed)
            })
            .collect()
    }

    fn largest_copy() -> JobCopy {
        let request = largest_request();
        assert_eq!(validate::request(&request), Ok(()));
        let file = |i: usize| FileRef {
            name: format!("{i:0>255}"),
            sha256: "f".repeat(64),
            size: u64::MAX,
        };
        JobCopy {
            request,
            module: file(0),
            inputs: (0..limits::MAX_INPUTS).map(file).collect(),
            submitted_unix: 0,
            owner: Some(crate::owner::UserKey::generate().id()),
            owner_proof: Some(crate::owner::SubmitProof {
                nonce: vec![0xff; crate::owner::NONCE_BYTES],
                signature: vec![0xff; zorilla_core::replica::MAX_SIGNATURE],
                max_workers: u32::MAX,
            }),
            origin: Some(crate::origin::JobOrigin::new(PeerId::random())),
        }
    }

    #[test]
    fn the_largest_valid_job_copy_fits_one_overlay_message() {
        let copy = largest_copy();
        let info = JobInfo {
            id: u64::MAX,
            home: PeerId::random(),
            phase: JobPhase::Scheduling,
            request: copy.request,
            module: copy.module,
            inputs: copy.inputs,
            ranks: placement(),
        };
        assert_eq!(validate::job_info(&info), Ok(()));
        let bytes = encode(&PeerReply::Job(Box::new(info))).len();
        assert!(bytes < ROOM, "{bytes} bytes");
    }

    #[test]
    fn the_largest_valid_peer_requests_fit_one_overlay_message() {
        let push = PeerRpc::Sched(Message::Placement {
            job: JobId(u64::MAX),
            phase: Phase::Running,
            placement: placement(),
            replaced: (0..limits::MAX_WORKERS).collect(),
        });
        // The one message that starts a member's workers: every rank of
        // the largest job, its whole placement, and its largest copy.
        let grant = PeerRpc::Grant {
            grant: Message::Grant {
                hold: HoldId(u32::MAX),
                job: JobId(u64::MAX),
                ranks: (0..limits::MAX_WORKERS).collect(),
                incarnation: u32::MAX,
                placement: placement(),
            },
            copy: Box::new(largest_copy()),
        };
        let advert = Advert {
            job: JobId(u64::MAX),
            home: PeerId::random(),
            per_worker: Resources::new(
                limits::MAX_CORES,
                limits::MAX_MEMORY_MIB,
                limits::MAX_DISK_MIB,
            ),
            workers: WorkerCount::rigid(limits::MAX_WORKERS),
            strategy: Strategy::Spread,
            expires_in: limits::MAX_ADVERT_EXPIRY,
            flood: FloodHeader {
                seq: u32::MAX,
                ttl: u8::MAX,
                latency_budget: Some(limits::MAX_RTT),
                path_rtt: limits::MAX_RTT,
            },
            owner: Some(crate::owner::UserKey::generate().id().key()),
        };
        assert_eq!(limits::check_advert(&advert), Ok(()));
        let ended = PeerRpc::WorkerEnded {
            job: u64::MAX,
            rank: limits::MAX_WORKERS - 1,
            incarnation: u32::MAX,
            end: WorkerEnd::Failed(zorilla_core::node::Failure::Trapped(
                "x".repeat(validate::MAX_OUTCOME_BYTES),
            )),
        };
        use crate::store::checkpoints::{
            MAX_BLOCK_BYTES, MAX_BLOCKS, MAX_CHECKPOINT_BYTES, Manifest,
        };
        let put = PeerRpc::Checkpoint(CheckpointRpc::Put {
            job: u64::MAX,
            home: PeerId::random(),
            rank: limits::MAX_WORKERS - 1,
            seq: u64::MAX,
            data: vec![0xff; MAX_BLOCK_BYTES],
        });
        let manifest = Manifest {
            seq: u64::MAX,
            generation: Some(zorilla_core::checkpoint::MAX_GENERATION),
            size: MAX_CHECKPOINT_BYTES,
            blocks: vec![[0xff; 32]; MAX_BLOCKS],
        };
        let commit = PeerRpc::Checkpoint(CheckpointRpc::Commit {
            job: u64::MAX,
            rank: limits::MAX_WORKERS - 1,
            manifest: manifest.clone(),
            copies: (0..zorilla_core::replica::MAX_COPIES)
                .map(|_| PeerId::random())
                .collect(),
        });
        let stored = PeerRpc::Checkpoint(CheckpointRpc::Stored {
            job: u64::MAX,
            rank: limits::MAX_WORKERS - 1,
            seq: u64::MAX,
            generation: Some(zorilla_core::checkpoint::MAX_GENERATION),
            size: MAX_CHECKPOINT_BYTES,
            holders: vec![PeerId::random(); zorilla_core::checkpoint::MAX_REPLICAS],
        });
        let answer = PeerReply::Checkpoint(CheckpointReply::Manifest(Some(manifest)));
        assert!(encode(&answer).len() < ROOM);
        for rpc in [push, grant, ended, put, commit, stored] {
            assert_eq!(validate::peer_rpc(&rpc), Ok(()), "{rpc:?}");
            let bytes = encode(&rpc).len();
            assert!(bytes < ROOM, "{bytes} bytes");
        }
        assert!(encode(&advert).len() < 1024);
    }

    #[test]
    fn out_of_range_peer_requests_are_refused_with_a_sentence() {
        let refused = |rpc: PeerRpc| validate::peer_rpc(&rpc).unwrap_err().to_string();
        let advert = PeerRpc::Sched(Message::Advert(Advert {
            job: JobId(1),
            home: PeerId::random(),
            per_worker: Resources::new(1, 64, 0),
            workers: WorkerCount::rigid(1),
            strategy: Strategy::Spread,
            expires_in: Duration::from_secs(u64::MAX - 1),
            flood: FloodHeader {
                seq: 0,
                ttl: 1,
                latency_budget: None,
                path_rtt: Duration::ZERO,
            },
            owner: None,
        }));
        assert!(refused(advert).contains("advert expiry"));
        let offer = PeerRpc::Sched(Message::Offer {
            hold: HoldId(0),
            job: JobId(1),
            workers: u32::MAX,
            distance: Duration::MAX,
            residue: Resources::ZERO,
            machine: Machine::default(),
        });
        assert!(refused(offer).contains("offered workers"));
        // What an offer says of its machine is bounded too: a node cannot
        // claim more busy cores than it has, nor an absurd speed.
        let offer = |machine| {
            PeerRpc::Sched(Message::Offer {
                hold: HoldId(0),
                job: JobId(1),
                workers: 1,
                distance: Duration::from_millis(1),
                residue: Resources::new(1, 0, 0),
                machine,
            })
        };
        let machine = |cores, busy, speed| Machine { cores, busy, speed };
        assert!(validate::peer_rpc(&offer(machine(4, 3, 1500))).is_ok());
        assert!(refused(offer(machine(u32::MAX, 0, 1000))).contains("node cores"));
        assert!(refused(offer(machine(4, 5, 1000))).contains("busy cores"));
        assert!(refused(offer(machine(4, 0, u32::MAX))).contains("CPU speed"));
        assert!(refused(offer(machine(0, 0, 1000))).contains("cores left"));
        let placed = BTreeMap::from([(
            u32::MAX,
            Placed {
                node: PeerId::random(),
                incarnation: 0,
            },
        )]);
        let push = PeerRpc::Sched(Message::Placement {
            job: JobId(1),
            phase: Phase::Running,
            placement: placed.clone(),
            replaced: vec![],
        });
        assert!(refused(push).contains("rank is 4294967295"));
        let grant = Message::Grant {
            hold: HoldId(0),
            job: JobId(1),
            ranks: vec![0],
            incarnation: 0,
            placement: placed,
        };
        let copy = Box::new(JobCopy {
            request: JobRequest::default(),
            module: FileRef {
                name: "m.wasm".into(),
                sha256: "f".repeat(64),
                size: 1,
            },
            inputs: vec![],
            submitted_unix: 0,
            owner: None,
            owner_proof: None,
            origin: None,
        });
        assert!(
            refused(PeerRpc::Grant {
                grant: grant.clone(),
                copy: copy.clone()
            })
            .contains("rank is 4294967295")
        );
        // A grant without the job's copy would leave the member asking.
        assert_eq!(
            refused(PeerRpc::Sched(grant)),
            "a grant travels with its job's copy, not as a bare scheduling message"
        );
        let not_a_grant = PeerRpc::Grant {
            grant: Message::Refuse {
                hold: None,
                job: JobId(1),
                reason: zorilla_core::advert::RefuseReason::NotChosen,
            },
            copy,
        };
        assert_eq!(
            refused(not_a_grant),
            "a job's copy travels with a grant only"
        );
        let barrier = PeerRpc::Barrier {
            job: 1,
            to: u32::MAX,
            from: 0,
            msg: BarrierMsg::Enter { token: 1 },
        };
        assert!(refused(barrier).contains("receiving rank"));
        let output = |name: &str, offset| PeerRpc::Output {
            job: 1,
            name: name.into(),
            offset,
            data: vec![1],
        };
        assert!(refused(output("0/../x", 0)).contains("not usable"));
        assert!(refused(output("x", 0)).contains("<rank>/<path>"));
        assert!(refused(output("0//x", 0)).contains("not usable"));
        assert!(refused(output("0/x", u64::MAX)).contains("output offset"));
        assert_eq!(validate::peer_rpc(&output("3/x.txt", 7)), Ok(()));
        // Subdirectories of a rank's outputs travel as rank/sub/file.
        assert_eq!(validate::peer_rpc(&output("3/sub/x.txt", 0)), Ok(()));
        let block = PeerRpc::GetBlock {
            sha256: "../../etc/passwd".into(),
            offset: 0,
            len: 1,
        };
        assert!(refused(block).contains("64 hex digits"));
        let log = PeerRpc::Log {
            job: 1,
            chunk: LogChunk {
                rank: 0,
                stderr: false,
                data: vec![0; BLOCK_BYTES + 1],
            },
        };
        assert!(refused(log).contains("log chunk size"));
        let put = PeerRpc::Checkpoint(CheckpointRpc::Put {
            job: 1,
            home: PeerId::random(),
            rank: 0,
            seq: 1,
            data: vec![0; BLOCK_BYTES + 1],
        });
        assert!(refused(put).contains("checkpoint block size"));
        let commit = PeerRpc::Checkpoint(CheckpointRpc::Commit {
            job: 1,
            rank: 0,
            copies: vec![],
            manifest: crate::store::checkpoints::Manifest {
                seq: 1,
                generation: None,
                size: u64::MAX,
                blocks: vec![],
            },
        });
        assert!(refused(commit).contains("checkpoint size"));
        let stored = PeerRpc::Checkpoint(CheckpointRpc::Stored {
            job: 1,
            rank: 0,
            seq: 1,
            generation: None,
            size: 1,
            holders: vec![PeerId::random(); zorilla_core::checkpoint::MAX_REPLICAS + 1],
        });
        assert!(refused(stored).contains("checkpoint holders"));
        let stored = PeerRpc::Checkpoint(CheckpointRpc::Stored {
            job: 1,
            rank: 0,
            seq: 1,
            generation: Some(zorilla_core::checkpoint::MAX_GENERATION + 1),
            size: 1,
            holders: vec![PeerId::random()],
        });
        assert!(refused(stored).contains("checkpoint generation"));
        let get = PeerRpc::Checkpoint(CheckpointRpc::Get {
            job: 1,
            rank: u32::MAX,
            hash: [0; 32],
            ticket: Vec::new(),
        });
        assert!(refused(get).contains("checkpoint rank"));
        // A ticket is a signature: one longer than any is refused unread.
        let get = PeerRpc::Checkpoint(CheckpointRpc::Get {
            job: 1,
            rank: 0,
            hash: [0; 32],
            ticket: vec![0; zorilla_core::replica::MAX_SIGNATURE + 1],
        });
        assert!(refused(get).contains("ticket bytes"));
    }
}

#[cfg(test)]
mod replica_tests {
    use std::collections::BTreeSet;

    use zorilla_core::advert::{JobId, Strategy, WorkerCount};
    use zorilla_core::node::{JobEntry, JobEvent, JobSpec, LostPolicy};
    use zorilla_core::replica::{Epoch, Msg};
    use zorilla_core::resources::Resources;
    use zorilla_overlay::PeerId;

    use super::*;

    /// A replica's append, with the job's copy, goes through the wire
    /// and its checks.
    #[test]
    fn a_replica_append_round_trips_and_passes_the_checks() {
        let primary = PeerId::random();
        let epoch = Epoch { term: 0, primary };
        let spec = JobSpec {
            per_worker: Resources::new(1, 64, 0),
            workers: WorkerCount { min: 8, max: 8 },
            strategy: Strategy::Concentrate,
            lifetime: std::time::Duration::from_secs(120),
            on_worker_lost: LostPolicy::Fail,
        };
        let msg = Msg::Append {
            epoch: epoch.clone(),
            after: 0,
            after_epoch: None,
            entries: vec![
                (epoch.clone(), JobEntry::Submitted { spec, owner: None }),
                (
                    epoch.clone(),
                    JobEntry::Event(JobEvent::Started {
                        job: JobId(1),
                        workers: 8,
                    }),
                ),
            ],
            copies: Some(BTreeSet::from([PeerId::random()])),
            version: 0,
            end: 2,
            mandate: None,
            roster: None,
        };
        let rpc = PeerRpc::Replica {
            job: 1,
            msg: Box::new(msg),
            copy: None,
        };
        let back: PeerRpc = decode(&encode(&rpc)).expect("decodes");
        crate::validate::peer_rpc(&back).expect("passes the checks");
    }

    /// A peer may pass on only a client's questions about a job (status,
    /// logs, outputs, cancel): a submit, a resize or a list through another
    /// node is refused with a sentence, and an append beyond the entries an
    /// append may carry is refused too.
    #[test]
    fn a_peer_passes_on_only_questions_about_a_job_and_bounded_appends() {
        use crate::protocol::{JobRequest, Request};
        let passed =
            |request: Request| crate::validate::peer_rpc(&PeerRpc::Client(Box::new(request)));
        assert!(passed(Request::Status { job: 1 }).is_ok());
        assert!(passed(Request::Cancel { job: 1 }).is_ok());
        assert!(
            passed(Request::Resize {
                job: 1,
                max_workers: 2
            })
            .is_ok()
        );
        assert!(passed(Request::Challenge { job: 1 }).is_ok());
        for request in [
            Request::List,
            Request::NodeInfo,
            Request::Submit {
                job: JobRequest::default(),
                module: vec![0; 8],
                inputs: Vec::new(),
                owner: None,
            },
        ] {
            let refused = passed(request).expect_err("not passed on");
            assert!(
                refused.to_string().contains("through another node"),
                "{refused}"
            );
        }
        let primary = PeerId::random();
        let epoch = Epoch { term: 0, primary };
        let entry = JobEntry::Event(JobEvent::Started {
            job: JobId(1),
            workers: 1,
        });
        let too_many = Msg::Append {
            epoch: epoch.clone(),
            after: 0,
            after_epoch: None,
            entries: vec![(epoch, entry); zorilla_core::replica::MAX_ENTRIES_PER_APPEND + 1],
            copies: None,
            version: 0,
            end: 0,
            mandate: None,
            roster: None,
        };
        let rpc = PeerRpc::Replica {
            job: 1,
            msg: Box::new(too_many),
            copy: None,
        };
        assert!(crate::validate::peer_rpc(&rpc).is_err());
    }

    /// The largest append of checkpoint entries (a rollback job's log)
    /// passes the checks and fits a frame; one with a generation beyond
    /// the maximum is refused.
    #[test]
    fn an_append_of_the_largest_checkpoint_entries_fits_a_frame() {
        use zorilla_core::checkpoint::{Latest, MAX_GENERATION, MAX_REPLICAS};
        let primary = PeerId::random();
        let epoch = Epoch { term: 0, primary };
        let entry = |generation| {
            JobEntry::Event(JobEvent::Checkpointed {
                job: JobId(u64::MAX),
                rank: zorilla_core::limits::MAX_WORKERS - 1,
                checkpoint: Latest {
                    seq: u64::MAX,
                    generation: Some(generation),
                    size: u64::MAX,
                    holders: vec![PeerId::random(); MAX_REPLICAS],
                },
            })
        };
        let append = |generation| PeerRpc::Replica {
            job: u64::MAX,
            msg: Box::new(Msg::Append {
                epoch: epoch.clone(),
                after: 0,
                after_epoch: Some(epoch.clone()),
                entries: vec![
                    (epoch.clone(), entry(generation));
                    zorilla_core::replica::MAX_ENTRIES_PER_APPEND
                ],
                copies: None,
                version: 0,
                end: zorilla_core::replica::MAX_LOG,
                mandate: None,
                roster: None,
            }),
            copy: None,
        };
        let largest = append(MAX_GENERATION);
        assert_eq!(crate::validate::peer_rpc(&largest), Ok(()));
        let bytes = encode(&largest).len();
        assert!(
            bytes < zorilla_overlay::config::DEFAULT_MAX_MESSAGE_SIZE,
            "{bytes} bytes"
        );
        let refused = crate::validate::peer_rpc(&append(MAX_GENERATION + 1)).unwrap_err();
        assert!(
            refused.to_string().contains("checkpoint generation"),
            "{refused}"
        );
    }
}

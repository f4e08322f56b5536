//! What nodes say to each other over the overlay's rpc protocol (CBOR),
//! one file per concern: scheduling and grants ([`sched`]), a member's
//! reports to a job's home ([`member`]), files ([`files`]), barriers
//! ([`barrier`]), liveness ([`liveness`]), replicas of a job's log
//! ([`replica`]), a client's questions passed to a job's home
//! ([`forward`]), the status page's remote views ([`view`]) and
//! checkpoints ([`checkpoint`]). Each file has its requests and their
//! checks; this one has the envelope ([`PeerRpc`]), the answers
//! ([`PeerReply`]) and the encoding.
//!
//! A request is checked once, when it is decoded ([`PeerRpc::check`]),
//! against the documented maxima; the node's handlers take it checked.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zorilla_overlay::PeerId;

pub(crate) mod barrier;
pub(crate) mod checkpoint;
pub(crate) mod files;
pub(crate) mod forward;
pub(crate) mod job_copy;
pub(crate) mod liveness;
pub(crate) mod member;
pub(crate) mod replica;
pub(crate) mod sched;
pub(crate) mod view;

use barrier::BarrierRpc;
use checkpoint::{CheckpointReply, CheckpointRpc};
use files::FileRpc;
use forward::ForwardRpc;
use job_copy::JobInfo;
use liveness::RanksRpc;
use member::MemberRpc;
use replica::ReplicaRpc;
use sched::SchedRpc;
use view::ViewRpc;

use crate::validate::Invalid;

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

/// A request from one node to another: its concern, then the request of
/// that concern (in the concern's own file).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum PeerRpc {
    /// Liveness probe.
    Ping,
    /// Scheduling: the core's messages and grants.
    Sched(SchedRpc),
    /// A member to a job's home.
    Member(MemberRpc),
    /// A job's files.
    File(FileRpc),
    /// Between a job's ranks.
    Barrier(BarrierRpc),
    /// A home to a node holding its ranks.
    Ranks(RanksRpc),
    /// Between a job's replicas.
    Replica(ReplicaRpc),
    /// A client's question on its way to a job's home.
    Forward(ForwardRpc),
    /// The status page's remote views.
    View(ViewRpc),
    /// Checkpoints: blocks to and from holders, where a rank's latest is.
    Checkpoint(CheckpointRpc),
}

impl PeerRpc {
    /// Checks a request from a peer, once decoded: every count, rank, size
    /// and duration within the documented maxima. A peer whose request
    /// fails is answered with the sentence and counted as misbehaving.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        match self {
            PeerRpc::Ping => Ok(()),
            PeerRpc::Sched(rpc) => rpc.check(),
            PeerRpc::Member(rpc) => rpc.check(),
            PeerRpc::File(rpc) => rpc.check(),
            PeerRpc::Barrier(rpc) => rpc.check(),
            PeerRpc::Ranks(rpc) => rpc.check(),
            PeerRpc::Replica(rpc) => rpc.check(),
            PeerRpc::Forward(rpc) => rpc.check(),
            PeerRpc::View(rpc) => rpc.check(),
            PeerRpc::Checkpoint(rpc) => rpc.check(),
        }
    }
}

/// The answer to a [`PeerRpc`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum PeerReply {
    Ack,
    /// Answer to a [`SchedRpc::Grant`]: which run of the node took it (its
    /// boot id, as in [`PeerReply::Ranks`]), so that the home can tell a
    /// restart however soon after the grant it came.
    Granted {
        boot: u64,
    },
    Job(Box<JobInfo>),
    Block(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Answer to [`ViewRpc::Node`].
    Status(Box<view::Snapshot>),
    /// Answer to [`ViewRpc::Job`]; `None` if the job is unknown here.
    StatusJob(Option<Box<view::JobDetail>>),
    /// Answer to [`ViewRpc::Summary`].
    Summary(Box<view::Summary>),
    /// Answer to [`RanksRpc`]: this run of the node (`boot`, random
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
    /// Answer to [`ForwardRpc::WhereIs`]: the job's home, if known.
    Home(Option<PeerId>),
    /// Answer to [`ForwardRpc::Client`].
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
    use crate::protocol::{JobPhase, JobRequest, LogChunk};
    use crate::store::FileRef;
    use crate::validate;
    use barrier::BarrierMsg;
    use files::BLOCK_BYTES;
    use job_copy::{JobCopy, Placed};
    use zorilla_core::advert::Message;
    use zorilla_core::node::WorkerEnd;

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
            kind: zorilla_core::advert::WorkKind::Wasm,
            deterministic: Some(u64::MAX),
            priority: i8::MIN,
            tasks: None,
            // A job that runs more than once has fewer workers per run:
            // the largest valid request runs once.
            replicas: 1,
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
        assert_eq!(info.check(), Ok(()));
        let bytes = encode(&PeerReply::Job(Box::new(info))).len();
        assert!(bytes < ROOM, "{bytes} bytes");
    }

    #[test]
    fn the_largest_valid_peer_requests_fit_one_overlay_message() {
        let push = PeerRpc::Sched(SchedRpc::Message(Message::Placement {
            job: JobId(u64::MAX),
            phase: Phase::Running,
            placement: placement(),
            replaced: (0..limits::MAX_WORKERS).collect(),
        }));
        // The one message that starts a member's workers: every rank of
        // the largest job, its whole placement, and its largest copy.
        let grant = PeerRpc::Sched(SchedRpc::Grant {
            grant: Message::Grant {
                hold: HoldId(u32::MAX),
                job: JobId(u64::MAX),
                ranks: (0..limits::MAX_WORKERS).collect(),
                incarnation: u32::MAX,
                placement: placement(),
            },
            copy: Box::new(largest_copy()),
        });
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
            kind: zorilla_core::advert::WorkKind::Wasm,
            priority: i8::MIN,
            preemptible: false,
        };
        assert_eq!(limits::check_advert(&advert), Ok(()));
        let ended = PeerRpc::Member(MemberRpc::WorkerEnded {
            job: u64::MAX,
            rank: limits::MAX_WORKERS - 1,
            incarnation: u32::MAX,
            end: WorkerEnd::Failed(zorilla_core::node::Failure::Trapped(
                "x".repeat(validate::MAX_OUTCOME_BYTES),
            )),
            digest: Some(zorilla_core::runs::ResultDigest([u8::MAX; 32])),
        });
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
            assert_eq!(rpc.check(), Ok(()), "{rpc:?}");
            let bytes = encode(&rpc).len();
            assert!(bytes < ROOM, "{bytes} bytes");
        }
        assert!(encode(&advert).len() < 1024);
    }

    #[test]
    fn out_of_range_peer_requests_are_refused_with_a_sentence() {
        let refused = |rpc: PeerRpc| rpc.check().unwrap_err().to_string();
        let advert = PeerRpc::Sched(SchedRpc::Message(Message::Advert(Advert {
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
            kind: zorilla_core::advert::WorkKind::Wasm,
            priority: i8::MIN,
            preemptible: false,
        })));
        assert!(refused(advert).contains("advert expiry"));
        let offer = PeerRpc::Sched(SchedRpc::Message(Message::Offer {
            hold: HoldId(0),
            job: JobId(1),
            workers: u32::MAX,
            distance: Duration::MAX,
            residue: Resources::ZERO,
            machine: Machine::default(),
        }));
        assert!(refused(offer).contains("offered workers"));
        // What an offer says of its machine is bounded too: a node cannot
        // claim more busy cores than it has, nor an absurd speed.
        let offer = |machine| {
            PeerRpc::Sched(SchedRpc::Message(Message::Offer {
                hold: HoldId(0),
                job: JobId(1),
                workers: 1,
                distance: Duration::from_millis(1),
                residue: Resources::new(1, 0, 0),
                machine,
            }))
        };
        let machine = |cores, busy, speed| Machine {
            cores,
            busy,
            speed,
            reach: Default::default(),
        };
        assert!(offer(machine(4, 3, 1500)).check().is_ok());
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
        let push = PeerRpc::Sched(SchedRpc::Message(Message::Placement {
            job: JobId(1),
            phase: Phase::Running,
            placement: placed.clone(),
            replaced: vec![],
        }));
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
            refused(PeerRpc::Sched(SchedRpc::Grant {
                grant: grant.clone(),
                copy: copy.clone()
            }))
            .contains("rank is 4294967295")
        );
        // A grant without the job's copy would leave the member asking.
        assert_eq!(
            refused(PeerRpc::Sched(SchedRpc::Message(grant))),
            "a grant travels with its job's copy, not as a bare scheduling message"
        );
        let not_a_grant = PeerRpc::Sched(SchedRpc::Grant {
            grant: Message::Refuse {
                hold: None,
                job: JobId(1),
                reason: zorilla_core::advert::RefuseReason::NotChosen,
            },
            copy,
        });
        assert_eq!(
            refused(not_a_grant),
            "a job's copy travels with a grant only"
        );
        let barrier = PeerRpc::Barrier(BarrierRpc {
            job: 1,
            to: u32::MAX,
            from: 0,
            msg: BarrierMsg::Enter { token: 1 },
        });
        assert!(refused(barrier).contains("receiving rank"));
        let output = |name: &str, offset| {
            PeerRpc::Member(MemberRpc::Output {
                job: 1,
                name: name.into(),
                offset,
                data: vec![1],
            })
        };
        assert!(refused(output("0/../x", 0)).contains("not usable"));
        assert!(refused(output("x", 0)).contains("<rank>/<path>"));
        assert!(refused(output("0//x", 0)).contains("not usable"));
        assert!(refused(output("0/x", u64::MAX)).contains("output offset"));
        assert_eq!(output("3/x.txt", 7).check(), Ok(()));
        // Subdirectories of a rank's outputs travel as rank/sub/file.
        assert_eq!(output("3/sub/x.txt", 0).check(), Ok(()));
        let block = PeerRpc::File(FileRpc::GetBlock {
            sha256: "../../etc/passwd".into(),
            offset: 0,
            len: 1,
        });
        assert!(refused(block).contains("64 hex digits"));
        let log = PeerRpc::Member(MemberRpc::Log {
            job: 1,
            chunk: LogChunk {
                rank: 0,
                stderr: false,
                data: vec![0; BLOCK_BYTES + 1],
            },
        });
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
            runs: 1,
            per_worker: Resources::new(1, 64, 0),
            workers: WorkerCount { min: 8, max: 8 },
            strategy: Strategy::Concentrate,
            lifetime: std::time::Duration::from_secs(120),
            on_worker_lost: LostPolicy::Fail,
            kind: zorilla_core::advert::WorkKind::Wasm,
            priority: 0,
            tasks: None,
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
        let rpc = PeerRpc::Replica(ReplicaRpc {
            job: 1,
            msg: Box::new(msg),
            copy: None,
        });
        let back: PeerRpc = decode(&encode(&rpc)).expect("decodes");
        back.check().expect("passes the checks");
    }

    /// A peer may pass on only a client's questions about a job (status,
    /// logs, outputs, cancel): a submit, a resize or a list through another
    /// node is refused with a sentence, and an append beyond the entries an
    /// append may carry is refused too.
    #[test]
    fn a_peer_passes_on_only_questions_about_a_job_and_bounded_appends() {
        use crate::protocol::{JobRequest, Request};
        let passed =
            |request: Request| PeerRpc::Forward(ForwardRpc::Client(Box::new(request))).check();
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
        let rpc = PeerRpc::Replica(ReplicaRpc {
            job: 1,
            msg: Box::new(too_many),
            copy: None,
        });
        assert!(rpc.check().is_err());
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
        let append = |generation| {
            PeerRpc::Replica(ReplicaRpc {
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
            })
        };
        let largest = append(MAX_GENERATION);
        assert_eq!(largest.check(), Ok(()));
        let bytes = encode(&largest).len();
        assert!(
            bytes < zorilla_overlay::config::DEFAULT_MAX_MESSAGE_SIZE,
            "{bytes} bytes"
        );
        let refused = append(MAX_GENERATION + 1).check().unwrap_err();
        assert!(
            refused.to_string().contains("checkpoint generation"),
            "{refused}"
        );
    }
}

//! Entry points for the fuzz harness (`node/tests/fuzz.rs`), not an API:
//! every decoder of bytes that reach the node from outside, by name, and
//! valid encodings of random values of the types they decode (most of them
//! private to this crate) for the harness to mutate.
//!
//! Each [`Decoder`] goes through the same function the node uses on real
//! input, so whatever checks those functions make run under the fuzzer too.

use std::collections::BTreeMap;
use std::time::Duration;

use zorilla_core::advert::{
    Advert, DeclineReason, FloodHeader, HoldId, JobId, Message, RefuseReason, Strategy, WorkerCount,
};
use zorilla_core::node::{Failure, LostPolicy, Phase, WorkerEnd};
use zorilla_core::resources::{Machine, Resources};
use zorilla_overlay::PeerId;

use crate::protocol::{
    self, ErrorKind, Hello, JobPhase, JobRequest, JobStatus, LogChunk, LogPage, NamedFile,
    NodeInfo, OutcomeCode, OutputData, OutputEntry, OutputPage, PeerEntry, Pending, RankStatus,
    Request, Response, Welcome,
};
use crate::store::checkpoints::Manifest;
use crate::store::{self, FileRef, JobRecord};
use crate::wire::barrier::{BarrierMsg, BarrierRpc};
use crate::wire::checkpoint::{CheckpointReply, CheckpointRpc, Located};
use crate::wire::files::FileRpc;
use crate::wire::forward::ForwardRpc;
use crate::wire::job_copy::{JobCopy, JobInfo, Placed};
use crate::wire::liveness::RanksRpc;
use crate::wire::member::MemberRpc;
use crate::wire::sched::SchedRpc;
use crate::wire::view::ViewRpc;
use crate::wire::{self, PeerReply, PeerRpc, view};

/// A decoder of outside bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoder {
    /// A client's first frame ([`protocol::frame::parse`] of a [`Hello`]).
    Hello,
    /// A client's request frames ([`protocol::frame::parse`] of a
    /// [`Request`]).
    Request,
    /// A node's answers as the CLI and client read them
    /// ([`protocol::frame::parse`] of a [`Response`]).
    Response,
    /// A peer's rpc request (the node's `wire::decode` of a `PeerRpc`, the
    /// core's `Message` inside).
    PeerRpc,
    /// A peer's rpc answer (`wire::decode` of a `PeerReply`: job copies,
    /// blocks, remote status views).
    PeerReply,
    /// A flooded advert's payload (`wire::decode` of an `Advert`).
    Advert,
    /// A job record read back from the database.
    StoredJob,
    /// A log chunk read back from the database.
    StoredLog,
}

impl Decoder {
    /// Every decoder.
    pub const ALL: [Decoder; 8] = [
        Decoder::Hello,
        Decoder::Request,
        Decoder::Response,
        Decoder::PeerRpc,
        Decoder::PeerReply,
        Decoder::Advert,
        Decoder::StoredJob,
        Decoder::StoredLog,
    ];

    /// Whether the decoder reads client frames (a 4-byte length, then
    /// CBOR) rather than bare CBOR.
    pub fn framed(self) -> bool {
        matches!(self, Decoder::Hello | Decoder::Request | Decoder::Response)
    }
}

/// Runs decoder `d` over `bytes` as the node would: client frames are taken
/// off the buffer until it needs more bytes or a frame fails. Returns
/// whether the (first) value decoded, and why not.
pub fn decode(d: Decoder, bytes: &[u8]) -> Result<(), String> {
    fn frames<T: serde::de::DeserializeOwned>(mut buf: &[u8]) -> Result<(), String> {
        // The server's cap: what it accepts before authentication.
        let max = protocol::frame::DEFAULT_MAX_FRAME;
        let mut first = Err("incomplete frame".to_string());
        while let Some((_, used)) =
            protocol::frame::parse::<T>(buf, max).map_err(|e| e.to_string())?
        {
            first = Ok(());
            buf = &buf[used..];
        }
        first
    }
    match d {
        Decoder::Hello => frames::<Hello>(bytes),
        Decoder::Request => frames::<Request>(bytes),
        Decoder::Response => frames::<Response>(bytes),
        Decoder::PeerRpc => wire::decode::<PeerRpc>(bytes)
            .map(drop)
            .map_err(|e| e.to_string()),
        Decoder::PeerReply => wire::decode::<PeerReply>(bytes)
            .map(drop)
            .map_err(|e| e.to_string()),
        Decoder::Advert => wire::decode::<Advert<PeerId>>(bytes)
            .map(drop)
            .map_err(|e| e.to_string()),
        Decoder::StoredJob => store::decode_record::<JobRecord>(bytes)
            .map(drop)
            .map_err(|e| e.to_string()),
        Decoder::StoredLog => store::decode_record::<LogChunk>(bytes)
            .map(drop)
            .map_err(|e| e.to_string()),
    }
}

/// A valid encoding (framed for client frames) of a random value of what
/// decoder `d` reads, from `seed`.
pub fn sample(d: Decoder, seed: u64) -> Vec<u8> {
    let g = &mut Gen(seed);
    fn frame<T: serde::Serialize>(value: &T) -> Vec<u8> {
        protocol::frame::encode(value, protocol::frame::DEFAULT_MAX_FRAME)
            .expect("samples are small")
    }
    match d {
        Decoder::Hello => frame(&hello(g)),
        Decoder::Request => frame(&request(g)),
        Decoder::Response => frame(&response(g)),
        Decoder::PeerRpc => wire::encode(&peer_rpc(g)),
        Decoder::PeerReply => wire::encode(&peer_reply(g)),
        Decoder::Advert => wire::encode(&advert(g)),
        Decoder::StoredJob => wire::encode(&job_record(g)),
        Decoder::StoredLog => wire::encode(&log_chunk(g)),
    }
}

/// A seeded generator (SplitMix64): samples are reproducible from the seed
/// proptest prints.
struct Gen(u64);

impl Gen {
    fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.u64() % n.max(1)
    }
    fn bool(&mut self) -> bool {
        self.u64() & 1 == 1
    }
    /// Mostly small numbers, sometimes the extremes.
    fn int(&mut self) -> u64 {
        match self.below(8) {
            0 => 0,
            1 => u64::MAX,
            2 => self.u64(),
            3 => u64::from(u32::MAX) + self.below(3),
            _ => self.below(1000),
        }
    }
    fn u32(&mut self) -> u32 {
        self.int() as u32
    }
    fn u8(&mut self) -> u8 {
        self.int() as u8
    }
    fn len(&mut self) -> usize {
        let most = if self.below(8) == 0 { 64 } else { 4 };
        self.below(most) as usize
    }
    fn string(&mut self) -> String {
        const CHARS: &[char] = &['a', 'z', '0', '/', '.', ' ', '\n', '\0', 'é', '€', '😀'];
        (0..self.len() * 2)
            .map(|_| CHARS[self.below(CHARS.len() as u64) as usize])
            .collect()
    }
    fn bytes(&mut self) -> Vec<u8> {
        let n = if self.below(16) == 0 {
            // Past ciborium's 4096-byte scratch buffer.
            4000 + self.below(200)
        } else {
            self.len() as u64 * 8
        };
        (0..n).map(|_| self.u64() as u8).collect()
    }
    fn vec<T>(&mut self, mut f: impl FnMut(&mut Gen) -> T) -> Vec<T> {
        (0..self.len()).map(|_| f(self)).collect()
    }
    fn map<K: Ord, V>(
        &mut self,
        mut k: impl FnMut(&mut Gen) -> K,
        mut v: impl FnMut(&mut Gen) -> V,
    ) -> BTreeMap<K, V> {
        (0..self.len()).map(|_| (k(self), v(self))).collect()
    }
    fn option<T>(&mut self, f: impl FnOnce(&mut Gen) -> T) -> Option<T> {
        self.bool().then(|| f(self))
    }
    fn pick<T: Copy>(&mut self, of: &[T]) -> T {
        of[self.below(of.len() as u64) as usize]
    }
    fn duration(&mut self) -> Duration {
        Duration::new(self.int(), (self.u64() % 1_000_000_000) as u32)
    }
    fn f64(&mut self) -> f64 {
        self.pick(&[0.0, -1.5, 1e300, f64::NAN, f64::INFINITY, 12.25])
    }
}

fn peer(g: &mut Gen) -> PeerId {
    // A SHA-256 multihash: any 32 bytes make a valid peer id.
    let mut bytes = vec![0x12, 0x20];
    bytes.extend((0..32).map(|_| g.u64() as u8));
    PeerId::from_bytes(&bytes).expect("a sha2-256 multihash is a peer id")
}

fn job_phase(g: &mut Gen) -> JobPhase {
    g.pick(&[
        JobPhase::Scheduling,
        JobPhase::Running,
        JobPhase::Completed,
        JobPhase::Cancelled,
        JobPhase::Failed,
    ])
}

fn job_request(g: &mut Gen) -> JobRequest {
    JobRequest {
        min_workers: g.u32(),
        max_workers: g.u32(),
        cores: g.u32(),
        memory_mib: g.int(),
        disk_mib: g.int(),
        strategy: g.pick(&[Strategy::Spread, Strategy::Concentrate]),
        lifetime_secs: g.int(),
        on_worker_lost: g.pick(&[LostPolicy::Fail, LostPolicy::Replace, LostPolicy::Rollback]),
        args: g.vec(Gen::string),
        wall_time_secs: g.int(),
        cpu_time_secs: g.int(),
        kind: zorilla_core::advert::WorkKind::Wasm,
        deterministic: g.bool().then(|| g.int()),
        priority: g.pick(&[i8::MIN, -1, 0, 1, i8::MAX]),
        tasks: g.option(|g| crate::protocol::Tasks {
            count: g.u32(),
            retries: g.u8(),
            args_file: g.option(Gen::string),
            spot_checks: g.u8(),
        }),
        replicas: g.u8(),
    }
}

fn named_file(g: &mut Gen) -> NamedFile {
    NamedFile {
        name: g.string(),
        data: g.bytes(),
    }
}

fn log_chunk(g: &mut Gen) -> LogChunk {
    LogChunk {
        rank: g.u32(),
        stderr: g.bool(),
        data: g.bytes(),
    }
}

fn hello(g: &mut Gen) -> Hello {
    Hello {
        version: g.u32(),
        client: g.string(),
        token: g.option(Gen::string),
    }
}

fn request(g: &mut Gen) -> Request {
    let job = g.int();
    match g.below(13) {
        0 => Request::Submit {
            job: job_request(g),
            module: g.bytes(),
            inputs: g.vec(named_file),
            owner: g.option(|g| crate::protocol::Signed {
                user: g.string(),
                signature: g.bytes(),
            }),
        },
        9 => Request::Challenge { job },
        10 => Request::Owner {
            proof: owner_proof(g),
            request: Box::new(Request::Status { job }),
        },
        1 => Request::Status { job },
        2 => Request::List,
        3 => Request::Cancel { job },
        4 => Request::Logs {
            job,
            from: g.int(),
            wait_secs: g.u32(),
        },
        5 => Request::Outputs {
            job,
            after: g.string(),
        },
        8 => Request::OutputBlock {
            job,
            name: g.string(),
            offset: g.int(),
            len: g.u32(),
        },
        6 => Request::NodeInfo,
        7 => Request::Resize {
            job,
            max_workers: g.u32(),
        },
        11 => Request::Revoke {
            revocations: g.vec(|g| serde_bytes::ByteBuf::from(g.string().into_bytes())),
        },
        _ => Request::Peers,
    }
}

fn owner_proof(g: &mut Gen) -> crate::protocol::OwnerProof {
    crate::protocol::OwnerProof {
        user: g.string(),
        nonce: g.bytes(),
        seq: g.int(),
        signature: g.bytes(),
    }
}

/// A user id (of one key: generating keys is not what is tested).
fn submit_proof(g: &mut Gen) -> crate::owner::SubmitProof {
    crate::owner::SubmitProof {
        nonce: g.bytes(),
        signature: g.bytes(),
        max_workers: g.u32(),
    }
}

fn origin(g: &mut Gen) -> crate::origin::JobOrigin {
    let mut nonce = [0u8; 16];
    for (b, x) in nonce.iter_mut().zip(g.bytes()) {
        *b = x;
    }
    crate::origin::JobOrigin {
        home: peer(g),
        nonce,
    }
}

fn user(_: &mut Gen) -> crate::owner::UserId {
    static USER: std::sync::OnceLock<crate::owner::UserId> = std::sync::OnceLock::new();
    *USER.get_or_init(|| crate::owner::UserKey::generate().id())
}

fn job_status(g: &mut Gen) -> JobStatus {
    JobStatus {
        job: g.int(),
        phase: job_phase(g),
        reason: g.string(),
        ranks: g.map(Gen::u32, rank_status),
        request: job_request(g),
        pending: g.option(|g| Pending {
            floods: g.u32(),
            radius: g.u8(),
            budget_ms: g.option(Gen::int),
            nodes_answered: g.int(),
            offers: g.int(),
            workers_offered: g.int(),
            declines: g.map(Gen::string, Gen::int),
            refusals: g.map(Gen::string, Gen::int),
            granted: g.u32(),
            needed: g.u32(),
            apart: g.u32(),
        }),
        submitted_unix: g.int(),
        home: g.option(Gen::string),
        moved_from: g.option(Gen::string),
        owner: g.option(Gen::string),
        tasks: g.option(|g| crate::protocol::TaskStatus {
            count: g.u32(),
            waiting: g.u32(),
            running: g.u32(),
            done: g.u32(),
            failed: g.u32(),
            failed_tasks: g.map(Gen::u32, rank_status),
            checked: g.u32(),
            checking: g.u32(),
            caught: g.vec(Gen::string),
        }),
    }
}

fn rank_status(g: &mut Gen) -> RankStatus {
    stored_rank(g).map_node(|n| {
        if g.below(2) == 0 {
            n.to_string()
        } else {
            g.string()
        }
    })
}

fn stored_peer(g: &mut Gen) -> crate::store::StoredPeer {
    crate::store::StoredPeer(peer(g))
}

/// A rank as a home's record holds it.
fn stored_rank(g: &mut Gen) -> RankStatus<crate::store::StoredPeer> {
    RankStatus {
        node: stored_peer(g),
        outcome: g.option(Gen::string),
        code: g.option(|g| {
            g.pick(&[
                OutcomeCode::Exited,
                OutcomeCode::Trapped,
                OutcomeCode::OutOfMemory,
                OutcomeCode::CpuLimit,
                OutcomeCode::TimeLimit,
                OutcomeCode::OutputLimit,
                OutcomeCode::DiskLimit,
                OutcomeCode::ProcessLimit,
                OutcomeCode::NotStarted,
                OutcomeCode::Cancelled,
                OutcomeCode::Lost,
                OutcomeCode::Stopped,
            ])
        }),
        exit_status: g.option(|g| g.int() as i32),
    }
}

fn response(g: &mut Gen) -> Response {
    match g.below(10) {
        0 => Response::Ok,
        1 => Response::Submitted { job: g.int() },
        2 => Response::Status(job_status(g)),
        3 => Response::Jobs(g.vec(job_status)),
        4 => Response::Logs(LogPage {
            chunks: g.vec(log_chunk),
            next: g.int(),
            ended: g.bool(),
        }),
        5 => match g.bool() {
            true => Response::Outputs(OutputPage {
                files: g.vec(|g| OutputEntry {
                    name: g.string(),
                    size: g.int(),
                }),
                more: g.bool(),
            }),
            false => Response::OutputBlock(OutputData {
                data: g.bytes(),
                size: g.int(),
            }),
        },
        6 => Response::NodeInfo(NodeInfo {
            peer: g.string(),
            listen: g.vec(Gen::string),
            cores: g.u32(),
            memory_mib: g.int(),
            disk_mib: g.int(),
            running: g.map(Gen::int, |g| g.vec(Gen::u32)),
            neighbours: g.int() as usize,
            messages_sent: g.int(),
            version: g.string(),
            network: g.string(),
            disk_problem: g.option(Gen::string),
            peers_measured: g.int() as usize,
            uptime_secs: g.int(),
            jobs: g.map(job_phase, Gen::int),
            grid: g.option(|g| crate::protocol::GridInfo {
                key: g.string(),
                fingerprint: g.string(),
                expires_unix: g.int(),
            }),
        }),
        7 => Response::Peers(g.vec(|g| PeerEntry {
            peer: g.string(),
            rtt_us: g.option(Gen::int),
            link: g.option(Gen::string),
            connected: g.bool(),
            addrs: g.vec(Gen::string),
        })),
        8 => Response::Welcome(Welcome {
            version: g.u32(),
            peer: g.string(),
            nonce: g.bytes(),
        }),
        _ => Response::Error {
            kind: g.pick(&[
                ErrorKind::BadRequest,
                ErrorKind::NotFound,
                ErrorKind::Version,
                ErrorKind::Unauthorized,
                ErrorKind::Busy,
                ErrorKind::Internal,
            ]),
            message: g.string(),
        },
    }
}

fn resources(g: &mut Gen) -> Resources {
    Resources::new(g.u32(), g.int(), g.int())
}

fn advert(g: &mut Gen) -> Advert<PeerId> {
    Advert {
        job: JobId(g.int()),
        home: peer(g),
        per_worker: resources(g),
        workers: WorkerCount {
            min: g.u32(),
            max: g.u32(),
        },
        strategy: g.pick(&[Strategy::Spread, Strategy::Concentrate]),
        expires_in: g.duration(),
        flood: FloodHeader {
            seq: g.u32(),
            ttl: g.u8(),
            latency_budget: g.option(Gen::duration),
            path_rtt: g.duration(),
        },
        owner: g.option(peer),
        kind: zorilla_core::advert::WorkKind::Wasm,
        priority: g.pick(&[i8::MIN, -1, 0, 1, i8::MAX]),
        preemptible: g.bool(),
    }
}

fn message(g: &mut Gen) -> Message<PeerId> {
    let job = JobId(g.int());
    match g.below(7) {
        0 => Message::Advert(advert(g)),
        1 => Message::Offer {
            hold: HoldId(g.u32()),
            job,
            workers: g.u32(),
            distance: g.duration(),
            residue: resources(g),
            machine: Machine {
                cores: g.u32(),
                busy: g.u32(),
                speed: g.u32(),
                reach: zorilla_core::resources::Reachability::Unknown,
            },
        },
        2 => Message::Decline {
            job,
            reason: g.pick(&[
                DeclineReason::Busy,
                DeclineReason::TooLarge,
                DeclineReason::TooManyJobs,
                DeclineReason::NoWorkersAllowed,
                DeclineReason::Denied,
            ]),
        },
        3 => Message::Withdraw {
            hold: HoldId(g.u32()),
            job,
            ranks: g.vec(Gen::u32),
        },
        4 => Message::Grant {
            hold: HoldId(g.u32()),
            job,
            ranks: g.vec(Gen::u32),
            incarnation: g.u32(),
            placement: g.map(Gen::u32, placed),
        },
        5 => Message::Placement {
            job,
            phase: g.pick(&[
                Phase::Scheduling,
                Phase::Running,
                Phase::Completed,
                Phase::Cancelled,
                Phase::Failed,
            ]),
            placement: g.map(Gen::u32, placed),
            replaced: g.vec(Gen::u32),
        },
        _ => Message::Refuse {
            job,
            hold: if g.below(2) == 0 {
                None
            } else {
                Some(HoldId(g.u32()))
            },
            reason: g.pick(&[
                RefuseReason::JobFull,
                RefuseReason::Cancelled,
                RefuseReason::Expired,
                RefuseReason::Failed,
                RefuseReason::NotChosen,
                RefuseReason::UnknownJob,
                RefuseReason::RolledBack,
            ]),
        },
    }
}

fn file_ref(g: &mut Gen) -> FileRef {
    FileRef {
        name: g.string(),
        sha256: g.string(),
        size: g.int(),
    }
}

fn job_info(g: &mut Gen) -> JobInfo {
    JobInfo {
        id: g.int(),
        home: peer(g),
        phase: job_phase(g),
        request: job_request(g),
        module: file_ref(g),
        inputs: g.vec(file_ref),
        ranks: g.map(Gen::u32, placed),
    }
}

fn placed(g: &mut Gen) -> Placed {
    Placed {
        node: peer(g),
        incarnation: g.u32(),
    }
}

fn job_record(g: &mut Gen) -> JobRecord {
    JobRecord {
        kept_run: None,
        id: g.int(),
        phase: job_phase(g),
        reason: g.string(),
        request: job_request(g),
        module: file_ref(g),
        inputs: g.vec(file_ref),
        ranks: g.map(Gen::u32, stored_rank),
        submitted_unix: g.int(),
        moved_from: g.option(stored_peer),
        moved_to: g.option(stored_peer),
        owner: g.option(user),
        owner_proof: g.option(submit_proof),
        origin: g.option(origin),
        tasks: None,
    }
}

fn peer_rpc(g: &mut Gen) -> PeerRpc {
    let job = g.int();
    match g.below(17) {
        0 => PeerRpc::Sched(SchedRpc::Message(message(g))),
        1 => PeerRpc::Member(MemberRpc::GetJob { job }),
        2 => PeerRpc::File(FileRpc::GetBlock {
            sha256: g.string(),
            offset: g.int(),
            len: g.u32(),
        }),
        3 => PeerRpc::Sched(SchedRpc::Grant {
            grant: message(g),
            copy: Box::new(JobCopy {
                request: job_request(g),
                module: file_ref(g),
                inputs: g.vec(file_ref),
                submitted_unix: g.int(),
                owner: g.option(user),
                owner_proof: g.option(submit_proof),
                origin: g.option(origin),
            }),
        }),
        4 | 5 => PeerRpc::Barrier(BarrierRpc {
            job,
            to: g.u32(),
            from: g.u32(),
            msg: match g.below(3) {
                0 => BarrierMsg::Enter { token: g.int() },
                1 => BarrierMsg::Withdraw { token: g.int() },
                _ => BarrierMsg::Release { token: g.int() },
            },
        }),
        6 => PeerRpc::Member(MemberRpc::Log {
            job,
            chunk: log_chunk(g),
        }),
        7 => PeerRpc::Member(MemberRpc::Output {
            job,
            name: g.string(),
            offset: g.int(),
            data: g.bytes(),
        }),
        8 => PeerRpc::Member(MemberRpc::WorkerEnded {
            job,
            digest: g
                .bool()
                .then(|| zorilla_core::runs::ResultDigest([g.u32() as u8; 32])),
            rank: g.u32(),
            incarnation: g.u32(),
            end: match g.u32() % 3 {
                0 => WorkerEnd::Exited(g.u32() as i32),
                1 => WorkerEnd::Failed(match g.below(8) {
                    0 => Failure::Trapped(g.string()),
                    1 => Failure::OutOfMemory { limit_mib: g.int() },
                    2 => Failure::CpuLimit {
                        limit: g.duration(),
                    },
                    3 => Failure::TimeLimit {
                        limit: g.duration(),
                    },
                    4 => Failure::OutputLimit { limit_mib: g.int() },
                    5 => Failure::DiskLimit { limit_mib: g.int() },
                    6 => Failure::ProcessLimit {
                        limit: g.int() as u32,
                    },
                    _ => Failure::NotStarted(g.string()),
                }),
                _ => WorkerEnd::Cancelled,
            },
        }),
        9 => PeerRpc::Ping,
        10 => PeerRpc::View(ViewRpc::Node),
        11 => PeerRpc::View(ViewRpc::Job { job: g.string() }),
        12 => PeerRpc::Checkpoint(checkpoint_rpc(g)),
        13 => PeerRpc::View(ViewRpc::Summary),
        14 => PeerRpc::Ranks(RanksRpc {
            jobs: g.map(Gen::int, |g| g.vec(Gen::u32)),
        }),
        15 => PeerRpc::Forward(ForwardRpc::WhereIs { job }),
        _ => PeerRpc::Sched(SchedRpc::Message(Message::Advert(advert(g)))),
    }
}

fn block_hash(g: &mut Gen) -> [u8; 32] {
    let mut hash = [0u8; 32];
    for chunk in hash.chunks_mut(8) {
        chunk.copy_from_slice(&g.u64().to_le_bytes());
    }
    hash
}

fn manifest(g: &mut Gen) -> Manifest {
    Manifest {
        seq: g.int(),
        generation: g.option(Gen::int),
        size: g.int(),
        blocks: g.vec(block_hash),
    }
}

fn checkpoint_rpc(g: &mut Gen) -> CheckpointRpc {
    let (job, rank) = (g.int(), g.u32());
    match g.below(7) {
        0 => CheckpointRpc::Put {
            job,
            home: peer(g),
            rank,
            seq: g.int(),
            data: g.bytes(),
        },
        1 => CheckpointRpc::Commit {
            job,
            rank,
            manifest: manifest(g),
            copies: g.vec(peer),
        },
        2 => CheckpointRpc::Stored {
            job,
            rank,
            seq: g.int(),
            generation: g.option(Gen::int),
            size: g.int(),
            holders: g.vec(peer),
        },
        3 => CheckpointRpc::Where { job, rank },
        4 => CheckpointRpc::Manifest {
            job,
            rank,
            seq: g.option(Gen::int),
            ticket: g.bytes(),
        },
        5 => CheckpointRpc::Get {
            job,
            rank,
            hash: block_hash(g),
            ticket: g.bytes(),
        },
        _ => CheckpointRpc::Drop { job },
    }
}

fn job_summary(g: &mut Gen) -> view::JobSummary {
    view::JobSummary {
        id: g.string(),
        name: g.string(),
        role: g.pick(&[view::Role::Home, view::Role::Participant]),
        phase: g.pick(&[
            view::Phase::Scheduling,
            view::Phase::Running,
            view::Phase::Completed,
            view::Phase::Cancelled,
            view::Phase::Failed,
        ]),
        workers_joined: g.u32(),
        workers_needed: g.u32(),
        home: g.string(),
        owner: g.option(Gen::string),
        strategy: g.string(),
        flood_radius: g.u8(),
        age_secs: g.int(),
        pending_reason: g.option(Gen::string),
    }
}

fn view_resources(g: &mut Gen) -> view::Resources {
    view::Resources {
        cores: g.u32(),
        memory_bytes: g.int(),
        disk_bytes: g.int(),
    }
}

fn snapshot(g: &mut Gen) -> view::Snapshot {
    view::Snapshot {
        overview: view::Overview {
            node_id: g.string(),
            name: g.string(),
            version: g.string(),
            uptime_secs: g.int(),
            network: g.string(),
            listen_addresses: g.vec(Gen::string),
            offered: view_resources(g),
            cpu_speed: g.u32(),
            problem: g.option(Gen::string),
            in_use: view_resources(g),
            workers_running: g.u32(),
            home_jobs: g.vec(Gen::string),
        },
        peers: g.vec(|g| view::Peer {
            peer_id: g.string(),
            name: g.option(Gen::string),
            rtt_ms: g.option(Gen::f64),
            link: g.pick(&[view::Link::Near, view::Link::Far, view::Link::None]),
            connected: g.bool(),
            coordinates: g.option(|g| g.vec(Gen::f64)),
        }),
        jobs: g.vec(job_summary),
        pending: g.vec(|g| view::Advert {
            job_id: g.string(),
            job_name: g.string(),
            home: g.string(),
            workers_wanted: g.u32(),
            expires_in_secs: g.int(),
        }),
        counters: view::Counters {
            floods_sent: g.int(),
            floods_forwarded: g.int(),
            messages_sent: g.int(),
            messages_received: g.int(),
            workers_started: g.int(),
        },
    }
}

fn peer_reply(g: &mut Gen) -> PeerReply {
    match g.below(9) {
        0 => PeerReply::Ack,
        6 => PeerReply::Checkpoint(match g.below(2) {
            0 => CheckpointReply::At(g.option(|g| Located {
                seq: g.int(),
                generation: g.option(Gen::int),
                size: g.int(),
                holders: g.vec(peer),
                ticket: g.bytes(),
            })),
            _ => CheckpointReply::Manifest(g.option(manifest)),
        }),
        5 => PeerReply::Granted { boot: g.int() },
        7 => PeerReply::Summary(Box::new(view::Summary {
            name: g.string(),
            site: g.option(Gen::string),
            offered_cores: g.u32(),
            used_cores: g.u32(),
            workers_running: g.u32(),
            jobs: g.vec(|g| view::SummaryJob {
                id: g.string(),
                name: g.string(),
                home: g.string(),
                ranks: g.u32(),
            }),
        })),
        1 => PeerReply::Job(Box::new(job_info(g))),
        2 => PeerReply::Block(g.bytes()),
        3 => PeerReply::Status(Box::new(snapshot(g))),
        4 => PeerReply::StatusJob(g.option(|g| {
            Box::new(view::JobDetail {
                summary: job_summary(g),
                workers: g.vec(|g| view::Worker {
                    node: g.string(),
                    index: g.u32(),
                    state: g.pick(&[
                        view::WorkerState::Starting,
                        view::WorkerState::Running,
                        view::WorkerState::Exited,
                        view::WorkerState::Failed,
                        view::WorkerState::Lost,
                    ]),
                    exit_code: g.option(|g| g.u32() as i32),
                    ended: g.option(Gen::string),
                }),
                log_tail: g.vec(|g| view::LogLine {
                    at_secs: g.f64(),
                    worker: g.option(Gen::u32),
                    text: g.string(),
                }),
            })
        })),
        _ => PeerReply::Refused(crate::wire::Refusal::new(
            match g.below(4) {
                0 => crate::wire::RefusalKind::Malformed,
                1 => crate::wire::RefusalKind::NotAllowed,
                2 => crate::wire::RefusalKind::NotHere,
                _ => crate::wire::RefusalKind::Unavailable,
            },
            g.string(),
        )),
    }
}

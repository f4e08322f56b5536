//! Checks of everything that reaches a node from outside, against the
//! documented maxima of [`zorilla_core::limits`]: a submitted job (request,
//! module, input names), and every message a peer sends over the overlay.
//!
//! One module, used at every door: the node's `submit` and `resize`, the
//! job spec files of the `zorilla` CLI (which so refuses before sending),
//! and the decoding of peer messages. What is refused gets one sentence
//! ([`Invalid`]'s `Display`), and the node keeps running.

use std::collections::BTreeSet;
use std::time::Duration;

use zorilla_core::advert::Message;
use zorilla_core::limits::{self, LimitError, MAX_WORKERS};
use zorilla_core::node::{Failure, SpecError, WorkerEnd};

use crate::protocol::{JobRequest, MAX_OUTPUT_BLOCK_BYTES, NamedFile, Request};
use crate::wire::checkpoint::CheckpointRpc;
use crate::wire::view::{self, MAX_TEXT_BYTES};
use crate::wire::{BLOCK_BYTES, JobCopy, JobInfo, MAX_ASKED_JOBS, PeerRpc};

/// Why something from outside was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// A value beyond its documented range.
    #[error(transparent)]
    OutOfRange(#[from] LimitError),
    /// The job's worker counts or lifetime do not make a job.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A worker needs at least one core and some memory.
    #[error("{field} is 0, but a worker needs at least 1 (it runs on a core, in memory)")]
    Zero {
        /// `cores` or `memory_mib`.
        field: &'static str,
    },
    /// A file name workers could not use.
    #[error("{what} name \"{name}\" is not usable: {why}")]
    BadName {
        /// "input file", "output file".
        what: &'static str,
        /// The name, escaped and shortened for printing.
        name: String,
        /// Why.
        why: &'static str,
    },
    /// Two inputs of one name.
    #[error("two input files are named \"{0}\": workers see inputs by file name only")]
    DuplicateInput(String),
    /// An argument with a NUL byte cannot be passed to a program.
    #[error("argument {0} contains a NUL byte, which no program can receive")]
    NulInArgument(usize),
    /// No module.
    #[error("the module is empty: a job needs a WebAssembly module")]
    EmptyModule,
    /// A grant sent without the job's copy.
    #[error("a grant travels with its job's copy, not as a bare scheduling message")]
    BareGrant,
    /// A job's copy sent with something else than a grant.
    #[error("a job's copy travels with a grant only")]
    CopyWithoutGrant,
    /// A client request another node may not pass on.
    #[error(
        "only a job's status, logs, outputs, cancelling, resizing and its owner's nonce are asked through another node"
    )]
    NotForwardable,
    /// A request no owner's proof is for.
    #[error("only a job's status, logs, outputs, cancelling and resizing are asked as its owner")]
    NotOwnersRequest,
}

/// A name as printed in a refusal: escaped, at most 64 characters.
fn printable(name: &str) -> String {
    let escaped: String = name.escape_debug().collect();
    if escaped.chars().count() > 64 {
        let short: String = escaped.chars().take(61).collect();
        format!("{short}...")
    } else {
        escaped
    }
}

/// Checks a job request: everything [`zorilla_core::node::JobSpec::validate`]
/// checks (worker counts, lifetime, resources), at least one core and one
/// MiB per worker, the wall time, and the arguments (count, total bytes,
/// no NUL).
pub fn request(request: &JobRequest) -> Result<(), Invalid> {
    let spec = request.spec();
    spec.check(MAX_WORKERS)?;
    if request.cores == 0 {
        return Err(Invalid::Zero { field: "cores" });
    }
    if request.memory_mib == 0 {
        return Err(Invalid::Zero {
            field: "memory_mib",
        });
    }
    limits::at_most(
        "wall_time_secs",
        request.wall_time_secs,
        limits::MAX_WALL_TIME.as_secs(),
    )?;
    // A CPU-time limit is bounded like a wall-clock one: no worker gets
    // more CPU time than it can have wall-clock time on one core.
    limits::at_most(
        "cpu_time_secs",
        request.cpu_time_secs,
        limits::MAX_WALL_TIME.as_secs(),
    )?;
    limits::at_most(
        "the number of arguments",
        request.args.len(),
        limits::MAX_ARGS,
    )?;
    let bytes = request
        .args
        .iter()
        .fold(0usize, |sum, arg| sum.saturating_add(arg.len()));
    limits::at_most(
        "the arguments' total size in bytes",
        bytes,
        limits::MAX_ARGS_BYTES,
    )?;
    if let Some(i) = request.args.iter().position(|arg| arg.contains('\0')) {
        return Err(Invalid::NulInArgument(i + 1));
    }
    Ok(())
}

/// The wall-time limit of a request's workers; `None` for the node's cap.
pub fn wall_time(request: &JobRequest) -> Option<Duration> {
    (request.wall_time_secs != 0)
        .then(|| Duration::from_secs(request.wall_time_secs).min(limits::MAX_WALL_TIME))
}

/// Checks one file name (of an input, or of an output under its rank): not
/// empty, not `.` or `..`, no `/` and no NUL, at most
/// [`limits::MAX_FILE_NAME_BYTES`] bytes.
pub fn file_name(what: &'static str, name: &str) -> Result<(), Invalid> {
    let why = if name.is_empty() {
        Some("it is empty")
    } else if name == "." || name == ".." {
        Some("it names a directory")
    } else if name.contains('/') {
        Some("it contains '/' (a file name, not a path)")
    } else if name.contains('\0') {
        Some("it contains a NUL byte")
    } else if name.len() > limits::MAX_FILE_NAME_BYTES {
        Some("it is longer than 255 bytes")
    } else {
        None
    };
    match why {
        Some(why) => Err(Invalid::BadName {
            what,
            name: printable(name),
            why,
        }),
        None => Ok(()),
    }
}

/// Checks the names of a job's inputs: each usable, none twice, at most
/// [`limits::MAX_INPUTS`].
pub fn input_names<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> Result<(), Invalid> {
    limits::at_most("the number of input files", names.len(), limits::MAX_INPUTS)?;
    let mut seen = BTreeSet::new();
    for name in names {
        file_name("input file", name)?;
        if !seen.insert(name) {
            return Err(Invalid::DuplicateInput(printable(name)));
        }
    }
    Ok(())
}

/// Checks a whole submission: request, module and inputs.
pub fn submission(
    request: JobRequest,
    module: Vec<u8>,
    inputs: Vec<NamedFile>,
) -> Result<Submission, Invalid> {
    self::request(&request)?;
    if module.is_empty() {
        return Err(Invalid::EmptyModule);
    }
    input_names(inputs.iter().map(|f| f.name.as_str()))?;
    Ok(Submission {
        request,
        module,
        inputs,
    })
}

/// A submission within the documented maxima: made only by
/// [`submission`], where a client's request comes in, and handed inward
/// as it is, so that nothing further in checks it again.
#[derive(Debug)]
pub struct Submission {
    request: JobRequest,
    module: Vec<u8>,
    inputs: Vec<NamedFile>,
}

impl Submission {
    /// The job's request.
    pub fn request(&self) -> &JobRequest {
        &self.request
    }

    /// The module's bytes.
    pub fn module(&self) -> &[u8] {
        &self.module
    }

    /// The request, the module and the inputs, given back.
    pub fn into_parts(self) -> (JobRequest, Vec<u8>, Vec<NamedFile>) {
        (self.request, self.module, self.inputs)
    }
}

/// Checks a client's request for outputs: a block of at most
/// [`MAX_OUTPUT_BLOCK_BYTES`], of a name (or after a name) of at most
/// [`jobfs::MAX_NAME_BYTES`] bytes.
///
/// [`MAX_OUTPUT_BLOCK_BYTES`]: crate::protocol::MAX_OUTPUT_BLOCK_BYTES
/// [`jobfs::MAX_NAME_BYTES`]: zorilla_sandbox::jobfs::MAX_NAME_BYTES
pub fn output_request(request: &Request) -> Result<(), Invalid> {
    use zorilla_sandbox::jobfs::MAX_NAME_BYTES;
    match request {
        Request::Outputs { after, .. } => {
            limits::at_most("after's length in bytes", after.len(), MAX_NAME_BYTES)?;
        }
        Request::OutputBlock { name, len, .. } => {
            limits::at_most(
                "the output name's length in bytes",
                name.len(),
                MAX_NAME_BYTES,
            )?;
            limits::at_most("len", *len, MAX_OUTPUT_BLOCK_BYTES)?;
        }
        _ => {}
    }
    Ok(())
}

/// Checks an owner's proof and the request it is for: a nonce of
/// [`crate::owner::NONCE_BYTES`], a signature of at most
/// [`zorilla_core::replica::MAX_SIGNATURE`] bytes, a user id of at most
/// [`MAX_USER_ID_BYTES`], and a request about a job that only its owner
/// makes ([`owners_request`]).
pub fn owner_request(
    proof: &crate::protocol::OwnerProof,
    request: &Request,
) -> Result<(), Invalid> {
    limits::at_most(
        "user id length in bytes",
        proof.user.len(),
        MAX_USER_ID_BYTES,
    )?;
    limits::at_most(
        "signature bytes",
        proof.signature.len(),
        zorilla_core::replica::MAX_SIGNATURE,
    )?;
    limits::at_most("nonce bytes", proof.nonce.len(), crate::owner::NONCE_BYTES)?;
    owners_request(request)
}

/// The longest user id accepted, in bytes (ids print in 52 characters).
pub const MAX_USER_ID_BYTES: usize = 128;

/// Checks that `request` is one a job's owner makes of its home: its
/// status, logs, outputs (within their bounds), cancelling or resizing.
pub fn owners_request(request: &Request) -> Result<(), Invalid> {
    match request {
        Request::Status { .. }
        | Request::Cancel { .. }
        | Request::Logs { .. }
        | Request::Resize { .. } => Ok(()),
        Request::Outputs { .. } | Request::OutputBlock { .. } => output_request(request),
        _ => Err(Invalid::NotOwnersRequest),
    }
}

/// The longest outcome a worker's end may report, in bytes: 2 KiB (a trap
/// and the start of its backtrace; the worker's node cuts longer ones), so
/// that the status of a job of [`MAX_WORKERS`] ranks stays within one
/// client frame.
pub const MAX_OUTCOME_BYTES: usize = 2 * 1024;

/// The longest job id a remote status view may name: 64 bytes (ids print
/// as 16 hex digits).
pub const MAX_JOB_NAME_BYTES: usize = 64;

/// Checks a message between a job's replicas: at most
/// [`replica::MAX_ENTRIES_PER_APPEND`] entries of at most [`MAX_WORKERS`]
/// ranks each, at most [`replica::MAX_COPIES`] copies, indices within
/// [`replica::MAX_LOG`], and every event's ranks and words within their
/// maxima.
fn replica_msg(msg: &crate::wire::ReplicaMsg) -> Result<(), Invalid> {
    use zorilla_core::node::{EndReason, JobEntry, JobEvent, RankOutcome};
    use zorilla_core::replica::{self, Msg};
    let index = |field: &'static str, i: u64| limits::at_most(field, i, replica::MAX_LOG);
    let outcome = |o: &RankOutcome| match o {
        RankOutcome::Failed(Failure::Trapped(why) | Failure::NotStarted(why)) => {
            limits::at_most("outcome length in bytes", why.len(), MAX_OUTCOME_BYTES)
        }
        _ => Ok(()),
    };
    let signature = |sig: &replica::Signature| {
        limits::at_most("signature bytes", sig.0.len(), replica::MAX_SIGNATURE)
    };
    let mandate = |m: &Option<replica::Mandate<_>>| -> Result<(), Invalid> {
        if let Some(m) = m {
            limits::at_most("votes", m.votes.len(), replica::MAX_COPIES)?;
            for (vote, sig) in m.votes.values() {
                signature(sig)?;
                if let replica::Vote::Stood { len, .. } = vote {
                    index("voter's log length", *len)?;
                }
            }
        }
        Ok(())
    };
    match msg {
        Msg::Append {
            after,
            entries,
            copies,
            end,
            mandate: m,
            ..
        } => {
            mandate(m)?;
            index("append index", *after)?;
            index("log end", *end)?;
            limits::at_most("entries", entries.len(), replica::MAX_ENTRIES_PER_APPEND)?;
            if let Some(copies) = copies {
                limits::at_most("copies", copies.len(), replica::MAX_COPIES)?;
            }
            for (_, entry) in entries {
                match entry {
                    JobEntry::Submitted { spec, .. } => {
                        limits::at_most("workers", spec.workers.max, MAX_WORKERS)?;
                    }
                    JobEntry::Event(event) => match event {
                        JobEvent::Granted {
                            ranks, replaced, ..
                        } => placement(ranks.iter(), replaced)?,
                        JobEvent::WorkersLost { ranks, .. } => placement(ranks.iter(), &[])?,
                        JobEvent::RankEnded {
                            rank: r,
                            outcome: o,
                            ..
                        } => {
                            rank("rank", *r)?;
                            outcome(o)?;
                        }
                        JobEvent::Ended { reason, .. } => match reason {
                            EndReason::Expired { why } => limits::at_most(
                                "reason length in bytes",
                                why.len(),
                                MAX_OUTCOME_BYTES,
                            )?,
                            EndReason::RankFailed { outcome: o, .. } => outcome(o)?,
                            EndReason::WorkersLost { ranks, .. } => placement(ranks.iter(), &[])?,
                            EndReason::Stalled { waiting, replaced } => {
                                placement(waiting.iter(), replaced)?
                            }
                            EndReason::Completed { .. } | EndReason::Cancelled => {}
                        },
                        JobEvent::Checkpointed {
                            rank: r,
                            checkpoint,
                            ..
                        } => {
                            rank("checkpoint rank", *r)?;
                            limits::at_most(
                                "checkpoint holders",
                                checkpoint.holders.len(),
                                zorilla_core::checkpoint::MAX_REPLICAS,
                            )?;
                            generation(checkpoint.generation)?;
                        }
                        JobEvent::RolledBack { stopped, .. } => placement(stopped.iter(), &[])?,
                        JobEvent::Rejected { .. }
                        | JobEvent::Started { .. }
                        | JobEvent::Full { .. } => {}
                    },
                }
            }
        }
        Msg::Ack { index: i, .. } => index("acknowledged index", *i)?,
        Msg::Standing { len, sig, .. } => {
            index("log length", *len)?;
            signature(sig)?;
        }
        Msg::Alive { mandate: m, .. } => mandate(m)?,
        Msg::Absent { sig, .. } => signature(sig)?,
    }
    Ok(())
}

/// Checks a checkpoint's generation against
/// [`zorilla_core::checkpoint::MAX_GENERATION`].
fn generation(generation: Option<u64>) -> Result<(), Invalid> {
    if let Some(g) = generation {
        limits::at_most(
            "checkpoint generation",
            g,
            zorilla_core::checkpoint::MAX_GENERATION,
        )?;
    }
    Ok(())
}

/// Checks that `rank` is a rank some job can have.
fn rank(field: &'static str, rank: u32) -> Result<(), Invalid> {
    Ok(limits::at_most(field, rank, MAX_WORKERS - 1)?)
}

/// Checks a placement: at most [`MAX_WORKERS`] ranks, each below it.
fn placement<'a>(
    ranks: impl ExactSizeIterator<Item = &'a u32>,
    replaced: &[u32],
) -> Result<(), Invalid> {
    limits::at_most(
        "the number of placed ranks",
        ranks.len(),
        MAX_WORKERS as usize,
    )?;
    for r in ranks {
        rank("rank", *r)?;
    }
    limits::at_most(
        "the number of replaced ranks",
        replaced.len(),
        MAX_WORKERS as usize,
    )?;
    for r in replaced {
        rank("replaced rank", *r)?;
    }
    Ok(())
}

/// Checks a request from a peer, once decoded: every count, rank, size and
/// duration within the documented maxima. A peer whose request fails is
/// answered with the sentence and counted as misbehaving.
pub(crate) fn peer_rpc(rpc: &PeerRpc) -> Result<(), Invalid> {
    match rpc {
        PeerRpc::Sched(Message::Grant { .. }) => return Err(Invalid::BareGrant),
        PeerRpc::Sched(msg) => limits::check_message(msg)?,
        PeerRpc::Grant { grant, copy } => {
            if !matches!(grant, Message::Grant { .. }) {
                return Err(Invalid::CopyWithoutGrant);
            }
            limits::check_message(grant)?;
            job_copy(copy)?;
        }
        PeerRpc::GetJob { .. } | PeerRpc::Ping | PeerRpc::Status | PeerRpc::Summary => {}
        PeerRpc::GetBlock { sha256, len, .. } => {
            if !zorilla_sandbox::jobfs::is_sha256_hex(sha256) {
                return Err(Invalid::BadName {
                    what: "file hash",
                    name: printable(sha256),
                    why: "a SHA-256 is 64 hex digits, in lowercase",
                });
            }
            limits::at_most("block length", *len as usize, BLOCK_BYTES)?;
        }
        PeerRpc::Barrier { from, to, .. } => {
            rank("sending rank", *from)?;
            rank("receiving rank", *to)?;
        }
        PeerRpc::Ranks { jobs } => {
            limits::at_most("jobs asked about", jobs.len(), MAX_ASKED_JOBS)?;
            for ranks in jobs.values() {
                limits::at_most("ranks of one job", ranks.len(), MAX_WORKERS as usize)?;
                for r in ranks {
                    rank("rank", *r)?;
                }
            }
        }
        PeerRpc::Log { chunk, .. } => {
            rank("rank", chunk.rank)?;
            limits::at_most("log chunk size in bytes", chunk.data.len(), BLOCK_BYTES)?;
        }
        PeerRpc::Output {
            name, offset, data, ..
        } => {
            // "<rank>/<path>", as the worker's node names outputs (a path
            // below the rank's outputs directory, subdirectories included).
            let (r, file) = name.split_once('/').unwrap_or(("", name));
            match r.parse::<u32>() {
                Ok(r) => rank("output rank", r)?,
                Err(_) => {
                    return Err(Invalid::BadName {
                        what: "output file",
                        name: printable(name),
                        why: "it is not <rank>/<path>",
                    });
                }
            }
            if zorilla_sandbox::jobfs::check_relative(file).is_err() {
                return Err(Invalid::BadName {
                    what: "output file",
                    name: printable(name),
                    why: "it is not a plain relative path (no '..', no leading '/', no NUL)",
                });
            }
            limits::at_most("output block size in bytes", data.len(), BLOCK_BYTES)?;
            if offset.checked_add(data.len() as u64).is_none() {
                return Err(Invalid::OutOfRange(LimitError {
                    field: "output offset".into(),
                    value: offset.to_string(),
                    range: "such that offset plus length fits 64 bits".into(),
                }));
            }
        }
        PeerRpc::WorkerEnded { rank: r, end, .. } => {
            rank("rank", *r)?;
            if let WorkerEnd::Failed(Failure::Trapped(why) | Failure::NotStarted(why)) = end {
                limits::at_most("outcome length in bytes", why.len(), MAX_OUTCOME_BYTES)?;
            }
        }
        PeerRpc::StatusJob { job } => {
            limits::at_most("job name length in bytes", job.len(), MAX_JOB_NAME_BYTES)?;
        }
        PeerRpc::Checkpoint(rpc) => checkpoint_rpc(rpc)?,
        PeerRpc::WhereIs { .. } => {}
        PeerRpc::Client(request) => match request.as_ref() {
            crate::protocol::Request::Challenge { .. } => {}
            crate::protocol::Request::Owner { proof, request } => owner_request(proof, request)?,
            request => owners_request(request).map_err(|_| Invalid::NotForwardable)?,
        },
        PeerRpc::Replica { msg, copy, .. } => {
            replica_msg(msg)?;
            if let Some(copy) = copy {
                job_copy(copy)?;
            }
        }
    }
    Ok(())
}

/// Checks a request about checkpoints: ranks of a job, blocks, manifests
/// and holder lists within [`crate::store::checkpoints`]' maxima.
fn checkpoint_rpc(rpc: &CheckpointRpc) -> Result<(), Invalid> {
    use crate::store::checkpoints::{MAX_BLOCK_BYTES, MAX_BLOCKS, MAX_CHECKPOINT_BYTES};
    match rpc {
        CheckpointRpc::Put { rank: r, data, .. } => {
            rank("checkpoint rank", *r)?;
            limits::at_most(
                "checkpoint block size in bytes",
                data.len(),
                MAX_BLOCK_BYTES,
            )?;
        }
        CheckpointRpc::Commit {
            rank: r,
            manifest,
            copies,
            ..
        } => {
            rank("checkpoint rank", *r)?;
            limits::at_most(
                "job copies",
                copies.len(),
                zorilla_core::replica::MAX_COPIES,
            )?;
            limits::at_most("checkpoint blocks", manifest.blocks.len(), MAX_BLOCKS)?;
            limits::at_most(
                "checkpoint size in bytes",
                manifest.size,
                MAX_CHECKPOINT_BYTES,
            )?;
            generation(manifest.generation)?;
        }
        CheckpointRpc::Stored {
            rank: r,
            size,
            holders,
            generation: g,
            ..
        } => {
            generation(*g)?;
            rank("checkpoint rank", *r)?;
            limits::at_most("checkpoint size in bytes", *size, MAX_CHECKPOINT_BYTES)?;
            limits::at_most(
                "checkpoint holders",
                holders.len(),
                zorilla_core::checkpoint::MAX_REPLICAS,
            )?;
        }
        CheckpointRpc::Manifest {
            rank: r, ticket, ..
        }
        | CheckpointRpc::Get {
            rank: r, ticket, ..
        } => {
            rank("checkpoint rank", *r)?;
            limits::at_most(
                "ticket bytes",
                ticket.len(),
                zorilla_core::replica::MAX_SIGNATURE,
            )?;
        }
        CheckpointRpc::Where { rank: r, .. } => rank("checkpoint rank", *r)?,
        CheckpointRpc::Drop { .. } => {}
    }
    Ok(())
}

/// Checks that a text of a remote view is at most [`MAX_TEXT_BYTES`].
fn text(field: &'static str, text: &str) -> Result<(), Invalid> {
    Ok(limits::at_most(field, text.len(), MAX_TEXT_BYTES)?)
}

/// Checks a peer's answer to [`PeerRpc::Status`] before it is shown:
/// every list and text within the maxima of [`view`].
pub(crate) fn remote_view(snapshot: &view::Snapshot) -> Result<(), Invalid> {
    let o = &snapshot.overview;
    for (field, value) in [
        ("node id length in bytes", &o.node_id),
        ("node name length in bytes", &o.name),
        ("version length in bytes", &o.version),
        ("network name length in bytes", &o.network),
    ] {
        text(field, value)?;
    }
    text(
        "problem length in bytes",
        o.problem.as_deref().unwrap_or(""),
    )?;
    limits::at_most(
        "listen addresses",
        o.listen_addresses.len(),
        view::MAX_LISTEN_ADDRESSES,
    )?;
    for a in &o.listen_addresses {
        text("listen address length in bytes", a)?;
    }
    limits::one_to("CPU speed", o.cpu_speed, limits::MAX_SPEED)?;
    limits::at_most("home jobs", o.home_jobs.len(), view::MAX_JOBS)?;
    for j in &o.home_jobs {
        text("job id length in bytes", j)?;
    }
    limits::at_most("peers", snapshot.peers.len(), view::MAX_PEERS)?;
    for p in &snapshot.peers {
        text("peer id length in bytes", &p.peer_id)?;
        text("peer name length in bytes", p.name.as_deref().unwrap_or(""))?;
        let coordinates = p.coordinates.as_ref().map_or(0, Vec::len);
        limits::at_most("peer coordinates", coordinates, view::MAX_COORDINATES)?;
    }
    limits::at_most("jobs", snapshot.jobs.len(), view::MAX_JOBS)?;
    for j in &snapshot.jobs {
        job_summary(j)?;
    }
    limits::at_most("pending adverts", snapshot.pending.len(), view::MAX_PENDING)?;
    for a in &snapshot.pending {
        text("job id length in bytes", &a.job_id)?;
        text("job name length in bytes", &a.job_name)?;
        text("home id length in bytes", &a.home)?;
    }
    Ok(())
}

fn job_summary(j: &view::JobSummary) -> Result<(), Invalid> {
    text("job id length in bytes", &j.id)?;
    text("job name length in bytes", &j.name)?;
    text("home id length in bytes", &j.home)?;
    text("owner id length in bytes", j.owner.as_deref().unwrap_or(""))?;
    text("strategy length in bytes", &j.strategy)?;
    text(
        "pending reason length in bytes",
        j.pending_reason.as_deref().unwrap_or(""),
    )
}

/// Checks a peer's answer to [`PeerRpc::StatusJob`] before it is shown:
/// every list and text within the maxima of [`view`].
pub(crate) fn remote_job(job: &view::JobDetail) -> Result<(), Invalid> {
    job_summary(&job.summary)?;
    limits::at_most("workers", job.workers.len(), view::MAX_WORKERS)?;
    for w in &job.workers {
        text("worker node length in bytes", &w.node)?;
        text(
            "worker end length in bytes",
            w.ended.as_deref().unwrap_or(""),
        )?;
    }
    limits::at_most("log lines", job.log_tail.len(), view::MAX_LOG_LINES)?;
    for l in &job.log_tail {
        text("log line length in bytes", &l.text)?;
    }
    Ok(())
}

/// Checks a peer's answer to [`PeerRpc::Summary`] before it is shown:
/// every list and text within the maxima of [`view::Summary`], and no more
/// cores in use than offered.
pub(crate) fn summary(s: &view::Summary) -> Result<(), Invalid> {
    let short = |field: &'static str, text: &str| {
        limits::at_most(field, text.len(), view::MAX_SUMMARY_TEXT_BYTES)
    };
    let id = |field: &'static str, text: &str| {
        limits::at_most(field, text.len(), view::MAX_SUMMARY_ID_BYTES)
    };
    short("node name length in bytes", &s.name)?;
    short("site length in bytes", s.site.as_deref().unwrap_or(""))?;
    limits::at_most(
        "cores in use",
        s.used_cores as usize,
        s.offered_cores as usize,
    )?;
    limits::at_most("jobs", s.jobs.len(), view::MAX_SUMMARY_JOBS)?;
    for j in &s.jobs {
        id("job id length in bytes", &j.id)?;
        short("job name length in bytes", &j.name)?;
        id("home id length in bytes", &j.home)?;
        limits::at_most("workers of a job", j.ranks as usize, view::MAX_WORKERS)?;
    }
    Ok(())
}

/// Checks a job's state as its home sent it: the request, the input names
/// and the placement, as the home itself checked them.
pub(crate) fn job_info(info: &JobInfo) -> Result<(), Invalid> {
    request(&info.request)?;
    input_names(info.inputs.iter().map(|f| f.name.as_str()))?;
    placement(info.ranks.keys(), &[])
}

/// Checks a job's copy as its home sent it with a grant: the request and
/// the input names, as the home itself checked them.
pub(crate) fn job_copy(copy: &JobCopy) -> Result<(), Invalid> {
    request(&copy.request)?;
    input_names(copy.inputs.iter().map(|f| f.name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(request: JobRequest) -> String {
        self::request(&request).unwrap_err().to_string()
    }

    #[test]
    fn every_request_that_cannot_work_is_refused_with_a_sentence() {
        let ok = JobRequest::default();
        assert_eq!(request(&ok), Ok(()));
        let cases: Vec<(JobRequest, &str)> = vec![
            (
                JobRequest {
                    lifetime_secs: u64::MAX,
                    ..ok.clone()
                },
                "lifetime is",
            ),
            (
                JobRequest {
                    lifetime_secs: u64::MAX - 1,
                    ..ok.clone()
                },
                "lifetime is",
            ),
            (
                JobRequest {
                    lifetime_secs: 0,
                    ..ok.clone()
                },
                "lifetime must be more than zero",
            ),
            (
                JobRequest {
                    min_workers: 0,
                    ..ok.clone()
                },
                "at least one worker",
            ),
            (
                JobRequest {
                    min_workers: 3,
                    max_workers: 2,
                    ..ok.clone()
                },
                "min workers (3)",
            ),
            (
                JobRequest {
                    max_workers: MAX_WORKERS + 1,
                    ..ok.clone()
                },
                "at most 10000 per job",
            ),
            (
                JobRequest {
                    cores: 0,
                    ..ok.clone()
                },
                "cores is 0",
            ),
            (
                JobRequest {
                    cores: u32::MAX,
                    ..ok.clone()
                },
                "cores is 4294967295",
            ),
            (
                JobRequest {
                    memory_mib: 0,
                    ..ok.clone()
                },
                "memory_mib is 0",
            ),
            (
                JobRequest {
                    memory_mib: u64::MAX,
                    ..ok.clone()
                },
                "memory_mib is",
            ),
            (
                JobRequest {
                    disk_mib: u64::MAX,
                    ..ok.clone()
                },
                "disk_mib is",
            ),
            (
                JobRequest {
                    wall_time_secs: u64::MAX,
                    ..ok.clone()
                },
                "wall_time_secs is",
            ),
            (
                JobRequest {
                    cpu_time_secs: u64::MAX,
                    ..ok.clone()
                },
                "cpu_time_secs is",
            ),
            (
                JobRequest {
                    args: vec!["x".into(); 257],
                    ..ok.clone()
                },
                "number of arguments",
            ),
            (
                JobRequest {
                    args: vec!["x".repeat(1 << 20)],
                    ..ok.clone()
                },
                "total size",
            ),
            (
                JobRequest {
                    args: vec!["a".into(), "b\0".into()],
                    ..ok.clone()
                },
                "argument 2",
            ),
        ];
        for (request, expected) in cases {
            let sentence = refused(request);
            assert!(
                sentence.contains(expected),
                "{sentence:?} lacks {expected:?}"
            );
            assert!(
                !sentence.contains('\n') && !sentence.contains("{ "),
                "{sentence}"
            );
        }
    }

    #[test]
    fn unusable_input_names_are_refused() {
        let long = "n".repeat(256);
        for (name, why) in [
            ("", "empty"),
            (".", "directory"),
            ("..", "directory"),
            ("a/b", "'/'"),
            ("a\0b", "NUL"),
            (long.as_str(), "255 bytes"),
        ] {
            let err = input_names([name].into_iter()).unwrap_err().to_string();
            assert!(err.contains(why), "{name:?}: {err}");
        }
        assert_eq!(input_names(["n".repeat(255).as_str()].into_iter()), Ok(()));
        let err = input_names(["a", "a"].into_iter()).unwrap_err().to_string();
        assert!(err.contains("two input files"), "{err}");
        let many: Vec<String> = (0..=limits::MAX_INPUTS).map(|i| i.to_string()).collect();
        let err = input_names(many.iter().map(String::as_str)).unwrap_err();
        assert!(err.to_string().contains("number of input files"), "{err}");
        let err = submission(JobRequest::default(), Vec::new(), Vec::new()).unwrap_err();
        assert_eq!(err, Invalid::EmptyModule);
    }

    #[test]
    fn a_grid_summary_beyond_its_maxima_is_refused() {
        let job = |ranks: u32| view::SummaryJob {
            id: "0123456789abcdef".into(),
            name: "nqueens 16".into(),
            home: "12D3KooWHome".into(),
            ranks,
        };
        let ok = view::Summary {
            name: "n".repeat(view::MAX_SUMMARY_TEXT_BYTES),
            site: Some("amsterdam".into()),
            offered_cores: 4,
            used_cores: 4,
            workers_running: 4,
            jobs: vec![job(4); view::MAX_SUMMARY_JOBS],
        };
        assert_eq!(summary(&ok), Ok(()));
        // At its maxima, a summary is a small answer.
        assert!(crate::wire::encode(&ok).len() < 32 * 1024);
        let bad = [
            view::Summary {
                name: "n".repeat(view::MAX_SUMMARY_TEXT_BYTES + 1),
                ..ok.clone()
            },
            view::Summary {
                site: Some("s".repeat(view::MAX_SUMMARY_TEXT_BYTES + 1)),
                ..ok.clone()
            },
            view::Summary {
                used_cores: 5,
                ..ok.clone()
            },
            view::Summary {
                jobs: vec![job(1); view::MAX_SUMMARY_JOBS + 1],
                ..ok.clone()
            },
            view::Summary {
                jobs: vec![job(view::MAX_WORKERS as u32 + 1)],
                ..ok.clone()
            },
            view::Summary {
                jobs: vec![view::SummaryJob {
                    id: "i".repeat(view::MAX_SUMMARY_ID_BYTES + 1),
                    ..job(1)
                }],
                ..ok.clone()
            },
        ];
        for s in bad {
            assert!(summary(&s).is_err(), "{s:?}");
        }
    }
}

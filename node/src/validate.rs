//! Checks of what reaches a node from outside, against the documented
//! maxima of [`zorilla_core::limits`]: a submitted job (request, module,
//! input names), the client requests an owner or another node may make,
//! and the pieces every peer request is checked with (ranks, placements,
//! names). Each concern of the peer protocol checks its own requests with
//! them, in its file of `crate::wire`.
//!
//! Used at every door: the node's `submit` and `resize`, the job spec files
//! of the `zorilla` CLI (which so refuses before sending), and the decoding
//! of peer messages. What is refused gets one sentence ([`Invalid`]'s
//! `Display`), and the node keeps running.

use std::collections::BTreeSet;
use std::time::Duration;

use zorilla_core::advert::WorkKind;
use zorilla_core::limits::{self, LimitError, MAX_WORKERS};
use zorilla_core::node::SpecError;

use crate::protocol::{JobRequest, MAX_OUTPUT_BLOCK_BYTES, NamedFile, Request, Tasks};

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
    /// A native job whose module is not an executable of its architecture.
    #[error("the job is native for {arch}, but its module is not such an executable: {reason}")]
    NotNative {
        /// The architecture the job names.
        arch: zorilla_core::advert::Arch,
        /// What the module is instead.
        reason: String,
    },
    /// A WebAssembly job whose module is a native executable.
    #[error(
        "the module is a native executable: submit it as a native job (`zorilla submit --native`), \
         which runs only on nodes whose owners allow your native jobs"
    )]
    NativeAsWasm,
    /// A deterministic job that is native.
    #[error(
        "a native job cannot be deterministic: only WebAssembly workers compute the same bits \
         on every machine"
    )]
    DeterministicNative,
    /// A deterministic job whose size may change.
    #[error(
        "a deterministic job must have a fixed size (min_workers = max_workers, here {min} and \
         {max}): when a job grows depends on the grid, not on its inputs"
    )]
    DeterministicMalleable {
        /// The least workers asked for.
        min: u32,
        /// The most.
        max: u32,
    },
    /// A job that runs more than once, not deterministic.
    #[error(
        "a job that runs {0} times (replicas) must be deterministic (\"deterministic\": SEED, \
         --deterministic): runs that read the clock or fresh random bytes would never agree"
    )]
    ReplicasNotDeterministic(u8),
    /// A job that runs more than once whose size may change, or an array.
    #[error(
        "a job that runs {0} times (replicas) must be of a fixed size (min_workers = \
         max_workers: every run the same), or a job array"
    )]
    ReplicasShape(u8),
    /// A spot-checked job array that is not deterministic.
    #[error(
        "a job array with spot checks must be deterministic (\"deterministic\": SEED, \
         --deterministic): a task run twice that reads the clock or fresh random bytes would \
         never agree with itself"
    )]
    SpotChecksNotDeterministic,
    /// A job array's task arguments file that cannot serve its tasks.
    #[error("the task arguments file cannot be used: {0}")]
    TaskArgs(String),
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
pub(crate) fn printable(name: &str) -> String {
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
    limits::one_to("replicas", request.replicas, zorilla_core::runs::MAX_RUNS)?;
    if request.replicas > 1 {
        if request.deterministic.is_none() {
            return Err(Invalid::ReplicasNotDeterministic(request.replicas));
        }
        if request.tasks.is_none() && request.max_workers != request.min_workers {
            return Err(Invalid::ReplicasShape(request.replicas));
        }
    }
    if request.spot_checks() > 0 && request.deterministic.is_none() {
        return Err(Invalid::SpotChecksNotDeterministic);
    }
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
    if let Some(file) = request.tasks.as_ref().and_then(|t| t.args_file.as_ref()) {
        file_name("task arguments file", file)?;
    }
    if request.deterministic.is_some() {
        if !request.kind.is_wasm() {
            return Err(Invalid::DeterministicNative);
        }
        // An array's tasks are each a world of one: their size is fixed.
        if request.min_workers != request.max_workers && request.tasks.is_none() {
            return Err(Invalid::DeterministicMalleable {
                min: request.min_workers,
                max: request.max_workers,
            });
        }
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

/// Checks a job array's task arguments file: one of `inputs`, UTF-8, with
/// a line for every task.
pub fn task_args(tasks: &Tasks, inputs: &[NamedFile]) -> Result<(), Invalid> {
    let Some(name) = &tasks.args_file else {
        return Ok(());
    };
    let file = inputs
        .iter()
        .find(|f| f.name == *name)
        .ok_or_else(|| Invalid::TaskArgs("it is not one of the job's inputs".into()))?;
    let text = std::str::from_utf8(&file.data)
        .map_err(|_| Invalid::TaskArgs("it is not UTF-8 text".into()))?;
    let lines = text.lines().count();
    if lines < tasks.count as usize {
        return Err(Invalid::TaskArgs(format!(
            "it has {lines} lines, but the job has {} tasks (a line each)",
            tasks.count
        )));
    }
    if text.contains('\0') {
        return Err(Invalid::TaskArgs(
            "it contains a NUL byte, which no program can receive".into(),
        ));
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
    match request.kind {
        WorkKind::Wasm if crate::native::looks_native(&module) => {
            return Err(Invalid::NativeAsWasm);
        }
        WorkKind::Wasm => {}
        WorkKind::Native(arch) => match crate::native::executable_arch(&module) {
            Ok(built) if built == arch => {}
            Ok(built) => {
                let reason = format!("it is built for {built}");
                return Err(Invalid::NotNative { arch, reason });
            }
            Err(reason) => return Err(Invalid::NotNative { arch, reason }),
        },
    }
    input_names(inputs.iter().map(|f| f.name.as_str()))?;
    if let Some(tasks) = &request.tasks {
        task_args(tasks, &inputs)?;
    }
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

/// Checks a checkpoint's generation against
/// [`zorilla_core::checkpoint::MAX_GENERATION`].
pub(crate) fn generation(generation: Option<u64>) -> Result<(), Invalid> {
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
pub(crate) fn rank(field: &'static str, rank: u32) -> Result<(), Invalid> {
    Ok(limits::at_most(field, rank, MAX_WORKERS - 1)?)
}

/// Checks a placement: at most [`MAX_WORKERS`] ranks, each below it.
pub(crate) fn placement<'a>(
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
}

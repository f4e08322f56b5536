//! A job's files on a worker node: the job's copy from its home, its
//! module and inputs fetched in hash-checked blocks (from the home or
//! another node of the job), each rank's view of its inputs, and the
//! checks of names and hashes that come from peers before they touch the
//! disk.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use zorilla_core::advert::{JobId, WorkKind};
use zorilla_overlay::PeerId;
use zorilla_sandbox::{Execution, Program, Sandbox, jobfs};

use super::{Node, random_below, random_u64};
use crate::net::Net;
use crate::store::FileRef;
use crate::wire::files::{BLOCK_BYTES, FileRpc, MAX_FILE_BYTES};
use crate::wire::job_copy::{JobCopy, Placed};
use crate::wire::{PeerReply, PeerRpc, RefusalKind};

/// Why a name or hash from a peer is refused before it touches the disk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FileNameError {
    /// Not 64 lowercase hex digits (the text, cut to 80 characters).
    #[error("{0:?} is not a file hash (64 lowercase hex digits)")]
    NotAHash(String),
    /// A job file larger than [`MAX_FILE_BYTES`].
    #[error("{name:?} has {size} bytes, more than the {max} a job file may have", max = MAX_FILE_BYTES)]
    TooLarge { name: String, size: u64 },
    /// An input name that is not one plain file name.
    #[error("bad input file name {name:?}: {why}")]
    BadInputName { name: String, why: String },
    /// Two inputs of one name.
    #[error("input file {0:?} appears twice")]
    InputTwice(String),
    /// An output name that could leave its directory.
    #[error("output name {name:?} refused: {why}")]
    BadOutputName { name: String, why: String },
    /// An output name that is not `rank/path` for a rank of the sender.
    #[error("output name {0:?} refused: not rank/file for a rank of the sender")]
    NotSendersRank(String),
}

/// Why a job's workers cannot start on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PrepareError {
    /// This node has no copy of the job to start.
    #[error("job {0} is not under way here")]
    NotUnderWay(JobId),
    /// The grant carried no copy of the job.
    #[error("the grant came without the job's copy")]
    NoCopy,
    /// The job's copy names a file this node refuses.
    #[error("the home sent a job this node refuses: {0}")]
    Refused(FileNameError),
    /// No source gave a file.
    #[error("cannot fetch {name}: {why}")]
    Fetch { name: String, why: String },
    /// A fetched file's bytes are not its hash's.
    #[error("{0} does not match its hash")]
    HashMismatch(String),
    /// The sandbox does not load the module.
    #[error("module refused: {0}")]
    Module(String),
    /// The copy's owner is not the advert's, or did not sign the job.
    #[error("{0}")]
    Owner(String),
    /// This node's disk or a task failed.
    #[error("{0}")]
    Local(String),
}

fn local(e: impl std::fmt::Display) -> PrepareError {
    PrepareError::Local(e.to_string())
}

/// What a member runs of a job: a WebAssembly module loaded by the
/// sandbox, or a native executable, checked and kept in the job's
/// directory.
pub(crate) enum Runnable {
    /// A WebAssembly module.
    Wasm(Program),
    /// A native executable's bytes, checked to be one for this machine
    /// (each worker gets its own copy in its job directory).
    Native(std::sync::Arc<Vec<u8>>),
}

/// Gets the job's module and inputs (from the local file cache or in
/// blocks from the home or another node of the job, hash-checked), and
/// loads the module (or checks the native executable: ELF, for this
/// machine's architecture, as the job says). The copy came with the
/// grant; it is checked here before it names anything on disk.
pub(super) async fn prepare(
    net: Net,
    sandbox: Sandbox,
    home: PeerId,
    copy: JobCopy,
    placement: &BTreeMap<u32, Placed>,
    dir: PathBuf,
    files: PathBuf,
) -> Result<(JobCopy, Runnable, PathBuf), PrepareError> {
    check_job_copy(&copy).map_err(PrepareError::Refused)?;
    tokio::fs::create_dir_all(&files).await.map_err(local)?;
    // Files come from the home or from another node of the job that has
    // them already, in random order, so that a job starting on many nodes
    // does not have them all fetch from the home.
    let mut sources: Vec<PeerId> = placement
        .values()
        .map(|p| p.node)
        .filter(|p| *p != net.me && *p != home)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    sources.push(home);
    let start = random_below(sources.len());
    sources.rotate_left(start);
    let module = fetch(&net, &sources, &files, &copy.module).await?;
    let inputs = dir.join("inputs");
    tokio::fs::create_dir_all(&inputs).await.map_err(local)?;
    for input in &copy.inputs {
        let data = fetch(&net, &sources, &files, input).await?;
        // The name was checked (`check_job_copy`): one plain file name.
        tokio::fs::write(inputs.join(&input.name), data)
            .await
            .map_err(local)?;
    }
    if let WorkKind::Native(arch) = copy.request.kind {
        // Checked here too: this node runs only what it can.
        return match crate::native::executable_arch(&module) {
            Ok(built) if Some(built) == crate::native::this_arch() && built == arch => {
                Ok((copy, Runnable::Native(std::sync::Arc::new(module)), dir))
            }
            Ok(built) => Err(PrepareError::Module(format!(
                "the native executable is built for {built}, not for this node"
            ))),
            Err(e) => Err(PrepareError::Module(format!(
                "not a native executable: {e}"
            ))),
        };
    }
    // A deterministic job's workers run on the engine of their own.
    let execution = match copy.request.deterministic {
        Some(_) => Execution::Deterministic,
        None => Execution::Default,
    };
    let program = tokio::task::spawn_blocking(move || sandbox.load_for(&module, execution))
        .await
        .map_err(local)?
        .map_err(|e| PrepareError::Module(e.to_string()))?;
    Ok((copy, Runnable::Wasm(program), dir))
}

/// Gets a content-addressed file: from the local cache, else in blocks from
/// `sources` in turn (the next one after a failure; a node of the job that
/// has not got the file yet fails fast), hash-checked, then cached. The
/// file's hash and size were checked ([`check_job_copy`]).
pub(super) async fn fetch(
    net: &Net,
    sources: &[PeerId],
    files: &Path,
    file: &FileRef,
) -> Result<Vec<u8>, PrepareError> {
    let path = files.join(&file.sha256);
    let cached = {
        let (files, sha256, size) = (files.to_owned(), file.sha256.clone(), file.size);
        tokio::task::spawn_blocking(move || jobfs::read_file(&files, &sha256, size)).await
    };
    if let Ok(Ok(data)) = cached
        && hex::encode(Sha256::digest(&data)) == file.sha256
    {
        return Ok(data);
    }
    let mut data = Vec::with_capacity(usize::try_from(file.size).unwrap_or(0));
    let mut failures = 0;
    while (data.len() as u64) < file.size {
        let rpc = PeerRpc::File(FileRpc::GetBlock {
            sha256: file.sha256.clone(),
            offset: data.len() as u64,
            len: BLOCK_BYTES as u32,
        });
        let from = sources[failures % sources.len().max(1)];
        match net.call_ok(from, rpc).await {
            Ok(PeerReply::Block(block))
                if !block.is_empty() && block.len() as u64 <= file.size - data.len() as u64 =>
            {
                data.extend_from_slice(&block)
            }
            other => {
                failures += 1;
                if failures >= 3 * sources.len().max(1) {
                    let why = match other {
                        Err(e) => e.to_string(),
                        Ok(_) => "the answer was not a block of it".to_owned(),
                    };
                    return Err(PrepareError::Fetch {
                        name: file.name.clone(),
                        why,
                    });
                }
            }
        }
    }
    if hex::encode(Sha256::digest(&data)) != file.sha256 {
        return Err(PrepareError::HashMismatch(file.name.clone()));
    }
    // A temporary name of this fetch's own: two jobs of one module starting
    // here at once fetch the same file, and a shared name let one rename
    // the other's file away ("No such file or directory").
    let tmp = path.with_extension(format!("part-{:016x}", random_u64()));
    tokio::fs::write(&tmp, &data).await.map_err(local)?;
    tokio::fs::rename(&tmp, &path).await.map_err(local)?;
    Ok(data)
}

/// Gives each rank its own view of the job's inputs (hard links, copies
/// where links fail or if `copy`). `from` holds only what [`prepare`] wrote there; `to`
/// is the rank's own, and nothing is written through a link in either.
pub(super) fn link_inputs(from: &Path, to: &Path, copy: bool) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    let listing = jobfs::walk(from)?;
    for (name, size) in listing.files {
        let dest = to.join(&name);
        // `link` neither follows a link at `from` nor writes through one
        // at `dest` (it fails if `dest` exists). A native worker is given
        // its directory's files, so it gets copies: a link would give it
        // the file every worker of the job here shares.
        if !copy && std::fs::hard_link(from.join(&name), &dest).is_ok() {
            continue;
        }
        if std::fs::symlink_metadata(&dest).is_ok() {
            continue; // Already there (a replaced rank's directory).
        }
        let (mut source, _) = jobfs::open_file(from, &name, size)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut target = jobfs::create_file(to, &name)?;
        std::io::copy(&mut source, &mut target)?;
    }
    Ok(())
}

/// Refuses a job copy whose files or names could make this node touch a
/// path outside the job's directories or allocate without bound: hashes
/// must be 64 lowercase hex digits (they name files in the cache), sizes at
/// most [`MAX_FILE_BYTES`], input names plain distinct file names.
pub(super) fn check_job_copy(copy: &JobCopy) -> Result<(), FileNameError> {
    let mut names = BTreeSet::new();
    for file in std::iter::once(&copy.module).chain(&copy.inputs) {
        check_hash(&file.sha256)?;
        if file.size > MAX_FILE_BYTES {
            return Err(FileNameError::TooLarge {
                name: file.name.clone(),
                size: file.size,
            });
        }
    }
    for input in &copy.inputs {
        jobfs::check_file_name(&input.name).map_err(|e| FileNameError::BadInputName {
            name: input.name.clone(),
            why: e.to_string(),
        })?;
        if !names.insert(input.name.as_str()) {
            return Err(FileNameError::InputTwice(input.name.clone()));
        }
    }
    Ok(())
}

/// A file hash from a peer, before it names anything on disk.
pub(super) fn check_hash(sha256: &str) -> Result<(), FileNameError> {
    if jobfs::is_sha256_hex(sha256) {
        Ok(())
    } else {
        Err(FileNameError::NotAHash(sha256.chars().take(80).collect()))
    }
}

/// Checks the name of an output file a worker node sends: `rank/path`,
/// a relative name that stays inside a directory ([`jobfs::check_relative`]),
/// whose rank the sender runs (`runs`).
pub(super) fn check_output_name(
    name: &str,
    runs: impl Fn(u32) -> bool,
) -> Result<(), FileNameError> {
    jobfs::check_relative(name).map_err(|e| FileNameError::BadOutputName {
        name: name.to_owned(),
        why: e.to_string(),
    })?;
    let rank = name
        .split_once('/')
        .and_then(|(rank, _)| rank.parse::<u32>().ok().filter(|r| r.to_string() == rank));
    match rank {
        Some(rank) if runs(rank) => Ok(()),
        _ => Err(FileNameError::NotSendersRank(name.to_owned())),
    }
}

/// A block of a file in this node's fetched-file cache `files`, by hash
/// only (anything else is refused before it touches the disk), opened
/// without following a link.
pub(super) fn cached_block(files: &Path, sha256: &str, offset: u64, len: u32) -> Option<Vec<u8>> {
    use std::io::{Read, Seek};
    check_hash(sha256).ok()?;
    let (mut file, size) = jobfs::open_file(files, sha256, u64::MAX).ok()?;
    file.seek(std::io::SeekFrom::Start(offset.min(size))).ok()?;
    let want = u64::from(len.min(BLOCK_BYTES as u32)).min(size.saturating_sub(offset));
    let mut block = Vec::with_capacity(want as usize);
    file.take(want).read_to_end(&mut block).ok()?;
    Some(block)
}

impl Node {
    /// Answers a request for a block of a file: only a node of a job that
    /// uses the file gets it ([`Node::may_fetch_file`]).
    pub(super) fn file_rpc(&self, from: PeerId, rpc: FileRpc) -> PeerReply {
        match rpc {
            FileRpc::GetBlock {
                sha256,
                offset,
                len,
            } => match check_hash(&sha256) {
                Err(e) => PeerReply::refused(RefusalKind::Malformed, e.to_string()),
                Ok(()) if !self.may_fetch_file(&from, &sha256) => self.refuse_data(
                    from,
                    format!("it asked for file {sha256}, of no job of which it holds a part"),
                ),
                Ok(()) => {
                    match self
                        .store
                        .blob_block(&sha256, offset, (len as usize).min(BLOCK_BYTES))
                    {
                        Ok(Some(block)) => PeerReply::Block(block),
                        // Not a file of a job of ours: perhaps one this node
                        // fetched to run workers (then it is complete and
                        // hash-checked).
                        Ok(None) => {
                            match cached_block(&self.dir.join("files"), &sha256, offset, len) {
                                Some(block) => PeerReply::Block(block),
                                None => PeerReply::refused(
                                    RefusalKind::NotHere,
                                    format!("no file {sha256} here"),
                                ),
                            }
                        }
                        Err(e) => PeerReply::refused(RefusalKind::Unavailable, e.to_string()),
                    }
                }
            },
        }
    }

    /// Whether `peer` may fetch the file `sha256`: it is a module or input
    /// of a job that `peer` is of ([`Node::of_job`]), as this node knows.
    fn may_fetch_file(&self, peer: &PeerId, sha256: &str) -> bool {
        let uses = |module: &FileRef, inputs: &[FileRef]| {
            module.sha256 == sha256 || inputs.iter().any(|f| f.sha256 == sha256)
        };
        let home_jobs = self
            .jobs
            .all_under_way()
            .iter()
            .filter(|(_, r)| uses(&r.module, &r.inputs))
            .map(|(job, _)| *job);
        let copied = self.replica_jobs_using(|copy| uses(&copy.module, &copy.inputs));
        home_jobs.chain(copied).any(|job| self.of_job(job, peer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, data: &[u8]) -> FileRef {
        FileRef {
            name: name.into(),
            sha256: hex::encode(Sha256::digest(data)),
            size: data.len() as u64,
        }
    }

    /// What a GetBlock from a peer reaches: only a hash names a file, and
    /// a cached file is read without following a link.
    #[test]
    fn a_block_request_names_a_cached_file_by_hash_only() {
        let dir = tempfile::tempdir().unwrap();
        let files = dir.path().join("files");
        std::fs::create_dir(&files).unwrap();
        std::fs::write(dir.path().join("identity.ed25519"), b"PRIVATE KEY").unwrap();
        let data = b"module bytes".to_vec();
        let good = file("m", &data).sha256;
        std::fs::write(files.join(&good), &data).unwrap();
        assert_eq!(cached_block(&files, &good, 7, 100).unwrap(), b"bytes");
        assert_eq!(cached_block(&files, &good, 100, 100).unwrap(), b"");
        for bad in [
            "../identity.ed25519",
            "/etc/passwd",
            "..",
            "",
            good.to_uppercase().as_str(),
        ] {
            assert!(check_hash(bad).is_err(), "{bad:?}");
            assert_eq!(cached_block(&files, bad, 0, 100), None, "{bad:?}");
        }
        // A well-formed hash that is a link in the cache is not followed.
        let linked = "f".repeat(64);
        std::os::unix::fs::symlink("../identity.ed25519", files.join(&linked)).unwrap();
        assert_eq!(cached_block(&files, &linked, 0, 100), None);
        let error = check_hash("../identity.ed25519").unwrap_err();
        assert_eq!(
            error.to_string(),
            "\"../identity.ed25519\" is not a file hash (64 lowercase hex digits)"
        );
    }

    #[test]
    fn a_job_copy_with_paths_for_names_or_huge_files_is_refused() {
        let info = |module: FileRef, inputs: Vec<FileRef>| JobCopy {
            request: crate::protocol::JobRequest::default(),
            module,
            inputs,
            submitted_unix: 0,
            owner: None,
            owner_proof: None,
            origin: None,
        };
        let module = file("module.wasm", b"\0asm");
        assert!(check_job_copy(&info(module.clone(), vec![file("in.txt", b"x")])).is_ok());
        let bad_hash = FileRef {
            sha256: "../../identity.ed25519".into(),
            ..module.clone()
        };
        let huge = FileRef {
            size: u64::MAX,
            ..module.clone()
        };
        for (module, inputs) in [
            (bad_hash.clone(), vec![]),
            (module.clone(), vec![bad_hash]),
            (huge, vec![]),
            (
                module.clone(),
                vec![file("../../../../identity.ed25519", b"x")],
            ),
            (module.clone(), vec![file("/etc/passwd", b"x")]),
            (module.clone(), vec![file("sub/x", b"x")]),
            (module.clone(), vec![file("..", b"x")]),
            (module.clone(), vec![file("a", b"x"), file("a", b"y")]),
        ] {
            let info = info(module, inputs);
            assert!(check_job_copy(&info).is_err(), "{info:?}");
        }
    }

    #[test]
    fn output_names_are_a_rank_of_the_sender_then_a_relative_path() {
        let runs = |rank: u32| rank == 3;
        for good in ["3/ok.txt", "3/sub/deep.txt"] {
            assert_eq!(check_output_name(good, runs), Ok(()), "{good}");
        }
        for bad in [
            "4/ok.txt",
            "3",
            "03/ok.txt",
            "+3/ok.txt",
            "3/../../x",
            "/3/x",
            "3/",
            "x/ok.txt",
            "3/a\0b",
        ] {
            assert!(check_output_name(bad, runs).is_err(), "{bad:?}");
        }
    }

    /// The inputs a rank sees are the job's, copied or linked, and a link
    /// already in the rank's directory is not written through.
    #[test]
    fn inputs_are_linked_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("inputs");
        let to = dir.path().join("0/inputs");
        std::fs::create_dir_all(&from).unwrap();
        std::fs::create_dir_all(&to).unwrap();
        std::fs::write(from.join("a.txt"), b"a").unwrap();
        std::fs::write(from.join("b.txt"), b"b").unwrap();
        std::fs::write(dir.path().join("victim"), b"untouched").unwrap();
        std::os::unix::fs::symlink("../../victim", to.join("b.txt")).unwrap();
        link_inputs(&from, &to, false).unwrap();
        assert_eq!(std::fs::read(to.join("a.txt")).unwrap(), b"a");
        assert_eq!(
            std::fs::read(dir.path().join("victim")).unwrap(),
            b"untouched"
        );
    }
}

//! The digest of what a worker computed, for a job that runs more than
//! once (see [`zorilla_core::runs`]): the member that ran the worker
//! computes it and reports it with the worker's end, and the home compares
//! the runs by it. The outputs themselves go home as for any job; the
//! digest is what is compared, so that two runs are compared in 32 bytes
//! however large their outputs.
//!
//! What goes in (SHA-256, in this order):
//! - a version tag (`zorilla result 1`);
//! - how the worker ended: its [`WorkerEnd`] in CBOR (exit status, or the
//!   trap or limit that stopped it);
//! - the SHA-256 of everything the worker wrote to stdout, then of stderr
//!   (each stream whole: how the sandbox cut it into chunks does not
//!   count);
//! - the SHA-256 of its output files: for each regular file under
//!   `/outputs`, in name order, its name's length and bytes, its length
//!   and its bytes (as many as the job's disk limit lets go home).
//!
//! Not in it: the node's own lines in the log (a file skipped, the home's
//! refusal), timings, the node or the run. So two honest runs of a
//! deterministic worker give the same digest; a node that changes what a
//! worker wrote (or its exit status) gives another.
//!
//! With the `test-corrupt` cargo feature only, a node whose environment
//! has `ZORILLA_TEST_CORRUPT=1` lies about every worker it runs: it adds a
//! line to the worker's stdout and to each of its output files before they
//! are hashed and sent ([`corrupts`], [`corrupt_outputs`]); with a share
//! below 1 (`ZORILLA_TEST_CORRUPT=0.3`), about that share of its workers,
//! drawn per worker. Tests use it to play a lying member; a node built
//! without the feature has no way to do it.

use std::path::Path;

use sha2::{Digest, Sha256};
use zorilla_core::node::WorkerEnd;
use zorilla_core::runs::ResultDigest;
use zorilla_sandbox::jobfs;
use zorilla_sandbox::output::{OutputChunk, OutputKind};

/// What a corrupting node adds to a worker's stdout and output files.
pub(super) const MADE_UP: &[u8] = b"a made-up result\n";

/// A running digest of one worker's output streams.
pub(super) struct ResultHasher {
    stdout: Sha256,
    stderr: Sha256,
}

impl ResultHasher {
    pub(super) fn new() -> ResultHasher {
        ResultHasher {
            stdout: Sha256::new(),
            stderr: Sha256::new(),
        }
    }

    /// Takes in a chunk of the worker's output.
    pub(super) fn output(&mut self, chunk: &OutputChunk) {
        match chunk.kind {
            OutputKind::Stdout => self.stdout.update(&chunk.data),
            OutputKind::Stderr => self.stderr.update(&chunk.data),
        }
    }

    /// The digest, with how the worker ended and the digest of its output
    /// files ([`outputs_digest`]).
    pub(super) fn finish(self, end: &WorkerEnd, files: [u8; 32]) -> ResultDigest {
        let mut all = Sha256::new();
        all.update(b"zorilla result 1");
        let mut encoded = Vec::new();
        // Writing CBOR into a vector cannot fail.
        let _ = ciborium::into_writer(end, &mut encoded);
        all.update((encoded.len() as u64).to_le_bytes());
        all.update(&encoded);
        all.update(self.stdout.finalize());
        all.update(self.stderr.finalize());
        all.update(files);
        ResultDigest(all.finalize().into())
    }
}

/// The digest of the regular files under `root` (see the module
/// documentation), at most `limit` bytes of them in all; blocking (run it
/// off the event loop). Files that cannot be read count by their names.
pub(super) fn outputs_digest(root: &Path, limit: u64) -> [u8; 32] {
    use std::io::Read;
    let mut hash = Sha256::new();
    let Ok(listing) = jobfs::walk(root) else {
        return hash.finalize().into();
    };
    let mut files = listing.files;
    files.sort();
    let mut left = limit;
    for (name, _) in files {
        hash.update((name.len() as u64).to_le_bytes());
        hash.update(name.as_bytes());
        let Ok((file, size)) = jobfs::open_file(root, &name, left) else {
            hash.update(u64::MAX.to_le_bytes());
            continue;
        };
        left -= size;
        hash.update(size.to_le_bytes());
        let mut file = file.take(size);
        let mut block = vec![0u8; 64 * 1024];
        loop {
            match file.read(&mut block) {
                Ok(0) => break,
                Ok(n) => hash.update(&block[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
    hash.finalize().into()
}

/// Whether this node lies about its workers' results (a test-only switch:
/// see the module documentation).
pub(super) fn corrupts() -> bool {
    #[cfg(feature = "test-corrupt")]
    {
        static SHARE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
        let share = *SHARE.get_or_init(|| {
            std::env::var("ZORILLA_TEST_CORRUPT")
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| (0.0..=1.0).contains(s))
                .unwrap_or(0.0)
        });
        share >= 1.0 || (share > 0.0 && (super::random_u64() as f64) < share * u64::MAX as f64)
    }
    #[cfg(not(feature = "test-corrupt"))]
    {
        false
    }
}

/// Adds [`MADE_UP`] to every regular file a worker left under `root`, as
/// a lying node would (only when [`corrupts`]); blocking.
pub(super) fn corrupt_outputs(root: &Path) {
    use std::io::Write;
    let Ok(listing) = jobfs::walk(root) else {
        return;
    };
    for (name, _) in listing.files {
        let path = root.join(&name);
        if let Ok(mut file) = std::fs::OpenOptions::new().append(true).open(&path) {
            let _ = file.write_all(MADE_UP);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(kind: OutputKind, data: &[u8]) -> OutputChunk {
        OutputChunk {
            kind,
            data: data.to_vec(),
        }
    }

    #[test]
    fn the_digest_depends_on_the_streams_whole_not_on_their_chunks() {
        let files = [0; 32];
        let mut a = ResultHasher::new();
        a.output(&chunk(OutputKind::Stdout, b"hello "));
        a.output(&chunk(OutputKind::Stderr, b"warn"));
        a.output(&chunk(OutputKind::Stdout, b"world"));
        let mut b = ResultHasher::new();
        b.output(&chunk(OutputKind::Stdout, b"hello world"));
        b.output(&chunk(OutputKind::Stderr, b"warn"));
        let end = WorkerEnd::Exited(0);
        assert_eq!(a.finish(&end, files), b.finish(&end, files));
        // Another stream, another exit status, other files: another digest.
        let mut c = ResultHasher::new();
        c.output(&chunk(OutputKind::Stderr, b"hello worldwarn"));
        let d = |h: ResultHasher, end: &WorkerEnd, files| h.finish(end, files);
        let base = {
            let mut h = ResultHasher::new();
            h.output(&chunk(OutputKind::Stdout, b"hello world"));
            h.output(&chunk(OutputKind::Stderr, b"warn"));
            h
        };
        let same = base.finish(&end, files);
        assert_ne!(d(c, &end, files), same);
        let mut e = ResultHasher::new();
        e.output(&chunk(OutputKind::Stdout, b"hello world"));
        e.output(&chunk(OutputKind::Stderr, b"warn"));
        assert_ne!(e.finish(&WorkerEnd::Exited(1), files), same);
        let mut f = ResultHasher::new();
        f.output(&chunk(OutputKind::Stdout, b"hello world"));
        f.output(&chunk(OutputKind::Stderr, b"warn"));
        assert_ne!(f.finish(&end, [1; 32]), same);
    }

    #[test]
    fn output_files_count_by_name_and_content_and_a_corrupted_file_differs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("a.txt"), b"1").unwrap();
        std::fs::write(root.join("sub/b.txt"), b"2").unwrap();
        let first = outputs_digest(root, u64::MAX);
        assert_eq!(outputs_digest(root, u64::MAX), first);
        std::fs::rename(root.join("a.txt"), root.join("c.txt")).unwrap();
        let renamed = outputs_digest(root, u64::MAX);
        assert_ne!(renamed, first);
        corrupt_outputs(root);
        assert_ne!(outputs_digest(root, u64::MAX), renamed);
        assert_eq!(
            std::fs::read(root.join("c.txt")).unwrap(),
            b"1a made-up result\n"
        );
        // None at all: the digest of nothing, not an error.
        assert_eq!(
            outputs_digest(&root.join("missing"), u64::MAX),
            <[u8; 32]>::from(Sha256::new().finalize())
        );
    }
}

//! The on-disk cache of compiled modules.
//!
//! Compiling a module with Cranelift takes tens of milliseconds; loading a
//! precompiled artifact takes a fraction of one. Every module is therefore
//! compiled once per node and kept in `cache_dir` as `<sha256 of wasm>.cwasm`,
//! reused across jobs and restarts (`<sha256 of wasm>-deterministic.cwasm`
//! for the engine of deterministic workers, whose code differs).
//!
//! Loading a precompiled artifact runs native code produced earlier, so an
//! entry is trusted only after checks that rule out anything but an intact
//! artifact written by this same build for this same module. Each file is a
//! fixed header followed by the artifact:
//!
//! | bytes | content |
//! |---|---|
//! | 8  | magic `ZRLCWASM` |
//! | 4  | header format version (little endian) |
//! | 32 | engine fingerprint: SHA-256 of this crate's version and wasmtime's precompile compatibility hash (version, target, settings) |
//! | 32 | SHA-256 of the WebAssembly module the artifact was compiled from |
//! | 8  | artifact length (little endian) |
//! | 32 | SHA-256 of the artifact |
//!
//! A file that is truncated, corrupted, tampered with, written by another
//! engine or build, or filed under the wrong name fails one of these checks;
//! it is counted as rejected, and the module is compiled again and the entry
//! rewritten. Files are written to a temporary name of their own (one per
//! write, so concurrent loads of one module never share it) and renamed into
//! place, so a crash never leaves a half-written entry under a real name.
//!
//! Only modules the sandbox accepts get an entry: the caller's check runs
//! before an artifact is written, and an entry whose module is refused is
//! removed.
//!
//! The checks are integrity checks, not authentication: the cache directory
//! must be writable only by the node (it is created with mode 0700), as
//! anyone who can write there could equally replace the node's binary.

use std::hash::Hasher;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use wasmtime::{Engine, Module};

use crate::SandboxError;

const MAGIC: &[u8; 8] = b"ZRLCWASM";
const FORMAT_VERSION: u32 = 1;
const HEADER_LEN: usize = 8 + 4 + 32 + 32 + 8 + 32;

/// A SHA-256 digest.
pub(crate) type Digest32 = [u8; 32];

/// SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> Digest32 {
    Sha256::digest(bytes).into()
}

/// Counters of what the module cache did, for tests, metrics and logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Modules compiled from WebAssembly (cache misses and rejected entries).
    pub compiled: u64,
    /// Modules loaded from a verified on-disk artifact.
    pub loaded_from_disk: u64,
    /// Modules found already loaded in memory.
    pub memory_hits: u64,
    /// On-disk entries that failed verification and were recompiled.
    pub rejected: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) compiled: AtomicU64,
    pub(crate) loaded_from_disk: AtomicU64,
    pub(crate) memory_hits: AtomicU64,
    pub(crate) rejected: AtomicU64,
}

impl CacheStats {
    /// Both counts added, as for the caches of two engines.
    pub(crate) fn plus(self, other: CacheStats) -> CacheStats {
        CacheStats {
            compiled: self.compiled.saturating_add(other.compiled),
            loaded_from_disk: self.loaded_from_disk.saturating_add(other.loaded_from_disk),
            memory_hits: self.memory_hits.saturating_add(other.memory_hits),
            rejected: self.rejected.saturating_add(other.rejected),
        }
    }
}

impl Counters {
    pub(crate) fn snapshot(&self) -> CacheStats {
        CacheStats {
            compiled: self.compiled.load(Ordering::Relaxed),
            loaded_from_disk: self.loaded_from_disk.load(Ordering::Relaxed),
            memory_hits: self.memory_hits.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }
}

/// Feeds a `Hash` value into SHA-256, giving a fingerprint that is stable
/// across processes (unlike `DefaultHasher`, whose algorithm may change).
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn finish(&self) -> u64 {
        // Only `write` is used; the digest is taken from the inner state.
        0
    }
}

/// The on-disk artifact store for one engine.
pub(crate) struct DiskCache {
    dir: PathBuf,
    /// Ends the entries' names before `.cwasm`: one engine's entries never
    /// take the place of another's.
    suffix: &'static str,
    fingerprint: Digest32,
    pub(crate) counters: Counters,
}

/// Why an on-disk entry was not trusted (logged when it is rejected).
#[derive(Debug, thiserror::Error)]
enum Rejection {
    #[error("shorter than the header")]
    Short,
    #[error("bad magic number")]
    Magic,
    #[error("unknown header format")]
    Version,
    #[error("written by another engine or build")]
    Engine,
    #[error("compiled from another module")]
    WrongModule,
    #[error("truncated or extended artifact")]
    Length,
    #[error("artifact checksum mismatch")]
    Checksum,
    #[error("wasmtime refused the artifact: {0}")]
    Deserialize(String),
}

impl DiskCache {
    /// Opens (creating if needed) the cache directory for `engine`.
    pub(crate) fn open(
        dir: &Path,
        engine: &Engine,
        suffix: &'static str,
    ) -> Result<DiskCache, SandboxError> {
        create_private_dir(dir).map_err(|source| SandboxError::Cache {
            path: dir.to_owned(),
            source,
        })?;
        let mut hasher = ShaHasher(Sha256::new());
        hasher.write(b"zorilla-sandbox ");
        hasher.write(env!("CARGO_PKG_VERSION").as_bytes());
        std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
        Ok(DiskCache {
            dir: dir.to_owned(),
            suffix,
            fingerprint: hasher.0.finalize().into(),
            counters: Counters::default(),
        })
    }

    /// The file that holds the artifact of the module with this hash.
    pub(crate) fn path_for(&self, wasm_hash: &Digest32) -> PathBuf {
        self.dir
            .join(format!("{}{}.cwasm", hex::encode(wasm_hash), self.suffix))
    }

    /// Compiles `wasm`, or loads it from a verified entry on disk, and
    /// passes the module to `accept`, whose answer is returned. A new entry
    /// is written only if `accept` took the module; an existing entry whose
    /// module it refuses is removed, so refused modules leave nothing behind.
    pub(crate) fn get_or_compile<T>(
        &self,
        engine: &Engine,
        wasm: &[u8],
        wasm_hash: &Digest32,
        accept: impl FnOnce(&Module) -> Result<T, SandboxError>,
    ) -> Result<T, SandboxError> {
        let path = self.path_for(wasm_hash);
        match std::fs::read(&path) {
            Ok(file) => match self.verify_and_load(engine, &file, wasm_hash) {
                Ok(module) => {
                    self.counters
                        .loaded_from_disk
                        .fetch_add(1, Ordering::Relaxed);
                    let accepted = accept(&module);
                    if accepted.is_err() {
                        // Written by an older build, which cached modules
                        // before checking them.
                        self.remove_entry(&path);
                    }
                    return accepted;
                }
                Err(why) => {
                    self.counters.rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(path = %path.display(), reason = %why, "rejected cached module; recompiling");
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read cached module; recompiling")
            }
        }

        let module =
            Module::new(engine, wasm).map_err(|e| SandboxError::InvalidModule(format!("{e:#}")))?;
        self.counters.compiled.fetch_add(1, Ordering::Relaxed);
        let accepted = match accept(&module) {
            Ok(accepted) => accepted,
            Err(refused) => {
                // A rejected entry of this module may still be on disk.
                self.remove_entry(&path);
                return Err(refused);
            }
        };
        match module.serialize() {
            // A cache that cannot be written costs speed, not correctness.
            Ok(artifact) => {
                if let Err(e) = self.write_entry(&path, wasm_hash, &artifact) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot write module cache entry");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot serialize compiled module"),
        }
        Ok(accepted)
    }

    fn remove_entry(&self, path: &Path) {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove module cache entry")
            }
        }
    }

    fn verify_and_load(
        &self,
        engine: &Engine,
        file: &[u8],
        wasm_hash: &Digest32,
    ) -> Result<Module, Rejection> {
        let (header, body) = file.split_at_checked(HEADER_LEN).ok_or(Rejection::Short)?;
        let (magic, rest) = header.split_at(8);
        let (version, rest) = rest.split_at(4);
        let (fingerprint, rest) = rest.split_at(32);
        let (module_hash, rest) = rest.split_at(32);
        let (length, checksum) = rest.split_at(8);
        if magic != MAGIC {
            return Err(Rejection::Magic);
        }
        if version != FORMAT_VERSION.to_le_bytes() {
            return Err(Rejection::Version);
        }
        if fingerprint != self.fingerprint {
            return Err(Rejection::Engine);
        }
        if module_hash != wasm_hash {
            return Err(Rejection::WrongModule);
        }
        if length != (body.len() as u64).to_le_bytes() {
            return Err(Rejection::Length);
        }
        if checksum != sha256(body) {
            return Err(Rejection::Checksum);
        }
        // SAFETY: `Module::deserialize` requires bytes produced by
        // `Module::serialize` (or `Engine::precompile_module`) with an engine
        // compatible with `engine`, because it maps them as native code
        // without validating them. This body is byte-for-byte what
        // `get_or_compile` serialized: its length and SHA-256 match the
        // header written alongside it, the header names this module's hash,
        // and the fingerprint proves it came from this crate version with an
        // engine of the same wasmtime version, target and settings (wasmtime
        // re-checks the latter itself and errors on mismatch). The cache
        // directory is private to the node (see the module docs), so only
        // this code writes there.
        #[allow(unsafe_code)]
        let module = unsafe { Module::deserialize(engine, body) };
        module.map_err(|e| Rejection::Deserialize(format!("{e:#}")))
    }

    fn write_entry(
        &self,
        path: &Path,
        wasm_hash: &Digest32,
        artifact: &[u8],
    ) -> std::io::Result<()> {
        let mut header = Vec::with_capacity(HEADER_LEN);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(&self.fingerprint);
        header.extend_from_slice(wasm_hash);
        header.extend_from_slice(&(artifact.len() as u64).to_le_bytes());
        header.extend_from_slice(&sha256(artifact));
        let tmp = temp_path(path);
        let result = (|| {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(&header)?;
            file.write_all(artifact)?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

/// A name next to `path` to write its new content under before renaming it
/// into place: unique to this write, so that two threads (or two sandboxes
/// in one process, or two processes) writing the same entry at once never
/// write into the same file.
fn temp_path(path: &Path) -> PathBuf {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let write = WRITES.fetch_add(1, Ordering::Relaxed);
    path.with_extension(format!("tmp{}-{write}", std::process::id()))
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_gets_its_own_temporary_file() {
        let entry = Path::new("/cache/ab.cwasm");
        let names: Vec<PathBuf> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| [temp_path(entry), temp_path(entry)]))
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect()
        });
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for name in &names {
            // Beside the entry, and never mistaken for one.
            assert_eq!(name.parent(), entry.parent());
            assert_ne!(name.extension(), entry.extension());
        }
    }
}

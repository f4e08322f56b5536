//! The node's ed25519 identity, kept in its state directory so that the
//! node keeps its peer id across restarts (other nodes remember it as a
//! job's home or as a neighbour).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use libp2p::PeerId;
pub use libp2p::identity::{Keypair, PublicKey};

/// The file in the state directory that holds the secret key.
pub const IDENTITY_FILE: &str = "identity.ed25519";

/// Why the identity could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Reading or writing the key file failed.
    #[error("identity file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The key file exists but does not hold a key.
    #[error("identity file {path} does not hold an ed25519 key: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// Loads the identity from `dir`, or creates one there (mode 0600) if there is
/// none. `dir` is created if missing.
pub fn load_or_create(dir: &Path) -> Result<Keypair, IdentityError> {
    let path = dir.join(IDENTITY_FILE);
    let io = |source| IdentityError::Io {
        path: path.clone(),
        source,
    };
    match fs::read(&path) {
        Ok(bytes) => {
            let key =
                Keypair::from_protobuf_encoding(&bytes).map_err(|e| IdentityError::Corrupt {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            if key.key_type() != libp2p::identity::KeyType::Ed25519 {
                return Err(IdentityError::Corrupt {
                    path,
                    reason: format!("key type is {:?}", key.key_type()),
                });
            }
            // A secret readable by others is a leak waiting to happen: tighten
            // it rather than refuse to start.
            let mode = fs::metadata(&path).map_err(io)?.permissions().mode();
            if mode & 0o077 != 0 {
                tracing::warn!(path = %path.display(), mode = format!("{mode:o}"), "identity file was readable by others; setting mode 0600");
                fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).map_err(io)?;
            }
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(io)?;
            let key = Keypair::generate_ed25519();
            let bytes = key
                .to_protobuf_encoding()
                .map_err(|e| IdentityError::Corrupt {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            let tmp = dir.join(format!("{IDENTITY_FILE}.tmp"));
            write_private_replacing(&path, &tmp, &bytes).map_err(io)?;
            Ok(key)
        }
        Err(e) => Err(io(e)),
    }
}

/// Writes `bytes` to `path` (mode 0600) through `tmp` and a rename, so
/// that a crash never leaves a half-written secret behind; an existing
/// file is replaced.
pub fn write_private_replacing(path: &Path, tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(tmp, path)
}

/// Writes `bytes` to a new file `path` (mode 0600); an existing file is
/// never replaced (the error is `AlreadyExists`).
///
/// The bytes go to a private temporary file first, which is then linked
/// as `path`: a process that reads `path` meanwhile (another `zorilla`
/// making the same user key on first use) finds no file or the whole
/// one, never a half-written secret.
pub fn write_private_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the path names no file"))?;
    // Unique among the writers alive at once: this process's id and a
    // count of its own attempts.
    static ATTEMPTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let attempt = ATTEMPTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp_name = name.to_owned();
    tmp_name.push(format!(".{}.{attempt}.new", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let linked = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        // A link, unlike a rename, fails when `path` already exists.
        fs::hard_link(&tmp, path)
    })();
    let _ = fs::remove_file(&tmp);
    linked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_survives_a_restart_and_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let first = load_or_create(&state).unwrap();
        let second = load_or_create(&state).unwrap();
        assert_eq!(first.public().to_peer_id(), second.public().to_peer_id());
        let mode = fs::metadata(state.join(IDENTITY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_new_private_file_is_seen_whole_or_not_at_all_and_only_one_writer_wins() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let stop = std::sync::atomic::AtomicBool::new(false);
        let won = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut seen = 0usize;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(bytes) = fs::read(&path) {
                        assert_eq!(bytes.len(), 64 * 1024, "a partly written file was read");
                        seen += 1;
                    }
                }
                seen
            });
            let writers: Vec<_> = (0..8u8)
                .map(|i| {
                    let path = &path;
                    s.spawn(move || write_private_new(path, &vec![i; 64 * 1024]))
                })
                .collect();
            let results: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            reader.join().unwrap();
            results
        });
        assert_eq!(won.iter().filter(|r| r.is_ok()).count(), 1);
        assert!(
            won.iter()
                .filter_map(|r| r.as_ref().err())
                .all(|e| e.kind() == std::io::ErrorKind::AlreadyExists)
        );
        let winner = won.iter().position(|r| r.is_ok()).unwrap() as u8;
        assert_eq!(fs::read(&path).unwrap(), vec![winner; 64 * 1024]);
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "temporary files were left behind");
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_corrupt_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(IDENTITY_FILE), b"not a key").unwrap();
        assert!(matches!(
            load_or_create(dir.path()),
            Err(IdentityError::Corrupt { .. })
        ));
    }
}

/// Signs with this node's identity, and checks other peers' signatures:
/// an ed25519 peer id names its public key, so a signature of a peer is
/// checked with nothing but its id.
#[derive(Clone)]
pub struct PeerSigner {
    key: Keypair,
}

impl std::fmt::Debug for PeerSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeerSigner({})", self.key.public().to_peer_id())
    }
}

impl PeerSigner {
    /// The signer of the node whose key is `key`.
    pub fn new(key: Keypair) -> Self {
        PeerSigner { key }
    }

    /// This node's peer id.
    pub fn peer_id(&self) -> PeerId {
        self.key.public().to_peer_id()
    }

    /// This node's signature of `msg`.
    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        // Signing with an ed25519 key cannot fail (only RSA signing can).
        self.key.sign(msg).unwrap_or_default()
    }

    /// Whether `signature` is `peer`'s of `msg` (false for a peer id that
    /// does not name its key, as RSA ids do).
    pub fn verify(peer: &PeerId, msg: &[u8], signature: &[u8]) -> bool {
        public_key_of(peer).is_some_and(|key| key.verify(msg, signature))
    }
}

/// The public key a peer id names (ed25519 ids inline it); `None` for ids
/// that only hash their key.
pub fn public_key_of(peer: &PeerId) -> Option<PublicKey> {
    let hash: &libp2p::multihash::Multihash<64> = peer.as_ref();
    // Multihash code 0 is the identity "hash": the digest is the key.
    (hash.code() == 0)
        .then(|| PublicKey::try_decode_protobuf(hash.digest()).ok())
        .flatten()
}

//! Users and the jobs they own (issue 28).
//!
//! A user is an ed25519 key pair, made by the `zorilla` tool on first use
//! and kept under the user's configuration directory
//! ([`UserKey::default_path`], mode 0600). Its [`UserId`] is written like a
//! peer id: it names the public key, so a signature of the user is checked
//! with nothing but the id.
//!
//! - **A job's owner** is the user who signed its submission: the client
//!   signs the job, its module's and inputs' hashes and the nonce the node
//!   gave its connection ([`Welcome::nonce`](crate::protocol::Welcome)), so
//!   that a submission cannot be replayed on another connection. A job
//!   submitted unsigned has no owner: only the admin of its home (a client
//!   holding the node's token) can see and manage it.
//! - **What belongs to the owner alone**: a job's details (arguments,
//!   inputs, placement, why it waits), its logs, outputs, cancel and
//!   resize. The owner proves each request end to end to the job's home:
//!   the home hands out a fresh nonce ([`Sessions::issue`], through any
//!   node), and the owner signs the nonce, a sequence number and the
//!   request ([`owner_message`]); the home takes each sequence number once
//!   and only rising, so no node on the way can replay or alter a request,
//!   or make another.
//! - **Everybody else** sees that a job exists: its id, owner, phase and
//!   size ([`JobStatus::public`](crate::protocol::JobStatus::public)).
//! - **The node's admin** (a client that presented the node's token) may
//!   see and manage every job the node is home to, on that node only: a
//!   node that forwards a request never acts as admin at the home.

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use zorilla_overlay::PeerId;
use zorilla_overlay::identity::{PeerSigner, public_key_of};

use crate::protocol::{JobRequest, OwnerProof, Request};

/// A user: the id of its ed25519 public key (it names the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct UserId(PeerId);

/// Why a text is not a user id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a user id (the id of an ed25519 key, as `zorilla whoami` prints it)")]
pub struct BadUserId(String);

impl std::str::FromStr for UserId {
    type Err = BadUserId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Ids name their key inline; an id that only hashes its key could
        // not be checked, so it is no user's.
        s.parse::<PeerId>()
            .ok()
            .filter(|p| public_key_of(p).is_some())
            .map(UserId)
            .ok_or_else(|| BadUserId(s.chars().take(80).collect()))
    }
}

impl TryFrom<String> for UserId {
    type Error = BadUserId;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<UserId> for String {
    fn from(user: UserId) -> String {
        user.to_string()
    }
}

impl std::fmt::Display for UserId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl UserId {
    /// Whether `signature` is this user's of `msg`.
    pub fn verify(&self, msg: &[u8], signature: &[u8]) -> bool {
        PeerSigner::verify(&self.0, msg, signature)
    }

    /// The user's key as the core's schedulers name it (the same form as
    /// a peer's: adverts carry it, nodes' policies name it).
    pub fn key(&self) -> PeerId {
        self.0
    }

    /// The user whose key `key` is, if it names an ed25519 key inline.
    pub fn of_key(key: PeerId) -> Option<UserId> {
        public_key_of(&key).map(|_| UserId(key))
    }
}

/// The proof that a job's owner submitted it: the nonce of the connection
/// it came on and the owner's signature of [`submit_message`]. It travels
/// with the job's copy, so that every node that runs a worker of the job
/// checks who owns it (its owner's policy decides by that) rather than
/// take the home's word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitProof {
    /// The nonce of the connection the job was submitted on.
    #[serde(with = "serde_bytes")]
    pub nonce: Vec<u8>,
    /// The owner's signature.
    #[serde(with = "serde_bytes")]
    pub signature: Vec<u8>,
    /// The job's `max_workers` as submitted (and signed): its owner may
    /// resize the job since, and a copy carries the size as it is now.
    pub max_workers: u32,
}

/// Who submitted a job, and the proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitter {
    /// The owner.
    pub user: UserId,
    /// Its signature of the submission.
    pub proof: SubmitProof,
}

/// Checks that `user` submitted the job `request` (but for its size,
/// which a resize may have changed since) with the module and inputs
/// (name, SHA-256 in hex) of these hashes: `proof` is its signature of
/// them.
pub fn check_submission(
    user: &UserId,
    proof: &SubmitProof,
    request: &JobRequest,
    module_sha256: &str,
    inputs: &[(&str, &str)],
) -> Result<(), String> {
    if proof.nonce.len() != NONCE_BYTES
        || proof.signature.len() > zorilla_core::replica::MAX_SIGNATURE
    {
        return Err(format!(
            "the proof that {user} submitted the job is malformed"
        ));
    }
    let submitted = JobRequest {
        max_workers: proof.max_workers,
        ..request.clone()
    };
    let message = submit_message(&proof.nonce, &submitted, module_sha256, inputs);
    if !user.verify(&message, &proof.signature) {
        return Err(format!(
            "the submission's signature is not {user}'s of this job"
        ));
    }
    Ok(())
}

/// A user's key pair.
#[derive(Clone)]
pub struct UserKey(PeerSigner);

impl std::fmt::Debug for UserKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserKey({})", self.id())
    }
}

/// Why a user key could not be loaded or made.
#[derive(Debug, thiserror::Error)]
pub enum UserKeyError {
    /// Reading or writing the key file failed.
    #[error("user key {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The file does not hold a key.
    #[error("user key {path} does not hold an ed25519 key: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// No place to keep it.
    #[error("no place for the user key: set ZORILLA_USER_KEY (a file) or HOME or XDG_CONFIG_HOME")]
    NoPlace,
}

impl UserKey {
    /// A new key.
    pub fn generate() -> UserKey {
        UserKey(PeerSigner::new(libp2p_identity_generate()))
    }

    /// One key for this process, made on first use: what a client that
    /// names no key signs with (one anonymous user per process).
    pub fn ephemeral() -> UserKey {
        static KEY: OnceLock<UserKey> = OnceLock::new();
        KEY.get_or_init(UserKey::generate).clone()
    }

    /// The user's id.
    pub fn id(&self) -> UserId {
        UserId(self.0.peer_id())
    }

    /// The user's signature of `msg`.
    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        self.0.sign(msg)
    }

    /// Where the user's key is kept: `ZORILLA_USER_KEY` if set, else
    /// `$XDG_CONFIG_HOME/zorilla/user.key`, else
    /// `$HOME/.config/zorilla/user.key`.
    pub fn default_path() -> Result<PathBuf, UserKeyError> {
        let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(path) = var("ZORILLA_USER_KEY") {
            return Ok(PathBuf::from(path));
        }
        let config = var("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|home| Path::new(&home).join(".config")))
            .ok_or(UserKeyError::NoPlace)?;
        Ok(config.join("zorilla").join("user.key"))
    }

    /// Loads the key at `path`, or makes one there (the file mode 0600, a
    /// missing directory 0700) if there is none.
    pub fn load_or_create(path: &Path) -> Result<UserKey, UserKeyError> {
        let io = |source| UserKeyError::Io {
            path: path.to_owned(),
            source,
        };
        match fs::read(path) {
            Ok(bytes) => {
                let key =
                    libp2p_identity_decode(&bytes).map_err(|reason| UserKeyError::Corrupt {
                        path: path.to_owned(),
                        reason,
                    })?;
                return Ok(UserKey(PeerSigner::new(key)));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io)?;
        }
        let key = libp2p_identity_generate();
        let bytes = key
            .to_protobuf_encoding()
            .map_err(|e| io(std::io::Error::other(e.to_string())))?;
        match zorilla_overlay::identity::write_private_new(path, &bytes) {
            Ok(()) => Ok(UserKey(PeerSigner::new(key))),
            // Another process made it meanwhile: that one is the user's.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Self::load_or_create(path),
            Err(e) => Err(io(e)),
        }
    }

    /// The proof that this user asks `request` (see [`owner_message`]).
    pub fn prove(&self, nonce: &[u8], seq: u64, request: &Request) -> OwnerProof {
        OwnerProof {
            user: self.id().to_string(),
            nonce: nonce.to_vec(),
            seq,
            signature: self.sign(&owner_message(nonce, seq, request)),
        }
    }
}

fn libp2p_identity_generate() -> zorilla_overlay::identity::Keypair {
    zorilla_overlay::identity::Keypair::generate_ed25519()
}

fn libp2p_identity_decode(bytes: &[u8]) -> Result<zorilla_overlay::identity::Keypair, String> {
    zorilla_overlay::identity::Keypair::from_protobuf_encoding(bytes)
        .map_err(|e| e.to_string())
        .and_then(|k| {
            k.clone()
                .try_into_ed25519()
                .map(|_| k)
                .map_err(|_| "not an ed25519 key".to_owned())
        })
}

/// What a submission's signature covers: the connection's nonce, the job,
/// and its module's and inputs' hashes (name, SHA-256 in hex).
pub fn submit_message(
    nonce: &[u8],
    job: &JobRequest,
    module_sha256: &str,
    inputs: &[(&str, &str)],
) -> Vec<u8> {
    encode(&("zorilla submit 1", nonce, job, module_sha256, inputs))
}

/// What an owner's request's signature covers: the home's nonce, the
/// sequence number and the request.
pub fn owner_message(nonce: &[u8], seq: u64, request: &Request) -> Vec<u8> {
    encode(&("zorilla owner request 1", nonce, seq, request))
}

/// The CBOR of `value` (what is signed; the same encoding as the wire's).
fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail for these plain types.
    ciborium::into_writer(value, &mut out).expect("CBOR encoding into memory");
    out
}

/// The bytes of a nonce.
pub const NONCE_BYTES: usize = 16;
/// The most sessions a home keeps at once; the oldest goes first.
pub const MAX_SESSIONS: usize = 4096;
/// How long a session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(600);

/// A nonce from the system's random source: one someone could guess would
/// let a signature be made ahead for it.
pub fn fresh_nonce() -> [u8; NONCE_BYTES] {
    let mut nonce = [0u8; NONCE_BYTES];
    // A machine without a random source cannot run a node at all.
    rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut nonce)
        .expect("the system's random number source");
    nonce
}

/// Why a proof of ownership was refused: one sentence for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// The nonce is not one this node gave for the job, or it expired.
    #[error("the proof's nonce is unknown here or expired: ask the job's home for a new one")]
    StaleSession,
    /// The sequence number was used already.
    #[error("the proof's sequence number was used already (a replayed request)")]
    Replayed,
    /// Not the owner's signature, or the job has another owner.
    #[error("the request is not signed by the job's owner ({})", match .0 {
        Some(owner) => format!("user {owner}"),
        None => "nobody: only its home's admin, with the node's token, may ask it".to_owned(),
    })]
    NotOwner(Option<UserId>),
    /// The request's job is not the session's.
    #[error("the proof's nonce was given for another job")]
    OtherJob,
}

impl Denied {
    /// The kind of error a client is answered with.
    pub fn kind(&self) -> crate::protocol::ErrorKind {
        match self {
            Denied::StaleSession => crate::protocol::ErrorKind::Stale,
            _ => crate::protocol::ErrorKind::Unauthorized,
        }
    }

    /// The answer to the client.
    pub fn response(&self) -> crate::protocol::Response {
        crate::protocol::Response::error(self.kind(), self.to_string())
    }
}

struct Session {
    job: u64,
    issued: Instant,
    last_seq: Option<u64>,
}

/// The nonces a home gave for its jobs' owners, each with the last
/// sequence number taken.
#[derive(Default)]
pub struct Sessions {
    by_nonce: BTreeMap<[u8; NONCE_BYTES], Session>,
    order: VecDeque<[u8; NONCE_BYTES]>,
}

/// The sessions, shared by the client connections and the event loop.
pub type SharedSessions = Arc<Mutex<Sessions>>;

impl Sessions {
    /// A fresh nonce for requests about `job`.
    pub fn issue(&mut self, job: u64) -> [u8; NONCE_BYTES] {
        let nonce = fresh_nonce();
        while self.by_nonce.len() >= MAX_SESSIONS {
            match self.order.pop_front() {
                Some(old) => {
                    self.by_nonce.remove(&old);
                }
                None => break,
            }
        }
        self.by_nonce.insert(
            nonce,
            Session {
                job,
                issued: Instant::now(),
                last_seq: None,
            },
        );
        self.order.push_back(nonce);
        nonce
    }

    /// Checks that `proof` proves `owner` asks `request` about `job`, and
    /// takes its sequence number.
    pub fn check(
        &mut self,
        proof: &OwnerProof,
        job: u64,
        request: &Request,
        owner: Option<&UserId>,
    ) -> Result<UserId, Denied> {
        let nonce: [u8; NONCE_BYTES] = proof
            .nonce
            .as_slice()
            .try_into()
            .map_err(|_| Denied::StaleSession)?;
        let session = self
            .by_nonce
            .get_mut(&nonce)
            .filter(|s| s.issued.elapsed() < SESSION_TTL)
            .ok_or(Denied::StaleSession)?;
        if session.job != job {
            return Err(Denied::OtherJob);
        }
        let not_owner = || Denied::NotOwner(owner.copied());
        let user: UserId = proof.user.parse().map_err(|_| not_owner())?;
        if owner != Some(&user)
            || !user.verify(
                &owner_message(&proof.nonce, proof.seq, request),
                &proof.signature,
            )
        {
            return Err(not_owner());
        }
        if session.last_seq.is_some_and(|last| proof.seq <= last) {
            return Err(Denied::Replayed);
        }
        session.last_seq = Some(proof.seq);
        Ok(user)
    }
}

/// Who asks: what a request may see and do depends on it.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// A client of this node that presented its token.
    pub admin: bool,
    /// The proof that the job's owner asks, if the client gave one.
    pub proof: Option<OwnerProof>,
    /// The user whose signature a submission carries (checked).
    pub submitter: Option<Submitter>,
}

/// What a caller may have of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Everything: its owner, or this node's admin.
    Full,
    /// That it exists: id, owner, phase, size.
    Public,
}

/// What `caller` may have of `job`, owned by `owner`, asking `request`: a
/// proof that does not hold is refused with its reason (rather than
/// silently answered as a stranger's), but for a status, which anybody
/// may see as much of as a stranger does (a user asking about another's
/// job).
pub fn access(
    caller: &Caller,
    sessions: &SharedSessions,
    job: u64,
    owner: Option<&UserId>,
    request: &Request,
) -> Result<Access, Denied> {
    if caller.admin {
        return Ok(Access::Full);
    }
    let Some(proof) = &caller.proof else {
        return Ok(Access::Public);
    };
    let mut sessions = sessions.lock().unwrap_or_else(|e| e.into_inner());
    match sessions.check(proof, job, request, owner) {
        Ok(_) => Ok(Access::Full),
        Err(Denied::NotOwner(_)) if matches!(request, Request::Status { .. }) => Ok(Access::Public),
        Err(e) => Err(e),
    }
}

/// The refusal of a request that only `job`'s owner (or its home's admin)
/// may make.
pub fn owners_only(job: u64, owner: Option<&UserId>) -> crate::protocol::Response {
    let id = zorilla_core::advert::JobId(job);
    let message = match owner {
        Some(owner) => format!(
            "job {id} belongs to user {owner}: only its owner (with its key) or its home's \
             admin (with the node's token) may see its details, logs and outputs, or change it"
        ),
        None => format!(
            "job {id} was submitted without a user's signature: only its home's admin (with the \
             node's token) may see its details, logs and outputs, or change it"
        ),
    };
    crate::protocol::Response::error(crate::protocol::ErrorKind::Unauthorized, message)
}

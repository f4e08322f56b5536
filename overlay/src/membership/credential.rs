//! Grid keys, membership credentials and revocations: what a node of a
//! closed grid shows its peers, and how a peer checks it.
//!
//! A **grid key** is an ed25519 key pair made once by whoever founds the
//! grid ([`GridKey::generate`]) and kept offline; its public half
//! ([`GridPublicKey`]) names the grid. A **credential** says "peer P is a
//! member of grid G until T, and may (or may not) invite others"; it is
//! signed by the grid key, or by a member whose own credential (signed by
//! the grid key) lets it invite. The chain is at most grid key → inviter →
//! member and is checked link by link ([`Credential::verify`]): every
//! signature, every expiry, the inviter's right to invite, and whether a
//! [`Revocation`] names any link's peer or credential.
//!
//! Everything signed is carried as the exact bytes that were signed (the
//! body's CBOR), so that nothing is re-encoded before a check, and each
//! signature covers a domain tag as well, so that a credential's signature
//! can never pass for a revocation's or anything else a key signs.
//! Nothing that came from outside is decoded beyond its envelope before
//! its signature checks, and an envelope is decoded only when it is at most
//! [`MAX_CREDENTIAL_BYTES`] (or [`MAX_REVOCATION_BYTES`]) long and its CBOR
//! headers declare no more than the bytes hold ([`crate::cbor`]).

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use libp2p::PeerId;
use libp2p::identity::{Keypair, PublicKey, ed25519};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;
use sha2::{Digest, Sha256};

/// The longest encoded credential (with its inviter's) accepted. An honest
/// one of two links is about 450 bytes.
pub const MAX_CREDENTIAL_BYTES: usize = 2048;
/// The longest encoded revocation accepted (an honest one is about 200).
pub const MAX_REVOCATION_BYTES: usize = 512;

/// What a credential's signature covers besides its body.
const CREDENTIAL_DOMAIN: &[u8] = b"zorilla/grid-credential/1\0";
/// What a revocation's signature covers besides its body.
const REVOCATION_DOMAIN: &[u8] = b"zorilla/grid-revocation/1\0";

/// Seconds since the Unix epoch, the clock credentials are read against.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The public half of a grid key: the grid's name for its members.
/// Written as 64 hex digits (config files, `--grid-key`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GridPublicKey([u8; 32]);

impl GridPublicKey {
    /// The key's 32 bytes.
    pub fn to_bytes(self) -> [u8; 32] {
        self.0
    }

    /// A short form to show and compare by eye: the first 8 bytes of the
    /// key's SHA-256, as `xxxx:xxxx:xxxx:xxxx`.
    pub fn fingerprint(&self) -> String {
        let digest = Sha256::digest(self.0);
        digest[..8]
            .chunks(2)
            .map(hex::encode)
            .collect::<Vec<_>>()
            .join(":")
    }

    fn verify(&self, domain: &[u8], body: &[u8], signature: &[u8]) -> bool {
        ed25519::PublicKey::try_from_bytes(&self.0)
            .is_ok_and(|key| key.verify(&signed_bytes(domain, body), signature))
    }
}

impl fmt::Display for GridPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for GridPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GridPublicKey({})", self.fingerprint())
    }
}

impl FromStr for GridPublicKey {
    type Err = CredentialError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = hex::decode(s.trim())
            .map_err(|e| CredentialError::Malformed(format!("grid key: {e}")))?;
        GridPublicKey::try_from(bytes.as_slice())
    }
}

impl TryFrom<&[u8]> for GridPublicKey {
    type Error = CredentialError;

    fn try_from(bytes: &[u8]) -> Result<Self, Self::Error> {
        let key: [u8; 32] = bytes.try_into().map_err(|_| {
            CredentialError::Malformed(format!(
                "a grid key is 32 bytes (64 hex digits), not {}",
                bytes.len()
            ))
        })?;
        // Only a point on the curve is a key.
        ed25519::PublicKey::try_from_bytes(&key)
            .map_err(|e| CredentialError::Malformed(format!("grid key: {e}")))?;
        Ok(GridPublicKey(key))
    }
}

impl Serialize for GridPublicKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for GridPublicKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bytes = ByteBuf::deserialize(d)?;
        GridPublicKey::try_from(bytes.as_slice()).map_err(serde::de::Error::custom)
    }
}

/// A grid key pair. Its file holds the secret: mode 0600, written once and
/// never overwritten.
pub struct GridKey(pub(crate) ed25519::Keypair);

impl fmt::Debug for GridKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GridKey({})", self.public().fingerprint())
    }
}

impl GridKey {
    /// A new random grid key.
    pub fn generate() -> GridKey {
        GridKey(ed25519::Keypair::generate())
    }

    /// Its public half.
    pub fn public(&self) -> GridPublicKey {
        GridPublicKey(self.0.public().to_bytes())
    }

    /// Writes the key to a new file `path`, mode 0600; refuses to replace
    /// an existing file (a grid key lost is a grid lost).
    pub fn save(&self, path: &Path) -> Result<(), CredentialError> {
        let bytes = Keypair::from(self.0.clone())
            .to_protobuf_encoding()
            .map_err(|e| CredentialError::Malformed(e.to_string()))?;
        write_new_private(path, &bytes)
    }

    /// Reads a key written by [`GridKey::save`] (or any libp2p ed25519
    /// key file).
    pub fn load(path: &Path) -> Result<GridKey, CredentialError> {
        let bytes = read_bounded(path, 1024)?;
        let key = Keypair::from_protobuf_encoding(&bytes)
            .ok()
            .and_then(|k| k.try_into_ed25519().ok())
            .ok_or_else(|| CredentialError::File {
                path: path.to_owned(),
                reason: "does not hold an ed25519 key".into(),
            })?;
        Ok(GridKey(key))
    }

    /// A credential for `member`, signed by the grid key.
    pub fn issue(&self, member: PeerId, expires: u64, may_invite: bool) -> Credential {
        let body = CredentialBody {
            grid: self.public(),
            member,
            issued: unix_now(),
            expires,
            may_invite,
        };
        Credential::sign(&body, |bytes| self.0.sign(bytes), None)
    }

    /// A revocation of `target` (kept until `until`, Unix seconds: the
    /// revoked credential's expiry, or `u64::MAX` for a peer).
    pub fn revoke(&self, target: RevocationTarget, until: u64) -> Revocation {
        let body = RevocationBody {
            grid: self.public(),
            target,
            until,
            issued: unix_now(),
        };
        let bytes = encode(&body);
        let signature = self.0.sign(&signed_bytes(REVOCATION_DOMAIN, &bytes));
        Revocation {
            envelope: RevocationEnvelope {
                body: ByteBuf::from(bytes),
                signature: ByteBuf::from(signature),
            },
            body,
        }
    }
}

/// A credential's name in revocations: the first 16 bytes of the SHA-256 of
/// its signed body, written as 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CredentialId(#[serde(with = "serde_bytes")] [u8; 16]);

impl fmt::Display for CredentialId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for CredentialId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CredentialId({self})")
    }
}

impl FromStr for CredentialId {
    type Err = CredentialError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = hex::decode(s.trim())
            .map_err(|e| CredentialError::Malformed(format!("credential id: {e}")))?;
        let id: [u8; 16] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| CredentialError::Malformed("a credential id is 32 hex digits".into()))?;
        Ok(CredentialId(id))
    }
}

/// What a credential says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialBody {
    /// The grid.
    pub grid: GridPublicKey,
    /// The member: its libp2p peer id (its node's identity key).
    pub member: PeerId,
    /// When it was issued, Unix seconds.
    pub issued: u64,
    /// When it stops being valid, Unix seconds.
    pub expires: u64,
    /// Whether the member may issue credentials to others (only in a
    /// credential the grid key signed).
    pub may_invite: bool,
}

/// A credential as carried: the signed body's bytes, the signature, and
/// the inviter's credential if a member signed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Envelope {
    body: ByteBuf,
    signature: ByteBuf,
    inviter: Option<Box<Envelope>>,
}

/// A membership credential (see the module's docs). Its body is decoded
/// for display only; [`Credential::verify`] checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    envelope: Envelope,
    body: CredentialBody,
    inviter: Option<Box<Credential>>,
}

/// What a valid credential proves, for the whole chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// The member.
    pub member: PeerId,
    /// The grid.
    pub grid: GridPublicKey,
    /// When the first link of the chain expires, Unix seconds.
    pub expires: u64,
    /// Whether the member may invite others.
    pub may_invite: bool,
    /// The inviter, if a member signed the credential.
    pub inviter: Option<PeerId>,
    /// The credentials of the chain (the member's first).
    pub ids: Vec<CredentialId>,
}

/// Why a credential, key or revocation is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// It does not decode, or is too long.
    #[error("malformed: {0}")]
    Malformed(String),
    /// A signature does not check.
    #[error("its signature does not check")]
    BadSignature,
    /// It is of another grid.
    #[error("it is of grid {theirs}, not {ours}")]
    OtherGrid {
        /// The grid it names (fingerprint).
        theirs: String,
        /// Ours (fingerprint).
        ours: String,
    },
    /// It names another peer than the one showing it.
    #[error("it names peer {named}, not {shown_by}")]
    OtherPeer {
        /// The peer it names (boxed: a peer id is 80 bytes).
        named: Box<PeerId>,
        /// The peer that showed it.
        shown_by: Box<PeerId>,
    },
    /// A link has expired.
    #[error("it expired at {expired} (Unix seconds; now {now})")]
    Expired {
        /// When.
        expired: u64,
        /// Now.
        now: u64,
    },
    /// The inviter may not invite, or the chain is too long.
    #[error("not entitled: {0}")]
    NotEntitled(String),
    /// A revocation names a link.
    #[error("revoked: {0}")]
    Revoked(String),
    /// A file could not be read or written.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

fn signed_bytes(domain: &[u8], body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(domain.len() + body.len());
    bytes.extend_from_slice(domain);
    bytes.extend_from_slice(body);
    bytes
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing to a Vec fails only if serialising fails, which our plain
    // types never do.
    ciborium::into_writer(value, &mut out).expect("CBOR of a plain value");
    out
}

/// Decodes `bytes` after the length checks of the module's docs.
fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], max: usize) -> Result<T, CredentialError> {
    if bytes.len() > max {
        return Err(CredentialError::Malformed(format!(
            "{} bytes, more than the {max} allowed",
            bytes.len()
        )));
    }
    crate::wire::decode(bytes).map_err(|e| CredentialError::Malformed(e.to_string()))
}

/// The ed25519 key inside an ed25519 peer id (an identity multihash).
fn peer_key(peer: &PeerId) -> Option<PublicKey> {
    let hash: &libp2p::multihash::Multihash<64> = peer.as_ref();
    (hash.code() == 0)
        .then(|| PublicKey::try_decode_protobuf(hash.digest()).ok())
        .flatten()
}

impl Credential {
    fn sign(
        body: &CredentialBody,
        sign: impl FnOnce(&[u8]) -> Vec<u8>,
        inviter: Option<&Credential>,
    ) -> Credential {
        let bytes = encode(body);
        let signature = sign(&signed_bytes(CREDENTIAL_DOMAIN, &bytes));
        Credential {
            envelope: Envelope {
                body: ByteBuf::from(bytes),
                signature: ByteBuf::from(signature),
                inviter: inviter.map(|i| Box::new(i.envelope.clone())),
            },
            body: body.clone(),
            inviter: inviter.map(|i| Box::new(i.clone())),
        }
    }

    /// A credential for `member` signed by the node whose identity key is
    /// `key` and whose credential is `self`; its expiry is at most this
    /// one's. Refused unless this credential may invite.
    pub fn invite(
        &self,
        key: &Keypair,
        member: PeerId,
        expires: u64,
    ) -> Result<Credential, CredentialError> {
        if !self.body.may_invite || self.inviter.is_some() {
            return Err(CredentialError::NotEntitled(
                "this credential does not let its member invite others".into(),
            ));
        }
        if key.public().to_peer_id() != self.body.member {
            return Err(CredentialError::OtherPeer {
                named: Box::new(self.body.member),
                shown_by: Box::new(key.public().to_peer_id()),
            });
        }
        let body = CredentialBody {
            grid: self.body.grid,
            member,
            issued: unix_now(),
            expires: expires.min(self.body.expires),
            may_invite: false,
        };
        let key = key.clone().try_into_ed25519().map_err(|_| {
            CredentialError::NotEntitled("only an ed25519 node key can invite".into())
        })?;
        Ok(Credential::sign(&body, |bytes| key.sign(bytes), Some(self)))
    }

    /// A credential for `member` signed with `key` under this one, without
    /// checking that this one may invite: what anyone holding a member's
    /// key can make by hand. For tests of the check that refuses it.
    #[doc(hidden)]
    pub fn invite_unchecked(&self, key: &Keypair, member: PeerId, expires: u64) -> Credential {
        let body = CredentialBody {
            grid: self.body.grid,
            member,
            issued: unix_now(),
            expires,
            may_invite: false,
        };
        Credential::sign(
            &body,
            |bytes| key.sign(bytes).unwrap_or_default(),
            Some(self),
        )
    }

    /// What it says (not checked: see [`Credential::verify`]).
    pub fn body(&self) -> &CredentialBody {
        &self.body
    }

    /// The inviter's credential, if a member signed this one.
    pub fn inviter(&self) -> Option<&Credential> {
        self.inviter.as_deref()
    }

    /// Its name in revocations.
    pub fn id(&self) -> CredentialId {
        let digest = Sha256::digest(&self.envelope.body);
        let mut id = [0; 16];
        id.copy_from_slice(&digest[..16]);
        CredentialId(id)
    }

    /// Its encoding, as sent and as written to a file.
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(&self.envelope)
    }

    /// Decodes a credential (at most [`MAX_CREDENTIAL_BYTES`], at most two
    /// links). Nothing is checked but the shape: see
    /// [`Credential::verify`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Credential, CredentialError> {
        let envelope: Envelope = decode(bytes, MAX_CREDENTIAL_BYTES)?;
        Credential::from_envelope(envelope, 0)
    }

    fn from_envelope(envelope: Envelope, depth: usize) -> Result<Credential, CredentialError> {
        if depth > 1 {
            return Err(CredentialError::NotEntitled(
                "the chain is longer than grid key, inviter, member".into(),
            ));
        }
        let body: CredentialBody = decode(&envelope.body, MAX_CREDENTIAL_BYTES)?;
        let inviter = match &envelope.inviter {
            Some(inviter) => Some(Box::new(Credential::from_envelope(
                (**inviter).clone(),
                depth + 1,
            )?)),
            None => None,
        };
        Ok(Credential {
            envelope,
            body,
            inviter,
        })
    }

    /// Reads a credential file.
    pub fn load(path: &Path) -> Result<Credential, CredentialError> {
        let bytes = read_bounded(path, MAX_CREDENTIAL_BYTES)?;
        Credential::from_bytes(&bytes).map_err(|e| CredentialError::File {
            path: path.to_owned(),
            reason: e.to_string(),
        })
    }

    /// Writes it to a new file, mode 0600 (it is no secret, but it is
    /// this node's alone to show).
    pub fn save(&self, path: &Path) -> Result<(), CredentialError> {
        write_new_private(path, &self.to_bytes())
    }

    /// Checks the whole chain for `grid` at `now` (Unix seconds) against
    /// `revoked`: every signature (the grid key's, and an inviter's by the
    /// key in its peer id), every expiry, the inviter's right to invite, no
    /// revoked link. The caller checks that [`Membership::member`] is the
    /// peer that showed it.
    pub fn verify(
        &self,
        grid: &GridPublicKey,
        now: u64,
        revoked: &dyn Fn(&PeerId, &CredentialId) -> bool,
    ) -> Result<Membership, CredentialError> {
        let check_link = |c: &Credential| -> Result<(), CredentialError> {
            if c.body.grid != *grid {
                return Err(CredentialError::OtherGrid {
                    theirs: c.body.grid.fingerprint(),
                    ours: grid.fingerprint(),
                });
            }
            if c.body.expires <= now {
                return Err(CredentialError::Expired {
                    expired: c.body.expires,
                    now,
                });
            }
            if revoked(&c.body.member, &c.id()) {
                return Err(CredentialError::Revoked(format!(
                    "peer {} or credential {}",
                    c.body.member,
                    c.id()
                )));
            }
            Ok(())
        };
        let mut ids = vec![self.id()];
        let (expires, inviter) = match &self.inviter {
            None => {
                if !grid.verify(
                    CREDENTIAL_DOMAIN,
                    &self.envelope.body,
                    &self.envelope.signature,
                ) {
                    return Err(CredentialError::BadSignature);
                }
                (self.body.expires, None)
            }
            Some(inviter) => {
                if inviter.inviter.is_some() {
                    return Err(CredentialError::NotEntitled(
                        "the chain is longer than grid key, inviter, member".into(),
                    ));
                }
                if !grid.verify(
                    CREDENTIAL_DOMAIN,
                    &inviter.envelope.body,
                    &inviter.envelope.signature,
                ) {
                    return Err(CredentialError::BadSignature);
                }
                check_link(inviter)?;
                if !inviter.body.may_invite {
                    return Err(CredentialError::NotEntitled(format!(
                        "its inviter {} may not invite",
                        inviter.body.member
                    )));
                }
                if self.body.may_invite {
                    return Err(CredentialError::NotEntitled(
                        "only the grid key lets a member invite".into(),
                    ));
                }
                let key = peer_key(&inviter.body.member).ok_or_else(|| {
                    CredentialError::NotEntitled(
                        "its inviter's peer id holds no ed25519 key".into(),
                    )
                })?;
                if !key.verify(
                    &signed_bytes(CREDENTIAL_DOMAIN, &self.envelope.body),
                    &self.envelope.signature,
                ) {
                    return Err(CredentialError::BadSignature);
                }
                ids.push(inviter.id());
                (
                    self.body.expires.min(inviter.body.expires),
                    Some(inviter.body.member),
                )
            }
        };
        check_link(self)?;
        Ok(Membership {
            member: self.body.member,
            grid: *grid,
            expires,
            may_invite: self.body.may_invite,
            inviter,
            ids,
        })
    }
}

/// What a revocation names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RevocationTarget {
    /// Every credential of a peer.
    Peer(PeerId),
    /// One credential.
    Credential(CredentialId),
}

impl fmt::Display for RevocationTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RevocationTarget::Peer(peer) => write!(f, "peer {peer}"),
            RevocationTarget::Credential(id) => write!(f, "credential {id}"),
        }
    }
}

/// What a revocation says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevocationBody {
    /// The grid.
    pub grid: GridPublicKey,
    /// What is revoked.
    pub target: RevocationTarget,
    /// Until when it must be kept, Unix seconds: a revoked credential's
    /// expiry (after which it is refused anyway), or `u64::MAX`.
    pub until: u64,
    /// When it was made, Unix seconds.
    pub issued: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct RevocationEnvelope {
    body: ByteBuf,
    signature: ByteBuf,
}

/// A revocation signed by the grid key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    envelope: RevocationEnvelope,
    body: RevocationBody,
}

impl Revocation {
    /// What it says.
    pub fn body(&self) -> &RevocationBody {
        &self.body
    }

    /// Its encoding.
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(&self.envelope)
    }

    /// Decodes a revocation of `grid` and checks its signature.
    pub fn from_bytes(bytes: &[u8], grid: &GridPublicKey) -> Result<Revocation, CredentialError> {
        let envelope: RevocationEnvelope = decode(bytes, MAX_REVOCATION_BYTES)?;
        if !grid.verify(REVOCATION_DOMAIN, &envelope.body, &envelope.signature) {
            return Err(CredentialError::BadSignature);
        }
        let body: RevocationBody = decode(&envelope.body, MAX_REVOCATION_BYTES)?;
        if body.grid != *grid {
            return Err(CredentialError::OtherGrid {
                theirs: body.grid.fingerprint(),
                ours: grid.fingerprint(),
            });
        }
        Ok(Revocation { envelope, body })
    }

    /// Reads a revocation file of `grid`.
    pub fn load(path: &Path, grid: &GridPublicKey) -> Result<Revocation, CredentialError> {
        let bytes = read_bounded(path, MAX_REVOCATION_BYTES)?;
        Revocation::from_bytes(&bytes, grid).map_err(|e| CredentialError::File {
            path: path.to_owned(),
            reason: e.to_string(),
        })
    }

    /// Writes it to a new file.
    pub fn save(&self, path: &Path) -> Result<(), CredentialError> {
        write_new_private(path, &self.to_bytes())
    }
}

/// Reads at most `max` bytes of `path`; a longer file is refused.
pub(crate) fn read_bounded(path: &Path, max: usize) -> Result<Vec<u8>, CredentialError> {
    use std::io::Read;
    let file_error = |reason: String| CredentialError::File {
        path: path.to_owned(),
        reason,
    };
    let file = fs::File::open(path).map_err(|e| file_error(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| file_error(e.to_string()))?;
    if bytes.len() > max {
        return Err(file_error(format!("longer than {max} bytes")));
    }
    Ok(bytes)
}

/// Writes `bytes` to a new file `path`, mode 0600; an existing file is
/// never replaced.
fn write_new_private(path: &Path, bytes: &[u8]) -> Result<(), CredentialError> {
    let file_error = |e: std::io::Error| CredentialError::File {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    crate::identity::write_private_new(path, bytes).map_err(file_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400;

    fn none(_: &PeerId, _: &CredentialId) -> bool {
        false
    }

    #[test]
    fn a_credential_of_the_grid_key_checks_and_round_trips() {
        let grid = GridKey::generate();
        let member = Keypair::generate_ed25519().public().to_peer_id();
        let now = unix_now();
        let credential = grid.issue(member, now + DAY, false);
        let bytes = credential.to_bytes();
        assert!(bytes.len() < 400, "{}", bytes.len());
        let decoded = Credential::from_bytes(&bytes).unwrap();
        assert_eq!(decoded, credential);
        let membership = decoded.verify(&grid.public(), now, &none).unwrap();
        assert_eq!(membership.member, member);
        assert_eq!(membership.expires, now + DAY);
        assert_eq!(membership.inviter, None);
        // Another grid's key does not accept it.
        let other = GridKey::generate();
        assert!(matches!(
            decoded.verify(&other.public(), now, &none),
            Err(CredentialError::BadSignature)
        ));
    }

    #[test]
    fn an_invited_member_checks_only_through_an_entitled_inviter() {
        let grid = GridKey::generate();
        let now = unix_now();
        let inviter_key = Keypair::generate_ed25519();
        let inviter = grid.issue(inviter_key.public().to_peer_id(), now + 10 * DAY, true);
        let member = Keypair::generate_ed25519().public().to_peer_id();
        let invited = inviter
            .invite(&inviter_key, member, now + 100 * DAY)
            .unwrap();
        let decoded = Credential::from_bytes(&invited.to_bytes()).unwrap();
        let membership = decoded.verify(&grid.public(), now, &none).unwrap();
        assert_eq!(membership.member, member);
        assert_eq!(membership.inviter, Some(inviter_key.public().to_peer_id()));
        // Capped by the inviter's expiry.
        assert_eq!(membership.expires, now + 10 * DAY);
        assert_eq!(membership.ids.len(), 2);

        // A member without may-invite cannot invite, and a hand-made
        // chain through it is refused.
        let plain_key = Keypair::generate_ed25519();
        let plain = grid.issue(plain_key.public().to_peer_id(), now + DAY, false);
        assert!(matches!(
            plain.invite(&plain_key, member, now + DAY),
            Err(CredentialError::NotEntitled(_))
        ));
        let body = CredentialBody {
            grid: grid.public(),
            member,
            issued: now,
            expires: now + DAY,
            may_invite: false,
        };
        let forged = Credential::sign(&body, |b| plain_key.sign(b).unwrap(), Some(&plain));
        assert!(matches!(
            forged.verify(&grid.public(), now, &none),
            Err(CredentialError::NotEntitled(_))
        ));
        // Signed by someone else than the inviter it names.
        let forged = Credential::sign(&body, |b| plain_key.sign(b).unwrap(), Some(&inviter));
        assert_eq!(
            forged.verify(&grid.public(), now, &none),
            Err(CredentialError::BadSignature)
        );
        // An invited member cannot pass the right to invite on.
        let body = CredentialBody {
            may_invite: true,
            ..body
        };
        let forged = Credential::sign(&body, |b| inviter_key.sign(b).unwrap(), Some(&inviter));
        assert!(matches!(
            forged.verify(&grid.public(), now, &none),
            Err(CredentialError::NotEntitled(_))
        ));
    }

    #[test]
    fn expired_and_revoked_links_are_refused() {
        let grid = GridKey::generate();
        let now = unix_now();
        let inviter_key = Keypair::generate_ed25519();
        let inviter = grid.issue(inviter_key.public().to_peer_id(), now + DAY, true);
        let member = Keypair::generate_ed25519().public().to_peer_id();
        let invited = inviter.invite(&inviter_key, member, now + DAY).unwrap();
        assert!(matches!(
            invited.verify(&grid.public(), now + DAY, &none),
            Err(CredentialError::Expired { .. })
        ));
        let inviter_peer = inviter_key.public().to_peer_id();
        let revoked_inviter = |p: &PeerId, _: &CredentialId| *p == inviter_peer;
        assert!(matches!(
            invited.verify(&grid.public(), now, &revoked_inviter),
            Err(CredentialError::Revoked(_))
        ));
        let id = invited.id();
        let revoked_id = |_: &PeerId, c: &CredentialId| *c == id;
        assert!(matches!(
            invited.verify(&grid.public(), now, &revoked_id),
            Err(CredentialError::Revoked(_))
        ));
    }

    #[test]
    fn revocations_check_their_signature_and_grid() {
        let grid = GridKey::generate();
        let peer = PeerId::random();
        let revocation = grid.revoke(RevocationTarget::Peer(peer), u64::MAX);
        let bytes = revocation.to_bytes();
        assert!(bytes.len() <= MAX_REVOCATION_BYTES);
        assert_eq!(
            Revocation::from_bytes(&bytes, &grid.public()).unwrap(),
            revocation
        );
        assert_eq!(
            Revocation::from_bytes(&bytes, &GridKey::generate().public()),
            Err(CredentialError::BadSignature)
        );
        // A credential's signature is no revocation's.
        let credential = grid.issue(peer, u64::MAX, false);
        let envelope = RevocationEnvelope {
            body: credential.envelope.body.clone(),
            signature: credential.envelope.signature.clone(),
        };
        assert_eq!(
            Revocation::from_bytes(&encode(&envelope), &grid.public()),
            Err(CredentialError::BadSignature)
        );
    }

    #[test]
    fn oversized_and_hostile_encodings_are_refused_before_decoding() {
        assert!(matches!(
            Credential::from_bytes(&vec![0u8; MAX_CREDENTIAL_BYTES + 1]),
            Err(CredentialError::Malformed(_))
        ));
        // A map declaring 2^32 entries in 6 bytes.
        assert!(Credential::from_bytes(&[0xba, 0xff, 0xff, 0xff, 0xff, 0x00]).is_err());
        // A chain of three links.
        let grid = GridKey::generate();
        let a = grid.issue(PeerId::random(), u64::MAX, true);
        let mut envelope = a.envelope.clone();
        envelope.inviter = Some(Box::new(Envelope {
            inviter: Some(Box::new(a.envelope.clone())),
            ..a.envelope.clone()
        }));
        assert!(matches!(
            Credential::from_bytes(&encode(&envelope)),
            Err(CredentialError::NotEntitled(_))
        ));
    }

    #[test]
    fn key_files_are_private_and_never_overwritten() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grid.key");
        let key = GridKey::generate();
        key.save(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(GridKey::load(&path).unwrap().public(), key.public());
        assert!(GridKey::generate().save(&path).is_err());
        let text = key.public().to_string();
        assert_eq!(text.parse::<GridPublicKey>().unwrap(), key.public());
        assert_eq!(key.public().fingerprint().len(), 19);
    }
}

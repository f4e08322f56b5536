//! Closed grids: who may join.
//!
//! An open grid (no [`GridConfig`]) lets in whoever reaches a node and
//! knows the network's name. A closed grid lets in only a node that shows
//! a valid membership [`Credential`] (signed by the grid key, or by a
//! member the grid key let invite; [`credential`]) for its own peer id,
//! and cuts a node off when its credential expires or is revoked
//! ([`revocations`]).
//!
//! The check is made when a connection is set up, on every transport alike
//! (TCP, QUIC, relayed circuits): the overlay's behaviours run behind a
//! gate (the private module `gate`) whose connection handler speaks only
//! `/zorilla/<network>/membership/1` until the peer's credential checks;
//! before that no other protocol (flood, rpc, ranks, identify, ping,
//! relay, ...) is offered to the peer, and none of ours is opened to it.
//! libp2p's `pnet` (a pre-shared key) would protect TCP only, and a shared
//! secret cannot be taken back from one member; signed credentials can.

use std::time::Duration;

pub mod credential;
pub(crate) mod gate;
pub mod revocations;

pub use credential::{
    Credential, CredentialError, CredentialId, GridKey, GridPublicKey, Membership, Revocation,
    RevocationTarget,
};
pub use revocations::Revocations;

/// How long a new connection's peer has to show a valid credential (and
/// accept ours) before the connection is closed and the peer counted as
/// misbehaving.
pub const DEFAULT_MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(10);

/// A closed grid's settings.
#[derive(Debug, Clone)]
pub struct GridConfig {
    /// The grid's public key: credentials must be signed by it (or by an
    /// inviter it signed).
    pub key: GridPublicKey,
    /// This node's own credential, shown to every peer. `Overlay::start`
    /// does not check it (a test may start a node with a bad one, to see
    /// its peers refuse it); a node should, with [`check_own_credential`],
    /// and refuse to start when it fails.
    pub credential: Credential,
    /// How long a peer has to show its credential; see
    /// [`DEFAULT_MEMBERSHIP_TIMEOUT`].
    pub timeout: Duration,
}

impl GridConfig {
    /// A closed grid `key` for a node holding `credential`.
    pub fn new(key: GridPublicKey, credential: Credential) -> GridConfig {
        GridConfig {
            key,
            credential,
            timeout: DEFAULT_MEMBERSHIP_TIMEOUT,
        }
    }
}

/// The membership protocol's name on network `network`.
pub(crate) fn membership_protocol(network: &str) -> String {
    format!("/zorilla/{network}/membership/1")
}

/// Checks this node's own credential as its peers will: of the grid, for
/// this node's peer id `local`, not expired, not revoked (by a revocation
/// kept in `state_dir`). A node should refuse to start when this fails:
/// every peer would refuse it.
pub fn check_own_credential(
    grid: &GridConfig,
    local: libp2p::PeerId,
    state_dir: Option<&std::path::Path>,
) -> Result<Membership, CredentialError> {
    let revocations = Revocations::load(grid.key, state_dir);
    let membership = grid
        .credential
        .verify(&grid.key, credential::unix_now(), &|p, id| {
            revocations.revokes(p, id)
        })?;
    if membership.member != local {
        return Err(CredentialError::OtherPeer {
            named: Box::new(membership.member),
            shown_by: Box::new(local),
        });
    }
    Ok(membership)
}

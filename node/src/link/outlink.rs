//! The sending side's state: every channel from this node to one peer,
//! in an [`Outbox`].

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use tokio::sync::Notify;
use tokio::time::Instant;
use zorilla_core::channel::{ChannelId, Outbox};
use zorilla_overlay::PeerId;

#[derive(Default)]
pub(super) struct OutState {
    pub(super) outbox: Outbox,
    /// Channels closed for good (their receiver ended, or the peer could
    /// not be reached): sends on them fail.
    pub(super) closed: HashSet<ChannelId>,
    /// Channels whose rank the peer does not have, since when: after
    /// [`GIVE_UP`](super::GIVE_UP) they are closed.
    pub(super) not_here: HashMap<ChannelId, Instant>,
    /// When an ack last took something of each job off the outbox (or a
    /// channel of it closed): see [`Links::quiet`](super::Links::quiet).
    pub(super) settled: HashMap<u64, Instant>,
}

/// The sending side of every channel from this node to one peer.
pub(crate) struct OutLink {
    pub(super) peer: PeerId,
    pub(super) state: Mutex<OutState>,
    /// The writer: something to send.
    pub(super) wake: Notify,
    /// Senders: credit came, or channels closed.
    pub(super) credit: Notify,
}

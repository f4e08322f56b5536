//! The receiving side's state: every channel from one peer to this node,
//! and the acknowledgements and refusals owed to it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use zorilla_core::channel::{ChannelId, Inbound};
use zorilla_overlay::PeerId;
use zorilla_overlay::streams::protocol::Refusal;

use super::lock::lock;

/// How long a receiver may hold back an acknowledgement that no sender
/// waits for (acks that free credit a sender may need go at once).
const ACK_DELAY: Duration = Duration::from_millis(5);

pub(super) struct RecvChannel {
    pub(super) inbound: Inbound,
    /// The limit last sent to the peer.
    pub(super) advertised: u64,
}

#[derive(Default)]
pub(super) struct RecvState {
    pub(super) channels: HashMap<ChannelId, RecvChannel>,
    /// Channels owing the peer an ack.
    pub(super) pending: BTreeSet<ChannelId>,
    /// An owed ack is needed at once (a sender may wait for its credit).
    pub(super) urgent: bool,
    /// When owed acks go at the latest.
    pub(super) due: Option<Instant>,
    /// Channels refused, and why; data on them is dropped until the sender
    /// starts again from the first message not yet received.
    pub(super) refused: BTreeMap<ChannelId, Refusal>,
    /// Refusals not yet sent.
    pub(super) refusals: BTreeMap<ChannelId, Refusal>,
    /// The stream currently served (a newer one supersedes it).
    pub(super) stream: u64,
    /// Lanes joined to the current stream.
    pub(super) lanes: u8,
    /// Lane connections open from the peer (of any stream, or none yet).
    pub(super) lane_conns: u8,
}

impl RecvState {
    /// Notes that `channel` owes an ack. Returns whether the ack writer
    /// must wake.
    pub(super) fn owe(&mut self, channel: ChannelId, urgent: bool) -> bool {
        let first = self.pending.is_empty();
        self.pending.insert(channel);
        if let Some(c) = self.channels.get(&channel) {
            let room = c.advertised.saturating_sub(c.inbound.completed());
            let window = c
                .inbound
                .limit()
                .saturating_sub(c.inbound.consumed_position());
            // A sender may be short of credit: tell it at once.
            if c.inbound.limit() > c.advertised && room.saturating_mul(2) <= window {
                self.urgent = true;
            }
        }
        self.urgent |= urgent;
        if first {
            self.due = Some(Instant::now() + ACK_DELAY);
        }
        first || self.urgent
    }
}

/// This node's receiving side of every channel from one peer. Outlives the
/// streams (so sequence numbers survive a reconnection).
pub(crate) struct PeerInbound {
    /// The peer.
    pub(super) peer: PeerId,
    pub(super) state: Mutex<RecvState>,
    /// The ack writer: acks or refusals owed.
    pub(super) wake: Notify,
    /// Lanes: a newer stream superseded theirs.
    pub(super) superseded: Notify,
}

impl PeerInbound {
    pub(super) fn new(peer: PeerId) -> Self {
        PeerInbound {
            peer,
            state: Mutex::new(RecvState::default()),
            wake: Notify::new(),
            superseded: Notify::new(),
        }
    }

    /// The worker of `channel.to` read `len` bytes of it; its limit is
    /// now `credit`.
    pub(super) fn consumed(&self, channel: ChannelId, len: u64, credit: u64) {
        let wake = {
            let mut s = lock(&self.state);
            match s.channels.get_mut(&channel) {
                Some(c) => {
                    c.inbound.consumed(len);
                    c.inbound.raise_limit(credit);
                    s.owe(channel, false)
                }
                None => false,
            }
        };
        if wake {
            self.wake.notify_one();
        }
    }

    /// Raises `channel`'s limit to `credit` and tells its sender (at once
    /// if `urgent`); `false` if the channel is gone.
    pub(super) fn raise(&self, channel: ChannelId, credit: u64, urgent: bool) -> bool {
        let wake = {
            let mut s = lock(&self.state);
            let Some(c) = s.channels.get_mut(&channel) else {
                return false;
            };
            c.inbound.raise_limit(credit);
            s.owe(channel, urgent)
        };
        if wake {
            self.wake.notify_one();
        }
        true
    }
}

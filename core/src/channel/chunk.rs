//! What a channel's stream carries: chunks and acknowledgements, their
//! limits, and the ways a peer can break the protocol.

/// The largest message a channel carries (64 MiB).
pub const MAX_MESSAGE_BYTES: u64 = 64 * 1024 * 1024;

/// The credit of a new channel: what its sender may send before any ack,
/// and the least window a channel has (see the module docs).
pub const INITIAL_WINDOW: u64 = 16 * 1024;

/// The largest window a rank lends one channel from its budget.
pub const MAX_WINDOW: u64 = 8 * 1024 * 1024;

/// What a receiving rank lends its channels beyond their initial windows.
pub const RANK_BUDGET: u64 = 16 * 1024 * 1024;

/// What every message counts for in credit besides its bytes: about what
/// the receiver keeps for it beyond its bytes.
pub const MESSAGE_OVERHEAD: u64 = 64;

/// What a message of `len` bytes counts for in credit.
pub fn footprint(len: u64) -> u64 {
    len.saturating_add(MESSAGE_OVERHEAD)
}

/// The largest chunk of a message on the wire.
pub const CHUNK_BYTES: usize = 256 * 1024;

/// Messages of at least this many bytes are *striped* where the link has
/// lanes (see the module docs, "Striping"): their chunks go over several
/// connections at once. Below it a message takes under a millisecond on
/// one connection, less than the round trip striping costs it.
pub const STRIPE_BYTES: u64 = 1024 * 1024;

/// One direction between two workers of a job: a rank's worker to
/// another's. A rank lost and given to a new worker gets a new
/// *incarnation* (the number of the grant that placed it, see
/// [`crate::advert::Message::Grant`]), so the channels of the new worker
/// are new channels, numbered from 0 at both ends: nothing sent to or by
/// the lost worker is taken for the new one's, and neither end carries
/// sequence numbers over from the old.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChannelId {
    /// The job.
    pub job: u64,
    /// The sending rank.
    pub from: u32,
    /// The sending worker's incarnation of its rank.
    pub from_incarnation: u32,
    /// The receiving rank.
    pub to: u32,
    /// The incarnation of the receiving rank the sender addresses.
    pub to_incarnation: u32,
}

/// A receiver's acknowledgement and credit for one channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    /// The channel.
    pub channel: ChannelId,
    /// Every message numbered below this arrived.
    pub next: u64,
    /// The sender may send up to this position (see the module docs).
    pub limit: u64,
}

/// One chunk, as the sender hands it out and the receiver takes it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// The channel.
    pub channel: ChannelId,
    /// The message's number in its channel.
    pub seq: u64,
    /// Where `bytes` go in the message.
    pub offset: u64,
    /// The message's full length.
    pub total: u64,
    /// The chunk's bytes.
    pub bytes: &'a [u8],
}

/// A peer broke the protocol: the stream it came on is dropped and the
/// peer reported.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// A message larger than [`MAX_MESSAGE_BYTES`].
    #[error("a message of {0} bytes is over the limit")]
    TooLarge(u64),
    /// A chunk of a message other than the one expected next.
    #[error("message {got} arrived while {expected} was expected")]
    OutOfOrder {
        /// The number it carried.
        got: u64,
        /// The number expected.
        expected: u64,
    },
    /// A chunk that does not continue its message where the last one ended.
    #[error("a chunk at offset {got} does not continue the message at {expected}")]
    BadOffset {
        /// The offset it carried.
        got: u64,
        /// Where the message stands.
        expected: u64,
    },
    /// A chunk that is empty (of a non-empty message), too large, or whose
    /// message's length changed.
    #[error("a malformed chunk")]
    BadChunk,
    /// A message started without credit.
    #[error("a message started beyond the credit granted")]
    NoCredit,
    /// An acknowledgement of messages never sent.
    #[error("an acknowledgement of message {0} that was never sent")]
    AckBeyondSent(u64),
}

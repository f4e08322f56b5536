//! Exactly-once, in-order, flow-controlled message channels between ranks.
//!
//! A *channel* carries the messages of one rank to another rank of the same
//! job ([`ChannelId`]). Between two nodes, every channel from the one to the
//! other shares one long-lived ordered stream; this module is what runs on
//! either end of it, without IO: the sender's [`Outbox`] (one per peer node)
//! and the receiver's [`Inbound`] (one per channel). The driver (the node)
//! moves bytes, and tells these state machines what happened.
//!
//! # Sequencing
//!
//! Messages of a channel are numbered from 0 (`seq`). A message is cut into
//! chunks of at most [`CHUNK_BYTES`] that carry `(seq, offset, total)`. The
//! receiver accepts only the next message it expects, chunk after chunk in
//! order; a message with a smaller number is a duplicate and is dropped. It
//! acknowledges cumulatively: "every message before `next` arrived". The
//! sender keeps each message until it is acknowledged; when the stream
//! breaks, [`Outbox::rewind`] sends every unacknowledged message again from
//! its first byte on the next stream, and the receiver drops the half-built
//! copy it had. So each message is delivered exactly once and in order,
//! across any number of reconnections.
//!
//! # Credit
//!
//! Positions count a channel's messages from its start, each message as its
//! [`footprint`]: its bytes plus [`MESSAGE_OVERHEAD`], so that empty
//! messages cost credit too (else a sender could queue any number of them
//! at a rank that never reads). The receiver lets a channel's sender send
//! up to a *limit*, a position carried in every [`Ack`] that never goes
//! down: a limit granted cannot be taken back. The sender may start a
//! message that ends within the limit. Every new channel starts with the
//! limit [`INITIAL_WINDOW`], which the sender assumes before any ack, so
//! small messages go without a round trip. After that the receiver raises
//! the limit to `consumed + window` as its worker reads, where the
//! channel's *window* is what the receiving rank lends it (below).
//!
//! A sender that must wait for credit while everything it sent is
//! acknowledged *asks*: it sends the first chunk of its next message
//! without bytes, which carries the message's length ([`Outbox::ask`],
//! [`Received::Asked`]). The receiver checks the limit on every first chunk
//! ([`Violation::NoCredit`]), so a channel never holds more than its limit
//! minus what the worker read, and the retransmission buffer of the sender
//! is bounded the same way. Credit is per channel, so a slow reader stalls
//! only its own senders; the stream never waits for a reader (its data has
//! been granted room already), so there is no head-of-line blocking between
//! jobs or ranks sharing it. Chunks of different channels are interleaved
//! round robin, so a 64 MiB message does not hold up a small one of another
//! channel for more than one chunk.
//!
//! # What a receiving rank holds
//!
//! Every channel to one rank (from workers on other nodes and on its own)
//! is lent credit by one [`RankReceiver`], the rank's receive policy:
//!
//! - Each channel has at least [`INITIAL_WINDOW`] (the sender assumes it).
//! - The rank lends larger windows, up to [`MAX_WINDOW`] each, from a
//!   budget ([`RANK_BUDGET`]) shared by all of its channels, to a channel
//!   whose sender asks for a message larger than its window: the window
//!   becomes twice the message (or twice the old window), so that such
//!   messages stream, or the message alone if the budget is short. An ask
//!   for a message that fits the window once the worker reads what it holds
//!   needs nothing: reading raises the limit.
//! - What the budget cannot cover (a message above [`MAX_WINDOW`], up to
//!   [`MAX_MESSAGE_BYTES`], or any when the budget is lent out) waits in
//!   order, and the rank grants such messages one at a time, beyond the
//!   budget, the next once the worker has read the last.
//! - While askers wait, every channel the worker reads gives back half of
//!   its window (not below [`INITIAL_WINDOW`]), so the budget moves to the
//!   waiting channels, oldest first: every sender progresses.
//!
//! A limit granted cannot be taken back, so a window lent counts against
//! the budget until the worker has read up to the limit it allowed. So a
//! receiving rank holds at most [`RANK_BUDGET`] + `channels` ×
//! [`INITIAL_WINDOW`] + one granted message ([`MAX_MESSAGE_BYTES`]), where
//! `channels` is the number of workers sending to it (at most
//! [`crate::limits::MAX_WORKERS`]): 16 MiB + 10,000 × 16 KiB + 64 MiB, about
//! 236 MiB, for the largest job, and about 96 MiB for a job of a thousand
//! ranks, whatever they send ([`RankReceiver::bound`]).
//!
//! Why so:
//!
//! - The initial window is what a sender may send to a rank it never
//!   heard from, so it is the one part of the bound that grows with the
//!   number of senders. It is small (16 KiB covers the eager messages of
//!   MPI programs: collectives of a few values, halo rows, control), and
//!   no smaller because every message above it waits a round trip on a
//!   channel's first use. A bound independent of the senders altogether
//!   would need the receiver to drop first messages beyond a pool and
//!   have them sent again later, delaying exactly the small messages that
//!   must be fast.
//! - A sender asks only when everything it sent is acknowledged: before
//!   that, an ack on its way may bring the credit, and the ask would be
//!   noise. The receiver keeps an ask until its credit covers it, so one
//!   ask per message suffices (and one per new stream).
//! - Windows rather than one grant per message: a channel that sends
//!   messages of a MiB keeps a window of two of them, so they stream
//!   without a round trip each; the budget caps what all such windows
//!   take together. A window lent to a sender that then goes quiet stays
//!   counted until that sender uses it (it is lent only to a sender that
//!   asked, so about to use it); meanwhile others still progress through
//!   the grant beyond the budget.
//! - The grant beyond the budget serves the messages no window can (up to
//!   64 MiB) and guarantees progress when the budget is lent out: it goes
//!   to the oldest asker and frees once the worker read that message, so
//!   a worker that reads (in any order of arrival) never deadlocks its
//!   senders. A sender that asks and then never sends the granted message
//!   (a `send` that timed out) keeps the grant until the worker has read
//!   that far of its channel: the rank's other large messages wait until
//!   then (only its own job's ranks can do that to it).
//!
//! # Driving contract
//!
//! Sender: [`Outbox::admits`] says whether a message may be queued now;
//! [`Outbox::push`] queues it; [`Outbox::next_chunk`] gives the next chunk
//! to write (round robin over channels); [`Outbox::on_ack`] takes an ack
//! from the peer; [`Outbox::rewind`] after the stream was lost.
//! Receiver: [`Inbound::on_chunk`] for each chunk read;
//! [`Inbound::consumed`] when the worker takes a message;
//! [`Inbound::ack`] for the ack to send; [`Inbound::stream_lost`] when the
//! stream it came on ended. The receiving rank's [`RankReceiver`] is told
//! of asks ([`RankReceiver::asked`]) and reads
//! ([`RankReceiver::consumed`]) and answers with the channels whose credit
//! rose: the driver raises their [`Inbound::raise_limit`] to
//! [`RankReceiver::credit`] and acknowledges them.

use std::collections::{BTreeMap, VecDeque};

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

// ----- sender -----

/// A queued message: kept until acknowledged.
#[derive(Debug)]
struct Queued {
    seq: u64,
    data: Vec<u8>,
}

#[derive(Debug)]
struct SendChannel {
    /// Unacknowledged messages, in order.
    queue: VecDeque<Queued>,
    /// The number of the next message pushed.
    next_seq: u64,
    /// The position after the last message pushed (see [`footprint`]).
    end: u64,
    /// The position of the first message in `queue` (or `end`).
    acked_pos: u64,
    /// The credit granted: see the module docs.
    limit: u64,
    /// The next message to transmit, and the offset in it.
    sent_seq: u64,
    sent_offset: u64,
    /// The next message waits for the receiver's credit and asked for it:
    /// its length, and whether the ask went out on the current stream.
    ask: Option<u64>,
    ask_sent: bool,
}

impl Default for SendChannel {
    /// A channel on which nothing was sent: the initial window is granted.
    fn default() -> Self {
        SendChannel {
            queue: VecDeque::new(),
            next_seq: 0,
            end: 0,
            acked_pos: 0,
            limit: INITIAL_WINDOW,
            sent_seq: 0,
            sent_offset: 0,
            ask: None,
            ask_sent: false,
        }
    }
}

impl SendChannel {
    fn admits(&self, len: u64) -> bool {
        self.end.saturating_add(footprint(len)) <= self.limit
    }

    fn has_unsent(&self) -> bool {
        self.sent_seq < self.next_seq
    }

    /// Whether an ask waits to go out (after every message pushed before).
    fn ask_due(&self) -> bool {
        self.ask.is_some() && !self.ask_sent && !self.has_unsent()
    }

    fn queued(&self, seq: u64) -> Option<&Queued> {
        let first = self.queue.front()?.seq;
        self.queue
            .get(usize::try_from(seq.checked_sub(first)?).ok()?)
    }
}

/// What [`Outbox::admits`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Push it now.
    Yes,
    /// Wait for credit (an ack from the peer): some of what was sent is
    /// not acknowledged yet.
    WaitForCredit,
    /// Everything sent was acknowledged and the credit is short:
    /// [`Outbox::ask`] the receiver for room, then wait for its credit (an
    /// ack whose limit covers the message).
    Ask,
    /// Larger than [`MAX_MESSAGE_BYTES`]: refuse at once.
    TooLarge,
}

/// The sending side of every channel from this node to one peer node.
#[derive(Debug, Default)]
pub struct Outbox {
    channels: BTreeMap<ChannelId, SendChannel>,
    /// Channels with something to transmit, in round-robin order.
    ready: VecDeque<ChannelId>,
}

impl Outbox {
    /// An outbox with no channels.
    pub fn new() -> Self {
        Outbox::default()
    }

    /// Whether a message of `len` bytes may be pushed on `channel` now.
    pub fn admits(&self, channel: ChannelId, len: u64) -> Admission {
        if len > MAX_MESSAGE_BYTES {
            return Admission::TooLarge;
        }
        let (admits, all_acked) = match self.channels.get(&channel) {
            Some(c) => (c.admits(len), c.queue.is_empty()),
            None => (SendChannel::default().admits(len), true),
        };
        if admits {
            Admission::Yes
        } else if all_acked {
            Admission::Ask
        } else {
            Admission::WaitForCredit
        }
    }

    /// Asks the receiver of `channel` for room for a message of `len`
    /// bytes (see the module docs); the ask goes out after every message
    /// pushed before it, and again on every new stream until the message
    /// is pushed. Asking again for the same message does nothing: the
    /// receiver keeps an ask until its credit covers it.
    pub fn ask(&mut self, channel: ChannelId, len: u64) {
        let c = self.channels.entry(channel).or_default();
        if c.ask == Some(len) {
            return;
        }
        c.ask = Some(len);
        c.ask_sent = false;
        if c.ask_due() && !self.ready.contains(&channel) {
            self.ready.push_back(channel);
        }
    }

    /// Queues a message; returns its number. Call only when
    /// [`admits`](Self::admits) says [`Admission::Yes`] (otherwise it is
    /// queued all the same and the receiver will refuse it).
    pub fn push(&mut self, channel: ChannelId, data: Vec<u8>) -> u64 {
        let c = self.channels.entry(channel).or_default();
        c.ask = None;
        let seq = c.next_seq;
        let was_idle = !c.has_unsent();
        c.next_seq += 1;
        c.end = c.end.saturating_add(footprint(data.len() as u64));
        c.queue.push_back(Queued { seq, data });
        if was_idle {
            self.ready.push_back(channel);
        }
        seq
    }

    /// Whether anything waits to be transmitted.
    pub fn has_unsent(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Whether every message pushed was acknowledged and no ask waits for
    /// its grant (nothing needs a stream).
    pub fn all_acked(&self) -> bool {
        self.channels
            .values()
            .all(|c| c.queue.is_empty() && c.ask.is_none())
    }

    /// Bytes kept for retransmission (with [`MESSAGE_OVERHEAD`] for each
    /// message).
    pub fn buffered_bytes(&self) -> u64 {
        self.channels
            .values()
            .map(|c| c.end.saturating_sub(c.acked_pos))
            .sum()
    }

    /// The next chunk to transmit, at most `max` bytes of payload, taking
    /// the channels with something to send in turn. The chunk counts as
    /// sent.
    pub fn next_chunk(&mut self, max: usize) -> Option<Chunk<'_>> {
        let max = max.clamp(1, CHUNK_BYTES) as u64;
        let channel = self.ready.pop_front()?;
        let c = self.channels.get_mut(&channel)?;
        if !c.has_unsent() {
            // Nothing left to send but an ask: the first chunk of the
            // message, without its bytes.
            let total = c.ask.filter(|_| !c.ask_sent)?;
            c.ask_sent = true;
            return Some(Chunk {
                channel,
                seq: c.next_seq,
                offset: 0,
                total,
                bytes: &[],
            });
        }
        let seq = c.sent_seq;
        let offset = c.sent_offset;
        let total = c.queued(seq)?.data.len() as u64;
        let len = total.saturating_sub(offset).min(max);
        if offset + len >= total {
            c.sent_seq += 1;
            c.sent_offset = 0;
        } else {
            c.sent_offset += len;
        }
        if c.has_unsent() || c.ask_due() {
            self.ready.push_back(channel);
        }
        let c = self.channels.get(&channel)?;
        let data = &c.queued(seq)?.data;
        Some(Chunk {
            channel,
            seq,
            offset,
            total,
            bytes: &data[offset as usize..(offset + len) as usize],
        })
    }

    /// Takes an ack from the peer: drops what it acknowledges and takes
    /// its credit. Returns whether the credit or the queue changed (senders
    /// waiting for credit should look again).
    pub fn on_ack(&mut self, ack: Ack) -> Result<bool, Violation> {
        let Some(c) = self.channels.get_mut(&ack.channel) else {
            return Ok(false); // a channel closed here meanwhile
        };
        // (An ack may run ahead of `sent_seq` after a rewind: the receiver
        // got those messages on the stream that broke.)
        if ack.next > c.next_seq {
            return Err(Violation::AckBeyondSent(ack.next));
        }
        let mut changed = false;
        while c.queue.front().is_some_and(|q| q.seq < ack.next) {
            if let Some(q) = c.queue.pop_front() {
                c.acked_pos = c.acked_pos.saturating_add(footprint(q.data.len() as u64));
                changed = true;
            }
        }
        if c.sent_seq < ack.next {
            // Acknowledged while waiting for retransmission.
            c.sent_seq = ack.next;
            c.sent_offset = 0;
        }
        if ack.limit > c.limit {
            c.limit = ack.limit;
            changed = true;
        }
        Ok(changed)
    }

    /// The stream was lost: every unacknowledged message is transmitted
    /// again, from its first byte, on the next one.
    pub fn rewind(&mut self) {
        self.ready.clear();
        for (id, c) in &mut self.channels {
            c.sent_seq = c.queue.front().map_or(c.next_seq, |q| q.seq);
            c.sent_offset = 0;
            c.ask_sent = false;
            if c.has_unsent() || c.ask_due() {
                self.ready.push_back(*id);
            }
        }
    }

    /// Sends `channel`'s unacknowledged messages again from the first (the
    /// receiver refused them: its rank was not there yet).
    pub fn rewind_channel(&mut self, channel: ChannelId) {
        let Some(c) = self.channels.get_mut(&channel) else {
            return;
        };
        c.sent_seq = c.queue.front().map_or(c.next_seq, |q| q.seq);
        c.sent_offset = 0;
        c.ask_sent = false;
        if (c.has_unsent() || c.ask_due()) && !self.ready.contains(&channel) {
            self.ready.push_back(channel);
        }
    }

    /// Forgets `channel` (its job ended, or its receiver is gone for good);
    /// returns how many messages were still unacknowledged.
    pub fn close(&mut self, channel: ChannelId) -> usize {
        self.ready.retain(|c| *c != channel);
        self.channels.remove(&channel).map_or(0, |c| c.queue.len())
    }

    /// Forgets every channel of `job`.
    pub fn close_job(&mut self, job: u64) {
        self.ready.retain(|c| c.job != job);
        self.channels.retain(|c, _| c.job != job);
    }

    /// Drops the ask of `channel` (the message goes elsewhere).
    pub fn cancel_ask(&mut self, channel: ChannelId) {
        if let Some(c) = self.channels.get_mut(&channel) {
            c.ask = None;
        }
    }

    /// The channels that still hold unacknowledged messages or an ask.
    pub fn open_channels(&self) -> Vec<ChannelId> {
        self.channels
            .iter()
            .filter(|(_, c)| !c.queue.is_empty() || c.ask.is_some())
            .map(|(id, _)| *id)
            .collect()
    }
}

// ----- receiver -----

/// What [`Inbound::on_chunk`] made of a chunk.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// Part of a message; more to come.
    Partial,
    /// The last chunk of a message: here it is, whole.
    Complete(Vec<u8>),
    /// A chunk of a message that arrived before: dropped (ack again, so
    /// that the sender frees it).
    Duplicate,
    /// The sender asks for room for its next message, of `total` bytes,
    /// which would start at [`Inbound::completed`]: the driver tells the
    /// rank's [`RankReceiver::asked`].
    Asked {
        /// The message's length.
        total: u64,
    },
}

#[derive(Debug)]
struct Partial {
    seq: u64,
    total: u64,
    data: Vec<u8>,
}

/// The receiving side of one channel: sequencing, and the limit the
/// rank's [`RankReceiver`] lent it. Outlives the streams it comes on.
#[derive(Debug)]
pub struct Inbound {
    /// The number of the next message to complete.
    expected: u64,
    /// The position after the last complete message.
    completed: u64,
    /// The position after the last message the worker took.
    consumed: u64,
    /// The message being built.
    partial: Option<Partial>,
    /// The position up to which the sender may send: never lowered.
    limit: u64,
}

impl Default for Inbound {
    fn default() -> Self {
        Inbound {
            expected: 0,
            completed: 0,
            consumed: 0,
            partial: None,
            limit: INITIAL_WINDOW,
        }
    }
}

impl Inbound {
    /// A channel on which nothing arrived yet.
    pub fn new() -> Self {
        Inbound::default()
    }

    /// The number of the next message expected (every one before it
    /// arrived).
    pub fn next(&self) -> u64 {
        self.expected
    }

    /// The position after the last complete message (where the next one
    /// starts).
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// The credit this end grants (see the module docs).
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Raises the credit to `limit` (the rank's [`RankReceiver::credit`]);
    /// a lower one changes nothing, so that a limit granted is never taken
    /// back.
    pub fn raise_limit(&mut self, limit: u64) {
        self.limit = self.limit.max(limit);
    }

    /// The position after the last message the worker took.
    pub fn consumed_position(&self) -> u64 {
        self.consumed
    }

    /// The ack to send for `channel`.
    pub fn ack(&self, channel: ChannelId) -> Ack {
        Ack {
            channel,
            next: self.expected,
            limit: self.limit(),
        }
    }

    /// Bytes held: complete messages the worker has not taken (with
    /// [`MESSAGE_OVERHEAD`] each), and the message being built.
    pub fn buffered_bytes(&self) -> u64 {
        let partial = self.partial.as_ref().map_or(0, |p| p.data.len() as u64);
        self.completed.saturating_sub(self.consumed) + partial
    }

    /// Takes a chunk read from the stream.
    pub fn on_chunk(&mut self, chunk: Chunk<'_>) -> Result<Received, Violation> {
        let Chunk {
            seq,
            offset,
            total,
            bytes,
            ..
        } = chunk;
        if total > MAX_MESSAGE_BYTES {
            return Err(Violation::TooLarge(total));
        }
        let len = bytes.len() as u64;
        if offset == 0 && len == 0 && total != 0 {
            // An ask for room for the next message.
            if seq < self.expected {
                return Ok(Received::Duplicate);
            }
            if seq > self.expected {
                return Err(Violation::OutOfOrder {
                    got: seq,
                    expected: self.expected,
                });
            }
            // A message half built is dropped (the sender starts it anew).
            self.partial = None;
            return Ok(Received::Asked { total });
        }
        if len > CHUNK_BYTES as u64 || (len == 0 && total != 0) {
            return Err(Violation::BadChunk);
        }
        if seq < self.expected {
            return Ok(Received::Duplicate);
        }
        if seq > self.expected {
            return Err(Violation::OutOfOrder {
                got: seq,
                expected: self.expected,
            });
        }
        let end = offset.checked_add(len).ok_or(Violation::BadChunk)?;
        if end > total {
            return Err(Violation::BadChunk);
        }
        if offset == 0 {
            // A message starts (again: after a reconnection the sender
            // begins it anew, and what was built of it is dropped).
            let start = self.completed;
            if start.saturating_add(footprint(total)) > self.limit {
                return Err(Violation::NoCredit);
            }
            // Room for this chunk only: the rest is allocated as it comes.
            let mut data = Vec::new();
            data.try_reserve_exact(bytes.len())
                .map_err(|_| Violation::BadChunk)?;
            self.partial = Some(Partial { seq, total, data });
        }
        let Some(partial) = self.partial.as_mut() else {
            return Err(Violation::BadOffset {
                got: offset,
                expected: 0,
            });
        };
        if partial.seq != seq || partial.total != total {
            return Err(Violation::BadChunk);
        }
        let have = partial.data.len() as u64;
        if offset != have {
            return Err(Violation::BadOffset {
                got: offset,
                expected: have,
            });
        }
        // Grow by doubling, but never past the announced length.
        if partial.data.capacity() < end as usize {
            let want = (end as usize)
                .max(partial.data.capacity() * 2)
                .min(total as usize);
            partial
                .data
                .try_reserve_exact(want - partial.data.len())
                .map_err(|_| Violation::BadChunk)?;
        }
        partial.data.extend_from_slice(bytes);
        if end < total {
            return Ok(Received::Partial);
        }
        let done = self.partial.take().map(|p| p.data).unwrap_or_default();
        self.expected += 1;
        self.completed = self.completed.saturating_add(footprint(total));
        Ok(Received::Complete(done))
    }

    /// The worker took a message of `len` bytes of this channel.
    pub fn consumed(&mut self, len: u64) {
        self.consumed = self
            .consumed
            .saturating_add(footprint(len))
            .min(self.completed);
    }

    /// The stream ended: a half-built message is dropped (the sender sends
    /// it again from its start).
    pub fn stream_lost(&mut self) {
        self.partial = None;
    }
}

// ----- a receiving rank's policy -----

/// What a rank lent one channel (positions as in [`Inbound`]).
#[derive(Debug, Clone)]
struct Lent {
    /// The position after the last message the worker read.
    consumed: u64,
    /// The window: the limit follows `consumed + window` as the worker
    /// reads.
    window: u64,
    /// The limit the window allowed, the highest so far.
    limit: u64,
    /// The end of a message granted beyond the budget (0 if none).
    granted: u64,
    /// The sender's ask not covered yet: where its message starts, and its
    /// footprint.
    asked: Option<(u64, u64)>,
}

impl Lent {
    fn new() -> Self {
        Lent {
            consumed: 0,
            window: INITIAL_WINDOW,
            limit: INITIAL_WINDOW,
            granted: 0,
            asked: None,
        }
    }

    fn credit(&self) -> u64 {
        self.limit.max(self.granted)
    }

    /// What the window takes of the budget: the credit it allowed beyond
    /// what the worker read and the initial window.
    fn charge(&self) -> u64 {
        self.limit
            .saturating_sub(self.consumed)
            .saturating_sub(INITIAL_WINDOW)
    }

    /// Whether the credit covers the ask (or nothing is asked).
    fn covered(&self) -> bool {
        self.asked
            .is_none_or(|(start, total)| start.saturating_add(total) <= self.credit())
    }
}

/// A receiving rank's credit policy over all the channels to it, without
/// IO (see the module docs, "What a receiving rank holds"): how far each
/// channel's sender may go, from the initial window, the rank's budget of
/// larger windows, and its one grant at a time beyond the budget.
///
/// `K` names a channel to the rank (the driver's choice: e.g. the sending
/// node and the [`ChannelId`]). A channel the receiver never heard of has
/// the initial window. Every event answers with the channels whose
/// [`credit`](Self::credit) rose: the driver raises their limits
/// ([`Inbound::raise_limit`]) and acknowledges them.
#[derive(Debug)]
pub struct RankReceiver<K> {
    budget: u64,
    channels: BTreeMap<K, Lent>,
    /// The sum of the channels' charges: at most `budget`.
    lent: u64,
    /// Channels whose ask neither the window nor the budget covers, oldest
    /// first (each once).
    waiting: VecDeque<K>,
    /// The channel whose message granted beyond the budget is not read yet.
    granted: Option<K>,
}

impl<K: Ord + Clone> Default for RankReceiver<K> {
    fn default() -> Self {
        RankReceiver::new(RANK_BUDGET)
    }
}

impl<K: Ord + Clone> RankReceiver<K> {
    /// A rank that lends at most `budget` bytes beyond the initial windows.
    pub fn new(budget: u64) -> Self {
        RankReceiver {
            budget,
            channels: BTreeMap::new(),
            lent: 0,
            waiting: VecDeque::new(),
            granted: None,
        }
    }

    /// How far `channel`'s sender may send.
    pub fn credit(&self, channel: &K) -> u64 {
        self.channels
            .get(channel)
            .map_or(INITIAL_WINDOW, Lent::credit)
    }

    /// The budget lent out now (at most the budget).
    pub fn lent(&self) -> u64 {
        self.lent
    }

    /// The most the rank can be made to hold now: every channel's credit
    /// beyond what its worker read. A channel it never heard of may still
    /// send its initial window; [`RankReceiver::bound`] is what this never
    /// exceeds.
    pub fn outstanding(&self) -> u64 {
        self.channels
            .values()
            .map(|l| l.credit().saturating_sub(l.consumed))
            .sum()
    }

    /// What a rank with `channels` channels can hold at most, whatever its
    /// senders do: the budget, the initial windows, and one message granted
    /// beyond the budget.
    pub fn bound(&self, channels: u64) -> u64 {
        self.budget
            .saturating_add(channels.saturating_mul(INITIAL_WINDOW))
            .saturating_add(footprint(MAX_MESSAGE_BYTES))
    }

    /// Whether `channel` waits for room.
    pub fn is_waiting(&self, channel: &K) -> bool {
        self.waiting.contains(channel)
    }

    /// Changes `channel`'s state by `f`, keeping the sum of charges.
    fn update(&mut self, channel: &K, f: impl FnOnce(&mut Lent)) {
        let l = self
            .channels
            .entry(channel.clone())
            .or_insert_with(Lent::new);
        let before = l.charge();
        f(l);
        l.limit = l.limit.max(l.consumed.saturating_add(l.window));
        let after = l.charge();
        self.lent = self.lent.saturating_sub(before).saturating_add(after);
    }

    /// Lends `channel` a window large enough for its ask, from the budget,
    /// if the budget allows: twice the message or twice the window (at
    /// most [`MAX_WINDOW`]), or else just the message.
    fn grow(&mut self, channel: &K) -> bool {
        let Some(l) = self.channels.get(channel) else {
            return false;
        };
        let Some((_, total)) = l.asked else {
            return false;
        };
        if total > MAX_WINDOW {
            return false;
        }
        let roomy = l
            .window
            .saturating_mul(2)
            .max(total.saturating_mul(2))
            .min(MAX_WINDOW);
        for window in [roomy, total] {
            if window <= l.window {
                continue;
            }
            let limit = l.limit.max(l.consumed.saturating_add(window));
            let charge = limit
                .saturating_sub(l.consumed)
                .saturating_sub(INITIAL_WINDOW);
            let lent = self.lent.saturating_sub(l.charge()).saturating_add(charge);
            if lent <= self.budget {
                self.update(channel, |l| l.window = window);
                return true;
            }
        }
        false
    }

    /// `channel`'s sender asks for room for a message of `total` bytes
    /// that would start at `start` (where the channel's last complete
    /// message ended). An ask covered already is answered with the channel
    /// (acknowledge it again); one for a message the window covers once the
    /// worker reads is kept until the reads cover it; a larger one gets a
    /// larger window from the budget, or waits its turn for it or for the
    /// rank's grant beyond the budget.
    pub fn asked(&mut self, channel: K, start: u64, total: u64) -> Vec<K> {
        let total = footprint(total);
        let mut waits = false;
        self.update(&channel, |l| {
            l.asked = Some((start, total));
            waits = total > l.window;
        });
        let l = &self.channels[&channel];
        if l.covered() {
            self.update(&channel, |l| l.asked = None);
            return vec![channel];
        }
        if !waits || self.waiting.contains(&channel) {
            return Vec::new();
        }
        if self.waiting.is_empty() && self.grow(&channel) {
            return vec![channel];
        }
        self.waiting.push_back(channel);
        self.serve()
    }

    /// The worker read a message of `len` bytes of `channel`.
    pub fn consumed(&mut self, channel: &K, len: u64) -> Vec<K> {
        let before = self.credit(channel);
        let pressed = !self.waiting.is_empty();
        self.update(channel, |l| {
            l.consumed = l.consumed.saturating_add(footprint(len));
            if pressed {
                // Give half of the window back to those waiting, but not
                // below what an ask kept for the reads needs.
                let keep = l.asked.map_or(0, |(_, total)| total.min(l.window));
                l.window = (l.window / 2).max(keep).max(INITIAL_WINDOW);
            }
        });
        if self.granted.as_ref() == Some(channel) {
            let l = &self.channels[channel];
            if l.consumed >= l.granted {
                self.granted = None;
            }
        }
        if self.channels[channel].covered() {
            self.update(channel, |l| l.asked = None);
        }
        let mut raised = Vec::new();
        if self.credit(channel) > before {
            raised.push(channel.clone());
        }
        if !self.waiting.is_empty() {
            raised.extend(self.serve());
        }
        raised
    }

    /// `channel` is gone (its sender or its stream state was dropped): its
    /// credit returns to the rank.
    pub fn forget(&mut self, channel: &K) -> Vec<K> {
        if let Some(l) = self.channels.remove(channel) {
            self.lent = self.lent.saturating_sub(l.charge());
        }
        self.waiting.retain(|c| c != channel);
        if self.granted.as_ref() == Some(channel) {
            self.granted = None;
        }
        self.serve()
    }

    /// Serves the waiting asks in order: from the budget if it allows,
    /// else with the grant beyond the budget if no message holds it.
    fn serve(&mut self) -> Vec<K> {
        let mut raised = Vec::new();
        while let Some(channel) = self.waiting.front().cloned() {
            let Some(l) = self.channels.get(&channel) else {
                self.waiting.pop_front();
                continue;
            };
            if l.covered() || l.asked.is_some_and(|(_, total)| total <= l.window) {
                // Covered meanwhile, or the reads will.
                self.waiting.pop_front();
                continue;
            }
            if self.grow(&channel) {
                self.waiting.pop_front();
                raised.push(channel);
                continue;
            }
            if self.granted.is_some() {
                break;
            }
            self.waiting.pop_front();
            self.update(&channel, |l| {
                if let Some((start, total)) = l.asked.take() {
                    l.granted = start.saturating_add(total);
                }
            });
            self.granted = Some(channel.clone());
            raised.push(channel);
        }
        raised
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CH: ChannelId = ChannelId {
        job: 7,
        from: 0,
        from_incarnation: 0,
        to: 1,
        to_incarnation: 0,
    };

    /// Moves every transmittable chunk from `outbox` into `inbound`;
    /// returns the messages completed.
    fn pump(outbox: &mut Outbox, inbound: &mut Inbound) -> Vec<Vec<u8>> {
        let mut done = Vec::new();
        while let Some(chunk) = outbox.next_chunk(CHUNK_BYTES) {
            if let Received::Complete(m) = inbound.on_chunk(chunk).unwrap() {
                done.push(m);
            }
        }
        done
    }

    fn message(seq: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| seq.wrapping_add(i as u8)).collect()
    }

    #[test]
    fn messages_arrive_in_order_and_acks_free_them() {
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        for i in 0..5u8 {
            assert_eq!(out.admits(CH, 10), Admission::Yes);
            assert_eq!(out.push(CH, message(i, 10)), u64::from(i));
        }
        let got = pump(&mut out, &mut inb);
        assert_eq!(got, (0..5).map(|i| message(i, 10)).collect::<Vec<_>>());
        assert_eq!(out.buffered_bytes(), 5 * footprint(10));
        assert!(out.on_ack(inb.ack(CH)).unwrap());
        assert!(out.all_acked());
        assert_eq!(out.buffered_bytes(), 0);
    }

    #[test]
    fn a_large_message_is_chunked_and_allocated_as_it_arrives() {
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        let big = message(3, 3 * CHUNK_BYTES + 5);
        // (The receiving rank lent the room.)
        inb.raise_limit(MAX_WINDOW);
        out.on_ack(inb.ack(CH)).unwrap();
        out.push(CH, big.clone());
        let first = out.next_chunk(CHUNK_BYTES).unwrap();
        assert_eq!((first.offset, first.bytes.len()), (0, CHUNK_BYTES));
        assert_eq!(inb.on_chunk(first).unwrap(), Received::Partial);
        // Only what arrived is held, not what the first chunk announced.
        assert!(inb.buffered_bytes() <= CHUNK_BYTES as u64);
        let rest = pump(&mut out, &mut inb);
        assert_eq!(rest, vec![big]);
    }

    #[test]
    fn a_rewind_resends_what_was_not_acked_and_duplicates_are_dropped() {
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        inb.raise_limit(MAX_WINDOW);
        out.on_ack(inb.ack(CH)).unwrap();
        out.push(CH, message(0, 10));
        out.push(CH, message(1, CHUNK_BYTES + 10));
        out.push(CH, message(2, 10));
        // Message 0 arrives, message 1 half, then the stream breaks; the
        // ack of message 0 is lost with it.
        let c = out.next_chunk(CHUNK_BYTES).unwrap();
        assert_eq!(inb.on_chunk(c).unwrap(), Received::Complete(message(0, 10)));
        let c = out.next_chunk(CHUNK_BYTES).unwrap();
        assert_eq!(inb.on_chunk(c).unwrap(), Received::Partial);
        inb.stream_lost();
        out.rewind();
        // On the new stream: 0 again (a duplicate), then 1 and 2 whole.
        let c = out.next_chunk(CHUNK_BYTES).unwrap();
        assert_eq!(c.seq, 0);
        assert_eq!(inb.on_chunk(c).unwrap(), Received::Duplicate);
        let got = pump(&mut out, &mut inb);
        assert_eq!(got, vec![message(1, CHUNK_BYTES + 10), message(2, 10)]);
        out.on_ack(inb.ack(CH)).unwrap();
        assert!(out.all_acked());
    }

    #[test]
    fn a_rewind_after_an_ack_sends_only_the_rest() {
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        for i in 0..4 {
            out.push(CH, message(i, 100));
        }
        let got = pump(&mut out, &mut inb);
        assert_eq!(got.len(), 4);
        // The ack after message 1 got through; 2 and 3 arrived unacked.
        out.on_ack(Ack {
            channel: CH,
            next: 2,
            limit: INITIAL_WINDOW,
        })
        .unwrap();
        out.rewind();
        let mut seqs = Vec::new();
        while let Some(c) = out.next_chunk(CHUNK_BYTES) {
            seqs.push(c.seq);
            assert_eq!(inb.on_chunk(c).unwrap(), Received::Duplicate);
        }
        assert_eq!(seqs, vec![2, 3]);
    }

    /// The worker reads `len` bytes of `CH`: the rank lends credit, the
    /// channel takes it.
    fn read(rank: &mut RankReceiver<ChannelId>, inb: &mut Inbound, len: u64) {
        inb.consumed(len);
        rank.consumed(&CH, len);
        inb.raise_limit(rank.credit(&CH));
    }

    #[test]
    fn a_sender_waits_for_credit_and_the_receiver_enforces_it() {
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        let mut rank = RankReceiver::default();
        let half = INITIAL_WINDOW / 2 - MESSAGE_OVERHEAD;
        out.push(CH, message(0, half as usize));
        out.push(CH, message(1, half as usize));
        assert_eq!(out.admits(CH, 0), Admission::WaitForCredit);
        assert_eq!(pump(&mut out, &mut inb).len(), 2);
        out.on_ack(inb.ack(CH)).unwrap();
        // Received but not read: still no credit; everything is
        // acknowledged, so the sender asks.
        assert_eq!(out.admits(CH, 0), Admission::Ask);
        // A sender that ignores it is caught.
        out.push(CH, message(2, 1));
        let c = out.next_chunk(CHUNK_BYTES).unwrap();
        assert_eq!(inb.on_chunk(c), Err(Violation::NoCredit));
        // Once the worker reads one, credit comes back.
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        out.push(CH, message(0, half as usize));
        out.push(CH, message(1, half as usize));
        pump(&mut out, &mut inb);
        read(&mut rank, &mut inb, half);
        assert!(out.on_ack(inb.ack(CH)).unwrap());
        assert_eq!(out.admits(CH, half), Admission::Yes);
        assert_eq!(out.admits(CH, half + 1), Admission::Ask);
        assert_eq!(rank.lent(), 0, "small messages take nothing of the budget");
    }

    #[test]
    fn a_message_larger_than_the_window_goes_when_the_receiver_lends_room() {
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        let mut rank = RankReceiver::default();
        let big = 3 * INITIAL_WINDOW;
        out.push(CH, vec![7; 10]);
        assert_eq!(out.admits(CH, big), Admission::WaitForCredit);
        let first = out.next_chunk(CHUNK_BYTES).unwrap();
        assert_eq!(
            inb.on_chunk(first).unwrap(),
            Received::Complete(vec![7; 10])
        );
        out.on_ack(inb.ack(CH)).unwrap();
        assert_eq!(out.admits(CH, big), Admission::Ask);
        out.ask(CH, big);
        out.ask(CH, big);
        // The ask goes once, without bytes.
        let ask = out.next_chunk(CHUNK_BYTES).unwrap();
        assert_eq!(
            (ask.seq, ask.offset, ask.total, ask.bytes.len()),
            (1, 0, big, 0)
        );
        assert_eq!(inb.on_chunk(ask).unwrap(), Received::Asked { total: big });
        assert!(out.next_chunk(CHUNK_BYTES).is_none());
        // A lost stream sends the ask again.
        out.rewind();
        let again = out.next_chunk(CHUNK_BYTES).unwrap();
        assert_eq!(inb.on_chunk(again).unwrap(), Received::Asked { total: big });
        // The rank lends a window of twice the message.
        assert_eq!(rank.asked(CH, inb.completed(), big), vec![CH]);
        assert_eq!(rank.asked(CH, inb.completed(), big), vec![CH], "again");
        inb.raise_limit(rank.credit(&CH));
        assert_eq!(rank.lent(), 2 * footprint(big) - INITIAL_WINDOW);
        out.on_ack(inb.ack(CH)).unwrap();
        assert_eq!(out.admits(CH, big), Admission::Yes);
        out.push(CH, vec![1; big as usize]);
        let got = pump(&mut out, &mut inb);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].len() as u64, big);
        // Once read, the window stays: the next one goes at once.
        read(&mut rank, &mut inb, 10);
        read(&mut rank, &mut inb, big);
        out.on_ack(inb.ack(CH)).unwrap();
        assert_eq!(out.admits(CH, big), Admission::Yes);
        assert_eq!(out.admits(CH, MAX_MESSAGE_BYTES + 1), Admission::TooLarge);
    }

    #[test]
    fn a_large_message_without_credit_is_refused() {
        let mut inb = Inbound::new();
        let chunk = Chunk {
            channel: CH,
            seq: 0,
            offset: 0,
            total: INITIAL_WINDOW,
            bytes: &[0; 16],
        };
        assert_eq!(inb.on_chunk(chunk), Err(Violation::NoCredit));
        // An ask out of order is a violation too; one for a message that
        // arrived already is a duplicate.
        let ask = |seq| Chunk {
            channel: CH,
            seq,
            offset: 0,
            total: INITIAL_WINDOW,
            bytes: &[],
        };
        assert!(matches!(
            inb.on_chunk(ask(3)),
            Err(Violation::OutOfOrder { .. })
        ));
        assert_eq!(
            inb.on_chunk(ask(0)),
            Ok(Received::Asked {
                total: INITIAL_WINDOW
            })
        );
        let mut rank = RankReceiver::default();
        assert_eq!(rank.asked(CH, 0, INITIAL_WINDOW), vec![CH]);
        inb.raise_limit(rank.credit(&CH));
        assert!(matches!(inb.on_chunk(chunk), Ok(Received::Partial)));
        // A limit is never lowered.
        inb.raise_limit(0);
        assert!(inb.limit() >= footprint(INITIAL_WINDOW));
    }

    #[test]
    fn channels_interleave_chunk_by_chunk() {
        let other = ChannelId { job: 8, ..CH };
        let mut out = Outbox::new();
        out.push(CH, vec![0; 3 * CHUNK_BYTES]);
        out.push(other, vec![1; 10]);
        let order: Vec<_> =
            std::iter::from_fn(|| out.next_chunk(CHUNK_BYTES).map(|c| c.channel)).collect();
        assert_eq!(order, vec![CH, other, CH, CH]);
    }

    #[test]
    fn hostile_chunks_are_refused() {
        let chunk = |seq, offset, total, bytes| Chunk {
            channel: CH,
            seq,
            offset,
            total,
            bytes,
        };
        let mut inb = Inbound::new();
        assert_eq!(
            inb.on_chunk(chunk(0, 0, MAX_MESSAGE_BYTES + 1, &[1])),
            Err(Violation::TooLarge(MAX_MESSAGE_BYTES + 1))
        );
        assert!(matches!(
            inb.on_chunk(chunk(1, 0, 1, &[1])),
            Err(Violation::OutOfOrder { .. })
        ));
        assert_eq!(
            inb.on_chunk(chunk(0, 0, 1, &[1, 2])),
            Err(Violation::BadChunk)
        );
        // An empty first chunk of a non-empty message is an ask; an empty
        // chunk anywhere else is not a chunk.
        assert_eq!(inb.on_chunk(chunk(0, 1, 5, &[])), Err(Violation::BadChunk));
        assert!(matches!(
            inb.on_chunk(chunk(0, 2, 5, &[1])),
            Err(Violation::BadOffset { .. })
        ));
        assert_eq!(inb.on_chunk(chunk(0, 0, 5, &[1, 2])), Ok(Received::Partial));
        assert!(matches!(
            inb.on_chunk(chunk(0, 3, 5, &[1])),
            Err(Violation::BadOffset { .. })
        ));
        assert_eq!(inb.on_chunk(chunk(0, 2, 6, &[1])), Err(Violation::BadChunk));
        // A 64 MiB announcement (granted) holds only what came.
        let mut inb = Inbound::new();
        assert_eq!(
            inb.on_chunk(chunk(0, 0, MAX_MESSAGE_BYTES, &[])),
            Ok(Received::Asked {
                total: MAX_MESSAGE_BYTES
            })
        );
        inb.raise_limit(footprint(MAX_MESSAGE_BYTES));
        assert_eq!(
            inb.on_chunk(chunk(0, 0, MAX_MESSAGE_BYTES, &[1; 10])),
            Ok(Received::Partial)
        );
        assert!(inb.buffered_bytes() <= 10);
        // An ack of messages never pushed.
        let mut out = Outbox::new();
        out.push(CH, vec![1]);
        assert_eq!(
            out.on_ack(Ack {
                channel: CH,
                next: 5,
                limit: 0
            }),
            Err(Violation::AckBeyondSent(5))
        );
    }

    #[test]
    fn empty_messages_are_carried() {
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        out.push(CH, Vec::new());
        out.push(CH, vec![9]);
        assert_eq!(pump(&mut out, &mut inb), vec![vec![], vec![9]]);
    }

    /// Random faults: streams break at random points, acks are lost; every
    /// message is delivered exactly once, in order, and memory stays within
    /// the bounds.
    #[test]
    fn random_breaks_never_lose_or_duplicate() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(14);
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        let mut rank = RankReceiver::default();
        let mut sent = 0u8;
        let mut got = Vec::new();
        let mut read = 0;
        for _ in 0..5_000 {
            match rng.random_range(0..10) {
                0..=3 => {
                    let len = rng.random_range(0..CHUNK_BYTES * 2) as u64;
                    match out.admits(CH, len) {
                        Admission::Yes if sent < 200 => {
                            out.push(CH, vec![sent; len as usize]);
                            sent += 1;
                        }
                        Admission::Ask => out.ask(CH, len),
                        _ => {}
                    }
                }
                4..=6 => {
                    if let Some(c) = out.next_chunk(rng.random_range(1..CHUNK_BYTES)) {
                        match inb.on_chunk(c).unwrap() {
                            Received::Complete(m) => got.push(m),
                            Received::Asked { total } => {
                                for c in rank.asked(CH, inb.completed(), total) {
                                    inb.raise_limit(rank.credit(&c));
                                }
                            }
                            _ => {}
                        }
                    }
                }
                7 => {
                    // The worker reads what arrived; the ack may get lost.
                    for m in &got[read..] {
                        inb.consumed(m.len() as u64);
                        rank.consumed(&CH, m.len() as u64);
                    }
                    read = got.len();
                    inb.raise_limit(rank.credit(&CH));
                    if rng.random_bool(0.5) {
                        out.on_ack(inb.ack(CH)).unwrap();
                    }
                }
                8 => {
                    inb.stream_lost();
                    out.rewind();
                }
                _ => {
                    out.on_ack(inb.ack(CH)).unwrap();
                }
            }
            assert!(inb.buffered_bytes() <= rank.bound(1));
            assert!(rank.lent() <= RANK_BUDGET);
            assert!(out.buffered_bytes() <= MAX_WINDOW + 2 * footprint(CHUNK_BYTES as u64));
        }
        // Drain.
        for _ in 0..10_000 {
            for m in &got[read..] {
                inb.consumed(m.len() as u64);
                rank.consumed(&CH, m.len() as u64);
            }
            read = got.len();
            inb.raise_limit(rank.credit(&CH));
            out.on_ack(inb.ack(CH)).unwrap();
            match out.next_chunk(CHUNK_BYTES) {
                Some(c) => match inb.on_chunk(c).unwrap() {
                    Received::Complete(m) => got.push(m),
                    Received::Asked { total } => {
                        rank.asked(CH, inb.completed(), total);
                        inb.raise_limit(rank.credit(&CH));
                    }
                    _ => {}
                },
                None => break,
            }
        }
        assert!(sent > 20, "{sent}");
        assert_eq!(got.len(), usize::from(sent));
        for (i, m) in got.iter().enumerate() {
            assert!(m.iter().all(|b| usize::from(*b) == i), "message {i} wrong");
        }
    }

    // ----- a receiving rank's policy -----

    /// One sending worker: its channel to the rank, at both ends, and the
    /// lengths of the messages it still has to send (made when sent, each
    /// naming its sender and number).
    struct Sender {
        ch: ChannelId,
        out: Outbox,
        inb: Inbound,
        todo: VecDeque<usize>,
        pushed: u32,
        next_expected: u32,
    }

    /// Many senders to one rank, chunks moved at once (no network), and a
    /// worker that reads the rank's inbox in arrival order.
    struct Grid {
        rank: RankReceiver<usize>,
        senders: Vec<Sender>,
        inbox: VecDeque<(usize, Vec<u8>)>,
        /// Messages read per sender.
        read: Vec<u32>,
    }

    fn tagged(sender: usize, n: u32, len: usize) -> Vec<u8> {
        let mut m = vec![(sender % 251) as u8; len.max(8)];
        m[..4].copy_from_slice(&(sender as u32).to_le_bytes());
        m[4..8].copy_from_slice(&n.to_le_bytes());
        m
    }

    impl Grid {
        /// `senders` workers, each with `sizes(sender, n)`-byte messages.
        fn new(senders: usize, count: u32, sizes: impl Fn(usize, u32) -> usize) -> Grid {
            Grid {
                rank: RankReceiver::default(),
                senders: (0..senders)
                    .map(|i| Sender {
                        ch: ChannelId {
                            job: 1,
                            from: i as u32,
                            from_incarnation: 0,
                            to: 0,
                            to_incarnation: 0,
                        },
                        out: Outbox::new(),
                        inb: Inbound::new(),
                        todo: (0..count).map(|n| sizes(i, n).max(8)).collect(),
                        pushed: 0,
                        next_expected: 0,
                    })
                    .collect(),
                inbox: VecDeque::new(),
                read: vec![0; senders],
            }
        }

        fn raise(&mut self, raised: Vec<usize>) {
            for i in raised {
                let credit = self.rank.credit(&i);
                self.senders[i].inb.raise_limit(credit);
            }
        }

        /// Sender `i` pushes what its credit allows (asking when it
        /// must), and its chunks and acks go across.
        fn send(&mut self, i: usize) {
            let s = &mut self.senders[i];
            while let Some(&len) = s.todo.front() {
                match s.out.admits(s.ch, len as u64) {
                    Admission::Yes => {
                        s.todo.pop_front();
                        s.out.push(s.ch, tagged(i, s.pushed, len));
                        s.pushed += 1;
                    }
                    Admission::Ask => {
                        s.out.ask(s.ch, len as u64);
                        break;
                    }
                    _ => break,
                }
            }
            let mut raised = Vec::new();
            while let Some(c) = s.out.next_chunk(CHUNK_BYTES) {
                match s.inb.on_chunk(c).unwrap() {
                    Received::Complete(m) => self.inbox.push_back((i, m)),
                    Received::Asked { total } => {
                        raised.extend(self.rank.asked(i, s.inb.completed(), total));
                    }
                    _ => {}
                }
            }
            self.raise(raised);
            let s = &mut self.senders[i];
            s.out.on_ack(s.inb.ack(s.ch)).unwrap();
        }

        /// The worker reads its next message; checks its order.
        fn read_one(&mut self) -> bool {
            let Some((i, m)) = self.inbox.pop_front() else {
                return false;
            };
            let n = u32::from_le_bytes(m[4..8].try_into().unwrap());
            assert_eq!(n, self.senders[i].next_expected, "sender {i} out of order");
            self.senders[i].next_expected += 1;
            self.read[i] += 1;
            self.senders[i].inb.consumed(m.len() as u64);
            let raised = self.rank.consumed(&i, m.len() as u64);
            self.raise(raised);
            true
        }

        /// Bytes the rank holds: unread messages and halves.
        fn held(&self) -> u64 {
            self.senders.iter().map(|s| s.inb.buffered_bytes()).sum()
        }

        fn check_bound(&self) {
            let bound = self.rank.bound(self.senders.len() as u64);
            assert!(self.held() <= bound, "{} > {bound}", self.held());
            // Whatever the senders do next, they cannot exceed it either.
            let unknown = self.senders.len() as u64 * INITIAL_WINDOW;
            assert!(self.rank.outstanding() <= bound + unknown);
            assert!(self.rank.lent() <= RANK_BUDGET);
            for s in &self.senders {
                // The receiver's limit is what the rank lent, no more.
                assert!(s.inb.limit() <= self.rank.credit(&(s.ch.from as usize)));
            }
        }

        fn done(&self) -> bool {
            self.senders.iter().all(|s| s.todo.is_empty()) && self.inbox.is_empty()
        }
    }

    /// Sizes from 0 B to 64 MiB: most small, some of a few MiB, a few
    /// larger than any window.
    fn mixed(i: usize, n: u32) -> usize {
        match (i as u32 * 7 + n * 13) % 10 {
            0..=4 => (i + n as usize * 100) % 2000,
            5..=6 => 100 * 1024,
            7 => 1 << 20,
            8 => 5 << 20,
            _ => 12 << 20,
        }
    }

    #[test]
    fn many_senders_cannot_make_a_rank_hold_more_than_the_bound() {
        let senders = 48;
        let mut grid = Grid::new(senders, 6, mixed);
        // The worker never reads: every sender pushes all its credit
        // allows, again and again.
        for _ in 0..5 {
            for i in 0..senders {
                grid.send(i);
                grid.check_bound();
            }
        }
        let held = grid.held();
        // The budget, the initial windows and the largest message (12 MiB)
        // granted beyond the budget, although the senders want far more.
        let tight = RANK_BUDGET + senders as u64 * INITIAL_WINDOW + footprint(12 << 20);
        let wanted: u64 = (0..senders)
            .flat_map(|i| (0..6).map(move |n| mixed(i, n) as u64))
            .sum();
        assert!(wanted > 4 * tight, "{wanted}");
        assert!(held <= tight, "{held}");
        assert!(held > RANK_BUDGET / 2, "the budget is used: {held}");
        // Then the worker reads: every sender's messages arrive, in order.
        for _ in 0..100_000 {
            if grid.done() {
                break;
            }
            if !grid.read_one() {
                for i in 0..senders {
                    grid.send(i);
                }
            }
            grid.check_bound();
        }
        assert!(grid.done(), "{:?}", grid.read);
        assert!(grid.read.iter().all(|&n| n == 6), "{:?}", grid.read);
        assert_eq!(grid.rank.lent(), grid.rank.lent().min(RANK_BUDGET));
    }

    #[test]
    fn a_slow_reader_lets_every_sender_progress() {
        let senders = 40;
        // Every sender has messages of a few hundred KiB: the budget
        // cannot give them all a window at once.
        let mut grid = Grid::new(senders, 10, |i, n| 200 * 1024 + (i + n as usize) * 1000);
        let mut step = 0u32;
        let mut progressed_by: Vec<Option<u32>> = vec![None; senders];
        for _ in 0..200_000 {
            if grid.done() {
                break;
            }
            step += 1;
            grid.send(step as usize % senders);
            // One read for every five sends.
            if step.is_multiple_of(5) {
                grid.read_one();
            }
            grid.check_bound();
            for (i, p) in progressed_by.iter_mut().enumerate() {
                if p.is_none() && grid.read[i] > 0 {
                    *p = Some(step);
                }
            }
        }
        assert!(grid.done(), "{:?}", grid.read);
        // Every sender's first message came long before the last sender
        // finished: no sender waited for all the others.
        let last = progressed_by.iter().map(|p| p.unwrap()).max().unwrap();
        assert!(last < step / 2, "{last} of {step}");
    }

    #[test]
    fn large_messages_are_granted_one_at_a_time_beyond_the_budget() {
        let mut rank: RankReceiver<u32> = RankReceiver::default();
        let big = 20 << 20;
        // Two asks for messages above any window: the first is granted,
        // the second waits.
        assert_eq!(rank.asked(1, 0, big), vec![1]);
        assert_eq!(rank.credit(&1), footprint(big));
        assert_eq!(rank.lent(), 0, "beyond the budget");
        assert_eq!(rank.asked(2, 0, big), Vec::<u32>::new());
        assert!(rank.is_waiting(&2));
        // A small ask behind it waits its turn too (no overtaking), but a
        // message that fits the initial window needs no ask at all.
        assert_eq!(rank.asked(3, 0, 1 << 20), Vec::<u32>::new());
        assert!(rank.is_waiting(&3));
        // Asked again (a new stream): the grant again.
        assert_eq!(rank.asked(1, 0, big), vec![1]);
        // Half read: still held. All read: the next two are served, 2 by
        // the grant, 3 from the budget.
        assert_eq!(rank.consumed(&1, big / 2), Vec::<u32>::new());
        let mut raised = rank.consumed(&1, big - big / 2);
        raised.sort();
        assert_eq!(raised, vec![1, 2, 3]);
        assert_eq!(rank.credit(&2), footprint(big));
        assert!(rank.credit(&3) >= footprint(1 << 20));
        // A holder that is gone holds nothing.
        assert_eq!(rank.asked(4, 0, big), Vec::<u32>::new());
        assert_eq!(rank.forget(&2), vec![4]);
        assert_eq!(rank.credit(&4), footprint(big));
    }

    #[test]
    fn windows_grow_for_large_messages_and_shrink_under_pressure() {
        let mut rank: RankReceiver<u32> = RankReceiver::default();
        // A sender of 4 MiB messages gets a window for two.
        let m = 4 << 20;
        assert_eq!(rank.asked(1, 0, m), vec![1]);
        assert_eq!(rank.credit(&1), MAX_WINDOW);
        // Its reads keep the window: the limit follows the reads.
        assert_eq!(rank.consumed(&1, m), vec![1]);
        assert_eq!(rank.credit(&1), footprint(m) + MAX_WINDOW);
        // A second one takes the rest of the budget.
        assert_eq!(rank.asked(2, 0, m), vec![2]);
        assert_eq!(rank.lent(), 2 * (MAX_WINDOW - INITIAL_WINDOW));
        // A third gets no window: the grant beyond the budget serves it,
        // at once since no message holds it.
        assert_eq!(rank.asked(3, 0, m), vec![3]);
        assert!(!rank.is_waiting(&3));
        assert_eq!(rank.credit(&3), footprint(m));
        // A fourth waits: the budget is lent and the grant held.
        assert_eq!(rank.asked(4, 0, m), Vec::<u32>::new());
        assert!(rank.is_waiting(&4));
        // While it waits, every read halves the reader's window: once
        // channel 1 read past what it was lent, the budget has room.
        let mut served = false;
        for _ in 0..8 {
            if rank.consumed(&1, m).contains(&4) {
                served = true;
                break;
            }
        }
        assert!(served, "the waiting channel got a window");
        assert!(rank.lent() <= RANK_BUDGET);
        // An ask that the window covers once the worker reads needs
        // nothing, and the reads cover it.
        let mut rank: RankReceiver<u32> = RankReceiver::default();
        assert_eq!(rank.asked(1, 0, 100), vec![1], "covered already");
        let start = INITIAL_WINDOW - 50;
        assert_eq!(rank.asked(1, start, 100), Vec::<u32>::new());
        assert!(!rank.is_waiting(&1));
        assert_eq!(rank.consumed(&1, 1000), vec![1]);
        assert!(rank.credit(&1) >= start + footprint(100));
        assert_eq!(rank.lent(), 0);
    }
}

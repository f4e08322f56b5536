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
//! The receiver lets a channel's sender run at most [`WINDOW_BYTES`] ahead
//! of what the receiving worker has read: its *limit* is the position (in
//! bytes of the channel's messages, counted from the start) `consumed +
//! WINDOW_BYTES`, carried in every [`Ack`]. The sender may start a message
//! that ends within the limit. A message larger than the window (up to
//! [`MAX_MESSAGE_BYTES`]) needs a *grant*: the sender asks for it with a
//! chunk that carries the message's length and none of its bytes, and the
//! receiver, when its budget allows ([`Inbound::grant`]), raises the limit
//! to the end of that message. So the receiver decides how many large
//! messages it holds at once (the node grants one per receiving rank at a
//! time). The receiver checks the limit on every first chunk, so a channel
//! never holds more than the window, or one granted message, at the
//! receiver, and the retransmission buffer of the sender is bounded the
//! same way. Credit is per channel, so a slow reader stalls only its own
//! senders; the stream never waits for a reader (its data has been granted
//! room already), so there is no head-of-line blocking between jobs or
//! ranks sharing it. Chunks of different channels are interleaved round
//! robin, so a 64 MiB message does not hold up a small one of another
//! channel for more than one chunk.
//!
//! # Driving contract
//!
//! Sender: [`Outbox::admits`] says whether a message may be queued now;
//! [`Outbox::push`] queues it; [`Outbox::next_chunk`] gives the next chunk
//! to write (round robin over channels); [`Outbox::on_ack`] takes an ack
//! from the peer; [`Outbox::rewind`] after the stream was lost.
//! Receiver: [`Inbound::on_chunk`] for each chunk read; [`Inbound::consumed`]
//! when the worker takes a message; [`Inbound::ack`] for the ack to send;
//! [`Inbound::stream_lost`] when the stream it came on ended.

use std::collections::{BTreeMap, VecDeque};

/// The largest message a channel carries (64 MiB).
pub const MAX_MESSAGE_BYTES: u64 = 64 * 1024 * 1024;

/// How far a sender may run ahead of the receiving worker, in bytes.
pub const WINDOW_BYTES: u64 = 4 * 1024 * 1024;

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
    /// The position after the last message pushed.
    end: u64,
    /// The position of the first message in `queue` (or `end`).
    acked_pos: u64,
    /// The credit granted: see the module docs.
    limit: u64,
    /// The next message to transmit, and the offset in it.
    sent_seq: u64,
    sent_offset: u64,
    /// A message larger than the window waits for the receiver's grant:
    /// its length, and whether the ask went out on the current stream.
    ask: Option<u64>,
    ask_sent: bool,
}

impl Default for SendChannel {
    /// A channel on which nothing was sent: the first window is granted.
    fn default() -> Self {
        SendChannel {
            queue: VecDeque::new(),
            next_seq: 0,
            end: 0,
            acked_pos: 0,
            limit: WINDOW_BYTES,
            sent_seq: 0,
            sent_offset: 0,
            ask: None,
            ask_sent: false,
        }
    }
}

impl SendChannel {
    fn admits(&self, len: u64) -> bool {
        self.end.saturating_add(len) <= self.limit
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
    /// Wait for credit (an ack from the peer).
    WaitForCredit,
    /// Larger than the window: [`Outbox::ask`] the receiver for it, then
    /// wait for its grant (an ack whose limit covers it).
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
        let admits = match self.channels.get(&channel) {
            Some(c) => c.admits(len),
            None => SendChannel::default().admits(len),
        };
        if admits {
            Admission::Yes
        } else if len > WINDOW_BYTES {
            Admission::Ask
        } else {
            Admission::WaitForCredit
        }
    }

    /// Asks the receiver of `channel` for room for a message of `len`
    /// bytes, larger than the window (see the module docs); the ask goes
    /// out after every message pushed before it. Asking again for the same
    /// message does nothing.
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
        c.end = c.end.saturating_add(data.len() as u64);
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

    /// Bytes kept for retransmission.
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
                c.acked_pos = c.acked_pos.saturating_add(q.data.len() as u64);
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
    /// larger than the window: the driver [`grant`](Inbound::grant)s it
    /// when its budget allows.
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

/// The receiving side of one channel. Outlives the streams it comes on.
#[derive(Debug, Default)]
pub struct Inbound {
    /// The number of the next message to complete.
    expected: u64,
    /// The position after the last complete message.
    completed: u64,
    /// The position after the last message the worker took.
    consumed: u64,
    /// The message being built.
    partial: Option<Partial>,
    /// The position up to which a grant lets the sender go.
    granted: u64,
    /// Where the message the sender asked room for would end.
    asked: Option<u64>,
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

    /// The position after the last complete message.
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// The credit this end grants (see the module docs).
    pub fn limit(&self) -> u64 {
        self.consumed.saturating_add(WINDOW_BYTES).max(self.granted)
    }

    /// The position after the last message the worker took.
    pub fn consumed_position(&self) -> u64 {
        self.consumed
    }

    /// Lets the sender send the message it asked room for
    /// ([`Received::Asked`]); returns the position after it (`None` if
    /// nothing was asked). The limit never goes down, so a grant cannot be
    /// taken back.
    pub fn grant(&mut self) -> Option<u64> {
        let end = self.asked.take()?;
        self.granted = self.granted.max(end);
        Some(end)
    }

    /// The ack to send for `channel`.
    pub fn ack(&self, channel: ChannelId) -> Ack {
        Ack {
            channel,
            next: self.expected,
            limit: self.limit(),
        }
    }

    /// Bytes held: complete messages the worker has not taken, and the
    /// message being built.
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
            self.asked = Some(self.completed.saturating_add(total));
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
            if start.saturating_add(total) > self.limit() {
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
        self.completed = self.completed.saturating_add(total);
        Ok(Received::Complete(done))
    }

    /// The worker took a message of `len` bytes of this channel.
    pub fn consumed(&mut self, len: u64) {
        self.consumed = self.consumed.saturating_add(len).min(self.completed);
    }

    /// The stream ended: a half-built message is dropped (the sender sends
    /// it again from its start).
    pub fn stream_lost(&mut self) {
        self.partial = None;
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
        assert_eq!(out.buffered_bytes(), 50);
        assert!(out.on_ack(inb.ack(CH)).unwrap());
        assert!(out.all_acked());
        assert_eq!(out.buffered_bytes(), 0);
    }

    #[test]
    fn a_large_message_is_chunked_and_allocated_as_it_arrives() {
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        let big = message(3, 3 * CHUNK_BYTES + 5);
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
            limit: WINDOW_BYTES,
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

    #[test]
    fn a_sender_waits_for_credit_and_the_receiver_enforces_it() {
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        let half = (WINDOW_BYTES / 2) as usize;
        out.push(CH, message(0, half));
        out.push(CH, message(1, half));
        assert_eq!(out.admits(CH, 1), Admission::WaitForCredit);
        assert_eq!(pump(&mut out, &mut inb).len(), 2);
        out.on_ack(inb.ack(CH)).unwrap();
        // Received but not read: still no credit.
        assert_eq!(out.admits(CH, 1), Admission::WaitForCredit);
        // A sender that ignores it is caught.
        out.push(CH, message(2, 1));
        let c = out.next_chunk(CHUNK_BYTES).unwrap();
        assert_eq!(inb.on_chunk(c), Err(Violation::NoCredit));
        // Once the worker reads one, credit comes back.
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        out.push(CH, message(0, half));
        out.push(CH, message(1, half));
        pump(&mut out, &mut inb);
        inb.consumed(half as u64);
        assert!(out.on_ack(inb.ack(CH)).unwrap());
        assert_eq!(out.admits(CH, half as u64), Admission::Yes);
        assert_eq!(out.admits(CH, half as u64 + 1), Admission::WaitForCredit);
    }

    #[test]
    fn a_message_larger_than_the_window_goes_when_the_receiver_grants_it() {
        let mut out = Outbox::new();
        let mut inb = Inbound::new();
        let big = 2 * WINDOW_BYTES + 1;
        out.push(CH, vec![7; 10]);
        assert_eq!(out.admits(CH, big), Admission::Ask);
        out.ask(CH, big);
        out.ask(CH, big);
        // The ask goes after the message before it, once, without bytes.
        let first = out.next_chunk(CHUNK_BYTES).unwrap();
        assert_eq!((first.seq, first.bytes.len()), (0, 10));
        assert_eq!(
            inb.on_chunk(first).unwrap(),
            Received::Complete(vec![7; 10])
        );
        let ask = out.next_chunk(CHUNK_BYTES).unwrap();
        assert_eq!(
            (ask.seq, ask.offset, ask.total, ask.bytes.len()),
            (1, 0, big, 0)
        );
        assert_eq!(inb.on_chunk(ask).unwrap(), Received::Asked { total: big });
        assert!(out.next_chunk(CHUNK_BYTES).is_none());
        // Without the grant, the acks give no room for it.
        out.on_ack(inb.ack(CH)).unwrap();
        assert_eq!(out.admits(CH, big), Admission::Ask);
        // A lost stream sends the ask again.
        out.rewind();
        let again = out.next_chunk(CHUNK_BYTES).unwrap();
        assert_eq!(inb.on_chunk(again).unwrap(), Received::Asked { total: big });
        assert_eq!(inb.grant(), Some(10 + big));
        assert_eq!(inb.grant(), None, "granted once");
        out.on_ack(inb.ack(CH)).unwrap();
        assert_eq!(out.admits(CH, big), Admission::Yes);
        out.push(CH, vec![1; big as usize]);
        let got = pump(&mut out, &mut inb);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].len() as u64, big);
        // Once read, the window is back to normal; nothing large without
        // another grant.
        inb.consumed(10 + big);
        out.on_ack(inb.ack(CH)).unwrap();
        assert_eq!(out.admits(CH, WINDOW_BYTES), Admission::Yes);
        assert_eq!(out.admits(CH, WINDOW_BYTES + 1), Admission::Ask);
        assert_eq!(out.admits(CH, MAX_MESSAGE_BYTES + 1), Admission::TooLarge);
    }

    #[test]
    fn a_large_message_without_a_grant_is_refused() {
        let mut inb = Inbound::new();
        let chunk = Chunk {
            channel: CH,
            seq: 0,
            offset: 0,
            total: WINDOW_BYTES + 1,
            bytes: &[0; 16],
        };
        assert_eq!(inb.on_chunk(chunk), Err(Violation::NoCredit));
        // An ask out of order is a violation too; one for a message that
        // arrived already is a duplicate.
        let ask = |seq| Chunk {
            channel: CH,
            seq,
            offset: 0,
            total: WINDOW_BYTES + 1,
            bytes: &[],
        };
        assert!(matches!(
            inb.on_chunk(ask(3)),
            Err(Violation::OutOfOrder { .. })
        ));
        assert_eq!(
            inb.on_chunk(ask(0)),
            Ok(Received::Asked {
                total: WINDOW_BYTES + 1
            })
        );
        assert_eq!(inb.grant(), Some(WINDOW_BYTES + 1));
        assert!(matches!(inb.on_chunk(chunk), Ok(Received::Partial)));
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
        inb.grant();
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
        let mut sent = 0u8;
        let mut got = Vec::new();
        for _ in 0..5_000 {
            match rng.random_range(0..10) {
                0..=3 => {
                    let len = rng.random_range(0..CHUNK_BYTES * 2);
                    if out.admits(CH, len as u64) == Admission::Yes && sent < 200 {
                        out.push(CH, vec![sent; len]);
                        sent += 1;
                    }
                }
                4..=6 => {
                    if let Some(c) = out.next_chunk(rng.random_range(1..CHUNK_BYTES))
                        && let Received::Complete(m) = inb.on_chunk(c).unwrap()
                    {
                        got.push(m);
                    }
                }
                7 => {
                    // The worker reads; the ack may get lost.
                    let read: u64 = got.iter().map(|m| m.len() as u64).sum();
                    inb.consumed(read.saturating_sub(inb.consumed));
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
            assert!(inb.buffered_bytes() <= WINDOW_BYTES.max(2 * CHUNK_BYTES as u64));
            assert!(out.buffered_bytes() <= WINDOW_BYTES + 2 * CHUNK_BYTES as u64);
        }
        // Drain.
        for _ in 0..10_000 {
            inb.consumed(u64::MAX);
            out.on_ack(inb.ack(CH)).unwrap();
            match out.next_chunk(CHUNK_BYTES) {
                Some(c) => {
                    if let Received::Complete(m) = inb.on_chunk(c).unwrap() {
                        got.push(m);
                    }
                }
                None => break,
            }
        }
        assert!(sent > 20);
        assert_eq!(got.len(), usize::from(sent));
        for (i, m) in got.iter().enumerate() {
            assert!(m.iter().all(|b| usize::from(*b) == i), "message {i} wrong");
        }
    }
}

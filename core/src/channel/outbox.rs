//! The sender's side: an [`Outbox`] per peer node, which queues messages,
//! cuts them into chunks round robin over channels and keeps them until
//! acknowledged.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

use super::chunk::{
    Ack, CHUNK_BYTES, ChannelId, Chunk, INITIAL_WINDOW, MAX_MESSAGE_BYTES, STRIPE_BYTES, Violation,
    footprint,
};

/// A queued message: kept until acknowledged (shared with the chunks of
/// it being written, see [`Outbox::next_shared`]).
#[derive(Debug)]
struct Queued {
    seq: u64,
    data: Arc<Vec<u8>>,
    /// Striped when the outbox stripes: a message of [`STRIPE_BYTES`] or
    /// more pushed when nothing was unacknowledged on its channel, so that
    /// it starts at once, alone (a large message behind others goes on
    /// the stream, rather than wait for their acknowledgement).
    stripe: bool,
}

/// A chunk as [`Outbox::next_shared`] hands it out: its bytes stay in
/// their message, which it shares, so that a driver can write them after
/// it let go of the outbox, without copying them first.
#[derive(Clone, Debug)]
pub struct SharedChunk {
    /// The channel.
    pub channel: ChannelId,
    /// The message's number in its channel.
    pub seq: u64,
    /// Where the chunk's bytes go in the message.
    pub offset: u64,
    /// The message.
    message: Arc<Vec<u8>>,
    /// The chunk's bytes in the message.
    range: Range<usize>,
}

impl SharedChunk {
    /// The chunk's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.message[self.range.clone()]
    }

    /// The chunk, borrowing its bytes.
    pub fn chunk(&self) -> Chunk<'_> {
        Chunk {
            channel: self.channel,
            seq: self.seq,
            offset: self.offset,
            total: self.message.len() as u64,
            bytes: self.bytes(),
        }
    }
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
    /// A message that goes on the stream alone, unstriped: the first sent
    /// again after the receiver refused the channel (it drops what comes
    /// before that message's first chunk, which a lane could overtake).
    unstriped: Option<u64>,
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
            unstriped: None,
        }
    }
}

impl SendChannel {
    /// Whether it holds unacknowledged messages or an ask (it needs a
    /// stream).
    fn is_open(&self) -> bool {
        !self.queue.is_empty() || self.ask.is_some()
    }

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

    /// Whether message `seq` is striped (when the outbox stripes).
    fn large(&self, seq: u64) -> bool {
        self.queued(seq).is_some_and(|q| q.stripe)
    }

    /// Whether the stream may carry its next chunk. With `striping`, a
    /// striped message goes on lanes only, and alone on its channel: it
    /// starts once everything before it is acknowledged (then it is
    /// [`stripable`](Self::stripable)), and nothing after it goes until it
    /// is acknowledged. (A large message the stream began before striping
    /// was on, or one sent again after a refusal, goes on the stream.)
    fn sendable(&self, striping: bool) -> bool {
        if !self.has_unsent() {
            return false;
        }
        if !striping {
            return true;
        }
        if self.stripable() {
            return false;
        }
        let begun = self.sent_offset > 0 || self.unstriped == Some(self.sent_seq);
        if self.large(self.sent_seq) && !begun {
            return false;
        }
        let Some(front) = self.queue.front() else {
            return true;
        };
        front.seq == self.sent_seq || !self.large(front.seq)
    }

    /// Whether a lane may carry its next chunk: a striped message's, alone
    /// on its channel, at a chunk boundary.
    fn stripable(&self) -> bool {
        self.has_unsent()
            && self.unstriped != Some(self.sent_seq)
            && self.queue.front().is_some_and(|q| q.seq == self.sent_seq)
            && self.large(self.sent_seq)
            && self.sent_offset.is_multiple_of(CHUNK_BYTES as u64)
    }

    /// Whether it belongs in the round robin.
    fn ready(&self, striping: bool) -> bool {
        self.sendable(striping) || self.ask_due()
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
    /// Channels with something to transmit, in round-robin order (and
    /// some that had, which are skipped).
    ready: VecDeque<ChannelId>,
    /// Whether large messages are striped (the link has lanes).
    striping: bool,
    /// Channels whose message may be striped now, in round-robin order
    /// for the lanes (and some that no longer are, which are skipped).
    stripes: VecDeque<ChannelId>,
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
        let stripe = c.queue.is_empty() && data.len() as u64 >= STRIPE_BYTES;
        c.queue.push_back(Queued {
            seq,
            data: Arc::new(data),
            stripe,
        });
        if was_idle {
            self.ready.push_back(channel);
        }
        self.note_stripe(channel);
        seq
    }

    /// Whether anything waits to be transmitted.
    pub fn has_unsent(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Whether every message pushed was acknowledged and no ask waits for
    /// its grant (nothing needs a stream).
    pub fn all_acked(&self) -> bool {
        self.channels.values().all(|c| !c.is_open())
    }

    /// Bytes kept for retransmission (with [`MESSAGE_OVERHEAD`](super::MESSAGE_OVERHEAD) for each
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
        let (channel, seq, offset, total, range) = self.take_next(max)?;
        let data = match range {
            Some(range) => {
                let c = self.channels.get(&channel)?;
                &c.queued(seq)?.data[range]
            }
            None => &[],
        };
        Some(Chunk {
            channel,
            seq,
            offset,
            total,
            bytes: data,
        })
    }

    /// [`next_chunk`](Self::next_chunk), sharing the chunk's message
    /// rather than borrowing the outbox; `None` also for an ask (which
    /// [`next_chunk`](Self::next_chunk) hands out), so call it only when
    /// [`ask_next`](Self::ask_next) is false.
    pub fn next_shared(&mut self, max: usize) -> Option<SharedChunk> {
        if self.ask_next() {
            return None;
        }
        let (channel, seq, offset, _, range) = self.take_next(max)?;
        self.shared(channel, seq, offset, range?)
    }

    fn shared(
        &self,
        channel: ChannelId,
        seq: u64,
        offset: u64,
        range: Range<usize>,
    ) -> Option<SharedChunk> {
        let c = self.channels.get(&channel)?;
        Some(SharedChunk {
            channel,
            seq,
            offset,
            message: c.queued(seq)?.data.clone(),
            range,
        })
    }

    /// Whether the next chunk to transmit is an ask (a chunk without bytes).
    pub fn ask_next(&self) -> bool {
        self.ready
            .iter()
            .filter_map(|id| self.channels.get(id))
            .find(|c| c.ready(self.striping))
            .is_some_and(|c| !c.sendable(self.striping))
    }

    /// Stripes large messages from now on, or stops: call with `true` once
    /// the link has lanes besides its stream ([`next_lane`](Self::next_lane)),
    /// with `false` when they are gone (after [`rewind`](Self::rewind)).
    pub fn set_striping(&mut self, on: bool) {
        if self.striping == on {
            return;
        }
        self.striping = on;
        // Channels that were held back may go now.
        for (id, c) in &self.channels {
            if c.ready(on) && !self.ready.contains(id) {
                self.ready.push_back(*id);
            }
        }
        self.stripes.clear();
        if on {
            self.find_stripes();
        }
    }

    /// Adds the channels whose message lanes may carry now to `stripes`.
    fn find_stripes(&mut self) {
        for (id, c) in &self.channels {
            if c.stripable() && !self.stripes.contains(id) {
                self.stripes.push_back(*id);
            }
        }
    }

    /// Adds `channel` to `stripes` if lanes may carry its message now.
    fn note_stripe(&mut self, channel: ChannelId) {
        if self.striping
            && self
                .channels
                .get(&channel)
                .is_some_and(SendChannel::stripable)
            && !self.stripes.contains(&channel)
        {
            self.stripes.push_back(channel);
        }
    }

    /// Whether large messages are striped.
    pub fn striping(&self) -> bool {
        self.striping
    }

    /// The next chunk for a lane: one of a striped message that is alone
    /// on its channel, whole ([`CHUNK_BYTES`], or the message's last), at
    /// a chunk boundary. The chunk counts as sent. `None` if no message
    /// is being striped (or striping is off).
    pub fn next_lane(&mut self) -> Option<SharedChunk> {
        if !self.striping {
            return None;
        }
        loop {
            let channel = *self.stripes.front()?;
            if self
                .channels
                .get(&channel)
                .is_some_and(SendChannel::stripable)
            {
                // Round robin over striped messages, chunk by chunk.
                self.stripes.pop_front();
                let (seq, offset, _, range) = self.take_from(channel, CHUNK_BYTES)?;
                self.note_stripe(channel);
                return self.shared(channel, seq, offset, range);
            }
            self.stripes.pop_front();
        }
    }

    /// Whether a lane has something to carry.
    pub fn has_lane_work(&self) -> bool {
        self.striping
            && self
                .stripes
                .iter()
                .any(|id| self.channels.get(id).is_some_and(SendChannel::stripable))
    }

    /// Takes the next chunk off the round robin: its channel, number,
    /// offset, message length, and its bytes' range in the message (`None`
    /// for an ask).
    #[allow(clippy::type_complexity)]
    fn take_next(
        &mut self,
        max: usize,
    ) -> Option<(ChannelId, u64, u64, u64, Option<Range<usize>>)> {
        let striping = self.striping;
        // Channels with nothing to send now are skipped (they come back
        // when they have).
        while let Some(id) = self.ready.front() {
            if self.channels.get(id).is_some_and(|c| c.ready(striping)) {
                break;
            }
            self.ready.pop_front();
        }
        let channel = self.ready.pop_front()?;
        let c = self.channels.get_mut(&channel)?;
        if !c.sendable(striping) {
            // Nothing left to send but an ask: the first chunk of the
            // message, without its bytes.
            let total = c.ask.filter(|_| !c.ask_sent)?;
            c.ask_sent = true;
            return Some((channel, c.next_seq, 0, total, None));
        }
        let (seq, offset, total, range) = self.take_from(channel, max)?;
        let range = Some(range);
        if self
            .channels
            .get(&channel)
            .is_some_and(|c| c.ready(striping))
        {
            self.ready.push_back(channel);
        }
        // (A message the stream began before striping was on goes to the
        // lanes once the stream reached a chunk boundary.)
        self.note_stripe(channel);
        Some((channel, seq, offset, total, range))
    }

    /// Takes the next chunk of `channel`'s message being sent, at most
    /// `max` bytes and never across a multiple of [`CHUNK_BYTES`] (so that
    /// a striped message's chunks are at chunk boundaries): its number,
    /// offset, message length and bytes' range.
    fn take_from(
        &mut self,
        channel: ChannelId,
        max: usize,
    ) -> Option<(u64, u64, u64, Range<usize>)> {
        let c = self.channels.get_mut(&channel)?;
        let max = max.clamp(1, CHUNK_BYTES) as u64;
        let seq = c.sent_seq;
        let offset = c.sent_offset;
        let total = c.queued(seq)?.data.len() as u64;
        let boundary = CHUNK_BYTES as u64 - offset % CHUNK_BYTES as u64;
        let len = total.saturating_sub(offset).min(max).min(boundary);
        if offset + len >= total {
            c.sent_seq += 1;
            c.sent_offset = 0;
        } else {
            c.sent_offset += len;
        }
        let range = offset as usize..(offset + len) as usize;
        Some((seq, offset, total, range))
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
        if self.striping && changed {
            // A striped message may start, or what waited for one go on.
            if c.ready(true) && !self.ready.contains(&ack.channel) {
                self.ready.push_back(ack.channel);
            }
            self.note_stripe(ack.channel);
        }
        Ok(changed)
    }

    /// The stream was lost (with its lanes): every unacknowledged message
    /// is transmitted again, from its first byte, on the next one, and
    /// nothing is striped until [`set_striping`](Self::set_striping) says
    /// the next one has lanes.
    pub fn rewind(&mut self) {
        self.ready.clear();
        self.stripes.clear();
        self.striping = false;
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
    /// receiver refused them: its rank was not there yet); the first goes
    /// unstriped (see [`next_lane`](Self::next_lane)).
    pub fn rewind_channel(&mut self, channel: ChannelId) {
        let Some(c) = self.channels.get_mut(&channel) else {
            return;
        };
        c.sent_seq = c.queue.front().map_or(c.next_seq, |q| q.seq);
        c.sent_offset = 0;
        c.ask_sent = false;
        c.unstriped = Some(c.sent_seq);
        if (c.has_unsent() || c.ask_due()) && !self.ready.contains(&channel) {
            self.ready.push_back(channel);
        }
    }

    /// Forgets `channel` (its job ended, or its receiver is gone for good);
    /// returns how many messages were still unacknowledged.
    pub fn close(&mut self, channel: ChannelId) -> usize {
        self.ready.retain(|c| *c != channel);
        self.stripes.retain(|c| *c != channel);
        self.channels.remove(&channel).map_or(0, |c| c.queue.len())
    }

    /// Forgets every channel of `job`.
    pub fn close_job(&mut self, job: u64) {
        self.ready.retain(|c| c.job != job);
        self.stripes.retain(|c| c.job != job);
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
            .filter(|(_, c)| c.is_open())
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether bytes of a message went out on the current stream and are
    /// not acknowledged yet (an ask waiting for its grant is not counted:
    /// a receiver may rightly keep that waiting).
    pub fn awaits_ack(&self) -> bool {
        self.channels.values().any(|c| {
            c.queue
                .front()
                .is_some_and(|q| q.seq < c.sent_seq || (q.seq == c.sent_seq && c.sent_offset > 0))
        })
    }

    /// Whether one of the channels `which` picks still holds
    /// unacknowledged messages or an ask (without listing them).
    pub fn holds(&self, which: impl Fn(&ChannelId) -> bool) -> bool {
        self.channels.iter().any(|(id, c)| which(id) && c.is_open())
    }
}

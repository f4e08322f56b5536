//! The receiver's side: an [`Inbound`] per channel, which takes chunks of
//! the message it expects (in order, or out of order from the lanes of a
//! striped message), enforces the channel's credit and builds its
//! messages.

use std::collections::BTreeMap;

use super::chunk::{
    Ack, CHUNK_BYTES, ChannelId, Chunk, INITIAL_WINDOW, MAX_MESSAGE_BYTES, Violation, footprint,
};

/// What [`Inbound::on_chunk`] made of a chunk.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// Part of a message; more to come.
    Partial,
    /// A whole message in one chunk, left where the chunk's bytes are (only
    /// from [`Inbound::on_chunk_in_place`]): the driver copies it to where it
    /// is wanted.
    Whole,
    /// The last chunk of a message: here it is, whole.
    Complete(Vec<u8>),
    /// A chunk of a message that arrived before: dropped (ack again, so
    /// that the sender frees it).
    Duplicate,
    /// The sender asks for room for its next message, of `total` bytes,
    /// which would start at [`Inbound::completed`]: the driver tells the
    /// rank's [`RankReceiver::asked`](super::RankReceiver::asked).
    Asked {
        /// The message's length.
        total: u64,
    },
}

/// The message being built: what arrived in order from its start, and
/// chunks that arrived ahead of it (a striped message's, from other
/// lanes), each kept as it came until the bytes before it arrive, so that
/// memory follows the bytes received, not the length announced.
#[derive(Debug)]
struct Partial {
    seq: u64,
    total: u64,
    /// The message's first bytes, without a gap.
    data: Vec<u8>,
    /// Chunks beyond `data`, by offset (a multiple of [`CHUNK_BYTES`]).
    ahead: BTreeMap<u64, Vec<u8>>,
    /// Bytes in `ahead`.
    ahead_bytes: u64,
}

impl Partial {
    /// Moves the chunks of `ahead` that `data` now reaches into it.
    fn join(&mut self) -> Result<(), Violation> {
        while let Some(entry) = self.ahead.first_entry() {
            let have = self.data.len() as u64;
            let offset = *entry.key();
            if offset > have {
                return Ok(());
            }
            let bytes = entry.remove();
            self.ahead_bytes = self.ahead_bytes.saturating_sub(bytes.len() as u64);
            let skip = usize::try_from(have - offset).map_err(|_| Violation::BadChunk)?;
            if let Some(tail) = bytes.get(skip..) {
                self.append(tail)?;
            }
        }
        Ok(())
    }

    /// Appends `bytes` to `data`, growing it by doubling, but never past
    /// the announced length.
    fn append(&mut self, bytes: &[u8]) -> Result<(), Violation> {
        let end = self.data.len() + bytes.len();
        if self.data.capacity() < end {
            let want = end
                .max(self.data.capacity().saturating_mul(2))
                .min(usize::try_from(self.total).map_err(|_| Violation::BadChunk)?);
            self.data
                .try_reserve_exact(want.saturating_sub(self.data.len()))
                .map_err(|_| Violation::BadChunk)?;
        }
        self.data.extend_from_slice(bytes);
        Ok(())
    }
}

/// The receiving side of one channel: sequencing, and the limit the
/// rank's [`RankReceiver`](super::RankReceiver) lent it. Outlives the streams it comes on.
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

    /// Raises the credit to `limit` (the rank's [`RankReceiver::credit`](super::RankReceiver::credit));
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
    /// [`MESSAGE_OVERHEAD`](super::MESSAGE_OVERHEAD) each), and the message being built.
    pub fn buffered_bytes(&self) -> u64 {
        let partial = self
            .partial
            .as_ref()
            .map_or(0, |p| (p.data.len() as u64).saturating_add(p.ahead_bytes));
        self.completed.saturating_sub(self.consumed) + partial
    }

    /// Takes a chunk read from the stream.
    pub fn on_chunk(&mut self, chunk: Chunk<'_>) -> Result<Received, Violation> {
        let bytes = chunk.bytes;
        match self.on_chunk_in_place(chunk)? {
            Received::Whole => Ok(Received::Complete(bytes.to_vec())),
            received => Ok(received),
        }
    }

    /// [`Inbound::on_chunk`], but a message that is all in this chunk is
    /// not copied into a message of its own: [`Received::Whole`] says that
    /// the chunk's bytes are the message (so that a driver with somewhere
    /// to put it copies it once).
    pub fn on_chunk_in_place(&mut self, chunk: Chunk<'_>) -> Result<Received, Violation> {
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
        if self.partial.as_ref().is_some_and(|p| p.seq != seq) {
            // (Cannot happen: a partial is always of the expected message.)
            self.partial = None;
        }
        if self.partial.is_none() && offset == 0 && end == total {
            // All of a message in one chunk: nothing to build.
            if self.completed.saturating_add(footprint(total)) > self.limit {
                return Err(Violation::NoCredit);
            }
            self.expected += 1;
            self.completed = self.completed.saturating_add(footprint(total));
            return Ok(Received::Whole);
        }
        let partial = match self.partial.as_mut() {
            Some(partial) => partial,
            None => {
                // A message starts: its first chunk to arrive (on a lane,
                // not necessarily its first) is checked against the credit.
                let start = self.completed;
                if start.saturating_add(footprint(total)) > self.limit {
                    return Err(Violation::NoCredit);
                }
                self.partial.insert(Partial {
                    seq,
                    total,
                    data: Vec::new(),
                    ahead: BTreeMap::new(),
                    ahead_bytes: 0,
                })
            }
        };
        if partial.total != total {
            return Err(Violation::BadChunk);
        }
        let have = partial.data.len() as u64;
        if offset <= have {
            // In order (a chunk that overlaps what arrived, sent again,
            // carries the same bytes: only its new ones are taken).
            let skip = usize::try_from(have - offset).map_err(|_| Violation::BadChunk)?;
            if let Some(tail) = bytes.get(skip..) {
                partial.append(tail)?;
            }
            partial.join()?;
        } else {
            // Ahead of what arrived in order: a whole chunk of a striped
            // message (or its last), at a chunk boundary.
            let aligned = offset.is_multiple_of(CHUNK_BYTES as u64);
            if !aligned || (len != CHUNK_BYTES as u64 && end != total) {
                return Err(Violation::BadOffset {
                    got: offset,
                    expected: have,
                });
            }
            match partial.ahead.get(&offset) {
                // The same chunk again (from a lane of an older
                // connection): it carries the same bytes.
                Some(kept) if kept.len() as u64 == len => {}
                Some(_) => return Err(Violation::BadChunk),
                None => {
                    let mut kept = Vec::new();
                    kept.try_reserve_exact(bytes.len())
                        .map_err(|_| Violation::BadChunk)?;
                    kept.extend_from_slice(bytes);
                    partial.ahead.insert(offset, kept);
                    partial.ahead_bytes = partial.ahead_bytes.saturating_add(len);
                }
            }
        }
        if (partial.data.len() as u64) < total {
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

//! The receiver's side: an [`Inbound`] per channel, which takes chunks in
//! order, enforces the channel's credit and builds its messages.

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

#[derive(Debug)]
struct Partial {
    seq: u64,
    total: u64,
    data: Vec<u8>,
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
        let partial = self.partial.as_ref().map_or(0, |p| p.data.len() as u64);
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
        if offset == 0 {
            // A message starts (again: after a reconnection the sender
            // begins it anew, and what was built of it is dropped).
            let start = self.completed;
            if start.saturating_add(footprint(total)) > self.limit {
                return Err(Violation::NoCredit);
            }
            if end == total {
                // All of it in one chunk: nothing to build.
                self.partial = None;
                self.expected += 1;
                self.completed = self.completed.saturating_add(footprint(total));
                return Ok(Received::Whole);
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

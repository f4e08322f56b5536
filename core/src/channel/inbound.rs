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
    /// A chunk of a message built where the driver lent (see
    /// [`Inbound::lend`]): the driver writes the chunk's bytes there, at
    /// its offset (a chunk sent again carries the same bytes). `last`: the
    /// message is whole there now.
    Lent {
        /// Whether the message is complete.
        last: bool,
    },
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

/// The message being built.
#[derive(Debug)]
struct Partial {
    seq: u64,
    total: u64,
    bytes: Bytes,
}

/// Where a message being built is: here, or in a place the driver lent
/// (see [`Inbound::lend`]).
#[derive(Debug)]
enum Bytes {
    /// What arrived in order from its start, and chunks that arrived ahead
    /// of it (a striped message's, from other lanes), each kept as it came
    /// until the bytes before it arrive, so that memory follows the bytes
    /// received, not the length announced.
    Held {
        /// The message's first bytes, without a gap.
        data: Vec<u8>,
        /// Chunks beyond `data`, by offset (a multiple of [`CHUNK_BYTES`]).
        ahead: BTreeMap<u64, Vec<u8>>,
        /// Bytes in `ahead`.
        ahead_bytes: u64,
    },
    /// Written by the driver where it lent (loan number `loan`): only
    /// which bytes arrived is kept here.
    Lent {
        loan: u64,
        /// The bytes from the start arrived, without a gap.
        have: u64,
        /// The lengths of the chunks arrived beyond `have`, by offset.
        ahead: BTreeMap<u64, u64>,
    },
}

impl Bytes {
    /// How many bytes from the message's start arrived without a gap.
    fn have(&self) -> u64 {
        match self {
            Bytes::Held { data, .. } => data.len() as u64,
            Bytes::Lent { have, .. } => *have,
        }
    }

    /// Takes `bytes`, found at `offset` (at most [`Bytes::have`]) of a
    /// message of `total` bytes, in order, and what arrived ahead that
    /// they now reach.
    fn in_order(&mut self, offset: u64, bytes: &[u8], total: u64) -> Result<(), Violation> {
        match self {
            Bytes::Held {
                data,
                ahead,
                ahead_bytes,
            } => {
                append(data, tail(bytes, data.len() as u64, offset)?, total)?;
                while let Some(entry) = ahead.first_entry() {
                    let offset = *entry.key();
                    if offset > data.len() as u64 {
                        break;
                    }
                    let bytes = entry.remove();
                    *ahead_bytes = ahead_bytes.saturating_sub(bytes.len() as u64);
                    append(data, tail(&bytes, data.len() as u64, offset)?, total)?;
                }
            }
            Bytes::Lent { have, ahead, .. } => {
                *have = (*have).max(offset.saturating_add(bytes.len() as u64));
                while let Some(entry) = ahead.first_entry() {
                    if *entry.key() > *have {
                        break;
                    }
                    let (offset, len) = entry.remove_entry();
                    *have = (*have).max(offset.saturating_add(len));
                }
            }
        }
        Ok(())
    }

    /// Keeps a chunk that arrived ahead of the bytes before it, at
    /// `offset`; the same chunk again is dropped.
    fn ahead(&mut self, offset: u64, bytes: &[u8]) -> Result<(), Violation> {
        let len = bytes.len() as u64;
        match self {
            Bytes::Held {
                ahead, ahead_bytes, ..
            } => match ahead.get(&offset) {
                // The same chunk again (from a lane of an older
                // connection): it carries the same bytes.
                Some(kept) if kept.len() as u64 == len => {}
                Some(_) => return Err(Violation::BadChunk),
                None => {
                    let mut kept = Vec::new();
                    kept.try_reserve_exact(bytes.len())
                        .map_err(|_| Violation::BadChunk)?;
                    kept.extend_from_slice(bytes);
                    ahead.insert(offset, kept);
                    *ahead_bytes = ahead_bytes.saturating_add(len);
                }
            },
            Bytes::Lent { ahead, .. } => match ahead.get(&offset) {
                Some(kept) if *kept == len => {}
                Some(_) => return Err(Violation::BadChunk),
                None => {
                    ahead.insert(offset, len);
                }
            },
        }
        Ok(())
    }
}

/// The part of `bytes`, found at `offset`, beyond the first `have` bytes
/// of the message (a chunk that overlaps what arrived, sent again,
/// carries the same bytes: only its new ones are taken).
fn tail(bytes: &[u8], have: u64, offset: u64) -> Result<&[u8], Violation> {
    let skip = usize::try_from(have.saturating_sub(offset)).map_err(|_| Violation::BadChunk)?;
    Ok(bytes.get(skip..).unwrap_or_default())
}

/// Appends `bytes` to `data`, growing it by doubling, but never past the
/// announced length `total`.
fn append(data: &mut Vec<u8>, bytes: &[u8], total: u64) -> Result<(), Violation> {
    let end = data.len() + bytes.len();
    if data.capacity() < end {
        let want = end
            .max(data.capacity().saturating_mul(2))
            .min(usize::try_from(total).map_err(|_| Violation::BadChunk)?);
        data.try_reserve_exact(want.saturating_sub(data.len()))
            .map_err(|_| Violation::BadChunk)?;
    }
    data.extend_from_slice(bytes);
    Ok(())
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
    /// Places lent so far (the number of the next loan).
    loans: u64,
}

impl Default for Inbound {
    fn default() -> Self {
        Inbound {
            expected: 0,
            completed: 0,
            consumed: 0,
            partial: None,
            limit: INITIAL_WINDOW,
            loans: 0,
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
    /// [`MESSAGE_OVERHEAD`](super::MESSAGE_OVERHEAD) each), and the message being built
    /// (unless it is built where the driver lent).
    pub fn buffered_bytes(&self) -> u64 {
        let partial = match self.partial.as_ref().map(|p| &p.bytes) {
            Some(Bytes::Held {
                data, ahead_bytes, ..
            }) => (data.len() as u64).saturating_add(*ahead_bytes),
            _ => 0,
        };
        self.completed.saturating_sub(self.consumed) + partial
    }

    /// The length of the message being built here, if one is (and not
    /// where the driver lent).
    pub fn building(&self) -> Option<u64> {
        match &self.partial {
            Some(Partial {
                total,
                bytes: Bytes::Held { .. },
                ..
            }) => Some(*total),
            _ => None,
        }
    }

    /// The number of the loan the message being built is in, if it is
    /// built where the driver lent.
    pub fn lent(&self) -> Option<u64> {
        match &self.partial {
            Some(Partial {
                bytes: Bytes::Lent { loan, .. },
                ..
            }) => Some(*loan),
            _ => None,
        }
    }

    /// The driver lends a place for the message being built (one that
    /// holds its whole length: the memory of the worker waiting for it):
    /// what arrived of it so far is written there through `write` (offset,
    /// bytes; `false`: not written), and its further chunks are
    /// [`Received::Lent`], for the driver to write there. Returns the
    /// loan's number; `None` (nothing changes) if no message is being
    /// built here or a write failed.
    pub fn lend(&mut self, mut write: impl FnMut(u64, &[u8]) -> bool) -> Option<u64> {
        let partial = self.partial.as_mut()?;
        let Bytes::Held { data, ahead, .. } = &partial.bytes else {
            return None;
        };
        if !write(0, data) || !ahead.iter().all(|(offset, bytes)| write(*offset, bytes)) {
            return None;
        }
        let number = self.loans;
        self.loans += 1;
        partial.bytes = Bytes::Lent {
            loan: number,
            have: data.len() as u64,
            ahead: ahead.iter().map(|(o, b)| (*o, b.len() as u64)).collect(),
        };
        Some(number)
    }

    /// The driver takes back the place of loan `number` before the message
    /// was whole there: `read(len)` copies the place's first `len` bytes
    /// (up to the last byte written there), which the message being built
    /// holds again. `false` if the copy falls short (`None`: the place was
    /// lost): the message being built is dropped, and the driver must end
    /// the stream so that the sender sends it again from its start. A loan
    /// no longer current (the message was dropped since) changes nothing,
    /// and nothing is read.
    pub fn give_back(&mut self, number: u64, read: impl FnOnce(u64) -> Option<Vec<u8>>) -> bool {
        let Some(Partial {
            bytes: Bytes::Lent { loan, have, ahead },
            ..
        }) = &self.partial
        else {
            return true;
        };
        if *loan != number {
            return true;
        }
        let end = ahead
            .iter()
            .map(|(o, len)| o.saturating_add(*len))
            .fold(*have, u64::max);
        let held = read(end)
            .filter(|w| w.len() as u64 >= end)
            .and_then(|mut w| {
                let mut kept = BTreeMap::new();
                let mut kept_bytes = 0u64;
                for (offset, len) in ahead {
                    let range =
                        usize::try_from(*offset).ok()?..usize::try_from(offset + len).ok()?;
                    kept.insert(*offset, w.get(range)?.to_vec());
                    kept_bytes += len;
                }
                w.truncate(usize::try_from(*have).ok()?);
                Some(Bytes::Held {
                    data: w,
                    ahead: kept,
                    ahead_bytes: kept_bytes,
                })
            });
        match (held, self.partial.as_mut()) {
            (Some(held), Some(partial)) => {
                partial.bytes = held;
                true
            }
            _ => {
                self.partial = None;
                false
            }
        }
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
                    bytes: Bytes::Held {
                        data: Vec::new(),
                        ahead: BTreeMap::new(),
                        ahead_bytes: 0,
                    },
                })
            }
        };
        if partial.total != total {
            return Err(Violation::BadChunk);
        }
        let have = partial.bytes.have();
        if offset <= have {
            partial.bytes.in_order(offset, bytes, total)?;
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
            partial.bytes.ahead(offset, bytes)?;
        }
        let lent = matches!(partial.bytes, Bytes::Lent { .. });
        if partial.bytes.have() < total {
            return Ok(if lent {
                Received::Lent { last: false }
            } else {
                Received::Partial
            });
        }
        let done = self.partial.take().map(|p| p.bytes);
        self.expected += 1;
        self.completed = self.completed.saturating_add(footprint(total));
        match done {
            Some(Bytes::Held { data, .. }) => Ok(Received::Complete(data)),
            _ => Ok(Received::Lent { last: true }),
        }
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

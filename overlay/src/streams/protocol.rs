//! The frames of the ranks stream protocol, and their checked codec.
//!
//! A stream is opened by the node that *sends* messages; the data flows
//! from the opener, acknowledgements and refusals flow back on the same
//! stream. Every frame is a 4-byte little-endian length (of what follows),
//! a 1-byte kind and fixed little-endian fields:
//!
//! | kind | frame | fields after the kind |
//! |---|---|---|
//! | 1 | [`Frame::Data`] | channel, seq u64, offset u64, total u64, then the chunk's bytes (at most [`CHUNK_BYTES`]) |
//! | 2 | [`Frame::Ack`] | channel, next u64, limit u64 |
//! | 3 | [`Frame::Refuse`] | channel, reason u8 (1 not here yet, 2 closed) |
//! | 4 | [`Frame::Offer`] | port u16, then the IP address: none, 4 bytes (IPv4) or 16 (IPv6) |
//! | 5 | [`Frame::Lanes`] | ticket u64, count u8 |
//! | 6 | [`Frame::Lane`] | ticket u64 |
//!
//! The receiver of a libp2p stream may offer the port of its rank data
//! plane ([`crate::direct`]) first, with the address it listens on when
//! that is one address (not all of the machine's): the sender may then
//! carry on over a direct connection there, with the same frames. The
//! address matters where a node listens on one of several: its
//! connections to others may come from another of its addresses, where
//! nothing listens (as on one machine, where every dial comes from
//! 127.0.0.1 whatever loopback address the node listens on).
//!
//! The receiver of a direct connection may invite the sender to open
//! *lanes* beside it ([`Frame::Lanes`]: at most `count`, each presenting
//! the ticket): further direct connections that carry only chunks of
//! striped messages (see the node's `link` module). A lane's first frame
//! is [`Frame::Lane`] with the ticket, then data frames.
//!
//! A channel ([`ChannelId`]) is written as job u64, from u32,
//! from_incarnation u32, to u32, to_incarnation u32.
//!
//! Messages, chunks, sequence numbers and credit are
//! [`zorilla_core::channel`]'s. A frame longer than [`MAX_FRAME_BYTES`], of
//! an unknown kind or of the wrong length is an error: the stream is
//! dropped and the peer reported.

use zorilla_core::channel::{Ack, CHUNK_BYTES, ChannelId, Chunk};

/// Bytes of a data frame before its chunk (length, kind and fields).
pub const DATA_HEADER_BYTES: usize = 4 + 1 + 8 + 4 + 4 + 4 + 4 + 8 + 8 + 8;

/// The longest frame (after its length prefix).
pub const MAX_FRAME_BYTES: usize = DATA_HEADER_BYTES - 4 + CHUNK_BYTES;

const DATA: u8 = 1;
const ACK: u8 = 2;
const REFUSE: u8 = 3;
const OFFER: u8 = 4;
const LANES: u8 = 5;
const LANE: u8 = 6;

/// Why a receiver refused a channel's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The rank is not (yet) on this node: try again later.
    NotHere,
    /// The receiving worker ended: the channel is closed for good.
    Closed,
}

/// One frame, borrowing a data frame's bytes from the read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A chunk of a message.
    Data(Chunk<'a>),
    /// An acknowledgement with credit.
    Ack(Ack),
    /// The receiver refuses a channel's data.
    Refuse(ChannelId, Refusal),
    /// Where the receiver's rank data plane listens.
    Offer(Offer),
    /// The receiver of a direct connection takes up to `count` lanes
    /// beside it, each presenting `ticket` (see the module docs).
    Lanes {
        /// What a lane presents.
        ticket: u64,
        /// The most lanes taken.
        count: u8,
    },
    /// A lane's first frame: the ticket of the connection it joins.
    Lane(u64),
}

/// Where a node's rank data plane listens, as it offers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The listener's port.
    pub port: u16,
    /// The one address it listens on; none when it listens on all of the
    /// machine's (then it is reached at the stream connection's).
    pub ip: Option<std::net::IpAddr>,
}

/// A frame that cannot be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Longer than [`MAX_FRAME_BYTES`].
    #[error("a frame of {0} bytes is over the limit")]
    TooLong(usize),
    /// Of an unknown kind.
    #[error("a frame of unknown kind {0}")]
    UnknownKind(u8),
    /// Of the wrong length for its kind, or with an unknown refusal.
    #[error("a malformed frame")]
    Malformed,
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if self.0.len() < n {
            return Err(FrameError::Malformed);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u64(&mut self) -> Result<u64, FrameError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(
            b.try_into().map_err(|_| FrameError::Malformed)?,
        ))
    }
    fn u32(&mut self) -> Result<u32, FrameError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes(
            b.try_into().map_err(|_| FrameError::Malformed)?,
        ))
    }
    fn channel(&mut self) -> Result<ChannelId, FrameError> {
        Ok(ChannelId {
            job: self.u64()?,
            from: self.u32()?,
            from_incarnation: self.u32()?,
            to: self.u32()?,
            to_incarnation: self.u32()?,
        })
    }
}

/// Decodes the frame at the start of `buf`: `Ok(None)` if it is not
/// complete yet, else the frame and the bytes it took.
pub fn decode(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLong(len));
    }
    let Some(body) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    let mut r = Reader(body);
    let kind = r.take(1)?[0];
    let frame = match kind {
        DATA => {
            let channel = r.channel()?;
            let (seq, offset, total) = (r.u64()?, r.u64()?, r.u64()?);
            Frame::Data(Chunk {
                channel,
                seq,
                offset,
                total,
                bytes: r.0,
            })
        }
        ACK => {
            let channel = r.channel()?;
            let ack = Ack {
                channel,
                next: r.u64()?,
                limit: r.u64()?,
            };
            if !r.0.is_empty() {
                return Err(FrameError::Malformed);
            }
            Frame::Ack(ack)
        }
        REFUSE => {
            let channel = r.channel()?;
            let reason = match r.take(1)?[0] {
                1 => Refusal::NotHere,
                2 => Refusal::Closed,
                _ => return Err(FrameError::Malformed),
            };
            if !r.0.is_empty() {
                return Err(FrameError::Malformed);
            }
            Frame::Refuse(channel, reason)
        }
        OFFER => {
            let port = r.take(2)?;
            let port = u16::from_le_bytes([port[0], port[1]]);
            let ip = match r.0.len() {
                0 => None,
                4 => Some(std::net::IpAddr::from(
                    <[u8; 4]>::try_from(r.0).map_err(|_| FrameError::Malformed)?,
                )),
                16 => Some(std::net::IpAddr::from(
                    <[u8; 16]>::try_from(r.0).map_err(|_| FrameError::Malformed)?,
                )),
                _ => return Err(FrameError::Malformed),
            };
            Frame::Offer(Offer { port, ip })
        }
        LANES => {
            let ticket = r.u64()?;
            let count = r.take(1)?[0];
            if !r.0.is_empty() {
                return Err(FrameError::Malformed);
            }
            Frame::Lanes { ticket, count }
        }
        LANE => {
            let ticket = r.u64()?;
            if !r.0.is_empty() {
                return Err(FrameError::Malformed);
            }
            Frame::Lane(ticket)
        }
        other => return Err(FrameError::UnknownKind(other)),
    };
    Ok(Some((frame, 4 + len)))
}

fn put_channel(out: &mut Vec<u8>, c: ChannelId) {
    out.extend_from_slice(&c.job.to_le_bytes());
    out.extend_from_slice(&c.from.to_le_bytes());
    out.extend_from_slice(&c.from_incarnation.to_le_bytes());
    out.extend_from_slice(&c.to.to_le_bytes());
    out.extend_from_slice(&c.to_incarnation.to_le_bytes());
}

/// Appends the head of a data frame carrying `chunk`: all of it but the
/// chunk's bytes, which must follow it on the stream (a writer that writes
/// them from where they are, without copying them behind the head first).
pub fn encode_data_head(chunk: &Chunk<'_>, out: &mut Vec<u8>) {
    let len = (DATA_HEADER_BYTES - 4 + chunk.bytes.len()) as u32;
    out.extend_from_slice(&len.to_le_bytes());
    out.push(DATA);
    put_channel(out, chunk.channel);
    out.extend_from_slice(&chunk.seq.to_le_bytes());
    out.extend_from_slice(&chunk.offset.to_le_bytes());
    out.extend_from_slice(&chunk.total.to_le_bytes());
}

/// Appends `frame` to `out`.
pub fn encode(frame: &Frame<'_>, out: &mut Vec<u8>) {
    let start = out.len();
    match frame {
        Frame::Data(c) => {
            encode_data_head(c, out);
            out.extend_from_slice(c.bytes);
            return;
        }
        Frame::Ack(a) => {
            out.extend_from_slice(&[0; 4]);
            out.push(ACK);
            put_channel(out, a.channel);
            out.extend_from_slice(&a.next.to_le_bytes());
            out.extend_from_slice(&a.limit.to_le_bytes());
        }
        Frame::Refuse(c, reason) => {
            out.extend_from_slice(&[0; 4]);
            out.push(REFUSE);
            put_channel(out, *c);
            out.push(match reason {
                Refusal::NotHere => 1,
                Refusal::Closed => 2,
            });
        }
        Frame::Offer(offer) => {
            out.extend_from_slice(&[0; 4]);
            out.push(OFFER);
            out.extend_from_slice(&offer.port.to_le_bytes());
            match offer.ip {
                None => {}
                Some(std::net::IpAddr::V4(ip)) => out.extend_from_slice(&ip.octets()),
                Some(std::net::IpAddr::V6(ip)) => out.extend_from_slice(&ip.octets()),
            }
        }
        Frame::Lanes { ticket, count } => {
            out.extend_from_slice(&[0; 4]);
            out.push(LANES);
            out.extend_from_slice(&ticket.to_le_bytes());
            out.push(*count);
        }
        Frame::Lane(ticket) => {
            out.extend_from_slice(&[0; 4]);
            out.push(LANE);
            out.extend_from_slice(&ticket.to_le_bytes());
        }
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    const CH: ChannelId = ChannelId {
        job: 1,
        from: 2,
        from_incarnation: 4,
        to: 3,
        to_incarnation: 5,
    };

    #[test]
    fn frames_round_trip_and_partial_input_waits() {
        let frames = [
            Frame::Data(Chunk {
                channel: CH,
                seq: 4,
                offset: 5,
                total: 9,
                bytes: b"abcd",
            }),
            Frame::Ack(Ack {
                channel: CH,
                next: 7,
                limit: 1 << 40,
            }),
            Frame::Refuse(CH, Refusal::Closed),
            Frame::Offer(Offer {
                port: 40123,
                ip: None,
            }),
            Frame::Offer(Offer {
                port: 40124,
                ip: Some([127, 0, 1, 2].into()),
            }),
            Frame::Offer(Offer {
                port: 40125,
                ip: Some(std::net::Ipv6Addr::LOCALHOST.into()),
            }),
            Frame::Lanes {
                ticket: u64::MAX - 3,
                count: 2,
            },
            Frame::Lane(17),
        ];
        let mut buf = Vec::new();
        for f in &frames {
            encode(f, &mut buf);
        }
        let mut at = 0;
        for f in &frames {
            let (got, used) = decode(&buf[at..]).unwrap().unwrap();
            assert_eq!(got, *f);
            // Every prefix is incomplete, never an error.
            for cut in 0..used {
                assert_eq!(decode(&buf[at..at + cut]), Ok(None));
            }
            at += used;
        }
        assert_eq!(at, buf.len());
    }

    #[test]
    fn bad_frames_are_errors() {
        let mut too_long = ((MAX_FRAME_BYTES + 1) as u32).to_le_bytes().to_vec();
        too_long.push(DATA);
        assert_eq!(
            decode(&too_long),
            Err(FrameError::TooLong(MAX_FRAME_BYTES + 1))
        );
        assert_eq!(decode(&[1, 0, 0, 0, 9]), Err(FrameError::UnknownKind(9)));
        assert_eq!(
            decode(&[3, 0, 0, 0, DATA, 0, 0]),
            Err(FrameError::Malformed)
        );
        let mut refuse = Vec::new();
        encode(&Frame::Refuse(CH, Refusal::NotHere), &mut refuse);
        *refuse.last_mut().unwrap() = 7;
        assert_eq!(decode(&refuse), Err(FrameError::Malformed));
        // An offer's address is 4 or 16 bytes, or absent.
        assert_eq!(
            decode(&[6, 0, 0, 0, OFFER, 1, 2, 127, 0, 0]),
            Err(FrameError::Malformed)
        );
    }
}

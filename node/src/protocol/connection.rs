//! [`Connection`]: one client-protocol socket, read and written frame by
//! frame (as mini-redis's `Connection`).
//!
//! Memory: the read buffer grows as bytes arrive, [`READ_CHUNK`] at a time
//! (doubling, as a `Vec` does, but never past the frame being read), never
//! to the length a frame announces. So a connection holds at most about
//! twice what its peer has actually sent of the current frame, which is at
//! most its read cap ([`Connection::set_read_cap`]).

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::frame::{self, FrameError};

/// The most bytes one read asks the socket for.
pub const READ_CHUNK: usize = 64 * 1024;
/// When a node closes a connection, it reads and drops at most this much
/// of what the peer still sends ...
const CLOSE_DRAIN_BYTES: usize = 64 * 1024;
/// ... for at most this long, so that its last reply (say, why the
/// connection is refused) is not lost to the reset that closing a socket
/// with unread bytes sends.
const CLOSE_DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(1);

/// Why reading or writing a frame failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The socket failed.
    #[error("connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent a bad frame.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed in the middle of a frame")]
    Truncated,
}

/// A TCP stream with a read buffer, speaking length-prefixed CBOR frames.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    buf: Vec<u8>,
    /// The largest frame read.
    read_cap: usize,
    /// The largest frame written.
    max_frame: usize,
}

impl Connection {
    /// Wraps `stream`; frames above `max_frame` bytes are refused, both
    /// ways.
    pub fn new(stream: TcpStream, max_frame: usize) -> Self {
        Connection {
            stream,
            buf: Vec::new(),
            read_cap: max_frame,
            max_frame,
        }
    }

    /// From now on, frames read may be at most `cap` bytes (a node reads a
    /// client's hello under [`frame::HELLO_MAX_FRAME`], and raises the cap
    /// once it has accepted it).
    pub fn set_read_cap(&mut self, cap: usize) {
        self.read_cap = cap;
    }

    /// Reads the next frame; `Ok(None)` when the peer closed cleanly between
    /// frames. A whole frame that does not decode is an error
    /// ([`FrameError::Malformed`]) after which the connection can read on:
    /// the frame is skipped.
    pub async fn read<T: DeserializeOwned>(&mut self) -> Result<Option<T>, ConnectionError> {
        loop {
            let parsed = match frame::parse(&self.buf, self.read_cap) {
                Err(FrameError::Malformed { used, reason }) => {
                    self.buf.drain(..used);
                    return Err(FrameError::Malformed { used, reason }.into());
                }
                parsed => parsed?,
            };
            if let Some((value, used)) = parsed {
                self.buf.drain(..used);
                // A big frame (a submit) should not pin its buffer for the
                // rest of the connection.
                if self.buf.capacity() > 1 << 20 && self.buf.len() < 1 << 16 {
                    self.buf.shrink_to(1 << 16);
                }
                return Ok(Some(value));
            }
            self.make_room();
            let n = self.stream.read_buf(&mut self.buf).await?;
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(ConnectionError::Truncated)
                };
            }
        }
    }

    /// Makes room for the next read straight in the buffer (no chunk-sized
    /// array in every future that reads a frame): at most [`READ_CHUNK`]
    /// more than is in it, never beyond the end of the frame being read
    /// (whose length `parse` has already checked against the cap), and in
    /// doubling steps so that a large frame is not copied once per chunk.
    fn make_room(&mut self) {
        let len = self.buf.len();
        // Before the length is in, read only up to it: a stranger's first
        // read is then four bytes, and nothing larger is allocated until
        // the cap has been checked.
        let end = frame::announced(&self.buf).unwrap_or(4);
        let want = end.saturating_sub(len).clamp(1, READ_CHUNK);
        let spare = self.buf.capacity() - len;
        if spare >= want {
            return;
        }
        // Doubling, but not past the frame's end.
        let target = len
            .saturating_add(want)
            .max(self.buf.capacity().saturating_mul(2).min(end));
        self.buf.reserve_exact(target - len);
    }

    /// Closes the connection after what was written: ends the sending
    /// side, then drops what the peer still sends (a bounded amount, for a
    /// bounded time) so that the peer can read the last reply.
    pub async fn close(mut self) {
        if self.stream.shutdown().await.is_err() {
            return;
        }
        let mut sink = [0u8; 1024];
        let mut left = CLOSE_DRAIN_BYTES;
        let drain = async {
            while left > 0 {
                match self.stream.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
        };
        let _ = tokio::time::timeout(CLOSE_DRAIN_TIME, drain).await;
    }

    /// Writes one frame.
    pub async fn write<T: Serialize>(&mut self, value: &T) -> Result<(), ConnectionError> {
        let bytes = frame::encode(value, self.max_frame)?;
        self.stream.write_all(&bytes).await?;
        self.stream.flush().await?;
        Ok(())
    }
}

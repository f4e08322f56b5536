//! [`Connection`]: one client-protocol socket, read and written frame by
//! frame (as mini-redis's `Connection`).

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::frame::{self, FrameError};

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
    max_frame: usize,
}

impl Connection {
    /// Wraps `stream`; frames above `max_frame` bytes are refused.
    pub fn new(stream: TcpStream, max_frame: usize) -> Self {
        Connection {
            stream,
            buf: Vec::with_capacity(4096),
            max_frame,
        }
    }

    /// Reads the next frame; `Ok(None)` when the peer closed cleanly between
    /// frames.
    pub async fn read<T: DeserializeOwned>(&mut self) -> Result<Option<T>, ConnectionError> {
        loop {
            if let Some((value, used)) = frame::parse(&self.buf, self.max_frame)? {
                self.buf.drain(..used);
                // A big frame (a submit) should not pin its buffer for the
                // rest of the connection.
                if self.buf.capacity() > 1 << 20 && self.buf.len() < 1 << 16 {
                    self.buf.shrink_to(1 << 16);
                }
                return Ok(Some(value));
            }
            // Straight into the buffer's spare capacity: no 64 KiB array in
            // every future that reads a frame.
            self.buf.reserve(64 * 1024);
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

    /// Writes one frame.
    pub async fn write<T: Serialize>(&mut self, value: &T) -> Result<(), ConnectionError> {
        let bytes = frame::encode(value, self.max_frame)?;
        self.stream.write_all(&bytes).await?;
        self.stream.flush().await?;
        Ok(())
    }
}

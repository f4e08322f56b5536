//! Reading frames off a stream: one read buffer per stream, room for the
//! largest frame.

use futures::io::{AsyncRead, AsyncReadExt};
use zorilla_overlay::streams::protocol::{Frame, FrameError, MAX_FRAME_BYTES, decode};

/// A stream's read buffer: room for the largest frame and then some.
pub(super) struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl FrameReader {
    pub(super) fn new() -> Self {
        FrameReader {
            buf: vec![0; 4 + MAX_FRAME_BYTES + 64 * 1024],
            start: 0,
            end: 0,
        }
    }

    /// Reads more; `false` at the end of the stream.
    pub(super) async fn fill<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> Result<bool, String> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() || self.start > self.buf.len() / 2 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = r
            .read(&mut self.buf[self.end..])
            .await
            .map_err(|e| e.to_string())?;
        self.end += n;
        Ok(n > 0)
    }

    /// The next whole frame in the buffer, if any.
    pub(super) fn next(&mut self) -> Result<Option<Frame<'_>>, FrameError> {
        let FrameReader { buf, start, end } = self;
        match decode(&buf[*start..*end])? {
            Some((frame, used)) => {
                *start += used;
                Ok(Some(frame))
            }
            None => Ok(None),
        }
    }
}

//! Capture of a worker's stdout and stderr.
//!
//! Everything the guest writes is forwarded as [`OutputChunk`]s into a
//! bounded channel chosen by the caller. When the channel is full the guest
//! waits (back-pressure, costing wall-clock time but no CPU budget), so a
//! slow consumer never makes the host buffer without limit. Bytes are counted
//! against the worker's output limit; the write that crosses it delivers the
//! bytes up to the limit exactly, then traps the guest, and the worker ends
//! with [`crate::Outcome::OutputLimit`].

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::mpsc::{self, OwnedPermit, error::TrySendError};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

use crate::limits::{LimitFlag, LimitHit};

/// Largest chunk the sandbox forwards at once. (WASI preview 1 already splits
/// guest writes into 4 KiB pieces.)
pub const MAX_CHUNK_BYTES: usize = 64 * 1024;

/// Which of the guest's output streams a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutputKind {
    /// File descriptor 1.
    Stdout,
    /// File descriptor 2.
    Stderr,
}

/// A piece of a worker's output, in the order the guest wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputChunk {
    /// The stream written to.
    pub kind: OutputKind,
    /// The bytes written (at most [`MAX_CHUNK_BYTES`]).
    pub data: Vec<u8>,
}

/// State shared by the worker's stdout and stderr.
pub(crate) struct OutputShared {
    sink: Option<mpsc::Sender<OutputChunk>>,
    written: AtomicU64,
    limit: u64,
    flag: Arc<LimitFlag>,
    /// The bytes up to the limit of the write that crossed it, when the
    /// channel was full: the guest traps at once, so no later write or
    /// wait of its stream would send them; the worker's end does
    /// ([`OutputShared::send_tail`]).
    tail: Mutex<Option<OutputChunk>>,
}

impl OutputShared {
    pub(crate) fn new(
        sink: Option<mpsc::Sender<OutputChunk>>,
        limit: u64,
        flag: Arc<LimitFlag>,
    ) -> Arc<Self> {
        Arc::new(OutputShared {
            sink,
            written: AtomicU64::new(0),
            limit,
            flag,
            tail: Mutex::new(None),
        })
    }

    /// Sends the chunk left by the write that crossed the limit, waiting
    /// for room; called once the guest has stopped.
    pub(crate) async fn send_tail(&self) {
        let tail = self.tail.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let (Some(chunk), Some(sink)) = (tail, &self.sink) {
            // A receiver that is gone discards the output.
            let _ = sink.send(chunk).await;
        }
    }

    /// Forwards what a native worker writes to one of its pipes, in chunks
    /// of at most [`MAX_CHUNK_BYTES`], waiting for room in the channel (the
    /// worker then blocks in its writes, as a WebAssembly guest waits).
    /// Returns at the end of the pipe, or once the bytes pass the limit
    /// (delivering them up to the limit exactly): then `true`.
    pub(crate) async fn pump(
        &self,
        kind: OutputKind,
        mut pipe: impl tokio::io::AsyncRead + Unpin,
    ) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; MAX_CHUNK_BYTES];
        loop {
            let len = match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(len) => len,
            };
            let allowed = self.account(len);
            if allowed > 0
                && let Some(sink) = &self.sink
            {
                let chunk = OutputChunk {
                    kind,
                    data: buf[..allowed].to_vec(),
                };
                // Without a receiver the output is discarded (but counted).
                let _ = sink.send(chunk).await;
            }
            if allowed < len {
                self.flag.set(LimitHit::Output);
                return true;
            }
        }
    }

    /// Bytes the guest has written so far (capped at the limit).
    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed).min(self.limit)
    }

    /// Counts `len` more bytes; returns how many of them are within the limit.
    fn account(&self, len: usize) -> usize {
        let before = self.written.fetch_add(len as u64, Ordering::Relaxed);
        let room = self.limit.saturating_sub(before);
        usize::try_from(room).unwrap_or(usize::MAX).min(len)
    }

    fn over_limit(&self) -> StreamError {
        self.flag.set(LimitHit::Output);
        StreamError::Trap(wasmtime::format_err!(
            "output limit of {} bytes exceeded",
            self.limit
        ))
    }

    fn deliver(&self, permit: Option<OwnedPermit<OutputChunk>>, kind: OutputKind, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let chunk = OutputChunk {
            kind,
            data: data.to_vec(),
        };
        match permit {
            Some(permit) => {
                permit.send(chunk);
            }
            // Without a permit the receiver is gone (or there never was one):
            // the output is discarded, but still counted.
            None => {
                if let Some(sink) = &self.sink {
                    let _ = sink.try_send(chunk);
                }
            }
        }
    }
}

/// What the WASI context holds for stdout or stderr; every use creates a
/// fresh stream over the shared state.
#[derive(Clone)]
pub(crate) struct Capture {
    pub(crate) shared: Arc<OutputShared>,
    pub(crate) kind: OutputKind,
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(CaptureStream {
            capture: self.clone(),
            backlog: None,
        })
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(CaptureWriter {
            capture: self.clone(),
            reserving: Mutex::new(None),
        })
    }
}

/// The WASI stream (used by preview 1's `fd_write`).
///
/// It never holds a channel slot between calls (a reserved but unused slot
/// would block the other stream of the same worker when the channel is
/// small). Instead, a chunk that finds the channel full waits in `backlog`,
/// at most one per stream; `check_write` grants no more room until it has
/// gone out, and `ready` waits for the channel to take it.
struct CaptureStream {
    capture: Capture,
    backlog: Option<OutputChunk>,
}

impl CaptureStream {
    /// Tries to send the waiting chunk; true when nothing waits any more.
    fn flush_backlog(&mut self) -> bool {
        let (Some(chunk), Some(sink)) = (self.backlog.take(), &self.capture.shared.sink) else {
            return true;
        };
        match sink.try_send(chunk) {
            Ok(()) | Err(TrySendError::Closed(_)) => true,
            Err(TrySendError::Full(chunk)) => {
                self.backlog = Some(chunk);
                false
            }
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CaptureStream {
    async fn ready(&mut self) {
        if self.backlog.is_none() {
            return;
        }
        if let Some(sink) = &self.capture.shared.sink {
            // Reserve first and only then take the chunk, so a cancelled
            // wait loses nothing. A closed channel discards the output.
            match sink.reserve().await {
                Ok(permit) => {
                    if let Some(chunk) = self.backlog.take() {
                        permit.send(chunk);
                    }
                }
                Err(_) => self.backlog = None,
            }
        }
    }
}

impl OutputStream for CaptureStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let shared = &self.capture.shared;
        let allowed = shared.account(bytes.len());
        if allowed > 0
            && let Some(sink) = &shared.sink
        {
            let chunk = OutputChunk {
                kind: self.capture.kind,
                data: bytes[..allowed].to_vec(),
            };
            match sink.try_send(chunk) {
                // Without a receiver the output is discarded (but counted).
                Ok(()) | Err(TrySendError::Closed(_)) => {}
                // The guest traps below: its stream will not send it.
                Err(TrySendError::Full(chunk)) if allowed < bytes.len() => {
                    *shared.tail.lock().unwrap_or_else(|p| p.into_inner()) = Some(chunk);
                }
                Err(TrySendError::Full(chunk)) => self.backlog = Some(chunk),
            }
        }
        if allowed < bytes.len() {
            return Err(shared.over_limit());
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        let shared = &self.capture.shared;
        if shared.written.load(Ordering::Relaxed) > shared.limit {
            return Err(shared.over_limit());
        }
        Ok(if self.flush_backlog() {
            MAX_CHUNK_BYTES
        } else {
            0
        })
    }
}

type Reserving = Pin<Box<dyn Future<Output = Option<OwnedPermit<OutputChunk>>> + Send>>;

/// The `AsyncWrite` view of the same capture, which `wasmtime-wasi` requires
/// of every stdout implementation (preview 1 uses [`CaptureStream`]).
struct CaptureWriter {
    capture: Capture,
    /// A pending reservation of a channel slot. The mutex only makes the
    /// writer `Sync`; it is never contended.
    reserving: Mutex<Option<Reserving>>,
}

impl tokio::io::AsyncWrite for CaptureWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let permit = match &this.capture.shared.sink {
            None => None,
            Some(sink) => {
                let slot = this.reserving.get_mut().unwrap_or_else(|p| p.into_inner());
                let fut = slot.get_or_insert_with(|| {
                    let sink = sink.clone();
                    Box::pin(async move { sink.reserve_owned().await.ok() })
                });
                match fut.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(permit) => {
                        *slot = None;
                        permit
                    }
                }
            }
        };
        let buf = &buf[..buf.len().min(MAX_CHUNK_BYTES)];
        let shared = &this.capture.shared;
        let allowed = shared.account(buf.len());
        shared.deliver(permit, this.capture.kind, &buf[..allowed]);
        if allowed < buf.len() {
            shared.flag.set(LimitHit::Output);
            return Poll::Ready(Err(io::Error::other("output limit exceeded")));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

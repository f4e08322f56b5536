//! The sending side's state: every channel from this node to one peer,
//! in an [`Outbox`], and the write side of the link's connection, which
//! the link's writer task and the senders themselves write on.
//!
//! # Who writes
//!
//! A worker's message is pushed on the outbox; then, if the message is
//! small and the connection is idle (nothing the writer task has left to
//! write or flush, and nobody else writing at that moment), the sending
//! worker writes it on the connection itself ([`OutLink::write_now`]):
//! without waking the writer task, which would cost a task hand-off (often
//! a thread wake-up) per message. Otherwise the writer task is woken and
//! writes it, as everything that does not go at once: what the socket does
//! not take, large messages, chunks sent again after a reconnection, asks.
//! Both write under the same lock, so frames never interleave, and both take
//! the chunks from the outbox, whose order they keep. A sender never waits
//! for the socket: whatever it cannot write at once (the socket is full,
//! the lock is taken) is left to the writer task, which any readiness it
//! registered wakes.
//!
//! # Lanes
//!
//! On a direct connection the link may have lanes besides (see the
//! module docs of [`link`](super), "Direct connections"): each has a
//! [`Wire`] of its own and its own writer task, which takes whole chunks
//! of striped messages off the outbox ([`Outbox::next_lane`]) while any
//! are there: whichever lane is ready takes the next. Nobody else writes
//! on a lane, and nothing else is written on one.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::IoSlice;
use std::ops::Range;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Wake, Waker};

use futures::io::AsyncWrite;
use tokio::sync::Notify;
use tokio::time::Instant;
use zorilla_core::channel::{ChannelId, Outbox, STRIPE_BYTES, SharedChunk};
use zorilla_overlay::PeerId;
use zorilla_overlay::streams::protocol::{Frame, encode, encode_data_head};

use super::lock::lock;

/// Bytes the writer task batches into one write.
pub(super) const WRITE_BATCH: usize = 512 * 1024;

/// Chunks of at least this many bytes are written from their message,
/// after their frame's head, rather than copied behind it into the write
/// buffer first (smaller ones are copied: one write for many of them).
const SHARE_BYTES: usize = 16 * 1024;

/// The most pieces (heads, chunks' bytes) handed to one vectored write.
const WRITE_SLICES: usize = 16;

/// The largest message a sending worker writes on an idle connection
/// itself, and the most bytes of frames it writes then (larger messages
/// go through the writer task: the worker's guest is not charged for
/// encrypting them, and they are written in large batches).
pub(super) const WRITE_NOW_BYTES: usize = 64 * 1024;

#[derive(Default)]
pub(super) struct OutState {
    pub(super) outbox: Outbox,
    /// Channels closed for good (their receiver ended, or the peer could
    /// not be reached): sends on them fail.
    pub(super) closed: HashSet<ChannelId>,
    /// Channels whose rank the peer does not have, since when: after
    /// [`GIVE_UP`](super::GIVE_UP) they are closed.
    pub(super) not_here: HashMap<ChannelId, Instant>,
    /// When an ack last took something of each job off the outbox (or a
    /// channel of it closed): see [`Links::quiet`](super::Links::quiet).
    pub(super) settled: HashMap<u64, Instant>,
}

/// The sending side of every channel from this node to one peer.
pub(crate) struct OutLink {
    pub(super) peer: PeerId,
    pub(super) state: Mutex<OutState>,
    /// The write side of the connection being served, if one is. Locked
    /// before `state`, never after; held only while writing without
    /// waiting (a poll), never across an await.
    pub(super) wire: Mutex<Option<Wire>>,
    /// The writer: something to send.
    pub(super) wake: Notify,
    /// Senders: credit came, or channels closed.
    pub(super) credit: Notify,
    /// The lanes beside the connection being served, if it has any.
    pub(super) lanes: Mutex<Vec<Arc<Lane>>>,
    /// Chunks written on lanes so far (for tests and the status page).
    pub(super) lane_chunks: std::sync::atomic::AtomicU64,
}

/// A lane's write side and its writer task's wake-up.
pub(super) struct Lane {
    wire: Mutex<Option<Wire>>,
    pub(super) wake: Notify,
    /// Its local port (so that a test can cut it alone).
    pub(super) port: Option<u16>,
}

impl Lane {
    /// The lane's writer task's part: writes chunks of striped messages
    /// until there are none (ready) or the lane must wait (pending).
    pub(super) fn poll_write(
        &self,
        link: &OutLink,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), String>> {
        let mut wire = lock(&self.wire);
        let Some(w) = wire.as_mut() else {
            return Poll::Ready(Err("the lane is gone".into()));
        };
        let before = w.lane_chunks;
        let result = w.poll_write_out(&link.state, WRITE_BATCH, false, cx);
        link.lane_chunks
            .fetch_add(w.lane_chunks - before, std::sync::atomic::Ordering::Relaxed);
        result
    }
}

/// How a message pushed on the outbox went out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Written {
    /// The sender wrote it on the connection itself.
    Now,
    /// The writer task was woken to write it.
    Queued,
}

impl OutLink {
    pub(super) fn new(peer: PeerId) -> Arc<OutLink> {
        Arc::new(OutLink {
            peer,
            state: Mutex::new(OutState::default()),
            wire: Mutex::new(None),
            wake: Notify::new(),
            credit: Notify::new(),
            lanes: Mutex::new(Vec::new()),
            lane_chunks: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Serves `w` as a lane beside the connection from now on; `port` is
    /// its local port. Striping starts with the first lane.
    pub(super) fn attach_lane(
        &self,
        w: impl AsyncWrite + Send + 'static,
        port: Option<u16>,
    ) -> Arc<Lane> {
        let lane = Arc::new(Lane {
            wire: Mutex::new(None),
            wake: Notify::new(),
            port,
        });
        let waker = Waker::from(Arc::new(WakeLane(Arc::downgrade(&lane))));
        *lock(&lane.wire) = Some(Wire::new(Box::pin(w), waker, true));
        tracing::debug!(peer = %self.peer, port = ?lane.port, "lane attached");
        lock(&self.lanes).push(lane.clone());
        lock(&self.state).outbox.set_striping(true);
        self.wake_lanes();
        lane
    }

    /// Wakes the lanes' writer tasks (chunks of striped messages wait).
    pub(super) fn wake_lanes(&self) {
        for lane in lock(&self.lanes).iter() {
            lane.wake.notify_one();
        }
    }

    /// Serves `w` as the write side of the link's connection from now on.
    pub(super) fn attach(self: &Arc<Self>, w: impl AsyncWrite + Send + 'static) {
        let waker = Waker::from(Arc::new(WakeWriter(Arc::downgrade(self))));
        *lock(&self.wire) = Some(Wire::new(Box::pin(w), waker, false));
    }

    /// The connection is over, with its lanes: nobody writes on them any
    /// more. Call before the outbox is rewound, so what a sender writes on
    /// it meanwhile is sent again on the next one.
    pub(super) fn detach(&self) {
        *lock(&self.wire) = None;
        for lane in std::mem::take(&mut *lock(&self.lanes)) {
            *lock(&lane.wire) = None;
        }
    }

    /// Writes what waits in the outbox (a message of `len` bytes was just
    /// pushed) on the connection at once if it is idle and the message
    /// small; else wakes the writer task to write it.
    pub(super) fn write_or_wake(&self, len: usize) -> Written {
        if len <= WRITE_NOW_BYTES && self.write_now() {
            Written::Now
        } else {
            self.wake.notify_one();
            if len as u64 >= STRIPE_BYTES {
                self.wake_lanes();
            }
            Written::Queued
        }
    }

    /// Writes what the outbox holds (at most [`WRITE_NOW_BYTES`] of
    /// frames) on the connection if nothing else is being written or
    /// waits to be: `true` if all of it went, written and flushed, without
    /// waiting. Never waits: on `false` the writer task must be woken.
    fn write_now(&self) -> bool {
        let Ok(mut wire) = self.wire.try_lock() else {
            return false;
        };
        let Some(w) = wire.as_mut() else {
            return false;
        };
        if !w.idle() {
            return false;
        }
        // Readiness registered here wakes the writer task, which then
        // writes (and registers) for itself.
        let waker = w.waker.clone();
        let mut cx = Context::from_waker(&waker);
        match w.poll_write_out(&self.state, WRITE_NOW_BYTES, true, &mut cx) {
            Poll::Ready(Ok(())) => !lock(&self.state).outbox.has_unsent(),
            Poll::Ready(Err(_)) | Poll::Pending => false,
        }
    }

    /// The writer task's part: writes what the outbox holds until it is
    /// empty (ready) or the connection must wait (pending, woken by `cx`).
    /// Fails once a write failed, or if no connection is attached.
    pub(super) fn poll_write(&self, cx: &mut Context<'_>) -> Poll<Result<(), String>> {
        let mut wire = lock(&self.wire);
        let Some(w) = wire.as_mut() else {
            return Poll::Ready(Err("no connection".into()));
        };
        w.poll_write_out(&self.state, WRITE_BATCH, false, cx)
    }
}

/// Wakes a lane's writer task.
struct WakeLane(Weak<Lane>);

impl Wake for WakeLane {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(lane) = self.0.upgrade() {
            lane.wake.notify_one();
        }
    }
}

/// Wakes a link's writer task (for readiness a sender registered).
struct WakeWriter(Weak<OutLink>);

impl Wake for WakeWriter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(link) = self.0.upgrade() {
            link.wake.notify_one();
        }
    }
}

/// The write side of a link's connection, with what was taken off the
/// outbox and not written yet.
pub(super) struct Wire {
    w: Pin<Box<dyn AsyncWrite + Send>>,
    /// Frames taken off the outbox, encoded: whole small ones, and the
    /// heads of large chunks (whose bytes stay in their message).
    buf: Vec<u8>,
    /// What is left to write, in order.
    pieces: VecDeque<Piece>,
    /// Bytes of the first piece written.
    pos: usize,
    /// Something was written since the last flush.
    unflushed: bool,
    /// Why a write failed: the connection is done.
    failed: Option<String>,
    /// Wakes the link's writer task.
    waker: Waker,
    /// A lane's: it carries chunks of striped messages only.
    lane: bool,
    /// Chunks of striped messages it took as a lane.
    lane_chunks: u64,
}

/// A piece of what a [`Wire`] writes.
enum Piece {
    /// Frames encoded in the wire's buffer.
    Encoded(Range<usize>),
    /// A large chunk's bytes, in its message (after its head).
    Bytes(SharedChunk),
}

impl Piece {
    fn bytes<'a>(&'a self, buf: &'a [u8]) -> &'a [u8] {
        match self {
            Piece::Encoded(range) => &buf[range.clone()],
            Piece::Bytes(chunk) => chunk.bytes(),
        }
    }
}

impl Wire {
    fn new(w: Pin<Box<dyn AsyncWrite + Send>>, waker: Waker, lane: bool) -> Wire {
        Wire {
            w,
            buf: Vec::new(),
            pieces: VecDeque::new(),
            pos: 0,
            unflushed: false,
            failed: None,
            waker,
            lane,
            lane_chunks: 0,
        }
    }

    /// Nothing is left to write or flush, and nothing failed.
    fn idle(&self) -> bool {
        self.pieces.is_empty() && !self.unflushed && self.failed.is_none()
    }

    /// Writes what is left of the batch, flushes, and takes the next batch
    /// (frames of chunks of at most `batch` bytes, about `batch` bytes in
    /// all) off the outbox, until the outbox has nothing more to send, or,
    /// if `once`, after one batch taken.
    fn poll_write_out(
        &mut self,
        state: &Mutex<OutState>,
        batch: usize,
        once: bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), String>> {
        if let Some(e) = &self.failed {
            return Poll::Ready(Err(e.clone()));
        }
        let result = self.poll_write_inner(state, batch, once, cx);
        if let Poll::Ready(Err(e)) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn poll_write_inner(
        &mut self,
        state: &Mutex<OutState>,
        batch: usize,
        once: bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), String>> {
        let mut taken = false;
        loop {
            while !self.pieces.is_empty() {
                let n = match self.poll_write_pieces(cx) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err("the connection wrote 0".into())),
                    Poll::Ready(Ok(n)) => n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e.to_string())),
                    Poll::Pending => return Poll::Pending,
                };
                self.advance(n);
                self.unflushed = true;
            }
            if self.unflushed {
                match self.w.as_mut().poll_flush(cx) {
                    Poll::Ready(Ok(())) => self.unflushed = false,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e.to_string())),
                    Poll::Pending => return Poll::Pending,
                }
            }
            self.buf.clear();
            self.pos = 0;
            if once && taken {
                return Poll::Ready(Ok(()));
            }
            taken = true;
            self.take_batch(state, batch);
            if self.pieces.is_empty() {
                if !once {
                    // The connection's own wake-ups (a direct connection's
                    // cut among them) may have been registered by a sender
                    // writing: the writer task registers its own again
                    // (nothing left to flush, so this writes nothing).
                    match self.w.as_mut().poll_flush(cx) {
                        Poll::Ready(Ok(())) | Poll::Pending => {}
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e.to_string())),
                    }
                }
                return Poll::Ready(Ok(()));
            }
        }
    }

    /// Takes about `batch` bytes of frames off the outbox (the buffer and
    /// the pieces are empty).
    fn take_batch(&mut self, state: &Mutex<OutState>, batch: usize) {
        let mut s = lock(state);
        let mut taken = 0;
        if self.lane {
            while taken < batch {
                let Some(chunk) = s.outbox.next_lane() else {
                    break;
                };
                let start = self.buf.len();
                encode_data_head(&chunk.chunk(), &mut self.buf);
                self.encoded(start);
                taken += self.buf.len() - start + chunk.bytes().len();
                self.pieces.push_back(Piece::Bytes(chunk));
                self.lane_chunks += 1;
            }
            return;
        }
        while taken < batch {
            let start = self.buf.len();
            if s.outbox.ask_next() {
                match s.outbox.next_chunk(batch) {
                    Some(chunk) => encode(&Frame::Data(chunk), &mut self.buf),
                    None => break,
                }
                taken += self.buf.len() - start;
                self.encoded(start);
                continue;
            }
            let Some(chunk) = s.outbox.next_shared(batch) else {
                break;
            };
            let len = chunk.bytes().len();
            if len >= SHARE_BYTES {
                encode_data_head(&chunk.chunk(), &mut self.buf);
                self.encoded(start);
                self.pieces.push_back(Piece::Bytes(chunk));
            } else {
                encode(&Frame::Data(chunk.chunk()), &mut self.buf);
                self.encoded(start);
            }
            taken += self.buf.len() - start + len;
        }
    }

    /// Adds what was encoded in the buffer from `start` to the pieces.
    fn encoded(&mut self, start: usize) {
        let end = self.buf.len();
        if end == start {
            return;
        }
        if let Some(Piece::Encoded(last)) = self.pieces.back_mut()
            && last.end == start
        {
            last.end = end;
            return;
        }
        self.pieces.push_back(Piece::Encoded(start..end));
    }

    /// Writes the first pieces in one vectored write.
    fn poll_write_pieces(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        let Wire {
            w,
            buf,
            pieces,
            pos,
            ..
        } = self;
        let mut slices = [IoSlice::new(&[]); WRITE_SLICES];
        let mut count = 0;
        for (piece, slice) in pieces.iter().zip(slices.iter_mut()) {
            let bytes = piece.bytes(buf);
            *slice = IoSlice::new(if count == 0 { &bytes[*pos..] } else { bytes });
            count += 1;
        }
        w.as_mut().poll_write_vectored(cx, &slices[..count])
    }

    /// `n` more bytes of the pieces were written.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(first) = self.pieces.front() else {
                return;
            };
            let left = first.bytes(&self.buf).len() - self.pos;
            if n < left {
                self.pos += n;
                return;
            }
            n -= left;
            self.pieces.pop_front();
            self.pos = 0;
        }
    }
}

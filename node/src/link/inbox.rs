//! Rank inboxes: the messages and membership changes waiting for one
//! rank's worker, and the rank's receive policy executed on them.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use zorilla_core::channel::{ChannelId, Inbound, MAX_MESSAGE_BYTES, RankReceiver, footprint};
use zorilla_overlay::PeerId;
use zorilla_sandbox::{Delivery, Handover, MembershipChange, Received, RecvBuffer, TransportError};

use super::lock::lock;
use super::peer_inbound::{PeerInbound, RecvState};
use crate::wire::job_copy::Placed;

/// Unread membership changes an inbox keeps (older ones are dropped by the
/// host API anyway).
const MEMBERSHIP_ITEMS: usize = 64;

/// How long a worker polls its empty inbox before it sleeps, at most, and
/// how short its last wait must have been for it to poll at all (see
/// [`Inbox::recv`]).
pub(super) const SPIN: Duration = Duration::from_micros(20);

/// The most polls of one such spin, whatever the clock says.
pub(super) const SPIN_POLLS: u32 = 1000;

/// Where a message in an inbox came from: whom to give its credit back.
pub(super) enum Source {
    Local,
    Remote(Arc<PeerInbound>, ChannelId),
}

pub(super) enum Item {
    Message {
        from: u32,
        payload: Vec<u8>,
        source: Source,
    },
    Membership(MembershipChange),
}

#[derive(Default)]
pub(super) struct InboxState {
    pub(super) items: VecDeque<Item>,
    closed: bool,
    memberships: usize,
    /// When the last item was pushed.
    pushed: Option<std::time::Instant>,
    /// The buffer the worker lent while it waits in [`Inbox::recv_into`].
    posted: Option<RecvBuffer>,
    /// A message written into `posted`, not yet returned to the worker.
    written: Option<Written>,
    /// A message from another node being written into `posted` as it
    /// arrives.
    claim: Option<Claim>,
}

/// A message copied straight into the worker's lent buffer.
struct Written {
    from: u32,
    len: usize,
    source: Source,
    /// The buffer it is in.
    buffer: RecvBuffer,
}

/// A message of several chunks from another node, built in the worker's
/// lent buffer (its channel's [`Inbound::lend`]): only the reader of the
/// peer's stream writes it, holding the peer's lock and then the inbox's.
/// It ends whole (it becomes [`Written`]), dropped with its stream, or
/// given back when the receive ends first ([`Posted`]).
struct Claim {
    peer: Arc<PeerInbound>,
    channel: ChannelId,
    loan: u64,
    buffer: RecvBuffer,
}

impl Claim {
    fn of(&self, peer: &Arc<PeerInbound>, channel: ChannelId) -> bool {
        self.channel == channel && Arc::ptr_eq(&self.peer, peer)
    }
}

impl InboxState {
    /// Puts a message in: straight into the worker's lent buffer when it
    /// waits with one it fits, nothing is queued before it, and the bytes
    /// are borrowed (moving an owned message into the queue copies
    /// nothing); else into the queue, copied if borrowed.
    fn put(&mut self, from: u32, bytes: Cow<'_, [u8]>, source: Source) {
        let filled = match (&bytes, self.lendable()) {
            (Cow::Borrowed(bytes), Some(buffer)) if buffer.write_at(0, bytes) => Some(buffer),
            _ => None,
        };
        if let Some(buffer) = filled {
            self.written = Some(Written {
                from,
                len: bytes.len(),
                source,
                buffer,
            });
        } else {
            self.items.push_back(Item::Message {
                from,
                payload: bytes.into_owned(),
                source,
            });
        }
        self.pushed = Some(std::time::Instant::now());
    }

    /// The worker's lent buffer, if a message may go into it now: nothing
    /// is queued before it, and no other message is (being) written there.
    fn lendable(&self) -> Option<RecvBuffer> {
        let free = self.items.is_empty() && self.written.is_none() && self.claim.is_none();
        self.posted.clone().filter(|_| free)
    }

    /// Writes a chunk of `peer`'s `channel`, `bytes` at `offset` of a
    /// message of `total` bytes, where the message is built under `loan`
    /// (its channel said [`Received::Lent`](zorilla_core::channel::Received::Lent); `last`: the message is
    /// whole with it). `false` if there is no such claim or the write
    /// failed: the message is lost here (which cannot happen: a claim ends
    /// only under the peer's lock, and its buffer stays lent until then).
    pub(super) fn write_lent(
        &mut self,
        peer: &Arc<PeerInbound>,
        channel: ChannelId,
        loan: u64,
        (offset, bytes, total): (u64, &[u8], u64),
        last: bool,
    ) -> bool {
        let Some(claim) = self
            .claim
            .as_mut()
            .filter(|c| c.of(peer, channel) && c.loan == loan)
        else {
            return false;
        };
        // Within the buffer, which holds `total` (checked when lent).
        let (Ok(offset), Ok(total)) = (usize::try_from(offset), usize::try_from(total)) else {
            return false;
        };
        if !claim.buffer.write_at(offset, bytes) {
            return false;
        }
        if last && let Some(claim) = self.claim.take() {
            self.written = Some(Written {
                from: channel.from,
                len: total,
                source: Source::Remote(claim.peer, channel),
                buffer: claim.buffer,
            });
            self.pushed = Some(std::time::Instant::now());
        }
        true
    }

    /// `peer`'s `channel` no longer builds a message under a loan it had
    /// (the message was dropped): its claim, if it has one, is over.
    pub(super) fn end_loan(&mut self, peer: &Arc<PeerInbound>, channel: ChannelId) {
        if self.claim.as_ref().is_some_and(|c| c.of(peer, channel)) {
            self.claim = None;
        }
    }
}

/// The messages and membership changes waiting for one rank's worker.
pub(crate) struct Inbox {
    /// Which incarnation of its rank the worker is: data addressed to
    /// another is not its.
    incarnation: u32,
    pub(super) state: Mutex<InboxState>,
    /// Something was pushed (one waiter: the rank's worker).
    ready: Notify,
    /// A local sender got credit, or the inbox closed.
    room: Notify,
    /// The rank's credit for every channel to it. Locked before a peer's
    /// receiving state, never after.
    receiving: Mutex<Receiving>,
    /// A delivery came within [`SPIN`] of the start of the worker's last
    /// wait: the next one spins first.
    spin: AtomicBool,
}

/// Who sends on a channel to a rank: a worker of this node (its rank), or
/// one on another node (the node, and the channel).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Sender {
    Local(u32),
    Remote(PeerId, ChannelId),
}

/// A rank's receive policy, and what executing it needs.
#[derive(Default)]
struct Receiving {
    rank: RankReceiver<Sender>,
    /// The receiving sides of the peers that send here: where the limits
    /// of their channels are raised.
    peers: HashMap<PeerId, Weak<PeerInbound>>,
    /// How far each local sender has pushed (positions as the rank's).
    local: HashMap<u32, u64>,
}

impl Inbox {
    pub(crate) fn new(incarnation: u32) -> Arc<Inbox> {
        Arc::new(Inbox {
            incarnation,
            state: Mutex::default(),
            ready: Notify::new(),
            room: Notify::new(),
            receiving: Mutex::default(),
            spin: AtomicBool::new(true),
        })
    }

    /// Raises the limits of the channels `raised` names to their credit
    /// and tells their senders (at once, but for `reader`'s: the channel
    /// the worker just read, whose ack may wait a little). A channel whose
    /// state is gone is forgotten, and what that frees is given out too.
    fn raise(&self, r: &mut Receiving, raised: Vec<Sender>, reader: Option<Sender>) {
        let mut todo = VecDeque::from(raised);
        let mut local = false;
        while let Some(sender) = todo.pop_front() {
            let credit = r.rank.credit(&sender);
            let alive = match sender {
                Sender::Local(_) => {
                    local = true;
                    true
                }
                Sender::Remote(peer, channel) => r
                    .peers
                    .get(&peer)
                    .and_then(Weak::upgrade)
                    .is_some_and(|p| p.raise(channel, credit, Some(sender) != reader)),
            };
            if !alive {
                todo.extend(r.rank.forget(&sender));
            }
        }
        if local {
            self.room.notify_waiters();
        }
    }

    /// `peer`'s sender on `channel` asks for room for a message of
    /// `total` bytes, which would start at `start`.
    pub(super) fn ask(&self, peer: &Arc<PeerInbound>, channel: ChannelId, start: u64, total: u64) {
        let mut r = lock(&self.receiving);
        r.peers.insert(peer.peer, Arc::downgrade(peer));
        let raised = r
            .rank
            .asked(Sender::Remote(peer.peer, channel), start, total);
        self.raise(&mut r, raised, None);
    }

    /// Lends the worker's buffer to the message `inbound` (`peer`'s
    /// `channel`) is building, if the worker waits with one that holds it
    /// and nothing else may go there first ([`InboxState::lendable`]):
    /// what arrived of it is written there now, its further chunks as they
    /// come ([`InboxState::write_lent`]), which saves copying the message
    /// whole into the buffer after it. Called with the peer's lock held.
    pub(super) fn lend(&self, peer: &Arc<PeerInbound>, channel: ChannelId, inbound: &mut Inbound) {
        let Some(total) = inbound.building() else {
            return;
        };
        let mut s = lock(&self.state);
        // A claim of this channel's whose message was dropped since (its
        // stream was lost) is over.
        s.end_loan(peer, channel);
        let Some(buffer) = s.lendable().filter(|b| b.capacity() as u64 >= total) else {
            return;
        };
        let loan = inbound.lend(|offset, bytes| {
            usize::try_from(offset).is_ok_and(|offset| buffer.write_at(offset, bytes))
        });
        if let Some(loan) = loan {
            s.claim = Some(Claim {
                peer: peer.clone(),
                channel,
                loan,
                buffer,
            });
        }
    }

    /// A message claimed in the worker's buffer is whole there
    /// ([`InboxState::write_lent`]): the worker wakes to take it.
    pub(super) fn written(&self) {
        self.ready.notify_one();
    }

    /// The worker read `len` bytes of `peer`'s `channel`.
    pub(super) fn read_remote(&self, peer: &Arc<PeerInbound>, channel: ChannelId, len: u64) {
        let mut r = lock(&self.receiving);
        let sender = Sender::Remote(peer.peer, channel);
        r.peers.insert(peer.peer, Arc::downgrade(peer));
        let raised = r.rank.consumed(&sender, len);
        peer.consumed(channel, len, r.rank.credit(&sender));
        self.raise(&mut r, raised, Some(sender));
    }

    /// The worker read `len` bytes from rank `from` of this node.
    fn read_local(&self, from: u32, len: u64) {
        let mut r = lock(&self.receiving);
        let raised = r.rank.consumed(&Sender::Local(from), len);
        self.raise(&mut r, raised, None);
    }

    /// `peer`'s `channels` are gone: what the rank lent them returns.
    pub(super) fn forget(&self, peer: &PeerInbound, channels: &[ChannelId]) {
        let mut r = lock(&self.receiving);
        for channel in channels {
            let raised = r.rank.forget(&Sender::Remote(peer.peer, *channel));
            self.raise(&mut r, raised, None);
        }
    }

    /// Which incarnation of its rank the worker is.
    pub(crate) fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// The worker is gone: later messages are refused, waiting senders
    /// get `Closed`; what is queued can still be read.
    pub(crate) fn close(&self) {
        lock(&self.state).closed = true;
        self.ready.notify_one();
        self.room.notify_waiters();
    }

    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    /// Queues a membership change (dropped if the worker lets
    /// [`MEMBERSHIP_ITEMS`] pile up).
    pub(crate) fn push_membership(&self, change: MembershipChange) {
        {
            let mut s = lock(&self.state);
            if s.closed || s.memberships >= MEMBERSHIP_ITEMS {
                return;
            }
            s.memberships += 1;
            s.items.push_back(Item::Membership(change));
            s.pushed = Some(std::time::Instant::now());
        }
        self.ready.notify_one();
    }

    /// Puts in a message that arrived from another node (its credit was
    /// checked by its channel; see [`InboxState::put`]). Fails if the
    /// worker is gone.
    pub(super) fn push_remote(
        &self,
        from: u32,
        payload: Cow<'_, [u8]>,
        source: Source,
    ) -> Result<(), ()> {
        {
            let mut s = lock(&self.state);
            if s.closed {
                return Err(());
            }
            s.put(from, payload, source);
        }
        self.ready.notify_one();
        Ok(())
    }

    /// Puts in a message from rank `from` of this node, waiting for the
    /// rank's credit as a sender on another node would (asking for it
    /// when it is short).
    pub(crate) async fn push_local(
        &self,
        from: u32,
        payload: Vec<u8>,
    ) -> Result<(), TransportError> {
        self.admit_local(from, payload.len()).await?;
        self.put_local(from, Cow::Owned(payload))
    }

    /// Waits until the rank's credit admits a message of `len` bytes from
    /// rank `from` of this node (asking for it when it is short). Takes
    /// nothing: only `from`'s worker sends on its channel, and a limit
    /// granted is never taken back, so what is admitted stays admitted
    /// until [`Inbox::put_local`] puts the message in.
    async fn admit_local(&self, from: u32, len: usize) -> Result<(), TransportError> {
        let len = len as u64;
        if len > MAX_MESSAGE_BYTES {
            return Err(TransportError::TooLarge {
                len: len as usize,
                max: MAX_MESSAGE_BYTES as usize,
            });
        }
        let sender = Sender::Local(from);
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if self.is_closed() {
                return Err(TransportError::Closed);
            }
            {
                let mut r = lock(&self.receiving);
                let end = r.local.get(&from).copied().unwrap_or(0);
                if end.saturating_add(footprint(len)) <= r.rank.credit(&sender) {
                    return Ok(());
                }
                let raised = r.rank.asked(sender, end, len);
                self.raise(&mut r, raised, None);
            }
            room.await;
        }
    }

    /// Puts in a message from rank `from` of this node that
    /// [`Inbox::admit_local`] admitted.
    fn put_local(&self, from: u32, bytes: Cow<'_, [u8]>) -> Result<(), TransportError> {
        {
            let mut r = lock(&self.receiving);
            let end = r.local.get(&from).copied().unwrap_or(0);
            r.local
                .insert(from, end.saturating_add(footprint(bytes.len() as u64)));
        }
        {
            let mut s = lock(&self.state);
            if s.closed {
                return Err(TransportError::Closed);
            }
            s.put(from, bytes, Source::Local);
        }
        self.ready.notify_one();
        Ok(())
    }

    /// Waits until a message of `len` bytes from rank `from` of this node
    /// is admitted; what it returns puts the message in, copied once:
    /// straight from the sender's memory into this worker's lent buffer
    /// when it waits with one (see [`Inbox::recv_into`]).
    pub(crate) async fn reserve_local(
        self: Arc<Self>,
        from: u32,
        len: usize,
    ) -> Result<Box<dyn Handover>, TransportError> {
        self.admit_local(from, len).await?;
        Ok(Box::new(LocalHandover {
            inbox: self,
            from,
            len,
        }))
    }

    /// The next delivery; `Closed` once the inbox is closed and empty.
    /// Cancel-safe: nothing is taken until it is returned.
    pub(crate) async fn recv(&self) -> Result<Delivery, TransportError> {
        match self.receive(None).await? {
            Received::Delivery(delivery) => Ok(delivery),
            // Not without a buffer.
            Received::Written { .. } => Err(TransportError::Closed),
        }
    }

    /// The next delivery, with `buffer` lent for it: a message that comes
    /// while the worker waits, and fits, is copied straight into it by
    /// whoever brings it (a worker of this node, or the task that reads
    /// the stream from another node) instead of into a message of its own.
    /// Cancel-safe: a message written into the buffer by a call whose
    /// future is dropped is read back out of it and queued first.
    pub(crate) async fn recv_into(&self, buffer: &RecvBuffer) -> Result<Received, TransportError> {
        self.receive(Some(buffer)).await
    }

    /// [`Inbox::recv`] and [`Inbox::recv_into`].
    ///
    /// A worker that finds its inbox empty first polls it, yielding to the
    /// other tasks in between, for at most [`SPIN`] and [`SPIN_POLLS`]
    /// polls, before it sleeps: a message that comes within that time (the
    /// partner of a ping-pong on the same node answering) is taken without
    /// the cost of putting the worker to sleep and waking it. It spins only
    /// if, in its last wait, the delivery came within [`SPIN`]: a worker
    /// whose messages take longer (from another node: tens of µs) would
    /// only take a core from the tasks that bring them, and sleeps at once
    /// (measured: see `BENCHMARKS.md`, issue 29).
    async fn receive(&self, buffer: Option<&RecvBuffer>) -> Result<Received, TransportError> {
        // When this call found the inbox empty, and how often it polled.
        let mut waiting: Option<(std::time::Instant, u32)> = None;
        // Takes the buffer back however the call ends.
        let _posted = buffer.map(|_| Posted(self));
        loop {
            let taken = {
                // Spinning, and a sender holds the inbox (copying a message
                // into the lent buffer, perhaps): look again after a yield
                // rather than sleep on the lock.
                let busy = matches!(
                    self.state.try_lock(),
                    Err(std::sync::TryLockError::WouldBlock)
                );
                if busy
                    && let Some((since, polls)) = waiting.as_mut()
                    && *polls < SPIN_POLLS
                    && since.elapsed() < SPIN
                {
                    *polls += 1;
                    tokio::task::yield_now().await;
                    continue;
                }
                let mut s = lock(&self.state);
                let taken = match s.written.take() {
                    Some(written) => Some(Taken::Written(written)),
                    None => s.items.pop_front().map(Taken::Item),
                };
                // How long the wait lasted until the delivery came (not until
                // the worker ran again: a sleeping worker's wake-up is not
                // the sender's delay).
                if taken.is_some()
                    && let (Some((since, _)), Some(pushed)) = (waiting, s.pushed)
                {
                    let waited = pushed.saturating_duration_since(since);
                    self.spin.store(waited <= SPIN, Ordering::Relaxed);
                }
                match taken {
                    Some(taken) => {
                        s.posted = None;
                        if let Taken::Item(Item::Membership(_)) = taken {
                            s.memberships -= 1;
                        }
                        Some(taken)
                    }
                    None if s.closed => return Err(TransportError::Closed),
                    None => {
                        if s.posted.is_none() {
                            s.posted = buffer.cloned();
                        }
                        None
                    }
                }
            };
            match taken {
                Some(Taken::Item(Item::Membership(change))) => {
                    return Ok(Received::Delivery(Delivery::Membership(change)));
                }
                Some(Taken::Item(Item::Message {
                    from,
                    payload,
                    source,
                })) => {
                    self.read(from, &source, payload.len());
                    return Ok(Received::Delivery(Delivery::Message { from, payload }));
                }
                Some(Taken::Written(Written {
                    from, len, source, ..
                })) => {
                    self.read(from, &source, len);
                    return Ok(Received::Written { from, len });
                }
                None => {
                    let now = std::time::Instant::now();
                    let (since, polls) = waiting.get_or_insert((now, 0));
                    if self.spin.load(Ordering::Relaxed)
                        && *polls < SPIN_POLLS
                        && now.duration_since(*since) < SPIN
                    {
                        *polls += 1;
                        tokio::task::yield_now().await;
                    } else {
                        // A push after the check above left a permit: no
                        // wake-up is lost.
                        self.ready.notified().await;
                    }
                }
            }
        }
    }

    /// The worker took a message of `len` bytes from `from` by way of
    /// `source`: its credit goes back.
    fn read(&self, from: u32, source: &Source, len: usize) {
        match source {
            Source::Local => self.read_local(from, len as u64),
            Source::Remote(peer, channel) => self.read_remote(peer, *channel, len as u64),
        }
    }
}

/// What a receive took out of the inbox.
enum Taken {
    Item(Item),
    Written(Written),
}

/// A receive's lent buffer, taken back from the inbox when the receive
/// ends: a message written into it that the receive did not return (its
/// future was dropped) is read back out of it and queued first.
struct Posted<'a>(&'a Inbox);

impl Drop for Posted<'_> {
    fn drop(&mut self) {
        let inbox = self.0;
        let mut s = lock(&inbox.state);
        // Nothing more goes into the buffer.
        s.posted = None;
        if let Some(peer) = s.claim.as_ref().map(|c| c.peer.clone()) {
            // A message being built in the buffer goes back to its
            // channel, under its peer's lock, taken first (the lock
            // order). Meanwhile only that peer's reader changes the claim
            // (ends or completes it).
            drop(s);
            let mut p = lock(&peer.state);
            s = lock(&inbox.state);
            if let Some(claim) = s.claim.take() {
                give_back(&mut p, claim);
            }
        }
        if let Some(Written {
            from,
            len,
            source,
            buffer,
        }) = s.written.take()
        {
            // The lender keeps the buffer lent until the receive's future
            // is dropped (`Transport::recv_into`), so it can be read.
            match buffer.read(len) {
                Some(payload) => s.items.push_front(Item::Message {
                    from,
                    payload,
                    source,
                }),
                // A lender that broke that contract lost the message; its
                // credit at least goes back.
                None => {
                    drop(s);
                    inbox.read(from, &source, len);
                }
            }
        }
    }
}

/// Gives `claim`'s message back to its channel (in `p`, its peer's state):
/// what was written of it is copied out of the buffer. Should that fail
/// (the lender broke its contract), the message is dropped and the peer's
/// stream ended, so that the sender sends it again from its start.
fn give_back(p: &mut RecvState, claim: Claim) {
    let read = |len| claim.buffer.read(usize::try_from(len).ok()?);
    let kept = p
        .channels
        .get_mut(&claim.channel)
        .is_none_or(|c| c.inbound.give_back(claim.loan, read));
    if !kept {
        p.stream = p.stream.wrapping_add(1);
        claim.peer.superseded.notify_waiters();
        claim.peer.wake.notify_one();
    }
}

/// A message from a worker of this node, admitted: see
/// [`Inbox::reserve_local`].
struct LocalHandover {
    inbox: Arc<Inbox>,
    from: u32,
    len: usize,
}

impl Handover for LocalHandover {
    fn hand_over(self: Box<Self>, bytes: &[u8]) -> Result<(), TransportError> {
        debug_assert_eq!(bytes.len(), self.len);
        self.inbox.put_local(self.from, Cow::Borrowed(bytes))
    }
}

/// What the links need of a job that has ranks here: the inbox of each of
/// its ranks here, and where it places each rank (as this node knows it).
pub(crate) trait JobRoutes: Send + Sync {
    /// The inbox of `rank`'s worker here, if it has one.
    fn inbox(&self, rank: u32) -> Option<Arc<Inbox>>;
    /// Where the job places `rank`.
    fn placed(&self, rank: u32) -> Option<Placed>;
}

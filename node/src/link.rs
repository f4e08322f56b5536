//! The message path between workers: rank inboxes, and the long-lived
//! streams that carry messages between nodes.
//!
//! Every rank running here has an [`Inbox`]. A worker's message to a rank
//! of the same node goes straight into that rank's inbox (the sender waits
//! for the rank's credit, like a sender on another node); nothing passes
//! through the node's event loop. A message to a rank on another node goes into the
//! [`OutLink`] to that node: an [`Outbox`] (zorilla-core's sequencing and
//! credit state machine) whose writer task cuts it into chunks on a stream
//! of the overlay's ranks protocol (one per pair of nodes and direction,
//! opened by the sender). On the other side, the stream's reader feeds the
//! chunks to that peer's [`Inbound`] channel states and puts complete
//! messages into the rank's inbox; acknowledgements and credit go back on
//! the same stream. A broken stream is opened again and everything not
//! acknowledged is sent again; duplicates are dropped by sequence number,
//! so each message arrives exactly once and in order per pair of ranks.
//!
//! # Memory
//!
//! - Receiver: what one rank holds is bounded by its receive policy,
//!   zorilla-core's [`RankReceiver`] (one per inbox, over every channel to
//!   the rank: from workers on other nodes and from this one's): each
//!   channel has a small initial window ([`INITIAL_WINDOW`]), the rank
//!   lends larger windows from a budget ([`RANK_BUDGET`]) to channels that
//!   ask, and grants one larger message (up to [`MAX_MESSAGE_BYTES`],
//!   64 MiB) at a time beyond it. So a rank holds at most the budget, plus
//!   the initial window times the number of workers sending to it, plus one
//!   message: about 96 MiB for a job of a thousand ranks, whatever they
//!   send (see [`zorilla_core::channel`]). A message's memory is allocated
//!   as its chunks arrive (an announced length allocates nothing). This
//!   module only executes the policy: it tells the rank's receiver of asks
//!   and reads, and raises the limits of the channels it names.
//! - Sender: a channel's unacknowledged messages (its retransmission
//!   buffer) are at most what the receiver's credit allowed: a worker's
//!   `send` waits for credit before its message is queued.
//! - Frames are at most [`MAX_FRAME_BYTES`]; each stream has one read
//!   buffer of that size.
//! - A peer that breaks the protocol (a frame that does not decode, a chunk
//!   out of order or beyond its credit, an ack of what was never sent) has
//!   its stream dropped and is reported to the overlay.
//!
//! A channel is between two *workers*: each end is a rank and its
//! incarnation (the grant that placed it). A rank given to a new worker
//! gets fresh channels at both ends, so nothing sent to or by the worker it
//! replaced reaches it or is counted against it; data for an incarnation
//! that is gone is refused as closed, data for one not started here yet
//! as not here. A channel opens only from a worker the job's placement (as
//! this node knows it) puts on the sending peer, so a peer cannot make up
//! senders to claim windows here.
//!
//! # Failures
//!
//! A sender whose peer cannot be reached for [`GIVE_UP`] gets
//! `TransportError::Closed` for the messages it has there; a message to a
//! rank whose worker ended is refused (`Closed`) by its node; the job's end
//! closes everything. A rank that is not on the receiving node yet (its
//! worker is being prepared) is refused for now and retried, for at most
//! [`GIVE_UP`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::time::Instant;
use zorilla_core::channel::{
    Admission, CHUNK_BYTES, ChannelId, Inbound, MAX_MESSAGE_BYTES, Outbox, RankReceiver, Received,
    footprint,
};
#[cfg(doc)]
use zorilla_core::channel::{INITIAL_WINDOW, RANK_BUDGET};
use zorilla_core::limits::MAX_WORKERS;
use zorilla_overlay::streams::protocol::{
    Frame, FrameError, MAX_FRAME_BYTES, Refusal, decode, encode,
};
use zorilla_overlay::{OverlayHandle, PeerId, PeerStream};
use zorilla_sandbox::{Delivery, MembershipChange, TransportError};

use crate::wire::Placed;

/// How long a sender keeps trying to reach a peer before its messages
/// there fail with `Closed`.
pub(crate) const GIVE_UP: Duration = Duration::from_secs(30);

/// How long a receiver may hold back an acknowledgement that no sender
/// waits for (acks that free credit a sender may need go at once).
const ACK_DELAY: Duration = Duration::from_millis(5);

/// How long a sender waits before sending again what a node refused
/// because the rank was not there yet.
const NOT_HERE_RETRY: Duration = Duration::from_millis(50);

/// Unread membership changes an inbox keeps (older ones are dropped by the
/// host API anyway).
const MEMBERSHIP_ITEMS: usize = 64;

/// Channels one peer may have open towards this node.
const MAX_CHANNELS_PER_PEER: usize = 1 << 16;

/// Bytes the writer batches into one write.
const WRITE_BATCH: usize = 512 * 1024;

/// How long a worker polls its empty inbox before it sleeps (see
/// [`Inbox::recv`]).
const SPIN: Duration = Duration::from_micros(50);

/// Inbound streams waiting to be served.
const ACCEPT_QUEUE: usize = 64;

// ----- inboxes -----

/// Where a message in an inbox came from: whom to give its credit back.
enum Source {
    Local,
    Remote(Arc<PeerInbound>, ChannelId),
}

enum Item {
    Message {
        from: u32,
        payload: Vec<u8>,
        source: Source,
    },
    Membership(MembershipChange),
}

#[derive(Default)]
struct InboxState {
    items: VecDeque<Item>,
    closed: bool,
    memberships: usize,
}

/// The messages and membership changes waiting for one rank's worker.
pub(crate) struct Inbox {
    /// Which incarnation of its rank the worker is: data addressed to
    /// another is not its.
    incarnation: u32,
    state: Mutex<InboxState>,
    /// Something was pushed (one waiter: the rank's worker).
    ready: Notify,
    /// A local sender got credit, or the inbox closed.
    room: Notify,
    /// The rank's credit for every channel to it. Locked before a peer's
    /// receiving state, never after.
    receiving: Mutex<Receiving>,
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
    fn ask(&self, peer: &Arc<PeerInbound>, channel: ChannelId, start: u64, total: u64) {
        let mut r = lock(&self.receiving);
        r.peers.insert(peer.peer, Arc::downgrade(peer));
        let raised = r
            .rank
            .asked(Sender::Remote(peer.peer, channel), start, total);
        self.raise(&mut r, raised, None);
    }

    /// The worker read `len` bytes of `peer`'s `channel`.
    fn read_remote(&self, peer: &Arc<PeerInbound>, channel: ChannelId, len: u64) {
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
    fn forget(&self, peer: &PeerInbound, channels: &[ChannelId]) {
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
        }
        self.ready.notify_one();
    }

    /// Queues a message that arrived from another node (its credit was
    /// checked by its channel). Fails if the worker is gone.
    fn push_remote(&self, from: u32, payload: Vec<u8>, source: Source) -> Result<(), ()> {
        {
            let mut s = lock(&self.state);
            if s.closed {
                return Err(());
            }
            s.items.push_back(Item::Message {
                from,
                payload,
                source,
            });
        }
        self.ready.notify_one();
        Ok(())
    }

    /// Queues a message from rank `from` of this node, waiting for the
    /// rank's credit as a sender on another node would (asking for it
    /// when it is short).
    pub(crate) async fn push_local(
        &self,
        from: u32,
        payload: Vec<u8>,
    ) -> Result<(), TransportError> {
        let len = payload.len() as u64;
        if len > MAX_MESSAGE_BYTES {
            return Err(TransportError::TooLarge {
                len: len as usize,
                max: MAX_MESSAGE_BYTES as usize,
            });
        }
        let sender = Sender::Local(from);
        let mut payload = Some(payload);
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if self.is_closed() {
                return Err(TransportError::Closed);
            }
            let admitted = {
                let mut r = lock(&self.receiving);
                let end = r.local.get(&from).copied().unwrap_or(0);
                let after = end.saturating_add(footprint(len));
                if after <= r.rank.credit(&sender) {
                    r.local.insert(from, after);
                    true
                } else {
                    let raised = r.rank.asked(sender, end, len);
                    self.raise(&mut r, raised, None);
                    false
                }
            };
            if admitted {
                {
                    let mut s = lock(&self.state);
                    if s.closed {
                        return Err(TransportError::Closed);
                    }
                    if let Some(payload) = payload.take() {
                        s.items.push_back(Item::Message {
                            from,
                            payload,
                            source: Source::Local,
                        });
                    }
                }
                self.ready.notify_one();
                return Ok(());
            }
            room.await;
        }
    }

    /// The next delivery; `Closed` once the inbox is closed and empty.
    /// Cancel-safe: nothing is taken until it is returned.
    ///
    /// A worker that finds its inbox empty first polls it for [`SPIN`],
    /// yielding to the other tasks in between, before it sleeps: a message
    /// that comes within that time (the partner of a ping-pong answering)
    /// is taken without the cost of waking a sleeping task on another
    /// thread.
    pub(crate) async fn recv(&self) -> Result<Delivery, TransportError> {
        let mut spin_until: Option<std::time::Instant> = None;
        loop {
            let item = {
                let mut s = lock(&self.state);
                match s.items.pop_front() {
                    Some(Item::Membership(change)) => {
                        s.memberships -= 1;
                        return Ok(Delivery::Membership(change));
                    }
                    Some(Item::Message {
                        from,
                        payload,
                        source,
                    }) => Some((from, payload, source)),
                    None if s.closed => return Err(TransportError::Closed),
                    None => None,
                }
            };
            match item {
                Some((from, payload, source)) => {
                    match source {
                        Source::Local => self.read_local(from, payload.len() as u64),
                        Source::Remote(peer, channel) => {
                            self.read_remote(&peer, channel, payload.len() as u64);
                        }
                    }
                    return Ok(Delivery::Message { from, payload });
                }
                None => {
                    let now = std::time::Instant::now();
                    let until = *spin_until.get_or_insert(now + SPIN);
                    if now < until {
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
}

// ----- the node's links -----

/// What the links need of a job that has ranks here: the inbox of each of
/// its ranks here, and where it places each rank (as this node knows it).
pub(crate) trait JobRoutes: Send + Sync {
    /// The inbox of `rank`'s worker here, if it has one.
    fn inbox(&self, rank: u32) -> Option<Arc<Inbox>>;
    /// Where the job places `rank`.
    fn placed(&self, rank: u32) -> Option<Placed>;
}

/// Locks `m`, whether or not a holder panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is a single insert, remove or clone.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every link of this node: the registry of its jobs (for inbound data),
/// its outbound links and its inbound channel states, per peer.
pub(crate) struct Links {
    me: PeerId,
    overlay: OverlayHandle,
    jobs: Mutex<HashMap<u64, Weak<dyn JobRoutes>>>,
    out: Mutex<HashMap<PeerId, Arc<OutLink>>>,
    inbound: Mutex<HashMap<PeerId, Arc<PeerInbound>>>,
}

impl Links {
    pub(crate) fn new(me: PeerId, overlay: OverlayHandle) -> Arc<Links> {
        Arc::new(Links {
            me,
            overlay,
            jobs: Mutex::new(HashMap::new()),
            out: Mutex::new(HashMap::new()),
            inbound: Mutex::new(HashMap::new()),
        })
    }

    /// Serves the ranks streams peers open to this node, from now on.
    pub(crate) async fn accept(self: &Arc<Self>) {
        let mut streams = match self.overlay.accept_streams(ACCEPT_QUEUE).await {
            Ok(rx) => rx,
            Err(e) => {
                tracing::warn!("cannot accept message streams: {e}");
                return;
            }
        };
        let links = self.clone();
        tokio::spawn(async move {
            while let Some(stream) = streams.recv().await {
                tokio::spawn(serve_inbound(links.clone(), stream));
            }
        });
    }

    /// Makes `job`'s ranks here reachable for messages from other nodes,
    /// for as long as `routes` lives.
    pub(crate) fn add_job(&self, job: u64, routes: Weak<dyn JobRoutes>) {
        let live: HashSet<u64> = {
            let mut jobs = lock(&self.jobs);
            jobs.retain(|_, j| j.strong_count() > 0);
            jobs.insert(job, routes);
            jobs.keys().copied().collect()
        };
        // The channel states of jobs no longer here go (data for them is
        // refused before it reaches a channel).
        let inbound: Vec<_> = lock(&self.inbound).values().cloned().collect();
        for peer in inbound {
            let mut s = lock(&peer.state);
            s.channels.retain(|c, _| live.contains(&c.job));
            s.refused.retain(|c, _| live.contains(&c.job));
        }
    }

    fn job(&self, job: u64) -> Option<Arc<dyn JobRoutes>> {
        lock(&self.jobs).get(&job).and_then(Weak::upgrade)
    }

    /// Forgets everything of `job`: its queued messages and channel states.
    pub(crate) fn close_job(&self, job: u64) {
        lock(&self.jobs).remove(&job);
        let out: Vec<_> = lock(&self.out).values().cloned().collect();
        for link in out {
            {
                let mut s = lock(&link.state);
                s.outbox.close_job(job);
                s.closed.retain(|c| c.job != job);
                s.not_here.retain(|c, _| c.job != job);
            }
            link.credit.notify_waiters();
        }
        let inbound: Vec<_> = lock(&self.inbound).values().cloned().collect();
        for peer in inbound {
            let mut s = lock(&peer.state);
            s.channels.retain(|c, _| c.job != job);
            s.pending.retain(|c| c.job != job);
            s.refused.retain(|c, _| c.job != job);
        }
    }

    fn out_link(self: &Arc<Self>, peer: PeerId) -> Arc<OutLink> {
        let mut out = lock(&self.out);
        if let Some(link) = out.get(&peer) {
            return link.clone();
        }
        let link = Arc::new(OutLink {
            peer,
            state: Mutex::new(OutState::default()),
            wake: Notify::new(),
            credit: Notify::new(),
        });
        out.insert(peer, link.clone());
        tokio::spawn(run_link(self.clone(), link.clone()));
        link
    }

    fn peer_inbound(&self, peer: PeerId) -> Arc<PeerInbound> {
        lock(&self.inbound)
            .entry(peer)
            .or_insert_with(|| Arc::new(PeerInbound::new(peer)))
            .clone()
    }

    /// Queues `payload` on `channel` to `peer`, waiting for credit. Gives
    /// the payload back if `moved` fires first (the rank was placed
    /// elsewhere).
    pub(crate) async fn send(
        self: &Arc<Self>,
        peer: PeerId,
        channel: ChannelId,
        payload: Vec<u8>,
        moved: impl std::future::Future<Output = ()>,
    ) -> Result<Result<(), TransportError>, Vec<u8>> {
        debug_assert_ne!(peer, self.me);
        let link = self.out_link(peer);
        let len = payload.len() as u64;
        let mut payload = Some(payload);
        tokio::pin!(moved);
        loop {
            let credit = link.credit.notified();
            tokio::pin!(credit);
            credit.as_mut().enable();
            {
                let mut s = lock(&link.state);
                if s.closed.contains(&channel) {
                    return Ok(Err(TransportError::Closed));
                }
                match s.outbox.admits(channel, len) {
                    Admission::TooLarge => {
                        return Ok(Err(TransportError::TooLarge {
                            len: len as usize,
                            max: MAX_MESSAGE_BYTES as usize,
                        }));
                    }
                    Admission::Yes => {
                        if let Some(payload) = payload.take() {
                            s.outbox.push(channel, payload);
                        }
                        drop(s);
                        link.wake.notify_one();
                        return Ok(Ok(()));
                    }
                    Admission::WaitForCredit => {}
                    Admission::Ask => {
                        // Short of credit with everything acknowledged:
                        // the receiving rank lends room when its policy
                        // allows.
                        s.outbox.ask(channel, len);
                        drop(s);
                        link.wake.notify_one();
                    }
                }
            }
            tokio::select! {
                () = &mut credit => {}
                () = &mut moved => {
                    lock(&link.state).outbox.cancel_ask(channel);
                    return Err(payload.take().unwrap_or_default());
                }
            }
        }
    }
}

// ----- sending side -----

#[derive(Default)]
struct OutState {
    outbox: Outbox,
    /// Channels closed for good (their receiver ended, or the peer could
    /// not be reached): sends on them fail.
    closed: HashSet<ChannelId>,
    /// Channels whose rank the peer does not have, since when: after
    /// [`GIVE_UP`] they are closed.
    not_here: HashMap<ChannelId, Instant>,
}

/// The sending side of every channel from this node to one peer.
pub(crate) struct OutLink {
    peer: PeerId,
    state: Mutex<OutState>,
    /// The writer: something to send.
    wake: Notify,
    /// Senders: credit came, or channels closed.
    credit: Notify,
}

/// Keeps a stream to the link's peer open while there is something to
/// send, and sends again after a break what was not acknowledged.
async fn run_link(links: Arc<Links>, link: Arc<OutLink>) {
    let mut failing_since: Option<Instant> = None;
    let mut backoff = Duration::from_millis(10);
    loop {
        // Open a stream only when there is something to send.
        if lock(&link.state).outbox.all_acked() {
            link.wake.notified().await;
            continue;
        }
        match links.overlay.open_stream(link.peer).await {
            Ok(stream) => {
                failing_since = None;
                backoff = Duration::from_millis(10);
                if let Err(e) = serve_outbound(&links, &link, stream).await {
                    tracing::debug!(peer = %link.peer, "message stream ended: {e}");
                }
                lock(&link.state).outbox.rewind();
            }
            Err(e) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                tracing::debug!(peer = %link.peer, "cannot open a message stream: {e}");
                if since.elapsed() >= GIVE_UP {
                    tracing::info!(peer = %link.peer, "peer unreachable: its messages fail");
                    {
                        let mut s = lock(&link.state);
                        for channel in s.outbox.open_channels() {
                            s.outbox.close(channel);
                            s.closed.insert(channel);
                        }
                    }
                    link.credit.notify_waiters();
                    failing_since = None;
                    continue;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Runs one outbound stream until it breaks: writes chunks, reads acks.
async fn serve_outbound(
    links: &Links,
    link: &Arc<OutLink>,
    stream: PeerStream,
) -> Result<(), String> {
    let (mut r, mut w) = stream.stream.split();
    let writer = async {
        let mut buf = Vec::with_capacity(WRITE_BATCH + MAX_FRAME_BYTES);
        loop {
            {
                let mut s = lock(&link.state);
                while buf.len() < WRITE_BATCH {
                    match s.outbox.next_chunk(CHUNK_BYTES) {
                        Some(chunk) => encode(&Frame::Data(chunk), &mut buf),
                        None => break,
                    }
                }
            }
            if buf.is_empty() {
                link.wake.notified().await;
                continue;
            }
            w.write_all(&buf).await.map_err(|e| e.to_string())?;
            w.flush().await.map_err(|e| e.to_string())?;
            buf.clear();
        }
    };
    let reader = async {
        let mut frames = FrameReader::new();
        loop {
            if !frames.fill(&mut r).await? {
                return Err::<(), String>("closed by the peer".into());
            }
            let mut credit = false;
            let mut violation = None;
            {
                let mut s = lock(&link.state);
                loop {
                    let frame = match frames.next() {
                        Ok(Some(frame)) => frame,
                        Ok(None) => break,
                        Err(e) => {
                            violation = Some(e.to_string());
                            break;
                        }
                    };
                    match frame {
                        Frame::Ack(ack) => match s.outbox.on_ack(ack) {
                            Ok(changed) => {
                                s.not_here.remove(&ack.channel);
                                credit |= changed;
                            }
                            Err(v) => {
                                violation = Some(v.to_string());
                                break;
                            }
                        },
                        Frame::Refuse(channel, Refusal::Closed) => {
                            s.outbox.close(channel);
                            s.closed.insert(channel);
                            credit = true;
                        }
                        Frame::Refuse(channel, Refusal::NotHere) => {
                            let since = *s.not_here.entry(channel).or_insert_with(Instant::now);
                            if since.elapsed() >= GIVE_UP {
                                s.outbox.close(channel);
                                s.closed.insert(channel);
                                s.not_here.remove(&channel);
                                credit = true;
                                continue;
                            }
                            let link = link.clone();
                            tokio::spawn(async move {
                                tokio::time::sleep(NOT_HERE_RETRY).await;
                                lock(&link.state).outbox.rewind_channel(channel);
                                link.wake.notify_one();
                            });
                        }
                        Frame::Data(_) => {
                            violation = Some("data on the acknowledgement side".into());
                            break;
                        }
                    }
                }
            }
            if credit {
                link.credit.notify_waiters();
            }
            if let Some(v) = violation {
                links
                    .overlay
                    .report_misbehaviour(link.peer, format!("message stream: {v}"));
                return Err(v);
            }
        }
    };
    tokio::select! {
        r = writer => r,
        r = reader => r,
    }
}

// ----- receiving side -----

struct RecvChannel {
    inbound: Inbound,
    /// The limit last sent to the peer.
    advertised: u64,
}

#[derive(Default)]
struct RecvState {
    channels: HashMap<ChannelId, RecvChannel>,
    /// Channels owing the peer an ack.
    pending: BTreeSet<ChannelId>,
    /// An owed ack is needed at once (a sender may wait for its credit).
    urgent: bool,
    /// When owed acks go at the latest.
    due: Option<Instant>,
    /// Channels refused, and why; data on them is dropped until the sender
    /// starts again from the first message not yet received.
    refused: BTreeMap<ChannelId, Refusal>,
    /// Refusals not yet sent.
    refusals: BTreeMap<ChannelId, Refusal>,
    /// The stream currently served (a newer one supersedes it).
    stream: u64,
}

impl RecvState {
    /// Notes that `channel` owes an ack. Returns whether the ack writer
    /// must wake.
    fn owe(&mut self, channel: ChannelId, urgent: bool) -> bool {
        let first = self.pending.is_empty();
        self.pending.insert(channel);
        if let Some(c) = self.channels.get(&channel) {
            let room = c.advertised.saturating_sub(c.inbound.completed());
            let window = c
                .inbound
                .limit()
                .saturating_sub(c.inbound.consumed_position());
            // A sender may be short of credit: tell it at once.
            if c.inbound.limit() > c.advertised && room.saturating_mul(2) <= window {
                self.urgent = true;
            }
        }
        self.urgent |= urgent;
        if first {
            self.due = Some(Instant::now() + ACK_DELAY);
        }
        first || self.urgent
    }
}

/// This node's receiving side of every channel from one peer. Outlives the
/// streams (so sequence numbers survive a reconnection).
pub(crate) struct PeerInbound {
    /// The peer.
    peer: PeerId,
    state: Mutex<RecvState>,
    /// The ack writer: acks or refusals owed.
    wake: Notify,
}

impl PeerInbound {
    fn new(peer: PeerId) -> Self {
        PeerInbound {
            peer,
            state: Mutex::new(RecvState::default()),
            wake: Notify::new(),
        }
    }

    /// The worker of `channel.to` read `len` bytes of it; its limit is
    /// now `credit`.
    fn consumed(&self, channel: ChannelId, len: u64, credit: u64) {
        let wake = {
            let mut s = lock(&self.state);
            match s.channels.get_mut(&channel) {
                Some(c) => {
                    c.inbound.consumed(len);
                    c.inbound.raise_limit(credit);
                    s.owe(channel, false)
                }
                None => false,
            }
        };
        if wake {
            self.wake.notify_one();
        }
    }

    /// Raises `channel`'s limit to `credit` and tells its sender (at once
    /// if `urgent`); `false` if the channel is gone.
    fn raise(&self, channel: ChannelId, credit: u64, urgent: bool) -> bool {
        let wake = {
            let mut s = lock(&self.state);
            let Some(c) = s.channels.get_mut(&channel) else {
                return false;
            };
            c.inbound.raise_limit(credit);
            s.owe(channel, urgent)
        };
        if wake {
            self.wake.notify_one();
        }
        true
    }
}

/// Serves one stream a peer opened: reads chunks, writes acks.
async fn serve_inbound(links: Arc<Links>, stream: PeerStream) {
    let peer = stream.peer;
    let state = links.peer_inbound(peer);
    let generation = {
        let mut s = lock(&state.state);
        s.stream += 1;
        // Acks sent on a broken stream may be lost: send every channel's
        // state again on this one.
        let channels: Vec<_> = s.channels.keys().copied().collect();
        for c in channels {
            s.owe(c, true);
        }
        s.stream
    };
    state.wake.notify_one();
    let (mut r, mut w) = stream.stream.split();
    let reader = async {
        let mut frames = FrameReader::new();
        loop {
            if !frames.fill(&mut r).await? {
                return Ok::<(), String>(());
            }
            loop {
                let frame = match frames.next() {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(e) => return Err(violation(&links, peer, &e)),
                };
                let Frame::Data(chunk) = frame else {
                    return Err(violation(&links, peer, &"an ack on the data side"));
                };
                receive(&links, peer, &state, generation, chunk)?;
            }
        }
    };
    let writer = async {
        let mut buf = Vec::new();
        loop {
            let due = {
                let mut s = lock(&state.state);
                if s.stream != generation {
                    return Ok::<(), String>(()); // superseded
                }
                let now = Instant::now();
                if s.urgent || s.due.is_some_and(|d| d <= now) || !s.refusals.is_empty() {
                    let pending = std::mem::take(&mut s.pending);
                    for channel in pending {
                        if let Some(c) = s.channels.get_mut(&channel) {
                            let ack = c.inbound.ack(channel);
                            c.advertised = ack.limit;
                            encode(&Frame::Ack(ack), &mut buf);
                        }
                    }
                    for (channel, reason) in std::mem::take(&mut s.refusals) {
                        encode(&Frame::Refuse(channel, reason), &mut buf);
                    }
                    s.urgent = false;
                    s.due = None;
                    None
                } else {
                    s.due
                }
            };
            if !buf.is_empty() {
                w.write_all(&buf).await.map_err(|e| e.to_string())?;
                w.flush().await.map_err(|e| e.to_string())?;
                buf.clear();
                continue;
            }
            match due {
                Some(at) => {
                    tokio::select! {
                        () = state.wake.notified() => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => state.wake.notified().await,
            }
        }
    };
    let result = tokio::select! {
        r = reader => r,
        r = writer => r,
    };
    if let Err(e) = result {
        tracing::debug!(%peer, "inbound message stream ended: {e}");
    }
    let mut s = lock(&state.state);
    if s.stream == generation {
        for c in s.channels.values_mut() {
            c.inbound.stream_lost();
        }
    }
}

/// Whether data on `channel` from `peer` is taken by `inbox` (the
/// receiving rank's worker here), or refused and why. `sender` is given
/// for a channel with no state here yet: where the job places the sending
/// rank, as this node knows it.
fn admit(
    channel: ChannelId,
    peer: PeerId,
    inbox: &Inbox,
    sender: Option<Option<Placed>>,
) -> Option<Refusal> {
    let here = inbox.incarnation();
    if here < channel.to_incarnation {
        // The addressed worker has not started here yet.
        return Some(Refusal::NotHere);
    }
    if here > channel.to_incarnation || inbox.is_closed() {
        // The addressed worker is gone (its rank has a newer one).
        return Some(Refusal::Closed);
    }
    // A channel opens only from a worker the job places on the peer: a
    // peer cannot make up senders (each would get a window here).
    match sender {
        None => None,
        Some(Some(p)) if p.node == peer && p.incarnation == channel.from_incarnation => None,
        // A worker its rank no longer has.
        Some(Some(p)) if p.incarnation > channel.from_incarnation => Some(Refusal::Closed),
        // Not placed there, as far as this node knows yet.
        Some(_) => Some(Refusal::NotHere),
    }
}

fn violation(links: &Links, peer: PeerId, what: &dyn std::fmt::Display) -> String {
    let reason = format!("message stream: {what}");
    links.overlay.report_misbehaviour(peer, reason.clone());
    reason
}

/// Why a chunk ended its stream.
#[derive(Debug)]
enum Fault {
    /// The peer opened a newer stream: this one's rest is stale.
    Superseded,
    /// The peer broke the protocol.
    Violation(String),
}

/// Takes one chunk from `peer`.
fn receive(
    links: &Links,
    peer: PeerId,
    state: &Arc<PeerInbound>,
    generation: u64,
    chunk: zorilla_core::channel::Chunk<'_>,
) -> Result<(), String> {
    let channel = chunk.channel;
    if channel.from >= MAX_WORKERS || channel.to >= MAX_WORKERS {
        return Err(violation(links, peer, &"a rank out of range"));
    }
    let job = links.job(channel.job);
    match take_chunk(state, job.as_deref(), generation, chunk) {
        Ok(()) => Ok(()),
        Err(Fault::Superseded) => Err("superseded by a newer stream".into()),
        Err(Fault::Violation(what)) => Err(violation(links, peer, &what)),
    }
}

/// Takes one chunk from `state`'s peer for `job` (if it is here).
fn take_chunk(
    state: &Arc<PeerInbound>,
    job: Option<&dyn JobRoutes>,
    generation: u64,
    chunk: zorilla_core::channel::Chunk<'_>,
) -> Result<(), Fault> {
    let channel = chunk.channel;
    let inbox = job.and_then(|job| job.inbox(channel.to));
    let mut forgotten = Vec::new();
    let result = take_chunk_for(
        state,
        job,
        inbox.as_ref(),
        generation,
        chunk,
        &mut forgotten,
    );
    if let Some(inbox) = &inbox
        && !forgotten.is_empty()
    {
        inbox.forget(state, &forgotten);
    }
    result
}

/// [`take_chunk`] for `inbox` (the receiving rank's, if here); the
/// channels to it that a new channel replaced go to `forgotten`.
fn take_chunk_for(
    state: &Arc<PeerInbound>,
    job: Option<&dyn JobRoutes>,
    inbox: Option<&Arc<Inbox>>,
    generation: u64,
    chunk: zorilla_core::channel::Chunk<'_>,
    forgotten: &mut Vec<ChannelId>,
) -> Result<(), Fault> {
    let channel = chunk.channel;
    let peer = state.peer;
    let mut s = lock(&state.state);
    if s.stream != generation {
        return Err(Fault::Superseded);
    }
    let refusal = match inbox {
        None => Some(Refusal::NotHere),
        Some(inbox) => {
            // Who the job places on the peer matters only for a new channel.
            let fresh = !s.channels.contains_key(&channel);
            let placed = job
                .filter(|_| fresh)
                .and_then(|job| job.placed(channel.from));
            admit(channel, peer, inbox, fresh.then_some(placed))
        }
    };
    let expected = s.channels.get(&channel).map_or(0, |c| c.inbound.next());
    if let Some(reason) = refusal {
        // Refused once per attempt: the sender backs off and starts again
        // from the first message not received.
        let attempt = chunk.offset == 0 && chunk.seq == expected;
        if s.refused.insert(channel, reason) != Some(reason) || attempt {
            s.refusals.insert(channel, reason);
            drop(s);
            state.wake.notify_one();
        }
        return Ok(());
    }
    if s.refused.contains_key(&channel) {
        // Until the sender starts again where this side stands, what it
        // sent before it heard of the refusal is dropped.
        if chunk.offset != 0 || chunk.seq != expected {
            return Ok(());
        }
        s.refused.remove(&channel);
    }
    if !s.channels.contains_key(&channel) {
        // A new worker of either rank: the channels of the workers it
        // replaced are over (what they still hold was theirs).
        let replaced = |c: &ChannelId| {
            c.job == channel.job
                && c.from == channel.from
                && c.to == channel.to
                && (c.from_incarnation < channel.from_incarnation
                    || c.to_incarnation < channel.to_incarnation)
        };
        forgotten.extend(
            s.channels
                .keys()
                .filter(|c| replaced(c) && c.to_incarnation == channel.to_incarnation),
        );
        s.channels.retain(|c, _| !replaced(c));
        s.pending.retain(|c| !replaced(c));
        s.refused.retain(|c, _| !replaced(c));
        if s.channels.len() >= MAX_CHANNELS_PER_PEER {
            return Err(Fault::Violation("too many channels".into()));
        }
    }
    let c = s.channels.entry(channel).or_insert_with(|| RecvChannel {
        inbound: Inbound::new(),
        advertised: zorilla_core::channel::INITIAL_WINDOW,
    });
    let received = c.inbound.on_chunk(chunk);
    let wake = match received {
        Err(v) => return Err(Fault::Violation(v.to_string())),
        Ok(Received::Partial) => false,
        Ok(Received::Duplicate) => s.owe(channel, true),
        Ok(Received::Asked { total }) => {
            let start = s
                .channels
                .get(&channel)
                .map_or(0, |c| c.inbound.completed());
            drop(s);
            if let Some(inbox) = inbox {
                inbox.ask(state, channel, start, total);
            }
            return Ok(());
        }
        Ok(Received::Complete(message)) => {
            let wake = s.owe(channel, false);
            drop(s);
            let source = Source::Remote(state.clone(), channel);
            if let Some(inbox) = inbox
                && inbox.push_remote(channel.from, message, source).is_err()
            {
                // The worker ended meanwhile.
                let mut s = lock(&state.state);
                s.refused.insert(channel, Refusal::Closed);
                s.refusals.insert(channel, Refusal::Closed);
                drop(s);
                state.wake.notify_one();
            }
            if wake {
                state.wake.notify_one();
            }
            return Ok(());
        }
    };
    drop(s);
    if wake {
        state.wake.notify_one();
    }
    Ok(())
}

// ----- reading frames -----

/// A stream's read buffer: room for the largest frame and then some.
struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl FrameReader {
    fn new() -> Self {
        FrameReader {
            buf: vec![0; 4 + MAX_FRAME_BYTES + 64 * 1024],
            start: 0,
            end: 0,
        }
    }

    /// Reads more; `false` at the end of the stream.
    async fn fill<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> Result<bool, String> {
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
    fn next(&mut self) -> Result<Option<Frame<'_>>, FrameError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use zorilla_core::channel::{INITIAL_WINDOW, RANK_BUDGET};

    const CH: ChannelId = ChannelId {
        job: 1,
        from: 2,
        from_incarnation: 3,
        to: 0,
        to_incarnation: 5,
    };

    #[test]
    fn data_reaches_only_the_addressed_worker_from_a_placed_sender() {
        let (peer, other) = (PeerId::random(), PeerId::random());
        let sender = |node, incarnation| Some(Some(Placed { node, incarnation }));
        let inbox = Inbox::new(5);
        // The sender is where the job places it, as the worker it is.
        assert_eq!(admit(CH, peer, &inbox, sender(peer, 3)), None);
        // A channel with state here already is not asked again.
        assert_eq!(admit(CH, peer, &inbox, None), None);
        // Made-up senders open nothing: a rank placed elsewhere, a rank
        // not placed at all, an incarnation not granted yet.
        assert_eq!(
            admit(CH, peer, &inbox, sender(other, 3)),
            Some(Refusal::NotHere)
        );
        assert_eq!(admit(CH, peer, &inbox, Some(None)), Some(Refusal::NotHere));
        assert_eq!(
            admit(CH, peer, &inbox, sender(peer, 2)),
            Some(Refusal::NotHere)
        );
        // A worker that was replaced since is refused for good.
        assert_eq!(
            admit(CH, peer, &inbox, sender(peer, 4)),
            Some(Refusal::Closed)
        );
        // Data for an earlier worker of the receiving rank is refused for
        // good; for a later one, until it starts here.
        assert_eq!(admit(CH, peer, &Inbox::new(6), None), Some(Refusal::Closed));
        assert_eq!(
            admit(CH, peer, &Inbox::new(4), None),
            Some(Refusal::NotHere)
        );
        // The worker ended.
        inbox.close();
        assert_eq!(admit(CH, peer, &inbox, None), Some(Refusal::Closed));
    }

    /// A job with rank 0 here and every other rank on `peer`.
    struct Routes {
        inbox: Arc<Inbox>,
        peer: PeerId,
    }

    impl JobRoutes for Routes {
        fn inbox(&self, rank: u32) -> Option<Arc<Inbox>> {
            (rank == 0).then(|| self.inbox.clone())
        }
        fn placed(&self, _rank: u32) -> Option<Placed> {
            Some(Placed {
                node: self.peer,
                incarnation: 0,
            })
        }
    }

    /// Message `n` of rank `from`: tagged with both.
    fn tagged(from: u32, n: u32, len: usize) -> Vec<u8> {
        let mut m = vec![from as u8; len.max(8)];
        m[..4].copy_from_slice(&from.to_le_bytes());
        m[4..8].copy_from_slice(&n.to_le_bytes());
        m
    }

    impl Inbox {
        /// Bytes of the messages queued for the worker, as the rank
        /// counts them.
        fn queued_bytes(&self) -> u64 {
            lock(&self.state)
                .items
                .iter()
                .map(|i| match i {
                    Item::Message { payload, .. } => footprint(payload.len() as u64),
                    Item::Membership(_) => 0,
                })
                .sum()
        }
    }

    /// The workers of one peer node sending to rank 0 here through the
    /// receiving path of this module (no network: chunks and acks are
    /// handed across).
    struct Remote {
        out: Outbox,
        /// The messages each worker has yet to send: number and length
        /// (made when sent).
        todo: BTreeMap<u32, VecDeque<(u32, usize)>>,
        state: Arc<PeerInbound>,
    }

    impl Remote {
        fn channel(from: u32) -> ChannelId {
            ChannelId {
                job: 1,
                from,
                from_incarnation: 0,
                to: 0,
                to_incarnation: 0,
            }
        }

        /// Every worker queues what its credit allows (asking when it is
        /// short), the chunks go across, the acks come back. Whether
        /// anything moved.
        fn pump(&mut self, routes: &Routes) -> bool {
            let mut moved = false;
            for (from, todo) in &mut self.todo {
                let channel = Remote::channel(*from);
                while let Some(&(n, len)) = todo.front() {
                    match self.out.admits(channel, len as u64) {
                        Admission::Yes => {
                            todo.pop_front();
                            self.out.push(channel, tagged(*from, n, len));
                        }
                        Admission::Ask => {
                            self.out.ask(channel, len as u64);
                            break;
                        }
                        _ => break,
                    }
                }
            }
            while let Some(chunk) = self.out.next_chunk(CHUNK_BYTES) {
                take_chunk(&self.state, Some(routes), 0, chunk).unwrap();
                moved = true;
            }
            let acks: Vec<_> = lock(&self.state.state)
                .channels
                .iter()
                .map(|(c, r)| r.inbound.ack(*c))
                .collect();
            for ack in acks {
                moved |= self.out.on_ack(ack).unwrap();
            }
            moved
        }

        /// Bytes of messages half arrived.
        fn partial_bytes(&self) -> u64 {
            lock(&self.state.state)
                .channels
                .values()
                .map(|c| {
                    let unread = c.inbound.completed() - c.inbound.consumed_position();
                    c.inbound.buffered_bytes() - unread
                })
                .sum()
        }
    }

    /// Many workers, on another node and on this one, send to a rank that
    /// does not read: what it holds stays within its budget, the initial
    /// windows and one large message, far below what they want to send;
    /// once it reads, every sender's messages arrive, each sender's in
    /// order.
    #[tokio::test]
    async fn many_senders_cannot_make_a_rank_hold_more_than_its_budget() {
        const REMOTE: u32 = 32;
        const LOCAL: u32 = 8;
        let peer = PeerId::random();
        let inbox = Inbox::new(0);
        let routes = Routes {
            inbox: inbox.clone(),
            peer,
        };
        let largest = 20 << 20;
        let sizes = |from: u32| {
            let mut sizes = vec![10, 100 << 10, 700 << 10];
            if from.is_multiple_of(4) {
                sizes.push(2 << 20);
            }
            if from == 1 {
                sizes.push(largest);
            }
            sizes
        };
        let mut wanted = 0;
        let mut count = BTreeMap::new();
        let mut remote = Remote {
            out: Outbox::new(),
            todo: BTreeMap::new(),
            state: Arc::new(PeerInbound::new(peer)),
        };
        for from in 1..=REMOTE {
            let todo: VecDeque<_> = (sizes(from).into_iter().enumerate())
                .map(|(n, len)| (n as u32, len.max(8)))
                .collect();
            wanted += todo.iter().map(|(_, len)| *len as u64).sum::<u64>();
            count.insert(from, todo.len() as u32);
            remote.todo.insert(from, todo);
        }
        let mut local = Vec::new();
        for from in REMOTE + 1..=REMOTE + LOCAL {
            let sizes = [10, 100 << 10, 1 << 20, 3 << 20];
            wanted += sizes.iter().sum::<u64>();
            count.insert(from, sizes.len() as u32);
            let inbox = inbox.clone();
            local.push(tokio::spawn(async move {
                for (n, len) in sizes.into_iter().enumerate() {
                    let m = tagged(from, n as u32, len as usize);
                    inbox.push_local(from, m).await.unwrap();
                }
            }));
        }
        let channels = u64::from(REMOTE + LOCAL);
        let bound = RANK_BUDGET + channels * INITIAL_WINDOW + footprint(largest as u64);
        assert!(wanted > 2 * bound, "the senders want more than the bound");
        let held = |remote: &Remote| inbox.queued_bytes() + remote.partial_bytes();
        // The rank does not read: the senders push all they can.
        let mut still = 0;
        for _ in 0..10_000 {
            let moved = remote.pump(&routes);
            let before = inbox.queued_bytes();
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            assert!(held(&remote) <= bound, "{} > {bound}", held(&remote));
            still = if moved || inbox.queued_bytes() != before {
                0
            } else {
                still + 1
            };
            if still >= 10 {
                break;
            }
        }
        assert!(still >= 10, "the senders never stopped");
        let stalled = held(&remote);
        assert!(stalled > RANK_BUDGET / 4, "the budget was lent: {stalled}");
        // Then it reads everything, in arrival order.
        let mut next: BTreeMap<u32, u32> = BTreeMap::new();
        let start = Instant::now();
        let total: u32 = count.values().sum();
        let mut read = 0;
        while read < total {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "{read} of {total} read: {next:?}"
            );
            remote.pump(&routes);
            tokio::task::yield_now().await;
            assert!(held(&remote) <= bound);
            if inbox.queued_bytes() == 0 {
                continue;
            }
            let Ok(Delivery::Message { from, payload }) = inbox.recv().await else {
                panic!("not a message");
            };
            let n = u32::from_le_bytes(payload[4..8].try_into().unwrap());
            let expected = next.entry(from).or_default();
            assert_eq!(n, *expected, "rank {from}'s messages out of order");
            assert!(payload[8..].iter().all(|b| *b == from as u8));
            *expected += 1;
            read += 1;
        }
        assert_eq!(next, count);
        for task in local {
            task.await.unwrap();
        }
        assert!(remote.out.all_acked() || remote.pump(&routes));
    }
}

//! The message path between workers: rank inboxes, and the long-lived
//! streams that carry messages between nodes.
//!
//! Every rank running here has an [`Inbox`]. A worker's message to a rank
//! of the same node goes straight into that rank's inbox (the sender waits
//! for the rank's credit, like a sender on another node); nothing passes
//! through the node's event loop. A message to a rank on another node goes into the
//! [`OutLink`] to that node: an [`Outbox`] (zorilla-core's sequencing and
//! credit state machine) cut into chunks on a stream of the overlay's ranks
//! protocol (one per pair of nodes and direction, opened by the sender), by
//! the link's writer task, or by the sending worker itself when the message
//! is small and the stream idle (see [`outlink`]). On the other side, the stream's reader feeds the
//! chunks to that peer's [`Inbound`] channel states and puts complete
//! messages into the rank's inbox; acknowledgements and credit go back on
//! the same stream. A broken stream is opened again and everything not
//! acknowledged is sent again; duplicates are dropped by sequence number,
//! so each message arrives exactly once and in order per pair of ranks.
//!
//! # Direct connections
//!
//! The bytes of a stream go over the rank data plane
//! ([`zorilla_overlay::direct`]) where they can: the receiver of a libp2p
//! stream offers where its data plane listens as its first frame (and
//! expects the sender there); the sender dials it at the address offered
//! (see [`direct_addrs`] for which it takes), then at the IP address of
//! its libp2p connection, and carries on over the direct connection (TLS
//! with AES-GCM, authenticated by both nodes' identities) with the same
//! frames, as after a reconnection: what was not acknowledged is sent
//! again, the receiver's newer stream supersedes the older. If the dial
//! fails (relayed connections, NATs, firewalls), the sender keeps the
//! libp2p stream, and takes an offer again only on a stream it opens
//! [`DIRECT_RETRY`] or more later. The sequencing, credit and replay above
//! are the same on either path.
//!
//! ## Lanes
//!
//! A direct connection has *lanes* beside it (on the data plane only:
//! never on a libp2p stream, where nothing changes): the receiver's first
//! frame on it invites up to [`DirectPlane::lanes`] of them
//! ([`Frame::Lanes`], with a ticket: the number of that connection, which
//! supersedes every earlier one from the peer), and the sender opens that
//! many more (or fewer, as its own setting says) to the same address
//! ([`DirectPlane::dial_lane`]: TLS, authenticated as the connection is,
//! marked as a lane in the handshake), each first naming the ticket
//! ([`Frame::Lane`]). The connection itself carries everything as before
//! but striped messages: every smaller message, acks, asks, refusals. The
//! lanes carry whole chunks of *striped* messages, of [`STRIPE_BYTES`]
//! (1 MiB) or more, each lane's writer (a task of its own) taking the next
//! chunk when it is ready (see [`zorilla_core::channel`], "Striping", for
//! why each message still arrives once and in order). So small messages
//! never wait behind a large one's chunks, and a large message is
//! encrypted, sent, received and decrypted by as many tasks at once as
//! there are lanes. (The connection's writer does not take striped chunks
//! too: it serves its reader's task, which took every chunk before the
//! lanes' tasks were even scheduled on a busy machine.)
//!
//! Two lanes by default on a machine of four cores or more, none on a
//! smaller one, where they measured slower (`--rank-lanes`, at most
//! [`MAX_LANES`]; see `zorilla_overlay::direct::default_lanes`): each lane
//! is served by one task at each end, whose TLS encrypts or decrypts on
//! one core at a time, so two lanes beside the connection put a large
//! message on two cores at each end while the connection's task stays
//! free for small messages and acks: the two to four cores of the
//! machines this grid mostly runs on. Each lane adds a socket and a read
//! buffer ([`MAX_FRAME_BYTES`]) at each end and more chunks held apart at
//! the receiver; more lanes than cores win nothing.
//!
//! Failures: a lane that breaks (or ends) breaks the link: the connection
//! and every lane are dropped, and the next connection and its lanes
//! carry everything unacknowledged again ([`Outbox::rewind`]). At the
//! receiver a lane serves only the connection whose ticket it named: once
//! a newer connection from the peer arrives, chunks from an older lane
//! are refused and the lane closed, and what was built of a message is
//! dropped (the sender sends it again from its start). A lane naming no
//! current connection, one beyond those invited, or one silent for
//! [`LANE_TICKET_WAIT`] is closed; a peer has at most twice
//! [`MAX_LANES`] lane connections open here at once.
//!
//! # Hops and copies of one message
//!
//! Between two nodes, on the direct connection, a message of up to 64 KiB
//! sent while the connection is idle:
//!
//! 1. the sending worker copies it out of its guest's memory (copy 1),
//!    queues it on the outbox, encodes its chunk into the connection's
//!    write buffer (copy 2; a chunk of 16 KiB or more is not copied there:
//!    its frame's head is, and TLS takes the head and the chunk's bytes
//!    from where they are in one vectored write) and writes that to TLS,
//!    which encrypts it into its record buffer (copy 3) and hands it to the
//!    socket: no other task runs on the sending node (larger messages, and
//!    any when the connection is busy, are written by the link's writer
//!    task: one hand-off);
//! 2. on the receiving node the socket's readiness wakes the task that
//!    serves the connection (hand-off 1: a thread woken out of `epoll`),
//!    whose TLS decrypts into the stream's read buffer (copy 4). A message
//!    of one chunk (up to 256 KiB: every message of the MPI library, which
//!    sends in fragments of that size) goes from there straight into the
//!    worker's memory when the worker waits in a receive with a buffer it
//!    fits (copy 5, the last: see [`Inbox::recv_into`]), waking the worker
//!    (hand-off 2, unless it is polling its inbox: see [`Inbox::recv`]).
//!    So do the chunks of a larger message, each as it arrives, in any
//!    order (its channel's `Inbound::lend`, the inbox's claim on the
//!    buffer), once the worker waits with a buffer that holds the whole
//!    message and nothing is queued before it (what arrived before that is
//!    copied in then); a receive that ends before the message is whole
//!    gives what was written back to the channel, which builds the rest
//!    of it in a message of its own. Otherwise a message is copied into a
//!    message of its own (copy 5; its room grows by doubling as chunks
//!    arrive, never past the message's length, so what arrived moves a
//!    few times as it grows), and the complete message is queued in the
//!    rank's inbox;
//! 3. the worker copies a queued message into its guest's memory (copy 6).
//!
//! So a message is copied five or six times: five when it went straight
//! into the waiting worker's memory, or when it is of 16 KiB or more
//! (copy 2 skipped). A striped message (1 MiB or more, with lanes) is
//! written and read by the tasks of the lanes at once, one chunk each at
//! a time: the same copies, on up to two cores at each end, and no more
//! hand-offs (the lanes' writer tasks are woken with the connection's),
//! but a chunk that arrives ahead of the bytes before it is copied into a
//! buffer of its own first (copy 5 happens twice for it), and what
//! follows it on its channel waits for its acknowledgement (sent at once).
//! Acknowledgements do not add hops per message: they go back at most
//! every few milliseconds (or at once when a sender may be short of
//! credit). Between two workers of one node: once the rank's credit admits
//! it, the sender copies the message out of its guest's memory straight
//! into the receiving worker's, when that worker waits in a receive with a
//! buffer it fits (one copy, no other task; [`Inbox::reserve_local`]), and
//! wakes it (one hand-off, unless it polls); otherwise into the inbox's
//! queue (copy 1), from which the receiver copies it into its guest's
//! memory (copy 2).
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
//!   as its chunks arrive, within the credit its channel was granted (an
//!   announced length alone allocates nothing; a striped message's chunks
//!   that arrive ahead are kept as they came, the rest grows by doubling:
//!   at most about twice what arrived). This
//!   module only executes the policy: it tells the rank's receiver of asks
//!   and reads, and raises the limits of the channels it names.
//! - Sender: a channel's unacknowledged messages (its retransmission
//!   buffer) are at most what the receiver's credit allowed: a worker's
//!   `send` waits for credit before its message is queued.
//! - Frames are at most [`MAX_FRAME_BYTES`]; each stream and each lane
//!   has one read buffer of that size.
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
//! A stream on which sent messages wait for their acknowledgement while
//! nothing at all comes back for [`ACK_SILENCE`] is taken for broken, like
//! one that ended with an error: a connection can die without one.
//!
//! A sender whose peer cannot be reached for [`GIVE_UP`] gets
//! `TransportError::Closed` for the messages it has there; a message to a
//! rank whose worker ended is refused (`Closed`) by its node; the job's end
//! closes everything. A rank that is not on the receiving node yet (its
//! worker is being prepared) is refused for now and retried, for at most
//! [`GIVE_UP`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use std::net::{IpAddr, SocketAddr};

use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use zorilla_core::channel::{Admission, ChannelId, MAX_MESSAGE_BYTES};
#[cfg(doc)]
use zorilla_core::channel::{
    INITIAL_WINDOW, Inbound, Outbox, RANK_BUDGET, RankReceiver, STRIPE_BYTES,
};
use zorilla_core::limits::MAX_WORKERS;
use zorilla_overlay::direct::{MAX_LANES, Role};
#[cfg(doc)]
use zorilla_overlay::streams::protocol::MAX_FRAME_BYTES;
use zorilla_overlay::streams::protocol::{Frame, Offer, Refusal, encode};
use zorilla_overlay::{DirectPlane, OverlayHandle, PeerId};
use zorilla_sandbox::TransportError;

/// How long a sender keeps trying to reach a peer before its messages
/// there fail with `Closed`.
pub(crate) const GIVE_UP: Duration = Duration::from_secs(30);

/// How long a sender waits before sending again what a node refused
/// because the rank was not there yet.
const NOT_HERE_RETRY: Duration = Duration::from_millis(50);

/// Inbound streams waiting to be served.
const ACCEPT_QUEUE: usize = 64;

/// How long a sender whose direct connection to a peer could not be made
/// stays on the libp2p stream before it takes an offer again.
pub(crate) const DIRECT_RETRY: Duration = Duration::from_secs(30);

/// How long a stream may stay silent (no frame from the peer) while what
/// was sent on it waits for an acknowledgement, at two checks this far
/// apart, before it is taken for broken: the link opens another and sends
/// everything unacknowledged again. A receiving node acknowledges within
/// milliseconds whatever its ranks do with their messages, so only a
/// stream that lost its way (a connection that died without an error, an
/// acknowledgement lost between streams) stays silent this long.
pub(crate) const ACK_SILENCE: Duration = Duration::from_secs(10);

/// How long a lane may take to name the stream it joins.
const LANE_TICKET_WAIT: Duration = Duration::from_secs(5);

/// A direct connection that ends sooner than this after it opened counts
/// as failing: the next is dialed after a growing pause.
const DIRECT_SHORT_LIVED: Duration = Duration::from_secs(1);

mod frames;
mod inbox;
mod intake;
mod lock;
mod outlink;
mod peer_inbound;
#[cfg(test)]
mod tests;

pub(crate) use inbox::{Inbox, JobRoutes};
pub(crate) use lock::lock;

use frames::FrameReader;
use intake::{Fault, take_chunk};
use outlink::OutLink;
use peer_inbound::PeerInbound;

/// Every link of this node: the registry of its jobs (for inbound data),
/// its outbound links and its inbound channel states, per peer.
pub(crate) struct Links {
    me: PeerId,
    overlay: OverlayHandle,
    /// The rank data plane, if on.
    direct: Option<Arc<DirectPlane>>,
    jobs: Mutex<HashMap<u64, Weak<dyn JobRoutes>>>,
    out: Mutex<HashMap<PeerId, Arc<OutLink>>>,
    inbound: Mutex<HashMap<PeerId, Arc<PeerInbound>>>,
}

impl Links {
    pub(crate) fn new(me: PeerId, overlay: OverlayHandle) -> Arc<Links> {
        Arc::new(Links {
            me,
            direct: overlay.direct().cloned(),
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
                let how = match links.direct.as_ref() {
                    Some(plane) => Arrival::Offering(plane.offer()),
                    None => Arrival::Libp2p,
                };
                tokio::spawn(serve_inbound(
                    links.clone(),
                    stream.peer,
                    stream.stream,
                    how,
                ));
            }
        });
        if let Some(plane) = &self.direct {
            let mut direct = plane.accept(ACCEPT_QUEUE);
            let links = self.clone();
            tokio::spawn(async move {
                while let Some(stream) = direct.recv().await {
                    let links = links.clone();
                    if stream.role == Role::Lane {
                        tokio::spawn(serve_lane(links, stream.peer, stream.stream));
                        continue;
                    }
                    tokio::spawn(async move {
                        let peer = stream.peer;
                        serve_inbound(links.clone(), peer, stream.stream, Arrival::Direct).await;
                        // The peer may dial again after a break.
                        if let Some(plane) = &links.direct {
                            plane.expect(peer);
                        }
                    });
                }
            });
        }
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
                s.settled.remove(&job);
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
        let link = OutLink::new(peer);
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

    /// How long no message of `job` sent from this node has been in flight
    /// (queued, sent and not acknowledged by the receiving node, or asking
    /// for credit): `None` if one is now. An ack that took something off
    /// the outbox, or a channel closed, counts as the last moment one was.
    /// (Messages between workers of this node go straight into the
    /// receiver's inbox: never in flight.)
    pub(crate) fn quiet(&self, job: u64) -> Option<Duration> {
        let out: Vec<_> = lock(&self.out).values().cloned().collect();
        let mut last: Option<Instant> = None;
        for link in out {
            let s = lock(&link.state);
            if s.outbox.holds(|c| c.job == job) {
                return None;
            }
            last = last.max(s.settled.get(&job).copied());
        }
        Some(last.map_or(Duration::MAX, |at| at.elapsed()))
    }

    /// Returns once nothing that rank `rank` (its worker `incarnation`) of
    /// `job` sent from this node is in flight: delivered, or given up on
    /// (after at most [`GIVE_UP`] without reaching the peer). So a rank's
    /// end is reported after its messages: the home's stall check relies
    /// on it (see `zorilla_core::stall`).
    pub(crate) async fn settled(&self, job: u64, rank: u32, incarnation: u32) {
        let sent_by =
            |c: &ChannelId| c.job == job && c.from == rank && c.from_incarnation == incarnation;
        let busy = |link: &OutLink| lock(&link.state).outbox.holds(sent_by);
        let wait = async {
            loop {
                let out: Vec<_> = lock(&self.out).values().cloned().collect();
                let Some(link) = out.into_iter().find(|link| busy(link)) else {
                    return;
                };
                let credit = link.credit.notified();
                tokio::pin!(credit);
                credit.as_mut().enable();
                if busy(&link) {
                    credit.await;
                }
            }
        };
        // The links give up on an unreachable peer after GIVE_UP; a peer
        // that stays reachable and never acknowledges is not waited for
        // much longer.
        let _ = tokio::time::timeout(GIVE_UP + Duration::from_secs(5), wait).await;
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
                        link.write_or_wake(len as usize);
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

/// Keeps a stream to the link's peer open while there is something to
/// send, and sends again after a break what was not acknowledged.
async fn run_link(links: Arc<Links>, link: Arc<OutLink>) {
    let mut failing_since: Option<Instant> = None;
    let mut backoff = Duration::from_millis(10);
    // Where the peer's rank data plane listens, as its last offer said:
    // where to dial it, in order.
    let mut direct: Vec<SocketAddr> = Vec::new();
    // When a direct connection to it last could not be made.
    let mut direct_failed: Option<Instant> = None;
    let mut direct_backoff = Duration::ZERO;
    loop {
        // Open a stream only when there is something to send.
        if lock(&link.state).outbox.all_acked() {
            link.wake.notified().await;
            continue;
        }
        if let (false, Some(plane)) = (direct.is_empty(), &links.direct) {
            tokio::time::sleep(direct_backoff).await;
            let mut dialed = Err(String::new());
            for (i, addr) in direct.iter().enumerate() {
                dialed = plane
                    .dial(link.peer, *addr)
                    .await
                    .map(|stream| (i, stream))
                    .map_err(|e| e.to_string());
                if dialed.is_ok() {
                    break;
                }
            }
            match dialed {
                Ok((i, stream)) => {
                    let addr = direct[i];
                    // The next dial after a break goes where this one did.
                    direct.rotate_left(i);
                    failing_since = None;
                    tracing::debug!(peer = %link.peer, %addr, "direct message connection");
                    let opened = Instant::now();
                    let lanes = Some((plane.clone(), addr));
                    if let Err(e) = serve_outbound(&links, &link, stream.stream, false, lanes).await
                    {
                        tracing::debug!(peer = %link.peer, "direct message connection ended: {e}");
                    }
                    link.detach();
                    lock(&link.state).outbox.rewind();
                    direct_backoff = if opened.elapsed() < DIRECT_SHORT_LIVED {
                        (direct_backoff * 2)
                            .clamp(Duration::from_millis(10), Duration::from_secs(1))
                    } else {
                        Duration::ZERO
                    };
                    continue;
                }
                Err(e) => {
                    tracing::info!(
                        peer = %link.peer,
                        addrs = ?direct,
                        "no direct connection to the peer ({e}): messages go over libp2p"
                    );
                    direct.clear();
                    direct_failed = Some(Instant::now());
                }
            }
        }
        match links.overlay.open_stream(link.peer).await {
            Ok(stream) => {
                failing_since = None;
                backoff = Duration::from_millis(10);
                let ip = stream.remote_ip;
                let take_offer = links.direct.is_some()
                    && ip.is_some()
                    && direct_failed.is_none_or(|at| at.elapsed() >= DIRECT_RETRY);
                match serve_outbound(&links, &link, stream.stream, take_offer, None).await {
                    Ok(offer) => {
                        direct = ip.map(|ip| direct_addrs(offer, ip)).unwrap_or_default();
                        direct_backoff = Duration::ZERO;
                    }
                    Err(e) => tracing::debug!(peer = %link.peer, "message stream ended: {e}"),
                }
                link.detach();
                lock(&link.state).outbox.rewind();
            }
            Err(e) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                tracing::debug!(peer = %link.peer, "cannot open a message stream: {e}");
                if since.elapsed() >= GIVE_UP {
                    tracing::info!(peer = %link.peer, "peer unreachable: its messages fail");
                    {
                        let mut s = lock(&link.state);
                        let now = Instant::now();
                        for channel in s.outbox.open_channels() {
                            s.outbox.close(channel);
                            s.closed.insert(channel);
                            s.settled.insert(channel.job, now);
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

/// Where to dial the rank data plane a peer offered over a connection
/// from IP address `conn`, in order: the address offered, if it is one
/// this node may be sent to, then `conn`.
///
/// A node listening on one of its machine's addresses may connect to
/// others from another (on one machine, every connection comes from
/// 127.0.0.1 whatever loopback address the node listens on), so the
/// connection's address alone would miss its plane. An address offered
/// is taken unless it is not one host's (unspecified, multicast,
/// broadcast), or is loopback while the peer is not on this machine: a
/// peer may not point this node at its own machine's services. Whatever
/// is dialed must prove the peer's identity in the TLS handshake.
fn direct_addrs(offer: Offer, conn: IpAddr) -> Vec<SocketAddr> {
    let usable = |ip: IpAddr| {
        let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
        !ip.is_unspecified()
            && !ip.is_multicast()
            && !broadcast
            && (!ip.is_loopback() || conn.is_loopback())
    };
    let mut addrs = Vec::with_capacity(2);
    if let Some(ip) = offer.ip.filter(|ip| *ip != conn && usable(*ip)) {
        addrs.push(SocketAddr::new(ip, offer.port));
    }
    addrs.push(SocketAddr::new(conn, offer.port));
    addrs
}

/// Runs one outbound stream until it breaks: writes chunks, reads acks.
/// Ends with where the peer's data plane listens, if it offered it and
/// `take_offer` (the caller goes over to a direct connection), else
/// ignores offers. On a direct connection (`lanes`: the plane and the
/// address it was dialed at) opens the lanes the peer invites, and ends
/// when any of them breaks.
async fn serve_outbound<S: AsyncRead + AsyncWrite + Send + 'static>(
    links: &Links,
    link: &Arc<OutLink>,
    stream: S,
    take_offer: bool,
    lanes: Option<(Arc<DirectPlane>, SocketAddr)>,
) -> Result<Offer, String> {
    let (mut r, w) = stream.split();
    link.attach(w);
    // The peer's invitation to open lanes: its ticket and how many.
    let (invite_tx, invite_rx) = tokio::sync::oneshot::channel::<(u64, u8)>();
    let mut invite_tx = lanes.is_some().then_some(invite_tx);
    let lanes = async {
        let (Some((plane, addr)), Ok((ticket, count))) = (lanes, invite_rx.await) else {
            return std::future::pending().await;
        };
        serve_lanes(link, &plane, addr, ticket, count).await
    };
    let writer = async {
        loop {
            // A permit left by a wake-up while this wrote is not lost.
            std::future::poll_fn(|cx| link.poll_write(cx)).await?;
            link.wake.notified().await;
        }
    };
    let reader = async {
        let mut frames = FrameReader::new();
        let mut next_check = Instant::now() + ACK_SILENCE;
        // Sent messages waited for their acks at the last check.
        let mut suspect = false;
        loop {
            let more = tokio::select! {
                more = frames.fill(&mut r) => more?,
                () = tokio::time::sleep_until(next_check) => {
                    let waiting = lock(&link.state).outbox.awaits_ack();
                    if waiting && suspect {
                        tracing::info!(
                            peer = %link.peer,
                            "no acknowledgement on the message stream for {ACK_SILENCE:?}: \
                             opening another and sending again"
                        );
                        return Err(format!("silent for {ACK_SILENCE:?} with messages unacknowledged"));
                    }
                    suspect = waiting;
                    next_check = Instant::now() + ACK_SILENCE;
                    continue;
                }
            };
            if !more {
                return Err::<Offer, String>("closed by the peer".into());
            }
            next_check = Instant::now() + ACK_SILENCE;
            suspect = false;
            let mut credit = false;
            let mut violation = None;
            let mut offered = None;
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
                                if changed {
                                    s.settled.insert(ack.channel.job, Instant::now());
                                }
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
                            s.settled.insert(channel.job, Instant::now());
                            credit = true;
                        }
                        Frame::Refuse(channel, Refusal::NotHere) => {
                            let since = *s.not_here.entry(channel).or_insert_with(Instant::now);
                            if since.elapsed() >= GIVE_UP {
                                s.outbox.close(channel);
                                s.closed.insert(channel);
                                s.not_here.remove(&channel);
                                s.settled.insert(channel.job, Instant::now());
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
                        Frame::Offer(offer) => {
                            if take_offer {
                                offered = Some(offer);
                            }
                        }
                        Frame::Lanes { ticket, count } => {
                            // Taken once per connection, on a direct one.
                            if let Some(tx) = invite_tx.take() {
                                let _ = tx.send((ticket, count));
                            }
                        }
                        Frame::Data(_) | Frame::Lane(_) => {
                            violation = Some("data on the acknowledgement side".into());
                            break;
                        }
                    }
                }
                if credit {
                    // An ack may let a striped message, or what waited
                    // for one, go.
                    if s.outbox.has_unsent() {
                        link.wake.notify_one();
                    }
                    if s.outbox.has_lane_work() {
                        drop(s);
                        link.wake_lanes();
                    }
                }
            }
            if credit {
                link.credit.notify_waiters();
            }
            if let Some(offer) = offered
                && violation.is_none()
            {
                return Ok(offer);
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
        r = lanes => r,
    }
}

/// Opens up to `count` lanes (and no more than this node's plane opens)
/// to the peer of `link` at `addr`, each presenting `ticket`, and serves
/// them: their writers take chunks of striped messages. Never ends unless
/// a lane breaks (an error: the link's connection is taken for broken).
/// Without lanes (none wanted, or the first could not be made) it waits
/// forever, and the link carries everything on its connection alone.
async fn serve_lanes(
    link: &Arc<OutLink>,
    plane: &DirectPlane,
    addr: SocketAddr,
    ticket: u64,
    count: u8,
) -> Result<Offer, String> {
    let count = count.min(plane.lanes()).min(MAX_LANES);
    let mut opened = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        match plane.dial_lane(link.peer, addr).await {
            Ok(lane) => opened.push(lane.stream),
            Err(e) => {
                tracing::debug!(peer = %link.peer, "cannot open a lane: {e}");
                break;
            }
        }
    }
    if opened.is_empty() {
        return std::future::pending().await;
    }
    let mut first = Vec::new();
    encode(&Frame::Lane(ticket), &mut first);
    let mut served = Vec::with_capacity(opened.len());
    for mut stream in opened {
        stream.write_all(&first).await.map_err(|e| e.to_string())?;
        stream.flush().await.map_err(|e| e.to_string())?;
        let port = stream.local_port();
        let (mut r, w) = stream.split();
        let lane = link.attach_lane(w, port);
        let link = link.clone();
        // A task of its own, so that lanes are written on several threads
        // at once (and not after the connection's writer in its task).
        served.push(tokio::spawn(async move {
            let writer = async {
                loop {
                    std::future::poll_fn(|cx| lane.poll_write(&link, cx)).await?;
                    lane.wake.notified().await;
                }
            };
            // Nothing comes back on a lane: anything, or its end, breaks it.
            let reader = async {
                let mut byte = [0u8; 1];
                match r.read(&mut byte).await {
                    Ok(0) => Err::<Offer, String>("the lane was closed by the peer".into()),
                    Ok(_) => Err("data on a lane's return side".into()),
                    Err(e) => Err(format!("the lane broke: {e}")),
                }
            };
            tokio::select! {
                r = writer => r,
                r = reader => r,
            }
        }));
    }
    tracing::debug!(peer = %link.peer, lanes = served.len(), "lanes opened");
    // The lanes' tasks end with this future (when the link's connection
    // ends, or one of them).
    let _abort = AbortOnDrop(served.iter().map(|t| t.abort_handle()).collect());
    match futures::future::select_all(served).await.0 {
        Ok(result) => result,
        Err(e) => Err(format!("a lane's task failed: {e}")),
    }
}

/// Aborts tasks when dropped.
struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// How an inbound stream came.
#[derive(Clone, Copy, Debug)]
enum Arrival {
    /// Over libp2p, with this node's data plane off.
    Libp2p,
    /// Over libp2p: offer where this node's data plane listens.
    Offering(Offer),
    /// On the data plane: invite lanes.
    Direct,
}

/// Serves one stream `peer` opened: reads chunks, writes acks; first
/// offers where this node's rank data plane listens, or invites lanes,
/// as `how` says.
async fn serve_inbound<S: AsyncRead + AsyncWrite>(
    links: Arc<Links>,
    peer: PeerId,
    stream: S,
    how: Arrival,
) {
    let state = links.peer_inbound(peer);
    let generation = {
        let mut s = lock(&state.state);
        s.stream += 1;
        // The lanes of the stream this one supersedes end, and what they
        // and it built of a message is dropped: the sender sends every
        // message not acknowledged again from its start.
        s.lanes = 0;
        for c in s.channels.values_mut() {
            c.inbound.stream_lost();
        }
        // Acks sent on a broken stream may be lost: send every channel's
        // state again on this one.
        let channels: Vec<_> = s.channels.keys().copied().collect();
        for c in channels {
            s.owe(c, true);
        }
        s.stream
    };
    state.superseded.notify_waiters();
    state.wake.notify_one();
    let (mut r, mut w) = stream.split();
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
        match (how, &links.direct) {
            (Arrival::Offering(offer), Some(plane)) => {
                plane.expect(peer);
                encode(&Frame::Offer(offer), &mut buf);
            }
            (Arrival::Direct, Some(plane)) if plane.lanes() > 0 => {
                let invite = Frame::Lanes {
                    ticket: generation,
                    count: plane.lanes(),
                };
                encode(&invite, &mut buf);
            }
            _ => {}
        }
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

/// Serves a lane `peer` opened: its first frame names the stream it
/// joins (the ticket that stream's invitation gave), then it carries data
/// frames into that stream's channels until the stream is superseded
/// (then it ends: a newer stream has lanes of its own). A lane that joins
/// no current stream, or one beyond those invited, is closed at once.
async fn serve_lane(links: Arc<Links>, peer: PeerId, stream: zorilla_overlay::direct::CutStream) {
    let Some(plane) = links.direct.clone() else {
        return;
    };
    let state = links.peer_inbound(peer);
    {
        let mut s = lock(&state.state);
        // Lanes of the current stream and of the one before, whose ends
        // may not have been seen yet; more is a peer's doing.
        if s.lane_conns >= 2 * MAX_LANES {
            tracing::debug!(%peer, "a lane beyond the bound refused");
            return;
        }
        s.lane_conns += 1;
    }
    let result = serve_lane_frames(&links, peer, &state, &plane, stream).await;
    if let Err(e) = result {
        tracing::debug!(%peer, "lane ended: {e}");
    }
    let mut s = lock(&state.state);
    s.lane_conns = s.lane_conns.saturating_sub(1);
}

async fn serve_lane_frames(
    links: &Links,
    peer: PeerId,
    state: &Arc<PeerInbound>,
    plane: &DirectPlane,
    stream: zorilla_overlay::direct::CutStream,
) -> Result<(), String> {
    let (mut r, _w) = stream.split();
    let mut frames = FrameReader::new();
    let first = tokio::time::timeout(LANE_TICKET_WAIT, async {
        loop {
            if let Some(frame) = frames.next().map_err(|e| violation(links, peer, &e))? {
                return match frame {
                    Frame::Lane(ticket) => Ok(ticket),
                    _ => Err(violation(links, peer, &"a lane that names no stream")),
                };
            }
            if !frames.fill(&mut r).await? {
                return Err("closed before its ticket".to_string());
            }
        }
    })
    .await
    .map_err(|_| "no ticket in time".to_string())??;
    {
        let mut s = lock(&state.state);
        if s.stream != first {
            return Err("for a stream superseded".into());
        }
        if s.lanes >= plane.lanes().min(MAX_LANES) {
            return Err(violation(links, peer, &"more lanes than invited"));
        }
        s.lanes += 1;
    }
    loop {
        let superseded = state.superseded.notified();
        tokio::pin!(superseded);
        superseded.as_mut().enable();
        loop {
            let frame = match frames.next() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => return Err(violation(links, peer, &e)),
            };
            let Frame::Data(chunk) = frame else {
                return Err(violation(links, peer, &"a frame other than data on a lane"));
            };
            receive(links, peer, state, first, chunk)?;
        }
        if lock(&state.state).stream != first {
            return Err("superseded by a newer stream".into());
        }
        tokio::select! {
            more = frames.fill(&mut r) => {
                if !more? {
                    return Ok(());
                }
            }
            () = &mut superseded => {}
        }
    }
}

fn violation(links: &Links, peer: PeerId, what: &dyn std::fmt::Display) -> String {
    let reason = format!("message stream: {what}");
    links.overlay.report_misbehaviour(peer, reason.clone());
    reason
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
        Err(Fault::Lost) => Err("a message half received was lost here".into()),
        Err(Fault::Violation(what)) => Err(violation(links, peer, &what)),
    }
}

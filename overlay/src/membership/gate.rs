//! The gate in front of the overlay's behaviours: a [`NetworkBehaviour`]
//! that wraps another (modelled on libp2p-swarm's `Toggle`) and, in a
//! closed grid, lets a connection reach the wrapped behaviour's protocols
//! only once the peer's membership credential checks.
//!
//! Per connection, each side opens one membership stream and sends its
//! credential (`Hello`); the other side checks it (the behaviour does:
//! signatures, expiry, revocations, that it names this peer) and answers
//! `Welcome` or `Refused`. A side offers the wrapped protocols to inbound
//! streams as soon as it has checked the peer (so before it answers
//! `Welcome`), and polls the wrapped handler (so opens streams of its own)
//! only once the peer has welcomed it too: a stream of ours therefore
//! never reaches a peer that has not yet checked us, and a peer's never
//! reaches us before we checked it. A connection where this is not done
//! within [`GridConfig::timeout`](super::GridConfig::timeout) is closed
//! and the peer reported. After that the membership protocol carries
//! revocations: a node hands a newly connected peer every revocation it
//! keeps, and passes each new one on to all its connected peers (a flood:
//! each node passes a revocation on once, when it is new to it).
//!
//! In an open grid the gate passes everything through and offers no
//! protocol of its own.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use futures::stream::FuturesUnordered;
use futures::{AsyncReadExt, AsyncWriteExt, StreamExt};
use libp2p::PeerId;
use libp2p::core::transport::PortUse;
use libp2p::core::upgrade::{DeniedUpgrade, ReadyUpgrade, SelectUpgrade};
use libp2p::core::{Endpoint, Multiaddr};
use libp2p::swarm::derive_prelude::Either;
use libp2p::swarm::handler::{
    ConnectionEvent, DialUpgradeError, FullyNegotiatedInbound, FullyNegotiatedOutbound,
    ListenUpgradeError, SendWrapper,
};
use libp2p::swarm::{
    CloseConnection, ConnectionDenied, ConnectionHandler, ConnectionHandlerEvent, ConnectionId,
    FromSwarm, NetworkBehaviour, NotifyHandler, Stream, StreamProtocol, StreamUpgradeError,
    SubstreamProtocol, THandler, THandlerInEvent, THandlerOutEvent, ToSwarm,
};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

use super::GridConfig;
use super::credential::{Credential, GridPublicKey, Membership, Revocation, unix_now};
use super::revocations::{MAX_REVOCATIONS, MAX_REVOCATIONS_BYTES, Revocations};

/// The longest frame read before the peer is admitted: a hello (a
/// credential) or a verdict.
const MAX_HELLO_FRAME: usize = super::credential::MAX_CREDENTIAL_BYTES + 64;
/// The longest frame of revocations read from an admitted peer.
const MAX_PUSH_FRAME: usize = MAX_REVOCATIONS_BYTES + 64;
/// Most revocation pushes waiting to be sent on one connection, and most
/// being read from it: a push carries every new revocation, so more are
/// dropped (the next push, or the next connection, brings them).
const MAX_PUSHES: usize = 8;
/// How long sending or reading one push may take.
const PUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// One frame of the membership protocol: a 4-byte big-endian length, then
/// this in CBOR.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Frame {
    /// The sender's credential.
    Hello(ByteBuf),
    /// The answer to a hello whose credential checks.
    Welcome,
    /// The answer to one that does not, and why.
    Refused(String),
    /// Revocations (each encoded), after both sides are admitted.
    Revocations(Vec<ByteBuf>),
}

async fn write_frame(stream: &mut Stream, frame: &Frame) -> io::Result<()> {
    let bytes = crate::wire::encode(frame)?;
    let len = u32::try_from(bytes.len()).map_err(|_| io::ErrorKind::InvalidInput)?;
    stream.write_all(&len.to_be_bytes()).await?;
    stream.write_all(&bytes).await?;
    stream.flush().await
}

async fn read_frame(stream: &mut Stream, max: usize) -> io::Result<Frame> {
    let mut len = [0; 4];
    stream.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a membership frame of {len} bytes, more than {max}"),
        ));
    }
    // Grows as bytes arrive, never to more than the frame declared.
    let mut buf = Vec::new();
    (&mut *stream)
        .take(len as u64)
        .read_to_end(&mut buf)
        .await?;
    if buf.len() != len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    crate::wire::decode(&buf)
}

/// What the gate tells the event loop.
#[derive(Debug)]
pub(crate) enum GateEvent {
    /// Both sides checked each other: the connection is open to the
    /// overlay's protocols.
    Admitted {
        peer: PeerId,
        membership: Box<Membership>,
    },
    /// The peer did not show a valid credential in time (or its
    /// credential expired, or was revoked): the connection is closed.
    /// `offence`: whether it counts as misbehaviour.
    Refused {
        peer: PeerId,
        reason: String,
        offence: bool,
    },
    /// The peer refused our credential; the connection is closed.
    RefusedUs { peer: PeerId, reason: String },
    /// New revocations came in (from `from`, or from this node), were
    /// kept and passed on.
    Revoked {
        from: Option<PeerId>,
        targets: Vec<super::RevocationTarget>,
    },
}

/// What the wrapped behaviour or the gate emits.
#[derive(Debug)]
pub(crate) enum GateOut<T> {
    Inner(T),
    Gate(Box<GateEvent>),
}

/// Behaviour to handler.
#[derive(Debug)]
pub(crate) enum HandlerIn<I> {
    Inner(I),
    /// The behaviour's verdict on the peer's hello.
    Verdict(Result<(), String>),
    /// Revocations to send the peer.
    Push(Arc<Vec<ByteBuf>>),
}

/// Handler to behaviour.
#[derive(Debug)]
pub(crate) enum HandlerOut<O> {
    Inner(O),
    Report(Report),
}

/// What a handler reports about membership.
#[derive(Debug)]
pub(crate) enum Report {
    /// The peer's hello: its credential's bytes, to check.
    Presented(Vec<u8>),
    /// Both sides are admitted.
    Open,
    /// The peer refused our credential.
    RefusedUs(String),
    /// The exchange failed; `offence` if it is the peer's doing.
    Failed { reason: String, offence: bool },
    /// The peer sent revocations.
    Revocations(Vec<ByteBuf>),
}

/// Why an outbound membership stream is opened.
#[derive(Debug)]
pub(crate) enum Outbound {
    Hello,
    Push(Arc<Vec<ByteBuf>>),
}

/// A closed grid's state at the behaviour.
struct Closed {
    protocol: StreamProtocol,
    local: PeerId,
    hello: Arc<Vec<u8>>,
    grid: GridPublicKey,
    timeout: Duration,
    revocations: Revocations,
    /// Connections whose peer's credential checked, with what it proved
    /// (and whether both sides are admitted).
    members: HashMap<ConnectionId, (PeerId, Membership, bool)>,
}

/// What the gate asks of the swarm.
enum Action {
    Notify(PeerId, ConnectionId, Control),
    Close(PeerId, ConnectionId),
    Emit(Box<GateEvent>),
}

impl Action {
    fn emit(event: GateEvent) -> Action {
        Action::Emit(Box::new(event))
    }
}

enum Control {
    Verdict(Result<(), String>),
    Push(Arc<Vec<ByteBuf>>),
}

/// The gate around behaviour `B` (see the module's docs).
pub(crate) struct Gate<B> {
    inner: B,
    closed: Option<Closed>,
    /// Bounded by the connections: a few per connection at most.
    actions: VecDeque<Action>,
    waker: Option<Waker>,
}

impl<B> std::ops::Deref for Gate<B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.inner
    }
}

impl<B> std::ops::DerefMut for Gate<B> {
    fn deref_mut(&mut self) -> &mut B {
        &mut self.inner
    }
}

impl<B> Gate<B> {
    /// `inner` behind a gate: open (`grid` is `None`) or closed.
    pub(crate) fn new(
        inner: B,
        grid: Option<(&GridConfig, Revocations)>,
        network: &str,
        local: PeerId,
    ) -> Result<Gate<B>, String> {
        let closed = match grid {
            None => None,
            Some((grid, revocations)) => Some(Closed {
                protocol: StreamProtocol::try_from_owned(super::membership_protocol(network))
                    .map_err(|e| e.to_string())?,
                local,
                hello: Arc::new(grid.credential.to_bytes()),
                grid: grid.key,
                timeout: grid.timeout,
                revocations,
                members: HashMap::new(),
            }),
        };
        Ok(Gate {
            inner,
            closed,
            actions: VecDeque::new(),
            waker: None,
        })
    }

    /// How many revocations are kept.
    pub(crate) fn revocations(&self) -> usize {
        self.closed.as_ref().map_or(0, |c| c.revocations.len())
    }

    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Once a second or so: closes connections of members whose
    /// credential expired, and forgets revocations past their time.
    pub(crate) fn tick(&mut self) {
        let Some(closed) = &mut self.closed else {
            return;
        };
        let now = unix_now();
        closed.revocations.prune(now);
        let expired: Vec<(ConnectionId, PeerId, u64)> = closed
            .members
            .iter()
            .filter(|(_, (_, m, _))| m.expires <= now)
            .map(|(c, (p, m, _))| (*c, *p, m.expires))
            .collect();
        for (connection, peer, expires) in expired {
            closed.members.remove(&connection);
            self.actions.push_back(Action::Close(peer, connection));
            self.actions.push_back(Action::emit(GateEvent::Refused {
                peer,
                reason: format!("its credential expired at {expires} (Unix seconds)"),
                offence: false,
            }));
        }
        self.wake();
    }

    /// Revocations from this node (a command) or from peer `from`: the
    /// valid ones that are new are kept (and saved), passed on to every
    /// admitted peer but `from`, and the connections they revoke closed.
    /// Returns how many were new, or why one did not check.
    pub(crate) fn revoke(
        &mut self,
        items: Vec<ByteBuf>,
        from: Option<(PeerId, ConnectionId)>,
    ) -> Result<usize, String> {
        let Some(closed) = &mut self.closed else {
            return Err("this node is in an open grid: there is nothing to revoke".into());
        };
        let now = unix_now();
        let mut fresh = Vec::new();
        let mut bad = None;
        for item in items.into_iter().take(MAX_REVOCATIONS) {
            match Revocation::from_bytes(&item, &closed.grid) {
                Ok(revocation) => {
                    let target = revocation.body().target;
                    if closed.revocations.insert(revocation, now) {
                        fresh.push((target, item));
                    }
                }
                Err(e) => bad = Some(e.to_string()),
            }
        }
        if !fresh.is_empty() {
            if let Err(e) = closed.revocations.save() {
                tracing::warn!(error = %e, "cannot save the revocations");
            }
            let push = Arc::new(fresh.iter().map(|(_, b)| b.clone()).collect::<Vec<_>>());
            let mut cut = Vec::new();
            for (connection, (peer, membership, open)) in &closed.members {
                let revoked = closed.revocations.revokes(peer, &membership.ids[0])
                    || membership
                        .inviter
                        .zip(membership.ids.get(1))
                        .is_some_and(|(p, id)| closed.revocations.revokes(&p, id));
                if revoked {
                    cut.push((*connection, *peer));
                } else if *open && from.is_none_or(|(_, c)| c != *connection) {
                    self.actions.push_back(Action::Notify(
                        *peer,
                        *connection,
                        Control::Push(push.clone()),
                    ));
                }
            }
            for (connection, peer) in cut {
                closed.members.remove(&connection);
                self.actions.push_back(Action::Close(peer, connection));
                self.actions.push_back(Action::emit(GateEvent::Refused {
                    peer,
                    reason: "its credential is revoked".into(),
                    offence: false,
                }));
            }
            self.actions.push_back(Action::emit(GateEvent::Revoked {
                from: from.map(|(p, _)| p),
                targets: fresh.iter().map(|(t, _)| *t).collect(),
            }));
            self.wake();
        }
        match bad {
            Some(reason) if fresh.is_empty() => Err(reason),
            _ => Ok(fresh.len()),
        }
    }

    fn on_report(&mut self, peer: PeerId, connection: ConnectionId, report: Report) {
        let Some(closed) = &mut self.closed else {
            return;
        };
        match report {
            Report::Presented(bytes) => {
                let now = unix_now();
                let verdict = Credential::from_bytes(&bytes)
                    .and_then(|c| {
                        c.verify(&closed.grid, now, &|p, id| {
                            closed.revocations.revokes(p, id)
                        })
                    })
                    .map_err(|e| e.to_string())
                    .and_then(|m| {
                        if m.member == peer {
                            Ok(m)
                        } else {
                            Err(format!(
                                "it names peer {}, not the peer showing it",
                                m.member
                            ))
                        }
                    });
                let verdict = match verdict {
                    Ok(membership) => {
                        closed.members.insert(connection, (peer, membership, false));
                        Ok(())
                    }
                    Err(reason) => {
                        tracing::debug!(%peer, %reason, "refusing a peer's credential");
                        Err(reason)
                    }
                };
                self.actions
                    .push_back(Action::Notify(peer, connection, Control::Verdict(verdict)));
            }
            Report::Open => {
                if let Some((_, membership, open)) = closed.members.get_mut(&connection) {
                    *open = true;
                    let membership = membership.clone();
                    if !closed.revocations.is_empty() {
                        let all = closed
                            .revocations
                            .encoded()
                            .into_iter()
                            .map(ByteBuf::from)
                            .collect();
                        self.actions.push_back(Action::Notify(
                            peer,
                            connection,
                            Control::Push(Arc::new(all)),
                        ));
                    }
                    self.actions.push_back(Action::emit(GateEvent::Admitted {
                        peer,
                        membership: Box::new(membership),
                    }));
                }
            }
            Report::RefusedUs(reason) => {
                closed.members.remove(&connection);
                self.actions.push_back(Action::Close(peer, connection));
                self.actions
                    .push_back(Action::emit(GateEvent::RefusedUs { peer, reason }));
            }
            Report::Failed { reason, offence } => {
                closed.members.remove(&connection);
                self.actions.push_back(Action::Close(peer, connection));
                self.actions.push_back(Action::emit(GateEvent::Refused {
                    peer,
                    reason,
                    offence,
                }));
            }
            Report::Revocations(items) => {
                if let Err(reason) = self.revoke(items, Some((peer, connection))) {
                    self.actions.push_back(Action::emit(GateEvent::Refused {
                        peer,
                        reason: format!("sent a revocation that does not check: {reason}"),
                        offence: true,
                    }));
                    self.actions.push_back(Action::Close(peer, connection));
                }
            }
        }
    }

    fn handler<H>(&self, inner: H, peer: PeerId) -> GateHandler<H> {
        GateHandler {
            inner,
            closed: self.closed.as_ref().map(|c| HandlerState {
                peer,
                local: c.local,
                protocol: c.protocol.clone(),
                hello: c.hello.clone(),
                timeout: c.timeout,
                admitted: false,
                accepted: false,
                reported_open: false,
                hello_requested: false,
                failed: false,
                deadline: Box::pin(tokio::time::sleep(c.timeout)),
                reading_hello: None,
                awaiting_verdict: None,
                tasks: FuturesUnordered::new(),
                pushes: VecDeque::new(),
                reports: VecDeque::new(),
            }),
        }
    }
}

impl<B: NetworkBehaviour> NetworkBehaviour for Gate<B> {
    type ConnectionHandler = GateHandler<THandler<B>>;
    type ToSwarm = GateOut<B::ToSwarm>;

    fn handle_pending_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<(), ConnectionDenied> {
        self.inner
            .handle_pending_inbound_connection(connection_id, local_addr, remote_addr)
    }

    fn handle_established_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        let inner = self.inner.handle_established_inbound_connection(
            connection_id,
            peer,
            local_addr,
            remote_addr,
        )?;
        Ok(self.handler(inner, peer))
    }

    fn handle_pending_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        maybe_peer: Option<PeerId>,
        addresses: &[Multiaddr],
        effective_role: Endpoint,
    ) -> Result<Vec<Multiaddr>, ConnectionDenied> {
        self.inner.handle_pending_outbound_connection(
            connection_id,
            maybe_peer,
            addresses,
            effective_role,
        )
    }

    fn handle_established_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        addr: &Multiaddr,
        role_override: Endpoint,
        port_use: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        let inner = self.inner.handle_established_outbound_connection(
            connection_id,
            peer,
            addr,
            role_override,
            port_use,
        )?;
        Ok(self.handler(inner, peer))
    }

    fn on_swarm_event(&mut self, event: FromSwarm<'_>) {
        if let (FromSwarm::ConnectionClosed(closed_connection), Some(closed)) =
            (&event, &mut self.closed)
        {
            closed.members.remove(&closed_connection.connection_id);
        }
        self.inner.on_swarm_event(event);
    }

    fn on_connection_handler_event(
        &mut self,
        peer_id: PeerId,
        connection_id: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        match event {
            HandlerOut::Inner(event) => {
                self.inner
                    .on_connection_handler_event(peer_id, connection_id, event);
            }
            HandlerOut::Report(report) => self.on_report(peer_id, connection_id, report),
        }
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        if let Some(action) = self.actions.pop_front() {
            return Poll::Ready(match action {
                Action::Notify(peer_id, connection, control) => ToSwarm::NotifyHandler {
                    peer_id,
                    handler: NotifyHandler::One(connection),
                    event: match control {
                        Control::Verdict(v) => HandlerIn::Verdict(v),
                        Control::Push(p) => HandlerIn::Push(p),
                    },
                },
                Action::Close(peer_id, connection) => ToSwarm::CloseConnection {
                    peer_id,
                    connection: CloseConnection::One(connection),
                },
                Action::Emit(event) => ToSwarm::GenerateEvent(GateOut::Gate(event)),
            });
        }
        self.waker = Some(cx.waker().clone());
        self.inner
            .poll(cx)
            .map(|event| event.map_out(GateOut::Inner).map_in(HandlerIn::Inner))
    }
}

/// What a membership task ends with.
enum TaskDone {
    /// Our hello was answered.
    Answered(io::Result<Frame>),
    /// Our verdict on the peer's hello was written (`Some`: a refusal).
    VerdictWritten(Option<String>),
    /// Revocations read from the peer.
    PushRead(io::Result<Frame>),
    /// A push of ours was sent (or failed: the next one may do better).
    PushSent,
}

/// A connection's membership state in a closed grid.
struct HandlerState {
    peer: PeerId,
    local: PeerId,
    protocol: StreamProtocol,
    hello: Arc<Vec<u8>>,
    timeout: Duration,
    /// We checked the peer's credential: its streams may reach the
    /// wrapped protocols.
    admitted: bool,
    /// The peer welcomed us: the wrapped handler may open streams.
    accepted: bool,
    reported_open: bool,
    hello_requested: bool,
    /// The exchange failed and was reported: nothing more happens here.
    failed: bool,
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// The peer's hello being read.
    reading_hello: Option<BoxFuture<'static, io::Result<(Stream, Frame)>>>,
    /// The stream of the peer's hello, waiting for the behaviour's verdict.
    awaiting_verdict: Option<Stream>,
    /// Bounded: one hello, one verdict and [`MAX_PUSHES`] pushes each way.
    tasks: FuturesUnordered<BoxFuture<'static, TaskDone>>,
    pushes: VecDeque<Arc<Vec<ByteBuf>>>,
    reports: VecDeque<Report>,
}

impl HandlerState {
    fn open(&self) -> bool {
        self.admitted && self.accepted && !self.failed
    }

    fn fail(&mut self, reason: String, offence: bool) {
        if !self.failed {
            self.failed = true;
            self.reports.push_back(Report::Failed { reason, offence });
        }
    }
}

/// The gate's connection handler around the wrapped behaviour's `H`.
pub(crate) struct GateHandler<H> {
    inner: H,
    /// `None` in an open grid: everything passes through.
    closed: Option<HandlerState>,
}

type Membership0 = ReadyUpgrade<StreamProtocol>;

impl<H: ConnectionHandler> GateHandler<H> {
    fn on_membership_inbound(&mut self, mut stream: Stream) {
        let Some(state) = &mut self.closed else {
            return;
        };
        if state.failed {
            return;
        }
        if !state.admitted {
            if state.reading_hello.is_some() || state.awaiting_verdict.is_some() {
                // One hello per connection; more are dropped.
                return;
            }
            state.reading_hello = Some(
                async move {
                    let frame = read_frame(&mut stream, MAX_HELLO_FRAME).await?;
                    Ok((stream, frame))
                }
                .boxed(),
            );
        } else if state.tasks.len() < 2 + 2 * MAX_PUSHES {
            state.tasks.push(
                async move {
                    let read =
                        tokio::time::timeout(PUSH_TIMEOUT, read_frame(&mut stream, MAX_PUSH_FRAME))
                            .await
                            .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()));
                    TaskDone::PushRead(read)
                }
                .boxed(),
            );
        }
    }

    fn on_membership_outbound(&mut self, mut stream: Stream, why: Outbound) {
        let Some(state) = &mut self.closed else {
            return;
        };
        match why {
            Outbound::Hello => {
                let hello = Frame::Hello(ByteBuf::from(state.hello.as_ref().clone()));
                state.tasks.push(
                    async move {
                        let answer = async {
                            write_frame(&mut stream, &hello).await?;
                            let answer = read_frame(&mut stream, MAX_HELLO_FRAME).await;
                            let _ = stream.close().await;
                            answer
                        };
                        TaskDone::Answered(answer.await)
                    }
                    .boxed(),
                );
            }
            Outbound::Push(items) => {
                state.tasks.push(
                    async move {
                        let frame = Frame::Revocations(items.as_ref().clone());
                        let _ = tokio::time::timeout(PUSH_TIMEOUT, async {
                            write_frame(&mut stream, &frame).await?;
                            stream.close().await
                        })
                        .await;
                        TaskDone::PushSent
                    }
                    .boxed(),
                );
            }
        }
    }

    fn on_task_done(&mut self, done: TaskDone) {
        let Some(state) = &mut self.closed else {
            return;
        };
        match done {
            TaskDone::Answered(Ok(Frame::Welcome)) => state.accepted = true,
            TaskDone::Answered(Ok(Frame::Refused(reason))) => {
                if !state.failed {
                    state.failed = true;
                    state.reports.push_back(Report::RefusedUs(reason));
                }
            }
            TaskDone::Answered(Ok(other)) => {
                state.fail(format!("answered our hello with {other:?}"), true);
            }
            TaskDone::Answered(Err(e)) => {
                state.fail(format!("membership exchange failed: {e}"), false);
            }
            TaskDone::VerdictWritten(None) => {}
            TaskDone::VerdictWritten(Some(reason)) => state.fail(reason, true),
            TaskDone::PushRead(Ok(Frame::Revocations(items))) => {
                state.reports.push_back(Report::Revocations(items));
            }
            TaskDone::PushRead(Ok(other)) => {
                state.fail(format!("sent {other:?} after admission"), true);
            }
            TaskDone::PushRead(Err(e)) => {
                tracing::debug!(peer = %state.peer, error = %e, "revocations from a peer not read");
            }
            TaskDone::PushSent => {}
        }
    }
}

type InnerInbound<H> = <H as ConnectionHandler>::InboundProtocol;

impl<H: ConnectionHandler> ConnectionHandler for GateHandler<H> {
    type FromBehaviour = HandlerIn<H::FromBehaviour>;
    type ToBehaviour = HandlerOut<H::ToBehaviour>;
    type InboundProtocol = SelectUpgrade<
        Either<SendWrapper<InnerInbound<H>>, DeniedUpgrade>,
        Either<Membership0, DeniedUpgrade>,
    >;
    type OutboundProtocol = Either<SendWrapper<H::OutboundProtocol>, Membership0>;
    type InboundOpenInfo = Option<H::InboundOpenInfo>;
    type OutboundOpenInfo = Either<H::OutboundOpenInfo, Outbound>;

    fn listen_protocol(&self) -> SubstreamProtocol<Self::InboundProtocol, Self::InboundOpenInfo> {
        let membership = match &self.closed {
            Some(state) if !state.failed => Either::Left(ReadyUpgrade::new(state.protocol.clone())),
            _ => Either::Right(DeniedUpgrade),
        };
        let admitted = self.closed.as_ref().is_none_or(|s| s.admitted && !s.failed);
        if admitted {
            self.inner
                .listen_protocol()
                .map_upgrade(|u| SelectUpgrade::new(Either::Left(SendWrapper(u)), membership))
                .map_info(Some)
        } else {
            SubstreamProtocol::new(
                SelectUpgrade::new(Either::Right(DeniedUpgrade), membership),
                None,
            )
        }
    }

    fn on_behaviour_event(&mut self, event: Self::FromBehaviour) {
        match event {
            HandlerIn::Inner(event) => self.inner.on_behaviour_event(event),
            HandlerIn::Verdict(verdict) => {
                let Some(state) = &mut self.closed else {
                    return;
                };
                let Some(mut stream) = state.awaiting_verdict.take() else {
                    return;
                };
                if verdict.is_ok() {
                    // Before the answer goes out: the peer opens its
                    // streams once it reads it.
                    state.admitted = true;
                }
                state.tasks.push(
                    async move {
                        let frame = match &verdict {
                            Ok(()) => Frame::Welcome,
                            Err(reason) => Frame::Refused(reason.clone()),
                        };
                        let _ = write_frame(&mut stream, &frame).await;
                        let _ = stream.close().await;
                        TaskDone::VerdictWritten(verdict.err())
                    }
                    .boxed(),
                );
            }
            HandlerIn::Push(items) => {
                if let Some(state) = &mut self.closed
                    && state.pushes.len() < MAX_PUSHES
                {
                    state.pushes.push_back(items);
                }
            }
        }
    }

    fn connection_keep_alive(&self) -> bool {
        match &self.closed {
            Some(state) if !state.failed && !state.open() => true,
            Some(state) if !state.tasks.is_empty() || !state.pushes.is_empty() => true,
            _ => self.inner.connection_keep_alive(),
        }
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<
        ConnectionHandlerEvent<Self::OutboundProtocol, Self::OutboundOpenInfo, Self::ToBehaviour>,
    > {
        while let Some(state) = &mut self.closed {
            if let Some(report) = state.reports.pop_front() {
                return Poll::Ready(ConnectionHandlerEvent::NotifyBehaviour(HandlerOut::Report(
                    report,
                )));
            }
            if state.failed {
                return Poll::Pending;
            }
            if !state.hello_requested {
                state.hello_requested = true;
                return Poll::Ready(ConnectionHandlerEvent::OutboundSubstreamRequest {
                    protocol: SubstreamProtocol::new(
                        Either::Right(ReadyUpgrade::new(state.protocol.clone())),
                        Either::Right(Outbound::Hello),
                    )
                    .with_timeout(state.timeout),
                });
            }
            if let Some(reading) = &mut state.reading_hello
                && let Poll::Ready(read) = reading.poll_unpin(cx)
            {
                state.reading_hello = None;
                match read {
                    Ok((stream, Frame::Hello(credential))) => {
                        state.awaiting_verdict = Some(stream);
                        state
                            .reports
                            .push_back(Report::Presented(credential.into_vec()));
                    }
                    Ok((_, other)) => state.fail(format!("sent {other:?} for a hello"), true),
                    Err(e) => state.fail(format!("no valid hello: {e}"), true),
                }
                continue;
            }
            if let Poll::Ready(Some(done)) = state.tasks.poll_next_unpin(cx) {
                self.on_task_done(done);
                continue;
            }
            if !state.open() && state.deadline.as_mut().poll(cx).is_ready() {
                let reason = if state.admitted {
                    "did not accept our credential in time".to_string()
                } else {
                    format!(
                        "showed no valid credential within {} s",
                        state.timeout.as_secs()
                    )
                };
                state.fail(reason, true);
                continue;
            }
            if !state.open() {
                return Poll::Pending;
            }
            if !state.reported_open {
                state.reported_open = true;
                tracing::trace!(local = %state.local, peer = %state.peer, "membership checked both ways");
                state.reports.push_back(Report::Open);
                continue;
            }
            if let Some(items) = state.pushes.pop_front() {
                return Poll::Ready(ConnectionHandlerEvent::OutboundSubstreamRequest {
                    protocol: SubstreamProtocol::new(
                        Either::Right(ReadyUpgrade::new(state.protocol.clone())),
                        Either::Right(Outbound::Push(items)),
                    ),
                });
            }
            break;
        }
        self.inner.poll(cx).map(|event| {
            event
                .map_protocol(|p| Either::Left(SendWrapper(p)))
                .map_outbound_open_info(Either::Left)
                .map_custom(HandlerOut::Inner)
        })
    }

    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<Option<Self::ToBehaviour>> {
        self.inner
            .poll_close(cx)
            .map(|event| event.map(HandlerOut::Inner))
    }

    fn on_connection_event(
        &mut self,
        event: ConnectionEvent<
            '_,
            Self::InboundProtocol,
            Self::OutboundProtocol,
            Self::InboundOpenInfo,
            Self::OutboundOpenInfo,
        >,
    ) {
        use futures::future::Either as Out;
        match event {
            ConnectionEvent::FullyNegotiatedInbound(FullyNegotiatedInbound { protocol, info }) => {
                match (protocol, info) {
                    (Out::Left(Out::Left(protocol)), Some(info)) => {
                        self.inner
                            .on_connection_event(ConnectionEvent::FullyNegotiatedInbound(
                                FullyNegotiatedInbound { protocol, info },
                            ));
                    }
                    (Out::Right(Out::Left(stream)), _) => self.on_membership_inbound(stream),
                    (Out::Left(Out::Right(never)) | Out::Right(Out::Right(never)), _) => {
                        match never {}
                    }
                    // The wrapped protocol always comes with its info.
                    (Out::Left(Out::Left(_)), None) => {}
                }
            }
            ConnectionEvent::FullyNegotiatedOutbound(FullyNegotiatedOutbound {
                protocol,
                info,
            }) => match (protocol, info) {
                (Out::Left(protocol), Either::Left(info)) => {
                    self.inner
                        .on_connection_event(ConnectionEvent::FullyNegotiatedOutbound(
                            FullyNegotiatedOutbound { protocol, info },
                        ));
                }
                (Out::Right(stream), Either::Right(why)) => {
                    self.on_membership_outbound(stream, why);
                }
                // Each request's upgrade and info are of the same side.
                _ => {}
            },
            ConnectionEvent::DialUpgradeError(DialUpgradeError { info, error }) => match info {
                Either::Left(info) => {
                    let error = error.map_upgrade_err(|e| match e {
                        Either::Left(e) => e,
                        Either::Right(never) => match never {},
                    });
                    self.inner
                        .on_connection_event(ConnectionEvent::DialUpgradeError(DialUpgradeError {
                            info,
                            error,
                        }));
                }
                Either::Right(Outbound::Hello) => {
                    if let Some(state) = &mut self.closed {
                        let why = match error {
                            StreamUpgradeError::Timeout => "timed out".to_string(),
                            StreamUpgradeError::NegotiationFailed => {
                                "does not speak the membership protocol".to_string()
                            }
                            StreamUpgradeError::Io(e) => e.to_string(),
                            StreamUpgradeError::Apply(_) => "failed".to_string(),
                        };
                        state.fail(format!("membership stream: {why}"), true);
                    }
                }
                Either::Right(Outbound::Push(_)) => {}
            },
            ConnectionEvent::ListenUpgradeError(ListenUpgradeError { info, error }) => {
                if let (Some(info), Either::Left(Either::Left(error))) = (info, error) {
                    self.inner
                        .on_connection_event(ConnectionEvent::ListenUpgradeError(
                            ListenUpgradeError { info, error },
                        ));
                }
            }
            ConnectionEvent::AddressChange(change) => {
                self.inner
                    .on_connection_event(ConnectionEvent::AddressChange(change));
            }
            // From admission on, what we offer includes the wrapped
            // protocols (identify tells the peer about them).
            ConnectionEvent::LocalProtocolsChange(change)
                if self.closed.as_ref().is_none_or(|s| s.admitted) =>
            {
                self.inner
                    .on_connection_event(ConnectionEvent::LocalProtocolsChange(change));
            }
            ConnectionEvent::RemoteProtocolsChange(change) => {
                self.inner
                    .on_connection_event(ConnectionEvent::RemoteProtocolsChange(change));
            }
            _ => {}
        }
    }
}

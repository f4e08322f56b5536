//! Calls between nodes, and the sandbox's [`Transport`] carried over them.
//!
//! [`Net::call`] sends a [`PeerRpc`] to a peer over the overlay's rpc, or,
//! when the peer is this node, through a bounded channel into the node's
//! own event loop, so callers never care where the other side runs.
//!
//! [`NetTransport`] is one worker's link to the other ranks of its job.
//! Its messages go through [`crate::link`]: straight into the inbox of a
//! rank on this node, or on the long-lived stream to the rank's node
//! (exactly once, in order, with credit-based flow control).
//!
//! Barriers are coordinated by rank 0: the other ranks enter there and wait
//! for its release. Rank 0 keeps the arrivals in a [`BarrierRound`], which
//! keeps the sandbox's rule that a lost worker never releases a barrier
//! early: a call dropped while waiting sends a withdrawal, and an arrival
//! counts only while its rank is still placed on the node it came from (a
//! lost rank's arrival stops counting, its replacement must arrive itself).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use zorilla_core::channel::ChannelId;
use zorilla_overlay::{OverlayHandle, PeerId};
use zorilla_sandbox::transport::BoxFuture;
use zorilla_sandbox::{Delivery, Handover, Rank, Received, RecvBuffer, Transport, TransportError};

use crate::link::{Inbox, JobRoutes, Links, lock};
use crate::wire::barrier::{BarrierMsg, BarrierRpc};
use crate::wire::job_copy::Placed;
use crate::wire::{DecodeError, PeerReply, PeerRpc, Refusal, decode, encode};

/// Capacity of each rank's barrier queue.
pub(crate) const BARRIER_QUEUE: usize = 256;

/// A call to this node itself, handled by its event loop.
pub(crate) struct LocalCall {
    pub(crate) rpc: PeerRpc,
    pub(crate) reply: oneshot::Sender<PeerReply>,
}

/// How a node calls other nodes (and itself). Cheap to clone.
#[derive(Clone)]
pub(crate) struct Net {
    pub(crate) me: PeerId,
    pub(crate) overlay: OverlayHandle,
    pub(crate) local: mpsc::Sender<LocalCall>,
    /// The message path between workers.
    pub(crate) links: Arc<Links>,
}

/// Why a call to a node got no answer it could use. Callers act on it:
/// a node shutting down stops trying, the others retry or go elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CallError {
    /// This node is shutting down: its own loop takes no more calls.
    #[error("this node is shutting down")]
    ShuttingDown,
    /// The call or its answer did not make it through the overlay.
    #[error("no answer from the peer: {0}")]
    NoAnswer(String),
    /// The answer came but does not decode.
    #[error("the peer's answer does not decode: {0}")]
    BadAnswer(DecodeError),
    /// The peer did not serve the request, and said why.
    #[error("the peer refused: {0}")]
    Refused(Refusal),
}

impl Net {
    /// Sends `rpc` to `peer` and waits for the answer.
    pub(crate) async fn call(&self, peer: PeerId, rpc: PeerRpc) -> Result<PeerReply, CallError> {
        if peer == self.me {
            let (reply, rx) = oneshot::channel();
            self.local
                .send(LocalCall { rpc, reply })
                .await
                .map_err(|_| CallError::ShuttingDown)?;
            return rx.await.map_err(|_| CallError::ShuttingDown);
        }
        let bytes = self
            .overlay
            .request(peer, encode(&rpc))
            .await
            .map_err(|e| CallError::NoAnswer(e.to_string()))?;
        decode(&bytes).map_err(CallError::BadAnswer)
    }

    /// Like [`call`](Self::call), but an error reply is an error too
    /// ([`CallError::Refused`]).
    pub(crate) async fn call_ok(&self, peer: PeerId, rpc: PeerRpc) -> Result<PeerReply, CallError> {
        match self.call(peer, rpc).await? {
            PeerReply::Refused(e) => Err(CallError::Refused(e)),
            reply => Ok(reply),
        }
    }
}

/// The network side of one job on this node: where each rank runs, and the
/// inboxes of the ranks that run here. Shared by the event loop and the
/// job's transports.
pub(crate) struct JobNet {
    pub(crate) job: u64,
    pub(crate) ranks: watch::Sender<BTreeMap<u32, Placed>>,
    pub(crate) size: AtomicU32,
    pub(crate) inboxes: Mutex<HashMap<u32, Arc<Inbox>>>,
    pub(crate) barriers: Mutex<HashMap<u32, mpsc::Sender<BarrierItem>>>,
    pub(crate) closed: AtomicBool,
    links: Arc<Links>,
}

impl JobNet {
    /// The job's network side, reachable through `links` for messages from
    /// other nodes from now on.
    pub(crate) fn new(job: u64, links: Arc<Links>) -> Arc<JobNet> {
        let net = Arc::new(JobNet {
            job,
            ranks: watch::Sender::new(BTreeMap::new()),
            size: AtomicU32::new(0),
            inboxes: Mutex::new(HashMap::new()),
            barriers: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            links,
        });
        let routes: Weak<dyn JobRoutes> = Arc::downgrade(&net) as Weak<JobNet>;
        net.links.add_job(job, routes);
        net
    }

    /// Makes the inboxes of `incarnation` of a rank that will run here;
    /// returns the transport's ends.
    pub(crate) fn register(
        &self,
        rank: u32,
        incarnation: u32,
    ) -> (Arc<Inbox>, mpsc::Receiver<BarrierItem>) {
        let inbox = Inbox::new(incarnation);
        let (btx, brx) = mpsc::channel(BARRIER_QUEUE);
        if let Some(old) = lock(&self.inboxes).insert(rank, inbox.clone()) {
            old.close();
        }
        lock(&self.barriers).insert(rank, btx);
        (inbox, brx)
    }

    pub(crate) fn inbox(&self, rank: u32) -> Option<Arc<Inbox>> {
        lock(&self.inboxes).get(&rank).cloned()
    }

    pub(crate) fn barrier(&self, rank: u32) -> Option<mpsc::Sender<BarrierItem>> {
        lock(&self.barriers).get(&rank).cloned()
    }

    /// The node of each placed rank.
    pub(crate) fn nodes(&self) -> BTreeMap<u32, PeerId> {
        nodes(&self.ranks.borrow())
    }

    /// Installs a new placement.
    pub(crate) fn set_ranks(&self, ranks: BTreeMap<u32, Placed>) {
        let size = ranks.keys().next_back().map_or(0, |r| r + 1);
        self.size.fetch_max(size, Ordering::SeqCst);
        self.ranks.send_replace(ranks);
    }

    /// Ends every transport of the job: senders and receivers get `Closed`.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for (_, inbox) in lock(&self.inboxes).drain() {
            inbox.close();
        }
        lock(&self.barriers).clear();
        self.links.close_job(self.job);
        // Wake senders waiting for a placement change.
        self.ranks.send_modify(|_| {});
    }
}

impl JobRoutes for JobNet {
    fn inbox(&self, rank: u32) -> Option<Arc<Inbox>> {
        JobNet::inbox(self, rank)
    }

    fn placed(&self, rank: u32) -> Option<Placed> {
        self.ranks.borrow().get(&rank).copied()
    }
}

/// The node of each rank of `placement`.
fn nodes(placement: &BTreeMap<u32, Placed>) -> BTreeMap<u32, PeerId> {
    placement.iter().map(|(rank, p)| (*rank, p.node)).collect()
}

/// Barrier traffic queued for a rank of this node: what rank `from`, on
/// node `node`, said.
#[derive(Debug)]
pub(crate) struct BarrierItem {
    pub(crate) from: u32,
    pub(crate) node: PeerId,
    pub(crate) msg: BarrierMsg,
}

/// Rank 0's record of the barrier in progress: which rank waits in which of
/// its calls, and from which node. No IO; generic over the node id.
#[derive(Debug)]
pub(crate) struct BarrierRound<N> {
    waiting: BTreeMap<u32, (u64, N)>,
}

impl<N> Default for BarrierRound<N> {
    fn default() -> Self {
        BarrierRound {
            waiting: BTreeMap::new(),
        }
    }
}

impl<N: PartialEq> BarrierRound<N> {
    /// Takes in what rank `from` on `node` said.
    pub(crate) fn handle(&mut self, from: u32, node: N, msg: BarrierMsg) {
        match msg {
            // A later call of the rank (or of its replacement) supersedes
            // whatever it left before.
            BarrierMsg::Enter { token } => {
                self.waiting.insert(from, (token, node));
            }
            BarrierMsg::Withdraw { token } => {
                if self.waiting.get(&from).is_some_and(|(t, _)| *t == token) {
                    self.waiting.remove(&from);
                }
            }
            // Rank 0 is never released by anyone.
            BarrierMsg::Release { .. } => {}
        }
    }

    /// Whether ranks `1..size` all wait, each from the node that `placement`
    /// has it on now: the arrival of a worker that was lost (its rank is no
    /// longer placed, or placed elsewhere) does not count.
    pub(crate) fn complete(&self, size: u32, placement: &BTreeMap<u32, N>) -> bool {
        (1..size).all(
            |rank| match (self.waiting.get(&rank), placement.get(&rank)) {
                (Some((_, from)), Some(placed)) => from == placed,
                _ => false,
            },
        )
    }

    /// Ends the round: the calls to release, as `(rank, token)`.
    pub(crate) fn finish(&mut self) -> Vec<(u32, u64)> {
        std::mem::take(&mut self.waiting)
            .into_iter()
            .map(|(rank, (token, _))| (rank, token))
            .collect()
    }
}

/// The ranks of one run of a job that runs more than once (see
/// `zorilla_core::runs`): workers `base..base + size` at the home, which
/// see one another as ranks `0..size` of a world of their own. What comes
/// from a worker of another run (a message, a barrier call) is dropped: a
/// node of one run cannot reach into another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct World {
    /// The run's first worker at the home.
    pub(crate) base: u32,
    /// Its ranks.
    pub(crate) size: u32,
}

impl World {
    /// The rank within this world of worker `worker`; `None` if it is of
    /// another run.
    fn local(&self, worker: u32) -> Option<u32> {
        worker.checked_sub(self.base).filter(|r| *r < self.size)
    }
}

/// A worker's transport over the overlay.
pub(crate) struct NetTransport {
    /// The worker's rank at the home (its worker number, of a job that
    /// runs more than once).
    rank: u32,
    /// Of a job that runs more than once, the worker's run; `None`: the
    /// job's ranks are one world.
    world: Option<World>,
    net: Net,
    job: Arc<JobNet>,
    inbox: Arc<Inbox>,
    barrier_rx: mpsc::Receiver<BarrierItem>,
    /// Rank 0 only: the arrivals at the barrier in progress.
    round: BarrierRound<PeerId>,
    /// The token of this worker's next barrier call (random start, so that
    /// a replaced worker's calls are not mistaken for its successor's).
    next_token: u64,
}

/// How long a sender waits before retrying a rank that is not reachable.
const RETRY: Duration = Duration::from_millis(50);

/// How long a withdrawn barrier arrival keeps trying to reach rank 0.
const WITHDRAW_FOR: Duration = Duration::from_secs(30);

/// Sends a rank-to-rank `rpc` to wherever rank `to` runs, retrying while
/// it is not placed or not reachable, until acknowledged or the job closes.
async fn deliver(net: &Net, job: &JobNet, to: u32, rpc: PeerRpc) -> Result<(), TransportError> {
    let mut ranks = job.ranks.subscribe();
    loop {
        if job.closed.load(Ordering::SeqCst) {
            return Err(TransportError::Closed);
        }
        let peer = ranks.borrow_and_update().get(&to).map(|p| p.node);
        let Some(peer) = peer else {
            // Not placed yet (or lost and not yet replaced).
            let _ = tokio::time::timeout(RETRY * 10, ranks.changed()).await;
            continue;
        };
        match net.call(peer, rpc.clone()).await {
            Ok(PeerReply::Ack) => return Ok(()),
            Err(CallError::ShuttingDown) => return Err(TransportError::Closed),
            Ok(_) | Err(_) => {
                let _ = tokio::time::timeout(RETRY, ranks.changed()).await;
            }
        }
    }
}

/// Withdraws a barrier arrival at rank 0 if dropped while armed: the call
/// that made it was abandoned before the barrier completed.
struct Withdrawal {
    net: Net,
    job: Arc<JobNet>,
    /// The rank that coordinates the barrier (the world's first).
    to: u32,
    from: u32,
    token: u64,
    armed: bool,
}

impl Drop for Withdrawal {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Dropped outside a runtime only when the node is going away.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (net, job, to) = (self.net.clone(), self.job.clone(), self.to);
        let rpc = PeerRpc::Barrier(BarrierRpc {
            job: job.job,
            to,
            from: self.from,
            msg: BarrierMsg::Withdraw { token: self.token },
        });
        runtime.spawn(async move {
            let _ = tokio::time::timeout(WITHDRAW_FOR, deliver(&net, &job, to, rpc)).await;
        });
    }
}

impl NetTransport {
    /// The transport of `rank`, with the ends [`JobNet::register`] made;
    /// `token_seed` (random) starts its barrier tokens.
    pub(crate) fn new(
        rank: u32,
        net: Net,
        job: Arc<JobNet>,
        inbox: Arc<Inbox>,
        barrier_rx: mpsc::Receiver<BarrierItem>,
        token_seed: u64,
    ) -> NetTransport {
        NetTransport {
            rank,
            world: None,
            net,
            job,
            inbox,
            barrier_rx,
            round: BarrierRound::default(),
            next_token: token_seed,
        }
    }

    /// This transport in `world` only (a run of a job that runs more
    /// than once).
    pub(crate) fn in_world(mut self, world: World) -> NetTransport {
        self.world = Some(world);
        self
    }

    /// The first worker of this worker's world: the barrier's coordinator.
    fn base(&self) -> u32 {
        self.world.map_or(0, |w| w.base)
    }

    /// Worker `worker` as a rank of this worker's world; `None` if it is
    /// of another run.
    fn local(&self, worker: u32) -> Option<u32> {
        match self.world {
            None => Some(worker),
            Some(world) => world.local(worker),
        }
    }

    /// Where this world's ranks run, by their ranks in it.
    fn world_nodes(&self, placement: &BTreeMap<u32, Placed>) -> BTreeMap<u32, PeerId> {
        nodes(placement)
            .into_iter()
            .filter_map(|(worker, node)| Some((self.local(worker)?, node)))
            .collect()
    }

    async fn deliver(&self, to: u32, rpc: PeerRpc) -> Result<(), TransportError> {
        deliver(&self.net, &self.job, to, rpc).await
    }

    /// Rank 0's side of a barrier: collect arrivals until every rank waits,
    /// then release them.
    async fn coordinate_barrier(&mut self) -> Result<(), TransportError> {
        let mut placement = self.job.ranks.subscribe();
        loop {
            if self.job.closed.load(Ordering::SeqCst) {
                return Err(TransportError::Closed);
            }
            let size = self.size();
            let world = self.world_nodes(&placement.borrow_and_update());
            if self.round.complete(size, &world) {
                break;
            }
            tokio::select! {
                item = self.barrier_rx.recv() => match item {
                    Some(item) => {
                        // Another run's worker has no say in this one's.
                        if let Some(from) = self.local(item.from) {
                            self.round.handle(from, item.node, item.msg);
                        }
                    }
                    None => return Err(TransportError::Closed),
                },
                // A new placement may void an arrival or make one count.
                _ = placement.changed() => {}
            }
        }
        for (to, token) in self.round.finish() {
            let to = self.base() + to;
            let rpc = PeerRpc::Barrier(BarrierRpc {
                job: self.job.job,
                to,
                from: self.rank,
                msg: BarrierMsg::Release { token },
            });
            self.deliver(to, rpc).await?;
        }
        Ok(())
    }

    /// Another rank's side of a barrier: enter at rank 0, wait for the
    /// release of this call.
    async fn enter_barrier(&mut self) -> Result<(), TransportError> {
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1);
        // Armed from before the arrival is sent until the call returns.
        let coordinator = self.base();
        let mut withdrawal = Withdrawal {
            net: self.net.clone(),
            job: self.job.clone(),
            to: coordinator,
            from: self.rank,
            token,
            armed: true,
        };
        let rpc = PeerRpc::Barrier(BarrierRpc {
            job: self.job.job,
            to: coordinator,
            from: self.rank,
            msg: BarrierMsg::Enter { token },
        });
        let result = match self.deliver(coordinator, rpc).await {
            Err(e) => Err(e),
            Ok(()) => loop {
                match self.barrier_rx.recv().await {
                    Some(BarrierItem {
                        msg: BarrierMsg::Release { token: released },
                        ..
                    }) if released == token => break Ok(()),
                    // A release meant for an abandoned call, or for the
                    // worker this one replaced.
                    Some(_) => {}
                    None => break Err(TransportError::Closed),
                }
            },
        };
        withdrawal.armed = false;
        result
    }
}

/// Where a rank runs, as far as a sender is concerned.
enum Destination {
    /// On this node: its worker's inbox.
    Here(Arc<Inbox>),
    /// On another node.
    There(Placed),
}

impl NetTransport {
    /// Where rank `to` runs now, once it is placed (and, if here,
    /// registered): a rank not placed yet (or lost and not yet replaced)
    /// is waited for.
    async fn destination(
        &self,
        ranks: &mut watch::Receiver<BTreeMap<u32, Placed>>,
        to: u32,
    ) -> Result<Destination, TransportError> {
        loop {
            if self.job.closed.load(Ordering::SeqCst) {
                return Err(TransportError::Closed);
            }
            let placed = ranks.borrow_and_update().get(&to).copied();
            let Some(placed) = placed else {
                let _ = tokio::time::timeout(RETRY * 10, ranks.changed()).await;
                continue;
            };
            if placed.node != self.net.me {
                return Ok(Destination::There(placed));
            }
            match self.job.inbox(to) {
                Some(inbox) if inbox.incarnation() >= placed.incarnation => {
                    return Ok(Destination::Here(inbox));
                }
                // Placed here but not registered yet: wait for it.
                _ => {
                    let _ = tokio::time::timeout(RETRY, ranks.changed()).await;
                }
            }
        }
    }

    /// The next delivery of this worker's world, with `buffer` lent for it
    /// if given (see [`Inbox::recv_into`]). Cancel-safe: each delivery is
    /// taken whole, and one from another run is dropped before the next is
    /// waited for (one written into the buffer is overwritten by the next).
    async fn receive(&self, buffer: Option<&RecvBuffer>) -> Result<Received, TransportError> {
        loop {
            let received = match buffer {
                Some(buffer) => self.inbox.recv_into(buffer).await?,
                None => Received::Delivery(self.inbox.recv().await?),
            };
            if self.world.is_none() {
                return Ok(received);
            }
            match received {
                Received::Written { from, len } => {
                    if let Some(from) = self.local(from) {
                        return Ok(Received::Written { from, len });
                    }
                }
                Received::Delivery(Delivery::Message { from, payload }) => {
                    if let Some(from) = self.local(from) {
                        return Ok(Received::Delivery(Delivery::Message { from, payload }));
                    }
                }
                Received::Delivery(Delivery::Membership(mut change)) => {
                    if let Some(rank) = self.local(change.rank) {
                        change.rank = rank;
                        change.size = self.size();
                        return Ok(Received::Delivery(Delivery::Membership(change)));
                    }
                }
            }
        }
    }

    /// Sends a message to `to` wherever it runs, waiting for credit.
    async fn send_message(&self, to: u32, payload: Vec<u8>) -> Result<(), TransportError> {
        let mut ranks = self.job.ranks.subscribe();
        let mut message = payload;
        loop {
            let placed = match self.destination(&mut ranks, to).await? {
                Destination::Here(inbox) => return inbox.push_local(self.rank, message).await,
                Destination::There(placed) => placed,
            };
            // The channel between these two workers: a new worker of
            // either rank is a new channel.
            let channel = ChannelId {
                job: self.job.job,
                from: self.rank,
                from_incarnation: self.inbox.incarnation(),
                to,
                to_incarnation: placed.incarnation,
            };
            // A new placement of the rank may move it away (or give it a
            // new worker) while this waits for credit: then it goes there.
            let mut watch = ranks.clone();
            let moved = async move {
                loop {
                    if watch.changed().await.is_err() {
                        return std::future::pending().await;
                    }
                    if watch.borrow_and_update().get(&to) != Some(&placed) {
                        return;
                    }
                }
            };
            let links = self.net.links.clone();
            match links.send(placed.node, channel, message, moved).await {
                Ok(result) => return result,
                Err(back) => message = back,
            }
        }
    }
}

impl Drop for NetTransport {
    fn drop(&mut self) {
        // The worker is gone: messages to it are refused from now on.
        self.inbox.close();
    }
}

impl Transport for NetTransport {
    fn rank(&self) -> Rank {
        self.rank - self.base()
    }

    fn size(&self) -> u32 {
        match self.world {
            Some(world) => world.size,
            None => self.job.size.load(Ordering::SeqCst),
        }
    }

    fn send(&mut self, to: Rank, payload: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            let size = self.size();
            if to >= size {
                return Err(TransportError::BadRank { rank: to, size });
            }
            self.send_message(self.base() + to, payload).await
        })
    }

    fn reserve(
        &mut self,
        to: Rank,
        len: usize,
    ) -> BoxFuture<'_, Result<Option<Box<dyn Handover>>, TransportError>> {
        Box::pin(async move {
            let size = self.size();
            if to >= size {
                return Err(TransportError::BadRank { rank: to, size });
            }
            let mut ranks = self.job.ranks.subscribe();
            match self.destination(&mut ranks, self.base() + to).await? {
                Destination::Here(inbox) => inbox.reserve_local(self.rank, len).await.map(Some),
                // A message of its own goes into the outbox.
                Destination::There(_) => Ok(None),
            }
        })
    }

    fn recv_into<'a>(
        &'a mut self,
        buffer: &'a RecvBuffer,
    ) -> BoxFuture<'a, Result<Received, TransportError>> {
        Box::pin(self.receive(Some(buffer)))
    }

    fn recv(&mut self) -> BoxFuture<'_, Result<Delivery, TransportError>> {
        Box::pin(async move {
            match self.receive(None).await? {
                Received::Delivery(delivery) => Ok(delivery),
                // Not without a buffer.
                Received::Written { .. } => Err(TransportError::Closed),
            }
        })
    }

    fn barrier(&mut self) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            if self.rank == self.base() {
                self.coordinate_barrier().await
            } else {
                self.enter_barrier().await
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(ranks: &[(u32, char)]) -> BTreeMap<u32, char> {
        ranks.iter().copied().collect()
    }

    #[test]
    fn a_round_completes_when_every_other_rank_waits() {
        let placement = placed(&[(0, 'a'), (1, 'a'), (2, 'b')]);
        let mut round = BarrierRound::default();
        assert!(!round.complete(3, &placement));
        round.handle(2, 'b', BarrierMsg::Enter { token: 20 });
        assert!(!round.complete(3, &placement));
        round.handle(1, 'a', BarrierMsg::Enter { token: 10 });
        assert!(round.complete(3, &placement));
        assert_eq!(round.finish(), vec![(1, 10), (2, 20)]);
        // The next round starts empty.
        assert!(!round.complete(3, &placement));
        // A job of one has nobody to wait for.
        assert!(round.complete(1, &placement));
    }

    #[test]
    fn an_abandoned_call_is_taken_back_and_a_stale_withdrawal_is_not() {
        let placement = placed(&[(0, 'a'), (1, 'b')]);
        let mut round = BarrierRound::default();
        round.handle(1, 'b', BarrierMsg::Enter { token: 5 });
        round.handle(1, 'b', BarrierMsg::Withdraw { token: 5 });
        assert!(!round.complete(2, &placement), "withdrawn");
        // The rank calls again; a late withdrawal of an older call must not
        // take the new one back.
        round.handle(1, 'b', BarrierMsg::Enter { token: 6 });
        round.handle(1, 'b', BarrierMsg::Withdraw { token: 5 });
        assert!(round.complete(2, &placement));
    }

    #[test]
    fn a_lost_workers_arrival_stops_counting_and_its_replacement_must_arrive() {
        let mut placement = placed(&[(0, 'a'), (1, 'b'), (2, 'c')]);
        let mut round = BarrierRound::default();
        round.handle(1, 'b', BarrierMsg::Enter { token: 1 });
        // Node b is lost: rank 1 is unplaced, then placed on node d.
        placement.remove(&1);
        round.handle(2, 'c', BarrierMsg::Enter { token: 2 });
        assert!(!round.complete(3, &placement));
        placement.insert(1, 'd');
        assert!(!round.complete(3, &placement), "released early");
        round.handle(1, 'd', BarrierMsg::Enter { token: 77 });
        assert!(round.complete(3, &placement));
        assert_eq!(round.finish(), vec![(1, 77), (2, 2)]);
    }

    #[test]
    fn a_replacement_that_arrives_before_its_placement_counts_once_placed() {
        let mut placement = placed(&[(0, 'a'), (1, 'b')]);
        let mut round = BarrierRound::default();
        // Rank 0's node has not heard yet that rank 1 now runs on node c.
        round.handle(1, 'c', BarrierMsg::Enter { token: 3 });
        assert!(!round.complete(2, &placement));
        placement.insert(1, 'c');
        assert!(round.complete(2, &placement));
    }
}

//! Calls between nodes, and the sandbox's [`Transport`] carried over them.
//!
//! [`Net::call`] sends a [`PeerRpc`] to a peer over the overlay's rpc, or,
//! when the peer is this node, through a bounded channel into the node's
//! own event loop, so callers never care where the other side runs.
//!
//! [`NetTransport`] is one worker's link to the other ranks of its job.
//! Order per pair of ranks holds because a sender waits for the receiving
//! node's acknowledgement before it sends the next message, and the
//! receiving node queues messages per rank in arrival order.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use zorilla_overlay::{OverlayHandle, PeerId};
use zorilla_sandbox::transport::BoxFuture;
use zorilla_sandbox::{Delivery, Rank, Transport, TransportError};

use crate::wire::{PeerReply, PeerRpc, decode, encode};

/// Capacity of each rank's inbox.
pub(crate) const INBOX: usize = 256;

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
}

impl Net {
    /// Sends `rpc` to `peer` and waits for the answer.
    pub(crate) async fn call(&self, peer: PeerId, rpc: PeerRpc) -> Result<PeerReply, String> {
        if peer == self.me {
            let (reply, rx) = oneshot::channel();
            self.local
                .send(LocalCall { rpc, reply })
                .await
                .map_err(|_| "node is shutting down".to_string())?;
            return rx.await.map_err(|_| "node is shutting down".to_string());
        }
        let bytes = self
            .overlay
            .request(peer, encode(&rpc))
            .await
            .map_err(|e| e.to_string())?;
        decode(&bytes)
    }

    /// Like [`call`](Self::call), but an error reply is an error too.
    pub(crate) async fn call_ok(&self, peer: PeerId, rpc: PeerRpc) -> Result<PeerReply, String> {
        match self.call(peer, rpc).await? {
            PeerReply::Error(e) => Err(e),
            reply => Ok(reply),
        }
    }
}

/// The network side of one job on this node: where each rank runs, and the
/// inboxes of the ranks that run here. Shared by the event loop and the
/// job's transports.
pub(crate) struct JobNet {
    pub(crate) job: u64,
    pub(crate) ranks: watch::Sender<BTreeMap<u32, PeerId>>,
    pub(crate) size: AtomicU32,
    pub(crate) inboxes: Mutex<HashMap<u32, mpsc::Sender<Delivery>>>,
    pub(crate) barriers: Mutex<HashMap<u32, mpsc::Sender<(u32, bool)>>>,
    pub(crate) closed: AtomicBool,
}

impl JobNet {
    pub(crate) fn new(job: u64) -> Arc<JobNet> {
        Arc::new(JobNet {
            job,
            ranks: watch::Sender::new(BTreeMap::new()),
            size: AtomicU32::new(0),
            inboxes: Mutex::new(HashMap::new()),
            barriers: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        })
    }

    /// Makes the inboxes of a rank that will run here; returns the
    /// transport's ends.
    pub(crate) fn register(
        &self,
        rank: u32,
    ) -> (mpsc::Receiver<Delivery>, mpsc::Receiver<(u32, bool)>) {
        let (tx, rx) = mpsc::channel(INBOX);
        let (btx, brx) = mpsc::channel(INBOX);
        lock(&self.inboxes).insert(rank, tx);
        lock(&self.barriers).insert(rank, btx);
        (rx, brx)
    }

    pub(crate) fn inbox(&self, rank: u32) -> Option<mpsc::Sender<Delivery>> {
        lock(&self.inboxes).get(&rank).cloned()
    }

    pub(crate) fn barrier(&self, rank: u32) -> Option<mpsc::Sender<(u32, bool)>> {
        lock(&self.barriers).get(&rank).cloned()
    }

    /// Installs a new placement.
    pub(crate) fn set_ranks(&self, ranks: BTreeMap<u32, PeerId>) {
        let size = ranks.keys().next_back().map_or(0, |r| r + 1);
        self.size.fetch_max(size, Ordering::SeqCst);
        self.ranks.send_replace(ranks);
    }

    /// Ends every transport of the job: senders and receivers get `Closed`.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        lock(&self.inboxes).clear();
        lock(&self.barriers).clear();
        // Wake senders waiting for a placement change.
        self.ranks.send_modify(|_| {});
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is a single insert, remove or clone.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A worker's transport over the overlay.
pub(crate) struct NetTransport {
    pub(crate) rank: u32,
    pub(crate) net: Net,
    pub(crate) job: Arc<JobNet>,
    pub(crate) inbox: mpsc::Receiver<Delivery>,
    pub(crate) barrier_rx: mpsc::Receiver<(u32, bool)>,
}

/// How long a sender waits before retrying a rank that is not reachable.
const RETRY: Duration = Duration::from_millis(50);

impl NetTransport {
    async fn deliver(&self, to: u32, rpc: PeerRpc) -> Result<(), TransportError> {
        let mut ranks = self.job.ranks.subscribe();
        loop {
            if self.job.closed.load(Ordering::SeqCst) {
                return Err(TransportError::Closed);
            }
            let peer = ranks.borrow_and_update().get(&to).copied();
            let Some(peer) = peer else {
                // Not placed yet (or lost and not yet replaced).
                let _ = tokio::time::timeout(RETRY * 10, ranks.changed()).await;
                continue;
            };
            match self.net.call(peer, rpc.clone()).await {
                Ok(PeerReply::Ack) => return Ok(()),
                Ok(PeerReply::Error(e)) if e.starts_with("closed") => {
                    return Err(TransportError::Closed);
                }
                Ok(_) | Err(_) => {
                    let _ = tokio::time::timeout(RETRY, ranks.changed()).await;
                }
            }
        }
    }
}

impl Transport for NetTransport {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.job.size.load(Ordering::SeqCst)
    }

    fn send(&mut self, to: Rank, payload: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            let size = self.size();
            if to >= size {
                return Err(TransportError::BadRank { rank: to, size });
            }
            let rpc = PeerRpc::Rank {
                job: self.job.job,
                from: self.rank,
                to,
                payload,
            };
            self.deliver(to, rpc).await
        })
    }

    fn recv(&mut self) -> BoxFuture<'_, Result<Delivery, TransportError>> {
        Box::pin(async move { self.inbox.recv().await.ok_or(TransportError::Closed) })
    }

    fn barrier(&mut self) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            let size = self.size();
            let job = self.job.job;
            if self.rank == 0 {
                let mut entered = 1;
                while entered < size {
                    match self.barrier_rx.recv().await {
                        Some((_, false)) => entered += 1,
                        Some((_, true)) => {}
                        None => return Err(TransportError::Closed),
                    }
                }
                for to in 1..size {
                    let rpc = PeerRpc::Barrier {
                        job,
                        to,
                        from: 0,
                        release: true,
                    };
                    self.deliver(to, rpc).await?;
                }
                Ok(())
            } else {
                let rpc = PeerRpc::Barrier {
                    job,
                    to: 0,
                    from: self.rank,
                    release: false,
                };
                self.deliver(0, rpc).await?;
                loop {
                    match self.barrier_rx.recv().await {
                        Some((_, true)) => return Ok(()),
                        Some(_) => {}
                        None => return Err(TransportError::Closed),
                    }
                }
            }
        })
    }
}

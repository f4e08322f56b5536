//! An in-process [`Transport`]: the workers of a job as tasks of one process.
//!
//! Used by the tests and the benchmark, and usable by the node for jobs whose
//! workers all run on one machine. Every rank has one bounded inbox, so
//! messages from one sender arrive in order and a slow receiver holds back
//! its senders.
//!
//! Membership changes can be simulated: [`LocalGroup::join`] adds a rank and
//! [`LocalGroup::replace`] gives a rank a fresh inbox (as if its worker was
//! lost and restarted elsewhere); both notify every other rank in-band.
//!
//! The barrier records which ranks wait in it, by endpoint: an arrival is
//! taken back when its barrier call is dropped unfinished, and a replaced
//! rank's old arrival no longer counts (see the [`Transport`] contract).

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, watch};

use crate::transport::{
    BoxFuture, ChangeKind, Delivery, MAX_MESSAGE_BYTES, MembershipChange, Rank, Transport,
    TransportError,
};

/// The shared side of an in-process job: creates and replaces endpoints.
#[derive(Clone)]
pub struct LocalGroup {
    inner: Arc<GroupInner>,
}

struct GroupInner {
    /// Capacity of every rank's inbox.
    capacity: usize,
    state: Mutex<GroupState>,
    /// Bumped (under the state lock) whenever a barrier completes or a rank
    /// is replaced; barrier waiters then look at the state again.
    barrier_changed: watch::Sender<u64>,
}

struct GroupState {
    /// Per rank: the sender into its inbox, the endpoint that owns it, and
    /// whether that endpoint waits in the current barrier.
    ranks: Vec<RankSlot>,
    /// Endpoint ids handed out so far (the next one is this).
    endpoints: u64,
    /// Barriers completed so far.
    barrier_generation: u64,
}

struct RankSlot {
    inbox: mpsc::Sender<Delivery>,
    /// The id of the rank's current endpoint; an older endpoint of the rank
    /// (from before [`LocalGroup::replace`]) no longer belongs to the job.
    endpoint: u64,
    /// The current endpoint waits in the barrier of this generation.
    in_barrier: bool,
}

impl LocalGroup {
    /// Creates a job of `size` ranks whose inboxes hold `capacity` deliveries
    /// each, and returns the group with one endpoint per rank (index = rank).
    ///
    /// A `capacity` of 0 is raised to 1 (a channel needs room for one item).
    pub fn new(size: u32, capacity: usize) -> (LocalGroup, Vec<LocalTransport>) {
        let (barrier_changed, _) = watch::channel(0);
        let group = LocalGroup {
            inner: Arc::new(GroupInner {
                capacity: capacity.max(1),
                state: Mutex::new(GroupState {
                    ranks: Vec::with_capacity(size as usize),
                    endpoints: 0,
                    barrier_generation: 0,
                }),
                barrier_changed,
            }),
        };
        let endpoints = (0..size).map(|_| group.add_rank()).collect();
        (group, endpoints)
    }

    /// A job of one: the endpoint of rank 0, which can only message itself.
    pub fn solo(capacity: usize) -> LocalTransport {
        let (_group, mut endpoints) = LocalGroup::new(1, capacity);
        endpoints.pop().expect("a group of one has one endpoint")
    }

    /// Adds a rank at the end (telling nobody); returns its endpoint.
    fn add_rank(&self) -> LocalTransport {
        let mut state = self.inner.lock();
        let rank = state.size();
        let (inbox, rx) = mpsc::channel(self.inner.capacity);
        let endpoint = state.new_endpoint();
        state.ranks.push(RankSlot {
            inbox,
            endpoint,
            in_barrier: false,
        });
        self.endpoint(rank, endpoint, rx)
    }

    /// The current number of ranks.
    pub fn size(&self) -> u32 {
        self.inner.lock().size()
    }

    /// Adds a rank at the end and tells every existing rank
    /// ([`ChangeKind::Joined`]). Returns the new rank's endpoint.
    ///
    /// A barrier that is waiting when the rank joins waits for it too.
    pub async fn join(&self) -> LocalTransport {
        let others = self.inner.lock().inboxes();
        let endpoint = self.add_rank();
        let change = MembershipChange {
            kind: ChangeKind::Joined,
            rank: endpoint.rank,
            size: endpoint.size(),
        };
        notify(others, change).await;
        endpoint
    }

    /// Gives `rank` a fresh endpoint with an empty inbox, and tells every
    /// other rank ([`ChangeKind::Replaced`]). The old endpoint sees the
    /// transport closed: its sends at once, its inbox once drained, its
    /// barrier at once; if it
    /// was waiting in a barrier, that arrival no longer counts, and the
    /// barrier waits for the new endpoint to arrive. Returns the new endpoint.
    pub async fn replace(&self, rank: Rank) -> Result<LocalTransport, TransportError> {
        let (endpoint, change, others) = {
            let mut state = self.inner.lock();
            let size = state.size();
            if rank >= size {
                return Err(TransportError::BadRank { rank, size });
            }
            let (tx, rx) = mpsc::channel(self.inner.capacity);
            let id = state.new_endpoint();
            state.ranks[rank as usize] = RankSlot {
                inbox: tx,
                endpoint: id,
                in_barrier: false,
            };
            // Wake the old endpoint if it waits in a barrier.
            self.inner.barrier_changed.send_modify(|n| *n += 1);
            let others: Vec<_> = state
                .ranks
                .iter()
                .enumerate()
                .filter(|(r, _)| *r != rank as usize)
                .map(|(_, slot)| slot.inbox.clone())
                .collect();
            let change = MembershipChange {
                kind: ChangeKind::Replaced,
                rank,
                size,
            };
            (self.endpoint(rank, id, rx), change, others)
        };
        notify(others, change).await;
        Ok(endpoint)
    }

    fn endpoint(&self, rank: Rank, id: u64, inbox: mpsc::Receiver<Delivery>) -> LocalTransport {
        LocalTransport {
            rank,
            id,
            group: self.inner.clone(),
            inbox,
        }
    }
}

/// Delivers a membership change to every inbox; ranks whose worker is gone
/// are skipped.
async fn notify(inboxes: Vec<mpsc::Sender<Delivery>>, change: MembershipChange) {
    for tx in inboxes {
        // A closed inbox belongs to a finished worker: nobody to tell.
        let _ = tx.send(Delivery::Membership(change)).await;
    }
}

impl GroupInner {
    fn lock(&self) -> MutexGuard<'_, GroupState> {
        // The state stays consistent even if a holder panicked (every update
        // is a single assignment), so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl GroupState {
    fn size(&self) -> u32 {
        u32::try_from(self.ranks.len()).unwrap_or(u32::MAX)
    }

    fn new_endpoint(&mut self) -> u64 {
        self.endpoints += 1;
        self.endpoints
    }

    fn inboxes(&self) -> Vec<mpsc::Sender<Delivery>> {
        self.ranks.iter().map(|slot| slot.inbox.clone()).collect()
    }

    /// The slot of `rank` if `endpoint` is still its current endpoint.
    fn current(&mut self, rank: Rank, endpoint: u64) -> Option<&mut RankSlot> {
        self.ranks
            .get_mut(rank as usize)
            .filter(|slot| slot.endpoint == endpoint)
    }
}

/// One rank's endpoint of a [`LocalGroup`].
pub struct LocalTransport {
    rank: Rank,
    /// Tells this endpoint from a later replacement of the same rank.
    id: u64,
    group: Arc<GroupInner>,
    inbox: mpsc::Receiver<Delivery>,
}

/// A barrier arrival, taken back if its call is dropped before the barrier
/// completes (the worker was cancelled, or hit a limit, while waiting).
struct Arrival<'a> {
    group: &'a GroupInner,
    rank: Rank,
    endpoint: u64,
    generation: u64,
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        let mut state = self.group.lock();
        if state.barrier_generation != self.generation {
            return; // completed: nothing to take back
        }
        if let Some(slot) = state.current(self.rank, self.endpoint) {
            slot.in_barrier = false;
        }
    }
}

impl Transport for LocalTransport {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.group.lock().size()
    }

    fn send(&mut self, to: Rank, payload: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            if payload.len() > MAX_MESSAGE_BYTES {
                return Err(TransportError::TooLarge {
                    len: payload.len(),
                    max: MAX_MESSAGE_BYTES,
                });
            }
            let tx = {
                let state = self.group.lock();
                // A replaced endpoint no longer belongs to the job: what it
                // sends is refused, as the node drops what an old
                // incarnation sends (else rank 0 of nqueens could take its
                // late request for the fresh worker's and dismiss the rank).
                if state
                    .ranks
                    .get(self.rank as usize)
                    .is_some_and(|slot| slot.endpoint != self.id)
                {
                    return Err(TransportError::Closed);
                }
                match state.ranks.get(to as usize) {
                    Some(slot) => slot.inbox.clone(),
                    None => {
                        return Err(TransportError::BadRank {
                            rank: to,
                            size: state.size(),
                        });
                    }
                }
            };
            tx.send(Delivery::Message {
                from: self.rank,
                payload,
            })
            .await
            .map_err(|_| TransportError::Closed)
        })
    }

    fn recv(&mut self) -> BoxFuture<'_, Result<Delivery, TransportError>> {
        // `mpsc::Receiver::recv` is cancel-safe, as the trait requires.
        Box::pin(async move { self.inbox.recv().await.ok_or(TransportError::Closed) })
    }

    fn barrier(&mut self) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            let group = &*self.group;
            let (arrival, mut changed) = {
                let mut state = group.lock();
                let Some(slot) = state.current(self.rank, self.id) else {
                    return Err(TransportError::Closed); // replaced
                };
                slot.in_barrier = true;
                if state.ranks.iter().all(|slot| slot.in_barrier) {
                    for slot in &mut state.ranks {
                        slot.in_barrier = false;
                    }
                    state.barrier_generation += 1;
                    group.barrier_changed.send_modify(|n| *n += 1);
                    return Ok(());
                }
                let arrival = Arrival {
                    group,
                    rank: self.rank,
                    endpoint: self.id,
                    generation: state.barrier_generation,
                };
                // Subscribed under the lock: no later change can be missed.
                (arrival, group.barrier_changed.subscribe())
            };
            loop {
                if changed.changed().await.is_err() {
                    // Cannot happen: the sender lives in the group, which
                    // `self` keeps alive.
                    return Err(TransportError::Closed);
                }
                let (completed, replaced) = {
                    let mut state = group.lock();
                    (
                        state.barrier_generation != arrival.generation,
                        state.current(self.rank, self.id).is_none(),
                    )
                };
                if completed {
                    return Ok(());
                }
                if replaced {
                    return Err(TransportError::Closed);
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use super::*;

    /// Polls a future once; `Pending` means it is waiting.
    fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
        std::pin::Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
    }

    /// Awaits a future that must end soon: a test fails instead of hanging.
    async fn soon<F: Future>(future: F) -> F::Output {
        tokio::time::timeout(std::time::Duration::from_secs(5), future)
            .await
            .expect("still waiting after 5 s")
    }

    #[tokio::test]
    async fn messages_arrive_in_order_per_sender() {
        let (_group, mut eps) = LocalGroup::new(2, 4);
        let mut b = eps.pop().unwrap();
        let mut a = eps.pop().unwrap();
        let sender = tokio::spawn(async move {
            for i in 0u8..20 {
                a.send(1, vec![i]).await.unwrap();
            }
            a
        });
        for i in 0u8..20 {
            assert_eq!(
                b.recv().await.unwrap(),
                Delivery::Message {
                    from: 0,
                    payload: vec![i]
                }
            );
        }
        sender.await.unwrap();
    }

    #[tokio::test]
    async fn bad_rank_and_oversized_messages_are_refused() {
        let (_group, mut eps) = LocalGroup::new(2, 4);
        let a = &mut eps[0];
        assert_eq!(
            a.send(2, vec![]).await,
            Err(TransportError::BadRank { rank: 2, size: 2 })
        );
        let big = vec![0; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(
            a.send(1, big).await,
            Err(TransportError::TooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn barrier_releases_only_when_all_arrive() {
        let (_group, eps) = LocalGroup::new(3, 4);
        let mut tasks = Vec::new();
        for mut ep in eps {
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    ep.barrier().await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }

    #[tokio::test]
    async fn an_arrival_whose_call_is_dropped_is_taken_back() {
        let (_group, mut eps) = LocalGroup::new(3, 4);
        let (a, rest) = eps.split_first_mut().unwrap();
        let (b, rest) = rest.split_first_mut().unwrap();
        let c = &mut rest[0];
        {
            // Rank 1 waits, then its worker is cancelled (the call dropped).
            let mut waiting = b.barrier();
            assert!(poll_once(&mut waiting).is_pending());
        }
        let mut at_a = a.barrier();
        assert!(poll_once(&mut at_a).is_pending());
        // Counting rank 1's old arrival would let this one complete.
        let mut at_c = c.barrier();
        assert!(poll_once(&mut at_c).is_pending());
        // The barrier completes once rank 1 really arrives.
        soon(b.barrier()).await.unwrap();
        soon(at_a).await.unwrap();
        soon(at_c).await.unwrap();
        // And the next one needs everybody again.
        let mut next = a.barrier();
        assert!(poll_once(&mut next).is_pending());
    }

    #[tokio::test]
    async fn a_replaced_rank_must_arrive_again() {
        let (group, mut eps) = LocalGroup::new(3, 4);
        let mut c = eps.pop().unwrap();
        let mut b = eps.pop().unwrap();
        let mut a = eps.pop().unwrap();
        // Rank 1's worker waits in the barrier and is lost there.
        let mut lost = b.barrier();
        assert!(poll_once(&mut lost).is_pending());
        let mut fresh = group.replace(1).await.unwrap();
        // The old endpoint's call ends; it no longer belongs to the job.
        assert_eq!(soon(lost).await, Err(TransportError::Closed));
        assert_eq!(soon(b.barrier()).await, Err(TransportError::Closed));
        let mut at_a = a.barrier();
        assert!(poll_once(&mut at_a).is_pending());
        let mut at_c = c.barrier();
        assert!(poll_once(&mut at_c).is_pending(), "released early");
        soon(fresh.barrier()).await.unwrap();
        soon(at_a).await.unwrap();
        soon(at_c).await.unwrap();
    }

    #[tokio::test]
    async fn a_rank_that_joins_is_waited_for() {
        let (group, mut eps) = LocalGroup::new(2, 4);
        let (first, second) = eps.split_at_mut(1);
        let mut at_0 = first[0].barrier();
        assert!(poll_once(&mut at_0).is_pending());
        let mut joined = group.join().await;
        let mut at_1 = second[0].barrier();
        assert!(poll_once(&mut at_1).is_pending());
        soon(joined.barrier()).await.unwrap();
        soon(at_0).await.unwrap();
        soon(at_1).await.unwrap();
    }

    #[tokio::test]
    async fn join_and_replace_are_announced() {
        let (group, mut eps) = LocalGroup::new(2, 4);
        let mut joined = group.join().await;
        assert_eq!((joined.rank(), joined.size()), (2, 3));
        assert_eq!(
            eps[0].recv().await.unwrap(),
            Delivery::Membership(MembershipChange {
                kind: ChangeKind::Joined,
                rank: 2,
                size: 3
            })
        );
        let mut fresh = group.replace(1).await.unwrap();
        // The old endpoint of rank 1 is cut off; the others hear of it.
        assert!(matches!(eps[1].recv().await, Ok(Delivery::Membership(_))));
        assert_eq!(eps[1].recv().await, Err(TransportError::Closed));
        assert_eq!(
            joined.recv().await.unwrap(),
            Delivery::Membership(MembershipChange {
                kind: ChangeKind::Replaced,
                rank: 1,
                size: 3
            })
        );
        eps[0].send(1, b"hi".to_vec()).await.unwrap();
        assert_eq!(
            fresh.recv().await.unwrap(),
            Delivery::Message {
                from: 0,
                payload: b"hi".to_vec()
            }
        );
    }
}

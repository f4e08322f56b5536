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
    /// Completed barrier generations; waiters watch it change.
    barrier_done: watch::Sender<u64>,
}

struct GroupState {
    /// The sender into each rank's inbox, indexed by rank.
    inboxes: Vec<mpsc::Sender<Delivery>>,
    /// Ranks that have entered the current barrier generation.
    barrier_arrived: u32,
    barrier_generation: u64,
}

impl LocalGroup {
    /// Creates a job of `size` ranks whose inboxes hold `capacity` deliveries
    /// each, and returns the group with one endpoint per rank (index = rank).
    ///
    /// A `capacity` of 0 is raised to 1 (a channel needs room for one item).
    pub fn new(size: u32, capacity: usize) -> (LocalGroup, Vec<LocalTransport>) {
        let capacity = capacity.max(1);
        let (barrier_done, _) = watch::channel(0);
        let group = LocalGroup {
            inner: Arc::new(GroupInner {
                capacity,
                state: Mutex::new(GroupState {
                    inboxes: Vec::with_capacity(size as usize),
                    barrier_arrived: 0,
                    barrier_generation: 0,
                }),
                barrier_done,
            }),
        };
        let mut endpoints = Vec::with_capacity(size as usize);
        {
            let mut state = group.inner.lock();
            for rank in 0..size {
                let (tx, rx) = mpsc::channel(capacity);
                state.inboxes.push(tx);
                endpoints.push(group.endpoint(rank, rx));
            }
        }
        (group, endpoints)
    }

    /// A job of one: the endpoint of rank 0, which can only message itself.
    pub fn solo(capacity: usize) -> LocalTransport {
        let capacity = capacity.max(1);
        let (tx, inbox) = mpsc::channel(capacity);
        let (barrier_done, _) = watch::channel(0);
        let group = Arc::new(GroupInner {
            capacity,
            state: Mutex::new(GroupState {
                inboxes: vec![tx],
                barrier_arrived: 0,
                barrier_generation: 0,
            }),
            barrier_done,
        });
        LocalTransport {
            rank: 0,
            group,
            inbox,
        }
    }

    /// The current number of ranks.
    pub fn size(&self) -> u32 {
        self.inner.lock().size()
    }

    /// Adds a rank at the end and tells every existing rank
    /// ([`ChangeKind::Joined`]). Returns the new rank's endpoint.
    pub async fn join(&self) -> LocalTransport {
        let (endpoint, change, others) = {
            let mut state = self.inner.lock();
            let rank = state.size();
            let (tx, rx) = mpsc::channel(self.inner.capacity);
            let others = state.inboxes.clone();
            state.inboxes.push(tx);
            let change = MembershipChange {
                kind: ChangeKind::Joined,
                rank,
                size: state.size(),
            };
            (self.endpoint(rank, rx), change, others)
        };
        notify(others, change).await;
        endpoint
    }

    /// Gives `rank` a fresh, empty inbox (its old endpoint sees the transport
    /// closed) and tells every other rank ([`ChangeKind::Replaced`]).
    /// Returns the replacement's endpoint.
    pub async fn replace(&self, rank: Rank) -> Result<LocalTransport, TransportError> {
        let (endpoint, change, others) = {
            let mut state = self.inner.lock();
            let size = state.size();
            let Some(slot) = state.inboxes.get_mut(rank as usize) else {
                return Err(TransportError::BadRank { rank, size });
            };
            let (tx, rx) = mpsc::channel(self.inner.capacity);
            *slot = tx;
            let others: Vec<_> = state
                .inboxes
                .iter()
                .enumerate()
                .filter(|(r, _)| *r != rank as usize)
                .map(|(_, tx)| tx.clone())
                .collect();
            let change = MembershipChange {
                kind: ChangeKind::Replaced,
                rank,
                size,
            };
            (self.endpoint(rank, rx), change, others)
        };
        notify(others, change).await;
        Ok(endpoint)
    }

    fn endpoint(&self, rank: Rank, inbox: mpsc::Receiver<Delivery>) -> LocalTransport {
        LocalTransport {
            rank,
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
        u32::try_from(self.inboxes.len()).unwrap_or(u32::MAX)
    }
}

/// One rank's endpoint of a [`LocalGroup`].
pub struct LocalTransport {
    rank: Rank,
    group: Arc<GroupInner>,
    inbox: mpsc::Receiver<Delivery>,
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
                match state.inboxes.get(to as usize) {
                    Some(tx) => tx.clone(),
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
            let (generation, mut done) = {
                let mut state = self.group.lock();
                state.barrier_arrived += 1;
                if state.barrier_arrived >= state.size() {
                    state.barrier_arrived = 0;
                    state.barrier_generation += 1;
                    self.group
                        .barrier_done
                        .send_replace(state.barrier_generation);
                    return Ok(());
                }
                // Subscribe while holding the lock so the release cannot be missed.
                (
                    state.barrier_generation,
                    self.group.barrier_done.subscribe(),
                )
            };
            done.wait_for(|completed| *completed > generation)
                .await
                .map(|_| ())
                .map_err(|_| TransportError::Closed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

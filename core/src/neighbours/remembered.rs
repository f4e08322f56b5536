//! A bounded set of peers with when each was added, for the peer keeper's
//! lists of dead, banned, foreign and offending peers.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::{PeerKey, Time};

/// A set of peers with when each was added, the oldest forgotten first
/// beyond a capacity.
#[derive(Debug, Clone)]
pub(crate) struct Remembered<P> {
    since: BTreeMap<P, Time>,
    order: VecDeque<(Time, P)>,
    capacity: usize,
}

impl<P: PeerKey> Remembered<P> {
    pub(crate) fn new(capacity: usize) -> Self {
        Remembered {
            since: BTreeMap::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    /// Adds `peer` (keeping its first time if present); returns the peers
    /// forgotten to make room.
    pub(crate) fn insert(&mut self, peer: P, now: Time) -> Vec<P> {
        if !self.since.contains_key(&peer) {
            self.since.insert(peer.clone(), now);
            self.order.push_back((now, peer));
        }
        let mut forgotten = Vec::new();
        while self.since.len() > self.capacity {
            let Some((at, old)) = self.order.pop_front() else {
                break;
            };
            if self.since.get(&old) == Some(&at) {
                self.since.remove(&old);
                forgotten.push(old);
            }
        }
        self.compact();
        forgotten
    }

    pub(crate) fn remove(&mut self, peer: &P) -> bool {
        let removed = self.since.remove(peer).is_some();
        self.compact();
        removed
    }

    pub(crate) fn contains(&self, peer: &P) -> bool {
        self.since.contains_key(peer)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.since.is_empty()
    }

    /// The peers, in peer order.
    pub(crate) fn peers(&self) -> Vec<P> {
        self.since.keys().cloned().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.since.len()
    }

    /// Removes and returns the peers added at least `age` before `now`.
    pub(crate) fn expire(&mut self, now: Time, age: Duration) -> Vec<P> {
        let old: Vec<P> = self
            .since
            .iter()
            .filter(|(_, at)| now.saturating_sub(**at) >= age)
            .map(|(p, _)| p.clone())
            .collect();
        for peer in &old {
            self.since.remove(peer);
        }
        self.compact();
        old
    }

    /// Drops stale entries of the order queue (removed peers), so that it
    /// stays within twice the set.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.since.len() + 16 {
            let since = &self.since;
            self.order.retain(|(at, p)| since.get(p) == Some(at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_set_oldest_forgotten_first() {
        let t = Duration::from_secs;
        let mut set = Remembered::new(3);
        for peer in 0u32..3 {
            assert!(set.insert(peer, t(u64::from(peer))).is_empty());
        }
        // Inserting a known peer again changes nothing.
        assert!(set.insert(0, t(9)).is_empty());
        assert_eq!(set.insert(3, t(3)), vec![0], "the oldest is forgotten");
        assert!((1..4).all(|p| set.contains(&p)));
        assert!(set.remove(&2));
        assert!(set.insert(4, t(4)).is_empty());
        assert_eq!(set.len(), 3);
        // Expiry takes what is at least that old.
        assert_eq!(set.expire(t(5), t(2)), vec![1, 3]);
        assert!(set.contains(&4) && set.len() == 1);
        // Removed and re-added peers never leave the order queue unbounded.
        for round in 0..1000u64 {
            set.insert(7, t(round));
            set.remove(&7);
        }
        assert!(set.order.len() <= 2 * set.len() + 16);
    }
}

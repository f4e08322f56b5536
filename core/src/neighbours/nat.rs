//! The overlay's NAT policy: whether this node takes itself for
//! unreachable, which relays it reserves a slot on, and when a connection
//! through a relay is closed because a direct one exists.
//!
//! The driver (the overlay's event loop) reports what AutoNAT, identify,
//! the relay client and the swarm tell it, with the time; the policy
//! answers with [`NatAction`]s. It keeps no socket and reads no clock, so
//! its rules are tested here, beside the [`PeerKeeper`](super::keeper)
//! whose peers it uses as relays.
//!
//! - **Reachable or not**: the driver says whether a dial-back confirmed an
//!   address of ours. Without one, the node takes itself for unreachable
//!   when a dial-back failed, or when peers saw it at an address none of
//!   its interfaces has (a NAT's) and no dial-back reached it within the
//!   grace (AutoNAT v2 reports no failure when the server's dial times
//!   out, which a NAT that drops unsolicited packets makes it do).
//! - **Reservations**: an unreachable node reserves a slot on up to
//!   `reservations` connected peers that serve as relays, in peer order.
//!   A reservation that fails or ends is not asked of that relay again for
//!   the retry time; a node that becomes reachable gives them all up.
//! - **Direct connections**: once a direct connection to a peer exists,
//!   its relayed ones are closed, when no stream uses the peer's
//!   connections (else at a later tick), so that nothing depends on a
//!   circuit.
//!
//! Every map is bounded: by the connected peers (entries go with their
//! last connection) or by the number of reservations.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::{PeerKey, Time};

/// What the policy needs to know of the node's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatConfig {
    /// How many relays an unreachable node reserves a slot on.
    pub reservations: usize,
    /// How long, once peers saw this node at an address of a NAT, it waits
    /// for a dial-back before it takes itself for unreachable.
    pub reachability_grace: Duration,
    /// How long a relay whose reservation failed or ended is not asked
    /// again.
    pub relay_retry: Duration,
}

/// What the driver does for the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NatAction<P, C> {
    /// Ask `relay` for a reservation (listen on a circuit through it). If
    /// that cannot even be asked, say so with
    /// [`NatPolicy::reservation_ended`].
    Reserve(P),
    /// Give up the reservation on `relay`: the node is reachable.
    GiveUp(P),
    /// Close these relayed connections to `peer`: a direct one exists.
    CloseRelayed(P, Vec<C>),
}

/// The NAT policy's state (see the [module docs](self)). `P` names peers,
/// `C` names connections.
#[derive(Debug, Clone)]
pub struct NatPolicy<P, C> {
    config: NatConfig,
    /// Relays asked for a reservation (accepted or not yet).
    relays: BTreeSet<P>,
    /// Relays that accepted.
    reserved: BTreeSet<P>,
    /// Relays not to ask again before then.
    retry: BTreeMap<P, Time>,
    /// Connected peers that serve as relays.
    relay_capable: BTreeSet<P>,
    /// When peers first saw us at an address none of our interfaces has.
    observed_since: Option<Time>,
    /// Whether a dial-back to a network address of ours failed.
    dial_back_failed: bool,
    /// Peers connected through a relay: since when, and the connections.
    relayed: BTreeMap<P, (Time, Vec<C>)>,
    /// Direct connections open to each peer.
    direct: BTreeMap<P, u32>,
}

impl<P: PeerKey, C: Clone + PartialEq> NatPolicy<P, C> {
    /// A node that knows nothing of its NAT yet.
    pub fn new(config: NatConfig) -> Self {
        NatPolicy {
            config,
            relays: BTreeSet::new(),
            reserved: BTreeSet::new(),
            retry: BTreeMap::new(),
            relay_capable: BTreeSet::new(),
            observed_since: None,
            dial_back_failed: false,
            relayed: BTreeMap::new(),
            direct: BTreeMap::new(),
        }
    }

    /// Whether this node takes itself for unreachable (and wants relays);
    /// `reachable`: a dial-back confirmed an address of ours.
    pub fn unreachable(&self, now: Time, reachable: bool) -> bool {
        if reachable {
            return false;
        }
        self.dial_back_failed
            || self
                .observed_since
                .is_some_and(|since| now >= since.saturating_add(self.config.reachability_grace))
    }

    /// Peers saw us at an address none of our interfaces has (a NAT's).
    pub fn seen_behind_nat(&mut self, now: Time) {
        self.observed_since.get_or_insert(now);
    }

    /// A peer could not dial back to a network address of ours.
    pub fn dial_back_failed(&mut self) {
        self.dial_back_failed = true;
    }

    /// Whether connected `peer` serves as a relay (identify lists the hop
    /// protocol).
    pub fn relay_capable(&mut self, peer: P, capable: bool) {
        if capable {
            self.relay_capable.insert(peer);
        } else {
            self.relay_capable.remove(&peer);
        }
    }

    /// `relay` accepted our reservation.
    pub fn reservation_accepted(&mut self, relay: P) {
        if self.relays.contains(&relay) {
            self.reserved.insert(relay);
        }
    }

    /// The reservation on `relay` failed, ended or could not be asked: it
    /// is not asked again for the retry time. Whether it was one of ours.
    pub fn reservation_ended(&mut self, now: Time, relay: &P) -> bool {
        self.reserved.remove(relay);
        if !self.relays.remove(relay) {
            return false;
        }
        self.retry
            .insert(relay.clone(), now.saturating_add(self.config.relay_retry));
        true
    }

    /// How many relays hold a reservation for us.
    pub fn reserved(&self) -> usize {
        self.reserved.len()
    }

    /// Since when `peer` has been connected through a relay, if it is.
    pub fn relayed_since(&self, peer: &P) -> Option<Time> {
        self.relayed.get(peer).map(|(since, _)| *since)
    }

    /// A connection `id` to `peer` came (`relayed`: through a relay);
    /// `in_use`: whether a stream uses the peer's connections.
    pub fn connected(
        &mut self,
        now: Time,
        peer: P,
        id: C,
        relayed: bool,
        in_use: bool,
    ) -> Vec<NatAction<P, C>> {
        if relayed {
            self.relayed
                .entry(peer)
                .or_insert_with(|| (now, Vec::new()))
                .1
                .push(id);
            return Vec::new();
        }
        let n = self.direct.entry(peer.clone()).or_default();
        *n = n.saturating_add(1);
        self.close_relayed(&peer, in_use).into_iter().collect()
    }

    /// Connection `id` to `peer` closed; `remaining`: how many the peer
    /// still has.
    pub fn disconnected(&mut self, peer: &P, id: &C, remaining: u32) {
        let was_relayed = match self.relayed.get_mut(peer) {
            Some((_, ids)) if ids.contains(id) => {
                ids.retain(|c| c != id);
                if ids.is_empty() {
                    self.relayed.remove(peer);
                }
                true
            }
            _ => false,
        };
        if !was_relayed && let Some(n) = self.direct.get_mut(peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.direct.remove(peer);
            }
        }
        if remaining == 0 {
            self.relay_capable.remove(peer);
            self.relayed.remove(peer);
            self.direct.remove(peer);
        }
    }

    /// The relayed connections of `peer` to close: it has a direct one,
    /// and no stream uses its connections.
    fn close_relayed(&self, peer: &P, in_use: bool) -> Option<NatAction<P, C>> {
        if in_use || !self.direct.contains_key(peer) {
            return None;
        }
        let (_, ids) = self.relayed.get(peer)?;
        Some(NatAction::CloseRelayed(peer.clone(), ids.clone()))
    }

    /// The periodic part: reservations as reachability calls for, and
    /// relayed connections left open beside direct ones while streams used
    /// them. `reachable`: a dial-back confirmed an address of ours;
    /// `in_use`: whether a stream uses a peer's connections;
    /// `can_reach`: whether the driver knows an address to reach a relay
    /// at.
    pub fn tick(
        &mut self,
        now: Time,
        reachable: bool,
        in_use: impl Fn(&P) -> bool,
        can_reach: impl Fn(&P) -> bool,
    ) -> Vec<NatAction<P, C>> {
        let mut out = Vec::new();
        if !self.unreachable(now, reachable) {
            self.reserved.clear();
            out.extend(
                std::mem::take(&mut self.relays)
                    .into_iter()
                    .map(NatAction::GiveUp),
            );
        } else {
            self.retry.retain(|_, until| *until > now);
            let wanted = self.config.reservations.saturating_sub(self.relays.len());
            let asked: Vec<P> = self
                .relay_capable
                .iter()
                .filter(|p| !self.relays.contains(*p) && !self.retry.contains_key(*p))
                .filter(|p| can_reach(p))
                .take(wanted)
                .cloned()
                .collect();
            for relay in asked {
                self.relays.insert(relay.clone());
                out.push(NatAction::Reserve(relay));
            }
        }
        let doubled: Vec<P> = self.relayed.keys().cloned().collect();
        out.extend(
            doubled
                .iter()
                .filter_map(|p| self.close_relayed(p, in_use(p))),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(10);
    const RETRY: Duration = Duration::from_secs(30);

    fn policy(reservations: usize) -> NatPolicy<u32, u64> {
        NatPolicy::new(NatConfig {
            reservations,
            reachability_grace: GRACE,
            relay_retry: RETRY,
        })
    }

    fn secs(s: u64) -> Time {
        Duration::from_secs(s)
    }

    fn never(_: &u32) -> bool {
        false
    }

    fn always(_: &u32) -> bool {
        true
    }

    #[test]
    fn a_node_seen_behind_a_nat_is_unreachable_only_after_the_grace_without_a_dial_back() {
        let mut p = policy(2);
        assert!(!p.unreachable(secs(100), false), "nothing seen yet");
        p.seen_behind_nat(secs(5));
        p.seen_behind_nat(secs(8));
        assert!(!p.unreachable(secs(14), false), "within the grace");
        assert!(
            p.unreachable(secs(15), false),
            "the grace counts from the first sighting"
        );
        assert!(!p.unreachable(secs(15), true), "a dial-back reached it");
        let mut q = policy(2);
        q.dial_back_failed();
        assert!(
            q.unreachable(secs(0), false),
            "a failed dial-back is enough"
        );
    }

    #[test]
    fn an_unreachable_node_reserves_as_many_relays_as_configured_in_peer_order() {
        let mut p = policy(2);
        p.dial_back_failed();
        for peer in [7, 3, 5, 9] {
            p.relay_capable(peer, true);
        }
        let out = p.tick(secs(1), false, never, |peer| *peer != 3);
        assert_eq!(out, vec![NatAction::Reserve(5), NatAction::Reserve(7)]);
        assert!(
            p.tick(secs(2), false, never, always).is_empty(),
            "enough asked"
        );
        p.reservation_accepted(5);
        assert_eq!(p.reserved(), 1);
    }

    #[test]
    fn a_relay_whose_reservation_ended_is_asked_again_only_after_the_retry_time() {
        let mut p = policy(1);
        p.dial_back_failed();
        p.relay_capable(1, true);
        p.relay_capable(2, true);
        assert_eq!(
            p.tick(secs(0), false, never, always),
            vec![NatAction::Reserve(1)]
        );
        assert!(p.reservation_ended(secs(1), &1));
        assert!(!p.reservation_ended(secs(1), &8), "not one of ours");
        assert_eq!(
            p.tick(secs(2), false, never, always),
            vec![NatAction::Reserve(2)]
        );
        assert!(p.reservation_ended(secs(3), &2));
        assert!(
            p.tick(secs(30), false, never, always).is_empty(),
            "both wait"
        );
        assert_eq!(
            p.tick(secs(31), false, never, always),
            vec![NatAction::Reserve(1)]
        );
    }

    #[test]
    fn a_node_that_becomes_reachable_gives_up_its_reservations() {
        let mut p = policy(2);
        p.dial_back_failed();
        p.relay_capable(1, true);
        p.tick(secs(0), false, never, always);
        p.reservation_accepted(1);
        assert_eq!(
            p.tick(secs(1), true, never, always),
            vec![NatAction::GiveUp(1)]
        );
        assert_eq!(p.reserved(), 0);
        assert!(p.tick(secs(2), true, never, always).is_empty());
    }

    #[test]
    fn relayed_connections_close_once_a_direct_one_exists_and_no_stream_uses_them() {
        let mut p = policy(0);
        assert!(p.connected(secs(0), 4, 10, true, false).is_empty());
        assert!(p.connected(secs(1), 4, 11, true, false).is_empty());
        assert_eq!(p.relayed_since(&4), Some(secs(0)));
        // A stream uses the peer's connections: a later tick closes them.
        assert!(p.connected(secs(2), 4, 12, false, true).is_empty());
        assert!(p.tick(secs(3), true, always, always).is_empty());
        assert_eq!(
            p.tick(secs(4), true, never, always),
            vec![NatAction::CloseRelayed(4, vec![10, 11])]
        );
        p.disconnected(&4, &10, 2);
        p.disconnected(&4, &11, 1);
        assert_eq!(p.relayed_since(&4), None);
        assert!(p.tick(secs(5), true, never, always).is_empty());
    }

    #[test]
    fn a_peer_gone_is_forgotten() {
        let mut p = policy(1);
        p.relay_capable(4, true);
        p.connected(secs(0), 4, 10, true, false);
        p.connected(secs(0), 4, 11, false, true);
        p.disconnected(&4, &11, 0);
        assert_eq!(p.relayed_since(&4), None);
        p.dial_back_failed();
        assert!(
            p.tick(secs(1), false, never, always).is_empty(),
            "no relay left"
        );
    }
}

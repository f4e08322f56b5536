//! Which addresses are true for whom: a peer's, and our own.
//!
//! A node listening on `0.0.0.0` tells its peers (identify) every address
//! of every interface it has (libp2p's TCP transport expands `0.0.0.0` to
//! them), its loopback address among them; passed on in peer exchange,
//! `127.0.0.1:4001` would make a node on another host dial itself.
//! Identify sends one list to every peer, so the rule is applied where an
//! address is taken in and where it is passed on:
//!
//! - a **host** address (loopback) reaches only the same machine: it is
//!   kept for, and given to, only peers whose connection to us is over
//!   loopback ([`reachable_from`], [`passable_to`]);
//! - a **link** address (IPv4 169.254/16, IPv6 fe80::/10) reaches only the
//!   same network link, and which link is not in the address: it is kept
//!   from the peer itself when it came to us over such an address, and
//!   never passed on to a third;
//! - any other address (private ranges included, and DNS names) may reach
//!   any peer, and is kept and passed on (whether it really does is what
//!   dialing finds out).
//!
//! Where a peer's connection comes from is the remote address libp2p
//! reports for it, so a peer cannot claim to be on our machine.
//!
//! **Our own addresses** ([`OwnAddrs`]): each listen address is believed
//! reachable as far as its scope goes, and *confirmed* once peers on other
//! hosts connected to us at it. An address a peer says it sees us at
//! (identify's observed address, as behind a NAT) that is none of our
//! interfaces' is only a candidate: with AutoNAT (the default) it is
//! advertised once a peer dialed back to it (AutoNAT v2, a new connection
//! from the peer to that address: a NAT that lets nobody in fails it);
//! without, once [`CONFIRMING_OBSERVERS`] different peers, connected over
//! the network (not loopback), saw us there, so that one peer alone cannot
//! make us advertise an address of its choosing. A relayed address (a
//! reservation on a relay, `.../p2p/RELAY/p2p-circuit`) is advertised as
//! long as the relay keeps the reservation. The status page shows each
//! address with what we believe of it and why ([`OwnAddr`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use libp2p::Multiaddr;
use libp2p::multiaddr::Protocol;

/// How far an address reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Loopback: this machine only.
    Host,
    /// Link-local: this network link only.
    Link,
    /// Anywhere the networks route it.
    Network,
}

/// The scope of `addr`, from its first component (`None` if it names no
/// host).
pub fn scope(addr: &Multiaddr) -> Option<Scope> {
    let ip = match addr.iter().next()? {
        Protocol::Ip4(ip) => IpAddr::V4(ip),
        Protocol::Ip6(ip) => IpAddr::V6(ip),
        Protocol::Dns(_) | Protocol::Dns4(_) | Protocol::Dns6(_) => return Some(Scope::Network),
        _ => return None,
    };
    Some(match ip {
        ip if ip.is_loopback() => Scope::Host,
        IpAddr::V4(v4) if v4.is_link_local() => Scope::Link,
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Scope::Link,
        // An IPv4-mapped IPv6 address is the IPv4 address.
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) if v4.is_loopback() => Scope::Host,
            Some(v4) if v4.is_link_local() => Scope::Link,
            _ => Scope::Network,
        },
        IpAddr::V4(_) => Scope::Network,
    })
}

/// Whether `addr` (an address of some peer) is true for a node whose
/// connection to us comes from `via` (its remote address as we see it;
/// `None` if we do not know it).
pub fn reachable_from(addr: &Multiaddr, via: Option<&Multiaddr>) -> bool {
    match scope(addr) {
        Some(Scope::Network) => true,
        Some(local) => via.and_then(scope) == Some(local),
        None => false,
    }
}

/// Whether `addr` (of some third peer) may be passed on in peer exchange
/// to a node whose connection to us comes from `via`: anywhere if of
/// network scope, a loopback address only to a node on this machine, a
/// link-local one never (the asker's link need not be the peer's).
pub fn passable_to(addr: &Multiaddr, via: Option<&Multiaddr>) -> bool {
    match scope(addr) {
        Some(Scope::Network) => true,
        Some(Scope::Host) => via.and_then(scope) == Some(Scope::Host),
        Some(Scope::Link) | None => false,
    }
}

/// Different peers that must observe us at an address that is none of our
/// interfaces' before we advertise it.
pub const CONFIRMING_OBSERVERS: usize = 2;
/// Most peers counted per address (a count shown as "at least").
pub const MAX_COUNTED_PEERS: usize = 16;
/// Most observed (non-interface) addresses tracked at once; a new one
/// replaces the one fewest peers saw.
pub const MAX_OBSERVED: usize = 8;

/// Where one of our addresses comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// We listen on it (an interface's address).
    Listen,
    /// Peers saw us at it (a NAT's, say), and we do not listen on it.
    Observed,
}

/// What this node believes about one of its own addresses, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Loopback: reaches this machine only; told only to peers on it.
    ThisHostOnly,
    /// Link-local: reaches this link only; never passed on.
    ThisLinkOnly,
    /// A listen address on the network that no peer has connected to yet:
    /// advertised, believed reachable from its network.
    Unconfirmed,
    /// Peers on other hosts connected to us at it (listen address) or saw
    /// us at it (observed address, at least [`CONFIRMING_OBSERVERS`]):
    /// advertised.
    Confirmed {
        /// How many different peers (at most [`MAX_COUNTED_PEERS`]).
        peers: usize,
    },
    /// Fewer than [`CONFIRMING_OBSERVERS`] peers saw us at it: not
    /// advertised.
    Candidate {
        /// How many different peers saw us there.
        peers: usize,
    },
    /// Peers saw us at it and no dial-back (AutoNAT) has reached us there
    /// yet: not advertised.
    AwaitingDialBack {
        /// How many different peers saw us there.
        peers: usize,
    },
    /// A peer dialed back to it and reached us (AutoNAT v2): advertised.
    DialedBack,
    /// A peer's dial-back to it failed (behind a NAT or firewall): not
    /// advertised.
    DialBackFailed,
    /// Through a relay that holds a reservation for us: advertised.
    Relayed,
}

impl Reach {
    /// Whether we believe peers on other hosts can reach us at it.
    pub fn reachable_from_other_hosts(self) -> bool {
        matches!(
            self,
            Reach::Unconfirmed | Reach::Confirmed { .. } | Reach::DialedBack | Reach::Relayed
        )
    }

    /// Why, in words for the status page.
    pub fn why(self, origin: Origin) -> String {
        let peers = |n: usize| {
            let more = if n >= MAX_COUNTED_PEERS {
                "at least "
            } else {
                ""
            };
            let s = if n == 1 { "" } else { "s" };
            format!("{more}{n} peer{s}")
        };
        match (self, origin) {
            (Reach::ThisHostOnly, _) => {
                "loopback: reaches this machine only; given only to peers on it".into()
            }
            (Reach::ThisLinkOnly, _) => "link-local: reaches this link only; not passed on".into(),
            (Reach::Unconfirmed, _) => {
                "listening on a network interface; no peer on another host has connected to it yet"
                    .into()
            }
            (Reach::Confirmed { peers: n }, Origin::Listen) => {
                let hosts = if n == 1 {
                    "another host"
                } else {
                    "other hosts"
                };
                format!("confirmed: {} on {hosts} connected to it", peers(n))
            }
            (Reach::Confirmed { peers: n }, Origin::Observed) => {
                format!("confirmed: {} saw this node at it", peers(n))
            }
            (Reach::Candidate { peers: n }, _) => format!(
                "observed by {}, not confirmed (needs {CONFIRMING_OBSERVERS}): not advertised",
                peers(n)
            ),
            (Reach::AwaitingDialBack { peers: n }, _) => format!(
                "observed by {}, unconfirmed: not advertised until a peer dials back to it \
                 (AutoNAT)",
                peers(n)
            ),
            (Reach::DialedBack, _) => {
                "confirmed: a peer dialed back to it and reached this node (AutoNAT)".into()
            }
            (Reach::DialBackFailed, _) => "unconfirmed: a peer's dial-back to it failed (behind a \
                 NAT or firewall): not advertised"
                .into(),
            (Reach::Relayed, _) => "through a relay that holds a reservation for this node: \
                 advertised; hole punching makes connections through it direct"
                .into(),
        }
    }
}

/// One of our addresses with what we believe of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnAddr {
    /// The address.
    pub addr: Multiaddr,
    /// Listened on, or observed.
    pub origin: Origin,
    /// What we believe of it.
    pub reach: Reach,
}

/// Our addresses and the peers that confirm them: listen addresses as the
/// transport reports them, observed ones as peers report them. Pure: the
/// overlay's event loop feeds it, generic over the peer id for tests.
#[derive(Clone, Debug)]
pub struct OwnAddrs<P> {
    /// Listen addresses, with the peers that connected to us at each.
    listen: BTreeMap<Multiaddr, BTreeSet<P>>,
    /// Addresses peers saw us at that we do not listen on, with who.
    observed: BTreeMap<Multiaddr, BTreeSet<P>>,
    /// Whether a dial-back (AutoNAT) confirms observed addresses, rather
    /// than [`CONFIRMING_OBSERVERS`] peers' word.
    autonat: bool,
    /// Addresses a dial-back reached us at (at most [`MAX_OBSERVED`] plus
    /// the listen addresses).
    dialed_back: BTreeSet<Multiaddr>,
    /// Observed addresses a dial-back failed to reach us at.
    dial_back_failed: BTreeSet<Multiaddr>,
}

impl<P> Default for OwnAddrs<P> {
    /// Without AutoNAT.
    fn default() -> Self {
        OwnAddrs {
            listen: BTreeMap::new(),
            observed: BTreeMap::new(),
            autonat: false,
            dialed_back: BTreeSet::new(),
            dial_back_failed: BTreeSet::new(),
        }
    }
}

/// Whether `addr` goes through a relay (`.../p2p-circuit`).
pub fn is_relayed(addr: &Multiaddr) -> bool {
    addr.iter().any(|p| matches!(p, Protocol::P2pCircuit))
}

impl<P: Ord + Clone> OwnAddrs<P> {
    /// Our addresses, observed ones confirmed by a dial-back (AutoNAT) if
    /// `autonat`, else by [`CONFIRMING_OBSERVERS`] peers.
    pub fn new(autonat: bool) -> Self {
        OwnAddrs {
            autonat,
            ..OwnAddrs::default()
        }
    }

    /// We listen on `addr` now.
    pub fn listening(&mut self, addr: Multiaddr) {
        self.observed.remove(&addr);
        self.listen.entry(addr).or_default();
    }

    /// We no longer listen on `addr`.
    pub fn expired(&mut self, addr: &Multiaddr) {
        self.listen.remove(addr);
        self.dialed_back.remove(addr);
    }

    /// A peer dialed back to `addr` and reached us (AutoNAT): it is
    /// reachable, and advertised. Only addresses of network scope count
    /// (AutoNAT would confirm a loopback address over loopback); returns
    /// whether this one did.
    pub fn dialed_back(&mut self, addr: &Multiaddr) -> bool {
        if scope(addr) != Some(Scope::Network) || is_relayed(addr) {
            return false;
        }
        self.dial_back_failed.remove(addr);
        if !self.listen.contains_key(addr) && !self.observed.contains_key(addr) {
            if self.observed.len() >= MAX_OBSERVED {
                return false;
            }
            self.observed.insert(addr.clone(), BTreeSet::new());
        }
        self.dialed_back.insert(addr.clone());
        true
    }

    /// A peer's dial-back to `addr` failed (or the address stopped being
    /// reachable).
    pub fn dial_back_failed(&mut self, addr: &Multiaddr) {
        self.dialed_back.remove(addr);
        if self.observed.contains_key(addr) {
            self.dial_back_failed.insert(addr.clone());
        }
    }

    /// Whether others can reach us without a relay: a dial-back confirmed
    /// an address of ours, or peers on other hosts connected to us at a
    /// network listen address and none saw us at an address that is not
    /// our interfaces' (no NAT between us and them). The latter is what a
    /// node that only ever accepts connections (a bootstrap node, which
    /// AutoNAT cannot test: it asks only peers it dialed) has to go by.
    pub fn reachable(&self) -> bool {
        !self.dialed_back.is_empty() || !self.reached_listen().is_empty()
    }

    /// Listen addresses of network scope that peers on other hosts
    /// connected to, while none saw us behind a NAT: what a node that only
    /// accepts connections knows reachable (see [`reachable`](Self::reachable)).
    pub fn reached_listen(&self) -> Vec<Multiaddr> {
        if self.behind_nat() {
            return Vec::new();
        }
        self.listen
            .iter()
            .filter(|(addr, peers)| {
                !peers.is_empty() && scope(addr) == Some(Scope::Network) && !is_relayed(addr)
            })
            .map(|(addr, _)| addr.clone())
            .collect()
    }

    /// Whether peers on other hosts saw us at an address that is none of
    /// our interfaces' (as behind a NAT), not confirmed by a dial-back.
    pub fn behind_nat(&self) -> bool {
        self.observed
            .keys()
            .any(|addr| !self.dialed_back.contains(addr))
    }

    /// `peer`, whose connection comes from `via`, connected to us at our
    /// listen address `local`. Only a peer on another host confirms an
    /// address (one on this machine would reach us at any).
    pub fn reached(&mut self, local: &Multiaddr, peer: &P, via: &Multiaddr) {
        if scope(via) != Some(Scope::Network) {
            return;
        }
        if let Some(peers) = self.listen.get_mut(local)
            && peers.len() < MAX_COUNTED_PEERS
        {
            peers.insert(peer.clone());
        }
    }

    /// `peer`, whose connection comes from `via`, says it sees us at
    /// `observed`. Returns the address if this made an observed address
    /// confirmed (to be advertised from now on).
    pub fn observed(
        &mut self,
        observed: &Multiaddr,
        peer: &P,
        via: &Multiaddr,
    ) -> Option<Multiaddr> {
        if scope(via) != Some(Scope::Network) || scope(observed) != Some(Scope::Network) {
            return None;
        }
        let addr = translate(observed, self.listen.keys())?;
        if self.listen.contains_key(&addr) {
            // One of our interfaces': nothing to learn (a connection in
            // confirms it).
            return None;
        }
        if !self.observed.contains_key(&addr) && self.observed.len() >= MAX_OBSERVED {
            // Make room: forget the address fewest peers saw (the first
            // such, in address order).
            let weakest = self
                .observed
                .iter()
                .min_by_key(|(_, peers)| peers.len())
                .map(|(a, _)| a.clone())?;
            if self.observed[&weakest].len() >= CONFIRMING_OBSERVERS {
                return None; // Every slot holds a confirmed address.
            }
            self.observed.remove(&weakest);
            self.dial_back_failed.remove(&weakest);
        }
        let peers = self.observed.entry(addr.clone()).or_default();
        let before = peers.len();
        if before < MAX_COUNTED_PEERS {
            peers.insert(peer.clone());
        }
        (!self.autonat && before < CONFIRMING_OBSERVERS && peers.len() >= CONFIRMING_OBSERVERS)
            .then_some(addr)
    }

    /// Every address with what we believe of it: listen addresses first.
    pub fn report(&self) -> Vec<OwnAddr> {
        let listen = self.listen.iter().map(|(addr, peers)| OwnAddr {
            addr: addr.clone(),
            origin: Origin::Listen,
            reach: match scope(addr) {
                _ if is_relayed(addr) => Reach::Relayed,
                Some(Scope::Host) => Reach::ThisHostOnly,
                Some(Scope::Link) => Reach::ThisLinkOnly,
                _ if !peers.is_empty() => Reach::Confirmed { peers: peers.len() },
                _ if self.dialed_back.contains(addr) => Reach::DialedBack,
                _ => Reach::Unconfirmed,
            },
        });
        let observed = self.observed.iter().map(|(addr, peers)| OwnAddr {
            addr: addr.clone(),
            origin: Origin::Observed,
            reach: if self.dialed_back.contains(addr) {
                Reach::DialedBack
            } else if self.dial_back_failed.contains(addr) {
                Reach::DialBackFailed
            } else if self.autonat {
                Reach::AwaitingDialBack { peers: peers.len() }
            } else if peers.len() >= CONFIRMING_OBSERVERS {
                Reach::Confirmed { peers: peers.len() }
            } else {
                Reach::Candidate { peers: peers.len() }
            },
        });
        listen.chain(observed).collect()
    }
}

/// The address peers would reach us at, from an address a peer `observed`
/// us at: its IP address with the TCP port we listen on (a connection we
/// dialed shows our outgoing port, not the listening one). `None` if the
/// observed address is not IP and TCP, or we listen on no TCP port of its
/// IP version.
pub fn translate<'a>(
    observed: &Multiaddr,
    listen: impl IntoIterator<Item = &'a Multiaddr>,
) -> Option<Multiaddr> {
    let mut parts = observed.iter();
    let ip = parts.next()?;
    let v4 = match ip {
        Protocol::Ip4(_) => true,
        Protocol::Ip6(_) => false,
        _ => return None,
    };
    if !matches!(parts.next(), Some(Protocol::Tcp(_))) {
        return None;
    }
    let port = listen.into_iter().find_map(|addr| {
        let mut parts = addr.iter();
        let same_version = matches!(
            (parts.next(), v4),
            (Some(Protocol::Ip4(_)), true) | (Some(Protocol::Ip6(_)), false)
        );
        match parts.next() {
            Some(Protocol::Tcp(port)) if same_version => Some(port),
            _ => None,
        }
    })?;
    Some(Multiaddr::empty().with(ip).with(Protocol::Tcp(port)))
}

/// Where this node can be reached from, by what its own addresses show
/// (for the scheduler's offers: a native job's ranks go only to nodes that
/// reach each other). Public: a peer on another host connected to a
/// listen address of ours, or dialed back to one. Behind a NAT: not
/// public, and peers saw us at an address none of our interfaces has that
/// no dial-back confirmed (the NAT's outside address, which names the
/// NAT). Anything else (loopback only, no peer on another host yet) is
/// unknown.
pub fn reachability(own: &[OwnAddr]) -> zorilla_core::resources::Reachability {
    use zorilla_core::resources::Reachability;
    let direct = |a: &&OwnAddr| a.reach != Reach::Relayed && !is_relayed(&a.addr);
    let public = own.iter().filter(direct).any(|a| {
        matches!(
            (a.reach, a.origin),
            (Reach::DialedBack, _) | (Reach::Confirmed { .. }, Origin::Listen)
        )
    });
    if public {
        return Reachability::Public;
    }
    own.iter()
        .filter(direct)
        .filter(|a| {
            a.origin == Origin::Observed
                && matches!(
                    a.reach,
                    Reach::DialBackFailed
                        | Reach::AwaitingDialBack { .. }
                        | Reach::Candidate { .. }
                )
        })
        .find_map(|a| ip_of(&a.addr))
        .map_or(Reachability::Unknown, Reachability::BehindNat)
}

/// The IP address an address starts with, if it does.
fn ip_of(addr: &Multiaddr) -> Option<IpAddr> {
    match addr.iter().next()? {
        Protocol::Ip4(ip) => Some(IpAddr::V4(ip)),
        Protocol::Ip6(ip) => Some(IpAddr::V6(ip)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Multiaddr {
        s.parse().unwrap()
    }

    #[test]
    fn scopes() {
        assert_eq!(scope(&a("/ip4/127.0.0.1/tcp/1")), Some(Scope::Host));
        assert_eq!(scope(&a("/ip4/127.8.9.1/tcp/1")), Some(Scope::Host));
        assert_eq!(scope(&a("/ip6/::1/tcp/1")), Some(Scope::Host));
        assert_eq!(scope(&a("/ip6/::ffff:127.0.0.1/tcp/1")), Some(Scope::Host));
        assert_eq!(scope(&a("/ip4/169.254.3.4/tcp/1")), Some(Scope::Link));
        assert_eq!(scope(&a("/ip6/fe80::1/tcp/1")), Some(Scope::Link));
        assert_eq!(scope(&a("/ip4/10.1.2.3/tcp/1")), Some(Scope::Network));
        assert_eq!(scope(&a("/ip4/192.0.2.7/tcp/1")), Some(Scope::Network));
        assert_eq!(scope(&a("/ip6/2001:db8::1/tcp/1")), Some(Scope::Network));
        assert_eq!(scope(&a("/dns4/example.org/tcp/1")), Some(Scope::Network));
        assert_eq!(scope(&a("/tcp/1")), None);
    }

    /// What a node's own addresses say of where it can be reached from.
    #[test]
    fn reachability_follows_the_addresses_peers_confirmed_or_failed() {
        use zorilla_core::resources::Reachability;
        let own = |addr: &str, origin, reach| OwnAddr {
            addr: a(addr),
            origin,
            reach,
        };
        let lo = own("/ip4/127.0.0.1/tcp/1", Origin::Listen, Reach::ThisHostOnly);
        let lan = own("/ip4/10.0.0.5/tcp/1", Origin::Listen, Reach::Unconfirmed);
        // A grid on one machine, or no peer on another host yet: unknown.
        assert_eq!(
            reachability(std::slice::from_ref(&lo)),
            Reachability::Unknown
        );
        assert_eq!(
            reachability(&[lo.clone(), lan.clone()]),
            Reachability::Unknown
        );
        // Peers on other hosts connected to a listen address: public.
        let confirmed = own(
            "/ip4/10.0.0.5/tcp/1",
            Origin::Listen,
            Reach::Confirmed { peers: 2 },
        );
        assert_eq!(reachability(&[lo.clone(), confirmed]), Reachability::Public);
        let dialed = own(
            "/ip4/198.51.100.4/tcp/1",
            Origin::Observed,
            Reach::DialedBack,
        );
        assert_eq!(reachability(&[lan.clone(), dialed]), Reachability::Public);
        // Seen at a NAT's address that nobody could dial back to, with a
        // relayed address: behind that NAT.
        let relayed = own(
            "/ip4/198.51.100.9/tcp/4001/p2p/12D3KooWNTiS4dgqGsnWQ679cWV2qELwKgz871TdA71nuCT9i64d/p2p-circuit",
            Origin::Observed,
            Reach::Relayed,
        );
        for reach in [Reach::DialBackFailed, Reach::AwaitingDialBack { peers: 1 }] {
            let nat = own("/ip4/203.0.113.7/tcp/5555", Origin::Observed, reach);
            assert_eq!(
                reachability(&[lan.clone(), relayed.clone(), nat]),
                Reachability::BehindNat(std::net::IpAddr::from([203, 0, 113, 7]))
            );
        }
        // A relayed address alone names no NAT.
        assert_eq!(reachability(&[lan, relayed]), Reachability::Unknown);
    }

    /// The case that was found: a node on another host got a peer's
    /// loopback address in peer exchange and dialed itself.
    #[test]
    fn loopback_and_link_addresses_go_only_where_they_hold() {
        let lo = a("/ip4/127.0.0.1/tcp/4001");
        let link = a("/ip4/169.254.1.1/tcp/4001");
        let lan = a("/ip4/10.0.0.5/tcp/4001");
        let from_here = a("/ip4/127.0.0.1/tcp/50000");
        let from_link = a("/ip4/169.254.9.9/tcp/50000");
        let from_lan = a("/ip4/10.0.0.9/tcp/50000");
        // A peer on this machine may use all of them.
        assert!(reachable_from(&lo, Some(&from_here)));
        assert!(reachable_from(&lan, Some(&from_here)));
        // A peer on another host: not our loopback, nor a link address
        // unless it is on that link itself.
        assert!(!reachable_from(&lo, Some(&from_lan)));
        assert!(!reachable_from(&link, Some(&from_lan)));
        assert!(reachable_from(&link, Some(&from_link)));
        assert!(reachable_from(&lan, Some(&from_lan)));
        // Where the peer is not known, only what reaches anywhere.
        assert!(!reachable_from(&lo, None));
        assert!(reachable_from(&lan, None));
    }

    /// Peer exchange passes a loopback address only between nodes of one
    /// machine, and a link-local one never (the asker's link need not be
    /// the peer's).
    #[test]
    fn passed_on_only_where_it_holds() {
        let lo = a("/ip4/127.0.0.1/tcp/4001");
        let link = a("/ip4/169.254.1.1/tcp/4001");
        let link6 = a("/ip6/fe80::1/tcp/4001");
        let lan = a("/ip4/10.0.0.5/tcp/4001");
        let from_here = a("/ip4/127.0.0.1/tcp/50000");
        let from_link = a("/ip4/169.254.9.9/tcp/50000");
        let from_lan = a("/ip4/10.0.0.9/tcp/50000");
        assert!(passable_to(&lo, Some(&from_here)));
        assert!(!passable_to(&lo, Some(&from_lan)));
        assert!(!passable_to(&lo, Some(&from_link)));
        assert!(!passable_to(&lo, None));
        for via in [Some(&from_here), Some(&from_link), Some(&from_lan), None] {
            assert!(!passable_to(&link, via));
            assert!(!passable_to(&link6, via));
            assert!(passable_to(&lan, via));
        }
        assert!(!passable_to(&a("/tcp/1"), Some(&from_lan)));
    }

    #[test]
    fn an_observed_address_gets_our_listen_port() {
        let listen = [a("/ip4/127.0.0.1/tcp/4001"), a("/ip4/10.0.0.5/tcp/4001")];
        assert_eq!(
            translate(&a("/ip4/192.0.2.9/tcp/53111"), &listen),
            Some(a("/ip4/192.0.2.9/tcp/4001"))
        );
        // No IPv6 listener: nothing to advertise for an IPv6 observation.
        assert_eq!(translate(&a("/ip6/2001:db8::1/tcp/53111"), &listen), None);
        assert_eq!(translate(&a("/ip4/192.0.2.9/udp/53111"), &listen), None);
        assert_eq!(translate(&a("/dns4/example.org/tcp/1"), &listen), None);
        assert_eq!(translate(&a("/ip4/192.0.2.9/tcp/1"), &[]), None);
    }

    /// The operator's node listening on 0.0.0.0: loopback and link-local
    /// addresses are shown as such; a network address is unconfirmed until
    /// a peer on another host connects to it, then confirmed by how many.
    #[test]
    fn listen_addresses_by_kind() {
        let mut own = OwnAddrs::<u32>::default();
        let lo = a("/ip4/127.0.0.1/tcp/4001");
        let lan = a("/ip4/10.77.1.1/tcp/4001");
        let link = a("/ip4/169.254.3.3/tcp/4001");
        for addr in [&lo, &lan, &link] {
            own.listening(addr.clone());
        }
        let reach = |own: &OwnAddrs<u32>, addr: &Multiaddr| {
            own.report()
                .into_iter()
                .find(|o| &o.addr == addr)
                .map(|o| o.reach)
        };
        assert_eq!(reach(&own, &lo), Some(Reach::ThisHostOnly));
        assert_eq!(reach(&own, &link), Some(Reach::ThisLinkOnly));
        assert_eq!(reach(&own, &lan), Some(Reach::Unconfirmed));
        // A peer on this machine proves nothing about the network.
        own.reached(&lan, &1, &a("/ip4/127.0.0.1/tcp/5000"));
        assert_eq!(reach(&own, &lan), Some(Reach::Unconfirmed));
        for peer in [2, 3, 2] {
            own.reached(&lan, &peer, &a("/ip4/10.77.1.2/tcp/5000"));
        }
        assert_eq!(reach(&own, &lan), Some(Reach::Confirmed { peers: 2 }));
        // Counting stops at the bound.
        for peer in 0..100 {
            own.reached(&lan, &peer, &a("/ip4/10.77.1.2/tcp/5000"));
        }
        assert_eq!(
            reach(&own, &lan),
            Some(Reach::Confirmed {
                peers: MAX_COUNTED_PEERS
            })
        );
        assert!(
            Reach::Confirmed { peers: 16 }
                .why(Origin::Listen)
                .contains("at least 16")
        );
        own.expired(&lan);
        assert_eq!(reach(&own, &lan), None);
        // Connections to an address we do not listen on are not counted.
        own.reached(&lan, &7, &a("/ip4/10.77.1.2/tcp/5000"));
        assert_eq!(reach(&own, &lan), None);
        assert!(Reach::Unconfirmed.reachable_from_other_hosts());
        assert!(!Reach::ThisHostOnly.reachable_from_other_hosts());
        assert!(!Reach::ThisLinkOnly.reachable_from_other_hosts());
        assert!(!Reach::Candidate { peers: 1 }.reachable_from_other_hosts());
    }

    /// An address peers see us at behind a NAT: one peer's word is a
    /// candidate, two different peers' confirm it (once); observations of
    /// loopback, over loopback, or of our own interfaces teach nothing.
    #[test]
    fn observed_addresses_are_candidates_until_two_peers_confirm() {
        let mut own = OwnAddrs::<u32>::default();
        own.listening(a("/ip4/10.0.0.5/tcp/4001"));
        own.listening(a("/ip4/127.0.0.1/tcp/4001"));
        let public = a("/ip4/198.51.100.7/tcp/4001");
        let seen = a("/ip4/198.51.100.7/tcp/61000");
        let far = a("/ip4/203.0.113.1/tcp/4001");
        let local = a("/ip4/127.0.0.1/tcp/5000");
        assert_eq!(own.observed(&seen, &1, &local), None, "over loopback");
        assert_eq!(own.observed(&a("/ip4/127.0.0.1/tcp/61000"), &1, &far), None);
        assert_eq!(own.observed(&a("/ip4/10.0.0.5/tcp/61000"), &1, &far), None);
        assert_eq!(own.report().len(), 2, "{:?}", own.report());
        assert_eq!(own.observed(&seen, &1, &far), None);
        assert_eq!(own.observed(&seen, &1, &far), None, "the same peer again");
        let candidate = own.report().into_iter().find(|o| o.addr == public).unwrap();
        assert_eq!(candidate.origin, Origin::Observed);
        assert_eq!(candidate.reach, Reach::Candidate { peers: 1 });
        assert!(
            candidate
                .reach
                .why(Origin::Observed)
                .contains("not advertised")
        );
        assert_eq!(own.observed(&seen, &2, &far), Some(public.clone()));
        assert_eq!(own.observed(&seen, &3, &far), None, "confirmed once only");
        let confirmed = own.report().into_iter().find(|o| o.addr == public).unwrap();
        assert_eq!(confirmed.reach, Reach::Confirmed { peers: 3 });
    }

    /// With AutoNAT, an observed address is advertised only once a peer
    /// dialed back to it, however many peers saw us there; a failed
    /// dial-back says so; loopback confirmations do not count.
    #[test]
    fn with_autonat_a_dial_back_confirms_an_observed_address() {
        let mut own = OwnAddrs::<u32>::new(true);
        own.listening(a("/ip4/10.0.0.5/tcp/4001"));
        let far = a("/ip4/203.0.113.1/tcp/4001");
        let seen = a("/ip4/198.51.100.7/tcp/61000");
        let public = a("/ip4/198.51.100.7/tcp/4001");
        for peer in 1..=3 {
            assert_eq!(own.observed(&seen, &peer, &far), None);
        }
        let reach = |own: &OwnAddrs<u32>| {
            own.report()
                .into_iter()
                .find(|o| o.addr == public)
                .unwrap()
                .reach
        };
        assert_eq!(reach(&own), Reach::AwaitingDialBack { peers: 3 });
        assert!(!reach(&own).reachable_from_other_hosts());
        assert!(own.behind_nat() && !own.reachable());
        // Peers connecting at the listen address do not outweigh them.
        own.reached(&a("/ip4/10.0.0.5/tcp/4001"), &9, &far);
        assert!(!own.reachable());
        own.dial_back_failed(&public);
        assert_eq!(reach(&own), Reach::DialBackFailed);
        assert!(reach(&own).why(Origin::Observed).contains("NAT"));
        assert!(!own.dialed_back(&a("/ip4/127.0.0.1/tcp/4001")));
        assert!(!own.reachable());
        assert!(own.dialed_back(&public));
        assert_eq!(reach(&own), Reach::DialedBack);
        assert!(own.reachable() && !own.behind_nat());
        let relayed = a(
            "/ip4/203.0.113.1/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit",
        );
        own.listening(relayed.clone());
        let shown = own
            .report()
            .into_iter()
            .find(|o| o.addr == relayed)
            .unwrap();
        assert_eq!(shown.reach, Reach::Relayed);
        assert!(shown.reach.reachable_from_other_hosts());
    }

    /// A node that only accepts connections (AutoNAT asks only peers it
    /// dialed): reachable once peers on other hosts connected to it, as
    /// long as none saw it behind a NAT; loopback connections prove
    /// nothing.
    #[test]
    fn a_node_peers_connect_to_is_reachable() {
        let mut own = OwnAddrs::<u32>::new(true);
        let lan = a("/ip4/10.77.200.1/tcp/4001");
        own.listening(lan.clone());
        own.listening(a("/ip4/127.0.0.1/tcp/4001"));
        assert!(!own.reachable());
        own.reached(
            &a("/ip4/127.0.0.1/tcp/4001"),
            &1,
            &a("/ip4/127.0.0.1/tcp/5000"),
        );
        assert!(!own.reachable());
        own.reached(&lan, &2, &a("/ip4/10.77.200.101/tcp/5000"));
        assert!(own.reachable() && !own.behind_nat());
        // Seen at its own interface's address: no NAT.
        own.observed(
            &a("/ip4/10.77.200.1/tcp/4001"),
            &2,
            &a("/ip4/10.77.200.101/tcp/5000"),
        );
        assert!(own.reachable());
    }

    /// Peers that report made-up addresses fill at most [`MAX_OBSERVED`]
    /// slots, replace only unconfirmed ones, and never a confirmed one.
    #[test]
    fn observed_addresses_are_bounded() {
        let mut own = OwnAddrs::<u32>::default();
        own.listening(a("/ip4/10.0.0.5/tcp/4001"));
        let far = a("/ip4/203.0.113.1/tcp/4001");
        let real = a("/ip4/198.51.100.7/tcp/61000");
        own.observed(&real, &1, &far);
        assert!(own.observed(&real, &2, &far).is_some());
        for i in 0..1000u32 {
            let made_up = a(&format!("/ip4/192.0.2.{}/tcp/1", i % 250));
            own.observed(&made_up, &(100 + i), &far);
            assert!(own.report().len() <= 1 + MAX_OBSERVED);
        }
        assert!(
            own.report()
                .iter()
                .any(|o| o.addr == a("/ip4/198.51.100.7/tcp/4001")
                    && o.reach == Reach::Confirmed { peers: 2 })
        );
    }
}

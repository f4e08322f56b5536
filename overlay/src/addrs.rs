//! Which addresses of a peer are true for whom.
//!
//! A node listening on `0.0.0.0` tells its peers (identify) every address
//! of every interface it has, its loopback address among them; passed on in
//! peer exchange, `127.0.0.1:4001` would make a node on another host dial
//! itself. So every address is kept and passed on only where it holds:
//!
//! - a **host** address (loopback) reaches only the same machine: it is
//!   kept for, and given to, only peers whose connection to us is over
//!   loopback;
//! - a **link** address (IPv4 169.254/16, IPv6 fe80::/10) reaches only the
//!   same network link: only for peers connected to us over such an
//!   address;
//! - any other address (private ranges included, and DNS names) may reach
//!   any peer, and is kept and passed on (whether it really does is what
//!   dialing finds out).
//!
//! Where a peer's connection comes from is the remote address libp2p
//! reports for it, so a peer cannot claim to be on our machine.

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
}

//! Closed grids: members show credentials on connect; a node without a
//! valid one never reaches another protocol, over TCP, QUIC or a relay;
//! invitations, expiry and revocation.

use std::path::PathBuf;

use zorilla_overlay::identity;
use zorilla_overlay::membership::credential::unix_now;
use zorilla_overlay::membership::{
    Credential, GridConfig, GridKey, RevocationTarget, check_own_credential,
};

use super::*;

/// How long a peer has to show its credential in these tests.
const TIMEOUT: Duration = Duration::from_secs(2);
const HOUR: u64 = 3600;

/// A grid key and a directory for the nodes' identities.
struct Founder {
    key: GridKey,
    dir: tempfile::TempDir,
}

impl Founder {
    fn new() -> Founder {
        Founder {
            key: GridKey::generate(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A node's state directory and identity, made now.
    fn identity(&self, name: &str) -> (PathBuf, libp2p::identity::Keypair) {
        let dir = self.dir.path().join(name);
        let key = identity::load_or_create(&dir).unwrap();
        (dir, key)
    }

    fn grid(&self, credential: Credential) -> GridConfig {
        GridConfig {
            timeout: TIMEOUT,
            ..GridConfig::new(self.key.public(), credential)
        }
    }

    /// The configuration of member `name`, its credential signed by the
    /// grid key.
    fn member(&self, net: &str, name: &str, may_invite: bool) -> OverlayConfig {
        let (dir, key) = self.identity(name);
        let credential = self
            .key
            .issue(key.public().to_peer_id(), unix_now() + HOUR, may_invite);
        self.config_with(net, dir, credential)
    }

    fn config_with(&self, net: &str, dir: PathBuf, credential: Credential) -> OverlayConfig {
        OverlayConfig {
            state_dir: Some(dir),
            grid: Some(self.grid(credential)),
            ..config(net, 2, 1)
        }
    }
}

/// Starts `n` members; all but the first know only the first.
async fn members(founder: &Founder, net: &str, n: usize) -> Vec<Node> {
    start_grid(n, |i| founder.member(net, &format!("m{i}"), false)).await
}

async fn stats(node: &Node) -> zorilla_overlay::OverlayStats {
    node.handle.stats().await.unwrap()
}

/// Waits until `node` has refused at least `n` connections for want of a
/// valid credential.
async fn refused(node: &Node, n: u64) {
    eventually("the peer is refused", Duration::from_secs(20), || async {
        let refused = stats(node).await.membership_refused;
        if refused >= n {
            Ok(())
        } else {
            Err(format!("{refused} refused"))
        }
    })
    .await;
}

/// Nothing of the grid reached `outsider`, and no member saw it.
fn never_met(grid: &[Node], outsider: &Node) {
    let seen = outsider.seen.lock().unwrap();
    assert!(seen.connected.is_empty(), "{:?}", seen.connected);
    assert!(seen.floods.is_empty(), "{:?}", seen.floods);
    assert!(seen.requests.is_empty(), "{:?}", seen.requests);
    for node in grid {
        let seen = node.seen.lock().unwrap();
        assert!(!seen.connected.contains(&outsider.peer));
        assert!(seen.requests.iter().all(|(p, _)| *p != outsider.peer));
    }
}

/// Floods from member 0 and waits until every member has it.
async fn flood_reaches(grid: &[Node], seq: u32) -> FloodId {
    let id = FloodId {
        job: JobId(4242),
        seq,
    };
    grid[0]
        .handle
        .flood(id, header(seq, 4, None), b"advert".to_vec())
        .await
        .unwrap();
    eventually(
        "the flood reaches every member",
        Duration::from_secs(20),
        || async {
            let missing = grid[1..]
                .iter()
                .filter(|n| n.deliveries(id).is_empty())
                .count();
            if missing == 0 {
                Ok(())
            } else {
                Err(format!("{missing} members without it"))
            }
        },
    )
    .await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_grid_admits_its_members_and_refuses_a_stranger_over_tcp() {
    let net = network("closed-tcp");
    let founder = Founder::new();
    let grid = members(&founder, &net, 3).await;
    let refs: Vec<&Node> = grid.iter().collect();
    eventually(
        "the members form a grid",
        Duration::from_secs(30),
        || async { full_and_connected(&refs, 2).await.map(|_| ()) },
    )
    .await;

    // A node of the same network without a credential, and one with a
    // credential of another grid, both told of member 0.
    let stranger = Node::start(OverlayConfig {
        bootstrap: vec![grid[0].addr.clone()],
        ..config(&net, 2, 1)
    })
    .await;
    let other_founder = Founder::new();
    let foreign = Node::start(OverlayConfig {
        bootstrap: vec![grid[0].addr.clone()],
        ..other_founder.member(&net, "foreign", false)
    })
    .await;
    // A raw peer that speaks flood and rpc and tries both at once.
    let mut raw = RawPeer::start(&net);
    raw.dial(grid[0].addr.clone()).await.unwrap();
    raw.expect(RawEvent::Connected(grid[0].peer), Duration::from_secs(10))
        .await;
    raw.send(Protocol::Rpc, grid[0].peer, &[0x81, 0x00]).await;
    raw.send(Protocol::Flood, grid[0].peer, &[0xf6]).await;
    raw.expect(
        RawEvent::Disconnected(grid[0].peer),
        Duration::from_secs(20),
    )
    .await;
    refused(&grid[0], 3).await;

    flood_reaches(&grid, 1).await;
    never_met(&grid, &stranger);
    never_met(&grid, &foreign);
    let answered_raw = grid[0]
        .seen
        .lock()
        .unwrap()
        .requests
        .iter()
        .any(|(p, _)| *p == raw.peer);
    assert!(!answered_raw);
    // Counted as misbehaviour (the keeper's offences).
    assert!(stats(&grid[0]).await.misbehaviour >= 3);
    assert!(stats(&grid[0]).await.members_admitted >= 2);
}

#[cfg(feature = "quic")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_quic_a_member_joins_and_a_stranger_is_refused() {
    let net = network("closed-quic");
    let founder = Founder::new();
    let quic = |c: OverlayConfig| OverlayConfig { quic: true, ..c };
    let first = Node::start(quic(founder.member(&net, "q0", false))).await;
    let addrs = first.handle.listen_addrs().await.unwrap();
    let quic_addr = addrs
        .iter()
        .find(|a| {
            a.iter()
                .any(|p| matches!(p, libp2p::multiaddr::Protocol::QuicV1))
        })
        .expect("a QUIC address")
        .clone();
    let member = Node::start(quic(OverlayConfig {
        bootstrap: vec![quic_addr.clone()],
        ..founder.member(&net, "q1", false)
    }))
    .await;
    eventually(
        "the member joins over QUIC",
        Duration::from_secs(20),
        || async {
            if member.seen.lock().unwrap().connected.contains(&first.peer) {
                Ok(())
            } else {
                Err("not yet".into())
            }
        },
    )
    .await;
    let stranger = Node::start(quic(OverlayConfig {
        bootstrap: vec![quic_addr],
        ..config(&net, 2, 1)
    }))
    .await;
    refused(&first, 1).await;
    let grid = vec![first, member];
    let refs: Vec<&Node> = grid.iter().collect();
    eventually(
        "the members are neighbours",
        Duration::from_secs(30),
        || async { full_and_connected(&refs, 1).await.map(|_| ()) },
    )
    .await;
    flood_reaches(&grid, 1).await;
    never_met(&grid, &stranger);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_reach_a_member_through_a_relay() {
    let net = network("closed-relay");
    let founder = Founder::new();
    let grid = members(&founder, &net, 2).await;
    let refs: Vec<&Node> = grid.iter().collect();
    eventually(
        "the members form a grid",
        Duration::from_secs(30),
        || async { full_and_connected(&refs, 1).await.map(|_| ()) },
    )
    .await;
    // Member 1 through member 0's relay.
    let circuit: Multiaddr = format!(
        "{}/p2p/{}/p2p-circuit/p2p/{}",
        grid[0].addr, grid[0].peer, grid[1].peer
    )
    .parse()
    .unwrap();
    let stranger = Node::start(config(&net, 2, 1)).await;
    stranger.handle.dial(circuit).await.unwrap();
    // It reached the relay (a connection was set up), and no connection
    // of it stays: the relay let it use no protocol, the hop protocol
    // included, so no circuit was made.
    eventually(
        "the relay turned the stranger away",
        Duration::from_secs(20),
        || async {
            let s = stats(&stranger).await;
            if s.connections >= 1 && s.open_connections == 0 {
                Ok(())
            } else {
                Err(format!(
                    "{} connections, {} open",
                    s.connections, s.open_connections
                ))
            }
        },
    )
    .await;
    flood_reaches(&grid, 1).await;
    never_met(&grid, &stranger);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invited_member_joins_but_not_one_invited_by_a_member_who_may_not_invite() {
    let net = network("closed-invite");
    let founder = Founder::new();
    let (dir0, key0) = founder.identity("inviter");
    let inviter_credential = founder
        .key
        .issue(key0.public().to_peer_id(), unix_now() + HOUR, true);
    let inviter = Node::start(founder.config_with(&net, dir0, inviter_credential.clone())).await;
    let (dir1, key1) = founder.identity("plain");
    let plain_credential = founder
        .key
        .issue(key1.public().to_peer_id(), unix_now() + HOUR, false);
    let plain = Node::start(OverlayConfig {
        bootstrap: vec![inviter.addr.clone()],
        ..founder.config_with(&net, dir1, plain_credential.clone())
    })
    .await;

    // Invited by the inviter: joins, through the inviter and the other.
    let (dir2, key2) = founder.identity("invited");
    let invited_credential = inviter_credential
        .invite(&key0, key2.public().to_peer_id(), unix_now() + HOUR)
        .unwrap();
    let invited = Node::start(OverlayConfig {
        bootstrap: vec![plain.addr.clone()],
        ..founder.config_with(&net, dir2, invited_credential)
    })
    .await;
    let grid = vec![inviter, plain, invited];
    let refs: Vec<&Node> = grid.iter().collect();
    eventually("the three form a grid", Duration::from_secs(30), || async {
        full_and_connected(&refs, 2).await.map(|_| ())
    })
    .await;

    // A member without may-invite cannot make a credential, and one made
    // by hand with its key (a credential is not secret) is refused.
    let (dir3, key3) = founder.identity("gatecrasher");
    assert!(
        plain_credential
            .invite(&key1, key3.public().to_peer_id(), unix_now() + HOUR)
            .is_err()
    );
    let forged =
        plain_credential.invite_unchecked(&key1, key3.public().to_peer_id(), unix_now() + HOUR);
    let gatecrasher = Node::start(OverlayConfig {
        bootstrap: vec![grid[0].addr.clone()],
        ..founder.config_with(&net, dir3, forged)
    })
    .await;
    refused(&grid[0], 1).await;
    // Showing the inviter's own credential (a credential is no secret)
    // does not help either: it names another peer.
    let (dir4, _) = founder.identity("thief");
    let thief = Node::start(OverlayConfig {
        bootstrap: vec![grid[1].addr.clone()],
        ..founder.config_with(&net, dir4, inviter_credential.clone())
    })
    .await;
    refused(&grid[1], 1).await;
    flood_reaches(&grid, 1).await;
    never_met(&grid, &gatecrasher);
    never_met(&grid, &thief);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_credential_is_refused_at_start_and_cut_off_when_it_expires() {
    let net = network("closed-expiry");
    let founder = Founder::new();
    let grid = members(&founder, &net, 2).await;

    // Already expired: the node's own check says so (zorilla-node
    // refuses to start), and if it runs anyway its peers refuse it.
    let (dir, key) = founder.identity("late");
    let expired = founder
        .key
        .issue(key.public().to_peer_id(), unix_now() - 1, false);
    let grid_config = founder.grid(expired.clone());
    let error = check_own_credential(&grid_config, key.public().to_peer_id(), Some(&dir))
        .expect_err("expired");
    assert!(error.to_string().contains("expired"), "{error}");
    let (old_dir, _) = founder.identity("old");
    let old = founder.key.issue(
        identity::load_or_create(&old_dir)
            .unwrap()
            .public()
            .to_peer_id(),
        unix_now() - 1,
        false,
    );
    let old = Node::start(OverlayConfig {
        bootstrap: vec![grid[0].addr.clone()],
        ..founder.config_with(&net, old_dir, old)
    })
    .await;
    refused(&grid[0], 1).await;
    never_met(&grid, &old);

    // Expiring in a few seconds: it joins, then is cut off and refused.
    let short = founder
        .key
        .issue(key.public().to_peer_id(), unix_now() + 3, false);
    let node = Node::start(OverlayConfig {
        bootstrap: vec![grid[0].addr.clone()],
        ..founder.config_with(&net, dir, short)
    })
    .await;
    eventually("it joins", Duration::from_secs(20), || async {
        if node.seen.lock().unwrap().connected.contains(&grid[0].peer) {
            Ok(())
        } else {
            Err("not yet".into())
        }
    })
    .await;
    eventually(
        "it is cut off once expired",
        Duration::from_secs(20),
        || async {
            let open = stats(&node).await.open_connections;
            let refused: u64 =
                stats(&grid[0]).await.membership_refused + stats(&grid[1]).await.membership_refused;
            if open == 0 && refused >= 2 {
                Ok(())
            } else {
                Err(format!("{open} connections open, {refused} refused"))
            }
        },
    )
    .await;
    let before = stats(&node).await.connections;
    node.handle.dial(grid[1].addr.clone()).await.unwrap();
    refused(&grid[1], 2).await;
    eventually("no connection stays", Duration::from_secs(20), || async {
        let s = stats(&node).await;
        if s.connections > before && s.open_connections == 0 {
            Ok(())
        } else {
            Err(format!("{} open", s.open_connections))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_member_is_cut_off_and_a_node_that_joins_later_learns_it() {
    let net = network("closed-revoke");
    let founder = Founder::new();
    let grid = members(&founder, &net, 4).await;
    let refs: Vec<&Node> = grid.iter().collect();
    eventually(
        "the members form a grid",
        Duration::from_secs(30),
        || async { full_and_connected(&refs, 3).await.map(|_| ()) },
    )
    .await;
    let victim = &grid[3];
    let revocation = founder
        .key
        .revoke(RevocationTarget::Peer(victim.peer), u64::MAX);
    let start = Instant::now();
    assert_eq!(
        grid[0]
            .handle
            .revoke(vec![revocation.to_bytes()])
            .await
            .unwrap(),
        1
    );
    // Flooded: every other member keeps it, and the victim has no
    // connection left.
    eventually("the victim is cut off", Duration::from_secs(10), || async {
        for node in &grid[..3] {
            let s = stats(node).await;
            if s.revocations != 1 {
                return Err(format!("{} keeps {} revocations", node.peer, s.revocations));
            }
        }
        let open = stats(victim).await.open_connections;
        if open == 0 {
            Ok(())
        } else {
            Err(format!("the victim has {open} connections"))
        }
    })
    .await;
    let cut_off = start.elapsed();
    assert!(cut_off < Duration::from_secs(10), "{cut_off:?}");

    // A member that joins later through member 2 learns it, and refuses
    // the victim too.
    let late = Node::start(OverlayConfig {
        bootstrap: vec![grid[2].addr.clone()],
        ..founder.member(&net, "late", false)
    })
    .await;
    eventually(
        "the late member learns the revocation",
        Duration::from_secs(20),
        || async {
            let n = stats(&late).await.revocations;
            if n == 1 {
                Ok(())
            } else {
                Err(format!("{n} revocations"))
            }
        },
    )
    .await;
    victim.handle.dial(late.addr.clone()).await.unwrap();
    refused(&late, 1).await;
    assert!(!late.seen.lock().unwrap().connected.contains(&victim.peer));
    // A forged revocation (not the grid key's) is refused.
    let forged = GridKey::generate().revoke(RevocationTarget::Peer(grid[1].peer), u64::MAX);
    assert!(
        grid[0]
            .handle
            .revoke(vec![forged.to_bytes()])
            .await
            .is_err()
    );
}

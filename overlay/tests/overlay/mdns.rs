//! mDNS finds peers without bootstrap addresses, in a private network
//! namespace.

use super::*;

/// Name of the mDNS test, as libtest knows it (`--exact`).
const MDNS_TEST: &str = "mdns::mdns_finds_peers_on_the_local_network_without_bootstrap";
/// Set (to the parent's network namespace, as `/proc/self/ns/net` reads)
/// when the mDNS test runs re-executed inside its own network namespace.
const MDNS_NETNS_ENV: &str = "ZORILLA_OVERLAY_MDNS_NETNS";
/// Printed by the re-executed test once its scenario passed, so that the
/// parent never mistakes "no test ran" for success.
const MDNS_PASSED: &str = "mdns-netns: scenario passed";

/// mDNS announces only addresses on non-loopback interfaces (libp2p-mdns
/// skips loopback), so this test cannot use 127.0.0.1 like the others. To
/// stay off the real network it re-executes its own test binary under
/// `unshare --net` (util-linux; needs root or CAP_SYS_ADMIN), in a private
/// network namespace where it brings `lo` up and adds a veth pair with an
/// address from 192.0.2.0/24 (TEST-NET-1) and a route for 224.0.0.0/4
/// (iproute2). Nodes listening on 0.0.0.0 there see only that namespace's
/// interfaces, and their multicast loops back between the sockets
/// (IP_MULTICAST_LOOP) without leaving the namespace. If the namespace
/// cannot be made, the test fails and says why; it never skips.
#[test]
fn mdns_finds_peers_on_the_local_network_without_bootstrap() {
    match std::env::var(MDNS_NETNS_ENV) {
        Ok(parent) => mdns_inside_namespace(&parent),
        Err(_) => mdns_in_private_namespace(),
    }
}

/// Runs this very test again in a fresh network namespace and checks that
/// it ran there and passed.
fn mdns_in_private_namespace() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let netns = std::fs::read_link("/proc/self/ns/net").expect("read /proc/self/ns/net");
    let needs = "this test needs `unshare` (util-linux) and the right to create a network \
                 namespace (root or CAP_SYS_ADMIN), and `ip` (iproute2) inside it";
    let output = std::process::Command::new("unshare")
        .arg("--net")
        .arg("--")
        .arg(&exe)
        .args(["--exact", MDNS_TEST, "--nocapture", "--test-threads=1"])
        .env(MDNS_NETNS_ENV, &netns)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `unshare`: {e}; {needs}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report = format!(
        "{}\n--- stdout of the re-executed test ---\n{stdout}\n--- stderr ---\n{stderr}",
        output.status
    );
    if stderr.starts_with("unshare:") {
        panic!("`unshare --net` failed; {needs}\n{report}");
    }
    assert!(
        output.status.success(),
        "the mDNS test failed in its network namespace: {report}"
    );
    assert!(
        stdout.contains(MDNS_PASSED) || stderr.contains(MDNS_PASSED),
        "the re-executed test binary did not run the mDNS scenario: {report}"
    );
    eprint!("{stderr}");
}

/// Runs `ip` with `args`, failing the test if it does not succeed.
fn ip(args: &str) {
    let output = std::process::Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `ip {args}` (is iproute2 installed?): {e}"));
    assert!(
        output.status.success(),
        "`ip {args}` failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Inside the private namespace: set up its interfaces, then the scenario.
fn mdns_inside_namespace(parent: &str) {
    // Never configure interfaces anywhere but in a namespace of our own.
    let here = std::fs::read_link("/proc/self/ns/net").expect("read /proc/self/ns/net");
    assert_ne!(
        here.to_string_lossy(),
        parent,
        "{MDNS_NETNS_ENV} is set but this is not a new network namespace"
    );
    let links = std::process::Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("run `ip` (iproute2)");
    let links = String::from_utf8_lossy(&links.stdout);
    assert_eq!(
        links.lines().count(),
        1,
        "expected a fresh namespace with only `lo`:\n{links}"
    );
    // The kernel may lack the dummy driver; a veth pair with both ends
    // here works everywhere. Only one end gets an address, so each node's
    // mDNS has exactly one interface to multicast on.
    ip("link set lo up");
    ip("link add zmdns0 type veth peer name zmdns1");
    ip("addr add 192.0.2.1/24 dev zmdns0");
    ip("link set zmdns0 multicast on up");
    ip("link set zmdns1 multicast on up");
    ip("route add 224.0.0.0/4 dev zmdns0");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(mdns_scenario());
    println!("{MDNS_PASSED}");
}

async fn mdns_scenario() {
    let net = network("mdns");
    // Bans short enough to run out within the test (see below).
    let ban = Duration::from_millis(300);
    let make = |mdns| OverlayConfig {
        mdns,
        // A query every second: a node's first answers can go out before
        // its listener (or, later, its new address) is bound, and the
        // default interval (5 minutes) would leave the test waiting.
        mdns_query_interval: Duration::from_secs(1),
        listen: vec!["/ip4/0.0.0.0/tcp/0".parse().unwrap()],
        ban_duration: ban,
        // AutoNAT would test the new address below with a dial-back, a
        // connection this test counts as a dial; nothing here is behind a
        // NAT.
        nat: zorilla_overlay::config::NatConfig {
            autonat: false,
            upnp: false,
            ..Default::default()
        },
        ..config(&net, 2, 1)
    };
    // The silent node first, so it is up for the whole window.
    let started = Instant::now();
    let silent = Node::start(make(false)).await;
    let a = Node::start(make(true)).await;
    let b = Node::start(make(true)).await;
    let found = eventually(
        "mDNS introduces the two nodes",
        Duration::from_secs(20),
        || async {
            for (x, y, name) in [(&a, &b, "a"), (&b, &a, "b")] {
                let known = x.handle.known_peers().await.unwrap();
                if !known.iter().any(|k| k.peer == y.peer && k.rtt.is_some()) {
                    return Err(format!("{name} knows {} peers", known.len()));
                }
            }
            Ok(())
        },
    )
    .await;
    // They met over the namespace's link (192.0.2.1), so neither keeps the
    // other's loopback address, which identify reports too (it listens on
    // 0.0.0.0) but which would lead a node on another host to itself.
    for (x, y, name) in [(&a, &b, "a"), (&b, &a, "b")] {
        let known = x.handle.known_peers().await.unwrap();
        let addrs: Vec<String> = known
            .iter()
            .filter(|k| k.peer == y.peer)
            .flat_map(|k| &k.addrs)
            .map(|addr| addr.to_string())
            .collect();
        assert!(
            !addrs.is_empty() && addrs.iter().all(|a| !a.starts_with("/ip4/127.")),
            "{name} keeps the other's addresses {addrs:?}"
        );
    }
    let rtt = a
        .handle
        .known_peers()
        .await
        .unwrap()
        .into_iter()
        .find(|k| k.peer == b.peer)
        .and_then(|k| k.rtt)
        .unwrap();
    // Negative check: in that window (at least two seconds from the silent
    // node's start), nobody found the node without mDNS, though it answers
    // on 0.0.0.0 like the others, nor did it find anyone.
    loop {
        for (node, name) in [(&a, "a"), (&b, "b")] {
            let known = node.handle.known_peers().await.unwrap();
            assert!(
                known.iter().all(|k| k.peer != silent.peer),
                "{name} discovered the node with mDNS off"
            );
        }
        let known = silent.handle.known_peers().await.unwrap();
        assert!(
            known.is_empty(),
            "the node with mDNS off learned of {} peers",
            known.len()
        );
        if started.elapsed() >= Duration::from_secs(2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A node of another grid joins the LAN and announces itself by mDNS.
    // It and each of ours meet (each dialing the other, or one the other),
    // refuse each other, and remember it.
    let foreign = Node::start(OverlayConfig {
        network: network("mdns-other"),
        ..make(true)
    })
    .await;
    let counts = || async {
        let mut counts = Vec::new();
        for node in [&a, &b, &foreign] {
            let stats = node.handle.stats().await.unwrap();
            counts.push((
                stats.foreign_peers,
                stats.bans,
                stats.connections,
                stats.failed_incoming,
            ));
        }
        counts
    };
    eventually(
        "each side knows the other is foreign",
        Duration::from_secs(10),
        || async {
            let now = counts().await;
            let foreign_peers: Vec<u64> = now.iter().map(|c| c.0).collect();
            // The other grid's node meets at least one of ours and both
            // remember it; whether both of ours dial it in this window
            // depends on the timing of their mDNS answers (under load one
            // of them may not).
            if foreign_peers[2] >= 1 && foreign_peers[0] + foreign_peers[1] >= foreign_peers[2] {
                Ok(())
            } else {
                Err(format!(
                    "foreign peers known by a, b, foreign: {foreign_peers:?}"
                ))
            }
        },
    )
    .await;
    // Each bans the other at its first maintenance tick a second
    // (FAREWELL_GRACE) after it identified it, and lifts the ban at its
    // first tick a ban later: some 3 s after they met (more when ticks
    // run late), and a pair may meet after the check above (which needs
    // only one pair). A ban still pending would change the counts below,
    // and one in force would refuse the very dial they are to catch: wait
    // until no node has either.
    eventually(
        "the bans between the grids ran out",
        Duration::from_secs(10),
        || async {
            let mut bans = Vec::new();
            for node in [&a, &b, &foreign] {
                let stats = node.handle.stats().await.unwrap();
                bans.push((stats.pending_bans, stats.banned_peers));
            }
            if bans.iter().all(|&bans| bans == (0, 0)) {
                Ok(())
            } else {
                Err(format!(
                    "bans (pending, in force) of a, b, foreign: {bans:?}"
                ))
            }
        },
    )
    .await;
    let before = counts().await;

    // Every node gains an address: each announces it by mDNS, a new
    // (peer, address) pair for the others. Nodes must not dial the other
    // grid's node at its new address, nor it them: they know it is foreign.
    ip("addr add 192.0.2.2/24 dev zmdns0");
    let renewed = eventually(
        "mDNS announced the new addresses",
        Duration::from_secs(10),
        || async {
            for (x, y) in [(&a, &b), (&b, &a)] {
                let known = x.handle.known_peers().await.unwrap();
                let new = known
                    .iter()
                    .filter(|k| k.peer == y.peer)
                    .flat_map(|k| &k.addrs)
                    .any(|addr| addr.to_string().starts_with("/ip4/192.0.2.2/"));
                if !new {
                    return Err("not yet".into());
                }
            }
            Ok(())
        },
    )
    .await;
    // The announcement reached everyone at once; give a dial, were there
    // one, time to happen and be refused.
    let window = Instant::now();
    while window.elapsed() < Duration::from_millis(1500) {
        // (foreign peers, bans, connections, refused connections) of a, b
        // and the other grid's node.
        assert_eq!(counts().await, before, "a foreign peer was dialed again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "mDNS pair found each other after {found:?} (RTT {rtt:?}); the node without mDNS stayed \
         unknown; the other grid's node was refused and not dialed again after \
         the new addresses were announced ({renewed:?})"
    );
}

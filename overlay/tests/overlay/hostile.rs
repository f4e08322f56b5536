//! Other networks, garbage, malformed frames and floods of adverts do not
//! hurt a node; misbehaving peers are banned at the limit.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grids_with_different_network_names_never_connect() {
    let (net_a, net_b) = (network("grid-a"), network("grid-b"));
    let grid_a = start_grid(4, |_| config(&net_a, 2, 1)).await;
    // Grid B's nodes are also told about grid A's bootstrap node.
    let a0 = grid_a[0].addr.clone();
    let grid_b = start_grid(4, |_| OverlayConfig {
        bootstrap: vec![a0.clone()],
        ..config(&net_b, 2, 1)
    })
    .await;
    // And a node of A dials B's first node directly.
    grid_a[1].handle.dial(grid_b[0].addr.clone()).await.unwrap();

    let a: Vec<&Node> = grid_a.iter().collect();
    let b: Vec<&Node> = grid_b.iter().collect();
    eventually("both grids form", Duration::from_secs(30), || async {
        full_and_connected(&a, 3).await?;
        full_and_connected(&b, 3).await.map(|_| ())
    })
    .await;
    eventually(
        "the foreign peers were refused",
        Duration::from_secs(10),
        || async {
            // Each of the two cross connections is refused by at least
            // one side (the other may lose the connection before it hears
            // why).
            let mut bans = 0;
            for node in grid_a.iter().chain(&grid_b) {
                bans += node.handle.stats().await.unwrap().bans;
            }
            if bans >= 2 {
                Ok(())
            } else {
                Err(format!("{bans} bans"))
            }
        },
    )
    .await;
    let ids_a: HashSet<PeerId> = grid_a.iter().map(|n| n.peer).collect();
    let ids_b: HashSet<PeerId> = grid_b.iter().map(|n| n.peer).collect();
    for (nodes, foreign) in [(&grid_a, &ids_b), (&grid_b, &ids_a)] {
        for node in nodes.iter() {
            let known = node.handle.known_peers().await.unwrap();
            assert!(
                known.iter().all(|k| !foreign.contains(&k.peer)),
                "a foreign peer is known"
            );
            let seen = node.seen.lock().unwrap();
            assert!(
                seen.connected.iter().all(|p| !foreign.contains(p)),
                "a foreign peer connected"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_oversized_frames_and_misbehaving_peers_do_not_hurt_a_node() {
    let net = network("garbage");
    let target = Node::start(OverlayConfig {
        max_message_size: 64 * 1024,
        misbehaviour_limit: 3,
        ..config(&net, 2, 1)
    })
    .await;
    let port = target
        .addr
        .iter()
        .find_map(|p| match p {
            libp2p::multiaddr::Protocol::Tcp(port) => Some(port),
            _ => None,
        })
        .unwrap();

    // Raw garbage, a plausible multistream header followed by junk, and
    // 8 MiB of junk.
    let junk: Vec<u8> = (0..8 << 20)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let frames: [&[u8]; 3] = [
        b"\x00\xff garbage \r\n\r\n",
        b"\x13/multistream/1.0.0\n\xff\xff\xff\xff\x0f",
        &junk,
    ];
    for frame in frames {
        let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        // The node may close on us half-way: that is the point.
        let _ = socket.write_all(frame).await;
        let _ = socket.shutdown().await;
    }
    eventually(
        "the junk connections were rejected",
        Duration::from_secs(30),
        || async {
            let failed = target.handle.stats().await.unwrap().failed_incoming;
            if failed >= 3 {
                Ok(())
            } else {
                Err(format!("{failed} rejected"))
            }
        },
    )
    .await;

    // A peer of the same network whose frames are too large is counted
    // against and, at the limit, disconnected and refused.
    let bully = Node::start(OverlayConfig {
        bootstrap: vec![target.addr.clone()],
        max_message_size: 4 << 20,
        ..config(&net, 2, 1)
    })
    .await;
    eventually("the bully connects", Duration::from_secs(10), || async {
        if bully.seen.lock().unwrap().connected.contains(&target.peer) {
            Ok(())
        } else {
            Err("not yet".into())
        }
    })
    .await;
    for _ in 0..3 {
        let result = bully.handle.request(target.peer, vec![0; 100 * 1024]).await;
        assert!(result.is_err(), "an oversized request must fail");
    }
    eventually("the bully is banned", Duration::from_secs(10), || async {
        let stats = target.handle.stats().await.unwrap();
        if stats.misbehaviour >= 3 && stats.bans >= 1 {
            Ok(())
        } else {
            Err(format!("{stats:?}"))
        }
    })
    .await;
    let known = target.handle.known_peers().await.unwrap();
    assert!(
        known.iter().all(|k| k.peer != bully.peer),
        "the bully is forgotten"
    );
    assert!(
        bully
            .handle
            .request(target.peer, b"hi".to_vec())
            .await
            .is_err(),
        "the bully is refused"
    );

    // The node still works for everyone else.
    let friend = Node::start(OverlayConfig {
        bootstrap: vec![target.addr.clone()],
        ..config(&net, 2, 1)
    })
    .await;
    eventually(
        "a well-behaved peer connects",
        Duration::from_secs(10),
        || async {
            if friend.seen.lock().unwrap().connected.contains(&target.peer) {
                Ok(())
            } else {
                Err("not yet".into())
            }
        },
    )
    .await;
    let answer = friend
        .handle
        .request(target.peer, b"ping".to_vec())
        .await
        .unwrap();
    assert_eq!(answer, b"gnip");
}

/// Malformed frames on both protocols from a peer that identified itself as
/// one of ours: each is counted, the peer stays until the limit, is
/// disconnected and refused at the limit, and a well-behaved peer is served
/// throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identified_peer_sending_malformed_frames_is_banned_at_the_limit() {
    let net = network("malformed");
    let limit = 5;
    let target = Node::start(OverlayConfig {
        misbehaviour_limit: limit,
        ..config(&net, 2, 1)
    })
    .await;
    let friend = Node::start(OverlayConfig {
        bootstrap: vec![target.addr.clone()],
        ..config(&net, 2, 1)
    })
    .await;
    let mut raw = RawPeer::start(&net);
    let raw_id = raw.peer;
    raw.dial(target.addr.clone()).await.unwrap();
    eventually(
        "the target identified both peers",
        Duration::from_secs(10),
        || async {
            let seen = target.seen.lock().unwrap();
            if seen.connected.contains(&raw_id) && seen.connected.contains(&friend.peer) {
                Ok(())
            } else {
                Err(format!("{:?}", seen.connected))
            }
        },
    )
    .await;

    let frames: [(Protocol, &[u8]); 5] = [
        (Protocol::Flood, b"\xff\x00 not cbor"),
        // Well-formed CBOR (the integer 42), but not a request.
        (Protocol::Rpc, b"\x18\x2a"),
        // A map cut off in its first key.
        (Protocol::Flood, b"\xa1\x62i"),
        // Indefinite-length arrays never closed.
        (Protocol::Rpc, b"\x9f\x9f\x9f\x9f"),
        // A network coordinate with x NaN: {"Coordinates": {"x": NaN,
        // "y": 0.0, "height": 1.0, "error": 0.5}}.
        (
            Protocol::Rpc,
            b"\xa1\x6bCoordinates\xa4\x61x\xf9\x7e\x00\x61y\xf9\x00\x00\x66height\xf9\x3c\x00\x65error\xf9\x38\x00",
        ),
    ];
    assert_eq!(frames.len() as u32, limit);
    for (i, (protocol, bytes)) in frames.into_iter().enumerate() {
        raw.send(protocol, target.peer, bytes).await;
        let offences = i as u64 + 1;
        eventually(
            &format!("offence {offences} ({protocol:?}) is counted"),
            Duration::from_secs(10),
            || async {
                let stats = target.handle.stats().await.unwrap();
                if stats.misbehaviour >= offences {
                    Ok(())
                } else {
                    Err(format!("{stats:?}"))
                }
            },
        )
        .await;
        let stats = target.handle.stats().await.unwrap();
        assert_eq!(stats.misbehaviour, offences, "one offence per bad frame");
        if offences < u64::from(limit) {
            assert_eq!(stats.bans, 0, "banned before the limit");
            let known = target.handle.known_peers().await.unwrap();
            assert!(
                known.iter().any(|k| k.peer == raw_id && k.connected),
                "the peer was dropped before the limit"
            );
        }
    }

    // At the limit: disconnected, forgotten, and refused when it returns.
    raw.expect(RawEvent::Disconnected(target.peer), Duration::from_secs(10))
        .await;
    let stats = target.handle.stats().await.unwrap();
    assert_eq!((stats.misbehaviour, stats.bans), (u64::from(limit), 1));
    let known = target.handle.known_peers().await.unwrap();
    assert!(
        known.iter().all(|k| k.peer != raw_id),
        "the peer is forgotten"
    );
    raw.dial(target.addr.clone()).await.unwrap();
    eventually(
        "the banned peer's new connection is refused",
        Duration::from_secs(10),
        || async {
            let now = target.handle.stats().await.unwrap();
            if now.failed_incoming > stats.failed_incoming {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    )
    .await;

    // The well-behaved peer was never touched: still connected, its
    // requests answered, floods going both ways.
    let known = target.handle.known_peers().await.unwrap();
    assert!(known.iter().any(|k| k.peer == friend.peer && k.connected));
    let answer = friend
        .handle
        .request(target.peer, b"ping".to_vec())
        .await
        .unwrap();
    assert_eq!(answer, b"gnip");
    for (seq, (from, to)) in [(&target, &friend), (&friend, &target)]
        .into_iter()
        .enumerate()
    {
        let id = FloodId {
            job: JobId(5),
            seq: seq as u32,
        };
        eventually("the two are linked", Duration::from_secs(10), || async {
            let links = from.handle.links().await.unwrap();
            if links.iter().any(|(p, _)| *p == to.peer) {
                Ok(())
            } else {
                Err(format!("{links:?}"))
            }
        })
        .await;
        from.handle
            .flood(id, header(seq as u32, 2, None), b"advert".to_vec())
            .await
            .unwrap();
        eventually("the flood arrives", Duration::from_secs(10), || async {
            if to.deliveries(id).is_empty() {
                Err("not yet".into())
            } else {
                Ok(())
            }
        })
        .await;
    }
    assert_eq!(target.handle.stats().await.unwrap().bans, 1);
}

/// The per-peer advert rate limit, end to end: a node that takes 3 adverts
/// a second from each peer gets 40 distinct floods at once from one peer.
/// It delivers no more than the burst plus what refilled while they
/// arrived, counts every other one as rate-limited, still takes another
/// peer's adverts, and takes the first peer's again once its bucket
/// refilled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adverts_beyond_a_peers_rate_are_dropped() {
    let net = network("rate");
    let rate = 3u32;
    let receiver = Node::start(OverlayConfig {
        flood: FloodConfig {
            adverts_per_peer_per_sec: rate,
            ..FloodConfig::default()
        },
        ..config(&net, 2, 1)
    })
    .await;
    let join = || OverlayConfig {
        bootstrap: vec![receiver.addr.clone()],
        ..config(&net, 2, 1)
    };
    let (noisy, quiet) = (Node::start(join()).await, Node::start(join()).await);
    for sender in [&noisy, &quiet] {
        eventually(
            "the sender floods to the receiver",
            Duration::from_secs(10),
            || async {
                let links = sender.handle.links().await.unwrap();
                if links.iter().any(|(p, _)| *p == receiver.peer) {
                    Ok(())
                } else {
                    Err(format!("{links:?}"))
                }
            },
        )
        .await;
    }
    let received_from = |job: u64| {
        let seen = receiver.seen.lock().unwrap();
        seen.floods
            .iter()
            .filter(|(id, _, _)| id.job == JobId(job))
            .count() as u64
    };

    // TTL 1: the receiver forwards nothing, so only these copies count.
    let floods = 40u32;
    let start = Instant::now();
    for seq in 0..floods {
        let id = FloodId { job: JobId(1), seq };
        noisy
            .handle
            .flood(id, header(seq, 1, None), vec![1])
            .await
            .unwrap();
    }
    eventually(
        "every copy reached the receiver",
        Duration::from_secs(10),
        || async {
            let stats = receiver.handle.stats().await.unwrap();
            if stats.flood_frames_received >= u64::from(floods) {
                Ok(())
            } else {
                Err(format!("{stats:?}"))
            }
        },
    )
    .await;
    let elapsed = start.elapsed();
    let stats = receiver.handle.stats().await.unwrap();
    assert_eq!(stats.flood_frames_received, u64::from(floods));
    let delivered = stats.router.delivered;
    let allowed = u64::from(rate) + (f64::from(rate) * elapsed.as_secs_f64()).ceil() as u64;
    assert!(
        (u64::from(rate)..=allowed).contains(&delivered),
        "{delivered} of {floods} delivered in {elapsed:?}; the burst is {rate}, at most \
         {allowed} may pass"
    );
    assert_eq!(stats.router.rate_limited, u64::from(floods) - delivered);
    assert_eq!(
        received_from(1),
        delivered,
        "the node got what the router let through"
    );

    // The limit is per peer: the other sender's adverts pass.
    for seq in 0..rate {
        let id = FloodId { job: JobId(2), seq };
        quiet
            .handle
            .flood(id, header(seq, 1, None), vec![2])
            .await
            .unwrap();
    }
    eventually(
        "the quiet peer's adverts are delivered",
        Duration::from_secs(5),
        || async {
            if received_from(2) == u64::from(rate) {
                Ok(())
            } else {
                Err(format!("{} delivered", received_from(2)))
            }
        },
    )
    .await;

    // And the noisy peer's bucket refills: a new advert passes again.
    let mut seq = 0;
    let refilled = eventually(
        "the noisy peer's adverts pass again",
        Duration::from_secs(3),
        || {
            seq += 1;
            let id = FloodId { job: JobId(3), seq };
            let noisy = &noisy;
            async move {
                noisy
                    .handle
                    .flood(id, header(seq, 1, None), vec![3])
                    .await
                    .unwrap();
                if received_from(3) > 0 {
                    Ok(())
                } else {
                    Err("rate-limited".into())
                }
            }
        },
    )
    .await;
    eprintln!(
        "{delivered} of {floods} adverts delivered in {elapsed:?}, {} rate-limited; \
         the bucket refilled within {refilled:?}",
        stats.router.rate_limited
    );
}

/// A flood copy may name at most 64 other recipients of its sender: one
/// naming 65 is an offence and goes no further; one naming 64 is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_copy_naming_too_many_other_recipients_is_an_offence() {
    let net = network("recipients");
    let target = Node::start(config(&net, 2, 1)).await;
    let raw = RawPeer::start(&net);
    let raw_id = raw.peer;
    raw.dial(target.addr.clone()).await.unwrap();
    eventually(
        "the target identified the peer",
        Duration::from_secs(10),
        || async {
            if target.seen.lock().unwrap().connected.contains(&raw_id) {
                Ok(())
            } else {
                Err("not yet".into())
            }
        },
    )
    .await;

    let too_many = zorilla_overlay::fuzz::flood_frame_naming(1, 65);
    raw.send(Protocol::Flood, target.peer, &too_many).await;
    eventually(
        "the offence is counted",
        Duration::from_secs(10),
        || async {
            let stats = target.handle.stats().await.unwrap();
            if stats.misbehaviour == 1 {
                Ok(())
            } else {
                Err(format!("{stats:?}"))
            }
        },
    )
    .await;

    let enough = zorilla_overlay::fuzz::flood_frame_naming(2, 64);
    raw.send(Protocol::Flood, target.peer, &enough).await;
    let id = FloodId {
        job: JobId(2),
        seq: 0,
    };
    eventually(
        "the copy naming 64 is delivered",
        Duration::from_secs(10),
        || async {
            if target.deliveries(id).is_empty() {
                Err("not yet".into())
            } else {
                Ok(())
            }
        },
    )
    .await;
    let flooded = FloodId {
        job: JobId(1),
        seq: 0,
    };
    assert!(
        target.deliveries(flooded).is_empty(),
        "the copy naming 65 went on"
    );
    assert_eq!(target.handle.stats().await.unwrap().misbehaviour, 1);
}

//! The overlay's peer keeping ([`PeerKeeper`]) with an injected clock: the
//! exact moments at which it replaces, introduces, bans and forgives, and
//! the bound on what hostile peers can make it remember.

use std::time::Duration;

use zorilla_core::neighbours::NeighbourConfig;
use zorilla_core::neighbours::keeper::{
    Action, DialFailure, DisconnectReason, HANDSHAKE_RETRY, KeeperConfig, LINGER, MAX_REMEMBERED,
    PeerFacts, PeerKeeper, REJOIN_FOR,
};
use zorilla_core::vivaldi::{Coord, Position, Refused};

type Keeper = PeerKeeper<u32, u32>;

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn s(x: u64) -> Duration {
    Duration::from_secs(x)
}

/// Two near neighbours, four kept connections, pings every second with a
/// three-second timeout, bans after three offences for five minutes.
fn config() -> KeeperConfig {
    KeeperConfig {
        neighbours: NeighbourConfig {
            near: 2,
            far: 0,
            samples: 1,
            max_known: 64,
            hysteresis: 0.1,
        },
        ping_interval: s(1),
        ping_timeout: s(3),
        handshake_timeout: s(20),
        peer_exchange_interval: s(5),
        max_probes: 4,
        probe_samples: 2,
        remeasure_after: s(60),
        misbehaviour_limit: 3,
        ban_duration: s(300),
        dead_retry_after: s(30),
        kept_connections: 4,
        bootstrap: false,
    }
}

/// Every peer has an address and no application traffic.
struct Idle;

impl PeerFacts<u32> for Idle {
    fn busy(&self, _: &u32) -> bool {
        false
    }
    fn dialable(&self, _: &u32) -> bool {
        true
    }
}

fn drain(keeper: &mut Keeper) -> Vec<Action<u32, u32>> {
    std::iter::from_fn(|| keeper.poll_action()).collect()
}

/// `peer` connects on connection `peer * 10` (dialed by it, so that it is
/// its to close), identifies itself as of our network and is measured.
fn join(keeper: &mut Keeper, peer: u32, rtt: Duration, now: Duration) {
    keeper.connected(peer, peer * 10, false, now);
    assert!(keeper.identified(peer, true, now), "{peer} newly verified");
    keeper.rtt(peer, rtt, now);
}

fn neighbours(keeper: &Keeper) -> Vec<u32> {
    keeper.table().neighbours().map(|(p, _, _)| *p).collect()
}

#[test]
fn a_neighbour_that_stops_answering_is_replaced_after_exactly_its_timeout() {
    let mut keeper = Keeper::new(config(), 1, Duration::ZERO);
    for peer in 1..=3 {
        join(&mut keeper, peer, ms(u64::from(peer)), Duration::ZERO);
    }
    keeper.tick(Duration::ZERO, &Idle);
    assert_eq!(neighbours(&keeper), vec![1, 2]);
    drain(&mut keeper);

    // Peers 2 and 3 answer every ping; peer 1 never again. Its timeout is
    // a ping interval and a ping timeout: 4 s after its last answer.
    for t in 1..=4 {
        let now = s(t);
        keeper.rtt(2, ms(2), now);
        keeper.rtt(3, ms(3), now);
        keeper.tick(now, &Idle);
        assert_eq!(neighbours(&keeper), vec![1, 2], "at {t} s");
        let actions = drain(&mut keeper);
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, Action::Disconnect { .. })),
            "nobody dropped at {t} s: {actions:?}"
        );
    }
    let now = s(4) + ms(1);
    keeper.tick(now, &Idle);
    let actions = drain(&mut keeper);
    assert_eq!(neighbours(&keeper), vec![2, 3], "peer 3 replaced peer 1");
    assert_eq!(
        actions,
        vec![
            Action::Disconnect {
                peer: 1,
                reason: DisconnectReason::Silent
            },
            Action::Forgotten(1),
            Action::Link { peer: 3, on: true },
            // Still connected until the disconnect is done.
            Action::Link { peer: 1, on: false },
            Action::NeighboursChanged {
                added: vec![3],
                removed: vec![1]
            },
        ]
    );
    assert!(keeper.refused(&1), "not tried again for a while");
    // Its connection closing afterwards changes nothing more.
    assert!(keeper.disconnected(&1, &10, now));
    assert_eq!(drain(&mut keeper), vec![]);
}

/// A node whose every neighbour fell silent (its link went down) and that
/// has no bootstrap peer dials them again, backing off, until one answers;
/// their addresses are kept meanwhile, and a rejoined one is dialed no more.
#[test]
fn a_node_cut_off_from_everyone_dials_its_silent_neighbours_again() {
    let mut keeper = Keeper::new(config(), 1, Duration::ZERO);
    for peer in 1..=2 {
        join(&mut keeper, peer, ms(u64::from(peer)), Duration::ZERO);
    }
    keeper.tick(Duration::ZERO, &Idle);
    assert_eq!(neighbours(&keeper), vec![1, 2]);
    assert_eq!(keeper.bootstrap_due(), None, "connected");
    drain(&mut keeper);
    // Nobody answers from now: both are dropped after 4 s.
    let now = s(4) + ms(1);
    keeper.tick(now, &Idle);
    drain(&mut keeper);
    for peer in 1..=2 {
        keeper.disconnected(&peer, &(peer * 10), now);
        assert!(keeper.remembers(&peer), "{peer}'s addresses are kept");
    }
    drain(&mut keeper);
    let mut dials = Vec::new();
    let mut at = now;
    for _ in 0..5 {
        at = keeper
            .bootstrap_due()
            .expect("alone, with neighbours to rejoin")
            .max(at);
        keeper.bootstrap_retry(at);
        let actions = drain(&mut keeper);
        assert_eq!(actions, vec![Action::Dial(1), Action::Dial(2)], "at {at:?}");
        for peer in 1..=2 {
            keeper.dial_failed(&peer, DialFailure::Unreachable, at);
        }
        drain(&mut keeper);
        dials.push(at);
    }
    assert!(
        dials.windows(2).all(|w| w[1] > w[0]) && dials[4] - dials[3] >= s(2),
        "backing off: {dials:?}"
    );
    // The network heals: peer 2 answers and identifies itself.
    join(&mut keeper, 2, ms(2), at);
    assert_eq!(keeper.bootstrap_due(), None, "connected again");
    keeper.disconnected(&2, &20, at + s(1));
    drain(&mut keeper);
    keeper.bootstrap_retry(at + s(2));
    assert_eq!(
        drain(&mut keeper),
        vec![Action::Dial(1)],
        "2 rejoined: only 1 left"
    );
    // Rejoining is given up after REJOIN_FOR.
    keeper.tick(at + REJOIN_FOR + s(1), &Idle);
    drain(&mut keeper);
    assert_eq!(keeper.bootstrap_due(), None, "nobody left to rejoin");
}

#[test]
fn a_neighbour_whose_link_breaks_is_redialed_once_then_replaced() {
    let mut keeper = Keeper::new(config(), 1, Duration::ZERO);
    for peer in 1..=3 {
        join(&mut keeper, peer, ms(u64::from(peer)), Duration::ZERO);
    }
    keeper.tick(Duration::ZERO, &Idle);
    drain(&mut keeper);

    assert!(keeper.disconnected(&1, &10, s(1)));
    assert_eq!(drain(&mut keeper), vec![Action::Dial(1)]);
    keeper.connected(1, 11, true, s(1) + ms(5));
    keeper.identified(1, true, s(1) + ms(5));
    drain(&mut keeper);
    assert_eq!(neighbours(&keeper), vec![1, 2]);

    // Broken again within the linger time: a full peer shedding us.
    assert!(keeper.disconnected(&1, &11, s(1) + LINGER - ms(1)));
    let actions = drain(&mut keeper);
    assert!(actions.contains(&Action::Forgotten(1)), "{actions:?}");
    assert_eq!(neighbours(&keeper), vec![2, 3]);
}

#[test]
fn a_full_node_introduces_newcomers_and_lets_them_go() {
    let mut keeper = Keeper::new(config(), 1, Duration::ZERO);
    // Four peers take the four kept connections.
    for peer in 1..=4 {
        join(&mut keeper, peer, ms(u64::from(peer)), Duration::ZERO);
    }
    keeper.tick(Duration::ZERO, &Idle);
    drain(&mut keeper);
    assert_eq!(keeper.open_connections(), 4);

    // A newcomer whose only bootstrap peer this is connects above them.
    let now = s(1);
    keeper.connected(9, 90, false, now);
    assert!(keeper.identified(9, true, now));
    assert!(drain(&mut keeper).contains(&Action::AskPeers(9)));
    // It gets our peers, neighbours first...
    assert_eq!(keeper.peers_requested(&9, 32), vec![1, 2, 3, 4]);
    // The overlay asks for all of them (and filters them by address): the
    // same answer, without an allocation or search sized by the ask.
    assert_eq!(keeper.peers_requested(&9, usize::MAX), vec![1, 2, 3, 4]);
    assert_eq!(keeper.peers_requested(&9, 2), vec![1, 2]);
    // ... and once it has them, its connection is the one closed: not a
    // neighbour's, nor one of peers still getting to know us.
    keeper.peers_sent(&9, now, &Idle);
    assert_eq!(drain(&mut keeper), vec![Action::Close(90)]);

    // The newcomer learned of our neighbours and can join through them.
    let mut newcomer = Keeper::new(config(), 2, Duration::ZERO);
    newcomer.learned([1, 2, 3, 4], now, &Idle);
    let dials: Vec<_> = drain(&mut newcomer)
        .into_iter()
        .filter(|a| matches!(a, Action::Dial(_)))
        .collect();
    assert_eq!(dials.len(), 4, "every peer probed: {dials:?}");
}

#[test]
fn offenders_and_foreign_peers_are_banned_and_bans_expire() {
    let mut keeper = Keeper::new(config(), 1, Duration::ZERO);
    keeper.connected(7, 70, false, Duration::ZERO);
    keeper.identified(7, true, Duration::ZERO);
    drain(&mut keeper);
    for count in 1..=2 {
        let offences = keeper.offence(7, s(count));
        assert_eq!((offences.count, offences.banned), (count as u32, false));
    }
    let offences = keeper.offence(7, s(3));
    assert!(offences.banned);
    assert!(drain(&mut keeper).contains(&Action::Ban(7)));
    assert!(keeper.refused(&7));
    assert_eq!(keeper.banned_peers(), 1);
    keeper.learned([7], s(4), &Idle);
    assert!(!keeper.table().contains(&7), "a banned peer is not learned");

    // A peer of another network is banned a moment after it identified
    // itself (so that it reads our identify first); meanwhile its ban is
    // pending.
    keeper.connected(8, 80, false, s(3));
    assert!(!keeper.identified(8, false, s(3)));
    assert_eq!((keeper.pending_bans(), keeper.banned_peers()), (1, 1));
    keeper.tick(s(3) + ms(999), &Idle);
    assert!(!drain(&mut keeper).contains(&Action::Ban(8)));
    assert_eq!(keeper.pending_bans(), 1);
    keeper.tick(s(4), &Idle);
    assert!(drain(&mut keeper).contains(&Action::Ban(8)));
    assert_eq!((keeper.pending_bans(), keeper.banned_peers()), (0, 2));

    // The bans last exactly the ban duration.
    keeper.tick(s(303) - ms(1), &Idle);
    assert!(!drain(&mut keeper).contains(&Action::Unban(7)));
    keeper.tick(s(303), &Idle);
    assert!(drain(&mut keeper).contains(&Action::Unban(7)));
    assert!(!keeper.refused(&7));
    assert_eq!(keeper.banned_peers(), 1);
    keeper.tick(s(304), &Idle);
    assert!(drain(&mut keeper).contains(&Action::Unban(8)));
    assert_eq!((keeper.pending_bans(), keeper.banned_peers()), (0, 0));
    // A foreign peer stays refused: never dialed on our own initiative.
    assert!(keeper.refused(&8));
}

#[test]
fn a_peer_that_cannot_be_reached_is_retried_only_after_a_while() {
    let mut keeper = Keeper::new(config(), 1, Duration::ZERO);
    keeper.learned([5], Duration::ZERO, &Idle);
    assert_eq!(drain(&mut keeper), vec![Action::Dial(5)]);
    keeper.dial_failed(&5, DialFailure::Unreachable, ms(100));
    assert_eq!(drain(&mut keeper), vec![Action::Forgotten(5)]);
    keeper.learned([5], s(1), &Idle);
    assert_eq!(drain(&mut keeper), vec![], "dead for dead_retry_after");
    keeper.tick(ms(100) + s(30), &Idle);
    drain(&mut keeper);
    keeper.learned([5], s(31), &Idle);
    assert_eq!(drain(&mut keeper), vec![Action::Dial(5)]);
}

/// Two peers that learn of each other from the same peer exchange dial each
/// other at once; from their listen ports the two dials become one TCP
/// connection on which both handshakes fail. Neither takes the other for
/// dead: each tries once more after its own random wait, and they meet.
#[test]
fn peers_whose_dials_collide_try_once_more_and_meet() {
    let mut a = Keeper::new(config(), 1, Duration::ZERO);
    let mut b = Keeper::new(config(), 2, Duration::ZERO);
    a.learned([2], Duration::ZERO, &Idle);
    b.learned([1], Duration::ZERO, &Idle);
    assert_eq!(drain(&mut a), vec![Action::Dial(2)]);
    assert_eq!(drain(&mut b), vec![Action::Dial(1)]);
    a.dial_failed(&2, DialFailure::Handshake, ms(10));
    b.dial_failed(&1, DialFailure::Handshake, ms(10));
    assert_eq!(drain(&mut a), vec![]);
    assert_eq!(drain(&mut b), vec![]);
    assert!(!a.refused(&2) && !b.refused(&1), "not taken for dead");
    // Peer exchange tells each of the other again: no dial before the wait.
    a.learned([2], ms(20), &Idle);
    b.learned([1], ms(20), &Idle);
    assert_eq!(drain(&mut a), vec![]);
    assert_eq!(drain(&mut b), vec![]);

    // Ticks every 100 ms: the first to dial again gets through.
    let mut now = ms(100);
    let (dialer, listener) = loop {
        assert!(now <= ms(10) + HANDSHAKE_RETRY * 3 / 2, "no retry");
        a.tick(now, &Idle);
        b.tick(now, &Idle);
        let dials_a = drain(&mut a).contains(&Action::Dial(2));
        let dials_b = drain(&mut b).contains(&Action::Dial(1));
        assert!(!(dials_a && dials_b), "the waits are the same");
        if dials_a {
            break ((&mut a, 1), (&mut b, 2));
        }
        if dials_b {
            break ((&mut b, 2), (&mut a, 1));
        }
        now += ms(100);
    };
    assert!(now >= ms(10) + HANDSHAKE_RETRY / 2, "retried too early");
    let ((dialer, d), (listener, l)) = (dialer, listener);
    dialer.connected(l, 7, true, now);
    listener.connected(d, 7, false, now);
    assert!(dialer.identified(l, true, now));
    assert!(listener.identified(d, true, now));
    dialer.rtt(l, ms(1), now);
    listener.rtt(d, ms(1), now);
    assert!(a.table().rtt(&2).is_some() && b.table().rtt(&1).is_some());
}

/// A peer whose handshake fails again on the retry is taken for dead like
/// one that does not answer.
#[test]
fn a_peer_whose_handshake_fails_twice_is_dead() {
    let mut keeper = Keeper::new(config(), 1, Duration::ZERO);
    keeper.learned([5], Duration::ZERO, &Idle);
    assert_eq!(drain(&mut keeper), vec![Action::Dial(5)]);
    keeper.dial_failed(&5, DialFailure::Handshake, ms(10));
    assert_eq!(drain(&mut keeper), vec![]);
    keeper.tick(ms(10) + HANDSHAKE_RETRY * 3 / 2, &Idle);
    assert!(drain(&mut keeper).contains(&Action::Dial(5)));
    keeper.dial_failed(&5, DialFailure::Handshake, s(2));
    assert_eq!(drain(&mut keeper), vec![Action::Forgotten(5)]);
    assert!(keeper.refused(&5));
}

/// A peer taken for dead (its only address did not answer) is tried again
/// as soon as an address of it is new (a NATed node's relayed address
/// comes after its private one), not after `dead_retry_after`; banned
/// peers stay refused whatever their addresses.
#[test]
fn a_dead_peer_is_dialed_again_at_a_new_address_and_a_banned_one_is_not() {
    let mut keeper = Keeper::new(config(), 1, Duration::ZERO);
    keeper.learned([5], Duration::ZERO, &Idle);
    assert_eq!(drain(&mut keeper), vec![Action::Dial(5)]);
    keeper.dial_failed(&5, DialFailure::Unreachable, ms(10));
    drain(&mut keeper);
    assert!(keeper.refused(&5) && keeper.is_dead(&5));
    // Told of again at the same address: still dead.
    keeper.learned([5], s(5), &Idle);
    assert!(!drain(&mut keeper).contains(&Action::Dial(5)));
    // At a new one: dialed at once.
    keeper.new_address(&5);
    assert!(!keeper.refused(&5));
    keeper.learned([5], s(6), &Idle);
    assert!(drain(&mut keeper).contains(&Action::Dial(5)));

    // A banned peer is not dead, and a new address does not lift its ban.
    join(&mut keeper, 6, ms(5), s(7));
    for _ in 0..3 {
        keeper.offence(6, s(7));
    }
    drain(&mut keeper);
    assert!(keeper.refused(&6) && !keeper.is_dead(&6));
    keeper.new_address(&6);
    assert!(keeper.refused(&6));
}

#[test]
fn what_hostile_peers_can_make_the_keeper_remember_is_bounded() {
    let config = config();
    let max_known = config.neighbours.max_known;
    let mut keeper = Keeper::new(config, 1, Duration::ZERO);
    // Peers connect with ever new identities: half of them foreign, each
    // offends, some get banned, they tell of ever new peers, choose us,
    // send requests, and leave; the probes they cause fail.
    for i in 0..20_000u32 {
        let now = ms(u64::from(i));
        let conn = i;
        keeper.connected(i, conn, false, now);
        keeper.identified(i, i % 2 == 0, now);
        keeper.link_requested(i, true);
        keeper.app_traffic(i, now);
        for _ in 0..(i % 4) {
            keeper.offence(i, now);
        }
        keeper.learned([1_000_000 + i, 2_000_000 + i], now, &Idle);
        keeper.disconnected(&i, &conn, now);
        for action in drain(&mut keeper) {
            if let Action::Dial(peer) = action {
                keeper.dial_failed(&peer, DialFailure::Unreachable, now);
            }
        }
        if i % 100 == 0 {
            keeper.tick(now, &Idle);
            drain(&mut keeper);
        }
        assert!(
            keeper.footprint() <= max_known + 4 * MAX_REMEMBERED + 256,
            "{} entries after {i} peers",
            keeper.footprint()
        );
    }
}

#[test]
fn the_same_inputs_give_the_same_actions() {
    let run = || {
        let mut keeper = Keeper::new(config(), 42, Duration::ZERO);
        let mut actions = Vec::new();
        for peer in 1..=8 {
            join(
                &mut keeper,
                peer,
                ms(u64::from(10 - peer)),
                ms(u64::from(peer)),
            );
        }
        keeper.learned(100..140, s(1), &Idle);
        for t in 1..=20 {
            keeper.tick(s(t), &Idle);
            actions.extend(drain(&mut keeper));
        }
        (actions, neighbours(&keeper))
    };
    let first = run();
    assert_eq!(first, run());
    assert_eq!(first.1.len(), 2);
    assert!(first.1.iter().all(|p| (1..=8).contains(p)));
}

/// Nodes of a plane with access delays (the model Vivaldi with heights
/// assumes), each keeper connected to every other, pinging each peer once
/// a second; the coordinate exchanges the keepers ask for are delivered at
/// once. Returns the keepers and the true RTT of each pair.
fn coordinates_world(n: u32, seconds: u64) -> (Vec<Keeper>, impl Fn(u32, u32) -> Duration) {
    let places: Vec<Coord> = (0..n)
        .map(|i| {
            let i = f64::from(i);
            Coord {
                x: (i * 37.0) % 120.0,
                y: (i * 53.0) % 70.0,
                height: 0.5 + (i * 7.0) % 4.0,
            }
        })
        .collect();
    let true_rtt = move |a: u32, b: u32| {
        Duration::from_secs_f64(places[a as usize].distance_ms(&places[b as usize]) / 1000.0)
    };
    let config = KeeperConfig {
        kept_connections: n as usize,
        ..config()
    };
    let mut keepers: Vec<Keeper> = (0..n)
        .map(|i| Keeper::new(config.clone(), u64::from(i), Duration::ZERO))
        .collect();
    for a in 0..n {
        for b in (0..n).filter(|b| *b != a) {
            let conn = a.min(b) * 1000 + a.max(b);
            keepers[a as usize].connected(b, conn, a < b, Duration::ZERO);
            keepers[a as usize].identified(b, true, Duration::ZERO);
        }
    }
    let mut exchanges = 0u64;
    for t in 0..seconds {
        for a in 0..n {
            // Each ping lands at its own moment within the second.
            for b in (0..n).filter(|b| *b != a) {
                let now = s(t) + ms(u64::from(b) * 10);
                keepers[a as usize].rtt(b, true_rtt(a, b), now);
                for action in drain(&mut keepers[a as usize]) {
                    if let Action::ExchangeCoordinates(peer) = action {
                        exchanges += 1;
                        let (ours, theirs) = (
                            keepers[a as usize].position(),
                            keepers[peer as usize].position(),
                        );
                        keepers[peer as usize]
                            .coordinates_received(a, ours, now)
                            .unwrap();
                        keepers[a as usize]
                            .coordinates_received(peer, theirs, now)
                            .unwrap();
                    }
                }
            }
        }
    }
    // At most one exchange per pair and ping interval from each side.
    let pairs = u64::from(n * (n - 1));
    assert!(exchanges <= pairs * seconds, "{exchanges} exchanges");
    (keepers, true_rtt)
}

#[test]
fn coordinates_learnt_through_the_keepers_predict_the_rtts() {
    let n = 12;
    let (keepers, true_rtt) = coordinates_world(n, 120);
    let mut errors = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            let estimate = keepers[a as usize]
                .position()
                .coord
                .distance_ms(&keepers[b as usize].position().coord);
            let real = true_rtt(a, b).as_secs_f64() * 1000.0;
            errors.push((estimate - real).abs() / real);
            // What a keeper holds of a peer is the peer's coordinate.
            let held = keepers[a as usize].peer_position(&b).unwrap().coord;
            let now = keepers[b as usize].position().coord;
            let apart = (held.x - now.x).hypot(held.y - now.y) + (held.height - now.height).abs();
            assert!(apart < 1.0, "{held:?} against {now:?}");
        }
    }
    errors.sort_by(f64::total_cmp);
    let median = errors[errors.len() / 2];
    assert!(median < 0.1, "median relative error {median:.3}");
    for keeper in &keepers {
        assert!(keeper.position().error < 0.3, "{:?}", keeper.position());
    }
}

#[test]
fn a_hostile_coordinate_is_refused_counted_and_moves_nothing() {
    let mut keeper = Keeper::new(config(), 1, Duration::ZERO);
    join(&mut keeper, 1, ms(10), Duration::ZERO);
    join(&mut keeper, 2, ms(20), Duration::ZERO);
    let honest = Position {
        coord: Coord {
            x: 5.0,
            y: 0.0,
            height: 1.0,
        },
        error: 0.2,
    };
    keeper.coordinates_received(1, honest, ms(1)).unwrap();
    keeper.rtt(1, ms(10), ms(2));
    let before = keeper.position();
    assert_ne!(before.error, 1.0, "an honest sample moved us");
    drain(&mut keeper);

    let bad = [
        (
            Coord {
                x: f64::NAN,
                ..honest.coord
            },
            0.2,
            Refused::Coord,
        ),
        (
            Coord {
                y: 1e300,
                ..honest.coord
            },
            0.2,
            Refused::Coord,
        ),
        (honest.coord, f64::INFINITY, Refused::Error),
    ];
    for (i, (coord, error, why)) in bad.into_iter().enumerate() {
        let now = ms(10 + i as u64);
        let sent = keeper.coordinates_received(2, Position { coord, error }, now);
        assert_eq!(sent, Err(why));
        // Peer 2's samples find no coordinate to use: ours stays.
        keeper.rtt(2, ms(20), now);
        assert_eq!(keeper.position(), before);
        assert_eq!(keeper.peer_position(&2), None);
    }
    // Three offences (the configured limit): peer 2 is banned.
    assert!(drain(&mut keeper).contains(&Action::Ban(2)));
    assert!(keeper.refused(&2));
}

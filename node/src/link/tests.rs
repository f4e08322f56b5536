//! The receiving path's tests: who may open a channel, and what a rank
//! holds when many workers send to it.

use std::collections::{BTreeMap, VecDeque};

use zorilla_core::channel::{Ack, CHUNK_BYTES, INITIAL_WINDOW, Outbox, RANK_BUDGET, footprint};
use zorilla_overlay::streams::protocol::decode;
use zorilla_sandbox::Delivery;

use super::inbox::Item;
use super::intake::admit;
use super::*;
use crate::wire::job_copy::Placed;

const CH: ChannelId = ChannelId {
    job: 1,
    from: 2,
    from_incarnation: 3,
    to: 0,
    to_incarnation: 5,
};

#[test]
fn data_reaches_only_the_addressed_worker_from_a_placed_sender() {
    let (peer, other) = (PeerId::random(), PeerId::random());
    let sender = |node, incarnation| Some(Some(Placed { node, incarnation }));
    let inbox = Inbox::new(5);
    // The sender is where the job places it, as the worker it is.
    assert_eq!(admit(CH, peer, &inbox, sender(peer, 3)), None);
    // A channel with state here already is not asked again.
    assert_eq!(admit(CH, peer, &inbox, None), None);
    // Made-up senders open nothing: a rank placed elsewhere, a rank
    // not placed at all, an incarnation not granted yet.
    assert_eq!(
        admit(CH, peer, &inbox, sender(other, 3)),
        Some(Refusal::NotHere)
    );
    assert_eq!(admit(CH, peer, &inbox, Some(None)), Some(Refusal::NotHere));
    assert_eq!(
        admit(CH, peer, &inbox, sender(peer, 2)),
        Some(Refusal::NotHere)
    );
    // A worker that was replaced since is refused for good.
    assert_eq!(
        admit(CH, peer, &inbox, sender(peer, 4)),
        Some(Refusal::Closed)
    );
    // Data for an earlier worker of the receiving rank is refused for
    // good; for a later one, until it starts here.
    assert_eq!(admit(CH, peer, &Inbox::new(6), None), Some(Refusal::Closed));
    assert_eq!(
        admit(CH, peer, &Inbox::new(4), None),
        Some(Refusal::NotHere)
    );
    // The worker ended.
    inbox.close();
    assert_eq!(admit(CH, peer, &inbox, None), Some(Refusal::Closed));
}

/// A job with rank 0 here and every other rank on `peer`.
struct Routes {
    inbox: Arc<Inbox>,
    peer: PeerId,
}

impl JobRoutes for Routes {
    fn inbox(&self, rank: u32) -> Option<Arc<Inbox>> {
        (rank == 0).then(|| self.inbox.clone())
    }
    fn placed(&self, _rank: u32) -> Option<Placed> {
        Some(Placed {
            node: self.peer,
            incarnation: 0,
        })
    }
}

/// Message `n` of rank `from`: tagged with both.
fn tagged(from: u32, n: u32, len: usize) -> Vec<u8> {
    let mut m = vec![from as u8; len.max(8)];
    m[..4].copy_from_slice(&from.to_le_bytes());
    m[4..8].copy_from_slice(&n.to_le_bytes());
    m
}

impl Inbox {
    /// Bytes of the messages queued for the worker, as the rank
    /// counts them.
    fn queued_bytes(&self) -> u64 {
        lock(&self.state)
            .items
            .iter()
            .map(|i| match i {
                Item::Message { payload, .. } => footprint(payload.len() as u64),
                Item::Membership(_) => 0,
            })
            .sum()
    }
}

/// The workers of one peer node sending to rank 0 here through the
/// receiving path of this module (no network: chunks and acks are
/// handed across).
struct Remote {
    out: Outbox,
    /// The messages each worker has yet to send: number and length
    /// (made when sent).
    todo: BTreeMap<u32, VecDeque<(u32, usize)>>,
    state: Arc<PeerInbound>,
}

impl Remote {
    fn channel(from: u32) -> ChannelId {
        ChannelId {
            job: 1,
            from,
            from_incarnation: 0,
            to: 0,
            to_incarnation: 0,
        }
    }

    /// Every worker queues what its credit allows (asking when it is
    /// short), the chunks go across, the acks come back. Whether
    /// anything moved.
    fn pump(&mut self, routes: &Routes) -> bool {
        let mut moved = false;
        for (from, todo) in &mut self.todo {
            let channel = Remote::channel(*from);
            while let Some(&(n, len)) = todo.front() {
                match self.out.admits(channel, len as u64) {
                    Admission::Yes => {
                        todo.pop_front();
                        self.out.push(channel, tagged(*from, n, len));
                    }
                    Admission::Ask => {
                        self.out.ask(channel, len as u64);
                        break;
                    }
                    _ => break,
                }
            }
        }
        while let Some(chunk) = self.out.next_chunk(CHUNK_BYTES) {
            take_chunk(&self.state, Some(routes), 0, chunk).unwrap();
            moved = true;
        }
        let acks: Vec<_> = lock(&self.state.state)
            .channels
            .iter()
            .map(|(c, r)| r.inbound.ack(*c))
            .collect();
        for ack in acks {
            moved |= self.out.on_ack(ack).unwrap();
        }
        moved
    }

    /// Bytes of messages half arrived.
    fn partial_bytes(&self) -> u64 {
        lock(&self.state.state)
            .channels
            .values()
            .map(|c| {
                let unread = c.inbound.completed() - c.inbound.consumed_position();
                c.inbound.buffered_bytes() - unread
            })
            .sum()
    }
}

/// Many workers, on another node and on this one, send to a rank that
/// does not read: what it holds stays within its budget, the initial
/// windows and one large message, far below what they want to send;
/// once it reads, every sender's messages arrive, each sender's in
/// order.
#[tokio::test]
async fn many_senders_cannot_make_a_rank_hold_more_than_its_budget() {
    const REMOTE: u32 = 32;
    const LOCAL: u32 = 8;
    let peer = PeerId::random();
    let inbox = Inbox::new(0);
    let routes = Routes {
        inbox: inbox.clone(),
        peer,
    };
    let largest = 20 << 20;
    let sizes = |from: u32| {
        let mut sizes = vec![10, 100 << 10, 700 << 10];
        if from.is_multiple_of(4) {
            sizes.push(2 << 20);
        }
        if from == 1 {
            sizes.push(largest);
        }
        sizes
    };
    let mut wanted = 0;
    let mut count = BTreeMap::new();
    let mut remote = Remote {
        out: Outbox::new(),
        todo: BTreeMap::new(),
        state: Arc::new(PeerInbound::new(peer)),
    };
    for from in 1..=REMOTE {
        let todo: VecDeque<_> = (sizes(from).into_iter().enumerate())
            .map(|(n, len)| (n as u32, len.max(8)))
            .collect();
        wanted += todo.iter().map(|(_, len)| *len as u64).sum::<u64>();
        count.insert(from, todo.len() as u32);
        remote.todo.insert(from, todo);
    }
    let mut local = Vec::new();
    for from in REMOTE + 1..=REMOTE + LOCAL {
        let sizes = [10, 100 << 10, 1 << 20, 3 << 20];
        wanted += sizes.iter().sum::<u64>();
        count.insert(from, sizes.len() as u32);
        let inbox = inbox.clone();
        local.push(tokio::spawn(async move {
            for (n, len) in sizes.into_iter().enumerate() {
                let m = tagged(from, n as u32, len as usize);
                inbox.push_local(from, m).await.unwrap();
            }
        }));
    }
    let channels = u64::from(REMOTE + LOCAL);
    let bound = RANK_BUDGET + channels * INITIAL_WINDOW + footprint(largest as u64);
    assert!(wanted > 2 * bound, "the senders want more than the bound");
    let held = |remote: &Remote| inbox.queued_bytes() + remote.partial_bytes();
    // The rank does not read: the senders push all they can.
    let mut still = 0;
    for _ in 0..10_000 {
        let moved = remote.pump(&routes);
        let before = inbox.queued_bytes();
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        assert!(held(&remote) <= bound, "{} > {bound}", held(&remote));
        still = if moved || inbox.queued_bytes() != before {
            0
        } else {
            still + 1
        };
        if still >= 10 {
            break;
        }
    }
    assert!(still >= 10, "the senders never stopped");
    let stalled = held(&remote);
    assert!(stalled > RANK_BUDGET / 4, "the budget was lent: {stalled}");
    // Then it reads everything, in arrival order.
    let mut next: BTreeMap<u32, u32> = BTreeMap::new();
    let start = Instant::now();
    let total: u32 = count.values().sum();
    let mut read = 0;
    while read < total {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{read} of {total} read: {next:?}"
        );
        remote.pump(&routes);
        tokio::task::yield_now().await;
        assert!(held(&remote) <= bound);
        if inbox.queued_bytes() == 0 {
            continue;
        }
        let Ok(Delivery::Message { from, payload }) = inbox.recv().await else {
            panic!("not a message");
        };
        let n = u32::from_le_bytes(payload[4..8].try_into().unwrap());
        let expected = next.entry(from).or_default();
        assert_eq!(n, *expected, "rank {from}'s messages out of order");
        assert!(payload[8..].iter().all(|b| *b == from as u8));
        *expected += 1;
        read += 1;
    }
    assert_eq!(next, count);
    for task in local {
        task.await.unwrap();
    }
    assert!(remote.out.all_acked() || remote.pump(&routes));
}

/// Two overlays on loopback (the sender bootstrapping from the receiver,
/// unless started with [`Pair::dialed_by_receiver`]) and their links: job
/// 1 with rank 0 on the receiver, every other rank on the sender.
struct Pair {
    sender: Arc<Links>,
    receiver: Arc<Links>,
    sender_id: PeerId,
    receiver_id: PeerId,
    inbox: Arc<Inbox>,
    _routes: Arc<Routes>,
}

/// The channel from rank 2 on the sender to rank 0 on the receiver.
const PAIR_CHANNEL: ChannelId = ChannelId {
    job: 1,
    from: 2,
    from_incarnation: 0,
    to: 0,
    to_incarnation: 0,
};

/// An overlay on loopback with two lanes beside each direct connection,
/// whatever this machine's default (none on fewer than four cores): the
/// tests are about them.
fn lanes_config(network: &str) -> zorilla_overlay::OverlayConfig {
    zorilla_overlay::OverlayConfig {
        rank_lanes: zorilla_overlay::direct::DEFAULT_LANES,
        ..zorilla_overlay::OverlayConfig::local(network)
    }
}

impl Pair {
    async fn start(network: &str) -> Pair {
        use zorilla_overlay::{Overlay, OverlayConfig};
        let (receiver, mut events) = Overlay::start(lanes_config(network)).await.unwrap();
        tokio::spawn(async move { while events.recv().await.is_some() {} });
        let at = receiver.listen_addrs().await.unwrap();
        let (sender, mut events) = Overlay::start(OverlayConfig {
            bootstrap: at,
            ..lanes_config(network)
        })
        .await
        .unwrap();
        tokio::spawn(async move { while events.recv().await.is_some() {} });
        Pair::with(sender, receiver).await
    }

    /// [`Pair::start`], with its link up: a first message (number 0, of
    /// 10 bytes) went across.
    async fn linked(network: &str) -> Pair {
        let pair = Pair::start(network).await;
        pair.send(0, 10).await;
        assert_eq!(pair.recv(10).await, 0);
        pair
    }

    /// A pair whose receiver listens on loopback address 127.0.9.1 and
    /// dials the sender (on 127.0.0.1): the sender sees the connection
    /// come from 127.0.0.1, where the receiver does not listen, as with
    /// a node on several addresses that listens on one of them.
    async fn dialed_by_receiver(network: &str) -> Pair {
        use zorilla_overlay::{Overlay, OverlayConfig};
        let (sender, mut events) = Overlay::start(lanes_config(network)).await.unwrap();
        tokio::spawn(async move { while events.recv().await.is_some() {} });
        let at = sender.listen_addrs().await.unwrap();
        let (receiver, mut events) = Overlay::start(OverlayConfig {
            bootstrap: at,
            listen: vec!["/ip4/127.0.9.1/tcp/0".parse().unwrap()],
            ..lanes_config(network)
        })
        .await
        .unwrap();
        tokio::spawn(async move { while events.recv().await.is_some() {} });
        Pair::with(sender, receiver).await
    }

    async fn with(
        sender: zorilla_overlay::OverlayHandle,
        receiver: zorilla_overlay::OverlayHandle,
    ) -> Pair {
        let (sender_id, receiver_id) = (sender.local_peer_id(), receiver.local_peer_id());
        let inbox = Inbox::new(0);
        let routes = Arc::new(Routes {
            inbox: inbox.clone(),
            peer: sender_id,
        });
        let receiver = Links::new(receiver_id, receiver);
        receiver.accept().await;
        let weak: Weak<dyn JobRoutes> = Arc::downgrade(&routes) as Weak<dyn JobRoutes>;
        receiver.add_job(1, weak);
        Pair {
            sender: Links::new(sender_id, sender),
            receiver,
            sender_id,
            receiver_id,
            inbox,
            _routes: routes,
        }
    }

    fn plane(links: &Links) -> &Arc<DirectPlane> {
        links.direct.as_ref().expect("the data plane is on")
    }

    async fn send(&self, n: u32, len: usize) {
        let sent = self
            .sender
            .send(
                self.receiver_id,
                PAIR_CHANNEL,
                tagged(2, n, len),
                std::future::pending(),
            )
            .await;
        assert!(matches!(sent, Ok(Ok(()))), "message {n} not sent");
    }

    /// The next message: its number, checked whole.
    async fn recv(&self, len: usize) -> u32 {
        let got = tokio::time::timeout(Duration::from_secs(60), self.inbox.recv()).await;
        let Ok(Ok(Delivery::Message { from, payload })) = got else {
            panic!("no message");
        };
        assert_eq!((from, payload.len()), (2, len.max(8)));
        assert!(
            payload[8..].iter().all(|b| *b == 2),
            "the payload is intact"
        );
        u32::from_le_bytes(payload[4..8].try_into().unwrap())
    }

    /// Bytes of the channel's message that has partly arrived.
    fn partial(&self) -> u64 {
        let Some(state) = lock(&self.receiver.inbound).get(&self.sender_id).cloned() else {
            return 0;
        };
        lock(&state.state)
            .channels
            .get(&PAIR_CHANNEL)
            .map_or(0, |c| {
                let unread = c.inbound.completed() - c.inbound.consumed_position();
                c.inbound.buffered_bytes() - unread
            })
    }
}

/// Waits (bounded) until `done`: as long as `recv` waits for a message
/// (a loaded machine's full test run once went past a 20 s bound here,
/// in the cut-connection test, which passes alone in 0.3 s; why the
/// transfer resumed so late under load was not found).
async fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_take_the_direct_connection_when_one_can_be_made() {
    let pair = Pair::start("link-direct").await;
    for n in 0..3 {
        pair.send(n, 1000).await;
    }
    for n in 0..3 {
        assert_eq!(pair.recv(1000).await, n);
    }
    let (to, from) = (Pair::plane(&pair.receiver), Pair::plane(&pair.sender));
    until("a direct connection", || to.stats().accepted >= 1).await;
    for n in 3..6 {
        pair.send(n, 300_000).await;
        assert_eq!(pair.recv(300_000).await, n);
    }
    assert_eq!(from.stats().dial_failed, 0);
    // The connection and its two lanes (which may still be under way)
    // were dialed and accepted, and nothing else.
    until("the connection and two lanes", || {
        (from.stats().dialed, to.stats().accepted) == (3, 3)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_connection_is_made_to_the_address_the_receiver_listens_on() {
    let pair = Pair::dialed_by_receiver("link-direct-addr").await;
    let (to, from) = (Pair::plane(&pair.receiver), Pair::plane(&pair.sender));
    assert_eq!(to.offer().ip, Some([127, 0, 9, 1].into()));
    pair.send(0, 1000).await;
    assert_eq!(pair.recv(1000).await, 0);
    until("a direct connection", || to.stats().accepted >= 1).await;
    for n in 1..4 {
        pair.send(n, 300_000).await;
        assert_eq!(pair.recv(300_000).await, n);
    }
    assert_eq!(from.stats().dial_failed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_go_over_libp2p_when_no_direct_connection_can_be_made() {
    let pair = Pair::start("link-fallback").await;
    let (to, from) = (Pair::plane(&pair.receiver), Pair::plane(&pair.sender));
    // The receiver offers its port, but nothing listens there.
    to.close();
    pair.send(0, 1000).await;
    assert_eq!(pair.recv(1000).await, 0);
    until("a failed dial", || from.stats().dial_failed >= 1).await;
    for n in 1..4 {
        pair.send(n, 300_000).await;
        assert_eq!(pair.recv(300_000).await, n);
    }
    assert_eq!((to.stats().accepted, from.stats().dialed), (0, 0));
}

/// Aborts the TCP connections to or from `port` (as root: `ss -K`); how
/// many.
fn cut(port: u16) -> usize {
    let out = std::process::Command::new("ss")
        .args(["-K", "-t", "-n", "state", "established"])
        .arg(format!("( sport = :{port} or dport = :{port} )"))
        .output()
        .expect("ss (iproute2) runs");
    assert!(
        out.status.success(),
        "ss -K failed (this test needs root): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .count()
}

/// The direct connection is aborted twice while a 32 MiB message is on
/// its way: it arrives once, intact, and the messages after it in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_connection_cut_mid_message_loses_and_duplicates_nothing() {
    const BIG: usize = 32 << 20;
    let pair = Arc::new(Pair::linked("link-cut").await);
    let to = Pair::plane(&pair.receiver).clone();
    until("a direct connection", || to.stats().accepted >= 1).await;
    let sending = {
        let pair = pair.clone();
        tokio::spawn(async move {
            pair.send(1, BIG).await;
            for n in 2..6 {
                pair.send(n, 100).await;
            }
        })
    };
    let mut aborted = 0;
    for part in [8, 2] {
        let at = (BIG / part) as u64;
        let pair = pair.clone();
        until("part of the message", move || pair.partial() >= at).await;
        aborted += cut(to.offer().port);
    }
    assert!(aborted >= 2, "{aborted} sockets aborted");
    assert_eq!(pair.recv(BIG).await, 1);
    for n in 2..6 {
        assert_eq!(pair.recv(100).await, n);
    }
    sending.await.unwrap();
    assert!(to.stats().accepted >= 2, "the sender came back directly");
}

impl Pair {
    /// The sender's link to the receiver.
    fn out_link(&self) -> Arc<OutLink> {
        lock(&self.sender.out)
            .get(&self.receiver_id)
            .cloned()
            .expect("a link to the receiver")
    }

    /// The local ports of the sender's lanes now.
    fn lane_ports(&self) -> Vec<u16> {
        lock(&self.out_link().lanes)
            .iter()
            .filter_map(|lane| lane.port)
            .collect()
    }

    /// Chunks the sender wrote on lanes so far.
    fn lane_chunks(&self) -> u64 {
        self.out_link()
            .lane_chunks
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A 64 MiB message and several of 4 MiB cross a direct connection and
/// its lanes: each arrives once, intact, in order, and lanes carried
/// chunks of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_messages_are_striped_over_lanes_exactly_once_and_in_order() {
    const BIG: usize = 64 << 20;
    const MID: usize = 4 << 20;
    let pair = Arc::new(Pair::linked("link-lanes").await);
    let to = Pair::plane(&pair.receiver).clone();
    until("a direct connection", || to.stats().accepted >= 1).await;
    let sending = {
        let pair = pair.clone();
        tokio::spawn(async move {
            pair.send(1, BIG).await;
            for n in 2..8 {
                pair.send(n, MID).await;
            }
            pair.send(8, 100).await;
        })
    };
    assert_eq!(pair.recv(BIG).await, 1);
    for n in 2..8 {
        assert_eq!(pair.recv(MID).await, n);
    }
    assert_eq!(pair.recv(100).await, 8);
    sending.await.unwrap();
    let lane_chunks = pair.lane_chunks();
    let all = ((BIG + 6 * MID) / CHUNK_BYTES) as u64;
    // (Every chunk of a striped message goes on a lane; the first ones
    // of the first message may have gone before the lanes were open.)
    assert!(
        lane_chunks >= all * 3 / 4,
        "lanes carried {lane_chunks} of {all} chunks"
    );
    // The primary connection and two lanes.
    assert_eq!(to.stats().accepted, 3);
    assert_eq!(pair.lane_ports().len(), 2);
}

/// A lane is aborted twice while a 64 MiB message is on its way: the
/// link's connection and lanes are made again, and the message arrives
/// once, intact, and the messages after it in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_cut_mid_message_loses_and_duplicates_nothing() {
    const BIG: usize = 64 << 20;
    let pair = Arc::new(Pair::linked("link-lane-cut").await);
    let to = Pair::plane(&pair.receiver).clone();
    {
        let pair = pair.clone();
        until("lanes", move || pair.lane_ports().len() == 2).await;
    }
    let sending = {
        let pair = pair.clone();
        tokio::spawn(async move {
            pair.send(1, BIG).await;
            for n in 2..6 {
                pair.send(n, if n % 2 == 0 { 4 << 20 } else { 100 }).await;
            }
        })
    };
    let mut aborted = 0;
    let mut cut_ports = Vec::new();
    for part in [8, 2] {
        let at = (BIG / part) as u64;
        let p = pair.clone();
        until("part of the message", move || p.partial() >= at).await;
        let p = pair.clone();
        until("lanes", move || p.lane_ports().len() == 2).await;
        let port = pair.lane_ports()[1];
        cut_ports.push(port);
        aborted += cut(port);
    }
    assert!(aborted >= 2, "{aborted} sockets aborted");
    assert_ne!(cut_ports[0], cut_ports[1], "the second cut hit new lanes");
    assert_eq!(pair.recv(BIG).await, 1);
    for n in 2..6 {
        assert_eq!(pair.recv(if n % 2 == 0 { 4 << 20 } else { 100 }).await, n);
    }
    sending.await.unwrap();
    assert!(pair.lane_chunks() > 0);
    // Connections were made again (the primary and its lanes).
    assert!(to.stats().accepted >= 6, "{:?}", to.stats());
}

/// A lane beyond those invited, or naming another connection than the
/// current one, is closed at once; the link's own lanes carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lanes_beyond_those_invited_or_for_another_connection_are_closed() {
    use futures::io::{AsyncReadExt, AsyncWriteExt};
    let pair = Arc::new(Pair::linked("link-lane-bound").await);
    {
        let pair = pair.clone();
        until("lanes", move || pair.lane_ports().len() == 2).await;
    }
    let state = pair.receiver.peer_inbound(pair.sender_id);
    {
        let state = state.clone();
        until("lanes joined", move || lock(&state.state).lanes == 2).await;
    }
    let ticket = lock(&state.state).stream;
    let to = Pair::plane(&pair.receiver);
    let addr = SocketAddr::new([127, 0, 0, 1].into(), to.offer().port);
    let from = Pair::plane(&pair.sender);
    for named in [ticket, ticket + 1, ticket - 1] {
        let mut lane = from.dial_lane(pair.receiver_id, addr).await.unwrap().stream;
        let mut first = Vec::new();
        encode(&Frame::Lane(named), &mut first);
        lane.write_all(&first).await.unwrap();
        lane.flush().await.unwrap();
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(10), lane.read(&mut byte))
            .await
            .expect("the lane is closed");
        assert!(matches!(read, Ok(0) | Err(_)), "ticket {named}: {read:?}");
    }
    let before = pair.lane_chunks();
    pair.send(1, 4 << 20).await;
    assert_eq!(pair.recv(4 << 20).await, 1);
    assert_eq!(pair.lane_chunks() - before, 16, "the lanes carried it");
}

/// A connection's write side as a test sees it: what was written, and
/// whether the socket takes more (else writes wait).
#[derive(Clone, Default)]
struct Socket {
    written: Arc<Mutex<Vec<u8>>>,
    full: Arc<std::sync::atomic::AtomicBool>,
    polls: Arc<std::sync::atomic::AtomicUsize>,
    /// The most bytes one write takes (0: any).
    cap: Arc<std::sync::atomic::AtomicUsize>,
}

/// Nothing ever comes back on it: as a stream a test serves, it is a
/// connection that died without an error (a NAT that dropped its mapping
/// leaves one so).
impl AsyncRead for Socket {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        _: &mut [u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::Poll::Pending
    }
}

impl futures::io::AsyncWrite for Socket {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::sync::atomic::Ordering::SeqCst;
        self.polls.fetch_add(1, SeqCst);
        if self.full.load(SeqCst) {
            return std::task::Poll::Pending;
        }
        let n = match self.cap.load(SeqCst) {
            0 => buf.len(),
            cap => buf.len().min(cap),
        };
        lock(&self.written).extend_from_slice(&buf[..n]);
        std::task::Poll::Ready(Ok(n))
    }

    /// Takes from several slices in one write, as TLS does.
    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::sync::atomic::Ordering::SeqCst;
        self.polls.fetch_add(1, SeqCst);
        if self.full.load(SeqCst) {
            return std::task::Poll::Pending;
        }
        let mut left = match self.cap.load(SeqCst) {
            0 => usize::MAX,
            cap => cap,
        };
        let mut written = lock(&self.written);
        let mut n = 0;
        for buf in bufs {
            let take = buf.len().min(left);
            written.extend_from_slice(&buf[..take]);
            n += take;
            left -= take;
            if left == 0 {
                break;
            }
        }
        std::task::Poll::Ready(Ok(n))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_close(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

impl Socket {
    fn polls(&self) -> usize {
        self.polls.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn set_full(&self, full: bool) {
        self.full.store(full, std::sync::atomic::Ordering::SeqCst);
    }

    /// The numbers of the messages written, in order, each checked whole.
    fn messages(&self) -> Vec<u64> {
        let written = lock(&self.written).clone();
        let mut at = 0;
        let mut seqs = Vec::new();
        while let Some((frame, used)) = decode(&written[at..]).unwrap() {
            let Frame::Data(chunk) = frame else {
                panic!("only data is written");
            };
            assert_eq!((chunk.channel, chunk.offset), (PAIR_CHANNEL, 0));
            assert_eq!(chunk.bytes.len() as u64, chunk.total, "one chunk");
            assert_eq!(chunk.bytes[4..8], (chunk.seq as u32).to_le_bytes());
            seqs.push(chunk.seq);
            at += used;
        }
        assert_eq!(at, written.len(), "whole frames");
        seqs
    }
}

/// Large chunks are written from their message after their frames'
/// heads, small frames from the write buffer, in vectored writes: a socket
/// that takes a few bytes of them at a time gets whole frames, in order,
/// every message intact.
#[test]
fn large_chunks_written_from_their_message_arrive_whole_and_in_order() {
    let link = OutLink::new(PeerId::random());
    let socket = Socket::default();
    socket.cap.store(1000, std::sync::atomic::Ordering::SeqCst);
    link.attach(socket.clone());
    let sizes = [100, 3 * CHUNK_BYTES + 5, 0, 20_000, 7, CHUNK_BYTES];
    {
        let mut s = lock(&link.state);
        // (The receiving rank lent the room.)
        let ack = Ack {
            channel: PAIR_CHANNEL,
            next: 0,
            limit: 8 << 20,
        };
        s.outbox.push(PAIR_CHANNEL, tagged(2, 0, sizes[0]));
        assert!(s.outbox.on_ack(ack).unwrap());
        for (n, len) in sizes.iter().enumerate().skip(1) {
            assert_eq!(s.outbox.admits(PAIR_CHANNEL, *len as u64), Admission::Yes);
            s.outbox.push(PAIR_CHANNEL, tagged(2, n as u32, *len));
        }
    }
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(matches!(
        link.poll_write(&mut cx),
        std::task::Poll::Ready(Ok(()))
    ));
    let written = lock(&socket.written).clone();
    let (mut at, mut messages) = (0, Vec::new());
    let mut building: Vec<u8> = Vec::new();
    while let Some((frame, used)) = decode(&written[at..]).unwrap() {
        let Frame::Data(chunk) = frame else {
            panic!("only data is written");
        };
        assert_eq!(chunk.seq, messages.len() as u64, "in order");
        assert_eq!(chunk.offset, building.len() as u64, "chunks in order");
        building.extend_from_slice(chunk.bytes);
        if building.len() as u64 == chunk.total {
            messages.push(std::mem::take(&mut building));
        }
        at += used;
    }
    assert_eq!(at, written.len(), "whole frames");
    let sent: Vec<_> = (0..sizes.len())
        .map(|n| tagged(2, n as u32, sizes[n]))
        .collect();
    assert_eq!(messages, sent);
}

/// Pushes message `n` (of `len` bytes) on `link`'s outbox and writes it
/// as a sender does.
fn push(link: &OutLink, n: u32, len: usize) -> outlink::Written {
    let mut s = lock(&link.state);
    assert_eq!(
        s.outbox.admits(PAIR_CHANNEL, len as u64),
        Admission::Yes,
        "room for message {n}"
    );
    s.outbox.push(PAIR_CHANNEL, tagged(2, n, len));
    drop(s);
    link.write_or_wake(len)
}

/// Whether `link`'s writer task has been woken (and takes the wake-up).
fn writer_woken(link: &OutLink) -> bool {
    let woken = link.wake.notified();
    futures::FutureExt::now_or_never(woken).is_some()
}

#[test]
fn a_sender_writes_a_small_message_itself_when_the_connection_is_idle() {
    let link = OutLink::new(PeerId::random());
    let socket = Socket::default();
    link.attach(socket.clone());
    for n in 0..3 {
        assert_eq!(push(&link, n, 100), outlink::Written::Now);
        assert!(!writer_woken(&link), "the writer task slept on");
    }
    assert_eq!(socket.messages(), vec![0, 1, 2]);
    assert!(!lock(&link.state).outbox.has_unsent());
}

#[test]
fn a_busy_connection_or_a_large_message_is_left_to_the_writer_task() {
    let link = OutLink::new(PeerId::random());
    // No connection yet: the writer task opens one.
    assert_eq!(push(&link, 0, 100), outlink::Written::Queued);
    assert!(writer_woken(&link));
    // Credit for a large message too.
    let ack = Ack {
        channel: PAIR_CHANNEL,
        next: 0,
        limit: 1 << 20,
    };
    assert!(lock(&link.state).outbox.on_ack(ack).unwrap());
    let socket = Socket::default();
    link.attach(socket.clone());
    // The socket is full: the sender tries once, leaves the rest to the
    // writer task, and the next sender does not even try.
    socket.set_full(true);
    assert_eq!(push(&link, 1, 100), outlink::Written::Queued);
    assert!(writer_woken(&link));
    let polls = socket.polls();
    assert_eq!(push(&link, 2, 100), outlink::Written::Queued);
    assert_eq!(socket.polls(), polls, "a busy connection is not written");
    // Larger messages go through the writer task whatever the connection.
    socket.set_full(false);
    assert_eq!(
        push(&link, 3, outlink::WRITE_NOW_BYTES + 1),
        outlink::Written::Queued
    );
    assert!(writer_woken(&link));
    assert!(socket.messages().is_empty(), "nothing written yet");
    // The writer task writes everything, in order.
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    assert!(matches!(
        link.poll_write(&mut cx),
        std::task::Poll::Ready(Ok(()))
    ));
    assert_eq!(socket.messages(), vec![0, 1, 2, 3]);
    // Idle again: the next small message goes at once.
    assert_eq!(push(&link, 4, 100), outlink::Written::Now);
    assert_eq!(socket.messages(), vec![0, 1, 2, 3, 4]);
}

/// Counts its wake-ups.
#[derive(Default)]
struct Wakes(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Wakes {
    fn count(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

const JOINED: zorilla_sandbox::MembershipChange = zorilla_sandbox::MembershipChange {
    kind: zorilla_sandbox::ChangeKind::Joined,
    rank: 1,
    size: 2,
};

#[test]
fn a_waiting_worker_spins_a_bounded_while_then_sleeps_and_sleeps_at_once_after_a_long_wait() {
    use std::future::Future;
    use std::task::{Context, Poll};
    let inbox = Inbox::new(0);
    let wakes = Arc::new(Wakes::default());
    let waker = std::task::Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    // An empty inbox: the worker polls it again and again (each poll
    // wakes it again at once: it yields), at most SPIN_POLLS times, then
    // sleeps (nothing wakes it).
    let mut recv = Box::pin(inbox.recv());
    let mut polls = 0;
    loop {
        let before = wakes.count();
        assert!(recv.as_mut().poll(&mut cx).is_pending());
        polls += 1;
        if wakes.count() == before {
            break;
        }
        assert!(polls <= super::inbox::SPIN_POLLS + 1, "spins without end");
    }
    assert!(polls > 1, "it never spun");
    // Asleep, well past the spin: a delivery wakes it.
    std::thread::sleep(super::inbox::SPIN * 5);
    let before = wakes.count();
    inbox.push_membership(JOINED);
    assert!(wakes.count() > before, "not woken by the delivery");
    assert!(matches!(
        recv.as_mut().poll(&mut cx),
        Poll::Ready(Ok(Delivery::Membership(JOINED)))
    ));
    // That wait was longer than a spin: the next sleeps at once.
    let mut recv = Box::pin(inbox.recv());
    let before = wakes.count();
    assert!(recv.as_mut().poll(&mut cx).is_pending());
    assert_eq!(wakes.count(), before, "it spun after a long wait");
    inbox.push_membership(JOINED);
    assert!(matches!(
        recv.as_mut().poll(&mut cx),
        Poll::Ready(Ok(Delivery::Membership(JOINED)))
    ));
}

#[test]
fn a_direct_dial_goes_to_the_address_offered_then_to_the_connections() {
    let offer = |ip: Option<[u8; 4]>| Offer {
        port: 7,
        ip: ip.map(IpAddr::from),
    };
    let at = |ip: [u8; 4]| SocketAddr::new(IpAddr::from(ip), 7);
    let lan: IpAddr = [10, 0, 0, 2].into();
    let local: IpAddr = [127, 0, 0, 1].into();
    // Listening on all addresses: the connection's.
    assert_eq!(direct_addrs(offer(None), lan), [at([10, 0, 0, 2])]);
    // On one: that one first.
    assert_eq!(
        direct_addrs(offer(Some([10, 0, 0, 3])), lan),
        [at([10, 0, 0, 3]), at([10, 0, 0, 2])]
    );
    assert_eq!(
        direct_addrs(offer(Some([10, 0, 0, 2])), lan),
        [at([10, 0, 0, 2])]
    );
    assert_eq!(
        direct_addrs(offer(Some([127, 0, 1, 2])), local),
        [at([127, 0, 1, 2]), at([127, 0, 0, 1])]
    );
    // Never this machine's loopback for a peer elsewhere, nor an address
    // that is not one host's.
    for ip in [
        [127, 0, 0, 1],
        [0, 0, 0, 0],
        [224, 0, 0, 1],
        [255, 255, 255, 255],
    ] {
        assert_eq!(direct_addrs(offer(Some(ip)), lan), [at([10, 0, 0, 2])]);
    }
}

/// A stream on which a message went out and nothing ever came back is
/// given up after [`ACK_SILENCE`] (so that the link opens another and
/// sends the message again); a silent stream with nothing waiting for an
/// acknowledgement is kept.
#[tokio::test]
async fn a_stream_that_never_acknowledges_what_was_sent_is_taken_for_broken() {
    use zorilla_overlay::{Overlay, OverlayConfig};
    let (overlay, mut events) = Overlay::start(OverlayConfig::local("link-silent"))
        .await
        .unwrap();
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    let links = Links::new(overlay.local_peer_id(), overlay);
    let link = OutLink::new(PeerId::random());
    tokio::time::pause();

    let idle = tokio::time::timeout(
        ACK_SILENCE * 5,
        serve_outbound(&links, &link, Socket::default(), false, None),
    )
    .await;
    assert!(
        idle.is_err(),
        "a stream with nothing to acknowledge ended: {idle:?}"
    );

    push(&link, 1, 100);
    let start = Instant::now();
    let broken = tokio::time::timeout(
        ACK_SILENCE * 5,
        serve_outbound(&links, &link, Socket::default(), false, None),
    )
    .await;
    assert!(matches!(broken, Ok(Err(_))), "{broken:?}");
    assert!(
        start.elapsed() >= ACK_SILENCE,
        "given up after {:?}",
        start.elapsed()
    );
    assert!(
        lock(&link.state).outbox.awaits_ack(),
        "the message is still kept"
    );
}

/// A chunk of a message that is not complete yet owes its sender an ack
/// (unchanged) all the same: while a large message arrives slowly, its
/// sender hears from this node ([`ACK_SILENCE`]).
#[tokio::test]
async fn part_of_a_message_owes_its_sender_an_ack() {
    let peer = PeerId::random();
    let inbox = Inbox::new(0);
    let routes = Routes {
        inbox: inbox.clone(),
        peer,
    };
    let mut remote = Remote {
        out: Outbox::new(),
        todo: BTreeMap::from([(1, VecDeque::from([(0, 600 << 10)]))]),
        state: Arc::new(PeerInbound::new(peer)),
    };
    let channel = Remote::channel(1);
    // The ask and its grant (the rank lends room for the message).
    while remote.out.admits(channel, 600 << 10) != Admission::Yes {
        assert!(remote.pump(&routes), "no room for the message");
    }
    remote.out.push(channel, tagged(1, 0, 600 << 10));
    lock(&remote.state.state).pending.clear();
    let first = remote.out.next_chunk(CHUNK_BYTES).expect("a chunk");
    assert!(first.bytes.len() < 600 << 10, "part of the message");
    take_chunk(&remote.state, Some(&routes), 0, first).unwrap();
    assert!(
        lock(&remote.state.state).pending.contains(&channel),
        "no ack owed for part of a message"
    );
}

/// Polls `future` once with a waker that does nothing.
fn poll_once<F: std::future::Future + Unpin>(future: &mut F) -> std::task::Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    std::pin::Pin::new(future).poll(&mut cx)
}

/// Waits for the receive `recv`, polling it (it spins or sleeps; the
/// deliveries come from this thread, so a few polls suffice).
fn finish<F: std::future::Future + Unpin>(recv: &mut F) -> F::Output {
    for _ in 0..=super::inbox::SPIN_POLLS + 2 {
        if let std::task::Poll::Ready(out) = poll_once(recv) {
            return out;
        }
    }
    panic!("the receive did not complete");
}

#[test]
fn a_message_from_a_worker_of_this_node_is_copied_once_straight_into_the_waiting_workers_buffer() {
    let inbox = Inbox::new(0);
    let lend = zorilla_sandbox::Lend::owned(1 << 20);
    let buffer = lend.buffer().clone();
    let hand_over = |from: u32, bytes: &[u8]| {
        let reserve = inbox.clone().reserve_local(from, bytes.len());
        let mut reserve = Box::pin(reserve);
        match poll_once(&mut reserve) {
            std::task::Poll::Ready(handover) => handover.unwrap().hand_over(bytes).unwrap(),
            std::task::Poll::Pending => panic!("no credit"),
        }
    };
    // Many times the rank's budget goes through the buffer: the credit of
    // what is written there comes back when the worker takes it.
    let rounds = (RANK_BUDGET / (1 << 20)) as u32 * 3;
    for n in 0..rounds {
        let mut recv = Box::pin(inbox.recv_into(&buffer));
        assert!(poll_once(&mut recv).is_pending(), "nothing is there yet");
        let message = tagged(7, n, 1 << 20);
        hand_over(7, &message);
        // Not queued: written into the buffer.
        assert!(lock(&inbox.state).items.is_empty());
        assert_eq!(
            finish(&mut recv).unwrap(),
            zorilla_sandbox::Received::Written {
                from: 7,
                len: 1 << 20
            }
        );
        assert_eq!(buffer.read(1 << 20).unwrap(), message);
    }
    // A message sent while the worker does not wait is queued (copied),
    // and a receive with a buffer takes it from the queue.
    hand_over(7, b"queued");
    let mut recv = Box::pin(inbox.recv_into(&buffer));
    assert_eq!(
        finish(&mut recv).unwrap(),
        zorilla_sandbox::Received::Delivery(Delivery::Message {
            from: 7,
            payload: b"queued".to_vec()
        })
    );
    // Too large for the buffer: queued.
    let mut recv = Box::pin(inbox.recv_into(&buffer));
    assert!(poll_once(&mut recv).is_pending());
    hand_over(7, &vec![1; (1 << 20) + 1]);
    assert_eq!(lock(&inbox.state).items.len(), 1);
    assert!(matches!(
        finish(&mut recv).unwrap(),
        zorilla_sandbox::Received::Delivery(Delivery::Message { .. })
    ));
}

#[test]
fn a_message_written_into_a_buffer_whose_receive_was_dropped_is_delivered_once_and_first() {
    let inbox = Inbox::new(0);
    let lend = zorilla_sandbox::Lend::owned(64);
    let put = |from, bytes: &[u8]| {
        let mut reserve = Box::pin(inbox.clone().reserve_local(from, bytes.len()));
        let std::task::Poll::Ready(handover) = poll_once(&mut reserve) else {
            panic!("no credit");
        };
        handover.unwrap().hand_over(bytes).unwrap();
    };
    let mut recv = Box::pin(inbox.recv_into(lend.buffer()));
    assert!(poll_once(&mut recv).is_pending());
    put(3, b"first");
    put(3, b"second");
    // The receive times out (its future is dropped) after the first was
    // written into its buffer: it goes back to the head of the queue.
    drop(recv);
    let mut recv = Box::pin(inbox.recv());
    let mut got = Vec::new();
    for _ in 0..2 {
        match finish(&mut recv).unwrap() {
            Delivery::Message { payload, .. } => got.push(payload),
            other => panic!("unexpected {other:?}"),
        }
        recv = Box::pin(inbox.recv());
    }
    assert_eq!(got, vec![b"first".to_vec(), b"second".to_vec()]);
    assert!(poll_once(&mut recv).is_pending(), "delivered twice");
}

#[test]
fn a_message_in_one_chunk_from_another_node_is_written_straight_into_the_waiting_workers_buffer() {
    let inbox = Inbox::new(0);
    let peer = PeerId::random();
    let routes = Routes {
        inbox: inbox.clone(),
        peer,
    };
    let mut remote = Remote {
        out: Outbox::new(),
        todo: BTreeMap::new(),
        state: Arc::new(PeerInbound::new(peer)),
    };
    let lend = zorilla_sandbox::Lend::owned(CHUNK_BYTES);
    // Three messages of one chunk each, then one of two chunks; each sent
    // while the worker waits with its buffer.
    let sizes = [0, 8, CHUNK_BYTES, CHUNK_BYTES + 1];
    for (n, len) in sizes.into_iter().enumerate() {
        let mut recv = Box::pin(inbox.recv_into(lend.buffer()));
        assert!(poll_once(&mut recv).is_pending());
        remote.todo.entry(4).or_default().push_back((n as u32, len));
        for _ in 0..100 {
            if !remote.pump(&routes) {
                break;
            }
        }
        let message = tagged(4, n as u32, len);
        match finish(&mut recv).unwrap() {
            zorilla_sandbox::Received::Written { from, len } => {
                assert!(message.len() <= CHUNK_BYTES, "a larger one is built first");
                assert_eq!((from, lend.buffer().read(len).unwrap()), (4, message));
            }
            zorilla_sandbox::Received::Delivery(Delivery::Message { from, payload }) => {
                assert!(message.len() > CHUNK_BYTES, "one chunk was built");
                assert_eq!((from, payload), (4, message));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// A chunk of a message, kept to be taken in any order.
struct Owned {
    seq: u64,
    offset: u64,
    total: u64,
    bytes: Vec<u8>,
}

impl Remote {
    /// Message `n` of `len` bytes from `from`, once its credit admits it
    /// (asked for and granted through `routes`): its chunks, in order, not
    /// yet taken by this node.
    fn chunks(&mut self, routes: &Routes, from: u32, n: u32, len: usize) -> Vec<Owned> {
        let channel = Remote::channel(from);
        for _ in 0..100 {
            match self.out.admits(channel, len as u64) {
                Admission::Yes => break,
                Admission::Ask => self.out.ask(channel, len as u64),
                _ => {}
            }
            assert!(self.pump(routes), "no room for the message");
        }
        self.out.push(channel, tagged(from, n, len));
        let mut chunks = Vec::new();
        while let Some(c) = self.out.next_chunk(CHUNK_BYTES) {
            chunks.push(Owned {
                seq: c.seq,
                offset: c.offset,
                total: c.total,
                bytes: c.bytes.to_vec(),
            });
        }
        chunks
    }

    /// This node takes `chunk` of `from`'s channel.
    fn take(&self, routes: &Routes, from: u32, chunk: &Owned) {
        let chunk = zorilla_core::channel::Chunk {
            channel: Remote::channel(from),
            seq: chunk.seq,
            offset: chunk.offset,
            total: chunk.total,
            bytes: &chunk.bytes,
        };
        take_chunk(&self.state, Some(routes), 0, chunk).unwrap();
    }
}

/// The receive `recv` returns message `n` of `len` bytes from rank 4,
/// written whole into `lend`'s buffer.
fn assert_written<F>(recv: &mut F, lend: &zorilla_sandbox::Lend, n: u32, len: usize)
where
    F: std::future::Future<Output = Result<zorilla_sandbox::Received, TransportError>> + Unpin,
{
    let written = finish(recv).unwrap();
    assert_eq!(written, zorilla_sandbox::Received::Written { from: 4, len });
    assert!(
        lend.buffer().read(len).unwrap() == tagged(4, n, len),
        "message {n} not intact"
    );
}

fn remote_to(inbox: &Arc<Inbox>) -> (Routes, Remote) {
    let peer = PeerId::random();
    let routes = Routes {
        inbox: inbox.clone(),
        peer,
    };
    let remote = Remote {
        out: Outbox::new(),
        todo: BTreeMap::new(),
        state: Arc::new(PeerInbound::new(peer)),
    };
    (routes, remote)
}

#[test]
fn a_message_of_many_chunks_from_another_node_is_built_straight_in_the_waiting_workers_buffer() {
    let inbox = Inbox::new(0);
    let (routes, mut remote) = remote_to(&inbox);
    let lend = zorilla_sandbox::Lend::owned(4 * CHUNK_BYTES);
    let len = 3 * CHUNK_BYTES + 5;
    // The worker waits before the first chunk; they come out of order,
    // as from lanes: none is held on the way.
    let chunks = remote.chunks(&routes, 4, 0, len);
    let mut recv = Box::pin(inbox.recv_into(lend.buffer()));
    assert!(poll_once(&mut recv).is_pending());
    for i in [2, 0, 3] {
        remote.take(&routes, 4, &chunks[i]);
        assert!(poll_once(&mut recv).is_pending(), "not whole yet");
        assert_eq!(remote.partial_bytes(), 0, "chunk {i} held on the way");
    }
    remote.take(&routes, 4, &chunks[1]);
    assert_written(&mut recv, &lend, 0, len);
    // The worker waits only after two chunks of the next arrived: they
    // are copied into its buffer, and the rest written there.
    remote.pump(&routes);
    let chunks = remote.chunks(&routes, 4, 1, len);
    remote.take(&routes, 4, &chunks[0]);
    remote.take(&routes, 4, &chunks[1]);
    assert_eq!(remote.partial_bytes(), 2 * CHUNK_BYTES as u64);
    let mut recv = Box::pin(inbox.recv_into(lend.buffer()));
    assert!(poll_once(&mut recv).is_pending());
    remote.take(&routes, 4, &chunks[2]);
    assert_eq!(remote.partial_bytes(), 0, "not lent mid-way");
    remote.take(&routes, 4, &chunks[3]);
    assert_written(&mut recv, &lend, 1, len);
    assert!(lock(&inbox.state).items.is_empty(), "delivered twice");
}

#[test]
fn a_message_half_built_in_a_buffer_whose_receive_ends_is_delivered_whole_once() {
    let inbox = Inbox::new(0);
    let (routes, mut remote) = remote_to(&inbox);
    let lend = zorilla_sandbox::Lend::owned(4 * CHUNK_BYTES);
    let len = 3 * CHUNK_BYTES + 5;
    // The receive times out half way: what was written goes back to the
    // channel, and the message arrives whole from the queue.
    let chunks = remote.chunks(&routes, 4, 0, len);
    let mut recv = Box::pin(inbox.recv_into(lend.buffer()));
    assert!(poll_once(&mut recv).is_pending());
    remote.take(&routes, 4, &chunks[0]);
    remote.take(&routes, 4, &chunks[2]);
    assert_eq!(remote.partial_bytes(), 0, "not lent");
    drop(recv);
    assert_eq!(
        remote.partial_bytes(),
        2 * CHUNK_BYTES as u64,
        "not given back"
    );
    remote.take(&routes, 4, &chunks[1]);
    remote.take(&routes, 4, &chunks[3]);
    let mut recv = Box::pin(inbox.recv());
    match finish(&mut recv).unwrap() {
        Delivery::Message { from, payload } => assert!(from == 4 && payload == tagged(4, 0, len)),
        other => panic!("unexpected {other:?}"),
    }
    // A message from another sender comes while one is being built in the
    // buffer: it is queued and delivered first; the one being built goes
    // back to its channel, and is lent again to the next receive.
    remote.pump(&routes);
    let chunks = remote.chunks(&routes, 4, 1, len);
    let mut recv = Box::pin(inbox.recv_into(lend.buffer()));
    assert!(poll_once(&mut recv).is_pending());
    remote.take(&routes, 4, &chunks[0]);
    let mut reserve = Box::pin(inbox.clone().reserve_local(9, 3));
    let std::task::Poll::Ready(handover) = poll_once(&mut reserve) else {
        panic!("no credit");
    };
    handover.unwrap().hand_over(b"hey").unwrap();
    let local = zorilla_sandbox::Received::Delivery(Delivery::Message {
        from: 9,
        payload: b"hey".to_vec(),
    });
    assert_eq!(finish(&mut recv).unwrap(), local);
    drop(recv);
    assert_eq!(remote.partial_bytes(), CHUNK_BYTES as u64, "not given back");
    let mut recv = Box::pin(inbox.recv_into(lend.buffer()));
    assert!(poll_once(&mut recv).is_pending());
    for chunk in &chunks[1..] {
        remote.take(&routes, 4, chunk);
    }
    assert_written(&mut recv, &lend, 1, len);
    drop(recv);
    // The stream is lost half way: the sender sends the message again
    // from its start, and it is built in the buffer anew.
    remote.pump(&routes);
    let chunks = remote.chunks(&routes, 4, 2, len);
    let mut recv = Box::pin(inbox.recv_into(lend.buffer()));
    assert!(poll_once(&mut recv).is_pending());
    remote.take(&routes, 4, &chunks[0]);
    remote.take(&routes, 4, &chunks[1]);
    for c in lock(&remote.state.state).channels.values_mut() {
        c.inbound.stream_lost();
    }
    for chunk in &chunks {
        remote.take(&routes, 4, chunk);
    }
    assert_written(&mut recv, &lend, 2, len);
    drop(recv);
    let mut recv = Box::pin(inbox.recv());
    assert!(poll_once(&mut recv).is_pending(), "delivered twice");
}

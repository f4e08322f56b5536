//! A job's replicated state over a small simulated network: replication,
//! commitment, the home's death and its successor, an old primary that
//! comes back, a partition that heals, and peers that send nonsense.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use std::sync::Arc;

use zorilla_core::replica::{
    Action, Epoch, MAX_ENTRIES_PER_APPEND, Mandate, Msg, Refusal, Replica, Signature, Signer,
    StandInSigner, Statement, Timing, Vote,
};

type R = Replica<u32, String>;

/// Node `n`'s signer.
fn signer(n: u32) -> Arc<dyn Signer<u32>> {
    Arc::new(StandInSigner::new(n))
}

const STEP: Duration = Duration::from_millis(50);
const DELAY: Duration = Duration::from_millis(5);

/// Replicas of one job on nodes 0.., node 0 the home; messages take
/// [`DELAY`]; nodes can be down or cut off from each other.
struct Net {
    now: Duration,
    replicas: BTreeMap<u32, R>,
    down: BTreeSet<u32>,
    /// Pairs that cannot reach each other.
    cut: BTreeSet<(u32, u32)>,
    queue: VecDeque<(Duration, u32, u32, Msg<u32, String>)>,
    /// Every (epoch, node) that became primary.
    primaries: Vec<(Epoch<u32>, u32)>,
    committed: BTreeMap<u32, u64>,
    /// Every entry some primary saw committed, when it did.
    ever_committed: BTreeSet<String>,
    dropped: BTreeMap<u32, Vec<String>>,
    stepped_down: BTreeSet<u32>,
    /// Every message refused: by whom, from whom, why.
    refused: Vec<(u32, u32, Refusal)>,
}

impl Net {
    /// A home and `copies` copies, all known to each other.
    fn new(copies: u32) -> Net {
        let timing = Timing::default();
        let mut replicas = BTreeMap::new();
        replicas.insert(0, R::primary(7, 0, Duration::ZERO, timing, signer(0)));
        for n in 1..=copies {
            replicas.insert(n, R::copy(7, n, 0, Duration::ZERO, timing, signer(n)));
        }
        let mut net = Net {
            now: Duration::ZERO,
            replicas,
            down: BTreeSet::new(),
            cut: BTreeSet::new(),
            queue: VecDeque::new(),
            primaries: vec![(
                Epoch {
                    term: 0,
                    primary: 0,
                },
                0,
            )],
            committed: BTreeMap::new(),
            ever_committed: BTreeSet::new(),
            dropped: BTreeMap::new(),
            stepped_down: BTreeSet::new(),
            refused: Vec::new(),
        };
        let out = net.replicas.get_mut(&0).unwrap().set_copies(1..=copies, 1);
        net.take(0, out);
        net
    }

    fn take(&mut self, node: u32, actions: Vec<Action<u32, String>>) {
        for a in actions {
            match a {
                Action::Send { to, msg } => self.queue.push_back((self.now + DELAY, node, to, msg)),
                Action::BecamePrimary { epoch } => self.primaries.push((epoch, node)),
                Action::Committed { index } => {
                    self.committed.insert(node, index);
                    let held = self.replicas[&node].entries().take(index as usize);
                    self.ever_committed.extend(held.cloned());
                }
                Action::Dropped { entries } => {
                    self.dropped.entry(node).or_default().extend(entries)
                }
                Action::SteppedDown { .. } => {
                    self.stepped_down.insert(node);
                }
                Action::Appended { .. } => {}
                Action::Refused { from, why } => self.refused.push((node, from, why)),
            }
        }
    }

    fn reachable(&self, a: u32, b: u32) -> bool {
        !self.down.contains(&a)
            && !self.down.contains(&b)
            && !self.cut.contains(&(a, b))
            && !self.cut.contains(&(b, a))
    }

    /// Runs for `d`: messages delivered, every live replica ticked each
    /// [`STEP`]. Checks after every event that no epoch has two primaries.
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now += STEP;
            while let Some(pos) = self.queue.iter().position(|(at, ..)| *at <= self.now) {
                let (_, from, to, msg) = self.queue.remove(pos).unwrap();
                if !self.reachable(from, to) {
                    continue;
                }
                let now = self.now;
                let Some(replica) = self.replicas.get_mut(&to) else {
                    if let Some(answer) = R::answer_without_replica(7, &msg, &*signer(to)) {
                        self.queue.push_back((now + DELAY, to, from, answer));
                    }
                    continue;
                };
                let out = replica.on_message(now, from, msg);
                self.take(to, out);
                self.check();
            }
            for n in self.replicas.keys().copied().collect::<Vec<_>>() {
                if self.down.contains(&n) {
                    continue;
                }
                let now = self.now;
                let out = self.replicas.get_mut(&n).unwrap().tick(now);
                self.take(n, out);
                self.check();
            }
        }
    }

    fn check(&self) {
        let mut seen = BTreeMap::new();
        for (epoch, node) in &self.primaries {
            assert_eq!(epoch.primary, *node, "an epoch names its primary");
            if let Some(other) = seen.insert(epoch.clone(), *node) {
                panic!("epoch {epoch:?} had two primaries: {other} and {node}");
            }
        }
    }

    fn propose(&mut self, node: u32, entry: &str) -> u64 {
        let mut out = Vec::new();
        let index = self
            .replicas
            .get_mut(&node)
            .unwrap()
            .propose(entry.to_string(), &mut out)
            .unwrap();
        self.take(node, out);
        index
    }

    /// The live replicas that take themselves for primary.
    fn live_primaries(&self) -> Vec<u32> {
        self.replicas
            .iter()
            .filter(|(n, r)| !self.down.contains(n) && r.is_primary())
            .map(|(n, _)| *n)
            .collect()
    }

    fn log(&self, node: u32) -> Vec<String> {
        self.replicas[&node].entries().cloned().collect()
    }
}

#[test]
fn the_primary_replicates_and_commits_once_a_copy_holds_an_entry() {
    let mut net = Net::new(2);
    let i = net.propose(0, "rank 0 placed");
    assert_eq!(i, 1);
    assert_eq!(net.replicas[&0].committed(), 0, "no copy holds it yet");
    // There and back.
    net.run(2 * STEP);
    assert_eq!(net.committed.get(&0), Some(&1));
    for n in 1..=2 {
        assert_eq!(net.log(n), vec!["rank 0 placed".to_string()]);
    }
    // Heartbeats keep the copies' lease: nothing changes over a long quiet
    // time.
    net.run(Duration::from_secs(20));
    assert_eq!(net.live_primaries(), vec![0]);
    assert_eq!(net.primaries.len(), 1);
}

/// The primary knows when every copy holds an entry, not only enough of
/// them (it forgets an ended job only then: a copy that missed the end
/// would otherwise stand for election for a finished job).
#[test]
fn the_primary_knows_when_every_copy_holds_the_log() {
    let mut net = Net::new(2);
    net.cut.insert((0, 2));
    net.propose(0, "job ended");
    net.run(4 * STEP);
    assert_eq!(
        net.committed.get(&0),
        Some(&1),
        "one copy holds it: committed"
    );
    assert_eq!(net.replicas[&0].held_by_every_copy(), 0, "copy 2 does not");
    assert_eq!(
        net.replicas[&1].held_by_every_copy(),
        0,
        "a copy knows nothing of it"
    );
    net.cut.clear();
    net.run(Duration::from_secs(2));
    assert_eq!(net.replicas[&0].held_by_every_copy(), 1);
}

/// A copy the primary drops (an extra copy no longer needed once the
/// ranks' nodes hold copies) hears so, and never stands for election when
/// heartbeats stop coming to it: no second primary appears, and when the
/// home dies only the copies it kept elect one.
#[test]
fn a_dropped_copy_never_stands_for_election() {
    let mut net = Net::new(3);
    net.propose(0, "spec");
    net.run(2 * STEP);
    let out = net.replicas.get_mut(&0).unwrap().set_copies([1, 2], 1);
    net.take(0, out);
    net.run(2 * STEP);
    assert!(net.replicas[&3].is_dropped(), "copy 3 heard it was dropped");
    assert!(!net.replicas[&1].is_dropped());
    // Long past its lease: copy 3 hears nothing, and stays quiet.
    net.run(Duration::from_secs(10));
    assert_eq!(net.live_primaries(), vec![0]);
    assert_eq!(net.primaries.len(), 1, "{:?}", net.primaries);
    // The home dies: one of the copies it kept succeeds it, never 3.
    net.down.insert(0);
    net.run(Duration::from_secs(5));
    let live = net.live_primaries();
    assert_eq!(live.len(), 1, "{live:?}");
    assert!(live[0] == 1 || live[0] == 2, "{live:?}");
}

/// Messages between nodes are not ordered (each goes on its own stream):
/// a copy can miss that it was dropped (here the notice and its repeats
/// are lost; an invitation that overtakes the notice does the same). Its
/// lease then runs out, and the copies it names do not answer it (they
/// know it is none): alone it never wins an election, and once it reaches
/// the live home again, the home tells it.
#[test]
fn a_copy_that_missed_its_drop_does_not_take_over_from_a_live_home() {
    let mut net = Net::new(3);
    net.propose(0, "spec");
    net.run(2 * STEP);
    net.cut.insert((0, 3));
    let out = net.replicas.get_mut(&0).unwrap().set_copies([1], 1);
    net.take(0, out);
    net.run(Duration::from_secs(4));
    assert!(!net.replicas[&3].is_dropped(), "copy 3 missed the notice");
    assert_eq!(net.primaries.len(), 1, "{:?}", net.primaries);
    net.cut.clear();
    assert!(net.replicas[&2].is_dropped());
    net.run(Duration::from_secs(10));
    assert_eq!(net.live_primaries(), vec![0]);
    assert_eq!(net.primaries.len(), 1, "{:?}", net.primaries);
    assert!(net.replicas[&3].is_dropped(), "the home told copy 3");
}

/// A copy the primary named but that holds no replica (never reached, or
/// it restarted without its state) says so when the other stands: with
/// it, the survivor is a majority of the copies, and takes over.
#[test]
fn a_copy_that_holds_no_replica_counts_toward_the_majority() {
    let mut net = Net::new(2);
    net.propose(0, "spec");
    net.run(2 * STEP);
    net.replicas.remove(&2);
    net.down.insert(0);
    net.run(Duration::from_secs(3));
    assert_eq!(net.live_primaries(), vec![1]);
    assert_eq!(net.log(1), vec!["spec".to_string()]);
}

/// The home and one of its two copies die together: the other copy alone
/// is no majority of the two, and stays a copy even once its node found the
/// other gone (nobody could check its word that the other was gone, so its
/// votes would prove nothing). With three copies, the two left are a
/// majority and one of them takes over.
#[test]
fn a_copy_left_alone_never_takes_over_without_a_majority_of_the_copies() {
    let mut net = Net::new(2);
    net.propose(0, "spec");
    net.run(2 * STEP);
    net.down.insert(0);
    net.down.insert(2);
    net.run(Duration::from_secs(5));
    assert!(net.live_primaries().is_empty(), "no majority");
    let now = net.now;
    for dead in [0, 2] {
        let out = net.replicas.get_mut(&1).unwrap().peer_gone(now, &dead);
        net.take(1, out);
    }
    net.run(Duration::from_secs(3));
    assert!(net.live_primaries().is_empty(), "still no majority");

    let mut net = Net::new(3);
    net.propose(0, "spec");
    net.run(2 * STEP);
    net.down.insert(0);
    net.down.insert(3);
    net.run(Duration::from_secs(5));
    let primaries = net.live_primaries();
    assert_eq!(primaries.len(), 1, "{primaries:?}");
    assert_eq!(net.log(primaries[0]), vec!["spec".to_string()]);
    assert!(net.refused.is_empty(), "{:?}", net.refused);
}

/// What a copy `voter` signs standing in the election after `replaced`.
fn stood(voter: u32, replaced: &Epoch<u32>, len: u64) -> (Vote<u32>, Signature) {
    let vote = Vote::Stood { last: None, len };
    let sig = signer(voter).sign(&Statement::Vote {
        job: 7,
        replaced,
        vote: &vote,
    });
    (vote, sig)
}

/// An append of `from` naming itself primary of `epoch`.
fn claim(epoch: &Epoch<u32>, mandate: Option<Mandate<u32>>) -> Msg<u32, String> {
    Msg::Append {
        epoch: epoch.clone(),
        after: 0,
        after_epoch: None,
        entries: Vec::new(),
        copies: Some(BTreeSet::from([1, 2, 3, 9])),
        roster: None,
        version: u64::MAX,
        end: 0,
        mandate,
    }
}

/// A node that names itself primary of a job under a higher term (the
/// attack of issue 28: a stranger's `Append` with `end: 0` dropped every
/// copy's log, and the home stepped down) changes nothing and is refused,
/// whether it is a stranger or one of the job's own copies, with no
/// mandate, with votes it forged, with too few votes, or with votes that
/// elect another node. A real election's mandate is taken.
#[test]
fn a_forged_higher_epoch_changes_nothing_and_is_refused() {
    let mut net = Net::new(3);
    net.propose(0, "spec");
    net.propose(0, "grant");
    net.run(4 * STEP);
    let first = Epoch {
        term: 0,
        primary: 0,
    };
    let forged = |primary: u32| Epoch {
        term: 1 << 62,
        primary,
    };
    let next = |primary: u32| Epoch { term: 1, primary };
    // The copies as the home signed them (its first and only set).
    let copies = BTreeSet::from([1, 2, 3]);
    let roster = signer(0).sign(&Statement::Roster {
        job: 7,
        epoch: &first,
        version: 1,
        copies: &copies,
    });
    let good_votes = |who: &[u32]| Mandate {
        replaced: first.clone(),
        copies: copies.clone(),
        version: 1,
        roster: roster.clone(),
        votes: who.iter().map(|v| (*v, stood(*v, &first, 2))).collect(),
        before: None,
    };
    let mut bad_signature = good_votes(&[1, 2, 3]);
    bad_signature.votes.get_mut(&3).unwrap().1 = Signature(vec![7; 64]);
    // A copy that shows a set of copies of only itself, signed by itself.
    let mut alone = good_votes(&[2]);
    alone.copies = BTreeSet::from([2]);
    alone.roster = signer(2).sign(&Statement::Roster {
        job: 7,
        epoch: &first,
        version: 1,
        copies: &alone.copies,
    });
    /// Who claims what epoch with what proof, and why it is refused.
    type Attack = (u32, Epoch<u32>, Option<Mandate<u32>>, Refusal);
    let attacks: Vec<Attack> = vec![
        // A stranger, and a copy, with no mandate.
        (9, forged(9), None, Refusal::NoMandate),
        (2, forged(2), None, Refusal::NoMandate),
        // A first term needs none, and names the first home only.
        (
            3,
            Epoch {
                term: 0,
                primary: 3,
            },
            None,
            Refusal::NoMandate,
        ),
        // A term that does not follow the one replaced.
        (
            2,
            forged(2),
            Some(good_votes(&[1, 2, 3])),
            Refusal::BadMandate,
        ),
        // The copy's own vote alone.
        (2, next(2), Some(good_votes(&[2])), Refusal::TooFewVotes),
        // Votes it signed for the others.
        (2, next(2), Some(bad_signature), Refusal::BadSignature),
        // Copies the home never named.
        (2, next(2), Some(alone), Refusal::BadSignature),
        // A real majority that elects another copy (3 wins ties among equal
        // logs by the rendezvous hash, or 1 or 2 does: never all of them).
        (
            9,
            next(9),
            Some(good_votes(&[1, 2, 3])),
            Refusal::BadMandate,
        ),
    ];
    for (from, epoch, mandate, why) in attacks {
        for to in [0, 1, 3] {
            if to == from {
                continue;
            }
            let replica = net.replicas.get_mut(&to).unwrap();
            let out = replica.on_message(net.now, from, claim(&epoch, mandate.clone()));
            assert_eq!(
                out,
                vec![Action::Refused { from, why }],
                "{from} claiming {epoch:?} at {to}"
            );
            // Alive vouching for it is no better.
            let out = replica.on_message(
                net.now,
                from,
                Msg::Alive {
                    epoch: epoch.clone(),
                    mandate: mandate.clone(),
                },
            );
            assert!(
                out.is_empty() || out == vec![Action::Refused { from, why }],
                "{out:?}"
            );
        }
        assert_eq!(net.live_primaries(), vec![0]);
        for n in 0..=3 {
            assert_eq!(net.replicas[&n].epoch(), &first);
            assert_eq!(net.log(n), vec!["spec".to_string(), "grant".to_string()]);
        }
    }
    assert!(net.stepped_down.is_empty());
    // The job goes on under its home.
    net.propose(0, "more");
    net.run(4 * STEP);
    assert_eq!(net.log(3).len(), 3);
    // A real election: the mandate of the copy the votes elect is taken
    // by every other replica, the old home included when it comes back.
    net.down.insert(0);
    net.run(Duration::from_secs(5));
    let primaries = net.live_primaries();
    assert_eq!(primaries.len(), 1, "{primaries:?}");
    net.down.remove(&0);
    net.propose(primaries[0], "after");
    net.run(Duration::from_secs(2));
    assert!(net.stepped_down.contains(&0), "the old home stepped down");
    for n in 0..=3 {
        assert_eq!(
            net.replicas[&n].epoch(),
            net.replicas[&primaries[0]].epoch()
        );
    }
    assert!(net.refused.is_empty(), "{:?}", net.refused);
}

/// An append that names an older set of copies and arrives after a newer
/// one does not undo it: a copy the home dropped and placed again stays a
/// copy, whatever order the two messages come in.
#[test]
fn an_older_set_of_copies_that_arrives_late_is_ignored() {
    let mut net = Net::new(3);
    net.propose(0, "spec");
    net.run(2 * STEP);
    let out = net.replicas.get_mut(&0).unwrap().set_copies([1, 2], 1);
    net.take(0, out);
    let out = net.replicas.get_mut(&0).unwrap().set_copies([1, 2, 3], 1);
    net.take(0, out);
    // What goes to copy 3 arrives newest first.
    let to_3: Vec<usize> = (0..net.queue.len())
        .filter(|i| net.queue[*i].2 == 3)
        .collect();
    assert!(to_3.len() >= 2, "a notice and an append for copy 3");
    let msgs: Vec<_> = to_3.iter().map(|i| net.queue[*i].clone()).collect();
    for (i, m) in to_3.iter().zip(msgs.into_iter().rev()) {
        net.queue[*i] = m;
    }
    net.run(2 * STEP);
    assert!(!net.replicas[&3].is_dropped(), "copy 3 kept the newer set");
    assert_eq!(net.replicas[&3].copies(), &BTreeSet::from([1, 2, 3]));
}

#[test]
fn a_dead_home_is_succeeded_by_exactly_one_copy_within_two_seconds_with_every_committed_entry() {
    let mut net = Net::new(3);
    for e in ["a", "b", "c"] {
        net.propose(0, e);
    }
    net.run(Duration::from_millis(200));
    assert_eq!(net.committed.get(&0), Some(&3));
    // The home dies.
    net.down.insert(0);
    let died = net.now;
    let mut acted = None;
    for _ in 0..100 {
        net.run(STEP);
        if net.primaries.len() > 1 {
            acted = Some(net.now - died);
            break;
        }
    }
    let acted = acted.expect("a copy took over");
    assert!(acted <= Duration::from_secs(2), "took over after {acted:?}");
    net.run(Duration::from_secs(5));
    let live = net.live_primaries();
    assert_eq!(live.len(), 1, "one primary: {live:?}");
    let p = live[0];
    assert_eq!(net.replicas[&p].epoch().term, 1);
    assert_eq!(net.primaries.len(), 2, "one election: {:?}", net.primaries);
    assert_eq!(net.log(p), vec!["a", "b", "c"]);
    // The new primary goes on: its entries reach the other copies.
    net.propose(p, "d");
    net.run(Duration::from_millis(200));
    for n in 1..=3u32 {
        assert_eq!(net.replicas[&n].epoch().primary, p);
        assert_eq!(net.log(n), vec!["a", "b", "c", "d"], "copy {n}");
    }
}

#[test]
fn the_most_up_to_date_copy_succeeds() {
    let mut net = Net::new(3);
    net.propose(0, "a");
    net.run(Duration::from_millis(100));
    // Copy 2 alone hears the next entries before the home dies.
    net.cut.insert((0, 1));
    net.cut.insert((0, 3));
    net.propose(0, "b");
    net.propose(0, "c");
    // (`c` follows `b`'s acknowledgement: a copy has one append in flight.)
    net.run(Duration::from_millis(200));
    assert_eq!(net.log(2), vec!["a", "b", "c"]);
    net.down.insert(0);
    net.cut.clear();
    net.run(Duration::from_secs(5));
    assert_eq!(net.live_primaries(), vec![2]);
    for n in 1..=3 {
        assert_eq!(net.log(n), vec!["a", "b", "c"], "copy {n}");
    }
}

#[test]
fn an_old_home_that_comes_back_learns_it_is_a_copy_and_hands_back_what_it_alone_held() {
    let mut net = Net::new(2);
    net.propose(0, "a");
    net.run(Duration::from_millis(100));
    // The home is cut off from every copy (a partition, or a pause): it
    // goes on taking entries nobody else holds, uncommitted.
    net.cut.insert((0, 1));
    net.cut.insert((0, 2));
    net.propose(0, "only on the old home");
    net.run(Duration::from_secs(4));
    let live = net.live_primaries();
    assert!(live.contains(&0), "the cut-off home still thinks it leads");
    assert_eq!(live.len(), 2, "the copies elected one of them: {live:?}");
    assert_eq!(
        net.replicas[&0].committed(),
        1,
        "its entry is not committed"
    );
    let successor = *live.iter().find(|n| **n != 0).unwrap();
    net.propose(successor, "b");
    // Healed: the old home hears of the newer epoch and steps down.
    net.cut.clear();
    net.run(Duration::from_secs(3));
    assert_eq!(net.live_primaries(), vec![successor], "{:?}", net.primaries);
    assert!(net.stepped_down.contains(&0));
    assert_eq!(net.replicas[&0].epoch().primary, successor);
    // Once the new primary places it again, it gets the job's log, and what
    // it alone held is handed back for the driver to propose again.
    let out = net
        .replicas
        .get_mut(&successor)
        .unwrap()
        .set_copies([0, 1, 2], 1);
    net.take(successor, out);
    net.run(Duration::from_millis(300));
    assert_eq!(net.log(0), vec!["a", "b"]);
    assert_eq!(
        net.dropped.get(&0),
        Some(&vec!["only on the old home".to_string()])
    );
}

#[test]
fn a_partition_heals_with_one_primary_and_never_two_in_one_epoch() {
    let mut net = Net::new(4);
    net.propose(0, "a");
    net.run(Duration::from_millis(100));
    // {0, 1} | {2, 3, 4}: the larger side elects, the home keeps its side.
    for a in [0, 1] {
        for b in [2, 3, 4] {
            net.cut.insert((a, b));
        }
    }
    net.run(Duration::from_secs(4));
    assert_eq!(net.live_primaries().len(), 2);
    net.cut.clear();
    net.run(Duration::from_secs(4));
    let live = net.live_primaries();
    assert_eq!(live.len(), 1, "one primary after the heal: {live:?}");
    let epoch = net.replicas[&live[0]].epoch().clone();
    for (n, r) in &net.replicas {
        assert_eq!(r.epoch(), &epoch, "replica {n} follows the same epoch");
    }
}

/// A primary cut off from most of its copies knows it is out of touch
/// (what it would decide alone may be the minority's view), one that
/// still hears most of them does not, and the first is in touch again
/// once it hears from them.
#[test]
fn a_primary_cut_off_from_most_copies_knows_it_is_out_of_touch() {
    let mut net = Net::new(3);
    net.propose(0, "a");
    net.run(Duration::from_millis(500));
    assert!(net.replicas[&0].in_touch(net.now), "all copies answer");
    // One copy of three unreachable: the home and two copies are a majority.
    net.cut.insert((0, 3));
    net.run(Duration::from_secs(3));
    assert!(
        net.replicas[&0].in_touch(net.now),
        "two of three copies answer"
    );
    // Two of three unreachable: two replicas of four are no majority.
    net.cut.insert((0, 2));
    net.run(Duration::from_secs(3));
    assert!(
        net.replicas[&0].is_primary() && !net.replicas[&0].in_touch(net.now),
        "the home hears one copy of three"
    );
    net.cut.clear();
    net.run(Duration::from_secs(1));
    assert!(net.replicas[&0].in_touch(net.now), "healed");
}

#[test]
fn a_copy_that_alone_loses_the_home_does_not_take_over_from_a_live_one() {
    let mut net = Net::new(3);
    net.propose(0, "a");
    net.run(Duration::from_millis(100));
    // Copy 3 alone cannot hear the home; the others can and say so.
    net.cut.insert((0, 3));
    net.run(Duration::from_secs(10));
    assert_eq!(net.live_primaries(), vec![0]);
    assert_eq!(
        net.primaries.len(),
        1,
        "no election won: {:?}",
        net.primaries
    );
}

#[test]
fn nonsense_from_peers_changes_nothing() {
    let timing = Timing::default();
    let mut copy = R::copy(7, 1, 0, Duration::ZERO, timing, signer(1));
    let epoch = Epoch {
        term: 0,
        primary: 0,
    };
    // An append from a peer that is not the primary.
    let out = copy.on_message(
        STEP,
        5,
        Msg::Append {
            epoch: epoch.clone(),
            after: 0,
            after_epoch: None,
            entries: vec![(epoch.clone(), "forged".to_string())],
            copies: None,
            roster: None,
            version: 0,
            end: 1,
            mandate: None,
        },
    );
    assert!(out.is_empty());
    assert!(copy.is_empty());
    // Too many entries at once, or an append past the end: refused and asked
    // again from where the log matches.
    let many = vec![(epoch.clone(), String::new()); MAX_ENTRIES_PER_APPEND + 1];
    for (after, entries) in [(0, many), (9, vec![(epoch.clone(), "x".to_string())])] {
        let out = copy.on_message(
            STEP,
            0,
            Msg::Append {
                epoch: epoch.clone(),
                after,
                after_epoch: Some(epoch.clone()),
                entries,
                copies: None,
                roster: None,
                version: 0,
                end: 1000,
                mandate: None,
            },
        );
        assert_eq!(
            out,
            vec![Action::Send {
                to: 0,
                msg: Msg::Ack {
                    epoch: epoch.clone(),
                    index: 0,
                    matched: false
                }
            }]
        );
        assert!(copy.is_empty());
    }
    // A standing from a stranger changes nothing at the primary: it is
    // only told that it is no copy (as a copy dropped unawares is).
    let mut home = R::primary(7, 0, Duration::ZERO, timing, signer(0));
    let _ = home.set_copies([1], 1);
    let out = home.on_message(
        STEP,
        9,
        Msg::Standing {
            epoch: epoch.clone(),
            last: None,
            len: u64::MAX,
            sig: Signature(vec![0; 64]),
        },
    );
    assert!(
        matches!(&out[..], [Action::Send { to: 9, msg: Msg::Append { entries, copies: Some(copies), .. } }]
            if entries.is_empty() && copies == &BTreeSet::from([1])),
        "{out:?}"
    );
    assert!(home.is_primary());
    assert_eq!(home.copies(), &BTreeSet::from([1]));
    // An ack from a stranger, or of more than the log holds, commits
    // nothing.
    let mut out = Vec::new();
    home.propose("a".to_string(), &mut out).unwrap();
    for (from, index) in [(9, 1), (1, 1000)] {
        let out = home.on_message(
            STEP,
            from,
            Msg::Ack {
                epoch: epoch.clone(),
                index,
                matched: true,
            },
        );
        let committed = out
            .iter()
            .filter_map(|a| match a {
                Action::Committed { index } => Some(*index),
                _ => None,
            })
            .max();
        assert!(committed.is_none_or(|i| i <= 1), "{out:?}");
    }
    assert!(home.committed() <= home.len());
}

#[test]
fn the_same_events_give_the_same_successor() {
    let run = || {
        let mut net = Net::new(5);
        net.propose(0, "a");
        net.run(Duration::from_millis(100));
        net.down.insert(0);
        net.run(Duration::from_secs(5));
        net.live_primaries()
    };
    let first = run();
    assert_eq!(first.len(), 1);
    for _ in 0..3 {
        assert_eq!(run(), first);
    }
}

/// A small seeded generator (xorshift), so that failures replay.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn under_random_crashes_and_partitions_no_committed_entry_is_lost_and_one_primary_remains() {
    let mut checked = 0;
    for seed in 1..=200u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let n = 3 + rng.below(4) as u32;
        let mut net = Net::new(n - 1);
        let mut next = 0;
        for _ in 0..40 {
            match rng.below(6) {
                0 => {
                    net.down.insert(rng.below(n as u64) as u32);
                }
                1 => {
                    let back = rng.below(n as u64) as u32;
                    net.down.remove(&back);
                }
                2 => {
                    let (a, b) = (rng.below(n as u64) as u32, rng.below(n as u64) as u32);
                    net.cut.insert((a, b));
                }
                3 => net.cut.clear(),
                _ => {
                    for p in net.live_primaries() {
                        next += 1;
                        net.propose(p, &format!("e{next}"));
                    }
                }
            }
            net.run(Duration::from_millis(500));
        }
        // Everything back: one primary, which places every node again.
        net.down.clear();
        net.cut.clear();
        net.run(Duration::from_secs(6));
        let live = net.live_primaries();
        assert_eq!(live.len(), 1, "seed {seed}: primaries {live:?}");
        // Honest replicas never take each other for liars.
        let lies: Vec<_> = net
            .refused
            .iter()
            .filter(|(.., why)| why.is_misbehaviour())
            .collect();
        assert!(lies.is_empty(), "seed {seed}: {lies:?}");
        let p = live[0];
        let out = net
            .replicas
            .get_mut(&p)
            .unwrap()
            .set_copies((0..n).filter(|x| *x != p), 1);
        net.take(p, out);
        net.run(Duration::from_secs(3));
        let log = net.log(p);
        for node in 0..n {
            assert_eq!(
                net.log(node),
                log,
                "seed {seed}: replica {node}: {:?}\nprimary: {:?}",
                net.replicas[&node],
                net.replicas[&p]
            );
        }
        let kept: BTreeSet<String> = log
            .into_iter()
            .chain(net.dropped.values().flatten().cloned())
            .collect();
        checked += net.ever_committed.len();
        let lost: Vec<_> = net.ever_committed.difference(&kept).collect();
        assert!(
            lost.is_empty(),
            "seed {seed}: committed entries lost: {lost:?}"
        );
    }
    assert!(checked > 1000, "only {checked} committed entries checked");
}

#[test]
fn a_new_copy_follows_a_later_home_only_by_the_mandate_from_the_first() {
    let mut net = Net::new(3);
    net.propose(0, "a");
    net.run(Duration::from_millis(200));
    net.down.insert(0);
    net.run(Duration::from_secs(5));
    let live = net.live_primaries();
    assert_eq!(live.len(), 1, "one primary: {live:?}");
    let p = live[0];
    let epoch = net.replicas[&p].epoch().clone();
    assert_eq!(epoch.term, 1);
    let timing = Timing::default();
    // A stranger (node 9) invites a new copy (node 5) under an epoch of its
    // own: the copy, which starts from the job's first home, refuses it.
    let mut invited = R::copy(7, 5, 0, net.now, timing, signer(5));
    let forged = Epoch {
        term: 1,
        primary: 9,
    };
    let out = invited.on_message(net.now, 9, claim(&forged, None));
    assert!(
        out.iter().any(|a| matches!(
            a,
            Action::Refused {
                from: 9,
                why: Refusal::NoMandate
            }
        )),
        "{out:?}"
    );
    assert_eq!(invited.epoch().primary, 0);
    assert!(invited.is_empty());
    // The home now in charge places it: its invitation carries the mandate,
    // checked from the first epoch, and the copy follows it.
    net.replicas.insert(5, invited);
    let copies: Vec<u32> = (1..=3).chain([5]).filter(|n| *n != p).collect();
    let out = net.replicas.get_mut(&p).unwrap().set_copies(copies, 2);
    net.take(p, out);
    net.run(Duration::from_millis(300));
    assert_eq!(net.replicas[&5].epoch(), &epoch);
    assert_eq!(net.log(5), vec!["a"]);
    assert!(
        net.refused.iter().all(|(by, ..)| *by != 5),
        "{:?}",
        net.refused
    );
}

#[test]
fn a_burst_of_entries_costs_each_copy_a_few_appends_not_one_per_entry() {
    let mut net = Net::new(3);
    net.run(Duration::from_millis(100));
    let sent_before = net.queue.len();
    assert_eq!(sent_before, 0, "quiet before the burst");
    let mut appends = 0;
    for i in 0..64 {
        let mut out = Vec::new();
        net.replicas
            .get_mut(&0)
            .unwrap()
            .propose(format!("e{i}"), &mut out)
            .unwrap();
        appends += out
            .iter()
            .filter(|a| {
                matches!(
                    a,
                    Action::Send {
                        msg: Msg::Append { .. },
                        ..
                    }
                )
            })
            .count();
        net.take(0, out);
    }
    // One append per copy for the first entry; the other 63 wait for its
    // acknowledgement.
    assert_eq!(appends, 3);
    net.run(Duration::from_millis(300));
    for n in 1..=3u32 {
        assert_eq!(net.log(n).len(), 64, "copy {n}");
    }
    assert_eq!(net.committed.get(&0), Some(&64));
}

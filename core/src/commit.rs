//! When a job's home may speak: its words that wait for its log.
//!
//! A home's scheduler outputs job events, which go into the job's
//! replicated log ([`crate::replica`]), and messages to other nodes. Two of
//! its words must not go out before the log entry behind them is
//! committed (held by a copy besides the home):
//!
//! - **a grant**: else a copy that takes the job over places the rank
//!   again while the granted worker runs;
//! - **the acknowledgement of a rank's end**: a member forgets a rank
//!   whose end was acknowledged, so an end acknowledged but held by no
//!   copy would be lost with the home, and the new home would wait for (or
//!   run again) a rank that is done.
//!
//! Whatever else the home says to a node while a word to it waits goes
//! behind that word, so that the node hears the home in order.
//!
//! This is the one place of that rule: the node and the simulator hold
//! their words in an [`Outbox`], and let them go when the replica says
//! entries are committed ([`Action::Committed`](crate::replica::Action)).
//! An outbox is bounded: past [`Outbox::new`]'s `max` words (copies that
//! never acknowledge), words go at once, as they did before they waited.

use crate::PeerKey;
use crate::node::{JobEntry, JobEvent};
use crate::replica::Replica;

/// A job's words that wait for its log to be committed, in the order they
/// were said (see the [module docs](self)). `W` is what the driver sends
/// (a message, the answer to a request); `P` names nodes.
#[derive(Debug, Clone)]
pub struct Outbox<P, W> {
    /// (the log length it waits for, to whom, the word), in order.
    held: Vec<(u64, P, W)>,
    max: usize,
}

impl<P: PeerKey + std::hash::Hash, W> Outbox<P, W> {
    /// An empty outbox that holds at most `max` words.
    pub fn new(max: usize) -> Self {
        Outbox {
            held: Vec::new(),
            max,
        }
    }

    /// How many words wait.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no word waits.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// A grant to `to`, whose entry was just proposed to `log`: it goes
    /// once the log is committed up to its end. The word back if it may
    /// go now.
    pub fn grant<E: Clone>(&mut self, log: &Replica<P, E>, to: P, word: W) -> Option<W> {
        self.hold(log, log.len(), to, word)
    }

    /// The acknowledgement of a rank's end, whose entry is the
    /// `index`-th of `log` (see [`end_index`]). The word back if it may
    /// go now.
    pub fn end_ack<E: Clone>(
        &mut self,
        log: &Replica<P, E>,
        index: u64,
        to: P,
        word: W,
    ) -> Option<W> {
        self.hold(log, index, to, word)
    }

    /// Anything else the home says to `to`: it waits behind a word to
    /// `to` that waits. The word back if it may go now.
    pub fn behind<E: Clone>(&mut self, log: &Replica<P, E>, to: P, word: W) -> Option<W> {
        self.hold(log, 0, to, word)
    }

    fn hold<E: Clone>(&mut self, log: &Replica<P, E>, index: u64, to: P, word: W) -> Option<W> {
        // Never before a word to the same node said earlier.
        let at = self
            .held
            .iter()
            .rev()
            .find(|(_, t, _)| *t == to)
            .map_or(index, |(at, ..)| index.max(*at));
        if !log.is_primary() || at <= log.committed() || self.held.len() >= self.max {
            return Some(word);
        }
        self.held.push((at, to, word));
        None
    }

    /// The log is committed up to `index`: the words that may go now, in
    /// the order they were said.
    pub fn committed(&mut self, index: u64) -> Vec<(P, W)> {
        self.take_if(|at, _, _| at <= index)
    }

    /// Takes out the words `unsaid` picks (by the index they wait for, to
    /// whom, what): a grant the home took back, the answers of a home
    /// that stepped down.
    pub fn take_if(&mut self, mut unsaid: impl FnMut(u64, &P, &W) -> bool) -> Vec<(P, W)> {
        self.held
            .extract_if(.., |(at, to, word)| unsaid(*at, to, word))
            .map(|(_, to, word)| (to, word))
            .collect()
    }
}

/// Where in `entries` (counting from 1) the end of `rank` on `node` was
/// logged, the last time: what its acknowledgement waits for. `None`: no
/// such end is logged (the worker was stale; its end is not the job's).
pub fn end_index<'a, P: PartialEq + 'a>(
    entries: impl Iterator<Item = &'a JobEntry<P>>,
    node: &P,
    rank: u32,
) -> Option<u64> {
    entries
        .enumerate()
        .filter(|(_, e)| {
            matches!(e, JobEntry::Event(JobEvent::RankEnded { node: n, rank: r, .. })
                if n == node && *r == rank)
        })
        .map(|(i, _)| i as u64 + 1)
        .last()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::replica::{Action, StandInSigner, Timing};

    type R = Replica<u32, &'static str>;

    /// A home (node 0) with one copy (node 1), and the copy's replica.
    fn pair() -> (R, R) {
        let t = Duration::ZERO;
        let timing = Timing::default();
        let mut home = R::primary(7, 0, t, timing, Arc::new(StandInSigner::new(0)));
        let copy = R::copy(7, 1, 0, t, timing, Arc::new(StandInSigner::new(1)));
        let _ = home.set_copies([1], 1);
        (home, copy)
    }

    /// Messages go back and forth until none is left; the indexes the
    /// home said were committed.
    fn settle(home: &mut R, copy: &mut R, mut out: Vec<Action<u32, &'static str>>) -> Vec<u64> {
        let mut committed = Vec::new();
        for _ in 0..100 {
            let mut next = Vec::new();
            for a in out {
                match a {
                    Action::Send { to: 1, msg } => {
                        for b in copy.on_message(Duration::ZERO, 0, msg) {
                            if let Action::Send { to: 0, msg } = b {
                                next.extend(home.on_message(Duration::ZERO, 1, msg));
                            }
                        }
                    }
                    Action::Committed { index } => committed.push(index),
                    _ => {}
                }
            }
            if next.is_empty() {
                return committed;
            }
            out = next;
        }
        panic!("the pair never settled");
    }

    #[test]
    fn a_grant_waits_until_a_copy_holds_it_and_what_follows_to_its_node_waits_behind() {
        let (mut home, mut copy) = pair();
        let first = settle(&mut home, &mut copy, Vec::new());
        assert!(first.is_empty());
        let mut outbox: Outbox<u32, &str> = Outbox::new(8);
        let mut out = Vec::new();
        home.propose("granted to 5", &mut out).unwrap();
        assert_eq!(outbox.grant(&home, 5, "grant"), None, "not committed yet");
        assert_eq!(outbox.behind(&home, 5, "cancel"), None, "behind the grant");
        assert_eq!(
            outbox.behind(&home, 6, "to another node"),
            Some("to another node"),
            "nothing waits for node 6"
        );
        let committed = settle(&mut home, &mut copy, out);
        assert_eq!(committed, vec![1]);
        assert_eq!(outbox.committed(1), vec![(5, "grant"), (5, "cancel")]);
        assert!(outbox.is_empty());
        // Committed already: it goes at once.
        assert_eq!(outbox.grant(&home, 5, "again"), Some("again"));
    }

    #[test]
    fn an_end_is_acknowledged_once_its_entry_is_committed_and_not_before() {
        let (mut home, mut copy) = pair();
        let mut outbox: Outbox<u32, &str> = Outbox::new(8);
        let mut out = Vec::new();
        home.propose("rank 0 ended", &mut out).unwrap();
        assert_eq!(outbox.end_ack(&home, 1, 3, "ack"), None);
        assert!(outbox.committed(0).is_empty(), "index 1 is not committed");
        let committed = settle(&mut home, &mut copy, out);
        assert_eq!(outbox.committed(committed[0]), vec![(3, "ack")]);
    }

    #[test]
    fn a_replica_that_is_not_primary_or_a_full_outbox_holds_nothing() {
        let (mut home, copy) = pair();
        let mut outbox: Outbox<u32, &str> = Outbox::new(1);
        assert_eq!(outbox.grant(&copy, 5, "from a copy"), Some("from a copy"));
        let mut out = Vec::new();
        home.propose("granted", &mut out).unwrap();
        assert_eq!(outbox.grant(&home, 5, "held"), None);
        assert_eq!(
            outbox.grant(&home, 6, "past the bound"),
            Some("past the bound")
        );
        assert_eq!(outbox.take_if(|_, to, _| *to == 5), vec![(5, "held")]);
    }

    #[test]
    fn the_last_end_of_a_rank_on_its_node_is_found() {
        use crate::advert::JobId;
        use crate::node::RankOutcome;
        let end = |node: u32, rank: u32| {
            JobEntry::Event(JobEvent::RankEnded {
                job: JobId(7),
                node,
                rank,
                outcome: RankOutcome::Exited(0),
            })
        };
        let log = [end(1, 0), end(2, 0), end(1, 0), end(1, 1)];
        assert_eq!(end_index(log.iter(), &1, 0), Some(3));
        assert_eq!(end_index(log.iter(), &2, 0), Some(2));
        assert_eq!(end_index(log.iter(), &3, 0), None);
    }
}

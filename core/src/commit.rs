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
//! An outbox holds at most [`MAX_HELD`] words: past it (copies that never
//! acknowledge), words go at once, as they did before they waited.

use crate::PeerKey;
use crate::advert::Message;
use crate::node::{JobEntry, JobEvent};
use crate::replica::Replica;

/// The most words a home holds for one job until its log is committed.
pub const MAX_HELD: usize = 1024;

/// A word of a home that waits for its log.
#[derive(Debug, Clone, PartialEq)]
pub enum Word<P, A> {
    /// A scheduling message: a grant, or what followed one to its node.
    Message(Message<P>),
    /// The acknowledgement of a rank's end: `A` is the driver's (the
    /// answer to send, or who to send it to).
    EndAck(A),
}

/// A job's words that wait for its log to be committed, in the order they
/// were said (see the [module docs](self)). `P` names nodes, `A` is an
/// acknowledgement of a rank's end as the driver sends it.
#[derive(Debug, Clone)]
pub struct Outbox<P, A> {
    /// (the log length it waits for, to whom, the word), in order.
    held: Vec<(u64, P, Word<P, A>)>,
    max: usize,
}

impl<P: PeerKey + std::hash::Hash, A> Default for Outbox<P, A> {
    fn default() -> Self {
        Outbox::with_max(MAX_HELD)
    }
}

impl<P: PeerKey + std::hash::Hash, A> Outbox<P, A> {
    /// An empty outbox that holds at most `max` words.
    pub fn with_max(max: usize) -> Self {
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

    /// A scheduling message to `to`: a grant, whose entry was just
    /// proposed to `log`, goes once the log is committed up to its end;
    /// anything else waits behind a word to `to` that waits. The message
    /// back if it may go now.
    pub fn message<E: Clone>(
        &mut self,
        log: &Replica<P, E>,
        to: P,
        msg: Message<P>,
    ) -> Option<Message<P>> {
        let index = match msg {
            Message::Grant { .. } => log.len(),
            _ => 0,
        };
        match self.wait(log, index, &to) {
            Some(at) => {
                self.held.push((at, to, Word::Message(msg)));
                None
            }
            None => Some(msg),
        }
    }

    /// The acknowledgement of a rank's end to `to`, whose entry is the
    /// `index`-th of `log` (see [`end_index`]). The acknowledgement back if
    /// it may go now.
    pub fn end_ack<E: Clone>(
        &mut self,
        log: &Replica<P, E>,
        index: u64,
        to: P,
        ack: A,
    ) -> Option<A> {
        match self.wait(log, index, &to) {
            Some(at) => {
                self.held.push((at, to, Word::EndAck(ack)));
                None
            }
            None => Some(ack),
        }
    }

    /// The log length a word to `to` that waits for the `index`-th entry
    /// must wait for, if it must wait: never before a word to the same node
    /// said earlier.
    fn wait<E: Clone>(&self, log: &Replica<P, E>, index: u64, to: &P) -> Option<u64> {
        let at = self
            .held
            .iter()
            .rev()
            .find(|(_, t, _)| t == to)
            .map_or(index, |(at, ..)| index.max(*at));
        let now = !log.is_primary() || at <= log.committed() || self.held.len() >= self.max;
        (!now).then_some(at)
    }

    /// The log is committed up to `index`: the words that may go now, in
    /// the order they were said.
    pub fn committed(&mut self, index: u64) -> Vec<(P, Word<P, A>)> {
        self.held
            .extract_if(.., |(at, ..)| *at <= index)
            .map(|(_, to, word)| (to, word))
            .collect()
    }

    /// The home took back, by `event`, what it said to some nodes (the job
    /// ended or rolled back: to every node; `node`'s workers were lost: to
    /// it). Their grants held go to nobody; the messages that waited
    /// behind them come out, to send now. Acknowledgements of ends stay.
    pub fn take_back(&mut self, event: &JobEvent<P>) -> Vec<(P, Message<P>)> {
        let taken_back = |to: &P| match event {
            JobEvent::Ended { .. } | JobEvent::RolledBack { .. } => true,
            JobEvent::WorkersLost { node, .. } => to == node,
            _ => false,
        };
        self.held
            .extract_if(.., |(_, to, word)| {
                matches!(word, Word::Message(_)) && taken_back(to)
            })
            .filter_map(|(_, to, word)| match word {
                Word::Message(Message::Grant { .. }) | Word::EndAck(_) => None,
                Word::Message(msg) => Some((to, msg)),
            })
            .collect()
    }

    /// This home stepped down: the messages held go to nobody (the new
    /// primary makes its own); the acknowledgements held come out, for the
    /// members to hear that they should report to the new home.
    pub fn step_down(&mut self) -> Vec<(P, A)> {
        self.held
            .drain(..)
            .filter_map(|(_, to, word)| match word {
                Word::EndAck(ack) => Some((to, ack)),
                Word::Message(_) => None,
            })
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

    type Outbox7 = Outbox<u32, &'static str>;

    fn grant(n: u32) -> Message<u32> {
        Message::Grant {
            job: crate::advert::JobId(7),
            hold: crate::advert::HoldId(n),
            ranks: vec![n],
            incarnation: n,
            placement: Default::default(),
        }
    }

    /// A message that is not a grant.
    fn withdraw(n: u32) -> Message<u32> {
        Message::Withdraw {
            job: crate::advert::JobId(7),
            hold: crate::advert::HoldId(n),
            ranks: Vec::new(),
        }
    }

    #[test]
    fn a_grant_waits_until_a_copy_holds_it_and_what_follows_to_its_node_waits_behind() {
        let (mut home, mut copy) = pair();
        let first = settle(&mut home, &mut copy, Vec::new());
        assert!(first.is_empty());
        let mut outbox = Outbox7::default();
        let mut out = Vec::new();
        home.propose("granted to 5", &mut out).unwrap();
        assert_eq!(
            outbox.message(&home, 5, grant(1)),
            None,
            "not committed yet"
        );
        assert_eq!(
            outbox.message(&home, 5, withdraw(1)),
            None,
            "behind the grant"
        );
        assert_eq!(
            outbox.message(&home, 6, withdraw(2)),
            Some(withdraw(2)),
            "nothing waits for node 6"
        );
        let committed = settle(&mut home, &mut copy, out);
        assert_eq!(committed, vec![1]);
        assert_eq!(
            outbox.committed(1),
            vec![
                (5, Word::Message(grant(1))),
                (5, Word::Message(withdraw(1)))
            ]
        );
        assert!(outbox.is_empty());
        // Committed already: it goes at once.
        assert_eq!(outbox.message(&home, 5, grant(2)), Some(grant(2)));
    }

    #[test]
    fn an_end_is_acknowledged_once_its_entry_is_committed_and_not_before() {
        let (mut home, mut copy) = pair();
        let mut outbox = Outbox7::default();
        let mut out = Vec::new();
        home.propose("rank 0 ended", &mut out).unwrap();
        assert_eq!(outbox.end_ack(&home, 1, 3, "ack"), None);
        assert!(outbox.committed(0).is_empty(), "index 1 is not committed");
        let committed = settle(&mut home, &mut copy, out);
        assert_eq!(
            outbox.committed(committed[0]),
            vec![(3, Word::EndAck("ack"))]
        );
    }

    #[test]
    fn a_replica_that_is_not_primary_or_a_full_outbox_holds_nothing() {
        let (mut home, copy) = pair();
        let mut outbox = Outbox7::with_max(1);
        assert_eq!(
            outbox.message(&copy, 5, grant(1)),
            Some(grant(1)),
            "from a copy"
        );
        let mut out = Vec::new();
        home.propose("granted", &mut out).unwrap();
        assert_eq!(outbox.message(&home, 5, grant(1)), None);
        assert_eq!(
            outbox.message(&home, 6, grant(2)),
            Some(grant(2)),
            "past the bound"
        );
        assert_eq!(outbox.len(), 1);
    }

    #[test]
    fn a_grant_taken_back_goes_to_nobody_and_a_stepped_down_home_answers_its_acks() {
        use crate::advert::JobId;
        let (mut home, _copy) = pair();
        let mut outbox = Outbox7::default();
        let mut out = Vec::new();
        home.propose("granted to 5 and 6", &mut out).unwrap();
        assert_eq!(outbox.message(&home, 5, grant(1)), None);
        assert_eq!(outbox.message(&home, 5, withdraw(1)), None);
        assert_eq!(outbox.message(&home, 6, grant(2)), None);
        assert_eq!(outbox.end_ack(&home, 1, 5, "ack to 5"), None);
        let lost = JobEvent::WorkersLost {
            job: JobId(7),
            node: 5,
            ranks: vec![1],
            reason: crate::node::LostReason::Left,
        };
        assert_eq!(
            outbox.take_back(&lost),
            vec![(5, withdraw(1))],
            "5's grant goes to nobody, what followed it goes now"
        );
        assert_eq!(outbox.len(), 2, "6's grant and the acknowledgement stay");
        assert_eq!(outbox.step_down(), vec![(5, "ack to 5")]);
        assert!(outbox.is_empty());
    }

    #[test]
    fn the_last_end_of_a_rank_on_its_node_is_found() {
        use crate::advert::JobId;
        use crate::node::RankOutcome;
        let end = |node: u32, rank: u32| {
            JobEntry::Event(JobEvent::RankEnded {
                digest: None,
                job: JobId(7),
                node,
                rank,
                outcome: RankOutcome::Exited(0),
                check: false,
            })
        };
        let log = [end(1, 0), end(2, 0), end(1, 0), end(1, 1)];
        assert_eq!(end_index(log.iter(), &1, 0), Some(3));
        assert_eq!(end_index(log.iter(), &2, 0), Some(2));
        assert_eq!(end_index(log.iter(), &3, 0), None);
    }
}

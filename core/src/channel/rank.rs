//! A receiving rank's policy: the [`RankReceiver`] that lends its
//! channels credit from one budget.

use std::collections::{BTreeMap, VecDeque};

use super::chunk::{INITIAL_WINDOW, MAX_MESSAGE_BYTES, MAX_WINDOW, RANK_BUDGET, footprint};

/// What a rank lent one channel (positions as in [`Inbound`]).
#[derive(Debug, Clone)]
struct Lent {
    /// The position after the last message the worker read.
    consumed: u64,
    /// The window: the limit follows `consumed + window` as the worker
    /// reads.
    window: u64,
    /// The limit the window allowed, the highest so far.
    limit: u64,
    /// The end of a message granted beyond the budget (0 if none).
    granted: u64,
    /// The sender's ask not covered yet: where its message starts, and its
    /// footprint.
    asked: Option<(u64, u64)>,
}

impl Lent {
    fn new() -> Self {
        Lent {
            consumed: 0,
            window: INITIAL_WINDOW,
            limit: INITIAL_WINDOW,
            granted: 0,
            asked: None,
        }
    }

    fn credit(&self) -> u64 {
        self.limit.max(self.granted)
    }

    /// What the window takes of the budget: the credit it allowed beyond
    /// what the worker read and the initial window.
    fn charge(&self) -> u64 {
        self.limit
            .saturating_sub(self.consumed)
            .saturating_sub(INITIAL_WINDOW)
    }

    /// Whether the credit covers the ask (or nothing is asked).
    fn covered(&self) -> bool {
        self.asked
            .is_none_or(|(start, total)| start.saturating_add(total) <= self.credit())
    }
}

/// A receiving rank's credit policy over all the channels to it, without
/// IO (see the module docs, "What a receiving rank holds"): how far each
/// channel's sender may go, from the initial window, the rank's budget of
/// larger windows, and its one grant at a time beyond the budget.
///
/// `K` names a channel to the rank (the driver's choice: e.g. the sending
/// node and the [`ChannelId`](super::ChannelId)). A channel the receiver never heard of has
/// the initial window. Every event answers with the channels whose
/// [`credit`](Self::credit) rose: the driver raises their limits
/// ([`Inbound::raise_limit`](super::Inbound::raise_limit)) and acknowledges them.
#[derive(Debug)]
pub struct RankReceiver<K> {
    budget: u64,
    channels: BTreeMap<K, Lent>,
    /// The sum of the channels' charges: at most `budget`.
    lent: u64,
    /// Channels whose ask neither the window nor the budget covers, oldest
    /// first (each once).
    waiting: VecDeque<K>,
    /// The channel whose message granted beyond the budget is not read yet.
    granted: Option<K>,
}

impl<K: Ord + Clone> Default for RankReceiver<K> {
    fn default() -> Self {
        RankReceiver::new(RANK_BUDGET)
    }
}

impl<K: Ord + Clone> RankReceiver<K> {
    /// A rank that lends at most `budget` bytes beyond the initial windows.
    pub fn new(budget: u64) -> Self {
        RankReceiver {
            budget,
            channels: BTreeMap::new(),
            lent: 0,
            waiting: VecDeque::new(),
            granted: None,
        }
    }

    /// How far `channel`'s sender may send.
    pub fn credit(&self, channel: &K) -> u64 {
        self.channels
            .get(channel)
            .map_or(INITIAL_WINDOW, Lent::credit)
    }

    /// The budget lent out now (at most the budget).
    pub fn lent(&self) -> u64 {
        self.lent
    }

    /// The most the rank can be made to hold now: every channel's credit
    /// beyond what its worker read. A channel it never heard of may still
    /// send its initial window; [`RankReceiver::bound`] is what this never
    /// exceeds.
    pub fn outstanding(&self) -> u64 {
        self.channels
            .values()
            .map(|l| l.credit().saturating_sub(l.consumed))
            .sum()
    }

    /// What a rank with `channels` channels can hold at most, whatever its
    /// senders do: the budget, the initial windows, and one message granted
    /// beyond the budget.
    pub fn bound(&self, channels: u64) -> u64 {
        self.budget
            .saturating_add(channels.saturating_mul(INITIAL_WINDOW))
            .saturating_add(footprint(MAX_MESSAGE_BYTES))
    }

    /// Whether `channel` waits for room.
    pub fn is_waiting(&self, channel: &K) -> bool {
        self.waiting.contains(channel)
    }

    /// Changes `channel`'s state by `f`, keeping the sum of charges.
    fn update(&mut self, channel: &K, f: impl FnOnce(&mut Lent)) {
        let l = self
            .channels
            .entry(channel.clone())
            .or_insert_with(Lent::new);
        let before = l.charge();
        f(l);
        l.limit = l.limit.max(l.consumed.saturating_add(l.window));
        let after = l.charge();
        self.lent = self.lent.saturating_sub(before).saturating_add(after);
    }

    /// Lends `channel` a window large enough for its ask, from the budget,
    /// if the budget allows: twice the message or twice the window (at
    /// most [`MAX_WINDOW`]), or else just the message.
    fn grow(&mut self, channel: &K) -> bool {
        let Some(l) = self.channels.get(channel) else {
            return false;
        };
        let Some((_, total)) = l.asked else {
            return false;
        };
        if total > MAX_WINDOW {
            return false;
        }
        let roomy = l
            .window
            .saturating_mul(2)
            .max(total.saturating_mul(2))
            .min(MAX_WINDOW);
        for window in [roomy, total] {
            if window <= l.window {
                continue;
            }
            let limit = l.limit.max(l.consumed.saturating_add(window));
            let charge = limit
                .saturating_sub(l.consumed)
                .saturating_sub(INITIAL_WINDOW);
            let lent = self.lent.saturating_sub(l.charge()).saturating_add(charge);
            if lent <= self.budget {
                self.update(channel, |l| l.window = window);
                return true;
            }
        }
        false
    }

    /// `channel`'s sender asks for room for a message of `total` bytes
    /// that would start at `start` (where the channel's last complete
    /// message ended). An ask covered already is answered with the channel
    /// (acknowledge it again); one for a message the window covers once the
    /// worker reads is kept until the reads cover it; a larger one gets a
    /// larger window from the budget, or waits its turn for it or for the
    /// rank's grant beyond the budget.
    pub fn asked(&mut self, channel: K, start: u64, total: u64) -> Vec<K> {
        let total = footprint(total);
        let mut waits = false;
        self.update(&channel, |l| {
            l.asked = Some((start, total));
            waits = total > l.window;
        });
        let l = &self.channels[&channel];
        if l.covered() {
            self.update(&channel, |l| l.asked = None);
            return vec![channel];
        }
        if !waits || self.waiting.contains(&channel) {
            return Vec::new();
        }
        if self.waiting.is_empty() && self.grow(&channel) {
            return vec![channel];
        }
        self.waiting.push_back(channel);
        self.serve()
    }

    /// The worker read a message of `len` bytes of `channel`.
    pub fn consumed(&mut self, channel: &K, len: u64) -> Vec<K> {
        let before = self.credit(channel);
        let pressed = !self.waiting.is_empty();
        self.update(channel, |l| {
            l.consumed = l.consumed.saturating_add(footprint(len));
            if pressed {
                // Give half of the window back to those waiting, but not
                // below what an ask kept for the reads needs.
                let keep = l.asked.map_or(0, |(_, total)| total.min(l.window));
                l.window = (l.window / 2).max(keep).max(INITIAL_WINDOW);
            }
        });
        if self.granted.as_ref() == Some(channel) {
            let l = &self.channels[channel];
            if l.consumed >= l.granted {
                self.granted = None;
            }
        }
        if self.channels[channel].covered() {
            self.update(channel, |l| l.asked = None);
        }
        let mut raised = Vec::new();
        if self.credit(channel) > before {
            raised.push(channel.clone());
        }
        if !self.waiting.is_empty() {
            raised.extend(self.serve());
        }
        raised
    }

    /// `channel` is gone (its sender or its stream state was dropped): its
    /// credit returns to the rank.
    pub fn forget(&mut self, channel: &K) -> Vec<K> {
        if let Some(l) = self.channels.remove(channel) {
            self.lent = self.lent.saturating_sub(l.charge());
        }
        self.waiting.retain(|c| c != channel);
        if self.granted.as_ref() == Some(channel) {
            self.granted = None;
        }
        self.serve()
    }

    /// Serves the waiting asks in order: from the budget if it allows,
    /// else with the grant beyond the budget if no message holds it.
    fn serve(&mut self) -> Vec<K> {
        let mut raised = Vec::new();
        while let Some(channel) = self.waiting.front().cloned() {
            let Some(l) = self.channels.get(&channel) else {
                self.waiting.pop_front();
                continue;
            };
            if l.covered() || l.asked.is_some_and(|(_, total)| total <= l.window) {
                // Covered meanwhile, or the reads will.
                self.waiting.pop_front();
                continue;
            }
            if self.grow(&channel) {
                self.waiting.pop_front();
                raised.push(channel);
                continue;
            }
            if self.granted.is_some() {
                break;
            }
            self.waiting.pop_front();
            self.update(&channel, |l| {
                if let Some((start, total)) = l.asked.take() {
                    l.granted = start.saturating_add(total);
                }
            });
            self.granted = Some(channel.clone());
            raised.push(channel);
        }
        raised
    }
}

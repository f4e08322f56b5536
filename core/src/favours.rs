//! Fair sharing without a bank: a node's Network of Favors ledger (after
//! OurGrid's, Andrade et al., HPDC'04 and JPDC'07).
//!
//! Each node keeps, from what it observes itself and from nothing anyone
//! tells it, a balance per consumer: the favours that consumer did for
//! this node's jobs, less the favours this node did for the consumer's,
//! never below zero. A *consumer* is a grid member (a node) as the home of
//! jobs: the jobs a user submits through a node are that node's
//! consumption, and the workers that node runs for other homes' jobs are
//! its favours. Favours are counted in this machine's core time:
//!
//! - given: the cores of a worker this node ran for another home's job,
//!   times how long it ran here;
//! - received: the cores of a worker of a job homed here that ran on
//!   another node, times how long it ran there (from the grant to the end
//!   the node reported), times that node's core speed over this one's
//!   (the speed its offer gave, the ratio bounded by [`MAX_SPEED_RATIO`]
//!   either way), so that a faster node's favours count for what they are
//!   worth here and heterogeneous machines cancel out.
//!
//! When jobs of several consumers wait for the cores that free up, the
//! node offers them in proportion to the consumers' balances
//! ([`turns`]): every consumer with a positive balance gets turns in
//! proportion to it, and the consumers without one (strangers, free riders
//! and fresh identities alike) share [`STRANGERS_SHARE`] of the turns
//! between them, whatever their number, so that many fresh identities gain
//! nothing a single one would not. The owner's own users come before all
//! of them (see [`crate::node::spec::UserPolicy::first`]); idle cores are
//! always given away (the order only says who is offered first when not
//! everyone can be).
//!
//! A balance never goes below zero, so a consumer cannot be worse off than
//! a newcomer (whitewashing gains nothing), and nobody's report about a
//! third party is used. The ledger keeps at most [`MAX_CONSUMERS`]
//! entries; when full, the entry with the smallest balance that was
//! touched longest ago makes room.

use std::collections::BTreeMap;

use crate::Time;
use crate::bounded::make_room;

/// The most consumers a ledger keeps.
pub const MAX_CONSUMERS: usize = 4096;

/// The share of turns that consumers without a balance have together
/// while consumers with one wait too, in percent.
pub const STRANGERS_SHARE: u64 = 10;

/// The largest ratio of two nodes' core speeds a favour is scaled by.
pub const MAX_SPEED_RATIO: u64 = 16;

/// Favours, in this machine's core-milliseconds.
pub type Favour = u64;

/// `d` in whole milliseconds (saturating).
pub fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One consumer's account.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Account {
    received: Favour,
    given: Favour,
    /// When it last changed.
    touched: Time,
}

impl Account {
    fn balance(&self) -> Favour {
        self.received.saturating_sub(self.given)
    }
}

/// A node's balances with the consumers it dealt with.
#[derive(Debug, Clone, Default)]
pub struct Ledger<P> {
    accounts: BTreeMap<P, Account>,
    /// How many times a favour was counted: a driver that keeps the
    /// ledger across restarts saves it when this moved.
    changes: u64,
}

impl<P: Ord + Clone> Ledger<P> {
    /// An empty ledger.
    pub fn new() -> Self {
        Ledger {
            accounts: BTreeMap::new(),
            changes: 0,
        }
    }

    /// Every account: the consumer, the favours received from it and
    /// those given to it.
    pub fn accounts(&self) -> impl Iterator<Item = (&P, Favour, Favour)> {
        self.accounts.iter().map(|(p, a)| (p, a.received, a.given))
    }

    /// Takes back an account a driver kept across a restart (see
    /// [`Ledger::accounts`]); within [`MAX_CONSUMERS`] as always.
    pub fn restore(&mut self, consumer: &P, received: Favour, given: Favour, now: Time) {
        let account = self.account(consumer, now);
        account.received = received;
        account.given = given;
    }

    /// How many favours were counted since the ledger was made (restored
    /// accounts not counted).
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// This node ran `cores` cores for `ms` milliseconds for a job homed at
    /// `consumer`.
    pub fn gave(&mut self, consumer: &P, cores: u32, ms: u64, now: Time) {
        let favour = u64::from(cores).saturating_mul(ms);
        self.changes = self.changes.wrapping_add(1);
        let account = self.account(consumer, now);
        account.given = account.given.saturating_add(favour);
    }

    /// Node `by` ran `cores` cores for `ms` milliseconds for a job homed
    /// here, its cores `speed` against this node's `own_speed`.
    pub fn received(&mut self, by: &P, cores: u32, ms: u64, speed: u32, own_speed: u32, now: Time) {
        let favour = scaled(u64::from(cores).saturating_mul(ms), speed, own_speed);
        self.changes = self.changes.wrapping_add(1);
        let account = self.account(by, now);
        account.received = account.received.saturating_add(favour);
    }

    /// What `consumer` did for this node beyond what it got, in this
    /// machine's core-milliseconds; zero for strangers.
    pub fn balance(&self, consumer: &P) -> Favour {
        self.accounts.get(consumer).map_or(0, Account::balance)
    }

    /// Every consumer with a positive balance, and the balance.
    pub fn creditors(&self) -> impl Iterator<Item = (&P, Favour)> {
        self.accounts
            .iter()
            .map(|(p, a)| (p, a.balance()))
            .filter(|(_, b)| *b > 0)
    }

    /// How many consumers the ledger keeps.
    pub fn len(&self) -> usize {
        self.accounts.len()
    }

    /// Whether the ledger keeps none.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }

    fn account(&mut self, consumer: &P, now: Time) -> &mut Account {
        // Full: the smallest balance touched longest ago makes room.
        make_room(&mut self.accounts, consumer, MAX_CONSUMERS, |a| {
            (a.balance(), a.touched)
        });
        let account = self.accounts.entry(consumer.clone()).or_default();
        account.touched = now;
        account
    }
}

/// `favour` done on a core of speed `speed`, in cores of speed
/// `own_speed`: the ratio bounded by [`MAX_SPEED_RATIO`] either way (and
/// a speed of zero taken as one).
fn scaled(favour: Favour, speed: u32, own_speed: u32) -> Favour {
    let speed = u64::from(speed.max(1));
    let own = u64::from(own_speed.max(1));
    let speed = speed.clamp(
        own.div_ceil(MAX_SPEED_RATIO),
        own.saturating_mul(MAX_SPEED_RATIO),
    );
    let scaled = u128::from(favour) * u128::from(speed) / u128::from(own);
    u64::try_from(scaled).unwrap_or(u64::MAX)
}

/// The order in which waiting jobs are offered cores: `consumers[i]` is
/// the consumer of the `i`-th waiting job (in queue order), `balance` its
/// balance. Returns the indices in the order of their turns: each
/// consumer's jobs keep their order; consumers with a balance get turns
/// in proportion to it (stride scheduling: the `k`-th job of a consumer
/// of balance `b` comes at `(k + 1) / b`), and the consumers without one
/// share [`STRANGERS_SHARE`] percent of the turns as if they were one
/// consumer (their jobs in queue order among themselves). With no
/// creditor waiting, the order is the queue's.
pub fn turns<P: Ord>(consumers: &[P], balance: impl Fn(&P) -> Favour) -> Vec<usize> {
    let balances: Vec<Favour> = consumers.iter().map(&balance).collect();
    // The creditors' balances that wait, each counted once.
    let mut waiting: BTreeMap<&P, Favour> = BTreeMap::new();
    for (p, b) in consumers.iter().zip(&balances) {
        if *b > 0 {
            waiting.insert(p, *b);
        }
    }
    let credit: u128 = waiting.values().map(|b| u128::from(*b)).sum();
    if credit == 0 {
        return (0..consumers.len()).collect();
    }
    // The strangers' weight: their share of all turns.
    let strangers =
        (credit * u128::from(STRANGERS_SHARE) / u128::from(100 - STRANGERS_SHARE)).max(1);
    // Each job's place: (k + 1) / weight, as a fraction.
    let mut seen: BTreeMap<Option<&P>, u128> = BTreeMap::new();
    let mut places: Vec<(u128, u128, usize)> = Vec::with_capacity(consumers.len());
    for (i, (p, b)) in consumers.iter().zip(&balances).enumerate() {
        let (key, weight) = if *b > 0 {
            (Some(p), u128::from(*b))
        } else {
            (None, strangers)
        };
        let k = seen.entry(key).or_insert(0);
        *k += 1;
        places.push((*k, weight, i));
    }
    // a/b < c/d  <=>  a*d < c*b (products of at most 2^64 * 2^70).
    places.sort_by(|(k1, w1, i1), (k2, w2, i2)| {
        (k1.saturating_mul(*w2))
            .cmp(&k2.saturating_mul(*w1))
            .then(i1.cmp(i2))
    });
    places.into_iter().map(|(_, _, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const T: Time = Duration::ZERO;

    #[test]
    fn a_balance_is_what_was_received_less_what_was_given_never_below_zero() {
        let mut ledger = Ledger::new();
        ledger.received(&1, 2, 1000, 100, 100, T);
        ledger.gave(&1, 1, 500, T);
        assert_eq!(ledger.balance(&1), 1500);
        ledger.gave(&2, 4, 1000, T);
        assert_eq!(
            ledger.balance(&2),
            0,
            "a debtor is no worse than a stranger"
        );
        assert_eq!(ledger.balance(&3), 0);
    }

    #[test]
    fn a_faster_nodes_favour_counts_for_more_within_bounds() {
        let mut ledger = Ledger::new();
        ledger.received(&1, 1, 1000, 200, 100, T);
        assert_eq!(ledger.balance(&1), 2000);
        ledger.received(&2, 1, 1000, 50, 100, T);
        assert_eq!(ledger.balance(&2), 500);
        // A node that claims a huge speed gets at most the bound.
        ledger.received(&3, 1, 1000, u32::MAX, 100, T);
        assert_eq!(ledger.balance(&3), 1000 * MAX_SPEED_RATIO);
        ledger.received(&4, u32::MAX, u64::MAX, u32::MAX, 1, T);
        assert_eq!(ledger.balance(&4), u64::MAX, "saturates");
    }

    #[test]
    fn creditors_get_turns_in_proportion_to_their_balances() {
        // Creditor 1 (balance 3), creditor 2 (balance 1), 100 jobs each,
        // queued 2's first.
        let consumers: Vec<u32> = std::iter::repeat_n(2, 100)
            .chain(std::iter::repeat_n(1, 100))
            .collect();
        let order = turns(&consumers, |p| if *p == 1 { 3 } else { 1 });
        let first: Vec<u32> = order[..40].iter().map(|&i| consumers[i]).collect();
        let ones = first.iter().filter(|p| **p == 1).count();
        assert_eq!(ones, 30, "3:1 in the first 40 turns: {first:?}");
        // Each consumer's jobs keep their order.
        let ones: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| consumers[i] == 1)
            .collect();
        assert!(ones.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn strangers_share_a_capped_part_however_many_they_are() {
        // One creditor with 100 jobs, then 1000 strangers (fresh
        // identities) with one job each, queued first.
        let mut consumers: Vec<u32> = (1000..2000).collect();
        consumers.extend(std::iter::repeat_n(7, 100));
        let order = turns(&consumers, |p| if *p == 7 { 50 } else { 0 });
        let first: Vec<u32> = order[..100].iter().map(|&i| consumers[i]).collect();
        let strangers = first.iter().filter(|p| **p != 7).count();
        assert!(
            (9..=11).contains(&strangers),
            "{strangers} of 100 turns to strangers"
        );
        // With no creditor waiting, the queue's order.
        let alone: Vec<u32> = (1000..1010).collect();
        assert_eq!(turns(&alone, |_| 0), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn a_full_ledger_keeps_its_creditors() {
        let mut ledger = Ledger::new();
        ledger.received(&0u32, 1, 1, 1, 1, T);
        for p in 1..(MAX_CONSUMERS as u32 * 2) {
            ledger.gave(&p, 1, 1, Duration::from_millis(u64::from(p)));
        }
        assert_eq!(ledger.len(), MAX_CONSUMERS);
        assert_eq!(ledger.balance(&0), 1);
    }
}

//! Which nodes hold copies of a job's replicated state (issue 16).
//!
//! A job's copies are the nodes that run its ranks: they follow the job
//! anyway, and a copy there costs no extra node. While those are fewer
//! than the replication degree (a one-node job, a job whose ranks all run
//! at home), near nodes that run none of its ranks hold **extra** copies.
//! Extras chosen once are kept while they can still serve, so that a job's
//! copies do not move each time the neighbour set changes (every move
//! sends a whole log). New extras are the nearest candidates; candidates
//! at the same (or an unknown) distance are ordered by a rendezvous hash of
//! the job and the peer, so that the extra copies of different jobs spread
//! over the near nodes instead of all landing on one.
//!
//! The node and the simulator both place copies with [`choose_copies`]; the
//! [`Replica`](crate::replica::Replica) is then told with
//! [`set_copies`](crate::replica::Replica::set_copies).

use std::collections::BTreeSet;
use std::hash::Hash;
use std::time::Duration;

use crate::replica::MAX_COPIES;

/// How many copies a job has besides its home, where it can: three, so
/// that the home and any one copy can fail together and the two left are
/// still a majority that can prove their election (see
/// [`crate::replica`]'s mandates; with two, the one left could not).
pub const DEFAULT_DEGREE: usize = 3;

/// The copies [`choose_copies`] placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copies<P> {
    /// Every node that holds a copy (at most [`MAX_COPIES`]).
    pub all: BTreeSet<P>,
    /// Those among them that run none of the job's ranks: pass them back
    /// as `kept_extras` next time.
    pub extras: BTreeSet<P>,
}

/// Places the copies of `job`, whose primary is `primary`.
///
/// - `members`: the nodes that run the job's ranks.
/// - `kept_extras`: the extras placed last time.
/// - `near`: candidates for new extras, with their distance when known.
/// - `usable`: whether a node may hold a copy (not known to be gone).
/// - `degree`: how many copies the job should have besides its primary.
///
/// The primary is never its own copy. Members come first (at most
/// [`MAX_COPIES`] of them), then kept extras, then the nearest candidates,
/// until there are `degree` copies.
pub fn choose_copies<P: Clone + Ord + Hash>(
    job: u64,
    primary: &P,
    members: impl IntoIterator<Item = P>,
    kept_extras: &BTreeSet<P>,
    near: &[(P, Option<Duration>)],
    usable: impl Fn(&P) -> bool,
    degree: usize,
) -> Copies<P> {
    let degree = degree.min(MAX_COPIES);
    let eligible = |p: &P| p != primary && usable(p);
    let all: BTreeSet<P> = members
        .into_iter()
        .filter(eligible)
        .collect::<BTreeSet<P>>()
        .into_iter()
        .take(MAX_COPIES)
        .collect();
    let need = degree.saturating_sub(all.len());
    let mut extras: BTreeSet<P> = kept_extras
        .iter()
        .filter(|p| eligible(p) && !all.contains(p))
        .take(need)
        .cloned()
        .collect();
    if extras.len() < need {
        let mut ranked: Vec<(Duration, u64, &P)> = near
            .iter()
            .filter(|(p, _)| eligible(p) && !all.contains(p) && !extras.contains(p))
            .map(|(p, d)| (d.unwrap_or(Duration::MAX), crate::rendezvous(&job, p), p))
            .collect();
        ranked.sort();
        for (_, _, p) in ranked {
            if extras.len() >= need {
                break;
            }
            extras.insert(p.clone());
        }
    }
    let mut all = all;
    all.extend(extras.iter().cloned());
    Copies { all, extras }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    fn set(v: &[u32]) -> BTreeSet<u32> {
        v.iter().copied().collect()
    }

    #[test]
    fn members_are_the_copies_when_they_are_enough() {
        let c = choose_copies(1, &0, [0, 3, 4], &set(&[]), &[(9, ms(1))], |_| true, 2);
        assert_eq!(c.all, set(&[3, 4]));
        assert!(c.extras.is_empty());
    }

    #[test]
    fn the_nearest_fill_up_to_the_degree_and_never_the_primary() {
        let near = [(0, ms(0)), (7, ms(30)), (8, ms(2)), (9, ms(5)), (3, ms(1))];
        let c = choose_copies(1, &0, [3], &set(&[]), &near, |_| true, 3);
        assert_eq!(c.all, set(&[3, 8, 9]));
        assert_eq!(c.extras, set(&[8, 9]));
    }

    #[test]
    fn extras_placed_before_stay_while_usable() {
        let near = [(8, ms(1)), (9, ms(2))];
        // 7 is farther than 8 and 9 but was placed before: it stays.
        let c = choose_copies(1, &0, [], &set(&[7]), &near, |_| true, 2);
        assert_eq!(c.all, set(&[7, 8]));
        // Once it is gone, the nearest replaces it.
        let c = choose_copies(1, &0, [], &set(&[7]), &near, |p| *p != 7, 2);
        assert_eq!(c.all, set(&[8, 9]));
        // A kept extra that now runs a rank is a member, not an extra.
        let c = choose_copies(1, &0, [7], &set(&[7]), &near, |_| true, 2);
        assert_eq!(c.all, set(&[7, 8]));
        assert_eq!(c.extras, set(&[8]));
    }

    #[test]
    fn extras_at_unknown_distance_spread_over_jobs() {
        let near: Vec<(u32, Option<Duration>)> = (1..=20).map(|p| (p, None)).collect();
        let firsts: BTreeSet<u32> = (0..50)
            .map(|job| {
                let c = choose_copies(job, &0, [], &set(&[]), &near, |_| true, 1);
                *c.all.first().unwrap()
            })
            .collect();
        // The same node for every job would be one; a spread gives many.
        assert!(firsts.len() > 5, "{firsts:?}");
        // And every node computes the same choice.
        let a = choose_copies(7, &0, [], &set(&[]), &near, |_| true, 2);
        let mut reversed = near.clone();
        reversed.reverse();
        let b = choose_copies(7, &0, [], &set(&[]), &reversed, |_| true, 2);
        assert_eq!(a, b);
    }

    #[test]
    fn never_more_than_max_copies() {
        let members: Vec<u32> = (1..100).collect();
        let c = choose_copies(1, &0, members, &set(&[]), &[], |_| true, 1000);
        assert_eq!(c.all.len(), MAX_COPIES);
    }
}

//! Fair sharing (issue 33, item 4): on a small seeded grid where cores are
//! scarce, the Network of Favors gives contributors more of the core time
//! than free riders, and many fresh identities together no more than the
//! strangers' share; first come, first served does neither.

use zorilla_core::favours::STRANGERS_SHARE;
use zorilla_sim::fairshare::{Class, Outcome, Setup, run};
use zorilla_sim::sim::Mode;

fn shares(o: &Outcome) -> (f64, f64, f64) {
    eprintln!(
        "{}: contributors {:.1}% ({:.1}% each), free riders {:.1}% ({:.1}% each), identities {:.1}%",
        o.mode.name(),
        o.share(Class::Contributor),
        o.user_share(Class::Contributor),
        o.share(Class::FreeRider),
        o.user_share(Class::FreeRider),
        o.share(Class::Identity)
    );
    assert!(o.violations.is_empty(), "{:?}", o.violations);
    (
        o.user_share(Class::Contributor),
        o.user_share(Class::FreeRider),
        o.share(Class::Identity),
    )
}

/// The direction of the result, on `Setup::SMALL` with seed 1 (1.75
/// times the cores asked for): with fair sharing a contributor gets at
/// least twice a free rider's share and the identities together at most
/// the strangers' share (10%); the same plans served first come, first
/// served miss both (so that the test fails if the ordering is removed).
#[test]
fn contributors_get_more_than_free_riders_and_identities_no_more_than_strangers() {
    let setup = Setup::SMALL;
    let cap = STRANGERS_SHARE as f64;
    let (contributor, free_rider, identities) = shares(&run(&setup, Mode::Ours, 1).unwrap());
    assert!(
        contributor >= 2.0 * free_rider,
        "a contributor {contributor:.1}%, a free rider {free_rider:.1}%"
    );
    assert!(identities <= cap, "identities together {identities:.1}%");
    let (contributor, free_rider, identities) = shares(&run(&setup, Mode::OursFcfs, 1).unwrap());
    assert!(
        contributor < 2.0 * free_rider && identities > cap,
        "first come, first served: a contributor {contributor:.1}%, a free rider \
         {free_rider:.1}%, identities {identities:.1}%"
    );
}

/// The plans are the seed's: the same seed, the same figures.
#[test]
fn runs_are_reproducible_from_the_seed() {
    let setup = Setup::SMALL;
    let a = run(&setup, Mode::Ours, 3).unwrap();
    let b = run(&setup, Mode::Ours, 3).unwrap();
    assert_eq!(a.per_user, b.per_user);
}

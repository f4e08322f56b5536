//! A scheduler fed extreme values: adverts, offers, grants, specs and times
//! at 0, 1, `u32::MAX`, `u64::MAX` seconds, `Duration::MAX`, interleaved
//! with huge jumps of time. Whatever a hostile peer or client sends, and
//! however long the node runs, the core must not panic, and what it
//! documents must still hold.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use zorilla_core::advert::{
    Advert, DeclineReason, FloodHeader, HoldId, JobId, Message, Placed, RefuseReason,
    Strategy as MapStrategy, WorkerCount,
};
use zorilla_core::limits::{self, MAX_WORKERS};
use zorilla_core::liveness::LostCause;
use zorilla_core::node::{
    Failure, Input, JobEvent, JobSpec, LostPolicy, Output, Phase, Scheduler, SchedulerConfig,
    WorkerEnd,
};
use zorilla_core::resources::{Machine, Resources};

const ME: u32 = 0;

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (0u64..5_000).prop_map(Duration::from_millis),
        1 => Just(Duration::ZERO),
        1 => Just(Duration::from_nanos(1)),
        1 => Just(limits::MAX_LIFETIME),
        1 => Just(Duration::from_secs(u64::MAX - 1)),
        1 => Just(Duration::from_secs(u64::MAX)),
        1 => Just(Duration::MAX),
    ]
}

fn count() -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => 1u32..12,
        1 => Just(0),
        1 => Just(u32::MAX),
        1 => Just(u32::MAX - 1),
        1 => Just(MAX_WORKERS),
        1 => Just(MAX_WORKERS + 1),
    ]
}

fn big() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0u64..100_000, 1 => Just(1), 1 => Just(u64::MAX)]
}

fn resources() -> impl Strategy<Value = Resources> {
    (count(), big(), big()).prop_map(|(c, m, d)| Resources::new(c, m, d))
}

/// Cores, busy cores and speed, each ordinary or extreme.
fn machine() -> impl Strategy<Value = Machine> {
    (count(), count(), count()).prop_map(|(cores, busy, speed)| Machine {
        cores,
        busy,
        speed,
        reach: zorilla_core::resources::Reachability::Unknown,
    })
}

fn workers() -> impl Strategy<Value = WorkerCount> {
    (count(), count()).prop_map(|(min, max)| WorkerCount { min, max })
}

fn strategy() -> impl Strategy<Value = MapStrategy> {
    prop_oneof![Just(MapStrategy::Spread), Just(MapStrategy::Concentrate)]
}

fn job() -> impl Strategy<Value = JobId> {
    prop_oneof![Just(JobId(0)), Just(JobId(1)), Just(JobId(u64::MAX))]
}

fn peer() -> impl Strategy<Value = u32> {
    prop_oneof![Just(ME), 1u32..5, Just(u32::MAX)]
}

fn advert() -> impl Strategy<Value = Advert<u32>> {
    (
        job(),
        peer(),
        resources(),
        workers(),
        strategy(),
        duration(),
        (
            count(),
            any::<u8>(),
            proptest::option::of(duration()),
            duration(),
        ),
    )
        .prop_map(
            |(job, home, per_worker, workers, strategy, expires_in, (seq, ttl, budget, path))| {
                Advert {
                    job,
                    home,
                    per_worker,
                    workers,
                    strategy,
                    expires_in,
                    flood: FloodHeader {
                        seq,
                        ttl,
                        latency_budget: budget,
                        path_rtt: path,
                    },
                    owner: None,
                    kind: zorilla_core::advert::WorkKind::Wasm,
                    priority: 0,
                    preemptible: false,
                }
            },
        )
}

fn ranks() -> impl Strategy<Value = Vec<u32>> {
    prop_oneof![
        proptest::collection::vec(count(), 0..6),
        Just(vec![0; 3]),
        // A grant far larger than any hold.
        Just((0..20_000).collect()),
    ]
}

fn message() -> impl Strategy<Value = Message<u32>> {
    prop_oneof![
        advert().prop_map(Message::Advert),
        (job(), count(), duration(), resources(), machine()).prop_map(
            |(job, workers, distance, residue, machine)| Message::Offer {
                hold: HoldId(0),
                job,
                workers,
                distance,
                residue,
                machine,
            }
        ),
        job().prop_map(|job| Message::Decline {
            job,
            reason: DeclineReason::Busy
        }),
        (job(), ranks()).prop_map(|(job, ranks)| Message::Withdraw {
            hold: HoldId(0),
            job,
            ranks
        }),
        (job(), ranks(), any::<u32>(), ranks()).prop_map(|(job, ranks, incarnation, placed)| {
            Message::Grant {
                hold: HoldId(0),
                job,
                ranks,
                incarnation,
                placement: placed
                    .into_iter()
                    .map(|r| {
                        (
                            r,
                            Placed {
                                node: r,
                                incarnation,
                            },
                        )
                    })
                    .collect(),
            }
        }),
        (job(), ranks(), ranks()).prop_map(|(job, placed, replaced)| Message::Placement {
            job,
            phase: Phase::Running,
            placement: placed
                .into_iter()
                .map(|r| (
                    r,
                    Placed {
                        node: 0,
                        incarnation: r
                    }
                ))
                .collect(),
            replaced,
        }),
        job().prop_map(|job| Message::Refuse {
            hold: None,
            job,
            reason: RefuseReason::Cancelled
        }),
    ]
}

fn spec() -> impl Strategy<Value = JobSpec> {
    (
        resources(),
        workers(),
        strategy(),
        duration(),
        any::<bool>(),
    )
        .prop_map(
            |(per_worker, workers, strategy, lifetime, replace)| JobSpec {
                runs: 1,
                per_worker,
                workers,
                strategy,
                lifetime,
                on_worker_lost: if replace {
                    LostPolicy::Replace
                } else {
                    LostPolicy::Fail
                },
                kind: zorilla_core::advert::WorkKind::Wasm,
                priority: 0,
                tasks: None,
            },
        )
}

#[derive(Debug, Clone)]
enum Op {
    Submit(JobId, JobSpec),
    Deliver(Advert<u32>, Duration),
    Message(u32, Message<u32>, Option<Duration>),
    Cancel(JobId),
    RankEnded(JobId, u32, u32, u32, WorkerEnd),
    RanksLost(JobId, u32, Vec<u32>),
    WorkersEnded(JobId, Vec<u32>),
    PeerLost(u32),
    Resize(JobId, u32),
    Timeout,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (job(), spec()).prop_map(|(j, s)| Op::Submit(j, s)),
        3 => (advert(), duration()).prop_map(|(a, d)| Op::Deliver(a, d)),
        4 => (peer(), message(), proptest::option::of(duration()))
            .prop_map(|(p, m, r)| Op::Message(p, m, r)),
        1 => job().prop_map(Op::Cancel),
        2 => (job(), peer(), 0u32..6, prop_oneof![0u32..4, Just(u32::MAX)], worker_end())
            .prop_map(|(j, p, r, i, e)| Op::RankEnded(j, p, r, i, e)),
        1 => (job(), peer(), ranks()).prop_map(|(j, p, r)| Op::RanksLost(j, p, r)),
        1 => (job(), ranks()).prop_map(|(j, r)| Op::WorkersEnded(j, r)),
        1 => peer().prop_map(Op::PeerLost),
        1 => (job(), count()).prop_map(|(j, m)| Op::Resize(j, m)),
        2 => Just(Op::Timeout),
    ]
}

fn worker_end() -> impl Strategy<Value = WorkerEnd> {
    prop_oneof![
        3 => Just(WorkerEnd::Exited(0)),
        1 => prop_oneof![Just(i32::MIN), Just(1), Just(i32::MAX)].prop_map(WorkerEnd::Exited),
        1 => Just(WorkerEnd::Failed(Failure::Trapped("unreachable".into()))),
        1 => Just(WorkerEnd::Cancelled),
    ]
}

fn step() -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (0u64..3_000).prop_map(Duration::from_millis),
        1 => Just(Duration::from_secs(u64::MAX / 2)),
        1 => Just(Duration::MAX),
    ]
}

/// What the test remembers of the jobs this node is home to.
#[derive(Default)]
struct Seen {
    phases: BTreeMap<JobId, Phase>,
    max: BTreeMap<JobId, u32>,
    ended: BTreeSet<JobId>,
}

fn check(node: &Scheduler<u32>, out: &[Output<u32>], seen: &mut Seen) -> Result<(), TestCaseError> {
    let config = node.config();
    let free = node.free();
    prop_assert!(free.cores <= config.resources.cores);
    prop_assert!(free.memory_mib <= config.resources.memory_mib);
    prop_assert!(free.disk_mib <= config.resources.disk_mib);
    for hold in node.holds() {
        prop_assert!(hold.since <= hold.until, "{hold:?}");
        prop_assert!(hold.until <= hold.since.saturating_add(config.hold_timeout));
    }
    prop_assert!(node.pending().count() <= config.pending_capacity);
    let _ = node.next_timeout();
    for output in out {
        match output {
            // What the core sends passes the checks its peers apply.
            Output::Send { msg, .. } => {
                prop_assert_eq!(limits::check_message(msg), Ok(()), "{:?}", msg);
            }
            Output::Flood(advert) => {
                prop_assert_eq!(limits::check_advert(advert), Ok(()), "{:?}", advert);
            }
            // A job ends once, and with the phase its home keeps.
            Output::Job(JobEvent::Ended { job, phase, .. }) => {
                prop_assert!(seen.ended.insert(*job), "{job} ended twice");
                prop_assert!(*phase > Phase::Running);
                prop_assert_eq!(node.phase(*job), Some(*phase));
            }
            _ => {}
        }
    }
    for (job, phase) in node.home_jobs() {
        // Phases only move forward, and an end is final.
        if let Some(before) = seen.phases.insert(job, phase) {
            prop_assert!(before <= phase, "{job}: {before:?} then {phase:?}");
            prop_assert!(
                !before.is_end() || before == phase,
                "{job}: ended {before:?}, then {phase:?}"
            );
        }
        let report = node.report(job).expect("a home job has a report");
        let _ = report.explain();
        // Ranks granted are distinct and no more than the job may use.
        let placement = node.placement(job).expect("a home job has a placement");
        let ranks: Vec<u32> = placement.values().flatten().copied().collect();
        let distinct: BTreeSet<u32> = ranks.iter().copied().collect();
        prop_assert_eq!(distinct.len(), ranks.len());
        if let Some(max) = seen.max.get(&job) {
            prop_assert!(ranks.len() as u64 <= u64::from(*max), "{job}: {ranks:?}");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn extreme_inputs_and_times_never_panic_and_keep_the_invariants(
        resources in prop_oneof![
            Just(Resources::new(8, 8192, 8192)),
            Just(Resources::new(u32::MAX, u64::MAX, u64::MAX)),
        ],
        ops in proptest::collection::vec((step(), op()), 1..40),
    ) {
        let config = SchedulerConfig {
            resources,
            pending_capacity: 4,
            ..SchedulerConfig::default()
        };
        let mut node = Scheduler::new(ME, config);
        let mut seen = Seen::default();
        let mut now = Duration::ZERO;
        for (step, op) in ops {
            now = now.saturating_add(step);
            let out = match op {
                Op::Submit(job, spec) => {
                    let fresh = node.phase(job).is_none();
                    let max = spec.workers.max;
                    // A spec outside the limits is not admitted: it never
                    // reaches the scheduler.
                    let Ok(spec) = node.admit(spec) else {
                        continue;
                    };
                    let out = node.handle(now, Input::Submit { job, spec, owner: None });
                    let rejected = out.iter().any(|o| matches!(o, Output::Job(JobEvent::Rejected { .. })));
                    if fresh && !rejected {
                        prop_assert!(max <= MAX_WORKERS);
                        seen.max.insert(job, max);
                    }
                    out
                }
                Op::Deliver(advert, distance) => {
                    node.handle(now, Input::AdvertDelivered { advert, distance })
                }
                Op::Message(from, msg, rtt) => {
                    node.handle(now, Input::Message { from, msg, rtt })
                }
                Op::Cancel(job) => node.handle(now, Input::Cancel(job)),
                Op::RankEnded(job, from, rank, incarnation, end) => node.handle(
                    now,
                    Input::RankEnded { job, node: from, rank, incarnation, end, digest: None },
                ),
                Op::RanksLost(job, from, ranks) => node.handle(
                    now,
                    Input::RanksLost { job, node: from, ranks, cause: LostCause::Silent },
                ),
                Op::WorkersEnded(job, ranks) => node.handle(now, Input::WorkersEnded { job, ranks }),
                Op::PeerLost(peer) => node.handle(now, Input::PeerLost(peer)),
                Op::Resize(job, max) => match node.resize(now, job, max) {
                    Ok(out) => {
                        prop_assert!(max <= MAX_WORKERS);
                        seen.max.insert(job, max);
                        out
                    }
                    Err(e) => {
                        let _ = e.to_string();
                        Vec::new()
                    }
                },
                Op::Timeout => {
                    // Time only moves forward: to the timeout if it is later.
                    if let Some(at) = node.next_timeout() {
                        now = now.max(at);
                    }
                    node.handle_timeout(now)
                }
            };
            check(&node, &out, &mut seen)?;
        }
    }
}

/// The two submissions of the issue: a lifetime of `u64::MAX` seconds, and
/// one just below 2^64 s, are refused with a sentence (neither panics).
#[test]
fn lifetimes_near_two_to_the_64_seconds_are_refused() {
    for secs in [u64::MAX, u64::MAX - 1] {
        let node = Scheduler::new(ME, SchedulerConfig::default());
        let spec = JobSpec {
            runs: 1,
            per_worker: Resources::new(1, 64, 0),
            workers: WorkerCount::rigid(1),
            strategy: MapStrategy::Concentrate,
            lifetime: Duration::from_secs(secs),
            on_worker_lost: LostPolicy::Fail,
            kind: zorilla_core::advert::WorkKind::Wasm,
            priority: 0,
            tasks: None,
        };
        let sentence = node.admit(spec).unwrap_err().to_string();
        assert!(sentence.starts_with("lifetime is "), "{sentence}");
        assert!(sentence.contains("at most"), "{sentence}");
    }
}

/// The advert of the issue: `expires_in` just below 2^64 s reaches a
/// member (as if the node's decoder had let it through): no panic, and the
/// member ignores it; the largest valid expiry at the largest time gets an
/// offer.
#[test]
fn an_advert_expiring_in_nearly_two_to_the_64_seconds_does_not_panic_a_member() {
    let mut node = Scheduler::new(1u32, SchedulerConfig::default());
    let advert = Advert {
        job: JobId(9),
        home: 0,
        per_worker: Resources::new(1, 64, 0),
        workers: WorkerCount::rigid(1),
        strategy: MapStrategy::Spread,
        expires_in: Duration::from_secs(u64::MAX - 1),
        flood: FloodHeader {
            seq: 0,
            ttl: 2,
            latency_budget: None,
            path_rtt: Duration::ZERO,
        },
        owner: None,
        kind: zorilla_core::advert::WorkKind::Wasm,
        priority: 0,
        preemptible: false,
    };
    assert!(limits::check_advert(&advert).is_err());
    let deliver = |node: &mut Scheduler<u32>, now, advert| {
        node.handle(
            now,
            Input::AdvertDelivered {
                advert,
                distance: Duration::from_millis(1),
            },
        )
    };
    let out = deliver(&mut node, Duration::from_secs(100), advert.clone());
    assert_eq!(out, vec![]);
    let valid = Advert {
        expires_in: limits::MAX_ADVERT_EXPIRY,
        ..advert
    };
    let out = deliver(&mut node, Duration::MAX - Duration::from_secs(1), valid);
    assert!(
        matches!(
            &out[..],
            [Output::Send {
                msg: Message::Offer { .. },
                ..
            }]
        ),
        "{out:?}"
    );
    let holds: Vec<_> = node.holds().map(|h| h.until).collect();
    assert_eq!(holds, vec![Duration::MAX]);
    let _ = node.handle_timeout(Duration::MAX);
}

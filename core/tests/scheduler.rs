//! One scheduler at a time, fed inputs by hand: the exact outputs it gives.

use std::collections::BTreeMap;
use std::time::Duration;

use zorilla_core::advert::{
    Advert, DeclineReason, FloodHeader, JobId, Message, Placed, RefuseReason, Strategy, WorkerCount,
};
use zorilla_core::liveness::LostCause;
use zorilla_core::node::{
    EndReason, Input, JobEvent, JobSpec, LostPolicy, LostReason, Output, OwnerLimits, Phase,
    RankOutcome, ResizeError, Scheduler, SchedulerConfig, WorkerEnd,
};
use zorilla_core::resources::Resources;
use zorilla_core::schedule::ScheduleConfig;

const HOME: u32 = 0;
const JOB: JobId = JobId(7);

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn member(cores: u32) -> Scheduler<u32> {
    Scheduler::new(
        1,
        SchedulerConfig {
            resources: Resources::new(cores, 4096, 4096),
            ..SchedulerConfig::default()
        },
    )
}

fn advert(workers: WorkerCount) -> Advert<u32> {
    Advert {
        job: JOB,
        home: HOME,
        per_worker: Resources::new(1, 100, 0),
        workers,
        strategy: Strategy::Concentrate,
        expires_in: Duration::from_secs(60),
        flood: FloodHeader {
            seq: 0,
            ttl: 1,
            latency_budget: None,
            path_rtt: ms(1),
        },
    }
}

fn spec(workers: WorkerCount) -> JobSpec {
    JobSpec {
        per_worker: Resources::new(1, 100, 0),
        workers,
        strategy: Strategy::Concentrate,
        lifetime: Duration::from_secs(60),
        on_worker_lost: LostPolicy::Fail,
    }
}

fn offer(workers: u32) -> Message<u32> {
    Message::Offer {
        job: JOB,
        workers,
        distance: ms(1),
        residue: Resources::ZERO,
    }
}

fn deliver(node: &mut Scheduler<u32>, now: Duration, workers: WorkerCount) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::AdvertDelivered {
            advert: advert(workers),
            distance: ms(1),
        },
    )
}

/// A grant of `ranks` as the home sends it, with the placement it carries
/// (here: the ranks on node 1, as far as the member cares).
fn grant(job: JobId, ranks: Vec<u32>, incarnation: u32) -> Message<u32> {
    let placement = placed_on(&ranks, 1, incarnation);
    Message::Grant {
        job,
        ranks,
        incarnation,
        placement,
    }
}

fn placed_on(ranks: &[u32], node: u32, incarnation: u32) -> BTreeMap<u32, Placed<u32>> {
    ranks
        .iter()
        .map(|&rank| (rank, Placed { node, incarnation }))
        .collect()
}

/// Whether the home sent `to` a grant of `ranks` with `incarnation`, whose
/// placement places them there.
fn granted(out: &[Output<u32>], to: u32, ranks: Vec<u32>, incarnation: u32) -> bool {
    out.iter().any(|o| match o {
        Output::Send {
            to: t,
            msg:
                Message::Grant {
                    job: JOB,
                    ranks: r,
                    incarnation: i,
                    placement,
                },
        } => {
            *t == to
                && *r == ranks
                && *i == incarnation
                && ranks.iter().all(|rank| {
                    placement.get(rank)
                        == Some(&Placed {
                            node: to,
                            incarnation,
                        })
                })
        }
        _ => false,
    })
}

fn from_home(node: &mut Scheduler<u32>, now: Duration, msg: Message<u32>) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::Message {
            from: HOME,
            msg,
            rtt: None,
        },
    )
}

#[test]
fn member_offers_what_fits_holds_it_and_starts_granted_ranks() {
    let mut node = member(4);
    let out = deliver(&mut node, ms(0), WorkerCount::rigid(3));
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Offer {
                job: JOB,
                workers: 3,
                distance: ms(1),
                residue: Resources::new(1, 4096 - 300, 4096),
            }
        }]
    );
    assert_eq!(node.free().cores, 1, "offered workers are held");
    // A later flood of the same job is not answered twice.
    assert_eq!(deliver(&mut node, ms(1), WorkerCount::rigid(3)), vec![]);

    let out = from_home(&mut node, ms(2), grant(JOB, vec![4, 5], 3));
    assert_eq!(
        out,
        vec![Output::StartWorkers {
            job: JOB,
            home: HOME,
            ranks: vec![4, 5],
            incarnation: 3,
            placement: placed_on(&[4, 5], 1, 3),
        }]
    );
    assert_eq!(
        node.free().cores,
        2,
        "the ungranted part of the hold is released"
    );
}

#[test]
fn busy_member_declines_once_queues_and_offers_when_resources_free_up() {
    let mut node = member(1);
    let other = Advert {
        job: JobId(99),
        ..advert(WorkerCount::rigid(1))
    };
    node.handle(
        ms(0),
        Input::AdvertDelivered {
            advert: other,
            distance: ms(1),
        },
    );
    from_home(&mut node, ms(1), grant(JobId(99), vec![0], 3));
    let out = deliver(&mut node, ms(2), WorkerCount::rigid(1));
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Decline {
                job: JOB,
                reason: DeclineReason::Busy
            }
        }]
    );
    assert_eq!(node.pending().count(), 1);
    assert_eq!(
        deliver(&mut node, ms(3), WorkerCount::rigid(1)),
        vec![],
        "declined once"
    );

    let out = node.handle(
        ms(4),
        Input::WorkersEnded {
            job: JobId(99),
            ranks: vec![0],
        },
    );
    assert!(
        matches!(
            &out[..],
            [Output::Send {
                to: HOME,
                msg: Message::Offer {
                    job: JOB,
                    workers: 1,
                    ..
                }
            }]
        ),
        "{out:?}"
    );
    assert_eq!(node.pending().count(), 0);
}

/// A member offers the one core it has free for a job of two. When the
/// other core frees up (another job's worker ends) it says nothing yet; a
/// newer flood of the job (the home is still short) finds it with two
/// free, and it raises the offer rather than letting the home wait out the
/// hold.
#[test]
fn a_member_raises_a_short_offer_at_a_newer_flood() {
    let mut node = member(2);
    let other = Advert {
        job: JobId(99),
        ..advert(WorkerCount::rigid(1))
    };
    node.handle(
        ms(0),
        Input::AdvertDelivered {
            advert: other,
            distance: ms(1),
        },
    );
    from_home(&mut node, ms(1), grant(JobId(99), vec![0], 3));
    let out = deliver(&mut node, ms(2), WorkerCount::rigid(2));
    assert!(
        matches!(
            &out[..],
            [Output::Send {
                msg: Message::Offer {
                    job: JOB,
                    workers: 1,
                    ..
                },
                ..
            }]
        ),
        "{out:?}"
    );
    // Nothing more to offer on a newer flood while the core is busy.
    assert_eq!(deliver(&mut node, ms(3), WorkerCount::rigid(2)), vec![]);
    let out = node.handle(
        ms(4),
        Input::WorkersEnded {
            job: JobId(99),
            ranks: vec![0],
        },
    );
    assert_eq!(out, vec![], "offers to other homes wait for a flood");
    assert_eq!(
        deliver(&mut node, ms(5), WorkerCount::rigid(2)),
        vec![Output::Send {
            to: HOME,
            msg: Message::Offer {
                job: JOB,
                workers: 2,
                distance: ms(1),
                residue: Resources::new(0, 4096 - 200, 4096),
            }
        }]
    );
    assert_eq!(node.free().cores, 0, "both cores held");
    assert_eq!(
        deliver(&mut node, ms(6), WorkerCount::rigid(2)),
        vec![],
        "never beyond what the job wants"
    );
}

#[test]
fn a_paused_member_declines_as_busy_and_offers_the_queued_advert_on_resuming() {
    let mut node = member(4);
    assert!(node.set_paused(ms(0), true).is_empty());
    assert!(node.paused());
    let out = deliver(&mut node, ms(1), WorkerCount::rigid(1));
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Decline {
                job: JOB,
                reason: DeclineReason::Busy
            }
        }]
    );
    assert_eq!(node.pending().count(), 1);
    // Resources freeing up do not end the pause.
    assert!(
        node.handle(
            ms(2),
            Input::WorkersEnded {
                job: JobId(99),
                ranks: vec![0],
            },
        )
        .is_empty()
    );
    let out = node.set_paused(ms(3), false);
    assert!(
        matches!(
            &out[..],
            [Output::Send {
                to: HOME,
                msg: Message::Offer {
                    job: JOB,
                    workers: 1,
                    ..
                }
            }]
        ),
        "{out:?}"
    );
    assert!(!node.paused());
    assert_eq!(node.pending().count(), 0);
}

#[test]
fn owner_limits_deny_list_jobs_and_workers_per_job() {
    let mut denied = Scheduler::new(
        1u32,
        SchedulerConfig {
            resources: Resources::new(8, 4096, 0),
            limits: OwnerLimits {
                deny: [HOME].into(),
                ..OwnerLimits::default()
            },
            ..SchedulerConfig::default()
        },
    );
    let out = deliver(&mut denied, ms(0), WorkerCount::rigid(2));
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Decline {
                job: JOB,
                reason: DeclineReason::Denied
            }
        }]
    );
    assert_eq!(denied.pending().count(), 0, "denied adverts are not queued");

    let mut limited = Scheduler::new(
        1u32,
        SchedulerConfig {
            resources: Resources::new(8, 4096, 0),
            limits: OwnerLimits {
                max_jobs: 1,
                max_workers_per_job: 2,
                deny: Default::default(),
            },
            ..SchedulerConfig::default()
        },
    );
    let out = deliver(&mut limited, ms(0), WorkerCount::rigid(8));
    assert!(
        matches!(
            &out[..],
            [Output::Send {
                msg: Message::Offer { workers: 2, .. },
                ..
            }]
        ),
        "{out:?}"
    );
    let second = Advert {
        job: JobId(8),
        ..advert(WorkerCount::rigid(1))
    };
    let out = limited.handle(
        ms(1),
        Input::AdvertDelivered {
            advert: second,
            distance: ms(1),
        },
    );
    assert!(
        matches!(
            &out[..],
            [Output::Send {
                msg: Message::Decline {
                    reason: DeclineReason::TooManyJobs,
                    ..
                },
                ..
            }]
        ),
        "{out:?}"
    );
}

#[test]
fn hold_times_out_with_a_withdrawal_and_a_late_grant_is_refused() {
    let mut node = Scheduler::new(
        1u32,
        SchedulerConfig {
            resources: Resources::new(2, 4096, 0),
            hold_timeout: ms(500),
            ..SchedulerConfig::default()
        },
    );
    deliver(&mut node, ms(0), WorkerCount::rigid(2));
    assert_eq!(node.next_timeout(), Some(ms(500)));
    let out = node.handle_timeout(ms(500));
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Withdraw {
                job: JOB,
                ranks: vec![]
            }
        }]
    );
    assert_eq!(node.free().cores, 2);
    let out = from_home(&mut node, ms(600), grant(JOB, vec![0, 1], 3));
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Withdraw {
                job: JOB,
                ranks: vec![0, 1]
            }
        }]
    );
}

/// A home whose own machine offers no workers (so that every worker comes
/// from the offers the test makes up).
fn home(schedule: ScheduleConfig) -> Scheduler<u32> {
    Scheduler::new(
        HOME,
        SchedulerConfig {
            schedule,
            resources: Resources::ZERO,
            ..SchedulerConfig::default()
        },
    )
}

/// A home whose one-worker rigid job `JOB` was granted to node 10's
/// offer at 1 ms.
fn home_running_one_worker_on_10() -> Scheduler<u32> {
    let mut node = home(ScheduleConfig::paper());
    submit(&mut node, ms(0), WorkerCount::rigid(1));
    offer_from(&mut node, ms(1), 10, 1, 1);
    node
}

/// The client submits job `JOB` with `workers` to `node`.
fn submit(node: &mut Scheduler<u32>, now: Duration, workers: WorkerCount) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::Submit {
            job: JOB,
            spec: spec(workers),
        },
    )
}

fn offer_from(
    node: &mut Scheduler<u32>,
    now: Duration,
    from: u32,
    workers: u32,
    rtt: u64,
) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::Message {
            from,
            msg: offer(workers),
            rtt: Some(ms(rtt)),
        },
    )
}

#[test]
fn home_floods_then_grants_a_rigid_job_all_at_once_to_the_nearest_offers() {
    let mut node = home(ScheduleConfig::paper());
    let out = submit(&mut node, ms(0), WorkerCount::rigid(4));
    let [Output::Flood(flood)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(flood.flood.ttl, 1, "round(log10(4)) = 1");
    assert_eq!(flood.workers, WorkerCount::rigid(4));
    assert_eq!(node.next_timeout(), Some(ms(1000)));

    // Offers of 3 cannot start a rigid job of 4: nothing is granted.
    assert_eq!(offer_from(&mut node, ms(5), 10, 3, 9), vec![]);
    assert_eq!(node.phase(JOB), Some(Phase::Scheduling));
    let out = offer_from(&mut node, ms(6), 11, 2, 2);
    // Concentrate: nearest node (11, 2 workers) first, then 2 of node 10's.
    let grants: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Output::Send {
                to,
                msg: Message::Grant { ranks, .. },
            } => Some((*to, ranks.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(grants, vec![(11, vec![0, 1]), (10, vec![2, 3])]);
    assert!(out.contains(&Output::Job(JobEvent::Started {
        job: JOB,
        workers: 4
    })));
    assert!(out.contains(&Output::Job(JobEvent::Full { job: JOB })));
    assert_eq!(node.phase(JOB), Some(Phase::Running));
    // Flooding stopped; a late offer is refused as the job is full.
    assert_eq!(node.next_timeout(), None);
    assert_eq!(
        offer_from(&mut node, ms(7), 12, 1, 1),
        vec![Output::Send {
            to: 12,
            msg: Message::Refuse {
                job: JOB,
                reason: RefuseReason::JobFull
            }
        }]
    );
}

#[test]
fn adaptive_home_lets_the_flood_settle_before_granting() {
    let mut node = home(ScheduleConfig::default());
    submit(&mut node, ms(0), WorkerCount::rigid(2));
    // A far offer that would do arrives after the 10 ms floor: the home
    // does not flood again (that would reach only farther nodes) but lets
    // the flood settle for about twice the offer's RTT before granting.
    assert_eq!(offer_from(&mut node, ms(21), 10, 2, 20), vec![]);
    let settle = node.next_timeout().unwrap();
    assert!(
        settle >= ms(40),
        "waits about twice the 20 ms RTT: {settle:?}"
    );
    // A nearer node answers meanwhile: its own settle time (twice 1 ms) has
    // passed, so it is granted at once and the far one refused.
    let out = offer_from(&mut node, ms(25), 11, 2, 1);
    assert!(granted(&out, 11, vec![0, 1], 0));
    assert!(out.contains(&Output::Send {
        to: 10,
        msg: Message::Refuse {
            job: JOB,
            reason: RefuseReason::NotChosen
        }
    }));
}

#[test]
fn malleable_job_starts_at_min_and_grows_to_max() {
    let mut node = home(ScheduleConfig::paper());
    submit(&mut node, ms(0), WorkerCount { min: 2, max: 4 });
    let out = offer_from(&mut node, ms(1), 10, 2, 1);
    assert!(out.contains(&Output::Job(JobEvent::Started {
        job: JOB,
        workers: 2
    })));
    assert!(node.next_timeout().is_some(), "still flooding for more");
    let out = offer_from(&mut node, ms(2), 11, 5, 1);
    assert!(granted(&out, 11, vec![2, 3], 1));
    assert!(out.contains(&Output::Job(JobEvent::Full { job: JOB })));
}

#[test]
fn a_malleable_job_grows_by_flooding_again_and_shrinks_only_what_it_still_seeks() {
    let mut node = home(ScheduleConfig::paper());
    submit(&mut node, ms(0), WorkerCount { min: 2, max: 2 + 2 });
    offer_from(&mut node, ms(1), 10, 4, 1);
    assert_eq!(node.next_timeout(), None, "full: flooding stopped");

    // Grow to 6: a new flood goes out at once, and an offer of 2 more is
    // granted ranks 4 and 5.
    let out = node.resize(ms(100), JOB, 6).unwrap();
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Flood(a) if a.job == JOB)),
        "{out:?}"
    );
    let out = offer_from(&mut node, ms(101), 11, 2, 1);
    assert!(granted(&out, 11, vec![4, 5], 1));

    // Grow to 8, then shrink back to 6 = what is placed: full again.
    node.resize(ms(200), JOB, 8).unwrap();
    let out = node.resize(ms(201), JOB, 6).unwrap();
    assert!(out.contains(&Output::Job(JobEvent::Full { job: JOB })));

    // What cannot be done says why.
    assert_eq!(
        node.resize(ms(300), JOB, 5),
        Err(ResizeError::BelowGranted {
            job: JOB,
            granted: 6
        })
    );
    assert_eq!(
        node.resize(ms(300), JOB, 1),
        Err(ResizeError::BelowMin { max: 1, min: 2 })
    );
    assert!(matches!(
        node.resize(ms(300), JOB, 1_000_000),
        Err(ResizeError::TooManyWorkers { .. })
    ));
    assert_eq!(
        node.resize(ms(300), JobId(99), 3),
        Err(ResizeError::UnknownJob(JobId(99)))
    );
    node.handle(ms(400), Input::Cancel(JOB));
    assert_eq!(node.resize(ms(401), JOB, 8), Err(ResizeError::Ended(JOB)));

    // A rigid job keeps its count.
    let rigid = JobId(8);
    node.handle(
        ms(500),
        Input::Submit {
            job: rigid,
            spec: spec(WorkerCount::rigid(3)),
        },
    );
    assert_eq!(
        node.resize(ms(501), rigid, 4),
        Err(ResizeError::Rigid {
            job: rigid,
            workers: 3
        })
    );
}

#[test]
fn lost_worker_of_a_malleable_job_is_replaced_and_rank_reused() {
    let mut node = home(ScheduleConfig::paper());
    submit(&mut node, ms(0), WorkerCount { min: 1, max: 2 });
    offer_from(&mut node, ms(1), 10, 1, 1);
    offer_from(&mut node, ms(2), 11, 1, 1);
    let out = node.handle(ms(3), Input::PeerLost(10));
    assert!(out.contains(&Output::Job(JobEvent::WorkersLost {
        job: JOB,
        node: 10,
        ranks: vec![0],
        reason: LostReason::Left,
    })));
    assert!(
        out.iter().any(|o| matches!(o, Output::Flood(_))),
        "floods for a replacement at once"
    );
    let out = offer_from(&mut node, ms(4), 12, 1, 1);
    assert!(granted(&out, 12, vec![0], 2));
}

#[test]
fn lost_worker_of_a_rigid_job_fails_it_by_default() {
    let mut node = home_running_one_worker_on_10();
    node.handle(ms(3), Input::PeerLost(10));
    assert_eq!(node.phase(JOB), Some(Phase::Failed));
}

#[test]
fn a_job_that_cannot_get_workers_expires_explaining_why() {
    let mut node = home(ScheduleConfig::paper());
    node.handle(
        ms(0),
        Input::Submit {
            job: JOB,
            spec: JobSpec {
                lifetime: Duration::from_secs(5),
                ..spec(WorkerCount::rigid(4))
            },
        },
    );
    node.handle(
        ms(2),
        Input::Message {
            from: 10,
            msg: Message::Decline {
                job: JOB,
                reason: DeclineReason::Busy,
            },
            rtt: None,
        },
    );
    offer_from(&mut node, ms(3), 11, 1, 1);
    let report = node.report(JOB).unwrap();
    // The home's own machine (too small) and the two others.
    assert_eq!(report.nodes_answered, 3);
    assert_eq!(report.offers, 1);
    assert_eq!(report.declines.get(&DeclineReason::Busy), Some(&1));
    assert_eq!((report.floods, report.radius, report.budget), (1, 1, None));
    assert!(report.refusals.is_empty(), "{:?}", report.refusals);
    let why = report.explain();
    assert!(why.contains("0 of 4 workers granted"), "{why}");
    assert!(why.contains("1 floods so far, radius 1"), "{why}");
    assert!(why.contains("1 busy"), "{why}");
    assert!(
        why.contains("1 a worker needs more than the node has in all"),
        "{why}"
    );
    assert!(!why.contains("refused"), "{why}");

    let mut now = ms(3);
    let mut ended = None;
    while let Some(at) = node.next_timeout() {
        now = at;
        for o in node.handle_timeout(now) {
            if let Output::Job(JobEvent::Ended { phase, reason, .. }) = o {
                ended = Some((phase, reason));
            }
        }
        if ended.is_some() {
            break;
        }
    }
    assert_eq!(now, Duration::from_secs(5));
    let (phase, reason) = ended.unwrap();
    assert_eq!(phase, Phase::Failed);
    assert!(
        reason
            .to_string()
            .starts_with("expired before it got its workers"),
        "{reason}"
    );
    let report = node.report(JOB).unwrap();
    assert_eq!(report.floods, 3, "floods at 0, 1 and 3 s");
    assert_eq!(report.radius, 3, "radius 1, then one more per flood");
    // The offer still held at expiry was refused, and that is counted.
    assert_eq!(
        report.refusals,
        BTreeMap::from([(RefuseReason::Expired, 1)])
    );
    let why = report.explain();
    assert!(why.contains("3 floods so far, radius 3"), "{why}");
    assert!(why.contains("offers refused: 1 job expired"), "{why}");
}

#[test]
fn why_pending_reports_the_latency_budget_and_the_offers_refused() {
    let mut node = home(ScheduleConfig::default());
    submit(&mut node, ms(0), WorkerCount::rigid(1));
    let report = node.report(JOB).unwrap();
    assert_eq!((report.floods, report.radius), (1, 1));
    assert_eq!(report.budget, Some(ms(1)), "the first budget is 1 ms");
    assert!(
        report
            .explain()
            .contains("1 floods so far, up to 1.0 ms from home"),
        "{}",
        report.explain()
    );
    // Two offers for one worker: the far one is refused once the near one
    // is granted (after the flood settled: twice 1 ms and a quarter of the
    // 10 ms floor).
    offer_from(&mut node, ms(1), 10, 1, 5);
    let out = offer_from(&mut node, ms(5), 11, 1, 1);
    assert!(out.contains(&Output::Send {
        to: 10,
        msg: Message::Refuse {
            job: JOB,
            reason: RefuseReason::NotChosen
        }
    }));
    let report = node.report(JOB).unwrap();
    assert_eq!(
        report.refusals,
        BTreeMap::from([(RefuseReason::NotChosen, 1)])
    );
    assert!(
        report
            .explain()
            .contains("offers refused: 1 nearer nodes were chosen"),
        "{}",
        report.explain()
    );
}

#[test]
fn the_home_runs_workers_of_its_own_job_first() {
    let mut node = Scheduler::new(
        HOME,
        SchedulerConfig {
            resources: Resources::new(2, 4096, 0),
            schedule: ScheduleConfig::paper(),
            ..SchedulerConfig::default()
        },
    );
    let out = submit(&mut node, ms(0), WorkerCount::rigid(2));
    assert!(
        out.contains(&Output::StartWorkers {
            job: JOB,
            home: HOME,
            ranks: vec![0, 1],
            incarnation: 0,
            placement: placed_on(&[0, 1], HOME, 0),
        }),
        "{out:?}"
    );
    assert!(out.contains(&Output::Job(JobEvent::Full { job: JOB })));
    assert!(
        !out.iter().any(|o| matches!(o, Output::Send { .. })),
        "nothing goes out for a job the home runs itself: {out:?}"
    );
}

#[test]
fn a_failed_rank_stops_the_jobs_workers_everywhere_naming_it() {
    let mut node = home(ScheduleConfig::paper());
    submit(&mut node, ms(0), WorkerCount::rigid(2));
    offer_from(&mut node, ms(1), 10, 1, 1);
    offer_from(&mut node, ms(2), 11, 1, 1);
    assert_eq!(node.phase(JOB), Some(Phase::Running));
    let out = node.handle(
        ms(3),
        Input::RankEnded {
            job: JOB,
            node: 11,
            rank: 1,
            incarnation: 1,
            end: WorkerEnd::Exited(3),
        },
    );
    for to in [10, 11] {
        assert!(out.contains(&Output::Send {
            to,
            msg: Message::Refuse {
                job: JOB,
                reason: RefuseReason::Failed
            }
        }));
    }
    assert!(out.contains(&Output::Job(JobEvent::Ended {
        job: JOB,
        phase: Phase::Failed,
        reason: EndReason::RankFailed {
            rank: 1,
            node: 11,
            outcome: RankOutcome::Exited(3)
        }
    })));
    assert_eq!(node.phase(JOB), Some(Phase::Failed));
}

#[test]
fn the_home_forgets_the_oldest_ended_jobs_beyond_its_capacity() {
    let mut node = Scheduler::new(
        HOME,
        SchedulerConfig {
            resources: Resources::ZERO,
            schedule: ScheduleConfig::paper(),
            ended_capacity: 2,
            ..SchedulerConfig::default()
        },
    );
    for id in 1..=3 {
        node.handle(
            ms(0),
            Input::Submit {
                job: JobId(id),
                spec: spec(WorkerCount::rigid(1)),
            },
        );
        node.handle(ms(1), Input::Cancel(JobId(id)));
    }
    assert_eq!(node.phase(JobId(1)), None, "oldest ended job forgotten");
    assert_eq!(node.phase(JobId(2)), Some(Phase::Cancelled));
    assert_eq!(node.phase(JobId(3)), Some(Phase::Cancelled));
    // A job still scheduling is never forgotten.
    node.handle(
        ms(2),
        Input::Submit {
            job: JobId(4),
            spec: spec(WorkerCount::rigid(1)),
        },
    );
    assert_eq!(node.phase(JobId(4)), Some(Phase::Scheduling));
}

#[test]
fn invalid_specs_are_rejected_with_a_reason() {
    let mut node = home(ScheduleConfig::paper());
    let out = submit(&mut node, ms(0), WorkerCount { min: 3, max: 2 });
    let [Output::Job(JobEvent::Rejected { error, .. })] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(
        error.to_string(),
        "min workers (3) is more than max workers (2)"
    );
}

fn refusal(to: u32, reason: RefuseReason) -> Output<u32> {
    Output::Send {
        to,
        msg: Message::Refuse { job: JOB, reason },
    }
}

#[test]
fn cancel_refuses_held_offers_stops_all_timers_and_refuses_late_offers() {
    let mut node = home(ScheduleConfig::paper());
    submit(&mut node, ms(0), WorkerCount::rigid(3));
    assert_eq!(offer_from(&mut node, ms(1), 10, 1, 1), vec![]);
    assert_eq!(node.held_offers(JOB).count(), 1);
    let out = node.handle(ms(2), Input::Cancel(JOB));
    assert_eq!(
        out,
        vec![
            refusal(10, RefuseReason::Cancelled),
            Output::Job(JobEvent::Ended {
                job: JOB,
                phase: Phase::Cancelled,
                reason: EndReason::Cancelled
            })
        ]
    );
    assert_eq!(node.held_offers(JOB).count(), 0);
    assert_eq!(node.next_timeout(), None, "no flood, no expiry left");
    assert_eq!(
        offer_from(&mut node, ms(3), 11, 2, 1),
        vec![refusal(11, RefuseReason::Cancelled)]
    );
    assert_eq!(node.held_offers(JOB).count(), 0, "a late offer is not held");
}

#[test]
fn expiry_refuses_held_offers_and_late_offers_as_expired() {
    let mut node = home(ScheduleConfig::paper());
    node.handle(
        ms(0),
        Input::Submit {
            job: JOB,
            spec: JobSpec {
                lifetime: ms(500),
                ..spec(WorkerCount::rigid(3))
            },
        },
    );
    offer_from(&mut node, ms(1), 10, 1, 1);
    offer_from(&mut node, ms(2), 11, 1, 1);
    assert_eq!(
        node.next_timeout(),
        Some(ms(500)),
        "expiry before the 1 s flood"
    );
    let out = node.handle_timeout(ms(500));
    assert_eq!(
        &out[..2],
        &[
            refusal(10, RefuseReason::Expired),
            refusal(11, RefuseReason::Expired)
        ]
    );
    assert!(
        matches!(
            &out[2..],
            [Output::Job(JobEvent::Ended {
                phase: Phase::Failed,
                ..
            })]
        ),
        "{out:?}"
    );
    assert_eq!(node.next_timeout(), None);
    assert_eq!(
        offer_from(&mut node, ms(600), 12, 3, 1),
        vec![refusal(12, RefuseReason::Expired)]
    );
}

#[test]
fn a_failed_job_refuses_late_offers_as_failed_not_expired() {
    // Failed by its rank.
    let mut node = home_running_one_worker_on_10();
    node.handle(
        ms(2),
        Input::RankEnded {
            job: JOB,
            node: 10,
            rank: 0,
            incarnation: 0,
            end: WorkerEnd::Failed(zorilla_core::node::Failure::Trapped("unreachable".into())),
        },
    );
    assert_eq!(
        offer_from(&mut node, ms(3), 11, 1, 1),
        vec![refusal(11, RefuseReason::Failed)]
    );

    // Failed by a lost worker of a rigid job.
    let mut node = home_running_one_worker_on_10();
    node.handle(ms(2), Input::PeerLost(10));
    assert_eq!(node.phase(JOB), Some(Phase::Failed));
    assert_eq!(
        offer_from(&mut node, ms(3), 11, 1, 1),
        vec![refusal(11, RefuseReason::Failed)]
    );

    // A completed job has all it needed.
    let mut node = home_running_one_worker_on_10();
    node.handle(
        ms(2),
        Input::RankEnded {
            job: JOB,
            node: 10,
            rank: 0,
            incarnation: 0,
            end: WorkerEnd::Exited(0),
        },
    );
    assert_eq!(node.phase(JOB), Some(Phase::Completed));
    assert_eq!(
        offer_from(&mut node, ms(3), 11, 1, 1),
        vec![refusal(11, RefuseReason::JobFull)]
    );
}

/// An advert of job `job` needing `cores` per worker, valid for
/// `expires_in`.
fn advert_of(job: u64, cores: u32, workers: u32, expires_in: Duration) -> Advert<u32> {
    Advert {
        job: JobId(job),
        per_worker: Resources::new(cores, 100, 0),
        expires_in,
        ..advert(WorkerCount::rigid(workers))
    }
}

/// A member with `cores` cores all running job 99.
fn busy_member(cores: u32, pending_capacity: usize) -> Scheduler<u32> {
    let mut node = Scheduler::new(
        1,
        SchedulerConfig {
            resources: Resources::new(cores, 4096, 4096),
            pending_capacity,
            ..SchedulerConfig::default()
        },
    );
    node.handle(
        ms(0),
        Input::AdvertDelivered {
            advert: advert_of(99, 1, cores, Duration::from_secs(60)),
            distance: ms(1),
        },
    );
    from_home(&mut node, ms(0), grant(JobId(99), (0..cores).collect(), 3));
    assert_eq!(node.free().cores, 0);
    node
}

fn queue(node: &mut Scheduler<u32>, now: Duration, advert: Advert<u32>) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::AdvertDelivered {
            advert,
            distance: ms(1),
        },
    )
}

fn queued(node: &Scheduler<u32>) -> Vec<(u64, Duration)> {
    node.pending().map(|(a, at)| (a.job.0, at)).collect()
}

#[test]
fn a_full_pending_queue_keeps_the_adverts_with_the_most_time_left() {
    let secs = Duration::from_secs;
    let mut node = busy_member(1, 2);
    for (job, expires_in) in [(1, 60), (2, 30)] {
        let out = queue(&mut node, ms(0), advert_of(job, 1, 1, secs(expires_in)));
        assert!(
            matches!(
                &out[..],
                [Output::Send {
                    msg: Message::Decline {
                        reason: DeclineReason::Busy,
                        ..
                    },
                    ..
                }]
            ),
            "{out:?}"
        );
    }
    assert_eq!(queued(&node), vec![(1, secs(60)), (2, secs(30))]);
    // Full. Job 3 expires later than job 2, the soonest: job 2 goes.
    queue(&mut node, ms(0), advert_of(3, 1, 1, secs(45)));
    assert_eq!(queued(&node), vec![(1, secs(60)), (3, secs(45))]);
    // Job 4 expires sooner than every queued advert: it is dropped, and
    // so is job 5, which expires no later than job 3 (the queued one
    // stays on a tie). The home hears "busy" all the same.
    let out = queue(&mut node, ms(0), advert_of(4, 1, 1, secs(10)));
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Decline {
                job: JobId(4),
                reason: DeclineReason::Busy
            }
        }]
    );
    queue(&mut node, ms(0), advert_of(5, 1, 1, secs(45)));
    assert_eq!(queued(&node), vec![(1, secs(60)), (3, secs(45))]);
}

#[test]
fn a_queued_advert_expires_through_the_timeout_and_is_never_taken() {
    let mut node = busy_member(1, 8);
    queue(&mut node, ms(0), advert_of(1, 1, 1, ms(100)));
    assert_eq!(queued(&node), vec![(1, ms(100))]);
    assert_eq!(node.next_timeout(), Some(ms(100)));
    assert_eq!(node.handle_timeout(ms(100)), vec![]);
    assert!(queued(&node).is_empty());
    assert_eq!(node.next_timeout(), None);
    // Resources free up: nothing is offered for the expired job.
    let out = node.handle(
        ms(200),
        Input::WorkersEnded {
            job: JobId(99),
            ranks: vec![0],
        },
    );
    assert_eq!(out, vec![]);
    assert_eq!(node.free().cores, 1);
}

#[test]
fn rescan_takes_queued_adverts_oldest_first_skipping_those_that_do_not_fit() {
    let secs = Duration::from_secs;
    let mut node = busy_member(4, 8);
    // Queued in this order: a job of 3-core workers, then three jobs of
    // one 1-core worker.
    queue(&mut node, ms(1), advert_of(1, 3, 1, secs(60)));
    for job in 2..=4 {
        queue(&mut node, ms(job), advert_of(job, 1, 1, secs(60)));
    }
    assert_eq!(
        queued(&node).iter().map(|(j, _)| *j).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    let offers = |out: &[Output<u32>]| -> Vec<(u64, u32)> {
        out.iter()
            .filter_map(|o| match o {
                Output::Send {
                    msg: Message::Offer { job, workers, .. },
                    ..
                } => Some((job.0, *workers)),
                _ => None,
            })
            .collect()
    };
    // Two cores free: job 1 does not fit, jobs 2 and 3 do (oldest first),
    // job 4 finds no core left.
    let out = node.handle(
        ms(10),
        Input::WorkersEnded {
            job: JobId(99),
            ranks: vec![0, 1],
        },
    );
    assert_eq!(offers(&out), vec![(2, 1), (3, 1)]);
    assert_eq!(
        queued(&node).iter().map(|(j, _)| *j).collect::<Vec<_>>(),
        vec![1, 4]
    );
    // The last two cores free: job 1 still does not fit (three cores
    // needed, two free) but job 4, behind it, does.
    let out = node.handle(
        ms(20),
        Input::WorkersEnded {
            job: JobId(99),
            ranks: vec![2, 3],
        },
    );
    assert_eq!(offers(&out), vec![(4, 1)]);
    // The homes of jobs 2 and 3 refuse: with three cores free, job 1 is
    // taken at last.
    let refuse = |node: &mut Scheduler<u32>, now, job| {
        node.handle(
            now,
            Input::Message {
                from: HOME,
                msg: Message::Refuse {
                    job: JobId(job),
                    reason: RefuseReason::NotChosen,
                },
                rtt: None,
            },
        )
    };
    assert_eq!(offers(&refuse(&mut node, ms(30), 2)), vec![]);
    assert_eq!(offers(&refuse(&mut node, ms(31), 3)), vec![(1, 1)]);
    assert!(queued(&node).is_empty());
}

/// A few schedulers wired together with instant delivery; adverts are
/// delivered by hand so that the test decides who hears which flood first.
struct Net {
    nodes: BTreeMap<u32, Scheduler<u32>>,
    /// Every output other than a delivered message, and every message sent,
    /// with the node it came from.
    log: Vec<(u32, Output<u32>)>,
}

impl Net {
    fn input(&mut self, now: Duration, node: u32, input: Input<u32>) {
        let out = self.nodes.get_mut(&node).unwrap().handle(now, input);
        self.route(now, node, out);
    }

    fn timeout(&mut self, now: Duration, node: u32) {
        let out = self.nodes.get_mut(&node).unwrap().handle_timeout(now);
        self.route(now, node, out);
    }

    fn route(&mut self, now: Duration, from: u32, out: Vec<Output<u32>>) {
        for output in out {
            self.log.push((from, output.clone()));
            if let Output::Send { to, msg } = output {
                let input = Input::Message {
                    from,
                    msg,
                    rtt: Some(ms(u64::from(from % 10) + 1)),
                };
                self.input(now, to, input);
            }
        }
    }

    /// The advert of the last flood of `job`.
    fn flood(&self, job: JobId) -> Advert<u32> {
        self.log
            .iter()
            .rev()
            .find_map(|(_, o)| match o {
                Output::Flood(advert) if advert.job == job => Some(advert.clone()),
                _ => None,
            })
            .unwrap()
    }

    fn deliver(&mut self, now: Duration, node: u32, advert: Advert<u32>) {
        let input = Input::AdvertDelivered {
            advert,
            distance: ms(1),
        };
        self.input(now, node, input);
    }

    fn holds(&self, node: u32) -> Vec<(JobId, u32, Duration)> {
        self.nodes[&node]
            .holds()
            .map(|h| (h.job, h.workers, h.until))
            .collect()
    }

    fn started(&self, job: JobId) -> Vec<(u32, Vec<u32>)> {
        self.log
            .iter()
            .filter_map(|(node, o)| match o {
                Output::StartWorkers { job: j, ranks, .. } if *j == job => {
                    Some((*node, ranks.clone()))
                }
                _ => None,
            })
            .collect()
    }

    fn sent(&self, from: u32, msg: &Message<u32>) -> bool {
        self.log
            .iter()
            .any(|(node, o)| *node == from && matches!(o, Output::Send { msg: m, .. } if m == msg))
    }
}

#[test]
fn two_gangs_holding_parts_of_the_same_nodes_both_get_their_workers() {
    const HX: u32 = 100;
    const HY: u32 = 200;
    const X: JobId = JobId(1);
    const Y: JobId = JobId(2);
    let mut nodes = BTreeMap::new();
    for home in [HX, HY] {
        nodes.insert(
            home,
            Scheduler::new(
                home,
                SchedulerConfig {
                    resources: Resources::ZERO,
                    schedule: ScheduleConfig::paper(),
                    ..SchedulerConfig::default()
                },
            ),
        );
    }
    for member in [1, 2] {
        nodes.insert(
            member,
            Scheduler::new(
                member,
                SchedulerConfig {
                    resources: Resources::new(2, 4096, 4096),
                    hold_timeout: ms(500),
                    ..SchedulerConfig::default()
                },
            ),
        );
    }
    let mut net = Net {
        nodes,
        log: Vec::new(),
    };
    // Two rigid jobs of 3 workers on two 2-core nodes: each node hears a
    // different job first and holds both its cores for it.
    net.input(
        ms(0),
        HX,
        Input::Submit {
            job: X,
            spec: spec(WorkerCount::rigid(3)),
        },
    );
    net.input(
        ms(0),
        HY,
        Input::Submit {
            job: Y,
            spec: spec(WorkerCount::rigid(3)),
        },
    );
    net.deliver(ms(0), 1, net.flood(X));
    net.deliver(ms(100), 2, net.flood(Y));
    net.deliver(ms(100), 1, net.flood(Y));
    net.deliver(ms(100), 2, net.flood(X));
    assert_eq!(net.holds(1), vec![(X, 2, ms(500))]);
    assert_eq!(net.holds(2), vec![(Y, 2, ms(600))]);
    assert_eq!(net.nodes[&1].pending().count(), 1, "node 1 queued Y");
    assert_eq!(net.nodes[&2].pending().count(), 1, "node 2 queued X");
    // Neither gang can complete (2 of 3 each).
    assert_eq!(net.nodes[&HX].phase(X), Some(Phase::Scheduling));
    assert_eq!(net.nodes[&HY].phase(Y), Some(Phase::Scheduling));
    assert_eq!(net.nodes[&1].next_timeout(), Some(ms(500)));

    // Node 1's hold outlives nothing: at 500 ms it withdraws from X and
    // offers its cores to the queued Y, which completes Y's gang.
    net.timeout(ms(500), 1);
    assert!(net.sent(
        1,
        &Message::Withdraw {
            job: X,
            ranks: vec![]
        }
    ));
    assert_eq!(net.nodes[&HY].phase(Y), Some(Phase::Running));
    assert_eq!(net.started(Y), vec![(1, vec![0, 1]), (2, vec![2])]);
    // Node 2 runs one of Y and offered its last core to the queued X, which
    // let node 1 go.
    assert_eq!(net.holds(2), vec![(X, 1, ms(1000))]);
    assert_eq!(
        net.nodes[&HX].held_offers(X).collect::<Vec<_>>(),
        vec![(&2, 1)]
    );

    // That hold, too, ends at its timeout.
    net.timeout(ms(1000), 2);
    assert!(net.sent(
        2,
        &Message::Withdraw {
            job: X,
            ranks: vec![]
        }
    ));
    assert!(net.holds(2).is_empty());
    assert_eq!(net.nodes[&HX].held_offers(X).count(), 0);

    // Y finishes; the nodes are free and hold nothing: X's next flood gets
    // its whole gang.
    net.input(
        ms(2000),
        1,
        Input::WorkersEnded {
            job: Y,
            ranks: vec![0, 1],
        },
    );
    net.input(
        ms(2000),
        2,
        Input::WorkersEnded {
            job: Y,
            ranks: vec![2],
        },
    );
    // Their ends reach Y's home, which completes Y.
    let placed: Vec<(u32, u32, u32)> = net.nodes[&HY]
        .ranks(Y)
        .unwrap()
        .iter()
        .map(|(rank, r)| (rank, r.node, r.incarnation))
        .collect();
    for (rank, node, incarnation) in placed {
        let end = Input::RankEnded {
            job: Y,
            node,
            rank,
            incarnation,
            end: WorkerEnd::Exited(0),
        };
        net.input(ms(2000), HY, end);
    }
    assert_eq!(net.nodes[&HY].phase(Y), Some(Phase::Completed));
    for member in [1, 2] {
        assert_eq!(net.nodes[&member].free().cores, 2);
        assert!(net.holds(member).is_empty());
    }
    net.timeout(ms(3000), HX);
    let flood = net.flood(X);
    assert!(flood.flood.seq >= 1, "a later flood of X");
    net.deliver(ms(3000), 1, flood.clone());
    net.deliver(ms(3000), 2, flood);
    assert_eq!(net.nodes[&HX].phase(X), Some(Phase::Running));
    assert_eq!(net.started(X), vec![(1, vec![0, 1]), (2, vec![2])]);
    assert!(net.holds(1).is_empty() && net.holds(2).is_empty());
}

/// The floods `out` starts, by sequence number.
fn flood_seqs(out: &[Output<u32>]) -> Vec<u32> {
    out.iter()
        .filter_map(|o| match o {
            Output::Flood(advert) => Some(advert.flood.seq),
            _ => None,
        })
        .collect()
}

#[test]
fn a_member_running_workers_of_a_job_offers_more_within_the_owner_limit() {
    let mut node = Scheduler::new(
        1u32,
        SchedulerConfig {
            resources: Resources::new(4, 4096, 4096),
            limits: OwnerLimits {
                max_workers_per_job: 3,
                ..OwnerLimits::default()
            },
            ..SchedulerConfig::default()
        },
    );
    let job = WorkerCount { min: 1, max: 6 };
    let out = deliver(&mut node, ms(0), job);
    assert!(matches!(
        out[..],
        [Output::Send {
            msg: Message::Offer { workers: 3, .. },
            ..
        }]
    ));
    from_home(&mut node, ms(1), grant(JOB, vec![0], 3));
    assert_eq!(node.free().cores, 3);
    // A later flood (a replacement, or the job growing): two more within
    // P = 3, though three cores are free.
    let out = deliver(&mut node, ms(10), job);
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Offer {
                job: JOB,
                workers: 2,
                distance: ms(1),
                residue: Resources::new(1, 4096 - 300, 4096),
            }
        }]
    );
    assert_eq!(deliver(&mut node, ms(11), job), vec![], "offered already");
    // The hold times out: withdrawn with no ranks, and rank 0 runs on.
    let out = node.handle_timeout(ms(10) + SchedulerConfig::<u32>::default().hold_timeout);
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Withdraw {
                job: JOB,
                ranks: vec![]
            }
        }]
    );
    assert_eq!(
        node.running().collect::<Vec<_>>(),
        vec![(JOB, &std::collections::BTreeSet::from([0]))]
    );
    let out = deliver(&mut node, ms(40_000), job);
    assert!(matches!(
        out[..],
        [Output::Send {
            msg: Message::Offer { workers: 2, .. },
            ..
        }]
    ));
    let out = from_home(&mut node, ms(40_001), grant(JOB, vec![3, 4], 3));
    assert_eq!(
        out,
        vec![Output::StartWorkers {
            job: JOB,
            home: HOME,
            ranks: vec![3, 4],
            incarnation: 3,
            placement: placed_on(&[3, 4], 1, 3),
        }]
    );
    // P reached: busy for this job (queued, so it may offer again once a
    // worker ends), one core still free.
    assert_eq!(
        deliver(&mut node, ms(40_010), job),
        vec![Output::Send {
            to: HOME,
            msg: Message::Decline {
                job: JOB,
                reason: DeclineReason::Busy
            }
        }]
    );
    assert_eq!(node.free().cores, 1);
}

#[test]
fn a_lost_worker_is_replaced_on_a_node_already_running_the_job_by_a_new_flood() {
    let mut node = home(ScheduleConfig::paper());
    let out = submit(&mut node, ms(0), WorkerCount { min: 2, max: 3 });
    let mut seqs = flood_seqs(&out);
    offer_from(&mut node, ms(1), 10, 2, 1);
    let out = offer_from(&mut node, ms(2), 11, 1, 2);
    assert!(out.contains(&Output::Job(JobEvent::Full { job: JOB })));
    assert_eq!(
        node.placement(JOB),
        Some([(10, vec![0, 1]), (11, vec![2])].into_iter().collect())
    );
    // Node 11 is lost; the only free core is on node 10, which runs ranks
    // 0 and 1 and answers the replacement flood.
    let out = node.handle(ms(3), Input::PeerLost(11));
    let again = flood_seqs(&out);
    assert_eq!(again.len(), 1, "{out:?}");
    assert!(
        !seqs.contains(&again[0]),
        "flood {again:?} is new, not a copy of {seqs:?} that the nodes' duplicate caches drop"
    );
    seqs.extend(again);
    let out = offer_from(&mut node, ms(4), 10, 1, 1);
    assert!(granted(&out, 10, vec![2], 2), "{out:?}");
    assert_eq!(
        node.placement(JOB),
        Some([(10, vec![0, 1, 2])].into_iter().collect())
    );
    // A grant that reached node 10 after its hold ended is withdrawn with
    // its ranks: only those are lost, not the ranks node 10 ran before.
    let out = node.handle(
        ms(5),
        Input::Message {
            from: 10,
            msg: Message::Withdraw {
                job: JOB,
                ranks: vec![2],
            },
            rtt: None,
        },
    );
    assert!(out.contains(&Output::Job(JobEvent::WorkersLost {
        job: JOB,
        node: 10,
        ranks: vec![2],
        reason: LostReason::Withdrawn,
    })));
    assert_eq!(
        node.placement(JOB),
        Some([(10, vec![0, 1])].into_iter().collect())
    );
    // A plain withdrawal (an offer's hold timed out) loses nothing.
    let out = node.handle(
        ms(6),
        Input::Message {
            from: 10,
            msg: Message::Withdraw {
                job: JOB,
                ranks: vec![],
            },
            rtt: None,
        },
    );
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Job(JobEvent::WorkersLost { .. }))),
        "{out:?}"
    );
    assert_eq!(node.phase(JOB), Some(Phase::Running));
}

#[test]
fn ranks_lost_count_once_and_a_rigid_job_fails_naming_why() {
    let mut node = home_running_one_worker_on_10();
    assert_eq!(node.phase(JOB), Some(Phase::Running));
    // Not granted there: nothing happens.
    let out = node.handle(
        ms(2),
        Input::RanksLost {
            job: JOB,
            node: 11,
            ranks: vec![0],
            cause: LostCause::NotRunning,
        },
    );
    assert_eq!(out, vec![]);
    let out = node.handle(
        ms(3),
        Input::RanksLost {
            job: JOB,
            node: 10,
            ranks: vec![0],
            cause: LostCause::Restarted,
        },
    );
    let reason = LostReason::Liveness(LostCause::Restarted);
    assert!(out.contains(&Output::Job(JobEvent::WorkersLost {
        job: JOB,
        node: 10,
        ranks: vec![0],
        reason,
    })));
    let ended = EndReason::WorkersLost {
        node: 10,
        ranks: vec![0],
        reason,
    };
    assert_eq!(
        ended.to_string(),
        "a worker was lost and the job is rigid: node 10 restarted and forgot it (rank 0)"
    );
    assert!(
        out.contains(&Output::Job(JobEvent::Ended {
            job: JOB,
            phase: Phase::Failed,
            reason: ended,
        })),
        "{out:?}"
    );
    // Once only.
    let out = node.handle(
        ms(4),
        Input::RanksLost {
            job: JOB,
            node: 10,
            ranks: vec![0],
            cause: LostCause::Silent,
        },
    );
    assert_eq!(out, vec![]);
}

#[test]
fn a_rigid_job_replacing_lost_workers_gets_its_rank_back_on_the_same_node() {
    let mut node = home(ScheduleConfig::paper());
    node.handle(
        ms(0),
        Input::Submit {
            job: JOB,
            spec: JobSpec {
                on_worker_lost: LostPolicy::Replace,
                ..spec(WorkerCount::rigid(2))
            },
        },
    );
    offer_from(&mut node, ms(1), 10, 2, 1);
    let out = node.handle(
        ms(2),
        Input::RanksLost {
            job: JOB,
            node: 10,
            ranks: vec![1],
            cause: LostCause::NotRunning,
        },
    );
    assert_eq!(flood_seqs(&out), vec![1], "{out:?}");
    let out = offer_from(&mut node, ms(3), 10, 1, 1);
    assert!(granted(&out, 10, vec![1], 1));
    assert_eq!(node.phase(JOB), Some(Phase::Running));
}

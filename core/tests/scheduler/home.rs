//! A home: floods, grants, grows and shrinks a job, replaces lost workers,
//! and explains why a job waits or fails.

use super::*;

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
                hold: Some(HoldId(0)),
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
            hold: Some(HoldId(0)),
            job: JOB,
            reason: RefuseReason::NotChosen
        }
    }));
}

/// A rigid job of 4 whose home (adaptive schedule) holds 3 workers of a
/// far node (40 ms) and has flooded on for 5 s without granting; returns
/// the home and the time of its last step.
fn waiting_with_three_far_workers_of_four() -> (Scheduler<u32>, Duration) {
    let mut node = home(ScheduleConfig::default());
    submit(&mut node, ms(0), WorkerCount::rigid(4));
    offer_from(&mut node, ms(21), 10, 3, 40);
    let mut now = ms(21);
    while let Some(at) = node.next_timeout().filter(|at| *at < ms(5_000)) {
        now = at;
        let out = node.handle_timeout(now);
        assert!(
            !out.iter()
                .any(|o| matches!(o, Output::Job(JobEvent::Granted { .. }))),
            "{out:?}"
        );
    }
    (node, now)
}

/// Offers that come without a flood come in bursts: when a job ends on a
/// site, its freed cores answer the adverts queued on them together. A job
/// that waited with far offers, and whose offers suffice once the first
/// near answer of such a burst arrives, waits about the farthest chosen
/// RTT for the rest of the burst instead of granting the far nodes.
#[test]
fn a_waiting_job_lets_a_burst_of_near_offers_arrive_before_granting() {
    let (mut node, now) = waiting_with_three_far_workers_of_four();
    // Long after the last flood settled, a near node frees up and offers:
    // with it the offers suffice, but it may be the first of a burst.
    let first = now + ms(500);
    let out = offer_from(&mut node, first, 11, 1, 2);
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Job(JobEvent::Granted { .. }))),
        "{out:?}"
    );
    let settle = node.next_timeout().unwrap();
    assert!(
        settle >= first + ms(40) && settle <= first + ms(100),
        "waits about the farthest chosen RTT: {settle:?} after {first:?}"
    );
    // The rest of the burst: the job is granted the near nodes only.
    let out = offer_from(&mut node, first + ms(1), 12, 3, 2);
    assert!(granted(&out, 11, vec![0], 0), "{out:?}");
    assert!(granted(&out, 12, vec![1, 2, 3], 1), "{out:?}");
    assert!(out.contains(&Output::Send {
        to: 10,
        msg: Message::Refuse {
            hold: Some(HoldId(0)),
            job: JOB,
            reason: RefuseReason::NotChosen
        }
    }));
}

/// A near node that withdraws and offers again, over and over, would
/// start the burst wait anew each time: the wait ends at most twice the
/// farthest chosen RTT after the offers first sufficed.
#[test]
fn a_node_offering_again_and_again_cannot_put_the_grant_off_for_ever() {
    let (mut node, now) = waiting_with_three_far_workers_of_four();
    let first = now + ms(500);
    offer_from(&mut node, first, 11, 1, 2);
    let mut granted_at = None;
    for k in 1..=20u32 {
        let at = first + ms(u64::from(k) * 30);
        // Whatever fell due before this re-offer.
        while let Some(due) = node.next_timeout().filter(|due| *due < at) {
            let out = node.handle_timeout(due);
            if out
                .iter()
                .any(|o| matches!(o, Output::Job(JobEvent::Granted { .. })))
            {
                granted_at = Some(due);
            }
        }
        if granted_at.is_some() {
            break;
        }
        node.handle(
            at,
            Input::Message {
                from: 11,
                msg: Message::Withdraw {
                    job: JOB,
                    hold: HoldId(k - 1),
                    ranks: vec![],
                },
                rtt: None,
            },
        );
        let out = new_offer_from(&mut node, at, 11, k, 1, 2);
        if out
            .iter()
            .any(|o| matches!(o, Output::Job(JobEvent::Granted { .. })))
        {
            granted_at = Some(at);
            break;
        }
    }
    let granted_at = granted_at.expect("granted while node 11 kept offering again");
    assert!(
        granted_at <= first + ms(100),
        "within twice the farthest RTT (40 ms) of {first:?}: {granted_at:?}"
    );
}

/// The burst wait ends: with no nearer offer coming, the job is granted
/// the offers it has once the wait is over.
#[test]
fn a_burst_wait_ends_with_the_offers_in_hand() {
    let (mut node, now) = waiting_with_three_far_workers_of_four();
    let first = now + ms(500);
    offer_from(&mut node, first, 11, 1, 2);
    let settle = node.next_timeout().unwrap();
    let out = node.handle_timeout(settle);
    assert!(granted(&out, 11, vec![0], 0), "{out:?}");
    assert!(granted(&out, 10, vec![1, 2, 3], 1), "{out:?}");
}

/// A job that runs past the lifetime it had to start, and floods again to
/// replace a lost worker, advertises the lifetime afresh: an advert that
/// expired already would have every offer withdrawn as soon as it is made
/// (members hold offers until the advert expires at the latest).
/// A malleable job (1 to 2) running on nodes 10 and 11 past its 60 s
/// lifetime: node 10 is lost at 90 s, and the home searches for a
/// replacement (the outputs of that).
fn replacement_search_at_90_s() -> (Scheduler<u32>, Vec<Output<u32>>) {
    let mut node = home(ScheduleConfig::paper());
    submit(&mut node, ms(0), WorkerCount { min: 1, max: 2 });
    offer_from(&mut node, ms(1), 10, 1, 1);
    offer_from(&mut node, ms(2), 11, 1, 1);
    let out = node.handle(Duration::from_secs(90), Input::PeerLost(10));
    (node, out)
}

#[test]
fn a_replacement_search_after_the_jobs_lifetime_advertises_a_fresh_expiry() {
    let (mut node, out) = replacement_search_at_90_s();
    let later = Duration::from_secs(90);
    let flood = out
        .iter()
        .find_map(|o| match o {
            Output::Flood(advert) => Some(advert),
            _ => None,
        })
        .unwrap_or_else(|| panic!("floods for a replacement: {out:?}"));
    assert_eq!(flood.expires_in, Duration::from_secs(60));
    // An offer made now is held, and granted.
    let out = offer_from(&mut node, later + ms(1), 12, 1, 1);
    assert!(granted(&out, 12, vec![0], 2), "{out:?}");
}

/// A replacement search that finds nobody for longer than the job's
/// lifetime still advertises the lifetime at every flood: a running job
/// does not expire, so its search goes on, and an advert of expiry zero
/// would have every offer withdrawn as soon as it is made (the simulator
/// found a job that never got its lost ranks back this way).
#[test]
fn a_replacement_search_longer_than_the_lifetime_advertises_it_at_every_flood() {
    let (mut node, mut out) = replacement_search_at_90_s();
    let mut expiries = Vec::new();
    while let Some(at) = node.next_timeout() {
        expiries.extend(out.iter().filter_map(|o| match o {
            Output::Flood(advert) => Some((at, advert.expires_in)),
            _ => None,
        }));
        if at > Duration::from_secs(400) {
            break;
        }
        out = node.handle_timeout(at);
    }
    // Floods 1, 2, 4, ... 60 s apart: well past the 60 s lifetime.
    assert!(expiries.len() >= 8, "{expiries:?}");
    for (at, expires_in) in expiries {
        assert_eq!(
            expires_in,
            Duration::from_secs(60),
            "the flood before {at:?}"
        );
    }
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
            owner: None,
            job: rigid,
            spec: node.admit(spec(WorkerCount::rigid(3))).unwrap(),
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
            owner: None,
            job: JOB,
            spec: node
                .admit(JobSpec {
                    runs: 1,
                    lifetime: Duration::from_secs(5),
                    ..spec(WorkerCount::rigid(4))
                })
                .unwrap(),
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
            hold: Some(HoldId(0)),
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

/// With the paper's schedule and ours: nothing can be nearer than the
/// home itself, so it does not wait for other answers before it grants
/// itself, and nothing goes out to other nodes.
#[test]
fn the_home_runs_workers_of_its_own_job_first_without_waiting() {
    for schedule in [ScheduleConfig::paper(), ScheduleConfig::default()] {
        let mut node = Scheduler::new(
            HOME,
            SchedulerConfig {
                resources: Resources::new(2, 4096, 0),
                schedule: schedule.clone(),
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
            "{schedule:?}: {out:?}"
        );
        assert!(out.contains(&Output::Job(JobEvent::Full { job: JOB })));
        assert!(
            !out.iter().any(|o| matches!(o, Output::Send { .. })),
            "nothing goes out for a job the home runs itself: {out:?}"
        );
    }
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
            digest: None,
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
                hold: None,
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
                owner: None,
                job: JobId(id),
                spec: node.admit(spec(WorkerCount::rigid(1))).unwrap(),
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
            owner: None,
            job: JobId(4),
            spec: node.admit(spec(WorkerCount::rigid(1))).unwrap(),
        },
    );
    assert_eq!(node.phase(JobId(4)), Some(Phase::Scheduling));
}

#[test]
fn invalid_specs_are_not_admitted_and_say_why() {
    let node = home(ScheduleConfig::paper());
    let error = node
        .admit(spec(WorkerCount { min: 3, max: 2 }))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "min workers (3) is more than max workers (2)"
    );
}

#[test]
fn a_second_job_of_the_same_id_is_rejected() {
    let mut node = home(ScheduleConfig::paper());
    submit(&mut node, ms(0), WorkerCount::rigid(1));
    let out = submit(&mut node, ms(1), WorkerCount::rigid(1));
    let [Output::Job(JobEvent::Rejected { error, .. })] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(error.to_string(), format!("job {JOB} already exists"));
}

/// A spread job waits for more nodes while floods still find new ones;
/// a node that answered before (here one that raises its offer at every
/// flood) is not a new one, so after three floods that found nobody new
/// the job takes the one node it has, two workers on it.
#[test]
fn only_a_nodes_first_answer_keeps_a_spread_job_waiting_for_new_nodes() {
    let mut node = home(ScheduleConfig::default());
    node.handle(
        ms(0),
        Input::Submit {
            owner: None,
            job: JOB,
            spec: node
                .admit(JobSpec {
                    runs: 1,
                    strategy: Strategy::Spread,
                    ..spec(WorkerCount::rigid(2))
                })
                .unwrap(),
        },
    );
    offer_from(&mut node, ms(1), 10, 1, 1);
    let mut floods = 1;
    for _ in 0..20 {
        let Some(at) = node.next_timeout() else {
            panic!("the home stopped without granting");
        };
        let out = node.handle_timeout(at);
        if granted(&out, 10, vec![0, 1], 0) {
            assert!(floods <= 5, "granted after {floods} floods");
            return;
        }
        if out.iter().any(|o| matches!(o, Output::Flood(_))) {
            floods += 1;
            // The same node answers every flood again, with both workers.
            offer_from(&mut node, at + ms(1), 10, 2, 1);
        }
    }
    panic!("no grant after 20 steps ({floods} floods)");
}

/// Node `from`'s offer of `workers` at 1 ms, from a machine of 8 cores
/// with `busy` of them busy and the CPU speed `speed`.
fn offer_of_machine(
    node: &mut Scheduler<u32>,
    from: u32,
    workers: u32,
    busy: u32,
    speed: u32,
) -> Vec<Output<u32>> {
    let msg = Message::Offer {
        hold: HoldId(0),
        job: JOB,
        workers,
        distance: ms(1),
        residue: Resources::ZERO,
        machine: Machine {
            cores: 8,
            busy,
            speed,
            reach: zorilla_core::resources::Reachability::Unknown,
        },
    };
    let rtt = Some(ms(1));
    node.handle(ms(5), Input::Message { from, msg, rtt })
}

/// Ranks granted per node, in the order the grants went out.
fn grants(out: &[Output<u32>]) -> Vec<(u32, Vec<u32>)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send {
                to,
                msg: Message::Grant { ranks, .. },
            } => Some((*to, ranks.clone())),
            _ => None,
        })
        .collect()
}

/// Three equally near nodes offer four workers for a job of three: node
/// 10 runs other workers, 11 is idle, 12 is idle and twice as fast. The
/// home prefers 12, then 11; the paper's home (no preference) takes them
/// in node order, the busy one first.
#[test]
fn among_equally_near_offers_the_home_grants_idle_then_faster_nodes() {
    for (prefer, expected) in [
        (
            Some(SameDistance::DEFAULT),
            vec![(12, vec![0, 1]), (11, vec![2])],
        ),
        (None, vec![(10, vec![0]), (11, vec![1]), (12, vec![2])]),
    ] {
        let mut node = Scheduler::new(
            HOME,
            SchedulerConfig {
                schedule: ScheduleConfig::paper(),
                resources: Resources::ZERO,
                prefer,
                ..SchedulerConfig::default()
            },
        );
        submit(&mut node, ms(0), WorkerCount::rigid(3));
        assert_eq!(offer_of_machine(&mut node, 10, 1, 4, 1000), vec![]);
        assert_eq!(offer_of_machine(&mut node, 11, 1, 0, 1000), vec![]);
        let out = offer_of_machine(&mut node, 12, 2, 0, 2000);
        assert_eq!(grants(&out), expected, "prefer {prefer:?}");
    }
}

/// A home that knows how far its overlay's peers are floods a job that
/// needs many nodes as far as they are at once, rather than one doubling
/// of the budget at a time (each flooding the nearer ball again).
#[test]
fn a_job_needing_many_nodes_is_first_flooded_as_far_as_they_are() {
    let first_budget_knowing =
        |peers: &[Option<Duration>], every_peer: bool, resources: Resources, workers: u32| {
            let mut node = Scheduler::new(
                HOME,
                SchedulerConfig {
                    resources,
                    ..SchedulerConfig::default()
                },
            );
            node.set_peer_distances(peers.iter().copied(), every_peer);
            let out = submit(&mut node, ms(0), WorkerCount::rigid(workers));
            out.iter()
                .find_map(|o| match o {
                    Output::Flood(a) => a.flood.latency_budget,
                    _ => None,
                })
                .expect("a flood")
        };
    let peers = [ms(9), ms(1), ms(5), ms(3)].map(Some);
    let first_budget = |resources, workers| first_budget_knowing(&peers, true, resources, workers);
    // No room here: three workers need the three nearest peers, out to
    // 5 ms, so the first budget is 8 ms, not 1 ms.
    assert_eq!(first_budget(Resources::ZERO, 3), ms(8));
    // One needs only the nearest, at 1 ms.
    assert_eq!(first_budget(Resources::ZERO, 1), ms(1));
    // More than the peers known: as far as the farthest, 9 ms.
    assert_eq!(first_budget(Resources::ZERO, 40), ms(16));
    // Room for two workers here (as on each node, the home guesses): six
    // workers need this node and the two nearest, out to 3 ms.
    assert_eq!(first_budget(Resources::new(2, 4096, 4096), 6), ms(4));
    // Eight peers known, four measured: they stand for two each, so the
    // nearest four are as far as the nearest two measured, 3 ms.
    let sample = [
        Some(ms(9)),
        None,
        Some(ms(1)),
        None,
        None,
        Some(ms(5)),
        None,
        Some(ms(3)),
    ];
    assert_eq!(
        first_budget_knowing(&sample, true, Resources::ZERO, 4),
        ms(4)
    );
    // Not every peer the overlay heard of (its table is full: a larger
    // grid, of which it measured a few near peers and its far links): the
    // first flood starts at the smallest budget.
    assert_eq!(
        first_budget_knowing(&peers, false, Resources::ZERO, 3),
        ms(1)
    );
}

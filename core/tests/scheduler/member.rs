//! A member: offers what fits, holds it, declines, queues, and obeys its
//! owner's limits.

use super::*;

#[test]
fn member_offers_what_fits_holds_it_and_starts_granted_ranks() {
    let mut node = member(4);
    let out = deliver(&mut node, ms(0), WorkerCount::rigid(3));
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Offer {
                hold: HoldId(0),
                job: JOB,
                workers: 3,
                distance: ms(1),
                residue: Resources::new(1, 4096 - 300, 4096),
                machine: machine(4, 0),
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
    other_job_takes_a_core(&mut node);
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

/// `JOB` (rigid 2) is delivered at `now`: the member offers the one core
/// it has left.
fn offers_one_of_two(node: &mut Scheduler<u32>, now: Duration) {
    let out = deliver(node, now, WorkerCount::rigid(2));
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
}

/// The member's raised offer of `JOB`: both its cores, nothing left.
fn offer_of_both_cores() -> Vec<Output<u32>> {
    vec![Output::Send {
        to: HOME,
        msg: Message::Offer {
            hold: HoldId(1),
            job: JOB,
            workers: 2,
            distance: ms(1),
            residue: Resources::new(0, 4096 - 200, 4096),
            // Both cores are this offer's: the node is idle otherwise.
            machine: machine(2, 0),
        },
    }]
}

/// A member offers the one core it has free for a job of two. When the
/// other core frees up (another job's worker ends) it raises the offer at
/// once, rather than letting the home wait out the hold or grant a farther
/// node; a newer flood then finds nothing more to offer.
#[test]
fn a_member_raises_a_short_offer_when_workers_end_here() {
    let mut node = member(2);
    other_job_takes_a_core(&mut node);
    from_home(&mut node, ms(1), grant(JobId(99), vec![0], 3));
    offers_one_of_two(&mut node, ms(2));
    // Nothing more to offer on a newer flood while the core is busy.
    assert_eq!(deliver(&mut node, ms(3), WorkerCount::rigid(2)), vec![]);
    let out = node.handle(
        ms(4),
        Input::WorkersEnded {
            job: JobId(99),
            ranks: vec![0],
        },
    );
    assert_eq!(out, offer_of_both_cores());
    assert_eq!(node.free().cores, 0, "both cores held");
    assert_eq!(
        deliver(&mut node, ms(6), WorkerCount::rigid(2)),
        vec![],
        "never beyond what the job wants"
    );
}

/// A refusal frees the cores its hold kept: the member raises its offer
/// to another job's home with them, as when workers end.
#[test]
fn a_refusal_raises_the_offer_held_for_another_job() {
    let mut node = member(2);
    other_job_takes_a_core(&mut node);
    offers_one_of_two(&mut node, ms(2));
    let out = from_home(
        &mut node,
        ms(3),
        Message::Refuse {
            hold: None,
            job: JobId(99),
            reason: RefuseReason::JobFull,
        },
    );
    assert_eq!(out, offer_of_both_cores());
    assert_eq!(node.free().cores, 0);
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
                ..OwnerLimits::default()
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

/// Users 100 and 101 own jobs; the node's owner lets only 100's run, two
/// cores and one job of it at a time.
fn member_for_user_100() -> Scheduler<u32> {
    Scheduler::new(
        1u32,
        SchedulerConfig {
            resources: Resources::new(8, 4096, 0),
            limits: OwnerLimits {
                users: UserPolicy {
                    only: Some([100].into()),
                    each: UserLimits {
                        max_cores: 2,
                        max_jobs: 1,
                    },
                    named: Default::default(),
                    first: std::collections::BTreeSet::new(),
                },
                ..OwnerLimits::default()
            },
            ..SchedulerConfig::default()
        },
    )
}

fn owned_by(job: u64, owner: Option<u32>, workers: u32) -> Input<u32> {
    Input::AdvertDelivered {
        advert: Advert {
            job: JobId(job),
            owner,
            ..advert(WorkerCount::rigid(workers))
        },
        distance: ms(1),
    }
}

/// `advert` reaches `node` while its cores are busy: it is queued.
fn queue_while_busy(node: &mut Scheduler<u32>, now: Duration, advert: Advert<u32>) {
    let out = node.handle(
        now,
        Input::AdvertDelivered {
            advert,
            distance: ms(1),
        },
    );
    assert_eq!(decline_reason(&out), Some(DeclineReason::Busy));
}

fn decline_reason(out: &[Output<u32>]) -> Option<DeclineReason> {
    match out {
        [
            Output::Send {
                msg: Message::Decline { reason, .. },
                ..
            },
        ] => Some(*reason),
        _ => None,
    }
}

#[test]
fn a_node_runs_only_the_users_its_owner_names_within_their_limits() {
    let mut node = member_for_user_100();
    // Another user's job, and a job of nobody's: declined for good.
    let out = node.handle(ms(0), owned_by(1, Some(101), 1));
    assert_eq!(decline_reason(&out), Some(DeclineReason::NotThisUser));
    let out = node.handle(ms(0), owned_by(2, None, 1));
    assert_eq!(decline_reason(&out), Some(DeclineReason::NotThisUser));
    assert_eq!(node.pending().count(), 0, "not queued: it never fits");
    // User 100's job of four workers gets two: the user's cores.
    let out = node.handle(ms(1), owned_by(3, Some(100), 4));
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
    // A second job of the same user waits: one job at a time.
    let out = node.handle(ms(2), owned_by(4, Some(100), 1));
    assert_eq!(decline_reason(&out), Some(DeclineReason::UserLimit));
    assert_eq!(node.pending().count(), 1, "queued: it fits later");
    // The first job's hold is refused: the second is offered its worker.
    let out = from_home(
        &mut node,
        ms(3),
        Message::Refuse {
            job: JobId(3),
            hold: Some(HoldId(0)),
            reason: RefuseReason::NotChosen,
        },
    );
    assert!(
        out.iter().any(|o| matches!(
            o,
            Output::Send {
                msg: Message::Offer {
                    job: JobId(4),
                    workers: 1,
                    ..
                },
                ..
            }
        )),
        "{out:?}"
    );
}

#[test]
fn a_named_users_limits_replace_everyones() {
    let node = member_for_user_100();
    let mut limits = node.config().limits.clone();
    limits.users.only = None;
    limits.users.named.insert(
        101,
        UserLimits {
            max_cores: 6,
            max_jobs: 3,
        },
    );
    let mut node = Scheduler::new(
        1u32,
        SchedulerConfig {
            limits,
            ..node.config().clone()
        },
    );
    // Anyone's job now; 101 may have six cores, others two.
    let out = node.handle(ms(0), owned_by(1, Some(101), 8));
    assert!(
        matches!(
            &out[..],
            [Output::Send {
                msg: Message::Offer { workers: 6, .. },
                ..
            }]
        ),
        "{out:?}"
    );
    let out = node.handle(ms(0), owned_by(2, Some(102), 8));
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
}

/// A member of two cores that holds an offer 500 ms at most.
fn member_holding_500_ms() -> Scheduler<u32> {
    Scheduler::new(
        1u32,
        SchedulerConfig {
            resources: Resources::new(2, 4096, 0),
            hold_timeout: ms(500),
            ..SchedulerConfig::default()
        },
    )
}

#[test]
fn hold_times_out_with_a_withdrawal_and_a_late_grant_is_refused() {
    let mut node = member_holding_500_ms();
    deliver(&mut node, ms(0), WorkerCount::rigid(2));
    assert_eq!(node.next_timeout(), Some(ms(500)));
    let out = node.handle_timeout(ms(500));
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Withdraw {
                hold: HoldId(0),
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
                hold: HoldId(0),
                job: JOB,
                ranks: vec![0, 1]
            }
        }]
    );
}

/// The member's hold timed out and it offered the job a new hold. A late
/// refusal of the first hold leaves the new one held, a late grant of the
/// first is withdrawn, and a grant of the new one starts workers.
#[test]
fn late_answers_to_an_earlier_hold_leave_the_next_hold_alone() {
    let mut node = member_holding_500_ms();
    deliver(&mut node, ms(0), WorkerCount::rigid(2));
    node.handle_timeout(ms(500));
    let out = deliver(&mut node, ms(600), WorkerCount::rigid(2));
    assert!(
        matches!(
            &out[..],
            [Output::Send {
                msg: Message::Offer {
                    hold: HoldId(1),
                    workers: 2,
                    ..
                },
                ..
            }]
        ),
        "{out:?}"
    );
    let refusal = Message::Refuse {
        job: JOB,
        hold: Some(HoldId(0)),
        reason: RefuseReason::NotChosen,
    };
    assert_eq!(from_home(&mut node, ms(601), refusal), vec![]);
    assert_eq!(node.free().cores, 0, "the new hold stands");
    let out = from_home(&mut node, ms(602), grant(JOB, vec![0, 1], 3));
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Withdraw {
                job: JOB,
                hold: HoldId(0),
                ranks: vec![0, 1],
            },
        }]
    );
    let out = from_home(&mut node, ms(603), grant_of_hold(1, JOB, vec![0, 1], 4));
    assert!(
        matches!(&out[..], [Output::StartWorkers { incarnation: 4, .. }]),
        "{out:?}"
    );
}

/// A node whose owner runs user 100's native jobs, for x86-64, with its
/// sandbox as `sandbox` says.
fn native_member(sandbox: bool) -> Scheduler<u32> {
    Scheduler::new(
        1u32,
        SchedulerConfig {
            resources: Resources::new(8, 4096, 0),
            limits: OwnerLimits {
                native: NativePolicy {
                    users: [100].into(),
                    arch: Some(Arch::X86_64),
                    sandbox,
                },
                ..OwnerLimits::default()
            },
            ..SchedulerConfig::default()
        },
    )
}

fn native_job(job: u64, owner: Option<u32>, arch: Arch) -> Input<u32> {
    Input::AdvertDelivered {
        advert: Advert {
            job: JobId(job),
            owner,
            kind: WorkKind::Native(arch),
            ..advert(WorkerCount::rigid(1))
        },
        distance: ms(1),
    }
}

#[test]
fn a_native_job_runs_only_where_the_owner_allows_its_user_on_its_architecture_in_a_sandbox() {
    // By default a node runs no native job, whoever owns it, but any
    // user's WebAssembly job.
    let mut node = member_for_user_100();
    let out = node.handle(ms(0), native_job(1, Some(100), Arch::X86_64));
    assert_eq!(decline_reason(&out), Some(DeclineReason::NoNativeJobs));
    let mut node = native_member(true);
    for (job, owner, arch, reason) in [
        (2, Some(101), Arch::X86_64, DeclineReason::NativeNotThisUser),
        (3, None, Arch::X86_64, DeclineReason::NativeNotThisUser),
        (4, Some(100), Arch::Aarch64, DeclineReason::OtherArch),
    ] {
        let out = node.handle(ms(1), native_job(job, owner, arch));
        assert_eq!(decline_reason(&out), Some(reason), "job {job}");
    }
    assert_eq!(node.pending().count(), 0, "declined for good, not queued");
    let out = node.handle(ms(2), native_job(5, Some(100), Arch::X86_64));
    assert!(
        matches!(
            &out[..],
            [Output::Send {
                msg: Message::Offer { workers: 1, .. },
                ..
            }]
        ),
        "{out:?}"
    );
    let out = node.handle(ms(3), owned_by(6, Some(101), 1));
    assert!(
        matches!(
            &out[..],
            [Output::Send {
                msg: Message::Offer { .. },
                ..
            }]
        ),
        "another user's WebAssembly job: {out:?}"
    );
    // A node that cannot sandbox native workers runs none.
    let mut node = native_member(false);
    let out = node.handle(ms(0), native_job(7, Some(100), Arch::X86_64));
    assert_eq!(decline_reason(&out), Some(DeclineReason::NoNativeSandbox));
}

/// Which queued job the member offers the core that frees up to, when
/// jobs of `queued` (job, owner, priority), in this order, wait for the
/// one core of a node whose owner's own users are `first`.
fn next_offered(first: &[u32], queued: &[(u64, u32, i8)]) -> Vec<u64> {
    let mut node = Scheduler::new(
        1u32,
        SchedulerConfig {
            resources: Resources::new(1, 4096, 4096),
            limits: OwnerLimits {
                users: UserPolicy {
                    first: first.iter().copied().collect(),
                    ..UserPolicy::default()
                },
                ..OwnerLimits::default()
            },
            ..SchedulerConfig::default()
        },
    );
    other_job_takes_a_core(&mut node);
    from_home(&mut node, ms(1), grant(JobId(99), vec![0], 3));
    for (t, &(job, owner, priority)) in queued.iter().enumerate() {
        let advert = Advert {
            job: JobId(job),
            owner: Some(owner),
            priority,
            ..advert(WorkerCount::rigid(1))
        };
        queue_while_busy(&mut node, ms(2 + t as u64), advert);
    }
    let mut offered = Vec::new();
    // Each time the core frees up, one queued job gets it.
    let mut ending = JobId(99);
    for t in 0..queued.len() as u64 {
        let out = node.handle(
            ms(100 + 10 * t),
            Input::WorkersEnded {
                job: ending,
                ranks: vec![0],
            },
        );
        let [
            Output::Send {
                msg: Message::Offer { job, hold, .. },
                ..
            },
        ] = &out[..]
        else {
            panic!("one offer expected: {out:?}");
        };
        offered.push(job.0);
        from_home(
            &mut node,
            ms(101 + 10 * t),
            grant_of_hold(hold.0, *job, vec![0], 0),
        );
        ending = *job;
    }
    offered
}

#[test]
fn freed_cores_go_to_the_owners_own_users_first_then_to_the_rest_in_turn() {
    // Users 7 and 8 queued before the owner's user 5: 5 goes first.
    assert_eq!(
        next_offered(&[5], &[(1, 7, 0), (2, 8, 0), (3, 5, 0)]),
        [3, 1, 2]
    );
    // Without own users, the oldest goes first.
    assert_eq!(
        next_offered(&[], &[(1, 7, 0), (2, 8, 0), (3, 5, 0)]),
        [1, 2, 3]
    );
}

#[test]
fn a_users_priorities_reorder_only_that_users_jobs() {
    // User 7's later job of priority 5 takes the place of its earlier one
    // (priority 0); user 8's job keeps its turn between them, whatever
    // the priorities.
    assert_eq!(
        next_offered(&[], &[(1, 7, 0), (2, 8, -3), (3, 7, 5)]),
        [3, 2, 1]
    );
    // Equal priorities: oldest first.
    assert_eq!(
        next_offered(&[], &[(1, 7, 2), (2, 7, 2), (3, 8, 9)]),
        [1, 2, 3]
    );
}

/// Node 1, of one core, that runs a worker of `busy` (granted at 1 ms by
/// its home) and owes node 10 a favour: node 1's own job `JOB` ran on node
/// 10 for 10 s (balance 10,000 core-ms).
fn node_owing_10(fair_share: bool, busy: Advert<u32>) -> Scheduler<u32> {
    let mut node = Scheduler::new(
        1,
        SchedulerConfig {
            resources: Resources::new(1, 4096, 4096),
            fair_share,
            ..SchedulerConfig::default()
        },
    );
    let (busy_job, busy_home) = (busy.job, busy.home);
    node.handle(
        ms(0),
        Input::AdvertDelivered {
            advert: busy,
            distance: ms(1),
        },
    );
    node.handle(
        ms(1),
        Input::Message {
            from: busy_home,
            msg: grant(busy_job, vec![0], 3),
            rtt: None,
        },
    );
    let own = Scheduler::admit(&node, spec(WorkerCount::rigid(1))).unwrap();
    node.handle(
        ms(2),
        Input::Submit {
            job: JOB,
            spec: own,
            owner: None,
        },
    );
    offer_from(&mut node, ms(10), 10, 1, 1);
    assert_eq!(node.phase(JOB), Some(Phase::Running));
    assert_eq!(node.favours().balance(&10), 0, "nothing done yet");
    rank_exited(&mut node, ms(10_010), 10, 0);
    // 1 core for 10 s at node 1's own speed.
    assert_eq!(node.favours().balance(&10), 10_000);
    node
}

/// Node 1 owes node 10 and its core runs job 99 of a stranger (home 20),
/// preemptible or not; node 10's job 2 arrives. What node 1 does: the
/// stops, withdrawals and offers among its outputs.
fn creditor_arrives(victim_preemptible: bool, creditor: u32) -> Vec<String> {
    let busy = Advert {
        job: JobId(99),
        home: 20,
        preemptible: victim_preemptible,
        ..advert(WorkerCount::rigid(1))
    };
    let mut node = node_owing_10(true, busy);
    let out = node.handle(
        ms(20_000),
        Input::AdvertDelivered {
            advert: Advert {
                job: JobId(2),
                home: creditor,
                ..advert(WorkerCount::rigid(1))
            },
            distance: ms(1),
        },
    );
    out.iter()
        .filter_map(|o| match o {
            Output::Preempted { job, for_job } => Some(format!("stop {} for {}", job.0, for_job.0)),
            Output::Send {
                to,
                msg: Message::Withdraw { job, ranks, .. },
            } => Some(format!("withdraw {} {ranks:?} to {to}", job.0)),
            Output::Send {
                to,
                msg: Message::Offer { job, workers, .. },
            } => Some(format!("offer {workers} of {} to {to}", job.0)),
            Output::Send {
                to,
                msg: Message::Decline { job, reason },
            } => Some(format!("decline {} to {to}: {reason:?}", job.0)),
            _ => None,
        })
        .collect()
}

/// Preemption (issue 33, item 2): a creditor's job that finds the core
/// taken by a stranger's job that may be preempted gets it at once; the
/// stranger's home is told to place its worker elsewhere.
#[test]
fn a_creditors_job_preempts_a_strangers_preemptible_worker() {
    assert_eq!(
        creditor_arrives(true, 10),
        vec![
            "withdraw 99 [0] to 20",
            "stop 99 for 2",
            "offer 1 of 2 to 10"
        ]
    );
}

/// No preemption for a job whose home would fail without the worker, nor
/// for a stranger's job: they wait in the queue like any other.
#[test]
fn a_worker_that_may_not_be_preempted_or_a_strangers_advert_preempts_nothing() {
    assert_eq!(creditor_arrives(false, 10), vec!["decline 2 to 10: Busy"]);
    assert_eq!(creditor_arrives(true, 30), vec!["decline 2 to 30: Busy"]);
}

/// Network of Favors (`zorilla_core::favours`): node 1 (one core) is home
/// of job 7, which node 10 runs for 10 s; then jobs of a stranger's home
/// (20) and of node 10 wait for node 1's core, the stranger's first: the
/// freed core is offered to node 10's job. The worker node 1 ran for home
/// 0 is a favour to 0, whose balance stays zero (it never goes below).
#[test]
fn a_freed_core_goes_first_to_the_job_of_a_node_that_did_this_one_favours() {
    assert_eq!(freed_core_offered_to(true), vec![(10, JobId(2))]);
}

/// The same without fair sharing (`SchedulerConfig::fair_share` off, the
/// simulator's first-come-first-served baseline): the stranger's job,
/// queued first, is offered the core.
#[test]
fn without_fair_sharing_a_freed_core_goes_to_the_job_queued_first() {
    assert_eq!(freed_core_offered_to(false), vec![(20, JobId(1))]);
}

/// The offers node 1 makes when its core frees up in the scenario above.
fn freed_core_offered_to(fair_share: bool) -> Vec<(u32, JobId)> {
    let busy = Advert {
        job: JobId(99),
        ..advert(WorkerCount::rigid(1))
    };
    let mut node = node_owing_10(fair_share, busy);
    for (t, (job, home)) in [(1, 20), (2, 10)].into_iter().enumerate() {
        let advert = Advert {
            job: JobId(job),
            home,
            ..advert(WorkerCount::rigid(1))
        };
        queue_while_busy(&mut node, ms(10_100 + t as u64), advert);
    }
    let out = node.handle(
        ms(20_000),
        Input::WorkersEnded {
            job: JobId(99),
            ranks: vec![0],
        },
    );
    let offered: Vec<(u32, JobId)> = out
        .iter()
        .filter_map(|o| match o {
            Output::Send {
                to,
                msg: Message::Offer { job, .. },
            } => Some((*to, *job)),
            _ => None,
        })
        .collect();
    assert_eq!(node.favours().balance(&HOME), 0);
    assert_eq!(node.favours().len(), 2, "accounts of 10 and of home 0");
    offered
}

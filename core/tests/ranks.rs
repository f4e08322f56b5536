//! The rank lifecycle at a job's home after the grant, as exact event
//! lists: a rank exits, fails, is cancelled, is lost and replaced; the job
//! completes or fails exactly once; stale reports are ignored; a job whose
//! running ranks all wait on one another fails, naming a replaced rank.

use std::collections::BTreeMap;
use std::time::Duration;

use zorilla_core::advert::{Advert, HoldId, JobId, Message, Placed, RefuseReason, WorkerCount};
use zorilla_core::liveness::LostCause;
use zorilla_core::node::Failure;
use zorilla_core::node::{
    EndReason, Input, JobEvent, JobSpec, LostPolicy, LostReason, Output, Phase, Rank, RankOutcome,
    Scheduler, SchedulerConfig, WorkerEnd,
};
use zorilla_core::resources::{Machine, Resources};
use zorilla_core::schedule::ScheduleConfig;

const HOME: u32 = 0;
const JOB: JobId = JobId(7);

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

/// A home (with no cores of its own) whose job `JOB` of `workers` got one
/// worker on each of `nodes`, in that order: rank `i` on `nodes[i]`, grant
/// number `i`.
fn running(workers: WorkerCount, nodes: &[u32]) -> Scheduler<u32> {
    running_with(workers, nodes, LostPolicy::Fail)
}

/// [`running`], with `on_worker_lost`.
fn running_with(workers: WorkerCount, nodes: &[u32], on_worker_lost: LostPolicy) -> Scheduler<u32> {
    let mut home = Scheduler::new(
        HOME,
        SchedulerConfig {
            resources: Resources::ZERO,
            schedule: ScheduleConfig::paper(),
            ..SchedulerConfig::default()
        },
    );
    let spec = JobSpec {
        runs: 1,
        per_worker: Resources::new(1, 100, 0),
        workers,
        strategy: zorilla_core::advert::Strategy::Concentrate,
        lifetime: Duration::from_secs(60),
        on_worker_lost,
        kind: zorilla_core::advert::WorkKind::Wasm,
        priority: 0,
        tasks: None,
    };
    home.handle(
        ms(0),
        Input::Submit {
            job: JOB,
            spec: home.admit(spec).unwrap(),
            owner: None,
        },
    );
    for (i, node) in nodes.iter().enumerate() {
        offer(&mut home, ms(1 + i as u64), *node);
    }
    assert_eq!(home.phase(JOB), Some(Phase::Running));
    for (i, node) in nodes.iter().enumerate() {
        assert_eq!(
            home.ranks(JOB).unwrap().get(i as u32),
            Some(&Rank {
                node: *node,
                incarnation: i as u32,
                outcome: None,
                digest: None
            })
        );
    }
    home
}

fn offer(home: &mut Scheduler<u32>, now: Duration, from: u32) -> Vec<Output<u32>> {
    home.handle(
        now,
        Input::Message {
            from,
            msg: Message::Offer {
                hold: HoldId(0),
                job: JOB,
                workers: 1,
                distance: ms(1),
                residue: Resources::ZERO,
                machine: Machine::default(),
            },
            rtt: Some(ms(1)),
        },
    )
}

fn ends(
    home: &mut Scheduler<u32>,
    node: u32,
    rank: u32,
    incarnation: u32,
    end: WorkerEnd,
) -> Vec<Output<u32>> {
    home.handle(
        ms(100),
        Input::RankEnded {
            digest: None,
            job: JOB,
            node,
            rank,
            incarnation,
            end,
        },
    )
}

fn rank_ended(node: u32, rank: u32, outcome: RankOutcome) -> Output<u32> {
    Output::Job(JobEvent::RankEnded {
        digest: None,
        job: JOB,
        node,
        rank,
        outcome,
        check: false,
    })
}

fn ended(phase: Phase, reason: EndReason<u32>) -> Output<u32> {
    Output::Job(JobEvent::Ended {
        job: JOB,
        phase,
        reason,
    })
}

/// Ranks as (rank, node, incarnation) to a placement.
fn placement(ranks: &[(u32, u32, u32)]) -> BTreeMap<u32, Placed<u32>> {
    ranks
        .iter()
        .map(|&(rank, node, incarnation)| (rank, Placed { node, incarnation }))
        .collect()
}

/// The home tells node `to` of the job's phase and placement.
fn told(to: u32, phase: Phase, ranks: &[(u32, u32, u32)], replaced: &[u32]) -> Output<u32> {
    Output::Send {
        to,
        msg: Message::Placement {
            job: JOB,
            phase,
            placement: placement(ranks),
            replaced: replaced.to_vec(),
        },
    }
}

/// A refusal to a node running ranks of the job (of every hold it has).
fn refuse(to: u32, reason: RefuseReason) -> Output<u32> {
    Output::Send {
        to,
        msg: Message::Refuse {
            hold: None,
            job: JOB,
            reason,
        },
    }
}

#[test]
fn a_job_completes_once_when_every_rank_exited_with_status_0() {
    let mut home = running(WorkerCount::rigid(2), &[10, 11]);
    assert_eq!(
        ends(&mut home, 10, 0, 0, WorkerEnd::Exited(0)),
        vec![rank_ended(10, 0, RankOutcome::Exited(0))]
    );
    assert_eq!(home.phase(JOB), Some(Phase::Running), "rank 1 still runs");
    assert_eq!(
        ends(&mut home, 11, 1, 1, WorkerEnd::Exited(0)),
        vec![
            rank_ended(11, 1, RankOutcome::Exited(0)),
            // Every node of the job hears how it ended.
            told(10, Phase::Completed, &[(0, 10, 0), (1, 11, 1)], &[]),
            told(11, Phase::Completed, &[(0, 10, 0), (1, 11, 1)], &[]),
            ended(Phase::Completed, EndReason::Completed { workers: 2 }),
        ]
    );
    // Once: a repeated report, a cancel, a loss change nothing.
    assert_eq!(ends(&mut home, 11, 1, 1, WorkerEnd::Exited(0)), vec![]);
    assert_eq!(home.handle(ms(101), Input::Cancel(JOB)), vec![]);
    assert_eq!(home.handle(ms(102), Input::PeerLost(10)), vec![]);
    assert_eq!(home.phase(JOB), Some(Phase::Completed));
}

#[test]
fn a_failed_rank_fails_the_job_once_and_later_ends_are_only_recorded() {
    let mut home = running(WorkerCount::rigid(2), &[10, 11]);
    let trap = Failure::Trapped("unreachable".into());
    let reason = EndReason::RankFailed {
        rank: 1,
        node: 11,
        outcome: RankOutcome::Failed(trap.clone()),
    };
    assert_eq!(reason.to_string(), "rank 1 on 11: crashed: unreachable");
    assert_eq!(
        ends(&mut home, 11, 1, 1, WorkerEnd::Failed(trap.clone())),
        vec![
            rank_ended(11, 1, RankOutcome::Failed(trap)),
            refuse(10, RefuseReason::Failed),
            refuse(11, RefuseReason::Failed),
            told(10, Phase::Failed, &[(0, 10, 0), (1, 11, 1)], &[]),
            told(11, Phase::Failed, &[(0, 10, 0), (1, 11, 1)], &[]),
            ended(Phase::Failed, reason),
        ]
    );
    // Rank 0 finished before it heard: its end is recorded, the job stays
    // failed.
    assert_eq!(
        ends(&mut home, 10, 0, 0, WorkerEnd::Exited(0)),
        vec![rank_ended(10, 0, RankOutcome::Exited(0))]
    );
    assert_eq!(home.phase(JOB), Some(Phase::Failed));
}

#[test]
fn a_nonzero_exit_status_fails_the_job() {
    let mut home = running(WorkerCount::rigid(1), &[10]);
    assert_eq!(
        ends(&mut home, 10, 0, 0, WorkerEnd::Exited(3)),
        vec![
            rank_ended(10, 0, RankOutcome::Exited(3)),
            refuse(10, RefuseReason::Failed),
            told(10, Phase::Failed, &[(0, 10, 0)], &[]),
            ended(
                Phase::Failed,
                EndReason::RankFailed {
                    rank: 0,
                    node: 10,
                    outcome: RankOutcome::Exited(3)
                }
            ),
        ]
    );
}

#[test]
fn a_cancelled_rank_does_not_fail_the_job() {
    let mut home = running(WorkerCount::rigid(2), &[10, 11]);
    assert_eq!(
        ends(&mut home, 10, 0, 0, WorkerEnd::Cancelled),
        vec![rank_ended(10, 0, RankOutcome::Cancelled)]
    );
    assert_eq!(home.phase(JOB), Some(Phase::Running));
}

#[test]
fn a_lost_rank_is_replaced_and_its_old_workers_late_report_ignored() {
    let mut home = running(WorkerCount { min: 1, max: 2 }, &[10, 11]);
    let lost = home.handle(
        ms(10),
        Input::RanksLost {
            job: JOB,
            node: 11,
            ranks: vec![1],
            cause: LostCause::NotRunning,
        },
    );
    let reason = LostReason::Liveness(LostCause::NotRunning);
    assert_eq!(
        lost[0],
        Output::Job(JobEvent::WorkersLost {
            job: JOB,
            node: 11,
            ranks: vec![1],
            reason,
        })
    );
    // The node left hears that rank 1 is gone, and a fresh flood looks
    // for the replacement at once.
    assert_eq!(lost[1], told(10, Phase::Running, &[(0, 10, 0)], &[]));
    assert!(
        matches!(&lost[2..], [Output::Flood(Advert { job: JOB, .. })]),
        "{lost:?}"
    );
    let table = home.ranks(JOB).unwrap();
    assert_eq!(table.lost().collect::<Vec<_>>(), vec![1]);
    assert_eq!(
        table.get(1).unwrap().outcome,
        Some(RankOutcome::Lost(reason))
    );
    // Rank 0 is done meanwhile; the job waits for rank 1.
    assert_eq!(
        ends(&mut home, 10, 0, 0, WorkerEnd::Exited(0)),
        vec![rank_ended(10, 0, RankOutcome::Exited(0))]
    );
    assert_eq!(home.phase(JOB), Some(Phase::Running));

    // Node 12 takes rank 1, as grant 2.
    assert_eq!(
        offer(&mut home, ms(20), 12),
        vec![
            Output::Job(JobEvent::Granted {
                job: JOB,
                node: 12,
                ranks: vec![1],
                incarnation: 2,
                rtt: ms(1),
                replaced: vec![1],
            }),
            // One message starts the replacement: its ranks and where
            // every rank runs.
            Output::Send {
                to: 12,
                msg: Message::Grant {
                    hold: HoldId(0),
                    job: JOB,
                    ranks: vec![1],
                    incarnation: 2,
                    placement: placement(&[(0, 10, 0), (1, 12, 2)]),
                }
            },
            Output::Job(JobEvent::Full { job: JOB }),
            // The node that ran rank 0 all along learns of the new worker.
            told(10, Phase::Running, &[(0, 10, 0), (1, 12, 2)], &[1]),
        ]
    );
    // The lost worker's late report, and one naming an older grant on the
    // new node, are ignored.
    assert_eq!(ends(&mut home, 11, 1, 1, WorkerEnd::Exited(0)), vec![]);
    assert_eq!(ends(&mut home, 12, 1, 1, WorkerEnd::Exited(0)), vec![]);
    assert_eq!(ends(&mut home, 11, 1, 1, WorkerEnd::Exited(9)), vec![]);
    assert_eq!(home.phase(JOB), Some(Phase::Running));
    assert_eq!(
        ends(&mut home, 12, 1, 2, WorkerEnd::Exited(0)),
        vec![
            rank_ended(12, 1, RankOutcome::Exited(0)),
            told(10, Phase::Completed, &[(0, 10, 0), (1, 12, 2)], &[]),
            told(12, Phase::Completed, &[(0, 10, 0), (1, 12, 2)], &[]),
            ended(Phase::Completed, EndReason::Completed { workers: 2 }),
        ]
    );
}

#[test]
fn a_rigid_job_fails_once_when_it_loses_a_rank() {
    let mut home = running(WorkerCount::rigid(2), &[10, 11]);
    assert_eq!(
        home.handle(ms(10), Input::PeerLost(11)),
        vec![
            Output::Job(JobEvent::WorkersLost {
                job: JOB,
                node: 11,
                ranks: vec![1],
                reason: LostReason::Left,
            }),
            // Only the node that still runs a rank is told.
            refuse(10, RefuseReason::Failed),
            told(10, Phase::Failed, &[(0, 10, 0)], &[]),
            ended(
                Phase::Failed,
                EndReason::WorkersLost {
                    node: 11,
                    ranks: vec![1],
                    reason: LostReason::Left
                }
            ),
        ]
    );
    assert_eq!(home.handle(ms(11), Input::PeerLost(10)), vec![]);
    assert_eq!(
        ends(&mut home, 10, 0, 0, WorkerEnd::Exited(0)),
        vec![rank_ended(10, 0, RankOutcome::Exited(0))]
    );
    assert_eq!(home.phase(JOB), Some(Phase::Failed));
}

#[test]
fn a_rank_that_ended_is_not_lost_with_its_node() {
    let mut home = running(WorkerCount::rigid(2), &[10, 11]);
    ends(&mut home, 11, 1, 1, WorkerEnd::Exited(0));
    assert_eq!(home.handle(ms(10), Input::PeerLost(11)), vec![]);
    assert_eq!(
        ends(&mut home, 10, 0, 0, WorkerEnd::Exited(0)),
        vec![
            rank_ended(10, 0, RankOutcome::Exited(0)),
            told(10, Phase::Completed, &[(0, 10, 0), (1, 11, 1)], &[]),
            told(11, Phase::Completed, &[(0, 10, 0), (1, 11, 1)], &[]),
            ended(Phase::Completed, EndReason::Completed { workers: 2 }),
        ]
    );
}

#[test]
fn cancel_ends_the_job_once_and_later_reports_are_only_recorded() {
    let mut home = running(WorkerCount::rigid(2), &[10, 11]);
    assert_eq!(
        home.handle(ms(10), Input::Cancel(JOB)),
        vec![
            refuse(10, RefuseReason::Cancelled),
            refuse(11, RefuseReason::Cancelled),
            told(10, Phase::Cancelled, &[(0, 10, 0), (1, 11, 1)], &[]),
            told(11, Phase::Cancelled, &[(0, 10, 0), (1, 11, 1)], &[]),
            ended(Phase::Cancelled, EndReason::Cancelled),
        ]
    );
    assert_eq!(home.handle(ms(11), Input::Cancel(JOB)), vec![]);
    assert_eq!(
        ends(&mut home, 10, 0, 0, WorkerEnd::Exited(1)),
        vec![rank_ended(10, 0, RankOutcome::Exited(1))]
    );
    assert_eq!(
        ends(&mut home, 11, 1, 1, WorkerEnd::Exited(0)),
        vec![rank_ended(11, 1, RankOutcome::Exited(0))]
    );
    assert_eq!(home.handle(ms(12), Input::PeerLost(11)), vec![]);
    assert_eq!(home.phase(JOB), Some(Phase::Cancelled));
}

#[test]
fn a_malleable_job_completes_with_the_ranks_it_got_once_it_has_its_min() {
    // Min 1, max 3: one rank granted, and it is done.
    let mut home = running(WorkerCount { min: 1, max: 3 }, &[10]);
    assert_eq!(
        ends(&mut home, 10, 0, 0, WorkerEnd::Exited(0)),
        vec![
            rank_ended(10, 0, RankOutcome::Exited(0)),
            told(10, Phase::Completed, &[(0, 10, 0)], &[]),
            ended(Phase::Completed, EndReason::Completed { workers: 1 }),
        ]
    );
    // The offers that come later are refused: the job has all it needed.
    assert_eq!(
        offer(&mut home, ms(200), 11),
        vec![Output::Send {
            to: 11,
            msg: Message::Refuse {
                hold: Some(HoldId(0)),
                job: JOB,
                reason: RefuseReason::JobFull,
            },
        }]
    );
}

#[test]
fn reports_for_ranks_or_jobs_the_home_does_not_know_are_ignored() {
    let mut home = running(WorkerCount::rigid(1), &[10]);
    assert_eq!(ends(&mut home, 10, 5, 0, WorkerEnd::Exited(0)), vec![]);
    let other = home.handle(
        ms(1),
        Input::RankEnded {
            digest: None,
            job: JobId(99),
            node: 10,
            rank: 0,
            incarnation: 0,
            end: WorkerEnd::Exited(0),
        },
    );
    assert_eq!(other, vec![]);
    assert_eq!(home.phase(JOB), Some(Phase::Running));
}

/// One grant is one message: the nodes granted together each get their
/// ranks, their incarnation and the whole placement (each other's ranks
/// included), and nobody is told anything else.
#[test]
fn nodes_granted_together_get_one_message_each_with_the_whole_placement() {
    let mut home = Scheduler::new(
        HOME,
        SchedulerConfig {
            resources: Resources::ZERO,
            schedule: ScheduleConfig::paper(),
            ..SchedulerConfig::default()
        },
    );
    let spec = JobSpec {
        runs: 1,
        per_worker: Resources::new(1, 100, 0),
        workers: WorkerCount::rigid(3),
        strategy: zorilla_core::advert::Strategy::Concentrate,
        lifetime: Duration::from_secs(60),
        on_worker_lost: LostPolicy::Fail,
        kind: zorilla_core::advert::WorkKind::Wasm,
        priority: 0,
        tasks: None,
    };
    home.handle(
        ms(0),
        Input::Submit {
            job: JOB,
            spec: home.admit(spec).unwrap(),
            owner: None,
        },
    );
    let two = home.handle(
        ms(1),
        Input::Message {
            from: 10,
            msg: Message::Offer {
                hold: HoldId(0),
                job: JOB,
                workers: 2,
                distance: ms(1),
                residue: Resources::ZERO,
                machine: Machine::default(),
            },
            rtt: Some(ms(1)),
        },
    );
    assert_eq!(two, vec![], "2 of 3: the rigid job waits");
    let out = offer(&mut home, ms(2), 11);
    let whole = placement(&[(0, 10, 0), (1, 10, 0), (2, 11, 1)]);
    let grant = |to: u32, ranks: Vec<u32>, incarnation: u32| Output::Send {
        to,
        msg: Message::Grant {
            hold: HoldId(0),
            job: JOB,
            ranks,
            incarnation,
            placement: whole.clone(),
        },
    };
    let granted = |node: u32, ranks: Vec<u32>, incarnation: u32| {
        Output::Job(JobEvent::Granted {
            job: JOB,
            node,
            ranks,
            incarnation,
            rtt: ms(1),
            replaced: vec![],
        })
    };
    assert_eq!(
        out,
        vec![
            granted(10, vec![0, 1], 0),
            granted(11, vec![2], 1),
            grant(10, vec![0, 1], 0),
            grant(11, vec![2], 1),
            Output::Job(JobEvent::Started {
                job: JOB,
                workers: 3
            }),
            Output::Job(JobEvent::Full { job: JOB }),
        ]
    );
}

/// A malleable job that grows tells the nodes it had of the new ranks;
/// the new node hears it all in its grant.
#[test]
fn a_growing_job_tells_its_earlier_nodes_of_the_new_ranks() {
    let mut home = running(WorkerCount { min: 1, max: 2 }, &[10]);
    let whole = placement(&[(0, 10, 0), (1, 11, 1)]);
    assert_eq!(
        offer(&mut home, ms(50), 11),
        vec![
            Output::Job(JobEvent::Granted {
                job: JOB,
                node: 11,
                ranks: vec![1],
                incarnation: 1,
                rtt: ms(1),
                replaced: vec![],
            }),
            Output::Send {
                to: 11,
                msg: Message::Grant {
                    hold: HoldId(0),
                    job: JOB,
                    ranks: vec![1],
                    incarnation: 1,
                    placement: whole.clone(),
                },
            },
            Output::Job(JobEvent::Full { job: JOB }),
            told(10, Phase::Running, &[(0, 10, 0), (1, 11, 1)], &[]),
        ]
    );
}

/// The member starts its ranks from the grant alone (the placement comes
/// with the start), and hands the home's later word on to its driver;
/// word about a job from another node than its home is passed with the
/// sender, for the driver to check.
#[test]
fn a_member_starts_from_the_grant_alone_and_passes_placement_changes_on() {
    let mut member = Scheduler::new(
        10,
        SchedulerConfig {
            resources: Resources::new(4, 1000, 0),
            ..SchedulerConfig::default()
        },
    );
    let advert = Advert {
        job: JOB,
        home: HOME,
        per_worker: Resources::new(1, 100, 0),
        workers: WorkerCount::rigid(2),
        strategy: zorilla_core::advert::Strategy::Concentrate,
        expires_in: Duration::from_secs(60),
        flood: zorilla_core::advert::FloodHeader {
            seq: 0,
            ttl: 3,
            latency_budget: None,
            path_rtt: Duration::ZERO,
        },
        owner: None,
        kind: zorilla_core::advert::WorkKind::Wasm,
        priority: 0,
        preemptible: false,
    };
    let offered = member.handle(
        ms(0),
        Input::AdvertDelivered {
            advert,
            distance: ms(1),
        },
    );
    assert!(
        matches!(
            &offered[..],
            [Output::Send {
                to: HOME,
                msg: Message::Offer { workers: 2, .. }
            }]
        ),
        "{offered:?}"
    );
    let whole = placement(&[(0, 10, 0), (1, 11, 1)]);
    let start = member.handle(
        ms(5),
        Input::Message {
            from: HOME,
            msg: Message::Grant {
                hold: HoldId(0),
                job: JOB,
                ranks: vec![0],
                incarnation: 0,
                placement: whole.clone(),
            },
            rtt: None,
        },
    );
    assert_eq!(
        start,
        vec![Output::StartWorkers {
            job: JOB,
            home: HOME,
            ranks: vec![0],
            incarnation: 0,
            placement: whole.clone(),
        }]
    );
    for from in [HOME, 99] {
        let changed = member.handle(
            ms(6),
            Input::Message {
                from,
                msg: Message::Placement {
                    job: JOB,
                    phase: Phase::Cancelled,
                    placement: whole.clone(),
                    replaced: vec![1],
                },
                rtt: None,
            },
        );
        assert_eq!(
            changed,
            vec![Output::PlacementChanged {
                job: JOB,
                home: from,
                phase: Phase::Cancelled,
                placement: whole.clone(),
                replaced: vec![1],
            }]
        );
    }
}

fn stalled(ranks: &[(u32, u32)]) -> Input<u32> {
    Input::Stalled {
        job: JOB,
        ranks: ranks.iter().copied().collect(),
    }
}

#[test]
fn a_job_whose_running_ranks_all_wait_fails_once_and_only_when_they_are_all_its_ranks() {
    let mut home = running(WorkerCount::rigid(3), &[10, 11, 12]);
    ends(&mut home, 12, 2, 2, WorkerEnd::Exited(0));
    // Not every running rank, a rank on another node, an ended rank, or
    // none: nothing happens.
    assert_eq!(home.handle(ms(200), stalled(&[(0, 10)])), vec![]);
    assert_eq!(home.handle(ms(200), stalled(&[(0, 10), (1, 12)])), vec![]);
    assert_eq!(
        home.handle(ms(200), stalled(&[(0, 10), (1, 11), (2, 12)])),
        vec![]
    );
    assert_eq!(home.handle(ms(200), stalled(&[])), vec![]);
    assert_eq!(home.phase(JOB), Some(Phase::Running));
    let reason = EndReason::Stalled {
        waiting: vec![0, 1],
        replaced: vec![],
    };
    assert_eq!(
        reason.to_string(),
        "stalled: they waited for a message that no rank would ever send (all of ranks 0 \
         and 1 waited in a receive, with no message in flight)"
    );
    let out = home.handle(ms(200), stalled(&[(0, 10), (1, 11)]));
    assert_eq!(out.last(), Some(&ended(Phase::Failed, reason)), "{out:?}");
    assert!(out.contains(&refuse(10, RefuseReason::Failed)), "{out:?}");
    assert_eq!(home.phase(JOB), Some(Phase::Failed));
    assert_eq!(home.handle(ms(300), stalled(&[(0, 10), (1, 11)])), vec![]);
}

#[test]
fn a_stall_waits_for_a_lost_ranks_replacement_and_then_names_it() {
    let mut home = running_with(WorkerCount::rigid(2), &[10, 11], LostPolicy::Replace);
    ends(&mut home, 11, 1, 1, WorkerEnd::Exited(0));
    home.handle(
        ms(150),
        Input::RanksLost {
            job: JOB,
            node: 10,
            ranks: vec![0],
            cause: LostCause::Silent,
        },
    );
    // Rank 0 waits for a replacement, which its peers will hear of.
    assert_eq!(home.handle(ms(160), stalled(&[(0, 10)])), vec![]);
    offer(&mut home, ms(170), 12);
    let table = home.ranks(JOB).unwrap();
    assert_eq!(table.replaced().collect::<Vec<_>>(), vec![0]);
    assert_eq!(table.get(0).unwrap().node, 12);
    // The lost worker's node is not where rank 0 runs now.
    assert_eq!(home.handle(ms(200), stalled(&[(0, 10)])), vec![]);
    let reason = EndReason::Stalled {
        waiting: vec![0],
        replaced: vec![0],
    };
    let out = home.handle(ms(200), stalled(&[(0, 12)]));
    assert_eq!(
        out.last(),
        Some(&ended(Phase::Failed, reason.clone())),
        "{out:?}"
    );
    assert_eq!(
        reason.to_string(),
        "stalled: it waited for a message that no rank would ever send (rank 0 waited in a \
         receive, with no message in flight); rank 0 was replaced after a loss and started \
         over, and what was sent to the lost worker is gone: a job whose ranks exchange \
         messages needs on_worker_lost = \"rollback\" with checkpoints, not \"replace\""
    );
}

#[test]
fn a_malleable_job_that_may_still_grow_is_not_stalled() {
    let mut home = running(WorkerCount { min: 1, max: 3 }, &[10]);
    assert_eq!(home.handle(ms(200), stalled(&[(0, 10)])), vec![]);
    assert_eq!(home.phase(JOB), Some(Phase::Running));
}

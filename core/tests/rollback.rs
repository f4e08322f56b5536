//! A rigid job whose ranks roll back together (`LostPolicy::Rollback`,
//! the LBG-SQUARE way): a lost rank sends every rank back to the latest
//! checkpoint generation all of them hold, or to the start if there is
//! none; the old workers stop, every rank gets a fresh incarnation, and
//! nothing of the old ones is taken for the new; a rank lost during a
//! rollback rolls the job back again; and a home that takes the job over
//! from its log decides the same.

use std::time::Duration;

use zorilla_core::advert::{HoldId, JobId, Message, Phase, RefuseReason, Strategy, WorkerCount};
use zorilla_core::checkpoint::{Latest, checkpoint_seq};
use zorilla_core::node::{
    CheckpointRefused, EndReason, Input, JobEntry, JobEvent, JobSpec, JobState, LostPolicy,
    LostReason, Output, RankOutcome, Scheduler, SchedulerConfig, WorkerEnd,
};
use zorilla_core::resources::{Machine, Resources};
use zorilla_core::schedule::ScheduleConfig;

const JOB: JobId = JobId(7);

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn config(cores: u32) -> SchedulerConfig<u32> {
    SchedulerConfig {
        resources: Resources::new(cores, 1000, 0),
        schedule: ScheduleConfig::paper(),
        ..SchedulerConfig::default()
    }
}

fn spec(workers: u32) -> JobSpec {
    JobSpec {
        runs: 1,
        per_worker: Resources::new(1, 100, 0),
        workers: WorkerCount {
            min: workers,
            max: workers,
        },
        strategy: Strategy::Concentrate,
        lifetime: Duration::from_secs(60),
        on_worker_lost: LostPolicy::Rollback,
        kind: zorilla_core::advert::WorkKind::Wasm,
        priority: 0,
        tasks: None,
    }
}

/// A home that logs what it decides, and knows where each rank runs.
struct Home {
    sched: Scheduler<u32>,
    log: Vec<JobEntry<u32>>,
    /// rank -> (node, incarnation), as granted.
    placed: std::collections::BTreeMap<u32, (u32, u32)>,
}

impl Home {
    fn new(cores: u32, workers: u32) -> (Home, Vec<Output<u32>>) {
        let spec = spec(workers);
        let mut home = Home {
            sched: Scheduler::new(0, config(cores)),
            log: vec![JobEntry::Submitted {
                spec: spec.clone(),
                owner: None,
            }],
            placed: Default::default(),
        };
        let out = home.handle(
            ms(0),
            Input::Submit {
                job: JOB,
                spec: home.sched.admit(spec).unwrap(),
                owner: None,
            },
        );
        (home, out)
    }

    fn record(&mut self, out: &[Output<u32>]) {
        for o in out {
            match o {
                Output::Job(event) => self.log.extend(JobEntry::of(event)),
                Output::Send {
                    to,
                    msg:
                        Message::Grant {
                            ranks, incarnation, ..
                        },
                } => {
                    for r in ranks {
                        self.placed.insert(*r, (*to, *incarnation));
                    }
                }
                Output::StartWorkers {
                    ranks, incarnation, ..
                } => {
                    for r in ranks {
                        self.placed.insert(*r, (0, *incarnation));
                    }
                }
                _ => {}
            }
        }
    }

    fn handle(&mut self, now: Duration, input: Input<u32>) -> Vec<Output<u32>> {
        let out = self.sched.handle(now, input);
        self.record(&out);
        out
    }

    fn offer(&mut self, now: Duration, from: u32, workers: u32) -> Vec<Output<u32>> {
        let msg = Message::Offer {
            hold: HoldId(0),
            job: JOB,
            workers,
            distance: ms(1),
            residue: Resources::ZERO,
            machine: Machine::default(),
        };
        let out = self.handle(
            now,
            Input::Message {
                from,
                msg,
                rtt: Some(ms(1)),
            },
        );
        let more = self.sched.handle_timeout(now + ms(1));
        self.record(&more);
        [out, more].concat()
    }

    /// The worker of `rank` placed now saves its `count`th checkpoint, of
    /// `generation`, held by `holder`.
    fn save(&mut self, rank: u32, count: u32, generation: u64, holder: u32) {
        let (node, incarnation) = self.placed[&rank];
        let checkpoint = Latest {
            seq: checkpoint_seq(incarnation, count),
            generation: Some(generation),
            size: 100,
            holders: vec![holder],
        };
        let out = self
            .sched
            .checkpoint_stored(JOB, &node, rank, checkpoint.clone())
            .expect("the placed worker's checkpoint is taken");
        assert_eq!(
            out,
            vec![Output::Job(JobEvent::Checkpointed {
                job: JOB,
                rank,
                checkpoint
            })],
            "a rollback job's checkpoint is logged"
        );
        self.record(&out);
    }

    /// The generation the fresh worker of `rank` would load.
    fn start_generation(&self, rank: u32) -> Option<u64> {
        let (node, _) = self.placed[&rank];
        self.sched
            .checkpoint_of(JOB, &node, rank)
            .expect("asked by the node the rank is placed on")
            .and_then(|l| l.generation)
    }

    fn rolled_back(out: &[Output<u32>]) -> Vec<(Option<u64>, Vec<u32>)> {
        out.iter()
            .filter_map(|o| match o {
                Output::Job(JobEvent::RolledBack {
                    generation,
                    stopped,
                    ..
                }) => Some((*generation, stopped.clone())),
                _ => None,
            })
            .collect()
    }
}

fn refused_for_rollback(out: &[Output<u32>]) -> Vec<u32> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send {
                to,
                msg:
                    Message::Refuse {
                        reason: RefuseReason::RolledBack,
                        ..
                    },
            } => Some(*to),
            _ => None,
        })
        .collect()
}

#[test]
fn a_lost_rank_rolls_every_rank_back_to_the_latest_common_generation() {
    // The home runs rank 0 itself; nodes 1 and 2 run ranks 1 and 2.
    let (mut home, _) = Home::new(1, 3);
    home.offer(ms(1), 1, 1);
    home.offer(ms(2), 2, 1);
    assert_eq!(home.sched.phase(JOB), Some(Phase::Running));
    assert_eq!(home.placed.len(), 3);
    let node_of = |home: &Home, rank| home.placed[&rank].0;
    let lost_node = node_of(&home, 2);
    let old: Vec<(u32, (u32, u32))> = home.placed.clone().into_iter().collect();
    // Every rank saved generation 1; ranks 0 and 1 also generation 2,
    // rank 2's is still on its way when its node dies.
    for rank in 0..3 {
        home.save(rank, 1, 1, 9);
    }
    home.save(0, 2, 2, 9);
    home.save(1, 2, 2, 9);
    let out = home.handle(ms(100), Input::PeerLost(lost_node));
    assert!(out.contains(&Output::Job(JobEvent::WorkersLost {
        job: JOB,
        node: lost_node,
        ranks: vec![2],
        reason: LostReason::Left,
    })));
    assert_eq!(Home::rolled_back(&out), vec![(Some(1), vec![0, 1])]);
    // The surviving workers stop: the home's own at once (looped back),
    // the other node's when it hears why.
    assert!(out.contains(&Output::StopWorkers {
        job: JOB,
        reason: RefuseReason::RolledBack,
    }));
    assert_eq!(refused_for_rollback(&out), vec![node_of(&home, 1)]);
    assert!(
        out.iter().any(|o| matches!(o, Output::Flood(_))),
        "the home floods for the whole job"
    );
    assert_eq!(home.sched.phase(JOB), Some(Phase::Running));
    // Every rank waits for a fresh worker: the home's own core, free
    // again, is offered but not granted alone (the ranks restart together).
    let table = home.sched.ranks(JOB).unwrap();
    assert_eq!(table.lost().collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(
        table.get(1).unwrap().outcome,
        Some(RankOutcome::Lost(LostReason::RolledBack))
    );
    assert!(!out.iter().any(|o| matches!(o, Output::StartWorkers { .. })));

    // The old workers' ends and checkpoints count for nothing now.
    let (node, incarnation) = home.placed[&1];
    let late = home.handle(
        ms(110),
        Input::RankEnded {
            digest: None,
            job: JOB,
            node,
            rank: 1,
            incarnation,
            end: WorkerEnd::Cancelled,
        },
    );
    assert!(
        !late.iter().any(|o| matches!(o, Output::Job(_))),
        "{late:?}"
    );
    let stale = Latest {
        seq: checkpoint_seq(incarnation, 3),
        generation: Some(3),
        size: 1,
        holders: vec![9],
    };
    assert_eq!(
        home.sched.checkpoint_stored(JOB, &node, 1, stale),
        Err(CheckpointRefused::NotPlaced { job: JOB, rank: 1 })
    );

    // Fresh workers for every rank, on the nodes that offer now (the
    // home's core is free again); every incarnation is new, so no channel
    // of an old worker is a channel of a new one.
    let before: Vec<u32> = old.iter().map(|(_, (_, i))| *i).collect();
    let first = home.offer(ms(200), 3, 1);
    assert!(
        !first.iter().any(|o| matches!(
            o,
            Output::Send {
                msg: Message::Grant { .. },
                ..
            }
        )),
        "not granted until all the ranks can be"
    );
    let all = home.offer(ms(201), 4, 1);
    // One step grants every rank, each grant with the whole placement.
    let placements: Vec<usize> = all
        .iter()
        .filter_map(|o| match o {
            Output::Send {
                msg: Message::Grant { placement, .. },
                ..
            } => Some(placement.len()),
            Output::StartWorkers { placement, .. } => Some(placement.len()),
            _ => None,
        })
        .collect();
    assert_eq!(placements, vec![3, 3, 3], "{all:?}");
    for (rank, (_, (_, old_incarnation))) in old.iter().enumerate() {
        let (_, incarnation) = home.placed[&(rank as u32)];
        assert!(
            incarnation > *old_incarnation && !before.contains(&incarnation),
            "rank {rank}: incarnation {incarnation} after {before:?}"
        );
        assert_eq!(home.start_generation(rank as u32), Some(1), "rank {rank}");
    }
    let nodes: std::collections::BTreeSet<u32> = home.placed.values().map(|(n, _)| *n).collect();
    assert!(!nodes.contains(&lost_node));

    // And the job completes once every fresh worker exits with status 0.
    let mut last = Vec::new();
    for (rank, (node, incarnation)) in home.placed.clone() {
        last = home.handle(
            ms(300),
            Input::RankEnded {
                digest: None,
                job: JOB,
                node,
                rank,
                incarnation,
                end: WorkerEnd::Exited(0),
            },
        );
    }
    assert!(last.contains(&Output::Job(JobEvent::Ended {
        job: JOB,
        phase: Phase::Completed,
        reason: EndReason::Completed { workers: 3 },
    })));
}

#[test]
fn with_no_common_generation_every_rank_starts_over() {
    let (mut home, _) = Home::new(0, 3);
    home.offer(ms(1), 1, 1);
    home.offer(ms(2), 2, 1);
    home.offer(ms(3), 3, 1);
    // Rank 2 never saved: there is no generation all ranks hold.
    home.save(0, 1, 1, 9);
    home.save(1, 1, 1, 9);
    let lost = home.placed[&0].0;
    let out = home.handle(ms(100), Input::PeerLost(lost));
    assert_eq!(Home::rolled_back(&out), vec![(None, vec![1, 2])]);
    home.offer(ms(200), 4, 3);
    for rank in 0..3 {
        assert_eq!(home.placed[&rank].0, 4);
        assert_eq!(home.start_generation(rank), None, "rank {rank} starts over");
    }
}

/// The node lost also held the only copy of a rank's newest checkpoint:
/// the job rolls back to the generation before, which live nodes hold,
/// rather than to one no worker could load.
#[test]
fn a_generation_held_only_by_the_lost_node_is_not_rolled_back_to() {
    let (mut home, _) = Home::new(0, 3);
    home.offer(ms(1), 1, 1);
    home.offer(ms(2), 2, 1);
    home.offer(ms(3), 3, 1);
    let lost = home.placed[&2].0;
    for rank in 0..3 {
        home.save(rank, 1, 1, 9);
    }
    // Generation 2 of rank 0 is held by the node that runs rank 2 alone.
    home.save(0, 2, 2, lost);
    home.save(1, 2, 2, 9);
    home.save(2, 2, 2, 9);
    let out = home.handle(ms(100), Input::PeerLost(lost));
    assert_eq!(Home::rolled_back(&out), vec![(Some(1), vec![0, 1])]);
    home.offer(ms(200), 4, 3);
    for rank in 0..3 {
        assert_eq!(home.start_generation(rank), Some(1), "rank {rank}");
    }
}

#[test]
fn a_rank_lost_during_a_rollback_rolls_the_job_back_again() {
    let (mut home, _) = Home::new(0, 3);
    home.offer(ms(1), 1, 1);
    home.offer(ms(2), 2, 1);
    home.offer(ms(3), 3, 1);
    for rank in 0..3 {
        home.save(rank, 1, 1, 9);
    }
    let out = home.handle(ms(100), Input::PeerLost(home.placed[&2].0));
    assert_eq!(Home::rolled_back(&out), vec![(Some(1), vec![0, 1])]);
    // Ranks 0 and 1 get fresh workers on node 4, rank 2 on node 5; rank
    // 0 gets as far as generation 2 again.
    home.offer(ms(200), 4, 2);
    home.offer(ms(201), 5, 1);
    assert_eq!(home.placed[&0].0, 4);
    assert_eq!(home.placed[&1].0, 4);
    assert_eq!(home.placed[&2].0, 5);
    home.save(0, 1, 2, 9);
    // Node 4 is lost: back to generation 1 again (rank 1 never held 2),
    // and rank 2's fresh worker stops too.
    let out = home.handle(ms(300), Input::PeerLost(4));
    assert_eq!(Home::rolled_back(&out), vec![(Some(1), vec![2])]);
    assert_eq!(refused_for_rollback(&out), vec![5]);
    home.offer(ms(400), 6, 3);
    for rank in 0..3 {
        assert_eq!(home.placed[&rank].0, 6);
        assert_eq!(home.start_generation(rank), Some(1), "rank {rank}");
    }
}

#[test]
fn a_home_that_takes_the_job_over_rolls_back_from_the_logged_checkpoints() {
    let (mut home, _) = Home::new(0, 2);
    home.offer(ms(1), 1, 1);
    home.offer(ms(2), 2, 1);
    for rank in 0..2 {
        home.save(rank, 1, 1, 9);
        home.save(rank, 2, 2, 9);
    }
    home.save(0, 3, 3, 9);
    let state = JobState::replay(&home.log).unwrap();
    assert_eq!(state.logged_checkpoints, 5);
    assert_eq!(state.checkpoints.common_generation(JOB.0, 0..2), Some(2));
    // Node 1 (rank 0's) takes the job over, then node 2 dies.
    let mut successor = Scheduler::new(1, config(1));
    successor.adopt(ms(500), JOB, 1, state);
    let out = successor.handle(ms(600), Input::PeerLost(2));
    let rolled: Vec<Option<u64>> = out
        .iter()
        .filter_map(|o| match o {
            Output::Job(JobEvent::RolledBack { generation, .. }) => Some(*generation),
            _ => None,
        })
        .collect();
    assert_eq!(rolled, vec![Some(2)]);
    assert!(out.iter().any(|o| matches!(o, Output::Flood(_))));
    // The log with the rollback rebuilds the same: both ranks wait for
    // fresh workers, which start from generation 2.
    let mut log = home.log.clone();
    log.extend(out.iter().filter_map(|o| match o {
        Output::Job(event) => JobEntry::of(event),
        _ => None,
    }));
    let state = JobState::replay(&log).unwrap();
    assert_eq!(state.ranks.lost().collect::<Vec<_>>(), vec![0, 1]);
    successor.handle(
        ms(700),
        Input::Message {
            from: 3,
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
    );
    let state = JobState::replay(&log).unwrap();
    let placed = successor.placement(JOB).unwrap();
    assert_eq!(
        placed.values().map(Vec::len).sum::<usize>(),
        2,
        "{placed:?}"
    );
    for rank in 0..2 {
        assert_eq!(
            state
                .checkpoints
                .latest(JOB.0, rank)
                .and_then(|l| l.generation),
            Some(2)
        );
        let node = successor.ranks(JOB).unwrap().get(rank).unwrap().node;
        assert_eq!(
            successor
                .checkpoint_of(JOB, &node, rank)
                .unwrap()
                .and_then(|l| l.generation),
            Some(2)
        );
    }
    // An old home that steps down forgets the job's checkpoints.
    assert!(home.sched.step_down(JOB, 1));
    assert!(home.sched.checkpoints().jobs().is_empty());
}

#[test]
fn a_job_that_replaces_or_fails_never_rolls_back_and_logs_no_checkpoint() {
    for policy in [LostPolicy::Replace, LostPolicy::Fail] {
        let mut sched = Scheduler::new(0, config(0));
        let spec = JobSpec {
            runs: 1,
            on_worker_lost: policy,
            ..spec(2)
        };
        sched.handle(
            ms(0),
            Input::Submit {
                job: JOB,
                spec: sched.admit(spec).unwrap(),
                owner: None,
            },
        );
        let mut granted = Vec::new();
        for node in [1, 2] {
            let msg = Message::Offer {
                hold: HoldId(0),
                job: JOB,
                workers: 1,
                distance: ms(1),
                residue: Resources::ZERO,
                machine: Machine::default(),
            };
            let out = sched.handle(
                ms(u64::from(node)),
                Input::Message {
                    from: node,
                    msg,
                    rtt: Some(ms(1)),
                },
            );
            granted.extend(out.into_iter().filter_map(|o| match o {
                Output::Send {
                    to,
                    msg: Message::Grant { incarnation, .. },
                } => Some((to, incarnation)),
                _ => None,
            }));
        }
        assert_eq!(granted.len(), 2);
        let (node, incarnation) = granted[0];
        let rank = sched.placement(JOB).unwrap()[&node][0];
        let checkpoint = Latest {
            seq: checkpoint_seq(incarnation, 1),
            generation: Some(1),
            size: 1,
            holders: vec![9],
        };
        assert_eq!(
            sched.checkpoint_stored(JOB, &node, rank, checkpoint),
            Ok(vec![]),
            "{policy:?}: indexed, not logged"
        );
        let out = sched.handle(ms(100), Input::PeerLost(node));
        assert!(
            !out.iter()
                .any(|o| matches!(o, Output::Job(JobEvent::RolledBack { .. }))),
            "{policy:?}"
        );
    }
}

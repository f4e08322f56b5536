//! A job changing home: the home's log rebuilds its rank table exactly
//! (at every step of random runs), a successor adopts the job and finishes
//! it, an old home steps down without a word, and the nodes that run ranks
//! follow the job to its new home.

use std::time::Duration;

use zorilla_core::advert::{HoldId, JobId, Message, Phase, RefuseReason, Strategy, WorkerCount};
use zorilla_core::node::{
    EndReason, Input, JobEntry, JobEvent, JobSpec, JobState, LostPolicy, Output, Rank, Scheduler,
    SchedulerConfig, WorkerEnd,
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

fn spec(min: u32, max: u32, lost: LostPolicy) -> JobSpec {
    JobSpec {
        runs: 1,
        per_worker: Resources::new(1, 100, 0),
        workers: WorkerCount { min, max },
        strategy: Strategy::Concentrate,
        lifetime: Duration::from_secs(60),
        on_worker_lost: lost,
        kind: zorilla_core::advert::WorkKind::Wasm,
        priority: 0,
        tasks: None,
    }
}

/// The end of a job that completed with `workers` workers.
fn completed_with(workers: u32) -> Output<u32> {
    Output::Job(JobEvent::Ended {
        job: JOB,
        phase: Phase::Completed,
        reason: EndReason::Completed { workers },
    })
}

/// A home that logs what it decides, as a primary does.
struct Logged {
    sched: Scheduler<u32>,
    log: Vec<JobEntry<u32>>,
}

impl Logged {
    fn submit(id: u32, now: Duration, spec: JobSpec) -> (Self, Vec<Output<u32>>) {
        let mut home = Logged {
            sched: Scheduler::new(id, config(0)),
            log: vec![JobEntry::Submitted {
                spec: spec.clone(),
                owner: None,
            }],
        };
        let out = home.handle(
            now,
            Input::Submit {
                job: JOB,
                spec: home.sched.admit(spec).unwrap(),
                owner: None,
            },
        );
        (home, out)
    }

    fn handle(&mut self, now: Duration, input: Input<u32>) -> Vec<Output<u32>> {
        let out = self.sched.handle(now, input);
        self.record(&out);
        out
    }

    fn record(&mut self, out: &[Output<u32>]) {
        for o in out {
            if let Output::Job(event) = o {
                self.log.extend(JobEntry::of(event));
            }
        }
    }

    fn offer(&mut self, now: Duration, from: u32, workers: u32) -> Vec<Output<u32>> {
        self.handle(
            now,
            Input::Message {
                from,
                msg: Message::Offer {
                    hold: HoldId(0),
                    job: JOB,
                    workers,
                    distance: ms(1),
                    residue: Resources::ZERO,
                    machine: Machine::default(),
                },
                rtt: Some(ms(1)),
            },
        )
    }

    /// The log's state equals the home's own, rank for rank.
    fn assert_replays(&self) {
        let state = JobState::replay(&self.log).expect("the log starts with the spec");
        let table = self.sched.ranks(JOB).expect("the home knows the job");
        let ours: Vec<(u32, Rank<u32>)> = state.ranks.iter().map(|(r, x)| (r, x.clone())).collect();
        let home: Vec<(u32, Rank<u32>)> = table.iter().map(|(r, x)| (r, x.clone())).collect();
        assert_eq!(ours, home, "ranks replayed from the log");
        assert_eq!(
            state.ranks.lost().collect::<Vec<_>>(),
            table.lost().collect::<Vec<_>>(),
            "lost ranks replayed from the log"
        );
        assert_eq!(Some(state.phase), self.sched.phase(JOB), "phase replayed");
    }
}

fn grants_to(out: &[Output<u32>]) -> Vec<(u32, Vec<u32>, u32)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send {
                to,
                msg: Message::Grant {
                    ranks, incarnation, ..
                },
            } => Some((*to, ranks.clone(), *incarnation)),
            _ => None,
        })
        .collect()
}

fn placements_to(out: &[Output<u32>]) -> Vec<u32> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send {
                to,
                msg: Message::Placement { .. },
            } => Some(*to),
            _ => None,
        })
        .collect()
}

/// A small xorshift, so that the random runs are the same every time.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn the_log_rebuilds_the_rank_table_at_every_step_of_random_runs() {
    // How often each kind of entry came up, so that the runs are known to
    // cover grants, losses, ends and the job's end.
    let mut seen = std::collections::BTreeMap::<&str, u32>::new();
    for seed in 1..=200u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let max = 1 + rng.below(6) as u32;
        let min = 1 + rng.below(u64::from(max)) as u32;
        let policy = match rng.below(3) {
            0 => LostPolicy::Fail,
            1 => LostPolicy::Replace,
            _ => LostPolicy::Rollback,
        };
        let mut now = ms(0);
        let (mut home, _) = Logged::submit(0, now, spec(min, max, policy));
        // (node, rank, incarnation) of the workers the home granted.
        let mut running: Vec<(u32, u32, u32)> = Vec::new();
        for _ in 0..40 {
            now += ms(1 + rng.below(50));
            let out = match rng.below(5) {
                0 | 1 => {
                    let node = 1 + rng.below(8) as u32;
                    let out = home.offer(now, node, 1 + rng.below(3) as u32);
                    let out2 = home.handle(
                        now + ms(500),
                        Input::Message {
                            from: node,
                            msg: Message::Decline {
                                job: JOB,
                                reason: zorilla_core::advert::DeclineReason::Busy,
                            },
                            rtt: None,
                        },
                    );
                    [out, out2].concat()
                }
                2 if !running.is_empty() => {
                    let (node, rank, incarnation) =
                        running.remove(rng.below(running.len() as u64) as usize);
                    let end = match rng.below(6) {
                        0 => WorkerEnd::Exited(3),
                        1 => WorkerEnd::Cancelled,
                        _ => WorkerEnd::Exited(0),
                    };
                    home.handle(
                        now,
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
                3 => home.handle(now, Input::PeerLost(1 + rng.below(8) as u32)),
                _ => {
                    now += ms(200);
                    let out = home.sched.handle_timeout(now);
                    home.record(&out);
                    out
                }
            };
            for (node, ranks, incarnation) in grants_to(&out) {
                running.retain(|(_, r, _)| !ranks.contains(r));
                running.extend(ranks.into_iter().map(|r| (node, r, incarnation)));
            }
            home.assert_replays();
        }
        for entry in &home.log {
            let kind = match entry {
                JobEntry::Event(JobEvent::Granted { replaced, .. }) if !replaced.is_empty() => {
                    "replacement"
                }
                JobEntry::Event(JobEvent::Granted { .. }) => "grant",
                JobEntry::Event(JobEvent::WorkersLost { .. }) => "lost",
                JobEntry::Event(JobEvent::RankEnded { .. }) => "rank ended",
                JobEntry::Event(JobEvent::RolledBack { .. }) => "rolled back",
                JobEntry::Event(JobEvent::Ended { .. }) => "ended",
                _ => "other",
            };
            *seen.entry(kind).or_default() += 1;
        }
    }
    for kind in [
        "replacement",
        "grant",
        "lost",
        "rank ended",
        "rolled back",
        "ended",
    ] {
        assert!(
            seen.get(kind).copied().unwrap_or(0) >= 10,
            "{kind}: {seen:?}"
        );
    }
}

#[test]
fn a_successor_adopts_a_running_job_tells_its_nodes_and_finishes_it() {
    // Home 0; ranks 0 and 1 on nodes 1 and 2; node 1 takes over.
    let (mut old, _) = Logged::submit(0, ms(0), spec(2, 2, LostPolicy::Fail));
    old.offer(ms(1), 1, 1);
    let out = old.offer(ms(2), 2, 1);
    assert_eq!(grants_to(&out).len(), 2);
    let out = old.handle(
        ms(10),
        Input::RankEnded {
            digest: None,
            job: JOB,
            node: 2,
            rank: 1,
            incarnation: 1,
            end: WorkerEnd::Exited(0),
        },
    );
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Job(JobEvent::RankEnded { .. })))
    );

    // Node 1 runs rank 0 and takes over.
    let mut successor = Scheduler::new(1, config(4));
    let state = JobState::replay(&old.log).unwrap();
    assert_eq!(state.phase, Phase::Running);
    let out = successor.adopt(ms(2000), JOB, 1, state);
    assert_eq!(successor.phase(JOB), Some(Phase::Running));
    assert_eq!(successor.home_of(JOB), Some(&1));
    // Both nodes of the job hear that node 1 is their home now.
    let mut told = placements_to(&out);
    told.sort();
    assert!(told.contains(&2), "node 2 is told: {out:?}");
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::PlacementChanged { home: 1, .. })),
        "node 1's own ranks are told: {out:?}"
    );
    // A job with all its workers does not flood again.
    assert!(!out.iter().any(|o| matches!(o, Output::Flood(_))));
    // Rank 0 ends at the new home: the job completes there.
    let out = successor.handle(
        ms(2100),
        Input::RankEnded {
            digest: None,
            job: JOB,
            node: 1,
            rank: 0,
            incarnation: 0,
            end: WorkerEnd::Exited(0),
        },
    );
    assert!(out.contains(&completed_with(2)), "{out:?}");
    // Adopting again changes nothing.
    let state = JobState::replay(&old.log).unwrap();
    assert!(successor.adopt(ms(2200), JOB, 1, state).is_empty());
}

/// A home sends its grants once a copy holds their entries; the start
/// that follows them in its log may not have reached a copy when the home
/// dies. The successor still takes the job for running (a home is running
/// from its first grant), so that the ranks' ends complete it rather than
/// it expiring "before it got its workers" with every rank done (seen on
/// real nodes: `node/tests/failover.rs`,
/// `a_home_killed_right_after_its_grants_leaves_no_rank_to_start_again`).
#[test]
fn a_log_cut_after_the_grants_before_the_start_replays_a_running_job_that_completes() {
    let (mut old, _) = Logged::submit(0, ms(0), spec(2, 2, LostPolicy::Fail));
    old.offer(ms(1), 1, 1);
    let out = old.offer(ms(2), 2, 1);
    assert_eq!(grants_to(&out).len(), 2);
    let cut: Vec<JobEntry<u32>> = old
        .log
        .iter()
        .take_while(|e| {
            !matches!(
                e,
                JobEntry::Event(JobEvent::Started { .. } | JobEvent::Full { .. })
            )
        })
        .cloned()
        .collect();
    assert!(cut.len() < old.log.len(), "the home logged its start");
    let state = JobState::replay(&cut).unwrap();
    assert_eq!(state.phase, Phase::Running);
    let mut successor = Scheduler::new(1, config(4));
    successor.adopt(ms(1000), JOB, 1, state);
    assert_eq!(successor.phase(JOB), Some(Phase::Running));
    let mut out = Vec::new();
    for (node, rank) in [(1, 0), (2, 1)] {
        out = successor.handle(
            ms(1100),
            Input::RankEnded {
                digest: None,
                job: JOB,
                node,
                rank,
                incarnation: rank,
                end: WorkerEnd::Exited(0),
            },
        );
    }
    assert!(out.contains(&completed_with(2)), "{out:?}");
}

#[test]
fn a_successor_floods_for_lost_ranks_under_numbers_the_old_home_never_used() {
    let (mut old, _) = Logged::submit(0, ms(0), spec(1, 3, LostPolicy::Replace));
    old.offer(ms(1), 1, 1);
    old.offer(ms(2), 2, 1);
    old.offer(ms(3), 3, 1);
    old.handle(ms(10), Input::PeerLost(3));
    let state = JobState::replay(&old.log).unwrap();
    assert_eq!(state.ranks.lost().collect::<Vec<_>>(), vec![2]);
    let mut successor = Scheduler::new(1, config(0));
    let out = successor.adopt(ms(3000), JOB, 2, state);
    let flood = out
        .iter()
        .find_map(|o| match o {
            Output::Flood(advert) => Some(advert.clone()),
            _ => None,
        })
        .expect("the successor floods for the lost rank");
    assert_eq!(flood.home, 1);
    assert!(flood.flood.seq >= 2 << 20, "seq {}", flood.flood.seq);
    // An offer fills the lost rank again, with the next grant number.
    let out = successor.handle(
        ms(3001),
        Input::Message {
            from: 4,
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
    let out = [out, successor.handle_timeout(ms(3100))].concat();
    assert_eq!(grants_to(&out), vec![(4, vec![2], 3)], "{out:?}");
}

#[test]
fn an_ended_job_stays_ended_at_its_successor_and_its_nodes_hear_it_again() {
    let (mut old, _) = Logged::submit(0, ms(0), spec(1, 1, LostPolicy::Fail));
    old.offer(ms(1), 1, 1);
    old.handle(ms(5), Input::Cancel(JOB));
    let state = JobState::replay(&old.log).unwrap();
    assert_eq!(state.phase, Phase::Cancelled);
    let mut successor = Scheduler::new(2, config(0));
    let out = successor.adopt(ms(100), JOB, 1, state);
    assert_eq!(successor.phase(JOB), Some(Phase::Cancelled));
    assert_eq!(placements_to(&out), vec![1]);
    // A late offer hears the reason it ended with.
    let out = successor.handle(
        ms(101),
        Input::Message {
            from: 5,
            msg: Message::Offer {
                hold: HoldId(0),
                job: JOB,
                workers: 1,
                distance: ms(1),
                residue: Resources::ZERO,
                machine: Machine::default(),
            },
            rtt: None,
        },
    );
    assert_eq!(
        out,
        vec![Output::Send {
            to: 5,
            msg: Message::Refuse {
                hold: Some(HoldId(0)),
                job: JOB,
                reason: RefuseReason::Cancelled,
            },
        }]
    );
}

/// The copy holds every rank's successful end but not the job's end (the
/// home that decided it was gone before a copy held its decision, as on
/// real nodes under churn): the successor completes the job when it
/// adopts it, instead of waiting for ends that came already.
#[test]
fn a_successor_completes_a_job_whose_log_has_every_rank_ended() {
    let (mut old, _) = Logged::submit(0, ms(0), spec(2, 2, LostPolicy::Fail));
    old.offer(ms(1), 1, 1);
    old.offer(ms(2), 2, 1);
    for (node, rank, incarnation) in [(1, 0, 0), (2, 1, 1)] {
        old.handle(
            ms(10),
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
    // The copy got the ends, not the decision after them.
    let ended_at = old
        .log
        .iter()
        .position(|e| matches!(e, JobEntry::Event(JobEvent::Ended { .. })))
        .expect("the old home ended the job");
    let state = JobState::replay(&old.log[..ended_at]).unwrap();
    assert_eq!(state.phase, Phase::Running);
    let mut successor = Scheduler::new(1, config(0));
    let out = successor.adopt(ms(2000), JOB, 1, state);
    assert!(out.contains(&completed_with(2)), "{out:?}");
    assert_eq!(successor.phase(JOB), Some(Phase::Completed));
}

#[test]
fn an_old_home_steps_down_silently_and_its_own_ranks_follow_the_job() {
    // Home 0 runs rank 0 itself (it has cores), node 1 runs rank 1.
    let spec = spec(2, 2, LostPolicy::Fail);
    let mut home = Scheduler::new(0, config(1));
    home.handle(
        ms(0),
        Input::Submit {
            job: JOB,
            spec: home.admit(spec).unwrap(),
            owner: None,
        },
    );
    home.handle(
        ms(1),
        Input::Message {
            from: 1,
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
    home.handle_timeout(ms(500));
    assert_eq!(home.phase(JOB), Some(Phase::Running));
    assert!(
        home.running().any(|(job, _)| job == JOB),
        "the home runs a rank"
    );
    assert!(home.step_down(JOB, 1));
    assert_eq!(home.phase(JOB), None);
    assert_eq!(home.home_of(JOB), Some(&1), "its rank answers to node 1");
    assert!(home.home_jobs().next().is_none());
    assert!(!home.step_down(JOB, 1), "once");
    // Nothing is due for the job any more.
    let out = home.handle_timeout(ms(60_000));
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Job(_) | Output::Flood(_))),
        "{out:?}"
    );
}

#[test]
fn a_log_without_its_spec_replays_to_nothing() {
    let entries: Vec<JobEntry<u32>> = vec![JobEntry::Event(JobEvent::Started {
        job: JOB,
        workers: 1,
    })];
    assert!(JobState::replay(&entries).is_none());
    assert!(JobState::<u32>::replay(&[]).is_none());
}

/// A job that runs three times changes home between its runs' ends: the
/// log carries each end's digest, so the successor compares all three and
/// keeps the majority, naming the run that gave another result.
#[test]
fn a_successor_compares_a_replicated_jobs_runs_with_the_digests_its_log_kept() {
    use zorilla_core::runs::ResultDigest;
    let spec = JobSpec {
        runs: 3,
        ..spec(3, 3, LostPolicy::Fail)
    };
    let (mut old, _) = Logged::submit(0, ms(0), spec);
    for node in 1..=3 {
        old.offer(ms(node.into()), node, 1);
    }
    let end = |node: u32, digest: u8| Input::RankEnded {
        job: JOB,
        node,
        rank: node - 1,
        incarnation: node - 1,
        end: WorkerEnd::Exited(0),
        digest: Some(ResultDigest([digest; 32])),
    };
    old.handle(ms(100), end(1, 7));
    old.handle(ms(110), end(2, 9));
    old.assert_replays();
    let state = JobState::replay(&old.log).unwrap();
    assert_eq!(state.spec.runs, 3);
    let mut successor = Scheduler::new(3, config(0));
    successor.adopt(ms(2000), JOB, 1, state);
    let out = successor.handle(ms(2100), end(3, 7));
    let ended = out.iter().find_map(|o| match o {
        Output::Job(JobEvent::Ended { phase, reason, .. }) => Some((*phase, reason.clone())),
        _ => None,
    });
    assert_eq!(
        ended,
        Some((
            Phase::Completed,
            EndReason::RunsKept {
                runs: 3,
                kept: 0,
                agreed: 2,
                completed: 3,
                dissenters: vec![2],
                failed: None,
            }
        ))
    );
    assert!(successor.avoided().contains(&2));
}

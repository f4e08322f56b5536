//! Replicated execution at a job's home, as exact decisions: a job that
//! runs 2 or 3 times is granted on distinct nodes, its runs' digests are
//! compared once none runs, the majority is kept and the node that
//! dissented avoided; runs with no majority fail the job naming every
//! run's nodes; a lost run does not stop the job while another runs on.

use std::time::Duration;

use zorilla_core::advert::{HoldId, JobId, Message, RefuseReason, Strategy, WorkKind, WorkerCount};
use zorilla_core::node::{
    EndReason, Input, JobEvent, JobSpec, LostPolicy, Output, Phase, Scheduler, SchedulerConfig,
    WorkerEnd,
};
use zorilla_core::resources::{Machine, Resources};
use zorilla_core::runs::{ResultDigest, RunEnd};
use zorilla_core::schedule::ScheduleConfig;

const HOME: u32 = 0;

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn home() -> Scheduler<u32> {
    Scheduler::new(
        HOME,
        SchedulerConfig {
            resources: Resources::ZERO,
            schedule: ScheduleConfig::paper(),
            ..SchedulerConfig::default()
        },
    )
}

/// Submits `job` of `size` ranks per run, run `runs` times.
fn submit(home: &mut Scheduler<u32>, job: JobId, size: u32, runs: u8) {
    let spec = JobSpec {
        runs,
        per_worker: Resources::new(1, 100, 0),
        workers: WorkerCount::rigid(size * u32::from(runs)),
        strategy: Strategy::Concentrate,
        lifetime: Duration::from_secs(60),
        on_worker_lost: LostPolicy::Fail,
        kind: WorkKind::Wasm,
        priority: 0,
        tasks: None,
    };
    let spec = home.admit(spec).unwrap();
    home.handle(
        ms(0),
        Input::Submit {
            job,
            spec,
            owner: None,
        },
    );
}

fn offer(home: &mut Scheduler<u32>, job: JobId, from: u32, workers: u32) -> Vec<Output<u32>> {
    home.handle(
        ms(1),
        Input::Message {
            from,
            msg: Message::Offer {
                hold: HoldId(0),
                job,
                workers,
                distance: ms(from.into()),
                residue: Resources::ZERO,
                machine: Machine::default(),
            },
            rtt: Some(ms(from.into())),
        },
    )
}

fn end(
    home: &mut Scheduler<u32>,
    job: JobId,
    node: u32,
    rank: u32,
    code: i32,
    digest: u8,
) -> Vec<Output<u32>> {
    home.handle(
        ms(100),
        Input::RankEnded {
            job,
            node,
            rank,
            incarnation: home.ranks(job).unwrap().get(rank).unwrap().incarnation,
            end: WorkerEnd::Exited(code),
            digest: Some(ResultDigest([digest; 32])),
        },
    )
}

fn ended(out: &[Output<u32>]) -> Option<(Phase, EndReason<u32>)> {
    out.iter().find_map(|o| match o {
        Output::Job(JobEvent::Ended { phase, reason, .. }) => Some((*phase, reason.clone())),
        _ => None,
    })
}

/// Where each worker runs, by worker.
fn nodes(home: &Scheduler<u32>, job: JobId) -> Vec<u32> {
    home.ranks(job)
        .unwrap()
        .iter()
        .map(|(_, r)| r.node)
        .collect()
}

#[test]
fn three_runs_keep_the_majority_and_the_dissenter_is_avoided_by_later_jobs() {
    let job = JobId(1);
    let mut home = home();
    submit(&mut home, job, 1, 3);
    // Node 1 offers two workers: it still takes one run only.
    offer(&mut home, job, 1, 2);
    offer(&mut home, job, 2, 1);
    assert_eq!(
        home.phase(job),
        Some(Phase::Scheduling),
        "two nodes for three runs"
    );
    offer(&mut home, job, 3, 1);
    assert_eq!(home.phase(job), Some(Phase::Running));
    assert_eq!(nodes(&home, job), vec![1, 2, 3]);
    assert!(ended(&end(&mut home, job, 1, 0, 0, 7)).is_none());
    assert!(
        ended(&end(&mut home, job, 2, 1, 0, 9)).is_none(),
        "node 2 lies"
    );
    let out = end(&mut home, job, 3, 2, 0, 7);
    assert_eq!(
        ended(&out),
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
    let (_, reason) = ended(&out).unwrap();
    assert_eq!(
        reason.to_string(),
        "2 of 3 complete runs (of 3) gave the same results (run 0 kept); node 2 disagreed with \
         the majority and is avoided from now on"
    );
    assert!(home.avoided().contains(&2));
    // A later job (replicated or not) is not given to node 2.
    let later = JobId(2);
    submit(&mut home, later, 1, 1);
    let out = offer(&mut home, later, 2, 1);
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Send {
            to: 2,
            msg: Message::Refuse {
                reason: RefuseReason::NotChosen,
                ..
            }
        }
    )));
    assert_eq!(home.phase(later), Some(Phase::Scheduling));
    offer(&mut home, later, 4, 1);
    assert_eq!(nodes(&home, later), vec![4]);
}

#[test]
fn two_runs_that_differ_fail_the_job_naming_both_and_blame_nobody() {
    let job = JobId(1);
    let mut home = home();
    submit(&mut home, job, 1, 2);
    offer(&mut home, job, 1, 1);
    offer(&mut home, job, 2, 1);
    end(&mut home, job, 1, 0, 0, 7);
    let out = end(&mut home, job, 2, 1, 0, 9);
    assert_eq!(
        ended(&out),
        Some((
            Phase::Failed,
            EndReason::RunsDisagreed {
                runs: 2,
                ends: vec![
                    RunEnd {
                        run: 0,
                        nodes: vec![1],
                        digest: Some(ResultDigest([7; 32]))
                    },
                    RunEnd {
                        run: 1,
                        nodes: vec![2],
                        digest: Some(ResultDigest([9; 32]))
                    },
                ]
            }
        ))
    );
    assert!(home.avoided().is_empty());
}

#[test]
fn a_lost_run_does_not_stop_the_job_while_another_runs_on() {
    let job = JobId(1);
    let mut home = home();
    submit(&mut home, job, 1, 2);
    offer(&mut home, job, 1, 1);
    offer(&mut home, job, 2, 1);
    let out = home.handle(ms(50), Input::PeerLost(1));
    assert!(ended(&out).is_none(), "run 1 still runs");
    let out = end(&mut home, job, 2, 1, 0, 7);
    let (phase, reason) = ended(&out).unwrap();
    assert_eq!(phase, Phase::Completed);
    assert_eq!(
        reason.to_string(),
        "only run 1 of 2 completed (the others lost a worker): its results were kept unchecked"
    );
    // Both lost: the job fails.
    let job = JobId(2);
    submit(&mut home, job, 1, 2);
    offer(&mut home, job, 3, 1);
    offer(&mut home, job, 4, 1);
    home.handle(ms(50), Input::PeerLost(3));
    let out = home.handle(ms(60), Input::PeerLost(4));
    assert_eq!(
        ended(&out),
        Some((Phase::Failed, EndReason::RunsLost { runs: 2 }))
    );
}

#[test]
fn runs_of_several_ranks_use_distinct_nodes_and_a_loss_stops_its_run() {
    let job = JobId(1);
    let mut home = home();
    submit(&mut home, job, 2, 2);
    offer(&mut home, job, 1, 2);
    offer(&mut home, job, 2, 1);
    offer(&mut home, job, 3, 1);
    // Run 0 (workers 0 and 1) on node 1, run 1 (workers 2 and 3) on nodes 2 and 3.
    assert_eq!(nodes(&home, job), vec![1, 1, 2, 3]);
    // Node 2 is lost: worker 3 on node 3 is stopped with it.
    let out = home.handle(ms(50), Input::PeerLost(2));
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Send {
            to: 3,
            msg: Message::Refuse {
                hold: None,
                reason: RefuseReason::Failed,
                ..
            }
        }
    )));
    assert!(ended(&out).is_none());
    end(&mut home, job, 1, 0, 0, 5);
    let out = end(&mut home, job, 1, 1, 0, 6);
    let (phase, reason) = ended(&out).unwrap();
    assert_eq!(phase, Phase::Completed);
    assert!(matches!(
        reason,
        EndReason::RunsKept {
            kept: 0,
            completed: 1,
            ..
        }
    ));
}

#[test]
fn the_majority_of_failures_fails_the_job_with_the_kept_runs_failure() {
    let job = JobId(1);
    let mut home = home();
    submit(&mut home, job, 1, 3);
    for node in 1..=3 {
        offer(&mut home, job, node, 1);
    }
    end(&mut home, job, 1, 0, 3, 1);
    end(&mut home, job, 2, 1, 3, 1);
    let out = end(&mut home, job, 3, 2, 0, 2);
    let (phase, reason) = ended(&out).unwrap();
    assert_eq!(phase, Phase::Failed);
    assert!(
        reason
            .to_string()
            .ends_with("; rank 0 on 1: exited with status 3"),
        "{reason}"
    );
}

#[test]
fn a_replicated_job_must_be_rigid_and_of_equal_runs() {
    let home = home();
    let spec = |min, max, runs| JobSpec {
        runs,
        per_worker: Resources::new(1, 100, 0),
        workers: WorkerCount { min, max },
        strategy: Strategy::Concentrate,
        lifetime: Duration::from_secs(60),
        on_worker_lost: LostPolicy::Fail,
        kind: WorkKind::Wasm,
        priority: 0,
        tasks: None,
    };
    assert!(home.admit(spec(3, 3, 3)).is_ok());
    assert!(home.admit(spec(2, 4, 2)).is_err(), "malleable");
    assert!(home.admit(spec(3, 3, 2)).is_err(), "3 workers in 2 runs");
    let err = home.admit(spec(4, 4, 4)).unwrap_err();
    assert_eq!(err.to_string(), "runs is 4, but must be from 1 to 3");
    assert!(home.admit(spec(1, 1, 0)).is_err());
}

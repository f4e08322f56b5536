//! Job arrays at their home: task indices handed out as nodes offer, a
//! record only for the tasks that run, retries elsewhere, losses run
//! again, and the array's end.

use super::*;
use zorilla_core::node::{JobEntry, JobState, SpecError, TaskArray, TaskCounts};

fn array(count: u32, max_running: u32, retries: u8) -> JobSpec {
    let tasks = TaskArray {
        count,
        max_running,
        retries,
        spot_checks: 0,
    };
    JobSpec {
        runs: 1,
        tasks: Some(tasks),
        ..spec(tasks.workers())
    }
}

fn submit_array(node: &mut Scheduler<u32>, spec: JobSpec) -> Vec<Output<u32>> {
    node.handle(
        ms(0),
        Input::Submit {
            owner: None,
            job: JOB,
            spec: node.admit(spec).unwrap(),
        },
    )
}

fn task_ended(
    node: &mut Scheduler<u32>,
    now: Duration,
    from: u32,
    task: u32,
    incarnation: u32,
    end: WorkerEnd,
) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::RankEnded {
            digest: None,
            job: JOB,
            node: from,
            rank: task,
            incarnation,
            end,
        },
    )
}

fn counts(node: &Scheduler<u32>) -> TaskCounts {
    let table = node.ranks(JOB).unwrap();
    table.tasks().unwrap().counts(table.placed())
}

fn looks_for_cores(out: &[Output<u32>]) -> bool {
    out.iter().any(|o| {
        matches!(o, Output::Flood(a) if a.job == JOB)
            || matches!(o, Output::Send { msg: Message::Advert(a), .. } if a.job == JOB)
    })
}

fn ended(out: &[Output<u32>]) -> Option<(Phase, String)> {
    out.iter().find_map(|o| match o {
        Output::Job(JobEvent::Ended { phase, reason, .. }) => Some((*phase, reason.to_string())),
        _ => None,
    })
}

#[test]
fn an_array_hands_out_task_indices_as_cores_free_and_completes_when_every_task_is_done() {
    let mut node = home(ScheduleConfig::paper());
    let out = submit_array(&mut node, array(5, 2, 0));
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Job(JobEvent::Rejected { .. }))),
        "{out:?}"
    );
    assert!(looks_for_cores(&out), "{out:?}");
    // Node 10 offers both cores: tasks 0 and 1, and the array is full.
    let out = offer_from(&mut node, ms(1), 10, 2, 1);
    assert!(granted(&out, 10, vec![0, 1], 0), "{out:?}");
    assert!(out.contains(&Output::Job(JobEvent::Full { job: JOB })));
    assert_eq!(
        counts(&node),
        TaskCounts {
            count: 5,
            waiting: 3,
            running: 2,
            done: 0,
            failed: 0,
            checked: 0,
            checking: 0,
        }
    );
    // Task 0 is done: the home looks for a core again, and the next offer
    // gets task 2.
    let out = task_ended(&mut node, ms(10), 10, 0, 0, WorkerEnd::Exited(0));
    assert!(
        out.iter().any(|o| matches!(
            o,
            Output::Send { to: 10, msg: Message::Advert(a) } if a.job == JOB
        )),
        "the node whose task ended is asked at once: {out:?}"
    );
    let out = new_offer_from(&mut node, ms(11), 10, 1, 1, 1);
    assert!(granted(&out, 10, vec![2], 1), "{out:?}");
    // Only running tasks have records at the home.
    assert_eq!(
        node.ranks(JOB)
            .unwrap()
            .iter()
            .map(|(r, _)| r)
            .collect::<Vec<_>>(),
        vec![1, 2]
    );
    task_ended(&mut node, ms(20), 10, 1, 0, WorkerEnd::Exited(0));
    task_ended(&mut node, ms(20), 10, 2, 1, WorkerEnd::Exited(0));
    node.handle_timeout(ms(20));
    let out = new_offer_from(&mut node, ms(21), 11, 0, 2, 1);
    assert!(granted(&out, 11, vec![3, 4], 2), "{out:?}");
    task_ended(&mut node, ms(30), 11, 3, 2, WorkerEnd::Exited(0));
    assert_eq!(node.phase(JOB), Some(Phase::Running));
    let out = task_ended(&mut node, ms(30), 11, 4, 2, WorkerEnd::Exited(0));
    assert_eq!(
        ended(&out),
        Some((
            Phase::Completed,
            "all 5 tasks exited with status 0".to_string()
        ))
    );
    assert_eq!(node.ranks(JOB).unwrap().iter().count(), 0);
}

#[test]
fn a_failed_task_runs_again_on_another_node_and_the_array_fails_naming_it_after_its_retries() {
    let mut node = home(ScheduleConfig::paper());
    submit_array(&mut node, array(2, 1, 1));
    node.handle_timeout(ms(0));
    let out = offer_from(&mut node, ms(1), 10, 1, 1);
    assert!(granted(&out, 10, vec![0], 0));
    // Task 0 fails on node 10: it will run again, but not there first.
    task_ended(&mut node, ms(5), 10, 0, 0, WorkerEnd::Exited(3));
    assert_eq!(node.phase(JOB), Some(Phase::Running));
    assert_eq!(counts(&node).waiting, 2);
    node.handle_timeout(ms(5));
    let out = new_offer_from(&mut node, ms(6), 10, 1, 1, 1);
    assert!(
        granted(&out, 10, vec![1], 1),
        "node 10 gets the fresh task: {out:?}"
    );
    task_ended(&mut node, ms(7), 10, 1, 1, WorkerEnd::Exited(0));
    node.handle_timeout(ms(7));
    let out = offer_from(&mut node, ms(8), 11, 1, 1);
    assert!(
        granted(&out, 11, vec![0], 2),
        "node 11 retries task 0: {out:?}"
    );
    // Its second failure is one more than its retries.
    let out = task_ended(&mut node, ms(9), 11, 0, 2, WorkerEnd::Exited(3));
    let (phase, reason) = ended(&out).expect("the array ended");
    assert_eq!(phase, Phase::Failed);
    assert_eq!(
        reason,
        "1 of 2 tasks failed after their retries; the first, task 0 on 11: exited with status 3"
    );
    let table = node.ranks(JOB).unwrap();
    let failed: Vec<u32> = table.tasks().unwrap().failed().map(|(t, ..)| t).collect();
    assert_eq!(failed, vec![0]);
}

#[test]
fn a_task_lost_with_its_node_runs_again_without_counting_a_retry() {
    let mut node = home(ScheduleConfig::paper());
    // No retries: a loss is not a failure, so the task still runs again.
    submit_array(&mut node, array(1, 1, 0));
    node.handle_timeout(ms(0));
    let out = offer_from(&mut node, ms(1), 10, 1, 1);
    assert!(granted(&out, 10, vec![0], 0));
    let out = node.handle(ms(2), Input::PeerLost(10));
    assert!(out.contains(&Output::Job(JobEvent::WorkersLost {
        job: JOB,
        node: 10,
        ranks: vec![0],
        reason: LostReason::Left,
    })));
    assert_eq!(counts(&node).waiting, 1);
    node.handle_timeout(ms(2));
    let out = offer_from(&mut node, ms(3), 11, 1, 1);
    assert!(granted(&out, 11, vec![0], 1), "{out:?}");
    let out = task_ended(&mut node, ms(4), 11, 0, 1, WorkerEnd::Exited(0));
    assert_eq!(ended(&out).map(|(p, _)| p), Some(Phase::Completed));
}

#[test]
fn an_arrays_log_replays_to_the_same_progress() {
    let mut node = home(ScheduleConfig::paper());
    let spec = array(4, 2, 1);
    let mut log = vec![JobEntry::Submitted {
        spec: spec.clone(),
        owner: None,
    }];
    let mut keep = |out: Vec<Output<u32>>| {
        for o in out {
            if let Output::Job(event) = o
                && let Some(entry) = JobEntry::of(&event)
            {
                log.push(entry);
            }
        }
    };
    keep(submit_array(&mut node, spec));
    keep(node.handle_timeout(ms(0)));
    keep(offer_from(&mut node, ms(1), 10, 2, 1));
    keep(task_ended(&mut node, ms(2), 10, 0, 0, WorkerEnd::Exited(0)));
    keep(task_ended(&mut node, ms(2), 10, 1, 0, WorkerEnd::Exited(9)));
    keep(node.handle_timeout(ms(2)));
    keep(offer_from(&mut node, ms(3), 11, 2, 1));
    let state = JobState::replay(&log).expect("a log");
    let home = node.ranks(JOB).unwrap();
    assert_eq!(
        state.ranks.tasks().unwrap().counts(state.ranks.placed()),
        home.tasks().unwrap().counts(home.placed())
    );
    assert_eq!(state.ranks.tasks(), home.tasks());
    assert_eq!(
        state.ranks.iter().map(|(r, _)| r).collect::<Vec<_>>(),
        home.iter().map(|(r, _)| r).collect::<Vec<_>>()
    );
}

#[test]
fn an_array_spec_must_run_one_to_max_running_workers_and_cannot_roll_back() {
    let node = home(ScheduleConfig::paper());
    let mut wrong = array(10, 4, 0);
    wrong.workers = WorkerCount::rigid(4);
    assert_eq!(
        node.admit(wrong).unwrap_err(),
        SpecError::ArrayWorkers {
            max_running: 4,
            min: 4,
            max: 4
        }
    );
    let rollback = JobSpec {
        runs: 1,
        on_worker_lost: LostPolicy::Rollback,
        ..array(10, 4, 0)
    };
    assert_eq!(node.admit(rollback).unwrap_err(), SpecError::ArrayRollback);
    let too_many_at_once = array(3, 4, 0);
    assert!(
        node.admit(too_many_at_once)
            .unwrap_err()
            .to_string()
            .contains("max_running is 4, but must be from 1 to 3")
    );
    let too_many = array(zorilla_core::limits::MAX_TASKS + 1, 1, 0);
    assert!(
        node.admit(too_many)
            .unwrap_err()
            .to_string()
            .starts_with("tasks is")
    );
    let retries = array(10, 1, zorilla_core::limits::MAX_TASK_RETRIES + 1);
    assert!(
        node.admit(retries)
            .unwrap_err()
            .to_string()
            .starts_with("retries is")
    );
}

/// Four schedulers of 2 cores wired together (the home one of them),
/// messages and floods delivered at once, every task taking 50 ms: an
/// array of 80 tasks keeps the cores busy to its end, with no pause
/// waiting for the job's next flood (each scheduler is woken only when it
/// asks to be: an offer must be taken when it comes).
#[test]
fn an_array_over_four_nodes_keeps_their_cores_busy_to_its_last_task() {
    let mut nodes: BTreeMap<u32, Scheduler<u32>> = (0..4)
        .map(|id| {
            let config = SchedulerConfig {
                resources: Resources::new(2, 4096, 4096),
                ..SchedulerConfig::default()
            };
            (id, Scheduler::new(id, config))
        })
        .collect();
    // (when, node, task, incarnation): workers running, by end time.
    let mut ends: Vec<(Duration, u32, u32, u32)> = Vec::new();
    let mut queue: Vec<(u32, Output<u32>)> = Vec::new();
    let spec = nodes[&0].admit(array(80, 80, 0)).unwrap();
    let out = nodes.get_mut(&0).unwrap().handle(
        ms(0),
        Input::Submit {
            owner: None,
            job: JOB,
            spec,
        },
    );
    queue.extend(out.into_iter().map(|o| (0, o)));
    let mut now = ms(0);
    let mut idle_since: Option<Duration> = None;
    let mut longest_idle = Duration::ZERO;
    while now < Duration::from_secs(60) && nodes[&0].phase(JOB) == Some(Phase::Running)
        || now == ms(0)
    {
        deliver_all(&mut nodes, &mut queue, &mut ends, now);
        now += ms(5);
        // Workers that end now: their node's scheduler frees the core and
        // the home takes in the end.
        let (done, running): (Vec<_>, Vec<_>) = ends.into_iter().partition(|e| e.0 <= now);
        ends = running;
        for (_, node, task, incarnation) in done {
            let out = nodes.get_mut(&0).unwrap().handle(
                now,
                Input::RankEnded {
                    digest: None,
                    job: JOB,
                    node,
                    rank: task,
                    incarnation,
                    end: WorkerEnd::Exited(0),
                },
            );
            queue.extend(out.into_iter().map(|o| (0, o)));
            // The home's answer (a direct advert) reaches the node before
            // the node's own loop takes the end in, as it can on real
            // nodes (the end is reported to the home first).
            deliver_all(&mut nodes, &mut queue, &mut ends, now);
            let out = nodes.get_mut(&node).unwrap().handle(
                now,
                Input::WorkersEnded {
                    job: JOB,
                    ranks: vec![task],
                },
            );
            queue.extend(out.into_iter().map(|o| (node, o)));
        }
        // Each scheduler is woken when it asks to be, as a node's loop
        // does, not more often.
        for node in 0..4 {
            if nodes[&node].next_timeout().is_some_and(|at| at <= now) {
                let out = nodes.get_mut(&node).unwrap().handle_timeout(now);
                queue.extend(out.into_iter().map(|o| (node, o)));
            }
        }
        // No worker running while the array is not over: idle.
        if ends.is_empty() && queue.is_empty() && nodes[&0].phase(JOB) == Some(Phase::Running) {
            let since = *idle_since.get_or_insert(now);
            longest_idle = longest_idle.max(now - since);
        } else {
            idle_since = None;
        }
    }
    assert_eq!(nodes[&0].phase(JOB), Some(Phase::Completed), "at {now:?}");
    assert!(
        longest_idle <= ms(100),
        "the grid stood idle for {longest_idle:?} while tasks waited"
    );
    // 80 tasks of 50 ms on 8 cores: 0.5 s at best.
    assert!(now <= Duration::from_secs(2), "took {now:?}");
}

/// Delivers every output queued (and what that sends) at once; workers
/// started end 50 ms later.
fn deliver_all(
    nodes: &mut BTreeMap<u32, Scheduler<u32>>,
    queue: &mut Vec<(u32, Output<u32>)>,
    ends: &mut Vec<(Duration, u32, u32, u32)>,
    now: Duration,
) {
    while let Some((from, output)) = queue.pop() {
        let (to, input) = match output {
            Output::Send { to, msg } => (
                vec![to],
                Input::Message {
                    from,
                    msg,
                    rtt: Some(ms(1)),
                },
            ),
            Output::Flood(advert) => (
                (0..4).filter(|n| *n != from).collect(),
                Input::AdvertDelivered {
                    advert,
                    distance: ms(1),
                },
            ),
            Output::StartWorkers {
                ranks, incarnation, ..
            } => {
                for task in ranks {
                    ends.push((now + ms(50), from, task, incarnation));
                }
                continue;
            }
            _ => continue,
        };
        for node in to {
            let out = nodes.get_mut(&node).unwrap().handle(now, input.clone());
            queue.extend(out.into_iter().map(|o| (node, o)));
        }
    }
}

/// An array that ran all it could stops looking for cores; when a task
/// fails and runs again, its search starts afresh, and an offer that comes
/// then is granted once it settles (twice its RTT and a half), not at the
/// search's next flood.
#[test]
fn an_offer_before_a_fresh_searchs_first_flood_is_granted_without_waiting_for_one() {
    let mut node = home(ScheduleConfig::default());
    submit_array(&mut node, array(2, 1, 1));
    node.handle_timeout(ms(0));
    let out = offer_from(&mut node, ms(1), 10, 1, 5);
    let (out, _) = until_granted(&mut node, out, ms(1), 10, 0);
    assert!(out.contains(&Output::Job(JobEvent::Full { job: JOB })));
    // Task 0 fails: it runs again, and the search starts afresh.
    task_ended(&mut node, ms(100), 10, 0, 0, WorkerEnd::Exited(1));
    // Node 11 answers before any flood of the new search.
    let out = offer_from(&mut node, ms(101), 11, 1, 5);
    let (_, at) = until_granted(&mut node, out, ms(101), 11, 1);
    assert!(at <= ms(130), "granted only at {at:?}");
}

/// Steps `node` every 5 ms from `now` until it grants task 0 to `to` as
/// grant `incarnation` (within a second); the outputs of that step, and
/// when.
fn until_granted(
    node: &mut Scheduler<u32>,
    mut out: Vec<Output<u32>>,
    mut now: Duration,
    to: u32,
    incarnation: u32,
) -> (Vec<Output<u32>>, Duration) {
    let start = now;
    while !granted(&out, to, vec![0], incarnation) {
        now += ms(5);
        assert!(now < start + ms(1000), "not granted by {now:?}");
        out = node.handle_timeout(now);
    }
    (out, now)
}

/// Node `from` reports that task `task` (grant `incarnation`) exited with
/// status 0, its result digest all `digest` bytes.
fn task_gave(
    node: &mut Scheduler<u32>,
    now: Duration,
    from: u32,
    task: u32,
    incarnation: u32,
    digest: u8,
) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::RankEnded {
            digest: Some(zorilla_core::runs::ResultDigest([digest; 32])),
            job: JOB,
            node: from,
            rank: task,
            incarnation,
            end: WorkerEnd::Exited(0),
        },
    )
}

#[test]
fn a_spot_check_catches_a_liar_which_the_home_then_avoids_and_its_log_replays_the_same() {
    let mut node = home(ScheduleConfig::paper());
    let tasks = TaskArray {
        count: 2,
        max_running: 1,
        retries: 0,
        spot_checks: 100,
    };
    let spec = JobSpec {
        tasks: Some(tasks),
        ..spec(tasks.workers())
    };
    let mut log = vec![JobEntry::Submitted {
        spec: spec.clone(),
        owner: None,
    }];
    keep(&mut log, submit_array(&mut node, spec));
    // Node 10 lies about task 0; every end is picked for a check.
    let out = keep(&mut log, offer_from(&mut node, ms(1), 10, 1, 1));
    assert!(granted(&out, 10, vec![0], 0), "{out:?}");
    keep(&mut log, task_gave(&mut node, ms(10), 10, 0, 0, 66));
    assert_eq!(counts(&node).checking, 1);
    // Node 10 is not given its own task's check: the fresh task 1.
    let out = keep(&mut log, new_offer_from(&mut node, ms(11), 10, 1, 1, 1));
    assert!(granted(&out, 10, vec![1], 1), "{out:?}");
    keep(&mut log, task_gave(&mut node, ms(20), 10, 1, 1, 66));
    // Node 11 checks task 0 and differs; node 12 settles it.
    keep(&mut log, node.handle_timeout(ms(21)));
    let out = keep(&mut log, offer_from(&mut node, ms(22), 11, 1, 1));
    assert!(granted(&out, 11, vec![0], 2), "{out:?}");
    keep(&mut log, task_gave(&mut node, ms(30), 11, 0, 2, 7));
    keep(&mut log, node.handle_timeout(ms(31)));
    let out = keep(&mut log, offer_from(&mut node, ms(32), 12, 1, 1));
    assert!(granted(&out, 12, vec![0], 3), "{out:?}");
    keep(&mut log, task_gave(&mut node, ms(40), 12, 0, 3, 7));
    assert!(node.avoided().contains(&10), "the liar is avoided");
    let table = node.ranks(JOB).unwrap().tasks().unwrap();
    assert_eq!(table.caught().iter().copied().collect::<Vec<_>>(), vec![10]);
    // Task 0 settled; task 1 waits for its check, from node 11 or 12.
    let replayed = JobState::replay(&log).unwrap();
    assert_eq!(replayed.ranks.tasks(), node.ranks(JOB).unwrap().tasks());
    // The liar's offers are refused; node 11 checks task 1 and agrees
    // with itself only once node 12 agrees too.
    keep(&mut log, node.handle_timeout(ms(41)));
    let out = keep(&mut log, new_offer_from(&mut node, ms(42), 10, 2, 1, 1));
    assert!(!granted(&out, 10, vec![1], 4), "{out:?}");
    let out = keep(&mut log, new_offer_from(&mut node, ms(43), 11, 1, 1, 1));
    assert!(granted(&out, 11, vec![1], 4), "{out:?}");
    keep(&mut log, task_gave(&mut node, ms(50), 11, 1, 4, 8));
    keep(&mut log, node.handle_timeout(ms(51)));
    let out = keep(&mut log, new_offer_from(&mut node, ms(52), 12, 1, 1, 1));
    assert!(granted(&out, 12, vec![1], 5), "{out:?}");
    let out = keep(&mut log, task_gave(&mut node, ms(60), 12, 1, 5, 8));
    assert_eq!(
        ended(&out),
        Some((
            Phase::Completed,
            "all 2 tasks exited with status 0; 2 of them checked on another node; node 10 \
             gave results that two other nodes' runs disagreed with: its tasks ran again \
             elsewhere, and it is avoided from now on"
                .into()
        ))
    );
    let replayed = JobState::replay(&log).unwrap();
    assert_eq!(replayed.phase, Phase::Completed);
}

/// `out`, its job events added to `log` as a home logs them.
fn keep(log: &mut Vec<JobEntry<u32>>, out: Vec<Output<u32>>) -> Vec<Output<u32>> {
    for o in &out {
        if let Output::Job(event) = o {
            log.extend(JobEntry::of(event));
        }
    }
    out
}

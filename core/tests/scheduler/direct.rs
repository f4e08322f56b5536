//! Direct adverts: a home that flooded a ball before asks the nodes that
//! answered it straight away, one message each, instead of flooding the
//! ball again.

use super::*;

const SECOND: JobId = JobId(8);

/// A home whose job `JOB` (rigid 1) flooded the 1 ms ball: node 10
/// offered at 1 ms (and was granted), node 11 declined as busy at 1 ms.
fn home_that_flooded_once() -> Scheduler<u32> {
    home_that_flooded_once_with(ScheduleConfig::default())
}

/// [`home_that_flooded_once`] with `schedule`.
fn home_that_flooded_once_with(schedule: ScheduleConfig) -> Scheduler<u32> {
    let mut node = home(schedule);
    let out = submit(&mut node, ms(0), WorkerCount::rigid(1));
    assert!(
        matches!(&out[..], [Output::Flood(a)] if a.flood.latency_budget == Some(ms(1))),
        "{out:?}"
    );
    declines_busy_at_1_ms(&mut node, 11);
    offer_from(&mut node, ms(1), 10, 1, 1);
    node.handle_timeout(ms(20));
    assert_eq!(node.phase(JOB), Some(Phase::Running));
    node
}

/// Node `from`, 1 ms from the home, declines `JOB` as busy.
fn declines_busy_at_1_ms(node: &mut Scheduler<u32>, from: u32) {
    node.handle(
        ms(1),
        Input::Message {
            from,
            msg: Message::Decline {
                job: JOB,
                reason: DeclineReason::Busy,
            },
            rtt: Some(ms(1)),
        },
    );
}

fn submit_second(node: &mut Scheduler<u32>, now: Duration) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::Submit {
            owner: None,
            job: SECOND,
            spec: node.admit(spec(WorkerCount::rigid(1))).unwrap(),
        },
    )
}

/// The direct adverts among `out`: (to, job, ttl).
fn direct(out: &[Output<u32>]) -> Vec<(u32, JobId, u8)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send {
                to,
                msg: Message::Advert(a),
            } => Some((*to, a.job, a.flood.ttl)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_later_job_asks_the_nodes_an_earlier_flood_found_instead_of_flooding() {
    let mut node = home_that_flooded_once();
    let out = submit_second(&mut node, ms(100));
    assert!(
        !out.iter().any(|o| matches!(o, Output::Flood(_))),
        "the ball was flooded a moment ago: {out:?}"
    );
    assert_eq!(direct(&out), vec![(10, SECOND, 0), (11, SECOND, 0)]);
    // Its next step asks nobody twice; beyond the ball known, it floods.
    let at = node.next_timeout().unwrap();
    let out = node.handle_timeout(at);
    assert_eq!(direct(&out), vec![]);
    assert!(
        matches!(&out[..], [Output::Flood(a)] if a.flood.latency_budget == Some(ms(2))),
        "{out:?}"
    );
}

#[test]
fn a_node_whose_hold_timed_out_is_asked_again() {
    // `JOB` (rigid 2) floods the 1 ms ball (node 10 offers one core), then
    // the 2 ms ball (node 12 offers one): the home knows both balls.
    let mut node = home(ScheduleConfig::default());
    submit(&mut node, ms(0), WorkerCount::rigid(2));
    offer_from(&mut node, ms(1), 10, 1, 1);
    let at = node.next_timeout().unwrap();
    let out = node.handle_timeout(at);
    assert!(
        matches!(&out[..], [Output::Flood(a)] if a.flood.latency_budget == Some(ms(2))),
        "{out:?}"
    );
    offer_from(&mut node, at + ms(2), 12, 1, 2);
    node.handle_timeout(at + ms(50));
    assert_eq!(node.phase(JOB), Some(Phase::Running));

    let out = submit_second(&mut node, ms(200));
    assert_eq!(
        direct(&out),
        vec![(10, SECOND, 0)],
        "the 1 ms ball: {out:?}"
    );
    // Node 10's hold times out before the next step: it forgot the job,
    // so the 2 ms step asks it again with node 12.
    node.handle(
        ms(201),
        Input::Message {
            from: 10,
            msg: Message::Withdraw {
                job: SECOND,
                hold: HoldId(0),
                ranks: vec![],
            },
            rtt: None,
        },
    );
    let at = node.next_timeout().unwrap();
    let out = node.handle_timeout(at);
    assert_eq!(
        direct(&out),
        vec![(10, SECOND, 0), (12, SECOND, 0)],
        "{out:?}"
    );
}

/// A node asked for a waiting job (it declined as busy, and queued the
/// advert) is asked again once [`ASK_AGAIN_AFTER`] has passed, and not
/// before: its queue may have pushed the advert out (nothing tells the
/// home), and a job asked of nobody any more would wait for ever.
#[test]
fn a_node_asked_for_a_waiting_job_is_asked_again_after_a_while() {
    // Floods no wider than the 1 ms ball: every later step of a job is
    // direct adverts to the nodes the first found (as in a grid whose
    // floods reached the largest budget, renewed by the home's other jobs).
    let mut node = home_that_flooded_once_with(ScheduleConfig {
        max_budget: ms(1),
        max_radius: 1,
        ..ScheduleConfig::default()
    });
    // A job that may wait longer than the default minute.
    let waits = JobSpec {
        runs: 1,
        lifetime: ASK_AGAIN_AFTER * 10,
        ..spec(WorkerCount::rigid(1))
    };
    let out = node.handle(
        ms(100),
        Input::Submit {
            owner: None,
            job: SECOND,
            spec: node.admit(waits).unwrap(),
        },
    );
    assert_eq!(direct(&out), vec![(10, SECOND, 0), (11, SECOND, 0)]);
    let mut asked_again = None;
    let mut steps = 0;
    while asked_again.is_none() {
        let at = node.next_timeout().expect("the job still searches");
        assert!(at < ms(100) + ASK_AGAIN_AFTER * 3, "never asked again");
        steps += 1;
        assert!(steps < 1000, "a bounded number of steps");
        let out = node.handle_timeout(at);
        let asked: Vec<u32> = direct(&out)
            .into_iter()
            .filter(|(_, job, _)| *job == SECOND)
            .map(|(to, _, _)| to)
            .collect();
        if !asked.is_empty() {
            assert!(at >= ms(100) + ASK_AGAIN_AFTER, "asked again at {at:?}");
            assert_eq!(asked, vec![10, 11]);
            asked_again = Some(at);
        }
    }
}

#[test]
fn what_a_flood_found_is_used_for_a_while_only() {
    let mut node = home_that_flooded_once();
    let out = submit_second(&mut node, ms(20) + KNOWLEDGE_KEPT);
    assert!(
        matches!(&out[..], [Output::Flood(_)]),
        "nodes join and leave: the ball is flooded again: {out:?}"
    );
}

#[test]
fn a_member_takes_an_advert_straight_from_its_home_and_from_nobody_else() {
    let mut node = member(2);
    let from_other = node.handle(
        ms(0),
        Input::Message {
            from: 5,
            msg: Message::Advert(advert(WorkerCount::rigid(1))),
            rtt: Some(ms(1)),
        },
    );
    assert_eq!(from_other, vec![], "only the home advertises its job");
    let out = from_home(
        &mut node,
        ms(1),
        Message::Advert(advert(WorkerCount::rigid(1))),
    );
    assert!(
        matches!(
            &out[..],
            [Output::Send {
                to: HOME,
                msg: Message::Offer { workers: 1, .. }
            }]
        ),
        "{out:?}"
    );
}

/// A peer that makes jobs up and sends their adverts straight to a node
/// gets at most `DIRECT_ADVERTS_PER_SEC` of them taken per second.
#[test]
fn direct_adverts_from_one_home_are_taken_at_a_bounded_rate() {
    let mut node = member(4096);
    // Each batch advertises 200 jobs not advertised before.
    let answered = |node: &mut Scheduler<u32>, at: Duration| {
        let first = 1000 + at.as_millis() as u64 * 1000;
        (0..200u64)
            .filter(|&i| {
                let advert = Advert {
                    job: JobId(first + i),
                    ..advert(WorkerCount::rigid(1))
                };
                !from_home(node, at, Message::Advert(advert)).is_empty()
            })
            .count()
    };
    assert_eq!(answered(&mut node, ms(0)), DIRECT_ADVERTS_PER_SEC as usize);
    assert_eq!(answered(&mut node, ms(999)), 0);
    assert!(
        answered(&mut node, ms(1000)) > 0,
        "the next second takes more"
    );
}

/// A step that would send more than `MAX_DIRECT_PER_STEP` direct adverts
/// (each may cost a connection) asks the nearest that many, and the rest
/// of the ball once they have had time to answer; it does not flood.
#[test]
fn a_ball_of_many_known_nodes_is_asked_nearest_first_in_batches() {
    let mut node = home(ScheduleConfig::default());
    submit(&mut node, ms(0), WorkerCount::rigid(1));
    let us = Duration::from_micros;
    let known = 40u32;
    // Nodes 100.. declined, at 20, 40, ... 800 µs.
    for i in 0..known {
        node.handle(
            ms(1),
            Input::Message {
                from: 100 + i,
                msg: Message::Decline {
                    job: JOB,
                    reason: DeclineReason::Busy,
                },
                rtt: Some(us(20 * u64::from(i + 1))),
            },
        );
    }
    offer_from(&mut node, ms(1), 10, 1, 1);
    node.handle_timeout(ms(20));
    assert_eq!(node.phase(JOB), Some(Phase::Running));

    let out = submit_second(&mut node, ms(100));
    let batch = MAX_DIRECT_PER_STEP as u32;
    let first: Vec<u32> = direct(&out).iter().map(|d| d.0).collect();
    assert_eq!(first, (100..100 + batch).collect::<Vec<_>>(), "{out:?}");
    assert!(
        !out.iter().any(|o| matches!(o, Output::Flood(_))),
        "{out:?}"
    );

    // The batch's farthest is 640 µs: the rest goes after the floor.
    let at = node.next_timeout().expect("the search goes on");
    assert_eq!(at, ms(110));
    let out = node.handle_timeout(at);
    let mut rest: Vec<u32> = direct(&out).iter().map(|d| d.0).collect();
    rest.sort_unstable();
    let mut expected: Vec<u32> = (100 + batch..100 + known).collect();
    expected.insert(0, 10);
    assert_eq!(rest, expected, "{out:?}");
}

//! Offers a home refuses: held and late offers of a job cancelled, expired
//! or failed.

use super::*;

fn refusal(to: u32, reason: RefuseReason) -> Output<u32> {
    Output::Send {
        to,
        msg: Message::Refuse {
            hold: Some(HoldId(0)),
            job: JOB,
            reason,
        },
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
            owner: None,
            job: JOB,
            spec: node
                .admit(JobSpec {
                    runs: 1,
                    lifetime: ms(500),
                    ..spec(WorkerCount::rigid(3))
                })
                .unwrap(),
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
            digest: None,
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
    rank_exited(&mut node, ms(2), 10, 0);
    assert_eq!(node.phase(JOB), Some(Phase::Completed));
    assert_eq!(
        offer_from(&mut node, ms(3), 11, 1, 1),
        vec![refusal(11, RefuseReason::JobFull)]
    );
}

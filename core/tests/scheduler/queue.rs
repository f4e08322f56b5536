//! A busy member's queue of pending adverts: bounded, expiring, rescanned
//! oldest first.

use super::*;

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
                    hold: None,
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

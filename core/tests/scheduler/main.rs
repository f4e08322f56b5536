//! One scheduler at a time, fed inputs by hand: the exact outputs it gives.

use std::collections::BTreeMap;
use std::time::Duration;

use zorilla_core::advert::{
    Advert, Arch, DeclineReason, FloodHeader, HoldId, JobId, Message, Placed, RefuseReason,
    Strategy, WorkKind, WorkerCount,
};
use zorilla_core::allocation::SameDistance;
use zorilla_core::liveness::LostCause;
use zorilla_core::node::{
    ASK_AGAIN_AFTER, DIRECT_ADVERTS_PER_SEC, EndReason, Input, JobEvent, JobSpec, KNOWLEDGE_KEPT,
    LostPolicy, LostReason, MAX_DIRECT_PER_STEP, NativePolicy, Output, OwnerLimits, Phase,
    RankOutcome, ResizeError, Scheduler, SchedulerConfig, UserLimits, UserPolicy, WorkerEnd,
};
use zorilla_core::resources::{Machine, REFERENCE_SPEED, Resources};
use zorilla_core::schedule::ScheduleConfig;

mod arrays;
mod direct;
mod home;
mod member;
mod net;
mod queue;
mod refusals;

const HOME: u32 = 0;
const JOB: JobId = JobId(7);

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn member(cores: u32) -> Scheduler<u32> {
    Scheduler::new(
        1,
        SchedulerConfig {
            resources: Resources::new(cores, 4096, 4096),
            ..SchedulerConfig::default()
        },
    )
}

fn advert(workers: WorkerCount) -> Advert<u32> {
    Advert {
        job: JOB,
        home: HOME,
        per_worker: Resources::new(1, 100, 0),
        workers,
        strategy: Strategy::Concentrate,
        expires_in: Duration::from_secs(60),
        flood: FloodHeader {
            seq: 0,
            ttl: 1,
            latency_budget: None,
            path_rtt: ms(1),
        },
        owner: None,
        kind: WorkKind::Wasm,
        priority: 0,
        preemptible: false,
    }
}

fn spec(workers: WorkerCount) -> JobSpec {
    JobSpec {
        runs: 1,
        per_worker: Resources::new(1, 100, 0),
        workers,
        strategy: Strategy::Concentrate,
        lifetime: Duration::from_secs(60),
        on_worker_lost: LostPolicy::Fail,
        kind: WorkKind::Wasm,
        priority: 0,
        tasks: None,
    }
}

fn offer_of_hold(hold: u32, workers: u32) -> Message<u32> {
    Message::Offer {
        hold: HoldId(hold),
        job: JOB,
        workers,
        distance: ms(1),
        residue: Resources::ZERO,
        machine: Machine::default(),
    }
}

/// What a member of `cores` cores says of its machine with `busy` of them
/// busy (at the reference speed).
fn machine(cores: u32, busy: u32) -> Machine {
    Machine {
        cores,
        busy,
        speed: REFERENCE_SPEED,
        reach: zorilla_core::resources::Reachability::Unknown,
    }
}

fn deliver(node: &mut Scheduler<u32>, now: Duration, workers: WorkerCount) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::AdvertDelivered {
            advert: advert(workers),
            distance: ms(1),
        },
    )
}

/// A grant of `ranks` as the home sends it, with the placement it carries
/// (here: the ranks on node 1, as far as the member cares).
fn grant(job: JobId, ranks: Vec<u32>, incarnation: u32) -> Message<u32> {
    grant_of_hold(0, job, ranks, incarnation)
}

/// A grant of `ranks` from the member's hold number `hold`.
fn grant_of_hold(hold: u32, job: JobId, ranks: Vec<u32>, incarnation: u32) -> Message<u32> {
    let placement = placed_on(&ranks, 1, incarnation);
    Message::Grant {
        hold: HoldId(hold),
        job,
        ranks,
        incarnation,
        placement,
    }
}

fn placed_on(ranks: &[u32], node: u32, incarnation: u32) -> BTreeMap<u32, Placed<u32>> {
    ranks
        .iter()
        .map(|&rank| (rank, Placed { node, incarnation }))
        .collect()
}

/// Whether the home sent `to` a grant of `ranks` with `incarnation`, whose
/// placement places them there.
fn granted(out: &[Output<u32>], to: u32, ranks: Vec<u32>, incarnation: u32) -> bool {
    out.iter().any(|o| match o {
        Output::Send {
            to: t,
            msg:
                Message::Grant {
                    hold: _,
                    job: JOB,
                    ranks: r,
                    incarnation: i,
                    placement,
                },
        } => {
            *t == to
                && *r == ranks
                && *i == incarnation
                && ranks.iter().all(|rank| {
                    placement.get(rank)
                        == Some(&Placed {
                            node: to,
                            incarnation,
                        })
                })
        }
        _ => false,
    })
}

fn from_home(node: &mut Scheduler<u32>, now: Duration, msg: Message<u32>) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::Message {
            from: HOME,
            msg,
            rtt: None,
        },
    )
}

/// A home whose own machine offers no workers (so that every worker comes
/// from the offers the test makes up).
fn home(schedule: ScheduleConfig) -> Scheduler<u32> {
    Scheduler::new(
        HOME,
        SchedulerConfig {
            schedule,
            resources: Resources::ZERO,
            ..SchedulerConfig::default()
        },
    )
}

/// A home whose one-worker rigid job `JOB` was granted to node 10's
/// offer at 1 ms.
fn home_running_one_worker_on_10() -> Scheduler<u32> {
    let mut node = home(ScheduleConfig::paper());
    submit(&mut node, ms(0), WorkerCount::rigid(1));
    offer_from(&mut node, ms(1), 10, 1, 1);
    node
}

/// The client submits job `JOB` with `workers` to `node`.
fn submit(node: &mut Scheduler<u32>, now: Duration, workers: WorkerCount) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::Submit {
            owner: None,
            job: JOB,
            spec: node.admit(spec(workers)).unwrap(),
        },
    )
}

fn offer_from(
    node: &mut Scheduler<u32>,
    now: Duration,
    from: u32,
    workers: u32,
    rtt: u64,
) -> Vec<Output<u32>> {
    new_offer_from(node, now, from, 0, workers, rtt)
}

/// Node `from`'s offer of its hold number `hold` (after a grant of its
/// first, a new offer is another hold).
fn new_offer_from(
    node: &mut Scheduler<u32>,
    now: Duration,
    from: u32,
    hold: u32,
    workers: u32,
    rtt: u64,
) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::Message {
            from,
            msg: offer_of_hold(hold, workers),
            rtt: Some(ms(rtt)),
        },
    )
}

/// Node `from` reports that rank `rank` (incarnation 0) of `JOB` exited
/// with status 0.
fn rank_exited(node: &mut Scheduler<u32>, now: Duration, from: u32, rank: u32) -> Vec<Output<u32>> {
    node.handle(
        now,
        Input::RankEnded {
            digest: None,
            job: JOB,
            node: from,
            rank,
            incarnation: 0,
            end: WorkerEnd::Exited(0),
        },
    )
}

fn queued(node: &Scheduler<u32>) -> Vec<(u64, Duration)> {
    node.pending().map(|(a, at)| (a.job.0, at)).collect()
}

/// Job 99 (rigid 1, same home) is offered one of the member's cores.
fn other_job_takes_a_core(node: &mut Scheduler<u32>) {
    let other = Advert {
        job: JobId(99),
        ..advert(WorkerCount::rigid(1))
    };
    node.handle(
        ms(0),
        Input::AdvertDelivered {
            advert: other,
            distance: ms(1),
        },
    );
}

//! The invariants checked after every event, and that the checks can fail.

use super::*;

#[test]
fn invariants_hold_after_every_event_in_every_mode() {
    let scenario = small_grid(40, false);
    for mode in [Mode::Ours, Mode::Paper] {
        for seed in 1..=3 {
            assert!(run_checked(&scenario, mode, seed) > 1000);
        }
    }
    assert!(run_checked(&scenario, Mode::OursHop, 1) > 1000);
}

/// One job of `workers` submitted at node 0 at `at` on the small grid, with
/// the simulator stepped through the submission when it is at 0.
fn one_job(workers: WorkerCount, at: Duration) -> Sim {
    let plan = JobPlan {
        at,
        home: 0,
        spec: JobSpec {
            runs: 1,
            per_worker: Resources::new(1, 0, 0),
            workers,
            strategy: Strategy::Concentrate,
            lifetime: Duration::from_secs(60),
            on_worker_lost: LostPolicy::Fail,
            kind: zorilla_core::advert::WorkKind::Wasm,
            priority: 0,
            tasks: None,
        },
        duration: None,
    };
    let mut sim = Sim::new(&small_grid(0, false), Mode::Paper, 1, vec![plan]).unwrap();
    if at.is_zero() {
        assert!(sim.step(), "the submission");
        assert_eq!(sim.check_invariants(), Ok(()));
    }
    sim
}

const JOB: JobId = JobId(1);

fn granted(node: u32, ranks: Vec<u32>) -> Output<u32> {
    Output::Job(JobEvent::Granted {
        job: JOB,
        node,
        ranks,
        incarnation: 0,
        rtt: Duration::from_millis(1),
        replaced: vec![],
    })
}

fn started(workers: u32) -> Output<u32> {
    Output::Job(JobEvent::Started { job: JOB, workers })
}

fn violation(sim: &Sim) -> String {
    sim.check_invariants().expect_err("a violation is reported")
}

/// The checks of co-allocation can fail: a scheduler that started a gang
/// short, numbered it wrongly, or let a worker start early is caught.
#[test]
fn invariant_checks_catch_a_gang_started_short_misnumbered_or_early() {
    let mut sim = one_job(WorkerCount::rigid(4), Duration::ZERO);
    sim.inject(
        5,
        vec![Output::StartWorkers {
            job: JOB,
            home: 0,
            ranks: vec![0],
            incarnation: 0,
            placement: BTreeMap::new(),
        }],
    );
    let v = violation(&sim);
    assert!(
        v.contains("node 5 starts ranks [0] before the home granted the whole gang"),
        "{v}"
    );

    let mut sim = one_job(WorkerCount::rigid(4), Duration::ZERO);
    sim.inject(0, vec![granted(3, vec![0, 1, 2]), started(3)]);
    let v = violation(&sim);
    assert!(v.contains("rigid job of 4 started with 3 workers"), "{v}");

    let mut sim = one_job(WorkerCount::rigid(4), Duration::ZERO);
    sim.inject(
        0,
        vec![granted(3, vec![0, 1]), granted(4, vec![2, 5]), started(4)],
    );
    let v = violation(&sim);
    assert!(v.contains("ranks [0, 1, 2, 5] granted, not 0..4"), "{v}");

    let mut sim = one_job(WorkerCount::rigid(4), Duration::ZERO);
    sim.inject(0, vec![granted(3, vec![0, 1]), granted(4, vec![1, 2])]);
    let v = violation(&sim);
    assert!(v.contains("rank 1 granted again to node 4"), "{v}");

    // A job of two starts at once on its home's own two cores (ranks 0
    // and 1); another node starting rank 1 is caught.
    let mut sim = one_job(WorkerCount::rigid(2), Duration::ZERO);
    sim.inject(
        4,
        vec![Output::StartWorkers {
            job: JOB,
            home: 0,
            ranks: vec![1],
            incarnation: 0,
            placement: BTreeMap::new(),
        }],
    );
    let v = violation(&sim);
    assert!(
        v.contains("node 4 starts ranks [1] not granted to it"),
        "{v}"
    );

    // A malleable job of 2..4 starts on its home's two cores; a second
    // start with fewer than its min is caught, a grant of rank 2 elsewhere
    // and its start are fine.
    let mut sim = one_job(WorkerCount { min: 2, max: 4 }, Duration::ZERO);
    sim.inject(0, vec![started(1)]);
    let v = violation(&sim);
    assert!(
        v.contains("malleable job of 2..=4 started with 1 workers"),
        "{v}"
    );
    let mut sim = one_job(WorkerCount { min: 2, max: 4 }, Duration::ZERO);
    sim.inject(0, vec![granted(3, vec![2])]);
    sim.inject(
        3,
        vec![Output::StartWorkers {
            job: JOB,
            home: 0,
            ranks: vec![2],
            incarnation: 0,
            placement: BTreeMap::new(),
        }],
    );
    assert_eq!(sim.check_invariants(), Ok(()));
}

/// The check of holds can fail: a hold whose wake-up the driver lost is
/// caught once it outlives the hold timeout; the same hold with its
/// wake-up scheduled is withdrawn in time.
#[test]
fn invariant_checks_catch_a_hold_that_outlives_its_timeout() {
    for wake in [false, true] {
        // Nothing happens before the submission at 40 s.
        let mut sim = one_job(WorkerCount::rigid(1), Duration::from_secs(40));
        let advert = Advert {
            job: JobId(99),
            home: 1,
            per_worker: Resources::new(1, 0, 0),
            workers: WorkerCount::rigid(1),
            strategy: Strategy::Concentrate,
            expires_in: Duration::from_secs(600),
            flood: FloodHeader {
                seq: 0,
                ttl: 1,
                latency_budget: None,
                path_rtt: Duration::from_millis(1),
            },
            owner: None,
            kind: zorilla_core::advert::WorkKind::Wasm,
            priority: 0,
            preemptible: false,
        };
        let input = Input::AdvertDelivered {
            advert,
            distance: Duration::from_millis(1),
        };
        let out = sim.scheduler_mut(7).handle(Duration::ZERO, input);
        assert!(matches!(&out[..], [Output::Send { to: 1, .. }]), "{out:?}");
        if wake {
            // Executing the (now empty) outputs schedules the wake-up.
            sim.inject(7, Vec::new());
        }
        while sim.now() < Duration::from_secs(40) && sim.step() {}
        let check = sim.check_invariants();
        if wake {
            assert_eq!(check, Ok(()));
            assert_eq!(sim.scheduler_mut(7).holds().count(), 0);
        } else {
            let v = check.expect_err("the hold outlived its timeout");
            assert!(
                v.contains("node 7 holds 1 workers for 0000000000000063 since 0ns until 30s"),
                "{v}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random small grids and workloads: invariants after every event.
    #[test]
    fn random_small_grids_keep_the_invariants(
        seed in 0u64..1000,
        machines in (1u32..10, 1u32..10),
        cores in (1u32..4, 1u32..4),
        workers in (1u32..6, 6u32..14),
        spread in proptest::bool::ANY,
        paper in proptest::bool::ANY,
        malleable in proptest::option::of((0.2f64..=1.0, 0.1f64..=1.0)),
    ) {
        let mut scenario = small_grid(15, seed % 2 == 0);
        scenario.clusters[0].machines = machines.0;
        scenario.clusters[1].machines = machines.1;
        scenario.clusters[0].cores = cores.0;
        scenario.clusters[1].cores = cores.1;
        scenario.workload.workers = workers;
        scenario.workload.strategy = if spread { Strategy::Spread } else { Strategy::Concentrate };
        if let Some((share, min)) = malleable {
            scenario.workload.malleable = share;
            scenario.workload.malleable_min = min;
        }
        scenario.until_s = 60.0;
        let mode = if paper { Mode::Paper } else { Mode::Ours };
        let grid = scenario.grid(seed).unwrap();
        let mut sim = Sim::new(&scenario, mode, seed, plan_jobs(&scenario, &grid, seed)).unwrap();
        while sim.step() {
            let check = sim.check_invariants();
            prop_assert!(check.is_ok(), "at {:?}: {:?}", sim.now(), check);
        }
    }
}

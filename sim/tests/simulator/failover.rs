//! Failover (issue 16): every home job's state replicated on its copies,
//! homes that fail or are cut off and are taken over, with the failover
//! invariants checked after every event (at most one primary per epoch, no
//! output lost, no worker left running for a job that ended) and no job
//! lost by the end of the run.

use zorilla_sim::scenario::FailoverSetup;
use zorilla_sim::sim::{FailoverReport, STOP_BOUND, Takeover};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

const JOB: JobId = JobId(1);

/// The small grid without random churn: failures come from the test,
/// noticed by the peers after `detect_s` (or by the keepers' pings and the
/// replicas' lease first), and failed nodes stay down.
fn quiet_grid(detect_s: f64) -> Scenario {
    let mut scenario = small_grid(0, false);
    scenario.churn = Some(Churn {
        failures_per_s: 0.0,
        rejoin_after_s: 1000.0,
        detect_after_s: detect_s,
    });
    scenario.failover = Some(FailoverSetup::default());
    scenario.until_s = 120.0;
    scenario
}

/// One rigid job of `workers` whose workers run 20 s, submitted at node 0
/// at time zero; lost workers are replaced.
fn one_job(workers: u32) -> JobPlan {
    JobPlan {
        at: Duration::ZERO,
        home: 0,
        spec: JobSpec {
            runs: 1,
            per_worker: Resources::new(1, 0, 0),
            workers: WorkerCount::rigid(workers),
            strategy: Strategy::Concentrate,
            lifetime: Duration::from_secs(60),
            on_worker_lost: LostPolicy::Replace,
            kind: zorilla_core::advert::WorkKind::Wasm,
            priority: 0,
            tasks: None,
        },
        duration: Some(Duration::from_secs(20)),
    }
}

/// Steps `sim` until `t` (or the end of the run), checking every
/// invariant after every event.
fn run_to(sim: &mut Sim, t: Duration) {
    let mut steps = 0u64;
    while sim.now() < t {
        if !sim.step() {
            break;
        }
        steps += 1;
        assert!(steps < 5_000_000, "the run does not end");
        if let Err(v) = sim.check_invariants() {
            panic!("after {steps} events at {:?}: {v}", sim.now());
        }
    }
}

fn run_out(sim: &mut Sim) {
    run_to(sim, Duration::MAX);
    if let Err(v) = sim.check_jobs_ended() {
        panic!("{v}");
    }
}

fn report(sim: &Sim) -> FailoverReport {
    sim.failover_report().expect("the run replicates")
}

/// A home killed silently mid-job (its peers notice only after 5 s):
/// exactly one of its copies takes the job over when its lease runs out,
/// about 2 s after the death under the default timing, and the job
/// completes there, its lost ranks replaced.
#[test]
fn a_home_killed_mid_job_is_taken_over_by_one_copy_and_the_job_completes() {
    let mut sim = Sim::new(&quiet_grid(5.0), Mode::Ours, 1, vec![one_job(8)]).unwrap();
    let died = Duration::from_secs(5);
    sim.fail_at(0, died);
    // Events come every tick (50 ms): this stops before the death.
    run_to(&mut sim, died - Duration::from_millis(200));
    assert_eq!(sim.primary_of(JOB), Some(0));
    let copies: Vec<u32> = sim
        .replica_holders(JOB)
        .into_iter()
        .filter(|n| *n != 0)
        .collect();
    assert!(copies.len() >= 2, "copies {copies:?}");
    run_out(&mut sim);
    let r = report(&sim);
    let [
        Takeover {
            from,
            to,
            term,
            after,
            ..
        },
    ] = r.takeovers[..]
    else {
        panic!("one takeover: {:?}", r.takeovers);
    };
    assert_eq!((from, term), (0, 1));
    assert!(copies.contains(&to), "new home {to} is one of {copies:?}");
    let after = after.expect("the home's death is known");
    eprintln!("takeover after {after:?}");
    // The lease (1.5 s) runs out between 1.1 and 1.5 s after the death
    // (a heartbeat every 0.4 s), then the election (0.3 s), on 50 ms ticks.
    assert!(
        after >= Duration::from_millis(1400) && after <= Duration::from_millis(2100),
        "took over after {after:?}"
    );
    // (The new home forgets the job's log once every copy holds its end:
    // the record names it.)
    let run = sim.run();
    let job = &run.jobs[0];
    assert_eq!(job.home, to);
    assert_eq!(job.home_moves, 1);
    assert!(
        matches!(&job.ended, Some((Phase::Completed, _))),
        "{:?}",
        job.ended
    );
    assert!(
        job.lost_ranks > 0 && job.replaced_ranks >= job.lost_ranks,
        "the home's own ranks lost and replaced: {} lost, {} replaced",
        job.lost_ranks,
        job.replaced_ranks
    );
    assert!(run.violations.is_empty(), "{:?}", run.violations);
}

/// A home cut off from every other node (a partition) is succeeded by one
/// of its copies; when the partition heals the old home hears of the newer
/// epoch, steps down and follows the new home: one primary, and the job
/// completes with every rank's end kept.
#[test]
fn a_partitioned_home_steps_down_when_the_partition_heals() {
    // No failure is detected: the partition is noticed by the lease alone.
    let mut sim = Sim::new(&quiet_grid(1000.0), Mode::Ours, 2, vec![one_job(8)]).unwrap();
    let cut = Duration::from_secs(5);
    let healed = Duration::from_secs(12);
    sim.isolate_at(0, cut);
    sim.heal_at(0, healed);
    run_to(&mut sim, healed - Duration::from_millis(1));
    let successor = sim.primary_of(JOB).expect("a primary");
    assert_ne!(successor, 0, "a copy took over while the home was cut off");
    run_to(&mut sim, healed + Duration::from_secs(3));
    assert_eq!(sim.primary_of(JOB), Some(successor));
    let r = report(&sim);
    assert_eq!(r.stepped_down, 1, "the old home stepped down");
    assert_eq!(r.takeovers.len(), 1, "{:?}", r.takeovers);
    assert_eq!(
        sim.scheduler(0).home_of(JOB),
        Some(&successor),
        "the old home's own ranks answer to the new home"
    );
    run_out(&mut sim);
    let r = report(&sim);
    assert_eq!(r.acknowledged, 8, "every rank's end acknowledged");
    let run = sim.run();
    assert!(
        matches!(&run.jobs[0].ended, Some((Phase::Completed, _))),
        "{:?}",
        run.jobs[0].ended
    );
    assert!(run.violations.is_empty(), "{:?}", run.violations);
}

/// The small grid with replication and `jobs` jobs, under churn for its
/// first minute: random machines fail (0.2 a second; noticed after 1 s,
/// back after 5 s) and, on top of them, the homes of running jobs (0.1 a
/// second). The run goes on until every job could end.
fn churning(jobs: u32, seed: u64) -> Sim {
    let mut scenario = quiet_grid(1.0);
    scenario.churn = Some(Churn {
        failures_per_s: 0.0,
        rejoin_after_s: 5.0,
        detect_after_s: 1.0,
    });
    scenario.workload.jobs = jobs;
    scenario.until_s = 200.0;
    let grid = scenario.grid(seed).unwrap();
    let plans = plan_jobs(&scenario, &grid, seed);
    let mut sim = Sim::new(&scenario, Mode::Ours, seed, plans).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xfa11);
    for (at, node) in poisson(&mut rng, 0.2, grid.len() as u32) {
        sim.fail_at(node, at);
    }
    for (at, _) in poisson(&mut rng, 0.1, 1) {
        sim.fail_a_home_at(at);
    }
    sim
}

/// Times of a Poisson process of `rate` a second over the first minute,
/// each with a random node of `nodes`.
fn poisson(rng: &mut ChaCha8Rng, rate: f64, nodes: u32) -> Vec<(Duration, u32)> {
    let mut times = Vec::new();
    let mut t = 0.0;
    loop {
        t += -rng.random_range(f64::EPSILON..1.0f64).ln() / rate;
        if t >= 60.0 {
            return times;
        }
        times.push((Duration::from_secs_f64(t), rng.random_range(0..nodes)));
    }
}

/// Takeover times, in milliseconds: median, 95th percentile, max.
fn percentiles(mut ms: Vec<u64>) -> (u64, u64, u64) {
    ms.sort_unstable();
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95), at(1.0))
}

/// Many seeds of churn in which homes fail: the failover invariants hold
/// after every event, no job is lost (every job ends but those all of whose
/// state holders failed at once, which no degree covers), the homes that
/// failed were taken over, and no worker ran on a grant its job's next home
/// did not know of.
#[test]
fn churn_with_home_failures_keeps_the_failover_invariants_over_many_seeds() {
    let (mut takeovers, mut times, mut orphaned) = (0, Vec::new(), 0);
    let (mut jobs, mut replica_messages, mut moved, mut completed) = (0, 0, 0, 0);
    let (mut redone, mut orphan_workers, mut stale) = (0, 0, 0);
    for seed in 1..=50 {
        let mut sim = churning(15, seed);
        let mut steps = 0u64;
        while sim.step() {
            steps += 1;
            assert!(steps < 5_000_000, "seed {seed}: the run does not end");
            if let Err(v) = sim.check_invariants() {
                if std::env::var("FAILOVER_DEBUG").is_ok() {
                    eprintln!("{:#?}", report(&sim).takeovers);
                }
                panic!("seed {seed}, after {steps} events: {v}");
            }
        }
        if let Err(v) = sim.check_jobs_ended() {
            panic!("seed {seed}: {v}");
        }
        let r = report(&sim);
        takeovers += r.takeovers.len();
        times.extend(
            r.takeovers
                .iter()
                .filter_map(|t| t.after)
                .map(|d| d.as_millis() as u64),
        );
        orphaned += r.orphaned.len();
        redone += r.ends_redone;
        orphan_workers += r.orphan_workers;
        stale += r.stale_events;
        replica_messages += r.replica_messages;
        let run = sim.run();
        jobs += run.jobs.len();
        moved += run.jobs.iter().filter(|j| j.home_moves > 0).count();
        completed += run
            .jobs
            .iter()
            .filter(|j| j.home_moves > 0 && matches!(j.ended, Some((Phase::Completed, _))))
            .count();
    }
    let (median, p95, max) = percentiles(times.clone());
    eprintln!(
        "{jobs} jobs, {moved} moved home ({completed} of them completed), {takeovers} \
         takeovers, {orphaned} orphaned; takeover after median {median} ms, 95th {p95} ms, \
         max {max} ms; {:.0} replica messages per job; {redone} ends redone, {orphan_workers} \
         orphan workers stopped, {stale} events of old primaries",
        replica_messages as f64 / jobs as f64
    );
    assert!(moved >= 50, "only {moved} jobs changed home");
    assert!(completed * 2 >= moved, "{completed} of {moved} completed");
    assert!(p95 <= 2500, "95th percentile {p95} ms");
    assert!(orphaned * 20 <= jobs, "{orphaned} of {jobs} jobs orphaned");
    // A grant goes out only once a copy holds it (the core's
    // `commit::Outbox`, as in the node): a new home knows every worker the
    // old one started, and stops none as a stranger's.
    assert_eq!(
        orphan_workers, 0,
        "workers ran on grants their job's next home never knew of"
    );
}

/// The checks can fail: a worker left running for a job that ended is
/// caught once the stop has had its time.
#[test]
fn the_failover_checks_catch_a_worker_left_running() {
    let mut sim = Sim::new(&quiet_grid(1.0), Mode::Ours, 1, vec![one_job(2)]).unwrap();
    // The job runs on its home's two cores; cancel it there and start a
    // stray worker of it elsewhere.
    run_to(&mut sim, Duration::from_secs(2));
    sim.input(0, Input::Cancel(JOB));
    sim.inject(
        5,
        vec![Output::StartWorkers {
            job: JOB,
            home: 0,
            ranks: vec![1],
            incarnation: 0,
            placement: BTreeMap::new(),
        }],
    );
    let ended = sim.now();
    while sim.now() <= ended + STOP_BOUND && sim.step() {}
    let v = sim.check_failover().expect_err("a stray worker is caught");
    assert!(
        v.contains("nodes [5] still run its workers") && v.contains("no worker left running"),
        "{v}"
    );
}

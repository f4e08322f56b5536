//! Workers on heterogeneous, shared machines: a worker's time is its work
//! over its machine's speed, stretched by the multi-core desktop grids
//! paper's contention model while it shares the machine (`sim::contention`).

use super::*;

/// One machine of 2 cores at twice the reference speed, contention on,
/// and jobs of one worker each: `(at s, work s, memory MiB)`.
fn one_machine(jobs: &[(f64, f64, u64)]) -> Vec<f64> {
    let scenario = scenario(
        r#"
name = "one-machine"
until_s = 100.0
[[clusters]]
site = "a"
machines = 1
cores = 2
memory_mib = 4096
speed = [2.0, 2.0]
[latency]
within_site_ms = 0.2
[workload]
jobs = 0
interval_s = 1.0
workers = [1, 1]
[contention]
"#,
    );
    let plans = jobs
        .iter()
        .map(|&(at, work, memory)| JobPlan {
            at: Duration::from_secs_f64(at),
            home: 0,
            spec: JobSpec {
                runs: 1,
                per_worker: Resources::new(1, memory, 0),
                workers: WorkerCount::rigid(1),
                strategy: Strategy::Concentrate,
                lifetime: Duration::from_secs(60),
                on_worker_lost: LostPolicy::Fail,
                kind: zorilla_core::advert::WorkKind::Wasm,
                priority: 0,
                tasks: None,
            },
            duration: Some(Duration::from_secs_f64(work)),
        })
        .collect();
    let report = Sim::new(&scenario, Mode::Ours, 1, plans).unwrap().run();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    report
        .jobs
        .iter()
        .map(|j| j.turnaround().expect("every job completes").as_secs_f64())
        .collect()
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() < 0.01
}

#[test]
fn workers_run_their_work_over_the_speed_slowed_down_while_they_share_the_machine() {
    // Alone: 10 s of work at speed 2.
    let alone = one_machine(&[(0.0, 10.0, 0)]);
    assert!(close(alone[0], 5.0), "{alone:?}");
    // Two at once: each 10% slower all along (the paper's p).
    let pair = one_machine(&[(0.0, 10.0, 0), (0.0, 10.0, 0)]);
    assert!(pair.iter().all(|&t| close(t, 5.5)), "{pair:?}");
    // The second ends after 2 s of work (1.1 s): the first does 2 s of
    // work while shared, then its last 8 alone in 4 s.
    let short = one_machine(&[(0.0, 10.0, 0), (0.0, 2.0, 0)]);
    assert!(close(short[0], 5.1) && close(short[1], 1.1), "{short:?}");
    // Workers that fill the machine's memory: n (C/R)^m = 2 times as long.
    let full = one_machine(&[(0.0, 10.0, 2048), (0.0, 10.0, 2048)]);
    assert!(full.iter().all(|&t| close(t, 10.0)), "{full:?}");
    // One that joins later slows the first down only from then on: the
    // first does 6 s of work alone by then, its last 4 shared (4.4 s);
    // the second does 4 of its 6 shared, the last 2 alone (1 s).
    let later = one_machine(&[(0.0, 10.0, 0), (3.0, 6.0, 0)]);
    assert!(close(later[0], 5.2) && close(later[1], 3.2), "{later:?}");
}

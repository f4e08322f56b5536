//! Churn: nodes fail and rejoin; lost ranks are replaced and the overlay
//! is repaired.

use super::*;

#[test]
fn invariants_hold_under_churn() {
    let scenario = small_grid(40, true);
    for seed in 1..=3 {
        run_checked(&scenario, Mode::Ours, seed);
    }
}

/// Under churn the homes lose ranks of running jobs and replace them
/// through the core's rank lifecycle (the real one, not a rule of the
/// simulator's): checked after every event, no job ends twice or
/// completes with a rank lost, and by the end of the run every job that
/// lost ranks and completed had them replaced.
#[test]
fn lost_ranks_are_replaced_by_the_real_rank_lifecycle_under_churn() {
    let scenario = small_grid(40, true);
    let (mut lost, mut replaced, mut completed_after_loss) = (0, 0, 0);
    for seed in 1..=3 {
        let grid = scenario.grid(seed).unwrap();
        let plans = plan_jobs(&scenario, &grid, seed);
        let mut sim = Sim::new(&scenario, Mode::Ours, seed, plans).unwrap();
        let mut steps = 0u64;
        while sim.step() {
            steps += 1;
            assert!(steps < 10_000_000, "seed {seed}: the run does not end");
            if let Err(violation) = sim.check_invariants() {
                panic!("seed {seed}, after {steps} events: {violation}");
            }
        }
        let report = sim.run();
        for job in &report.jobs {
            lost += job.lost_ranks;
            replaced += job.replaced_ranks;
            let completed = job
                .ended
                .as_ref()
                .is_some_and(|(phase, _)| *phase == Phase::Completed);
            if completed && job.lost_ranks > 0 {
                completed_after_loss += 1;
                assert!(
                    job.replaced_ranks >= job.lost_ranks,
                    "seed {seed}: {} completed with {} ranks lost, {} replaced",
                    job.id,
                    job.lost_ranks,
                    job.replaced_ranks
                );
            }
        }
    }
    eprintln!("lost {lost}, replaced {replaced}, completed after a loss {completed_after_loss}");
    assert!(lost > 0, "churn lost no rank");
    assert!(replaced > 0, "no lost rank was replaced");
    assert!(completed_after_loss > 0, "no job completed after a loss");
}

/// Under churn our overlay is the real peer keeping's: a lost neighbour
/// is redialed, the dial fails and the keeper replaces it, and a node that
/// rejoins warms up again. At the end every live node has its four near
/// links, and the live nodes' flood links connect them all.
#[test]
fn the_real_peer_keeping_repairs_the_overlay_under_churn() {
    let scenario = small_grid(40, true);
    for seed in 1..=2 {
        let grid = scenario.grid(seed).unwrap();
        let plans = plan_jobs(&scenario, &grid, seed);
        let mut sim = Sim::new(&scenario, Mode::Ours, seed, plans).unwrap();
        let mut steps = 0u64;
        while sim.step() {
            steps += 1;
            assert!(steps < 10_000_000, "seed {seed}: the run does not end");
        }
        let live: Vec<u32> = (0..grid.len() as u32)
            .filter(|n| sim.is_alive(*n))
            .collect();
        let near = sim.near_links();
        for node in &live {
            assert_eq!(
                near[*node as usize].len(),
                4,
                "seed {seed}: live node {node} has 4 near links"
            );
        }
        let links = sim.overlay();
        let mut seen = BTreeSet::from([live[0]]);
        let mut queue = VecDeque::from([live[0]]);
        while let Some(node) = queue.pop_front() {
            for peer in &links[node as usize] {
                if sim.is_alive(*peer) && seen.insert(*peer) {
                    queue.push_back(*peer);
                }
            }
        }
        assert_eq!(seen.len(), live.len(), "seed {seed}: live nodes connected");
    }
}

#[test]
fn ten_thousand_nodes_scaled_down_with_churn_keep_locality() {
    let mut scenario = shipped("synthetic-10k.toml");
    // A tenth of it: 20 sites of 50 machines, 100 jobs.
    for cluster in &mut scenario.clusters {
        cluster.machines = 50;
    }
    scenario.workload.jobs = 100;
    scenario.workload.workers = (1, 16);
    scenario.until_s = 200.0;
    let report = run_scenario(&scenario, Mode::Ours, 1).unwrap();
    let s = report.summary();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(s.allocated >= 95, "{} of 100 allocated", s.allocated);
    assert!(s.out_of_order <= 0.02, "out of order {}", s.out_of_order);
    // Oracle-level locality at a fraction of the baseline's messages
    // (measured: 0.019 ms and 33 messages per job; the baseline 0.376 ms
    // and 58).
    assert!(s.extra_rtt_ms <= 0.1, "extra RTT {} ms", s.extra_rtt_ms);
    assert!(
        s.messages_per_job <= 45.0,
        "{} messages per job",
        s.messages_per_job
    );
    let paper = run_scenario(&scenario, Mode::Paper, 1).unwrap().summary();
    assert!(s.extra_rtt_ms < paper.extra_rtt_ms, "{s:?}\n{paper:?}");
    assert!(
        s.messages_per_job < paper.messages_per_job,
        "{s:?}\n{paper:?}"
    );
}

/// A node that fails silently (its connections never close: the scenario
/// detects failures only after the run) is noticed during the run by the
/// keepers connected to it, through their ping timeouts alone, and
/// replaced: two seconds after it failed nodes still link to it (no keeper
/// waited a ping interval and a ping timeout since its last answer), two
/// seconds past that deadline none does, and every node that had it as a
/// near neighbour has as many near neighbours again.
#[test]
fn a_silent_node_is_detected_and_replaced_through_the_keepers_timeouts() {
    let mut scenario = small_grid(0, false);
    scenario.churn = Some(Churn {
        failures_per_s: 0.0,
        rejoin_after_s: 1000.0,
        detect_after_s: 1000.0,
    });
    scenario.until_s = 60.0;
    let mut sim = Sim::new(&scenario, Mode::Ours, 1, Vec::new()).unwrap();
    let near_before = sim.near_links();
    // The node the most nodes chose as a near neighbour.
    let chosen_by = |node: u32| near_before.iter().filter(|n| n.contains(&node)).count();
    let failed = (0..near_before.len() as u32)
        .max_by_key(|n| (chosen_by(*n), std::cmp::Reverse(*n)))
        .unwrap();
    let chose: Vec<usize> = (0..near_before.len())
        .filter(|n| near_before[*n].contains(&failed))
        .collect();
    assert!(!chose.is_empty(), "some node chose node {failed}");
    let at = Duration::from_secs(5);
    sim.fail_at(failed, at);
    let linking = |sim: &Sim| -> Vec<usize> {
        let links = sim.overlay();
        (0..links.len())
            .filter(|n| sim.is_alive(*n as u32) && links[*n].contains(&failed))
            .collect()
    };
    let run_to = |sim: &mut Sim, t: Duration| {
        while sim.now() < t {
            assert!(sim.step(), "the run ended at {:?}", sim.now());
            assert_eq!(sim.check_invariants(), Ok(()));
        }
    };
    // Every node ticks once a second: the first event at or after 2 s
    // past the failure comes before 3 s, less than a ping interval (1 s)
    // and a timeout (3 s) after the failed node's last answer.
    run_to(&mut sim, at + Duration::from_secs(2));
    assert!(!sim.is_alive(failed));
    assert!(
        !linking(&sim).is_empty(),
        "node {failed} was dropped before any keeper's timeout"
    );
    run_to(&mut sim, at + Duration::from_secs(6));
    assert_eq!(
        linking(&sim),
        Vec::<usize>::new(),
        "still linked to node {failed}"
    );
    let near_after = sim.near_links();
    for n in chose {
        assert!(!near_after[n].contains(&failed));
        assert_eq!(
            near_after[n].len(),
            near_before[n].len(),
            "node {n} replaced its near neighbour {failed}: {:?} -> {:?}",
            near_before[n],
            near_after[n]
        );
    }
}

//! The papers' scenarios: Zorilla's locality and message targets, and the
//! P2P-MPI placements against the paper's algorithms.

use super::*;

/// The Zorilla 4.2 scenario itself on two of its seeds (BENCHMARKS.md has
/// all five): continuous jobs of 8 at one Sophia node until the grid is
/// full. Locality meets the target, and messages per job stay at about a
/// quarter of the baseline's.
#[test]
fn zorilla_scenario_meets_the_locality_and_message_targets() {
    let scenario = shipped("zorilla-4.2.toml");
    for seed in 1..=2 {
        let grid = scenario.grid(seed).unwrap();
        let ours = run_scenario(&scenario, Mode::Ours, seed).unwrap();
        let paper = run_scenario(&scenario, Mode::Paper, seed).unwrap();
        let (o, p) = (ours.summary(), paper.summary());
        assert!(
            o.allocated >= 107,
            "seed {seed}: {} jobs allocated",
            o.allocated
        );
        assert!(
            o.extra_rtt_ms <= 0.1,
            "seed {seed}: extra RTT {} ms",
            o.extra_rtt_ms
        );
        assert!(
            o.out_of_order <= 0.02,
            "seed {seed}: out of order {}",
            o.out_of_order
        );
        // Messages: about 0.23 of the paper-faithful baseline's (about
        // ten neighbours per node): measured 705 and 726 on seeds 1 and 2,
        // the baseline 3064 and 3181 (2026-11-29; the simulator is
        // deterministic). The bounds sit just above, so that losing the
        // gain fails.
        assert!(
            o.messages_per_job <= 800.0,
            "seed {seed}: {} messages per job, paper {}",
            o.messages_per_job,
            p.messages_per_job
        );
        assert!(
            o.messages_per_job <= p.messages_per_job * 0.26,
            "seed {seed}: {} messages per job, paper {}",
            o.messages_per_job,
            p.messages_per_job
        );
        // The sites fill in order of distance: Sophia's 138 slots take the
        // first 17 jobs (136 workers) entirely.
        let sophia = grid.site("sophia").unwrap();
        for job in &ours.jobs[..17] {
            assert!(
                job.placement
                    .keys()
                    .all(|m| grid.site_of[*m as usize] == sophia)
            );
        }
    }
}

/// A small grid with three sites: the home site fills first.
#[test]
fn small_grid_fills_nearest_site_first() {
    let scenario = scenario(
        r#"
name = "zorilla-small"
until_s = 300.0
[[clusters]]
site = "home"
machines = 16
cores = 2
[[clusters]]
site = "near"
machines = 40
cores = 2
[[clusters]]
site = "far"
machines = 24
cores = 2
[latency]
within_site_ms = 0.2
jitter = 0.2
between = [
  { a = "home", b = "near", rtt_ms = 5.0 },
  { a = "home", b = "far", rtt_ms = 15.0 },
  { a = "near", b = "far", rtt_ms = 8.0 },
]
[workload]
home_site = "home"
jobs = 40
interval_s = 5.0
workers = [4, 4]
lifetime_s = 100.0
"#,
    );
    for seed in 1..=3 {
        let grid = scenario.grid(seed).unwrap();
        let ours = run_scenario(&scenario, Mode::Ours, seed).unwrap();
        let o = ours.summary();
        assert_eq!(o.allocated, 40, "the grid holds all 40 jobs");
        assert!(
            o.extra_rtt_ms <= 0.1,
            "seed {seed}: extra RTT {} ms",
            o.extra_rtt_ms
        );
        assert!(
            o.out_of_order <= 0.02,
            "seed {seed}: out of order {}",
            o.out_of_order
        );
        let site_of_job = |i: usize| {
            let sites: BTreeSet<usize> = ours.jobs[i]
                .placement
                .keys()
                .map(|m| grid.site_of[*m as usize])
                .collect();
            sites
        };
        // 32 home slots: jobs 0-7 at home, 8-27 near (80 slots), then far.
        assert_eq!(site_of_job(7), BTreeSet::from([0]));
        assert_eq!(site_of_job(8), BTreeSet::from([1]));
        assert_eq!(site_of_job(27), BTreeSet::from([1]));
        assert_eq!(site_of_job(28), BTreeSet::from([2]));
    }
}

#[test]
fn big_job_on_the_zorilla_grid_is_allocated_in_under_ten_simulated_seconds() {
    let scenario = shipped("zorilla-671.toml");
    let report = run_scenario(&scenario, Mode::Ours, 1).unwrap();
    let job = &report.jobs[0];
    let took = job.full_at.expect("allocated") - job.submitted;
    assert!(took.as_secs_f64() < 10.0, "took {took:?}");
    assert_eq!(job.placement.values().sum::<u32>(), 671);
    assert!(job.extra_rtt_us().unwrap() <= 100.0);
}

/// A site of Table 1: name, RTT from nancy (ms), clusters (hosts, cores
/// per host).
type Site = (&'static str, f64, &'static [(u32, u32)]);

/// Table 1 of the P2P-MPI paper, in the paper's order.
const TABLE_1: [Site; 6] = [
    ("nancy", 0.0, &[(60, 4)]),
    ("lyon", 10.5, &[(50, 2)]),
    ("rennes", 11.6, &[(90, 2)]),
    ("bordeaux", 12.6, &[(60, 4)]),
    ("grenoble", 13.2, &[(8, 2), (12, 4)]),
    ("sophia", 17.1, &[(32, 2), (38, 4)]),
];

/// The paper's section 4.2-4.3, written out naively from its pseudocode
/// and independent of `zorilla_core::allocation`: every host of Table 1 in
/// `rlist` by ascending latency (P = its cores, r = 1), `slist` the first
/// `min(|rlist|, n)`, capacities `c_i = min(P_i, n)`, then `spread` or
/// `concentrate` loop for loop. Returns (hosts, processes) per site.
fn paper_allocation(strategy: Strategy, n: u32) -> Vec<(&'static str, (u32, u32))> {
    let mut rlist: Vec<(f64, &str, u32)> = Vec::new();
    for (site, rtt, clusters) in TABLE_1 {
        for (hosts, cores) in clusters {
            for _ in 0..*hosts {
                rlist.push((rtt, site, *cores));
            }
        }
    }
    rlist.sort_by(|a, b| a.0.total_cmp(&b.0));
    let slist = &rlist[..rlist.len().min(n as usize)];
    let c: Vec<u32> = slist.iter().map(|(_, _, p)| (*p).min(n)).collect();
    assert!(c.iter().sum::<u32>() >= n, "the allocation is feasible");
    let mut u = vec![0u32; slist.len()];
    let mut d = 0;
    let mut cont = true;
    while cont {
        let mut i = 0;
        while i < slist.len() && cont {
            match strategy {
                Strategy::Spread => {
                    if u[i] < c[i] {
                        u[i] += 1;
                        d += 1;
                    }
                }
                Strategy::Concentrate => {
                    u[i] = c[i].min(n - d);
                    d += u[i];
                }
            }
            if d == n {
                cont = false;
            }
            i += 1;
        }
    }
    TABLE_1
        .iter()
        .map(|(site, _, _)| {
            let on_site = slist
                .iter()
                .zip(&u)
                .filter(|((_, s, _), u)| s == site && **u > 0);
            let hosts = on_site.clone().count() as u32;
            (*site, (hosts, on_site.map(|(_, u)| *u).sum()))
        })
        .collect()
}

/// All 22 cases of the P2P-MPI experiment (n = 100..600 in steps of 50,
/// spread and concentrate): the simulated grid places exactly what the
/// paper's algorithms give on Table 1, site by site.
#[test]
fn p2pmpi_placements_match_the_papers_algorithms() {
    let scenario = shipped("p2pmpi-table1.toml");
    let grid = scenario.grid(1).unwrap();
    // The scenario is Table 1.
    for (site, _, clusters) in TABLE_1 {
        let s = grid.site(site).unwrap();
        let mut hosts: Vec<(u32, u32)> = Vec::new();
        for (m, cores) in grid.cores.iter().enumerate() {
            if grid.site_of[m] == s {
                match hosts.last_mut() {
                    Some((n, c)) if c == cores => *n += 1,
                    _ => hosts.push((1, *cores)),
                }
            }
        }
        assert_eq!(hosts, clusters.to_vec(), "{site}");
    }
    let sizes: Vec<u32> = (100..=600).step_by(50).collect();
    assert_eq!(scenario.workload.sweep.as_ref().unwrap().sizes, sizes);
    let mut cases = 0;
    for strategy in [Strategy::Spread, Strategy::Concentrate] {
        for &n in &sizes {
            let case = run_case(&scenario, Mode::Ours, 1, strategy, n).unwrap();
            let paper = paper_allocation(strategy, n);
            let simulated: Vec<(&str, (u32, u32))> = paper
                .iter()
                .map(|(site, _)| (*site, case.simulated[grid.site(site).unwrap()]))
                .collect();
            assert_eq!(simulated, paper, "{strategy:?} n={n}");
            assert!(
                case.matches(),
                "{strategy:?} n={n}: the reference over true RTTs agrees"
            );
            cases += 1;
        }
    }
    assert_eq!(cases, 22);

    // What the paper's text says of Figures 2 and 3.
    let site = |strategy, n, name: &str| {
        paper_allocation(strategy, n)
            .into_iter()
            .find(|(s, _)| *s == name)
            .unwrap()
            .1
    };
    for n in [100, 150, 200] {
        assert_eq!(
            site(Strategy::Concentrate, n, "nancy").1,
            n,
            "nancy only up to 200"
        );
    }
    assert_eq!(site(Strategy::Concentrate, 250, "nancy"), (60, 240));
    assert_eq!(site(Strategy::Concentrate, 250, "lyon"), (5, 10));
    for n in [100, 150, 200, 250] {
        assert_eq!(
            site(Strategy::Spread, n, "grenoble"),
            (0, 0),
            "four closest sites"
        );
        assert_eq!(
            site(Strategy::Spread, n, "sophia"),
            (0, 0),
            "four closest sites"
        );
    }
    for n in [300, 350] {
        assert!(
            site(Strategy::Spread, n, "sophia").0 > 0,
            "from 300 all sites"
        );
    }
    // A stair at 400: 350 hosts, so nancy's take a second process.
    assert_eq!(site(Strategy::Spread, 350, "nancy"), (60, 60));
    assert_eq!(site(Strategy::Spread, 400, "nancy"), (60, 110));
}

//! `zorilla-sim` itself and the scenario files it loads.

use super::*;

/// `zorilla-sim` itself, on a small scenario with two modes: it writes one
/// CSV per run with every column, and an SVG plot with one panel per run
/// and one series per site in each.
#[test]
fn zorilla_sim_writes_the_csv_columns_and_one_plot_series_per_site() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("three.toml");
    std::fs::write(
        &scenario,
        r#"
name = "three"
until_s = 60.0
[[clusters]]
site = "amsterdam"
machines = 8
cores = 2
[[clusters]]
site = "delft"
machines = 8
cores = 2
[[clusters]]
site = "paris"
machines = 4
cores = 4
[latency]
within_site_ms = 0.2
between = [
  { a = "amsterdam", b = "delft", rtt_ms = 2.0 },
  { a = "amsterdam", b = "paris", rtt_ms = 20.0 },
  { a = "delft", b = "paris", rtt_ms = 18.0 },
]
[workload]
home_site = "amsterdam"
jobs = 8
interval_s = 1.0
workers = [3, 6]
duration_s = [5.0, 10.0]
"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_zorilla-sim"))
        .arg(&scenario)
        .args(["--mode", "ours,ours-hop", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("\n  ours     extra RTT"), "{stdout}");
    assert!(stdout.contains("\n  ours-hop extra RTT"), "{stdout}");

    let sites = ["amsterdam", "delft", "paris"];
    for mode in ["ours", "ours-hop"] {
        let csv = std::fs::read_to_string(out.join(format!("three-{mode}-1.csv"))).unwrap();
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let mut columns = vec![
            "job",
            "home_site",
            "workers",
            "min_workers",
            "submitted_s",
            "started_s",
            "allocated_s",
            "extra_rtt_ms",
            "out_of_order",
            "messages",
            "ended",
        ];
        columns.extend(sites);
        assert_eq!(header, columns);
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len(), 8, "one row per job");
        for row in &rows {
            assert_eq!(row.len(), columns.len(), "{row:?}");
            assert_eq!(row[1], "amsterdam");
            let workers: u32 = row[2].parse().unwrap();
            assert_eq!(row[3], row[2], "rigid jobs");
            let placed: u32 = row[11..].iter().map(|w| w.parse::<u32>().unwrap()).sum();
            if !row[6].is_empty() {
                assert_eq!(placed, workers, "{row:?}");
            }
        }
    }

    // Two panels (one per run), each with a line per site and a legend key
    // per site (a two-point line) in that site's colour.
    let svg = std::fs::read_to_string(out.join("three.svg")).unwrap();
    let lines: Vec<&str> = svg
        .split("<polyline")
        .skip(1)
        .filter(|l| l.contains(r#"stroke-width="2""#))
        .collect();
    let points = |l: &str| {
        l.split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .split_whitespace()
            .count()
    };
    let series = lines.iter().filter(|l| points(l) > 2).count();
    let keys = lines.iter().filter(|l| points(l) == 2).count();
    assert_eq!((series, keys), (2 * sites.len(), 2 * sites.len()), "{svg}");
    let colours: BTreeSet<&str> = lines
        .iter()
        .map(|l| {
            l.split("stroke=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(colours.len(), sites.len());
    for site in sites {
        assert_eq!(
            svg.matches(&format!("\n{site}\n")).count(),
            2,
            "{site} in each legend"
        );
    }
}

#[test]
fn every_shipped_scenario_loads_and_bad_ones_say_what_is_wrong() {
    for name in [
        "zorilla-4.2.toml",
        "zorilla-671.toml",
        "p2pmpi-table1.toml",
        "synthetic-10k.toml",
    ] {
        shipped(name);
    }
    let missing = toml::from_str::<Scenario>("name = 'x'\nuntil_s = 1.0\nclusters = []\n")
        .unwrap_err()
        .to_string();
    assert!(missing.contains("missing field `latency`"), "{missing}");
    let mut bad_site = small_grid(1, false);
    bad_site.latency.between[0].b = "nowhere".into();
    let err = bad_site.grid(1).unwrap_err().to_string();
    assert!(err.contains("unknown site"), "{err}");
    let mut too_malleable = small_grid(1, false);
    too_malleable.workload.malleable = 1.5;
    let err = too_malleable.grid(1).unwrap_err().to_string();
    assert!(
        err.contains("malleable (1.5) must be within [0, 1]"),
        "{err}"
    );
    let mut long_ids = small_grid(1, false);
    long_ids.overlay.baseline_digit_bits = 4;
    long_ids.overlay.baseline_rows = Some(17);
    let err = long_ids.grid(1).unwrap_err().to_string();
    assert!(
        err.contains("times baseline_rows (Some(17)) at most 64"),
        "{err}"
    );
    let mut no_rtt = small_grid(1, false);
    no_rtt.latency.default_between_ms = None;
    let err = no_rtt.grid(1).unwrap_err().to_string();
    assert!(err.contains("no RTT between sites"), "{err}");
}

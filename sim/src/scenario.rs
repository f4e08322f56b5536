//! Scenario files: the grid (sites, machines, latencies), the overlay set-up,
//! the workload and the churn of one simulation, in TOML.
//!
//! See `sim/scenarios/*.toml` for the shipped scenarios; every field is
//! described on the types below.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use serde::Deserialize;
use zorilla_core::advert::Strategy;

/// A whole scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name, used in reports and file names.
    pub name: String,
    /// What the scenario reproduces.
    #[serde(default)]
    pub description: String,
    /// Seeds to run (one run per seed and mode).
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    /// Clusters of machines. Several entries with the same `site` are
    /// clusters of one site (same latencies).
    pub clusters: Vec<Cluster>,
    /// Round-trip times.
    pub latency: Latency,
    /// How nodes find their neighbours.
    #[serde(default)]
    pub overlay: OverlaySetup,
    /// The jobs.
    pub workload: Workload,
    /// Nodes failing and joining.
    #[serde(default)]
    pub churn: Option<Churn>,
    /// Home jobs' state replicated, and homes that fail and are taken over
    /// (issue 16); `None`: a job is lost with its home.
    #[serde(default)]
    pub failover: Option<FailoverSetup>,
    /// Simulated time after which the run stops, in seconds.
    pub until_s: f64,
    /// Co-located workers slow each other down (the multi-core desktop
    /// grids paper's model, see `sim::contention`); `None`: they do not.
    #[serde(default)]
    pub contention: Option<Contention>,
}

/// The multi-core desktop grids paper's contention model (its section
/// 4.3): a worker on a machine that runs `n` workers in all, whose workers
/// together use `C` of its memory `R`, runs `alpha = max(1 + p, n *
/// (C/R)^m)` times as long as alone (1 when alone).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Contention {
    /// The slow-down of a worker sharing its machine, for workers that are
    /// not memory intensive: 0.1, what the paper measured (SPEC CPU2006,
    /// NAS, AMBER, LAMMPS, POP on dual-core machines: 6% to 11% on
    /// average).
    pub p: f64,
    /// How steeply memory contention grows as the workers fill the
    /// machine's memory: 4, the paper's.
    pub m: f64,
}

impl Default for Contention {
    fn default() -> Self {
        Contention { p: 0.1, m: 4.0 }
    }
}

fn default_seeds() -> Vec<u64> {
    vec![1]
}

/// A cluster: `machines` identical machines at one site.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// The site the cluster is at.
    pub site: String,
    /// How many machines.
    pub machines: u32,
    /// Cores per machine (workers per machine, with one core per worker).
    pub cores: u32,
    /// Memory per machine in MiB.
    #[serde(default = "default_memory")]
    pub memory_mib: u64,
    /// CPU speed of each machine against the reference machine (1.0),
    /// drawn uniformly from `[lo, hi]` per machine; absent: 1.0. A worker
    /// that needs `w` seconds on the reference machine runs `w / speed`
    /// on this one (and longer where it shares the machine, see
    /// [`Contention`]).
    #[serde(default)]
    pub speed: Option<(f64, f64)>,
}

fn default_memory() -> u64 {
    16 * 1024
}

/// Round-trip times between machines.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    /// RTT between two machines of one site, in ms.
    pub within_site_ms: f64,
    /// RTT between sites not listed in `between`, in ms.
    #[serde(default)]
    pub default_between_ms: Option<f64>,
    /// Draw each unlisted pair of sites uniformly from this range instead,
    /// in ms.
    #[serde(default)]
    pub random_between_ms: Option<(f64, f64)>,
    /// Listed pairs of sites.
    #[serde(default)]
    pub between: Vec<SitePair>,
    /// Measurement noise: a sample of a path with RTT `r` is
    /// `r * (1 + jitter * u)`, `u` uniform in `[0, 1)` (queueing only adds).
    #[serde(default = "default_jitter")]
    pub jitter: f64,
}

fn default_jitter() -> f64 {
    0.1
}

/// The RTT between two sites.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SitePair {
    /// One site.
    pub a: String,
    /// The other.
    pub b: String,
    /// RTT in ms.
    pub rtt_ms: f64,
}

/// How the simulated nodes build their neighbour sets before the run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OverlaySetup {
    /// Nearest neighbours kept (our overlay).
    pub near: usize,
    /// Random far links kept (our overlay).
    pub far: usize,
    /// Random peers each node knows at start (bootstrap and mDNS).
    pub bootstrap: usize,
    /// Ticks of the real peer keeping (one a second in the overlay:
    /// probes, peer exchange, the neighbour set) before the first job,
    /// and for a node that rejoins (during the run a keeper connected to
    /// a failed peer ticks once a simulated second as well).
    pub warmup_ticks: usize,
    /// RTT samples per newly measured peer.
    pub samples: usize,
    /// Ping intervals after the warm-up (and after a node rejoins) in
    /// which our nodes' pings are simulated (`sim::peers`): what their
    /// network coordinates learn from. The real overlay pings for ever;
    /// on a grid whose RTTs do not change, coordinates move little after
    /// the first two minutes, and each round costs the simulator every
    /// connection's peer keeping.
    pub ping_rounds: usize,
    /// Bamboo-like baseline: random leaf-set size.
    pub baseline_leaves: usize,
    /// Bamboo-like baseline: candidates measured per routing-table entry.
    pub baseline_candidates: usize,
    /// Bamboo-like baseline: bits per id digit (1 by default: binary
    /// digits, one entry per routing-table row, which gives the paper's
    /// "in the order of 10 neighbors" per node on a few hundred nodes;
    /// 4: hexadecimal digits, 15 entries per row, some 28 neighbours).
    pub baseline_digit_bits: u32,
    /// Bamboo-like baseline: routing-table rows (id digits). `None` (the
    /// default): every row of the 64-bit id, as Bamboo fills every row for
    /// which some node exists, about log2(nodes) of them.
    pub baseline_rows: Option<u32>,
    /// What a node knows of its own and its neighbours' distances to a
    /// flood's home besides the path the flood took (`sim::coords`).
    pub home_distances: HomeDistances,
}

/// Where the flood router's distances to a flood's home come from in a
/// run (see `sim::coords`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HomeDistances {
    /// A node's own measured RTT to the home, if it has one (what the
    /// real node knows).
    #[default]
    Measured,
    /// Every node knows its own and its neighbours' true RTTs to the home
    /// (a diagnostic: the best any coordinate system could estimate).
    Exact,
    /// Our overlay's network coordinates: its own coordinate's distance to
    /// the home's (unless it measured the home), and its neighbours'.
    Vivaldi,
}

impl Default for OverlaySetup {
    fn default() -> Self {
        OverlaySetup {
            near: 4,
            far: 2,
            bootstrap: 8,
            warmup_ticks: 10,
            samples: 3,
            ping_rounds: 120,
            baseline_leaves: 4,
            baseline_candidates: 8,
            baseline_digit_bits: 1,
            baseline_rows: None,
            home_distances: HomeDistances::Measured,
        }
    }
}

/// The jobs submitted during a run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Site of the submitting node; `None` submits each job at a random
    /// node.
    #[serde(default)]
    pub home_site: Option<String>,
    /// Number of jobs.
    pub jobs: u32,
    /// Seconds between submissions (mean, if `poisson`).
    pub interval_s: f64,
    /// Exponential inter-arrival times instead of fixed ones.
    #[serde(default)]
    pub poisson: bool,
    /// Workers per job (the job's `max`): drawn uniformly from `[lo, hi]`.
    pub workers: (u32, u32),
    /// Share of jobs that are malleable, from 0 (all rigid, the default)
    /// to 1.
    #[serde(default)]
    pub malleable: f64,
    /// A malleable job's `min` as a fraction of its `max`, rounded up (at
    /// least one worker).
    #[serde(default = "default_malleable_min")]
    pub malleable_min: f64,
    /// Allocation strategy.
    #[serde(default)]
    pub strategy: Strategy,
    /// How long workers run, drawn uniformly from `[lo, hi]` seconds;
    /// absent means they run for ever.
    #[serde(default)]
    pub duration_s: Option<(f64, f64)>,
    /// How long a job may wait for its workers, in seconds.
    #[serde(default = "default_lifetime")]
    pub lifetime_s: f64,
    /// Memory each worker needs, in MiB, drawn per job uniformly from
    /// `[lo, hi]`; absent: none. With [`Contention`], workers that fill a
    /// machine's memory slow each other down most.
    #[serde(default)]
    pub memory_mib: Option<(u64, u64)>,
    /// Sweep instead: one job per size, each in a fresh grid (the
    /// P2P-MPI experiment). `jobs`, `interval_s` and `workers` are ignored.
    #[serde(default)]
    pub sweep: Option<Sweep>,
}

fn default_malleable_min() -> f64 {
    0.5
}

fn default_lifetime() -> f64 {
    3600.0
}

/// A sweep over job sizes and strategies.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// Job sizes.
    pub sizes: Vec<u32>,
    /// Strategies.
    pub strategies: Vec<Strategy>,
    /// Owner limit P: workers per job per machine (`None`: as many as
    /// cores).
    #[serde(default)]
    pub max_workers_per_machine: Option<u32>,
}

/// Nodes failing and coming back.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Churn {
    /// Failures per second across the grid (Poisson).
    pub failures_per_s: f64,
    /// Seconds until a failed machine rejoins with a fresh node.
    pub rejoin_after_s: f64,
    /// Seconds until peers notice a failure.
    pub detect_after_s: f64,
}

/// Replicated home jobs (issue 16): each home job's state is held by its
/// home and by copies, which elect a successor when the home is gone.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverSetup {
    /// The fewest copies a job has besides its home: nodes that run its
    /// workers, and near nodes that run none when those are fewer.
    #[serde(default = "default_degree")]
    pub degree: usize,
    /// Failures per second that hit the home of a running job (Poisson),
    /// on top of the churn's failures of random machines (which detect and
    /// rejoin as the churn says).
    #[serde(default)]
    pub home_failures_per_s: f64,
}

fn default_degree() -> usize {
    zorilla_core::copies::DEFAULT_DEGREE
}

impl Default for FailoverSetup {
    fn default() -> Self {
        FailoverSetup {
            degree: default_degree(),
            home_failures_per_s: 0.0,
        }
    }
}

/// The grid a scenario describes, resolved: machines with their site and
/// capacity, and the site-to-site RTT matrix.
#[derive(Debug, Clone)]
pub struct Grid {
    /// Site names, in first-appearance order.
    pub sites: Vec<String>,
    /// Site index of every machine.
    pub site_of: Vec<usize>,
    /// Cores of every machine.
    pub cores: Vec<u32>,
    /// Memory of every machine.
    pub memory_mib: Vec<u64>,
    /// CPU speed of every machine against the reference machine's (1.0).
    pub speed: Vec<f64>,
    /// RTT between sites in microseconds (`rtt[a][a]` is within a site).
    pub rtt_us: Vec<Vec<u64>>,
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read scenario {}", path.display()))?;
        let scenario: Scenario = toml::from_str(&text)
            .with_context(|| format!("scenario {} is not valid", path.display()))?;
        scenario.grid(0)?;
        Ok(scenario)
    }

    /// Resolves the grid; `seed` draws random site-to-site RTTs.
    pub fn grid(&self, seed: u64) -> anyhow::Result<Grid> {
        use rand::{Rng, SeedableRng};
        let mut sites: Vec<String> = Vec::new();
        let mut site_of = Vec::new();
        let mut cores = Vec::new();
        let mut memory_mib = Vec::new();
        let mut speed = Vec::new();
        let mut speeds = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5bee_d5ed);
        for cluster in &self.clusters {
            let site = match sites.iter().position(|s| *s == cluster.site) {
                Some(i) => i,
                None => {
                    sites.push(cluster.site.clone());
                    sites.len() - 1
                }
            };
            for _ in 0..cluster.machines {
                site_of.push(site);
                cores.push(cluster.cores);
                memory_mib.push(cluster.memory_mib);
                // From a stream of its own, so that grids without speeds
                // draw everything else as before.
                speed.push(match cluster.speed {
                    None => 1.0,
                    Some((lo, hi)) if lo > 0.0 && lo <= hi => speeds.random_range(lo..=hi),
                    Some((lo, hi)) => bail!(
                        "cluster at {}: speed range ({lo}, {hi}) must be positive and ordered",
                        cluster.site
                    ),
                });
            }
        }
        if site_of.is_empty() {
            bail!("scenario {} has no machines", self.name);
        }
        let index: BTreeMap<&str, usize> = sites
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), i))
            .collect();
        let us = |ms: f64| (ms * 1000.0).round() as u64;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_1a7e);
        let n = sites.len();
        let mut rtt_us = vec![vec![0; n]; n];
        for (a, row) in rtt_us.iter_mut().enumerate() {
            row[a] = us(self.latency.within_site_ms);
        }
        let pairs = (0..n).flat_map(|a| (a + 1..n).map(move |b| (a, b)));
        for (a, b) in pairs {
            let rtt = match (
                self.latency.random_between_ms,
                self.latency.default_between_ms,
            ) {
                (Some((lo, hi)), _) => us(rng.random_range(lo..hi)),
                (None, Some(ms)) => us(ms),
                (None, None) => 0,
            };
            rtt_us[a][b] = rtt;
            rtt_us[b][a] = rtt;
        }
        for pair in &self.latency.between {
            let (Some(&a), Some(&b)) = (index.get(pair.a.as_str()), index.get(pair.b.as_str()))
            else {
                bail!("latency pair {}-{} names an unknown site", pair.a, pair.b);
            };
            rtt_us[a][b] = us(pair.rtt_ms);
            rtt_us[b][a] = us(pair.rtt_ms);
        }
        for a in 0..n {
            for b in 0..n {
                if a != b && rtt_us[a][b] == 0 {
                    bail!(
                        "no RTT between sites {} and {}: list it or set default_between_ms",
                        sites[a],
                        sites[b]
                    );
                }
            }
        }
        let o = &self.overlay;
        let rows_ok = o
            .baseline_rows
            .is_none_or(|rows| o.baseline_digit_bits * rows <= 64);
        if !(1..=8).contains(&o.baseline_digit_bits) || !rows_ok {
            bail!(
                "overlay baseline_digit_bits ({}) must be within 1..=8 and times baseline_rows ({:?}) \
                 at most 64",
                o.baseline_digit_bits,
                o.baseline_rows
            );
        }
        let w = &self.workload;
        let share_ok = (0.0..=1.0).contains(&w.malleable);
        let min_ok = w.malleable_min > 0.0 && w.malleable_min <= 1.0;
        if !(share_ok && min_ok) {
            bail!(
                "workload malleable ({}) must be within [0, 1] and malleable_min ({}) within (0, 1]",
                w.malleable,
                w.malleable_min
            );
        }
        if let Some(home) = &self.workload.home_site
            && !index.contains_key(home.as_str())
        {
            bail!("workload home_site {home} is not a site of the scenario");
        }
        Ok(Grid {
            sites,
            site_of,
            cores,
            memory_mib,
            speed,
            rtt_us,
        })
    }
}

impl Grid {
    /// The number of machines.
    pub fn len(&self) -> usize {
        self.site_of.len()
    }

    /// Whether the grid has no machines.
    pub fn is_empty(&self) -> bool {
        self.site_of.is_empty()
    }

    /// The true RTT between two machines, in microseconds.
    pub fn rtt_us(&self, a: u32, b: u32) -> u64 {
        if a == b {
            return 0;
        }
        self.rtt_us[self.site_of[a as usize]][self.site_of[b as usize]]
    }

    /// The site index of a name.
    pub fn site(&self, name: &str) -> Option<usize> {
        self.sites.iter().position(|s| s == name)
    }
}

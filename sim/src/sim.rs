//! The discrete-event grid simulator: thousands of nodes, each running the
//! real core ([`Scheduler`], [`FloodRouter`], and in our overlay the real
//! peer keeping, [`PeerKeeper`]), over a simulated network.
//!
//! What a simulated node knows is only what a real node could know: the RTTs
//! it measured itself (true RTT plus jitter), and the messages it received.
//! The latency matrix, the free resources of every machine and the oracle
//! are seen only by the simulator's bookkeeping ([`JobRecord`], the oracle in
//! [`Sim::locality`]), never by a node.
//!
//! The event loop follows iroh-gossip's simulator: a heap of events ordered
//! by time with a sequence number as tie-breaker (so that runs are exactly
//! reproducible from a seed), and every output of a node turned into a
//! future input of another after the link's one-way delay.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use zorilla_core::Time;
use zorilla_core::advert::{Advert, JobId, Message, Strategy, WorkerCount};
use zorilla_core::flood::{FloodConfig, FloodId, FloodRouter, Verdict};
use zorilla_core::neighbours::keeper::PeerKeeper;
use zorilla_core::node::{
    Input, JobEvent, JobSpec, LostPolicy, Output, OwnerLimits, Phase, Scheduler, SchedulerConfig,
    WorkerEnd,
};
use zorilla_core::resources::Resources;
use zorilla_core::schedule::{FloodMode, ScheduleConfig};

use crate::scenario::{Grid, Scenario};
use node_overlay::NodeOverlay;

mod invariants;
mod node_overlay;
mod peers;

/// Which Zorilla runs: ours, the paper's as the baseline, or an ablation
/// of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// Latency-bounded floods, adaptive waits, nearest-k-plus-far overlay.
    Ours,
    /// The original: hop floods, doubling waits from 1 s, Bamboo-like
    /// overlay (random leaf set plus proximity-chosen routing entries).
    Paper,
    /// Ours with hop-limited floods only (no latency budget): the same
    /// overlay, adaptive waits and settling, so that a comparison with
    /// [`Mode::Ours`] isolates what the latency budget does.
    OursHop,
}

impl Mode {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ours => "ours",
            Mode::Paper => "paper",
            Mode::OursHop => "ours-hop",
        }
    }

    /// The flooding schedule a home uses in this mode.
    pub fn schedule(self) -> ScheduleConfig {
        match self {
            Mode::Ours => ScheduleConfig::default(),
            Mode::Paper => ScheduleConfig::paper(),
            Mode::OursHop => ScheduleConfig {
                flood_mode: FloodMode::Hops,
                ..ScheduleConfig::default()
            },
        }
    }

    /// Whether the overlay is ours (nearest `k` plus far links) rather than
    /// the Bamboo-like baseline.
    pub fn our_overlay(self) -> bool {
        self != Mode::Paper
    }
}

/// Processing time a node spends per message, added to every hop.
const PROCESSING: Duration = Duration::from_micros(10);

/// A job the workload submits.
#[derive(Debug, Clone)]
pub struct JobPlan {
    /// When.
    pub at: Time,
    /// Submitted to which machine.
    pub home: u32,
    /// The job.
    pub spec: JobSpec,
    /// How long its workers run (`None`: for ever).
    pub duration: Option<Duration>,
}

/// What happened to one job.
#[derive(Debug, Clone)]
pub struct JobRecord {
    /// The job.
    pub id: JobId,
    /// Its home machine.
    pub home: u32,
    /// Workers wanted (the job's `max`).
    pub workers: u32,
    /// Workers it needs to start (its `min`; `workers` for a rigid job).
    pub min_workers: u32,
    /// Submission time.
    pub submitted: Time,
    /// When it started (got its `min` workers).
    pub started_at: Option<Time>,
    /// Workers it started with (0 until it started).
    pub started_with: u32,
    /// When it got all its workers.
    pub full_at: Option<Time>,
    /// Workers per machine.
    pub placement: BTreeMap<u32, u32>,
    /// Mean extra RTT per worker over the oracle, in microseconds (set when
    /// the job got its workers).
    pub extra_rtt_us: Option<f64>,
    /// Workers placed while a free worker nearer by more than the
    /// within-site RTT existed.
    pub out_of_order: u32,
    /// Messages sent about this job (flood copies and direct messages).
    pub messages: u64,
    /// How it ended, if it did.
    pub ended: Option<(Phase, String)>,
    /// Ranks its home counted as lost (a node failed or left).
    pub lost_ranks: u32,
    /// Lost ranks its home granted again.
    pub replaced_ranks: u32,
    /// Workers still running.
    running: u32,
    duration: Option<Duration>,
    /// Ranks granted per machine, as the home announced them (less those
    /// it reported lost).
    ranks: BTreeMap<u32, BTreeSet<u32>>,
}

impl JobRecord {
    /// Whether the job gets all its workers or none.
    pub fn is_rigid(&self) -> bool {
        self.min_workers == self.workers
    }
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Scenario name.
    pub scenario: String,
    /// Mode.
    pub mode: Mode,
    /// Seed.
    pub seed: u64,
    /// Site names.
    pub sites: Vec<String>,
    /// Every job.
    pub jobs: Vec<JobRecord>,
    /// Messages sent in all.
    pub messages: u64,
    /// Messages sent, by kind.
    pub by_kind: BTreeMap<&'static str, u64>,
    /// Floods started by homes.
    pub floods: u64,
    /// Events processed.
    pub events: u64,
    /// Wall-clock time the run took.
    pub wall: Duration,
    /// Simulated time at the end.
    pub end: Time,
    /// Workers running per site over time: `(time, site, change)`.
    pub timeline: Vec<(Time, usize, i64)>,
    /// Every check of invariants that failed (empty when all held).
    pub violations: Vec<String>,
}

#[derive(Debug)]
enum Event {
    Flood {
        to: u32,
        from: u32,
        advert: Advert<u32>,
        /// The other peers the sender sent this flood to.
        also_sent: Rc<[u32]>,
    },
    Direct {
        to: u32,
        from: u32,
        msg: Message<u32>,
    },
    Wake {
        node: u32,
    },
    Submit {
        job: usize,
    },
    WorkersEnd {
        node: u32,
        job: JobId,
    },
    /// A worker's end reported to its job's home (the real node's
    /// `WorkerEnded` call).
    RankReport {
        home: u32,
        from: u32,
        job: JobId,
        rank: u32,
        incarnation: u32,
    },
    Fail {
        node: u32,
    },
    Detect {
        node: u32,
    },
    Rejoin {
        node: u32,
    },
}

struct Scheduled {
    at: Time,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct SimNode {
    alive: bool,
    scheduler: Scheduler<u32>,
    router: FloodRouter<u32>,
    /// Ours: the peer keeping; the paper's: the measured RTTs.
    overlay: NodeOverlay,
    /// The links floods go to, with their measured RTT: ours, the
    /// neighbours this node chose and the nodes that chose it (a link is a
    /// connection, and works both ways); the paper's, its Bamboo links.
    neighbours: Vec<(u32, Duration)>,
    wake_at: Option<Time>,
}

/// One simulation run. Build it with [`Sim::new`], then [`Sim::run`] (or
/// [`Sim::step`] to check invariants after every event).
pub struct Sim {
    grid: Grid,
    mode: Mode,
    seed: u64,
    scenario: Scenario,
    rng: ChaCha8Rng,
    nodes: Vec<SimNode>,
    heap: BinaryHeap<Reverse<Scheduled>>,
    seq: u64,
    now: Time,
    plans: Vec<JobPlan>,
    jobs: BTreeMap<JobId, JobRecord>,
    /// Ranks running on each machine, per job, with their incarnations
    /// (omniscient bookkeeping).
    running: BTreeMap<(u32, JobId), BTreeMap<u32, u32>>,
    used: Vec<u32>,
    messages: u64,
    by_kind: BTreeMap<&'static str, u64>,
    floods: u64,
    events: u64,
    timeline: Vec<(Time, usize, i64)>,
    violations: Vec<String>,
    until: Time,
    /// The peer keepers' clock at the simulation's time zero (the
    /// warm-up's length).
    epoch: Time,
    /// Open simulated connections of our overlay: id -> (dialer, dialed).
    connections: BTreeMap<u64, (u32, u32)>,
    next_connection: u64,
}

fn kind<P>(msg: &Message<P>) -> &'static str {
    match msg {
        Message::Advert(_) => "advert",
        Message::Offer { .. } => "offer",
        Message::Decline { .. } => "decline",
        Message::Withdraw { .. } => "withdraw",
        Message::Grant { .. } => "grant",
        Message::Placement { .. } => "placement",
        Message::Refuse { .. } => "refuse",
    }
}

impl Sim {
    /// Sets up the grid and overlay of `scenario` for `mode` and `seed`, with
    /// the given job plans (see [`plan_jobs`]).
    pub fn new(
        scenario: &Scenario,
        mode: Mode,
        seed: u64,
        plans: Vec<JobPlan>,
    ) -> anyhow::Result<Self> {
        Self::with_limit(scenario, mode, seed, plans, None)
    }

    /// Like [`Sim::new`], with the owner limit P (workers per job per
    /// machine) set on every node.
    pub fn with_limit(
        scenario: &Scenario,
        mode: Mode,
        seed: u64,
        plans: Vec<JobPlan>,
        max_workers_per_job: Option<u32>,
    ) -> anyhow::Result<Self> {
        let grid = scenario.grid(seed)?;
        let mut sim = Sim {
            mode,
            seed,
            scenario: scenario.clone(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            nodes: Vec::with_capacity(grid.len()),
            heap: BinaryHeap::new(),
            seq: 0,
            now: Time::ZERO,
            plans,
            jobs: BTreeMap::new(),
            running: BTreeMap::new(),
            used: vec![0; grid.len()],
            messages: 0,
            by_kind: BTreeMap::new(),
            floods: 0,
            events: 0,
            timeline: Vec::new(),
            violations: Vec::new(),
            until: Duration::from_secs_f64(scenario.until_s),
            epoch: Duration::ZERO,
            connections: BTreeMap::new(),
            next_connection: 0,
            grid,
        };
        for node in 0..sim.grid.len() as u32 {
            let fresh = sim.fresh_node(node, max_workers_per_job);
            sim.nodes.push(fresh);
        }
        if mode.our_overlay() {
            sim.build_overlay_ours();
        } else {
            sim.build_overlay_bamboo();
        }
        for job in 0..sim.plans.len() {
            let at = sim.plans[job].at;
            sim.push(at, Event::Submit { job });
        }
        if let Some(churn) = sim.scenario.churn.clone()
            && churn.failures_per_s > 0.0
        {
            let mut t = 0.0;
            loop {
                let u: f64 = sim.rng.random_range(f64::EPSILON..1.0);
                t += -u.ln() / churn.failures_per_s;
                if t >= scenario.until_s {
                    break;
                }
                let node = sim.rng.random_range(0..sim.grid.len() as u32);
                sim.push(Duration::from_secs_f64(t), Event::Fail { node });
            }
        }
        Ok(sim)
    }

    fn fresh_node(&mut self, node: u32, max_workers_per_job: Option<u32>) -> SimNode {
        let schedule = self.mode.schedule();
        let limits = OwnerLimits {
            max_workers_per_job: max_workers_per_job.unwrap_or(u32::MAX),
            ..OwnerLimits::default()
        };
        let config = SchedulerConfig {
            resources: Resources::new(
                self.grid.cores[node as usize],
                self.grid.memory_mib[node as usize],
                0,
            ),
            limits,
            schedule,
            ..SchedulerConfig::default()
        };
        let overlay = if self.mode.our_overlay() {
            let seed = self.seed ^ u64::from(node).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let now = self.epoch + self.now;
            NodeOverlay::Ours(Box::new(PeerKeeper::new(self.keeper_config(), seed, now)))
        } else {
            NodeOverlay::Paper(BTreeMap::new())
        };
        SimNode {
            alive: true,
            scheduler: Scheduler::new(node, config),
            router: FloodRouter::new(FloodConfig {
                // The paper's nodes flood to every neighbour but the sender.
                prune: self.mode.our_overlay(),
                ..FloodConfig::default()
            }),
            overlay,
            neighbours: Vec::new(),
            wake_at: None,
        }
    }

    /// One RTT sample between two machines, as a node would measure it.
    fn sample(&mut self, a: u32, b: u32) -> Duration {
        let rtt = self.grid.rtt_us(a, b) as f64;
        let noise = 1.0 + self.scenario.latency.jitter * self.rng.random::<f64>();
        Duration::from_nanos((rtt * noise * 1000.0) as u64)
    }

    /// The paper's node's RTT to `peer`, measuring it first if it never
    /// did.
    fn measured_rtt(&mut self, node: u32, peer: u32) -> Duration {
        if self.nodes[node as usize].overlay.rtt(&peer).is_none() {
            self.measure(node, peer);
        }
        self.nodes[node as usize]
            .overlay
            .rtt(&peer)
            .unwrap_or(Duration::MAX)
    }

    /// The paper's node measures `peer`: the minimum of a few samples.
    fn measure(&mut self, node: u32, peer: u32) {
        for _ in 0..self.scenario.overlay.samples.max(1) {
            let rtt = self.sample(node, peer);
            if let NodeOverlay::Paper(rtts) = &mut self.nodes[node as usize].overlay {
                let best = rtts.entry(peer).or_insert(rtt);
                *best = (*best).min(rtt);
            }
        }
    }

    /// The paper's overlay, after Bamboo: random 64-bit ids; a leaf set of
    /// the id-adjacent nodes (random with respect to location), and a
    /// routing table whose every entry is the nearest of a few measured
    /// candidates with the right id prefix (proximity neighbour selection):
    /// `baseline_rows` rows (by default all) of digits of
    /// `baseline_digit_bits` bits (binary by default).
    fn build_overlay_bamboo(&mut self) {
        let n = self.grid.len();
        let ids: Vec<u64> = (0..n).map(|_| self.rng.random()).collect();
        let mut ring: Vec<u32> = (0..n as u32).collect();
        ring.sort_by_key(|i| ids[*i as usize]);
        let position: BTreeMap<u32, usize> =
            ring.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let leaves = self.scenario.overlay.baseline_leaves / 2;
        let candidates = self.scenario.overlay.baseline_candidates;
        let bits = self.scenario.overlay.baseline_digit_bits;
        let rows = self.scenario.overlay.baseline_rows.unwrap_or(64 / bits);
        // The first `rows` digits of an id, as a prefix per length.
        let prefix = |id: u64, digits: u32| id.checked_shr(64 - bits * digits).unwrap_or(0);
        let mut by_prefix: BTreeMap<(u32, u64), Vec<u32>> = BTreeMap::new();
        for node in 0..n as u32 {
            let id = ids[node as usize];
            for digits in 1..=rows {
                by_prefix
                    .entry((digits, prefix(id, digits)))
                    .or_default()
                    .push(node);
            }
        }
        for node in 0..n as u32 {
            let id = ids[node as usize];
            let mut chosen: Vec<u32> = Vec::new();
            let at = position[&node];
            for k in 1..=leaves {
                chosen.push(ring[(at + k) % n]);
                chosen.push(ring[(at + n - k % n) % n]);
            }
            for row in 0..rows {
                let own_prefix = prefix(id, row);
                for digit in 0..1u64 << bits {
                    let entry = (own_prefix << bits) | digit;
                    if entry == prefix(id, row + 1) {
                        continue;
                    }
                    let Some(bucket) = by_prefix.get(&(row + 1, entry)) else {
                        continue;
                    };
                    let sample: Vec<u32> = bucket
                        .choose_multiple(&mut self.rng, candidates)
                        .copied()
                        .collect();
                    let mut best: Option<(Duration, u32)> = None;
                    for peer in sample {
                        self.measure(node, peer);
                        let rtt = self.nodes[node as usize]
                            .overlay
                            .rtt(&peer)
                            .unwrap_or(Duration::MAX);
                        if best.is_none_or(|(b, _)| rtt < b) {
                            best = Some((rtt, peer));
                        }
                    }
                    if let Some((_, peer)) = best {
                        chosen.push(peer);
                    }
                }
            }
            chosen.sort_unstable();
            chosen.dedup();
            chosen.retain(|p| *p != node);
            let mut neighbours = Vec::with_capacity(chosen.len());
            for peer in chosen {
                let rtt = self.measured_rtt(node, peer);
                neighbours.push((peer, rtt));
            }
            self.nodes[node as usize].neighbours = neighbours;
        }
    }

    fn push(&mut self, at: Time, event: Event) {
        self.seq += 1;
        self.heap.push(Reverse(Scheduled {
            at,
            seq: self.seq,
            event,
        }));
    }

    fn one_way(&self, a: u32, b: u32) -> Duration {
        Duration::from_micros(self.grid.rtt_us(a, b) / 2) + PROCESSING
    }

    fn count(&mut self, job: JobId, kind: &'static str) {
        self.messages += 1;
        *self.by_kind.entry(kind).or_default() += 1;
        if let Some(record) = self.jobs.get_mut(&job) {
            record.messages += 1;
        }
    }

    /// Runs until the event heap is empty or the scenario's end time.
    pub fn run(mut self) -> RunReport {
        let started = Instant::now();
        while self.step() {}
        self.report(started.elapsed())
    }

    /// Processes one event; returns false when the run is over.
    pub fn step(&mut self) -> bool {
        let Some(Reverse(next)) = self.heap.pop() else {
            return false;
        };
        if next.at > self.until {
            return false;
        }
        self.now = next.at;
        self.events += 1;
        match next.event {
            Event::Flood {
                to,
                from,
                advert,
                also_sent,
            } => self.on_flood(to, from, advert, &also_sent),
            Event::Direct { to, from, msg } => {
                if self.nodes[to as usize].alive && self.nodes[from as usize].alive {
                    let rtt = self.sample(to, from);
                    self.feed(
                        to,
                        Input::Message {
                            from,
                            msg,
                            rtt: Some(rtt),
                        },
                    );
                }
            }
            Event::Wake { node } => {
                let n = &mut self.nodes[node as usize];
                if n.alive && n.wake_at == Some(self.now) {
                    n.wake_at = None;
                    let out = n.scheduler.handle_timeout(self.now);
                    self.execute(node, out);
                }
            }
            Event::Submit { job } => self.submit(job),
            Event::WorkersEnd { node, job } => {
                if let Some(ranks) = self.running.remove(&(node, job)) {
                    self.workers_gone(node, job, ranks.len() as u32);
                    let ended: Vec<u32> = ranks.keys().copied().collect();
                    self.feed(node, Input::WorkersEnded { job, ranks: ended });
                    // Each worker reports its end to the home, which
                    // decides what becomes of the job (the core's rules).
                    if let Some(home) = self.jobs.get(&job).map(|r| r.home) {
                        let at = self.now + self.one_way(node, home);
                        for (rank, incarnation) in ranks {
                            let report = Event::RankReport {
                                home,
                                from: node,
                                job,
                                rank,
                                incarnation,
                            };
                            self.push(at, report);
                        }
                    }
                }
            }
            Event::RankReport {
                home,
                from,
                job,
                rank,
                incarnation,
            } => {
                if self.nodes[home as usize].alive && self.nodes[from as usize].alive {
                    let input = Input::RankEnded {
                        job,
                        node: from,
                        rank,
                        incarnation,
                        end: WorkerEnd::Exited(0),
                    };
                    self.feed(home, input);
                }
            }
            Event::Fail { node } => self.fail(node),
            Event::Detect { node } => self.detect(node),
            Event::Rejoin { node } => self.rejoin(node),
        }
        true
    }

    fn submit(&mut self, index: usize) {
        let plan = self.plans[index].clone();
        let id = JobId(index as u64 + 1);
        self.jobs.insert(
            id,
            JobRecord {
                id,
                home: plan.home,
                workers: plan.spec.workers.max,
                min_workers: plan.spec.workers.min,
                submitted: self.now,
                started_at: None,
                started_with: 0,
                full_at: None,
                placement: BTreeMap::new(),
                extra_rtt_us: None,
                out_of_order: 0,
                messages: 0,
                ended: None,
                lost_ranks: 0,
                replaced_ranks: 0,
                running: 0,
                duration: plan.duration,
                ranks: BTreeMap::new(),
            },
        );
        if !self.nodes[plan.home as usize].alive {
            if let Some(r) = self.jobs.get_mut(&id) {
                r.ended = Some((Phase::Failed, "home node was down at submission".into()));
            }
            return;
        }
        self.feed(
            plan.home,
            Input::Submit {
                job: id,
                spec: plan.spec,
            },
        );
    }

    fn on_flood(&mut self, to: u32, from: u32, advert: Advert<u32>, also_sent: &[u32]) {
        if !self.nodes[to as usize].alive {
            return;
        }
        let id = FloodId {
            job: advert.job,
            seq: advert.flood.seq,
        };
        let node = &mut self.nodes[to as usize];
        let direct = node.overlay.rtt(&advert.home);
        let verdict = node.router.receive_from(
            &from,
            id,
            advert.flood,
            also_sent,
            direct,
            &node.neighbours,
            self.now,
        );
        match verdict {
            Verdict::Deliver { forward, distance } => {
                self.send_copies(to, &advert, forward);
                self.feed(to, Input::AdvertDelivered { advert, distance });
            }
            Verdict::Reforward { forward } => self.send_copies(to, &advert, forward),
            Verdict::Drop(_) => {}
        }
    }

    fn send_copies(
        &mut self,
        from: u32,
        advert: &Advert<u32>,
        copies: Vec<(u32, zorilla_core::advert::FloodHeader)>,
    ) {
        // Each copy tells its receiver the sender's other copies.
        let sent: Rc<[u32]> = copies.iter().map(|(to, _)| *to).collect();
        for (to, header) in copies {
            self.count(advert.job, "advert");
            let at = self.now + self.one_way(from, to);
            let copy = Advert {
                flood: header,
                ..advert.clone()
            };
            self.push(
                at,
                Event::Flood {
                    to,
                    from,
                    advert: copy,
                    also_sent: Rc::clone(&sent),
                },
            );
        }
    }

    /// Hands an input to a node's scheduler and executes what comes out.
    fn feed(&mut self, node: u32, input: Input<u32>) {
        let out = self.nodes[node as usize].scheduler.handle(self.now, input);
        self.execute(node, out);
    }

    fn execute(&mut self, node: u32, outputs: Vec<Output<u32>>) {
        for output in outputs {
            match output {
                Output::Send { to, msg } => {
                    self.count(msg.job(), kind(&msg));
                    let at = self.now + self.one_way(node, to);
                    self.push(
                        at,
                        Event::Direct {
                            to,
                            from: node,
                            msg,
                        },
                    );
                }
                Output::Flood(advert) => {
                    self.floods += 1;
                    let id = FloodId {
                        job: advert.job,
                        seq: advert.flood.seq,
                    };
                    let n = &mut self.nodes[node as usize];
                    let copies = n.router.originate(id, advert.flood, &n.neighbours);
                    self.send_copies(node, &advert, copies);
                }
                Output::StartWorkers {
                    job,
                    ranks,
                    incarnation,
                    ..
                } => {
                    self.check_start(node, job, &ranks);
                    let count = ranks.len() as u32;
                    let running = self.running.entry((node, job)).or_default();
                    running.extend(ranks.iter().map(|r| (*r, incarnation)));
                    self.used[node as usize] += count;
                    if self.used[node as usize] > self.grid.cores[node as usize] {
                        self.violations.push(format!(
                            "{:?}: node {node} runs {} workers on {} cores",
                            self.now, self.used[node as usize], self.grid.cores[node as usize]
                        ));
                    }
                    self.timeline.push((
                        self.now,
                        self.grid.site_of[node as usize],
                        i64::from(count),
                    ));
                    if let Some(record) = self.jobs.get_mut(&job) {
                        record.running += count;
                        if let Some(duration) = record.duration {
                            let at = self.now + duration;
                            self.push(at, Event::WorkersEnd { node, job });
                        }
                    }
                }
                Output::StopWorkers { job, .. } => {
                    if let Some(ranks) = self.running.remove(&(node, job)) {
                        self.workers_gone(node, job, ranks.len() as u32);
                    }
                }
                Output::Job(event) => self.job_event(event),
                // Simulated workers do not talk to each other.
                Output::PlacementChanged { .. } => {}
            }
        }
        let n = &mut self.nodes[node as usize];
        if let Some(at) = n.scheduler.next_timeout() {
            let at = at.max(self.now);
            if n.wake_at.is_none_or(|w| at < w || w < self.now) {
                n.wake_at = Some(at);
                self.push(at, Event::Wake { node });
            }
        }
    }

    fn workers_gone(&mut self, node: u32, job: JobId, count: u32) {
        self.used[node as usize] -= count;
        self.timeline.push((
            self.now,
            self.grid.site_of[node as usize],
            -i64::from(count),
        ));
        if let Some(record) = self.jobs.get_mut(&job) {
            record.running = record.running.saturating_sub(count);
        }
    }

    fn job_event(&mut self, event: JobEvent<u32>) {
        match event {
            JobEvent::Granted {
                job,
                node,
                ranks,
                replaced,
                ..
            } => {
                let now = self.now;
                if let Some(record) = self.jobs.get_mut(&job) {
                    record.replaced_ranks += replaced.len() as u32;
                    *record.placement.entry(node).or_default() += ranks.len() as u32;
                    let granted: u32 = record.placement.values().sum();
                    if granted > record.workers {
                        self.violations.push(format!(
                            "{now:?}: {job}: {granted} workers granted, max {}",
                            record.workers
                        ));
                    }
                    for rank in ranks {
                        let twice = record.ranks.values().any(|r| r.contains(&rank));
                        if twice || !record.ranks.entry(node).or_default().insert(rank) {
                            self.violations.push(format!(
                                "{now:?}: {job}: rank {rank} granted again to node {node} while \
                                 still granted"
                            ));
                        }
                    }
                }
            }
            JobEvent::Started { job, workers } => {
                let now = self.now;
                if let Some(record) = self.jobs.get_mut(&job) {
                    record.started_at = Some(now);
                    record.started_with = workers;
                    if let Some(v) = start_violation(record, workers) {
                        self.violations.push(format!("{now:?}: {job}: {v}"));
                    }
                }
            }
            JobEvent::Full { job } => {
                let now = self.now;
                let locality = self.locality(job);
                if let Some(record) = self.jobs.get_mut(&job) {
                    record.full_at = Some(now);
                    if let Some((extra, ooo)) = locality {
                        record.extra_rtt_us = Some(extra);
                        record.out_of_order = ooo;
                    }
                }
            }
            JobEvent::Ended { job, phase, reason } => {
                let now = self.now;
                if let Some(record) = self.jobs.get_mut(&job) {
                    if let Some((was, _)) = &record.ended {
                        self.violations.push(format!(
                            "{now:?}: {job}: ended {phase:?} after it ended {was:?}"
                        ));
                    }
                    record.ended = Some((phase, reason.to_string()));
                }
            }
            JobEvent::RankEnded { .. } => {}
            JobEvent::WorkersLost {
                job, node, ranks, ..
            } => {
                if let Some(record) = self.jobs.get_mut(&job) {
                    record.lost_ranks += ranks.len() as u32;
                    if let Some(granted) = record.ranks.get_mut(&node) {
                        for rank in &ranks {
                            granted.remove(rank);
                        }
                    }
                    if let Some(count) = record.placement.get_mut(&node) {
                        *count = count.saturating_sub(ranks.len() as u32);
                        if *count == 0 {
                            record.placement.remove(&node);
                        }
                    }
                }
            }
            JobEvent::Rejected { .. } => {}
        }
    }

    /// A node starts workers: the job must have started at its home (a
    /// rigid job's whole gang, a malleable job's `min`, granted), and the
    /// ranks must be ones the home granted to this node.
    fn check_start(&mut self, node: u32, job: JobId, ranks: &[u32]) {
        let Some(record) = self.jobs.get(&job) else {
            return;
        };
        let violation = if record.started_at.is_none() {
            let what = if record.is_rigid() {
                "granted the whole gang"
            } else {
                "granted its min workers"
            };
            Some(format!(
                "node {node} starts ranks {ranks:?} before the home {what}"
            ))
        } else {
            let granted = record.ranks.get(&node);
            let foreign: Vec<u32> = ranks
                .iter()
                .copied()
                .filter(|r| !granted.is_some_and(|g| g.contains(r)))
                .collect();
            (!foreign.is_empty())
                .then(|| format!("node {node} starts ranks {foreign:?} not granted to it"))
        };
        if let Some(v) = violation {
            self.violations.push(format!("{:?}: {job}: {v}", self.now));
        }
    }

    /// The oracle: the free workers nearest to the job's home right now
    /// (before this job's workers start), against where its workers went.
    /// Returns the mean extra RTT per worker (µs) and the count of workers
    /// placed while a free one nearer by more than the within-site RTT
    /// existed.
    pub fn locality(&self, job: JobId) -> Option<(f64, u32)> {
        let record = self.jobs.get(&job)?;
        let home = record.home;
        let n = record.placement.values().sum::<u32>() as usize;
        if n == 0 {
            return None;
        }
        let mut chosen: Vec<u64> = Vec::with_capacity(n);
        for (node, count) in &record.placement {
            for _ in 0..*count {
                chosen.push(self.grid.rtt_us(home, *node));
            }
        }
        chosen.sort_unstable();
        // Free workers per site (and the home's own machine), from the
        // omniscient bookkeeping; workers of this job have not started yet
        // at its home's Full event, except on the home itself.
        let home_site = self.grid.site_of[home as usize];
        let mut free_by_site = vec![0u64; self.grid.sites.len()];
        let mut free_home = 0u64;
        for (m, alive) in self.nodes.iter().map(|n| n.alive).enumerate() {
            if !alive {
                continue;
            }
            let mine = self
                .running
                .get(&(m as u32, job))
                .map_or(0, |r| r.len() as u32);
            let free = u64::from(self.grid.cores[m] - self.used[m] + mine);
            if m as u32 == home {
                free_home = free;
            } else {
                free_by_site[self.grid.site_of[m]] += free;
            }
        }
        let mut oracle: Vec<u64> = Vec::with_capacity(n);
        oracle.extend(std::iter::repeat_n(0, (free_home as usize).min(n)));
        let mut sites: Vec<usize> = (0..self.grid.sites.len()).collect();
        sites.sort_by_key(|s| self.grid.rtt_us[home_site][*s]);
        for site in sites {
            if oracle.len() >= n {
                break;
            }
            let take = (free_by_site[site] as usize).min(n - oracle.len());
            oracle.extend(std::iter::repeat_n(self.grid.rtt_us[home_site][site], take));
        }
        let within = self.grid.rtt_us[home_site][home_site];
        let extra: f64 = chosen.iter().sum::<u64>() as f64 - oracle.iter().sum::<u64>() as f64;
        let out_of_order = chosen
            .iter()
            .zip(&oracle)
            .filter(|(c, o)| **c > **o + within)
            .count() as u32;
        Some(((extra / n as f64).max(0.0), out_of_order))
    }

    fn fail(&mut self, node: u32) {
        if !self.nodes[node as usize].alive {
            return;
        }
        self.nodes[node as usize].alive = false;
        let jobs: Vec<(JobId, u32)> = self
            .running
            .range((node, JobId(0))..=(node, JobId(u64::MAX)))
            .map(|((_, job), ranks)| (*job, ranks.len() as u32))
            .collect();
        for (job, count) in jobs {
            self.running.remove(&(node, job));
            self.workers_gone(node, job, count);
        }
        if let Some(churn) = &self.scenario.churn {
            let detect = self.now + Duration::from_secs_f64(churn.detect_after_s);
            let rejoin = self.now + Duration::from_secs_f64(churn.rejoin_after_s);
            self.push(detect, Event::Detect { node });
            self.push(rejoin.max(detect), Event::Rejoin { node });
        }
    }

    /// Peers notice a failure: those linked to the node (overlay) and those
    /// sharing a job with it (direct connections).
    fn detect(&mut self, failed: u32) {
        // Nodes with a direct connection to the failed one through a job:
        // homes of jobs it ran workers for, and nodes running workers of
        // jobs it was home to.
        let mut partners = BTreeSet::new();
        for r in self.jobs.values() {
            if r.placement.contains_key(&failed) {
                partners.insert(r.home);
            }
        }
        for (node, job) in self.running.keys() {
            if self.jobs.get(job).is_some_and(|r| r.home == failed) {
                partners.insert(*node);
            }
        }
        // Ours: the connections to it close, and each keeper acts on that
        // (a neighbour is redialed, which fails, and replaced). The paper's:
        // the nodes that measured it drop it from their links.
        let knowers: BTreeSet<u32> = self.connections_fail(failed).into_iter().collect();
        for node in 0..self.nodes.len() as u32 {
            if node == failed || !self.nodes[node as usize].alive {
                continue;
            }
            let knows = knowers.contains(&node);
            if knows {
                let n = &mut self.nodes[node as usize];
                n.router.peer_lost(&failed);
                if let NodeOverlay::Paper(rtts) = &mut n.overlay {
                    rtts.remove(&failed);
                    n.neighbours.retain(|(p, _)| *p != failed);
                }
            }
            if knows || partners.contains(&node) {
                self.feed(node, Input::PeerLost(failed));
            }
        }
        let lost: Vec<JobId> = self
            .jobs
            .values()
            .filter(|r| r.placement.contains_key(&failed))
            .map(|r| r.id)
            .collect();
        for job in lost {
            if let Some(r) = self.jobs.get_mut(&job) {
                r.placement.remove(&failed);
            }
        }
    }

    fn rejoin(&mut self, node: u32) {
        if self.nodes[node as usize].alive {
            return;
        }
        let fresh = self.fresh_node(node, None);
        self.nodes[node as usize] = fresh;
        let alive: Vec<u32> = (0..self.nodes.len() as u32)
            .filter(|n| self.nodes[*n as usize].alive)
            .collect();
        match self.mode {
            Mode::Ours | Mode::OursHop => self.rejoin_ours(node, &alive),
            Mode::Paper => {
                // A Bamboo node joins with a random set of measured peers.
                let count = self.scenario.overlay.baseline_leaves + 16;
                let picks: Vec<u32> = alive
                    .choose_multiple(&mut self.rng, count)
                    .copied()
                    .collect();
                let mut neighbours = Vec::new();
                for peer in picks.into_iter().filter(|p| *p != node) {
                    let rtt = self.measured_rtt(node, peer);
                    neighbours.push((peer, rtt));
                    let back = self.sample(peer, node);
                    self.nodes[peer as usize].neighbours.push((node, back));
                }
                self.nodes[node as usize].neighbours = neighbours;
            }
        }
    }

    fn report(self, wall: Duration) -> RunReport {
        let mut violations = self.violations;
        for record in self.jobs.values() {
            let granted: u32 = record.placement.values().sum();
            if record.full_at.is_some() && record.ended.is_none() && granted > record.workers {
                violations.push(format!("{}: over its max", record.id));
            }
        }
        RunReport {
            scenario: self.scenario.name.clone(),
            mode: self.mode,
            seed: self.seed,
            sites: self.grid.sites.clone(),
            jobs: self.jobs.into_values().collect(),
            messages: self.messages,
            by_kind: self.by_kind,
            floods: self.floods,
            events: self.events,
            wall,
            end: self.now,
            timeline: self.timeline,
            violations,
        }
    }

    /// Workers held (offered, neither granted nor released) across the
    /// grid: zero once every job has been allocated, ended or expired and
    /// every hold has been answered or timed out.
    pub fn held_workers(&self) -> u32 {
        self.nodes
            .iter()
            .filter(|n| n.alive)
            .map(|n| n.scheduler.held_workers())
            .sum()
    }

    /// The current simulated time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Executes `outputs` as if `node`'s scheduler had just produced them.
    /// For tests that the invariant checks catch a scheduler that
    /// misbehaves; a correct run never needs it.
    pub fn inject(&mut self, node: u32, outputs: Vec<Output<u32>>) {
        self.execute(node, outputs);
    }

    /// A node's scheduler, to change behind the simulator's back: what it
    /// outputs is not executed and no wake-up is scheduled for it. For tests
    /// of the invariant checks, like [`inject`](Self::inject).
    pub fn scheduler_mut(&mut self, node: u32) -> &mut Scheduler<u32> {
        &mut self.nodes[node as usize].scheduler
    }

    /// The neighbours of every node (for overlay checks).
    pub fn overlay(&self) -> Vec<Vec<u32>> {
        self.nodes
            .iter()
            .map(|n| n.neighbours.iter().map(|(p, _)| *p).collect())
            .collect()
    }

    /// Whether `node` is up (not failed, or rejoined).
    pub fn is_alive(&self, node: u32) -> bool {
        self.nodes.get(node as usize).is_some_and(|n| n.alive)
    }

    /// The grid.
    pub fn grid(&self) -> &Grid {
        &self.grid
    }
}

/// What is wrong with a job starting with `workers` workers, if anything:
/// a rigid job starts with all its workers, a malleable one with at least
/// `min` and at most `max`, and the ranks granted are exactly `0..workers`.
fn start_violation(record: &JobRecord, workers: u32) -> Option<String> {
    let (min, max) = (record.min_workers, record.workers);
    if record.is_rigid() && workers != max {
        return Some(format!("rigid job of {max} started with {workers} workers"));
    }
    if workers < min || workers > max {
        return Some(format!(
            "malleable job of {min}..={max} started with {workers} workers"
        ));
    }
    let mut ranks: Vec<u32> = record.ranks.values().flatten().copied().collect();
    ranks.sort_unstable();
    if !ranks.iter().copied().eq(0..workers) {
        return Some(format!(
            "started with {workers} workers but ranks {ranks:?} granted, not 0..{workers}"
        ));
    }
    None
}

/// Runs a scenario's workload (not a sweep) once, with `mode` and `seed`.
pub fn run_scenario(scenario: &Scenario, mode: Mode, seed: u64) -> anyhow::Result<RunReport> {
    let grid = scenario.grid(seed)?;
    let plans = plan_jobs(scenario, &grid, seed);
    Ok(Sim::new(scenario, mode, seed, plans)?.run())
}

/// The jobs of a scenario's workload (not a sweep), drawn from `seed`.
pub fn plan_jobs(scenario: &Scenario, grid: &Grid, seed: u64) -> Vec<JobPlan> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0b5e_55ed);
    let w = &scenario.workload;
    let homes: Vec<u32> = match &w.home_site {
        Some(site) => {
            let site = grid.site(site).unwrap_or(0);
            (0..grid.len() as u32)
                .filter(|m| grid.site_of[*m as usize] == site)
                .collect()
        }
        None => (0..grid.len() as u32).collect(),
    };
    // A fixed home for a home site: its first machine.
    let fixed_home = w.home_site.as_ref().map(|_| homes[0]);
    let mut at = 0.0;
    (0..w.jobs)
        .map(|i| {
            if i > 0 {
                at += if w.poisson {
                    let u: f64 = rng.random_range(f64::EPSILON..1.0);
                    -u.ln() * w.interval_s
                } else {
                    w.interval_s
                };
            }
            let workers = rng.random_range(w.workers.0..=w.workers.1.max(w.workers.0));
            // Drawn only when some jobs are malleable, so that all-rigid
            // workloads keep their random streams.
            let malleable = w.malleable > 0.0 && rng.random::<f64>() < w.malleable;
            let min = if malleable {
                ((f64::from(workers) * w.malleable_min).ceil() as u32).clamp(1, workers)
            } else {
                workers
            };
            let duration = w
                .duration_s
                .map(|(lo, hi)| Duration::from_secs_f64(rng.random_range(lo..=hi.max(lo))));
            let home = fixed_home.unwrap_or_else(|| *homes.choose(&mut rng).unwrap_or(&0));
            JobPlan {
                at: Duration::from_secs_f64(at),
                home,
                spec: JobSpec {
                    per_worker: Resources::new(1, 0, 0),
                    workers: WorkerCount { min, max: workers },
                    strategy: w.strategy,
                    lifetime: Duration::from_secs_f64(w.lifetime_s),
                    on_worker_lost: LostPolicy::Replace,
                },
                duration,
            }
        })
        .collect()
}

/// One job of `n` workers with `strategy` at the workload's home, as in the
/// P2P-MPI sweep.
pub fn sweep_job(scenario: &Scenario, grid: &Grid, n: u32, strategy: Strategy) -> JobPlan {
    let site = scenario
        .workload
        .home_site
        .as_ref()
        .and_then(|s| grid.site(s))
        .unwrap_or(0);
    let home = (0..grid.len() as u32)
        .find(|m| grid.site_of[*m as usize] == site)
        .unwrap_or(0);
    JobPlan {
        at: Time::ZERO,
        home,
        spec: JobSpec {
            per_worker: Resources::new(1, 0, 0),
            workers: WorkerCount::rigid(n),
            strategy,
            lifetime: Duration::from_secs_f64(scenario.workload.lifetime_s),
            on_worker_lost: LostPolicy::Fail,
        },
        duration: None,
    }
}

/// Shuffles for tests that want a random order.
pub fn shuffled<T>(mut items: Vec<T>, seed: u64) -> Vec<T> {
    items.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    items
}

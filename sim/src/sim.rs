//! The discrete-event grid simulator: thousands of nodes, each running the
//! real core (the node's [`JobMachine`](zorilla_core::machine::JobMachine):
//! scheduler, rank liveness, replicated job logs; the [`FloodRouter`]; and
//! in our overlay the real peer keeping, [`PeerKeeper`]), over a simulated
//! network.
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
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use zorilla_core::Time;
use zorilla_core::advert::{Advert, JobId, Message};
use zorilla_core::flood::{FloodConfig, FloodId, FloodRouter, Verdict};
use zorilla_core::liveness::{Answer, Question};
use zorilla_core::machine::Input as MInput;
use zorilla_core::neighbours::keeper::PeerKeeper;
use zorilla_core::node::{
    EndReason, Input, JobEvent, Output, OwnerLimits, Phase, Scheduler, SchedulerConfig,
};
use zorilla_core::resources::{REFERENCE_SPEED, Resources};
use zorilla_core::runs::ResultDigest;

use crate::scenario::{Grid, Scenario};
use node_overlay::NodeOverlay;
use record::start_violation;

pub use contention_model::alpha;
pub use failover_report::{FailoverConfig, FailoverReport, STOP_BOUND, Takeover};
pub use mode::Mode;
pub use record::{JobPlan, JobRecord, RunEnd, RunReport, WorkerRun};
pub use workload::{plan_jobs, shuffled, sweep_job};

mod bamboo;
mod churn;
mod contention;
mod contention_model;
mod coords;
mod failover;
mod failover_churn;
mod failover_report;
mod invariants;
mod mode;
mod node_overlay;
mod oracle;
mod peers;
mod record;
mod workload;

/// Processing time a node spends per message, added to every hop.
const PROCESSING: Duration = Duration::from_micros(10);

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
        /// Which schedule of the machine's ends this is (see
        /// `contention`; always 0 in the plain model).
        generation: u64,
        /// Which of them: every worker of the job there (`None`), or one
        /// task of a job array (tasks end on their own).
        task: Option<u32>,
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
    /// Failover: a replica message of a job between two nodes (with the
    /// job's copy when its sender sent it).
    Replica {
        to: u32,
        from: u32,
        job: JobId,
        msg: failover::ReplicaMsg,
        copy: Option<failover::SimCopy>,
    },
    /// A home asks a node which of its ranks run there.
    RanksAsked {
        to: u32,
        from: u32,
        question: Question,
    },
    /// The node's answer.
    RanksAnswered {
        to: u32,
        from: u32,
        answer: Answer,
    },
    /// Failover: a member reports again the ends not acknowledged yet.
    ReportRetry {
        node: u32,
        job: JobId,
    },
    /// Failover: a job's primary acknowledges a rank's end to its member.
    RankAck {
        to: u32,
        from: u32,
        job: JobId,
        rank: u32,
        incarnation: u32,
    },
    /// Failover: the home of a running job fails.
    FailHome,
    /// A node is cut off from every other (it runs on).
    Isolate {
        node: u32,
    },
    /// A node cut off reaches the others again.
    Heal {
        node: u32,
    },
    /// Our overlay: one second of `node`'s peer keeping (its pings, then
    /// its keeper's tick), as the real overlay's timer runs it.
    KeeperTick {
        node: u32,
    },
    /// Our overlay: `node`'s pings of one ping interval, which go on
    /// during the whole run as in the real overlay (its network coordinate
    /// learns from them).
    PingRound {
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
    /// This run of the node (a fresh one at every rejoin), and since when
    /// it runs: what it tells homes that ask which ranks run here.
    boot: u64,
    since: Time,
    /// The node's part in jobs: the same machine the node runs.
    machine: failover::Machine,
    /// The links its machine was last told of (see `tell_links`).
    links_told: Vec<u32>,
    router: FloodRouter<u32>,
    /// Ours: the peer keeping; the paper's: the measured RTTs.
    overlay: NodeOverlay,
    /// The links floods go to, with their measured RTT: ours, the
    /// neighbours this node chose and the nodes that chose it (a link is a
    /// connection, and works both ways); the paper's, its Bamboo links.
    neighbours: Vec<(u32, Duration)>,
    wake_at: Option<Time>,
    /// Our overlay, while the keeper ticks during the run: since when it
    /// has been connected to no failed peer.
    quiet_since: Option<Time>,
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
    /// Per node, its `alive`: the peer keeping reads it for one peer after
    /// another, and a node's whole `SimNode` is a cache miss each.
    up: Vec<bool>,
    heap: BinaryHeap<Reverse<Scheduled>>,
    seq: u64,
    now: Time,
    plans: Vec<JobPlan>,
    jobs: BTreeMap<JobId, JobRecord>,
    /// Ranks running on each machine, per job, with their incarnations
    /// (omniscient bookkeeping).
    running: BTreeMap<(u32, JobId), BTreeMap<u32, u32>>,
    /// When the workers in `running` started, per machine and job (the
    /// first start since none ran there): what a preemption wastes.
    since: BTreeMap<(u32, JobId), Time>,
    /// Times each job's workers were preempted on each machine: the
    /// plain model's end events carry the count they were scheduled
    /// under, so that the end of preempted workers does not end a
    /// replacement that started there since.
    preemptions: BTreeMap<(u32, JobId), u64>,
    used: Vec<u32>,
    /// Memory the workers running on each machine need together (MiB).
    memory_used: Vec<u64>,
    /// The work left of the workers running on each machine, per job and,
    /// for a job array, per task (only when workers run by work, speed and
    /// contention: `contention`).
    work: BTreeMap<(u32, JobId, Option<u32>), contention_model::Work>,
    /// When each machine's work was last settled.
    settled_at: Vec<Time>,
    /// Per machine, when workers ended there lately and how many: the
    /// oracle does not count cores free before news of them could have
    /// reached the home (see `judge_grant`).
    freed: Vec<VecDeque<(Time, u32)>>,
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
    /// Per node, the ids of its open connections, ascending (so that a
    /// failure does not search every connection of the grid).
    node_connections: Vec<Vec<u64>>,
    /// Per node, the nodes that opened a connection with it since its
    /// last failure was noticed (with repeats): only they can have
    /// measured it (see `peers::connections_fail`).
    met: Vec<Vec<u32>>,
    next_connection: u64,
    /// Keeper ticks in the heap: they go on only while other events do.
    keeper_ticks: usize,
    /// Ping rounds in the heap: they go on only while other events do.
    ping_rounds: usize,
    /// Per node: the ping rounds it has left (see `peers`).
    ping_rounds_left: Vec<usize>,
    /// Per node: the phase of its keeper's ticks within a ping interval
    /// (drawn from the seed), and whether its ticks are scheduled (only
    /// while it watches a silent peer, see `peers`).
    keeper_phase: Vec<Duration>,
    keeper_ticking: Vec<bool>,
    /// Home jobs replicated (issue 16), if the run does.
    failover: Option<Box<failover::Failover>>,
    /// Nodes that lie about their workers' results, each with the share of
    /// its workers it lies about ([`Sim::with_liars`]), and the draws.
    liars: BTreeMap<u32, f64>,
    lies: ChaCha8Rng,
    /// Nodes cut off from every other.
    isolated: BTreeSet<u32>,
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
            liars: BTreeMap::new(),
            lies: ChaCha8Rng::seed_from_u64(seed ^ 0x11e5),
            nodes: Vec::with_capacity(grid.len()),
            up: vec![true; grid.len()],
            heap: BinaryHeap::new(),
            seq: 0,
            now: Time::ZERO,
            plans,
            jobs: BTreeMap::new(),
            running: BTreeMap::new(),
            since: BTreeMap::new(),
            preemptions: BTreeMap::new(),
            used: vec![0; grid.len()],
            memory_used: vec![0; grid.len()],
            work: BTreeMap::new(),
            settled_at: vec![Time::ZERO; grid.len()],
            freed: vec![VecDeque::new(); grid.len()],
            messages: 0,
            by_kind: BTreeMap::new(),
            floods: 0,
            events: 0,
            timeline: Vec::new(),
            violations: Vec::new(),
            until: Duration::from_secs_f64(scenario.until_s),
            epoch: Duration::ZERO,
            connections: BTreeMap::new(),
            node_connections: Vec::new(),
            met: Vec::new(),
            next_connection: 0,
            keeper_ticks: 0,
            ping_rounds: 0,
            ping_rounds_left: Vec::new(),
            keeper_phase: Vec::new(),
            keeper_ticking: Vec::new(),
            failover: None,
            isolated: BTreeSet::new(),
            grid,
        };
        if let Some(setup) = &scenario.failover {
            sim.enable_failover(FailoverConfig {
                degree: setup.degree,
                ..FailoverConfig::default()
            });
        }
        for node in 0..sim.grid.len() as u32 {
            let fresh = sim.fresh_node(node, max_workers_per_job);
            sim.nodes.push(fresh);
        }
        if mode.our_overlay() {
            sim.node_connections = vec![Vec::new(); sim.grid.len()];
            sim.met = vec![Vec::new(); sim.grid.len()];
            sim.build_overlay_ours();
            sim.keeper_phases();
            sim.start_ping_rounds();
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
        if let Some(setup) = sim.scenario.failover.clone()
            && setup.home_failures_per_s > 0.0
        {
            let mut t = 0.0;
            loop {
                let u: f64 = sim.rng.random_range(f64::EPSILON..1.0);
                t += -u.ln() / setup.home_failures_per_s;
                if t >= scenario.until_s {
                    break;
                }
                sim.push(Duration::from_secs_f64(t), Event::FailHome);
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
            // What the machine's owner would configure: its speed against
            // the reference machine's.
            speed: (self.grid.speed[node as usize] * f64::from(REFERENCE_SPEED)).round() as u32,
            prefer: self.mode.prefer(),
            fair_share: self.mode.fair_share(),
            seed: self.seed ^ u64::from(node).rotate_left(32),
            ..SchedulerConfig::default()
        };
        let overlay = if self.mode.our_overlay() {
            let seed = self.seed ^ u64::from(node).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let now = self.epoch + self.now;
            NodeOverlay::Ours(Box::new(PeerKeeper::new(self.keeper_config(), seed, now)))
        } else {
            NodeOverlay::Paper(BTreeMap::new())
        };
        let machine = failover::Machine::new(
            node,
            config,
            self.machine_config(),
            std::sync::Arc::new(zorilla_core::replica::StandInSigner::new(node)),
        );
        SimNode {
            alive: true,
            boot: self.seq,
            since: self.now,
            machine,
            links_told: Vec::new(),
            router: FloodRouter::new(FloodConfig {
                // The paper's nodes flood to every neighbour but the sender.
                prune: self.mode.our_overlay(),
                ..FloodConfig::default()
            }),
            overlay,
            neighbours: Vec::new(),
            wake_at: None,
            quiet_since: None,
        }
    }

    /// One RTT sample between two machines, as a node would measure it.
    fn sample(&mut self, a: u32, b: u32) -> Duration {
        let rtt = self.grid.rtt_us(a, b) as f64;
        let noise = 1.0 + self.scenario.latency.jitter * self.rng.random::<f64>();
        Duration::from_nanos((rtt * noise * 1000.0) as u64)
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

    /// The same run with `liars`: each of these nodes reports a made-up
    /// result digest for this share (0 to 1) of its workers, drawn per
    /// worker (the test-only lying node of the real one, `test-corrupt`,
    /// made partial). Every other worker's digest is its job's and rank's
    /// own, the same on every node.
    pub fn with_liars(mut self, liars: BTreeMap<u32, f64>) -> Self {
        self.liars = liars;
        self
    }

    /// The digest `from` reports for `rank` of `job`, and whether it lied
    /// (recorded in the job's `reports` when the run has liars).
    pub(super) fn result_digest(&mut self, job: JobId, from: u32, rank: u32) -> ResultDigest {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&job.0.to_le_bytes());
        bytes[8..12].copy_from_slice(&rank.to_le_bytes());
        if self.liars.is_empty() {
            return ResultDigest(bytes);
        }
        let share = self.liars.get(&from).copied().unwrap_or(0.0);
        let lied = share > 0.0 && self.lies.random::<f64>() < share;
        if lied {
            // A made-up result: the liar's own, never the honest one.
            bytes[12..16].copy_from_slice(&from.to_le_bytes());
            bytes[16] = 1;
        }
        if let Some(record) = self.jobs.get_mut(&job) {
            record.reports.entry(rank).or_default().push((from, lied));
        }
        ResultDigest(bytes)
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
                if self.reachable(from, to) {
                    // What the real node gives the core: its overlay's
                    // smoothed RTT to the sender when it measured it, else
                    // one sample (the connection the message came on is
                    // measured at once).
                    let measured = self.nodes[to as usize].overlay.rtt(&from);
                    let rtt = measured.unwrap_or_else(|| self.sample(to, from));
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
                    let out = n.machine.handle_timeout(self.now);
                    self.execute(node, out);
                }
            }
            Event::Submit { job } => self.submit(job),
            Event::WorkersEnd {
                node,
                job,
                generation,
                task,
            } => {
                if !self.current_end(node, job, task, generation) {
                    return true;
                }
                if let Some(ranks) = self.take_running(node, job, task) {
                    let ended: Vec<u32> = ranks.keys().copied().collect();
                    self.workers_gone(node, job, &ended, task, RunEnd::Completed);
                    self.feed(node, Input::WorkersEnded { job, ranks: ended });
                    if self.failover.is_some() {
                        // Reported to the primary until it acknowledges.
                        self.failover_workers_ended(node, job, &ranks);
                        return true;
                    }
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
            } => self.report_received(home, from, job, rank, incarnation),
            Event::Fail { node } => self.fail(node),
            Event::Detect { node } => self.detect(node),
            Event::Rejoin { node } => self.rejoin(node),
            Event::KeeperTick { node } => self.keeper_tick(node),
            Event::PingRound { node } => self.ping_round(node),
            Event::Replica {
                to,
                from,
                job,
                msg,
                copy,
            } => self.replica_message(to, from, job, msg, copy),
            Event::RanksAsked { to, from, question } => self.ranks_asked(to, from, question),
            Event::RanksAnswered { to, from, answer } => {
                if self.reachable(from, to) {
                    self.feed_machine(to, MInput::RanksAnswered { node: from, answer });
                }
            }
            Event::ReportRetry { node, job } => self.report_retry(node, job),
            Event::RankAck {
                to,
                from,
                job,
                rank,
                incarnation,
            } => self.ack_received(to, from, job, rank, incarnation),
            Event::FailHome => self.fail_a_home(),
            Event::Isolate { node } => self.isolate(node),
            Event::Heal { node } => {
                self.isolated.remove(&node);
            }
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
                tasks: plan.spec.tasks.map(|t| t.count),
                submitted: self.now,
                started_at: None,
                started_with: 0,
                full_at: None,
                placement: BTreeMap::new(),
                out_of_order: 0,
                messages: 0,
                ended: None,
                lost_ranks: 0,
                replaced_ranks: 0,
                preempted_workers: 0,
                preempted_work_s: 0.0,
                running: 0,
                duration: plan.duration,
                memory_mib: plan.spec.per_worker.memory_mib,
                ended_at: None,
                ranks: BTreeMap::new(),
                granting: BTreeMap::new(),
                started: BTreeMap::new(),
                judged_extra_us: 0.0,
                judged_workers: 0,
                runs: Vec::new(),
                open_runs: BTreeMap::new(),
                reports: BTreeMap::new(),
                caught: Vec::new(),
                replica_messages: 0,
                home_moves: 0,
            },
        );
        if !self.nodes[plan.home as usize].alive {
            if let Some(r) = self.jobs.get_mut(&id) {
                r.ended = Some((Phase::Failed, "home node was down at submission".into()));
            }
            return;
        }
        self.failover_submit(plan.home, id);
        // What the real node's scheduler hears from its overlay: how far
        // the peers it measured are.
        let max_known = self.keeper_config().neighbours.max_known;
        let node = &mut self.nodes[plan.home as usize];
        if let NodeOverlay::Ours(keeper) = &node.overlay {
            let table = keeper.table();
            let every_peer = table.known_len() < max_known;
            let distances = table.known().map(|(_, rtt)| rtt).collect();
            self.feed_machine(
                plan.home,
                MInput::PeerDistances {
                    distances,
                    every_peer,
                },
            );
        }
        // A plan outside the scheduler's limits is refused at the door,
        // as a node refuses a client's: its job never runs.
        let Ok(spec) = self.nodes[plan.home as usize].machine.admit(plan.spec) else {
            return;
        };
        self.feed_machine(
            plan.home,
            MInput::Submit {
                owner: None,
                job: id,
                spec,
            },
        );
    }

    fn on_flood(&mut self, to: u32, from: u32, advert: Advert<u32>, also_sent: &[u32]) {
        if !self.nodes[to as usize].alive
            || self.isolated.contains(&to)
            || self.isolated.contains(&from)
        {
            return;
        }
        let id = FloodId {
            job: advert.job,
            seq: advert.flood.seq,
        };
        let distances = self.home_distances(to, &advert);
        let node = &mut self.nodes[to as usize];
        let verdict = node.router.receive_with(
            &from,
            id,
            advert.flood,
            also_sent,
            &distances,
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

    /// Sends a scheduling message from `node` to `to` now.
    fn send_now(&mut self, node: u32, to: u32, msg: Message<u32>) {
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

    /// Hands a scheduling input to a node's machine and executes what comes
    /// out.
    fn feed(&mut self, node: u32, input: Input<u32>) {
        self.feed_machine(node, MInput::Sched(input));
    }

    /// Hands an input to a node's machine and executes what comes out.
    fn feed_machine(&mut self, node: u32, input: failover::MachineInput) {
        let out = self.nodes[node as usize].machine.handle(self.now, input);
        self.execute(node, out);
    }

    fn execute(&mut self, node: u32, outputs: Vec<failover::MachineOutput>) {
        // A home's grants are judged once the call's outputs are executed:
        // its own workers of the grant have started then, the others not.
        let mut granted_jobs: Vec<JobId> = Vec::new();
        let mut taken_over: Vec<JobId> = Vec::new();
        for output in outputs {
            let output = match output {
                failover::MachineOutput::Sched(output) => output,
                other => {
                    taken_over.extend(self.machine_output(node, other));
                    continue;
                }
            };
            if let Output::Job(JobEvent::Granted { job, .. }) = &output
                && !granted_jobs.contains(job)
            {
                granted_jobs.push(*job);
            }
            match output {
                Output::Send { to, msg } => self.send_now(node, to, msg),
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
                    home,
                    ranks,
                    incarnation,
                    ..
                } => {
                    self.workers_started(node, job, home, incarnation);
                    self.check_start(node, job, &ranks);
                    let count = ranks.len() as u32;
                    let model = self.work_model();
                    if model {
                        self.settle(node);
                    }
                    let running = self.running.entry((node, job)).or_default();
                    if running.is_empty() {
                        self.since.insert((node, job), self.now);
                    }
                    running.extend(ranks.iter().map(|r| (*r, incarnation)));
                    self.used[node as usize] += count;
                    let memory = self.jobs.get(&job).map_or(0, |r| r.memory_mib);
                    self.memory_used[node as usize] += memory * u64::from(count);
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
                        record.started.entry(node).or_default().extend(&ranks);
                        for &rank in &ranks {
                            record.open_runs.insert((node, rank), record.runs.len());
                            record.runs.push(WorkerRun {
                                node,
                                rank,
                                started: self.now,
                                ended: None,
                            });
                        }
                        // A job's workers on a machine end together; an
                        // array's tasks each on their own.
                        let groups: Vec<Option<u32>> = if record.tasks.is_some() {
                            ranks.iter().map(|r| Some(*r)).collect()
                        } else {
                            vec![None]
                        };
                        match record.duration {
                            Some(work) if model => {
                                for task in groups {
                                    self.add_work(node, job, task, work);
                                }
                            }
                            Some(duration) => {
                                let at = self.now + duration;
                                let generation =
                                    self.preemptions.get(&(node, job)).copied().unwrap_or(0);
                                for task in groups {
                                    let end = Event::WorkersEnd {
                                        node,
                                        job,
                                        generation,
                                        task,
                                    };
                                    self.push(at, end);
                                }
                            }
                            None => {}
                        }
                    }
                    if model {
                        self.reschedule(node);
                    }
                }
                Output::StopWorkers { job, .. } => {
                    if let Some(ranks) = self.running.remove(&(node, job)) {
                        let ranks: Vec<u32> = ranks.into_keys().collect();
                        self.workers_gone(node, job, &ranks, None, RunEnd::Stopped);
                    }
                }
                // Stopped for a creditor's job: gone from the node as
                // when their job stops them (the home was told, and
                // replaces them), and what they had run is counted lost.
                Output::Preempted { job, .. } => {
                    if let Some(ranks) = self.running.remove(&(node, job)) {
                        let count = ranks.len() as u32;
                        let since = self.since.remove(&(node, job)).unwrap_or(self.now);
                        *self.preemptions.entry((node, job)).or_default() += 1;
                        if let Some(record) = self.jobs.get_mut(&job) {
                            record.preempted_workers += count;
                            record.preempted_work_s +=
                                f64::from(count) * self.now.saturating_sub(since).as_secs_f64();
                        }
                        let ranks: Vec<u32> = ranks.into_keys().collect();
                        self.workers_gone(node, job, &ranks, None, RunEnd::Stopped);
                    }
                }
                Output::Job(event) => {
                    if self.job_event_seen(node, &event) {
                        self.job_event(event);
                    }
                }
                // Simulated workers do not talk to each other; a placement
                // from a new home moves the job there (failover).
                Output::PlacementChanged {
                    job,
                    home,
                    phase,
                    placement,
                    ..
                } => self.placement_heard(node, job, home, phase, &placement),
            }
        }
        for job in granted_jobs {
            self.judge_grant(node, job);
        }
        for job in taken_over {
            self.after_takeover(node, job);
        }
        let n = &mut self.nodes[node as usize];
        if let Some(at) = n.machine.next_timeout() {
            let at = at.max(self.now);
            if n.wake_at.is_none_or(|w| at < w || w < self.now) {
                n.wake_at = Some(at);
                self.push(at, Event::Wake { node });
            }
        }
    }

    /// The running ranks of `job` on `node` that end: all of them, or
    /// one task of an array (`None` if none ran).
    fn take_running(
        &mut self,
        node: u32,
        job: JobId,
        task: Option<u32>,
    ) -> Option<BTreeMap<u32, u32>> {
        let Some(task) = task else {
            return self.running.remove(&(node, job));
        };
        let ranks = self.running.get_mut(&(node, job))?;
        let incarnation = ranks.remove(&task)?;
        if ranks.is_empty() {
            self.running.remove(&(node, job));
        }
        Some(BTreeMap::from([(task, incarnation)]))
    }

    /// Workers `ranks` of `job` on `node` are gone, `how`: every worker
    /// of the job there (`task` `None`), or one task of an array.
    fn workers_gone(
        &mut self,
        node: u32,
        job: JobId,
        ranks: &[u32],
        task: Option<u32>,
        how: RunEnd,
    ) {
        let count = ranks.len() as u32;
        let now = self.now;
        if let Some(record) = self.jobs.get_mut(&job) {
            for rank in ranks {
                if let Some(i) = record.open_runs.remove(&(node, *rank)) {
                    record.runs[i].ended = Some((now, how));
                }
            }
        }
        let model = self.work_model();
        if model {
            self.settle(node);
        }
        self.used[node as usize] -= count;
        let memory = self.jobs.get(&job).map_or(0, |r| r.memory_mib);
        let memory_used = &mut self.memory_used[node as usize];
        *memory_used = memory_used.saturating_sub(memory * u64::from(count));
        if model {
            self.drop_work(node, job, task);
            self.reschedule(node);
        }
        let freed = &mut self.freed[node as usize];
        // News travels well under a second here (RTTs are bounded far
        // below that): keep no older ends.
        while freed
            .front()
            .is_some_and(|(at, _)| *at + Duration::from_secs(1) < self.now)
        {
            freed.pop_front();
        }
        freed.push_back((self.now, count));
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
                    *record.granting.entry(node).or_default() += ranks.len() as u32;
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
                if let Some(record) = self.jobs.get_mut(&job) {
                    record.full_at = Some(now);
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
                    if let EndReason::TasksDone { caught, .. } = &reason {
                        record.caught.clone_from(caught);
                    }
                    record.ended = Some((phase, reason.to_string()));
                    record.ended_at = Some(now);
                }
            }
            // An array's ended task is granted no more: its node may
            // take the next one.
            JobEvent::RankEnded {
                job, node, rank, ..
            } => {
                if let Some(record) = self.jobs.get_mut(&job)
                    && record.tasks.is_some()
                    && record.ranks.get_mut(&node).is_some_and(|g| g.remove(&rank))
                    && let Some(count) = record.placement.get_mut(&node)
                {
                    *count = count.saturating_sub(1);
                    if *count == 0 {
                        record.placement.remove(&node);
                    }
                }
            }
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
            // The ranks a rollback stopped are granted no more (the
            // simulated jobs do not checkpoint).
            JobEvent::RolledBack { job, stopped, .. } => {
                if let Some(record) = self.jobs.get_mut(&job) {
                    for granted in record.ranks.values_mut() {
                        granted.retain(|rank| !stopped.contains(rank));
                    }
                    record.ranks.retain(|_, granted| !granted.is_empty());
                    record.placement = record
                        .ranks
                        .iter()
                        .map(|(node, granted)| (*node, granted.len() as u32))
                        .collect();
                }
            }
            JobEvent::Rejected { .. } | JobEvent::Checkpointed { .. } => {}
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

    fn report(self, wall: Duration) -> RunReport {
        let coordinate_error = self.coordinate_error();
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
            coordinate_error,
        }
    }

    /// Workers held (offered, neither granted nor released) across the
    /// grid: zero once every job has been allocated, ended or expired and
    /// every hold has been answered or timed out.
    pub fn held_workers(&self) -> u32 {
        self.nodes
            .iter()
            .filter(|n| n.alive)
            .map(|n| n.machine.scheduler().held_workers())
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
        self.execute(
            node,
            outputs
                .into_iter()
                .map(failover::MachineOutput::Sched)
                .collect(),
        );
    }

    /// Hands `input` to `node`'s machine now, as its driver would, and
    /// executes what comes out (for tests: a user's cancel, say).
    pub fn input(&mut self, node: u32, input: Input<u32>) {
        self.feed(node, input);
    }

    /// A node's scheduler, to look at.
    pub fn scheduler(&self, node: u32) -> &Scheduler<u32> {
        self.nodes[node as usize].machine.scheduler()
    }

    /// A node's scheduler, to change behind the simulator's back: what it
    /// outputs is not executed and no wake-up is scheduled for it. For tests
    /// of the invariant checks, like [`inject`](Self::inject).
    pub fn scheduler_mut(&mut self, node: u32) -> &mut Scheduler<u32> {
        self.nodes[node as usize]
            .machine
            .scheduler_behind_the_back()
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

/// Runs a scenario's workload (not a sweep) once, with `mode` and `seed`.
pub fn run_scenario(scenario: &Scenario, mode: Mode, seed: u64) -> anyhow::Result<RunReport> {
    let grid = scenario.grid(seed)?;
    let plans = plan_jobs(scenario, &grid, seed);
    Ok(Sim::new(scenario, mode, seed, plans)?.run())
}

//! Machines wired together with instant delivery: the commit rule of grants
//! and of rank ends, a copy taking a silent home's job over, an invitation
//! that does not prove the job's origin.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::advert::{Message, Strategy, WorkerCount};
use crate::node::{JobSpec, LostPolicy, Output as SchedOutput};
use crate::replica::StandInSigner;
use crate::resources::Resources;
use crate::schedule::ScheduleConfig;

const JOB: JobId = JobId(7);
const HOME: u32 = 0;

/// A job's copy in these tests: it names the job's first home.
#[derive(Debug, Clone, PartialEq)]
struct Copy(Option<u32>);

impl Origin<u32> for Copy {
    fn first_home(&self, _job: JobId) -> Option<u32> {
        self.0
    }
}

type M = JobMachine<u32, u32, Copy>;
type Out = Output<u32, u32, Copy>;

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn machine(id: u32, cores: u32) -> M {
    let sched = SchedulerConfig {
        resources: Resources::new(cores, 1000, 0),
        schedule: ScheduleConfig::paper(),
        ..SchedulerConfig::default()
    };
    JobMachine::new(
        id,
        sched,
        MachineConfig::default(),
        Arc::new(StandInSigner::new(id)),
    )
}

fn spec(workers: u32) -> JobSpec {
    JobSpec {
        runs: 1,
        per_worker: Resources::new(1, 100, 0),
        workers: WorkerCount {
            min: workers,
            max: workers,
        },
        strategy: Strategy::Spread,
        lifetime: Duration::from_secs(600),
        on_worker_lost: LostPolicy::Fail,
        kind: crate::advert::WorkKind::Wasm,
        priority: 0,
        tasks: None,
    }
}

/// Machines with instant, in-order delivery; a node taken down neither
/// hears nor says anything. Replica messages can be held back, to see what
/// waits for them.
struct Grid {
    nodes: BTreeMap<u32, M>,
    down: BTreeSet<u32>,
    now: Duration,
    queue: VecDeque<(u32, Input<u32, u32, Copy>)>,
    /// Every output, with the node it came from.
    log: Vec<(u32, Out)>,
    hold_replica: bool,
    held: Vec<(u32, Input<u32, u32, Copy>)>,
}

impl Grid {
    /// A home with no cores of its own and `members` nodes of one core.
    fn new(members: u32) -> Grid {
        let mut nodes = BTreeMap::new();
        nodes.insert(HOME, machine(HOME, 0));
        for id in 1..=members {
            nodes.insert(id, machine(id, 1));
        }
        Grid {
            nodes,
            down: BTreeSet::new(),
            now: Duration::ZERO,
            queue: VecDeque::new(),
            log: Vec::new(),
            hold_replica: false,
            held: Vec::new(),
        }
    }

    fn input(&mut self, node: u32, input: Input<u32, u32, Copy>) {
        self.queue.push_back((node, input));
        self.pump();
    }

    fn pump(&mut self) {
        for _ in 0..100_000 {
            let Some((node, input)) = self.queue.pop_front() else {
                return;
            };
            if self.down.contains(&node) {
                continue;
            }
            let out = self.nodes.get_mut(&node).unwrap().handle(self.now, input);
            self.route(node, out);
        }
        panic!("the grid never settled");
    }

    fn route(&mut self, from: u32, out: Vec<Out>) {
        for output in out {
            match &output {
                Output::Sched(SchedOutput::Send { to, msg }) => self.queue.push_back((
                    *to,
                    Input::Sched(crate::node::Input::Message {
                        from,
                        msg: msg.clone(),
                        rtt: Some(ms(1)),
                    }),
                )),
                Output::Sched(SchedOutput::Flood(advert)) => {
                    for to in self.nodes.keys().filter(|n| **n != from) {
                        let input = crate::node::Input::AdvertDelivered {
                            advert: advert.clone(),
                            distance: ms(1),
                        };
                        self.queue.push_back((*to, Input::Sched(input)));
                    }
                }
                // A member holds a copy once it takes the grant.
                Output::Sched(SchedOutput::StartWorkers { job, home, .. }) if *home != from => {
                    let input = Input::Granted {
                        job: *job,
                        home: *home,
                        copy: Copy(Some(HOME)),
                    };
                    self.queue.push_back((from, input));
                }
                Output::Replica {
                    to,
                    job,
                    msg,
                    with_copy,
                } => {
                    let input = Input::Replica {
                        from,
                        job: *job,
                        msg: msg.clone(),
                        copy: with_copy.then_some(Copy(Some(HOME))),
                    };
                    if self.hold_replica {
                        self.held.push((*to, input));
                    } else {
                        self.queue.push_back((*to, input));
                    }
                }
                _ => {}
            }
            if !self.down.contains(&from) {
                self.log.push((from, output));
            }
        }
    }

    /// Lets the replica messages held back go.
    fn release(&mut self) {
        self.hold_replica = false;
        let held = std::mem::take(&mut self.held);
        self.queue.extend(held);
        self.pump();
    }

    /// Time passes to `until`, every live machine's timers firing.
    fn run_until(&mut self, until: Duration) {
        for _ in 0..100_000 {
            let next = self
                .nodes
                .iter()
                .filter(|(id, _)| !self.down.contains(id))
                .filter_map(|(id, m)| m.next_timeout().map(|t| (t.max(self.now), *id)))
                .min();
            match next {
                Some((at, id)) if at <= until => {
                    self.now = at;
                    let out = self.nodes.get_mut(&id).unwrap().handle_timeout(at);
                    self.route(id, out);
                    self.pump();
                }
                _ => {
                    self.now = until;
                    return;
                }
            }
        }
        panic!("timers kept firing");
    }

    /// A job of `workers` submitted at the home, and the grid run until
    /// its workers started.
    fn submit(&mut self, workers: u32) {
        let spec = self.nodes[&HOME].admit(spec(workers)).unwrap();
        self.input(
            HOME,
            Input::Submit {
                job: JOB,
                spec,
                owner: None,
            },
        );
        self.run_until(Duration::from_secs(5));
    }

    fn said(&self, node: u32, what: impl Fn(&Out) -> bool) -> usize {
        self.log
            .iter()
            .filter(|(n, o)| *n == node && what(o))
            .count()
    }

    /// The ranks granted to each node, by what the home sent.
    fn grants(&self) -> BTreeMap<u32, Vec<u32>> {
        let mut grants = BTreeMap::new();
        for (_, o) in &self.log {
            if let Output::Sched(SchedOutput::Send {
                to,
                msg: Message::Grant { ranks, .. },
            }) = o
            {
                grants
                    .entry(*to)
                    .or_insert_with(Vec::new)
                    .extend(ranks.iter().copied());
            }
        }
        grants
    }
}

fn is_grant(o: &Out) -> bool {
    matches!(
        o,
        Output::Sched(SchedOutput::Send {
            msg: Message::Grant { .. },
            ..
        })
    )
}

/// A home's grant goes out only once a copy holds its entry: while the
/// copies' answers are held back, the home has decided the grant (its
/// event is out) but sends none; once they arrive, it does.
#[test]
fn a_grant_waits_until_a_copy_holds_it() {
    let mut grid = Grid::new(2);
    grid.hold_replica = true;
    grid.submit(2);
    let granted = grid.said(HOME, |o| {
        matches!(o, Output::Sched(SchedOutput::Job(JobEvent::Granted { .. })))
    });
    assert!(granted > 0, "the home granted no workers");
    assert_eq!(
        grid.said(HOME, is_grant),
        0,
        "a grant went out before any copy held it"
    );
    grid.release();
    assert_eq!(grid.said(HOME, is_grant), granted);
    assert_eq!(grid.grants().values().flatten().count(), 2);
}

/// A member's report of a rank's end is acknowledged only once a copy
/// holds the end's entry: an acknowledged end is never lost with the home.
#[test]
fn an_end_is_acknowledged_only_once_a_copy_holds_it() {
    let mut grid = Grid::new(2);
    grid.submit(2);
    let (&member, ranks) = grid
        .grants()
        .iter()
        .next()
        .map(|(n, r)| (n, r.clone()))
        .unwrap();
    grid.hold_replica = true;
    grid.input(
        HOME,
        Input::EndReported {
            digest: None,
            job: JOB,
            node: member,
            rank: ranks[0],
            incarnation: 0,
            end: WorkerEnd::Exited(0),
            reply: 42,
        },
    );
    let acked = |grid: &Grid| grid.said(HOME, |o| matches!(o, Output::EndAck(42)));
    let ended = grid.said(HOME, |o| {
        matches!(
            o,
            Output::Sched(SchedOutput::Job(JobEvent::RankEnded { .. }))
        )
    });
    assert_eq!(ended, 1, "the home did not take the end");
    assert_eq!(
        acked(&grid),
        0,
        "the end was acknowledged before a copy held it"
    );
    grid.release();
    assert_eq!(acked(&grid), 1);
}

/// A report of an end to a node that is not the job's home is answered
/// so, and not acknowledged.
#[test]
fn a_copy_does_not_acknowledge_an_end() {
    let mut grid = Grid::new(2);
    grid.submit(2);
    let members: Vec<u32> = grid.grants().into_keys().collect();
    let (copy, other) = (members[0], members[1]);
    grid.input(
        copy,
        Input::EndReported {
            digest: None,
            job: JOB,
            node: other,
            rank: 0,
            incarnation: 0,
            end: WorkerEnd::Exited(0),
            reply: 9,
        },
    );
    assert_eq!(grid.said(copy, |o| matches!(o, Output::EndAck(9))), 0);
    assert_eq!(
        grid.said(copy, |o| matches!(o, Output::NotHome { reply: 9, .. })),
        1
    );
}

/// The home dies: one of the copies wins the election, takes the job over
/// in the state its log describes (the scheduler adopts it and places its
/// copies), and the other follows it.
#[test]
fn a_copy_takes_a_silent_homes_job_over_and_the_others_follow() {
    let mut grid = Grid::new(2);
    grid.submit(2);
    let before = grid.now;
    grid.down.insert(HOME);
    grid.run_until(before + Duration::from_secs(10));
    let took: Vec<u32> = grid
        .log
        .iter()
        .filter(|(_, o)| matches!(o, Output::TookOver { job: JOB, .. }))
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(
        took.len(),
        1,
        "not exactly one node took the job over: {took:?}"
    );
    let new_home = took[0];
    assert!(grid.nodes[&new_home].scheduler().phase(JOB).is_some());
    let other = grid.grants().into_keys().find(|n| *n != new_home).unwrap();
    assert_eq!(grid.nodes[&other].primary_of(JOB), Some(&new_home));
    assert!(
        grid.said(
            other,
            |o| matches!(o, Output::HomeMoved { job: JOB, home } if *home == new_home)
        ) > 0
    );
}

/// An invitation to hold a copy whose job copy does not prove the job's
/// first home is reported, and nothing is held.
#[test]
fn an_invitation_without_the_jobs_origin_is_reported() {
    let mut stranger: M = machine(5, 1);
    let mut home: M = machine(HOME, 0);
    let spec = home.admit(spec(1)).unwrap();
    let _ = home.handle(ms(0), Input::Neighbours(vec![(5, None)]));
    let out = home.handle(
        ms(0),
        Input::Submit {
            job: JOB,
            spec,
            owner: None,
        },
    );
    let (msg, job) = out
        .into_iter()
        .find_map(|o| match o {
            Output::Replica {
                to: 5, msg, job, ..
            } => Some((msg, job)),
            _ => None,
        })
        .expect("the home invited no copy");
    let out = stranger.handle(
        ms(0),
        Input::Replica {
            from: HOME,
            job,
            msg,
            copy: Some(Copy(None)),
        },
    );
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Misbehaviour { peer: HOME, .. })),
        "{out:?}"
    );
    assert_eq!(stranger.replica_count(), 0);
}

/// A home that hears too few of a job's copies may be the one cut off:
/// its verdict that a node serving the job is dead waits (it says so), and
/// is delivered only after `hold_at_most`, when its copies have not taken
/// the job over meanwhile.
#[test]
fn a_home_out_of_touch_with_its_copies_holds_a_loss_back() {
    let mut grid = Grid::new(3);
    grid.submit(3);
    // Two of the three copies go silent: the home hears one of three.
    grid.down.extend([2, 3]);
    let lease = MachineConfig::default().timing.lease;
    let at = grid.now + lease + ms(100);
    grid.run_until(at);
    assert!(grid.nodes[&HOME].out_of_touch(JOB, grid.now));
    grid.input(HOME, Input::PeerDead(2));
    let lost = |grid: &Grid| {
        grid.said(HOME, |o| {
            matches!(
                o,
                Output::Sched(SchedOutput::Job(JobEvent::WorkersLost { node: 2, .. }))
            )
        })
    };
    assert_eq!(lost(&grid), 0, "the home acted on the loss while cut off");
    assert_eq!(
        grid.said(HOME, |o| matches!(
            o,
            Output::Notice(Notice::VerdictHeld { peer: 2, .. })
        )),
        1
    );
    let hold = MachineConfig::default().hold_at_most;
    let until = grid.now + hold + Duration::from_secs(1);
    grid.run_until(until);
    assert_eq!(lost(&grid), 1, "the held verdict was never delivered");
}

/// A copy that restarted (its replica lost) is invited again: by the
/// home's heartbeats once it has been silent for a lease (nothing else
/// happens to the job meanwhile), and whenever the home places the job's
/// copies again (here, as its neighbours change).
#[test]
fn a_copy_that_lost_its_replica_is_invited_again() {
    let mut grid = Grid::new(2);
    grid.submit(2);
    let member = *grid.grants().keys().next().unwrap();
    assert!(grid.nodes[&member].replica(JOB).is_some());
    grid.nodes.insert(member, machine(member, 1));
    let timing = MachineConfig::default().timing;
    let until = grid.now + timing.lease + 2 * timing.heartbeat;
    grid.run_until(until);
    assert!(
        grid.nodes[&member].replica(JOB).is_some(),
        "the heartbeats did not invite the restarted copy again"
    );
    grid.nodes.insert(member, machine(member, 1));
    let near = grid.nodes.keys().map(|n| (*n, None)).collect();
    grid.input(HOME, Input::Neighbours(near));
    assert!(
        grid.nodes[&member].replica(JOB).is_some(),
        "placing the copies again did not invite the restarted copy"
    );
}

//! The node's event loop: one `tokio::select!` over shutdown, client
//! commands, overlay events, calls from this node's own tasks, finished
//! tasks and the core's timer. Each branch hands its event to the core's
//! [`JobMachine`] (scheduler, rank liveness, replicated job logs: the same
//! machine the simulator runs), or to the job bookkeeping here, and executes
//! what comes out. Every decision about where workers go, what a rank's end
//! means and when a home's word may go out is the core's; this module does
//! the IO: messages, files, workers, the database.
//!
//! The loop's parts: [`client`] (requests of this node's clients), [`peers`]
//! (overlay events, and other nodes' requests handed by concern to the part
//! that owns it), [`home`] (the jobs this node is home to: the core's
//! outputs, records, placements, ends), [`reports`] (the home's side of its
//! members' logs, outputs and ends), [`member`] (starting and supervising
//! workers on this node), [`files`] (a job's files on a worker node, and
//! the checks of what peers name), [`liveness`] (the questions the core
//! asks, and this node's answers), [`replicas`] (what a copy, a takeover or
//! a step-down means for the records and workers here), [`checkpoints`].
//!
//! Components that own their fields, each with unit tests: [`homejobs`]
//! (the home's records under way and finished), [`members`] (the jobs this
//! node runs workers of), [`answers`] (the answers made off the loop: one
//! tracked set, bounded).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use zorilla_core::advert::{Advert, JobId};
use zorilla_core::liveness::Answer;
use zorilla_core::machine::{self, JobMachine, MachineConfig};
use zorilla_core::node::SchedulerConfig;
use zorilla_core::resources::Reachability;
use zorilla_core::stall::{StallWatch, Waits};
use zorilla_overlay::{Event, OverlayHandle, PeerId, Responder};
use zorilla_sandbox::Sandbox;

use crate::link::Links;
use crate::net::{CallError, LocalCall, Net};
use crate::protocol::{JobPhase, OutcomeCode, Request, Response};
use crate::status::{self, Publisher};
use crate::store::{JobRecord, Store, StoredPeer, Writer};
use crate::validate;
use crate::wire::job_copy::{JobCopy, JobInfo};
use crate::wire::{PeerReply, encode};
use answers::Answers;
use homejobs::HomeJobs;
use members::Members;

mod answers;
mod checkpoints;
mod client;
mod digest;
mod files;
mod home;
mod homejobs;
mod liveness;
mod member;
mod members;
mod peers;
mod replicas;
mod reports;

/// A client request on its way into the event loop.
pub(crate) struct Command {
    pub(crate) asked: Asked,
    /// Who asks (see [`crate::owner`]).
    pub(crate) caller: crate::owner::Caller,
    pub(crate) reply: oneshot::Sender<Response>,
}

/// What a client asks, as it comes into the loop.
pub(crate) enum Asked {
    /// A submission, checked where it came in.
    Submit(Box<crate::validate::Submission>),
    /// Anything else (boxed: a request may carry a job's whole request).
    Request(Box<Request>),
}

/// How often copies of jobs look whether their home has been quiet.
const COPY_CHECK: Duration = Duration::from_secs(5);
/// How long a copy waits for word from its home before it asks.
const COPY_STALE: Duration = Duration::from_secs(15);

/// How often the loop looks whether its disk can be written again (the
/// store tries it only after its own pause; see `Store::retry`).
const STORE_CHECK: Duration = Duration::from_secs(1);

/// How often the loop hands the heap's free memory back to the system
/// when jobs or workers ended since it last did (see [`crate::heap`]).
const RELEASE_CHECK: Duration = Duration::from_secs(1);

/// How often the scheduler hears how far the overlay's peers are (a home's
/// first flood of a big job reaches as far as the nodes it needs; see
/// `Scheduler::set_peer_distances`).
const PEER_DISTANCES_CHECK: Duration = Duration::from_secs(5);

/// How long a restarted node waits for peers before it asks where the
/// jobs it was home to went.
const MOVED_WAIT: Duration = Duration::from_secs(30);
/// How long a restarted node waits for any peer before it concludes that
/// nobody can hold the jobs it was home to.
const JOIN_WAIT: Duration = Duration::from_secs(5);

/// Pauses between the liveness probes of a peer whose connection was
/// lost: three probes in all.
const PROBE_PAUSES: [Duration; 2] = [Duration::from_millis(500), Duration::from_secs(2)];

/// The core's machine as the node drives it: peers are libp2p peers, a
/// member's report of a rank's end is answered through its reply, and a
/// job's copy is what a grant or an invitation carries.
type Machine = JobMachine<PeerId, Reply, JobCopy>;
/// What the machine asks the node to do.
type MachineOutput = machine::Output<PeerId, Reply, JobCopy>;

/// Test only: how long a node holds back every replica message it sends,
/// in milliseconds (at most [`MAX_TEST_REPLICA_DELAY`]): a test kills a
/// home between what it told a member and its log reaching a copy.
const TEST_REPLICA_DELAY: &str = "ZORILLA_TEST_REPLICA_DELAY_MS";
/// Below a copy's lease, so that the delayed heartbeats keep it from
/// standing for election.
const MAX_TEST_REPLICA_DELAY: Duration = Duration::from_millis(1000);

/// Where the answer to a peer call goes.
enum Reply {
    Overlay(Responder),
    Local(oneshot::Sender<PeerReply>),
}

/// What a finished background task tells the loop.
enum Done {
    /// What the first says, and a task that goes on after it (spawned in
    /// the loop's set, so that it is tracked and stops with the node).
    Then(
        Box<Done>,
        std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
    ),
    /// Workers of a job are ready to start here.
    Prepared {
        job: u64,
        ranks: Vec<u32>,
        /// The grant that placed them here.
        incarnation: u32,
        result: Box<Result<(JobCopy, files::Runnable, PathBuf), files::PrepareError>>,
    },
    /// A worker here ended and its output went to the home.
    WorkerEnded {
        job: u64,
        rank: u32,
        incarnation: u32,
    },
    /// A liveness probe of a peer failed.
    PeerDead(PeerId),
    /// A node holding ranks of our jobs answered which it runs (`Err`:
    /// it did not answer).
    RanksAnswered {
        peer: PeerId,
        answer: Result<(Answer, BTreeMap<u64, Waits>), NoRanks>,
        /// When the question went out (the answer was made after).
        asked: Duration,
    },
    /// A node took a grant; `boot` says which run of it.
    Granted { peer: PeerId, boot: u64 },
    /// A copy asked its home for the job's state.
    Refreshed {
        job: u64,
        info: Result<Box<JobInfo>, NoState>,
    },
    /// Which nodes hold the jobs that were under way at the restart.
    Moved(Vec<(u64, Option<PeerId>)>),
    /// The RTTs of the peers the overlay knows (`None`: not measured),
    /// whether they are every peer it heard of, and where this node can
    /// be reached from by its own addresses.
    PeerDistances(Vec<Option<Duration>>, bool, Reachability),
    /// An answer to a peer, made off the loop.
    Reply { to: Reply, reply: PeerReply },
    /// Nothing to do.
    Nothing,
}

/// Why a node holding ranks of our jobs did not say which it runs.
#[derive(Debug, thiserror::Error)]
enum NoRanks {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("it answered with something else than a list of ranks")]
    NotRanks,
    #[error("it did not answer within {} ms", .0.as_millis())]
    Timeout(Duration),
}

/// Why a copy did not get its job's state from the home.
#[derive(Debug, thiserror::Error)]
enum NoState {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("the home's copy of the job is refused: {0}")]
    Refused(validate::Invalid),
    #[error("the home answered with something else than the job")]
    NotAJob,
}

/// Everything the loop owns.
pub(crate) struct Node {
    me: PeerId,
    epoch: Instant,
    /// This run of the node: random at every start, never stored, so that
    /// homes tell a restart from a node that was only quiet.
    boot: u64,
    /// The core's part in jobs: the scheduler, the liveness of this home's
    /// ranks, the replicas of jobs' logs and the rule of what waits for
    /// them (see [`zorilla_core::machine`]).
    machine: Machine,
    /// Whether the ranks of this home's jobs all wait on one another.
    stall: StallWatch<PeerId>,
    overlay: OverlayHandle,
    net: Net,
    store: Arc<Store>,
    /// Writes what workers send (logs, outputs) off the loop.
    writer: Writer,
    sandbox: Sandbox,
    /// Native workers' sandbox, if this node runs native jobs.
    native: Option<crate::native::NativeWorkers>,
    dir: PathBuf,
    /// The jobs this node is home to, in memory (see [`homejobs`]).
    jobs: HomeJobs,
    /// The jobs this node runs workers of (see [`members`]).
    members: Members,
    /// The loop's own work off the loop: messages it sends, probes of
    /// peers, workers and their preparation, fetches, liveness questions.
    /// Each ends on its own (calls time out, workers have their limits).
    /// Most follow what the core bounds (its holds, its pending adverts,
    /// the ranks placed here, the peers of its jobs); a message the core
    /// sends in answer to a peer's (a refusal of an offer, say) lives at
    /// most a call's timeout, and a peer has at most as many requests under
    /// way as the overlay lets it. What answers peers' requests directly is
    /// in [`Node::answers`], bounded.
    tasks: JoinSet<Done>,
    /// The answers made or sent off the loop (see [`answers`]).
    answers: Answers,
    probing: BTreeSet<PeerId>,
    /// The overlay's current neighbours (from its change events).
    neighbours: BTreeSet<PeerId>,
    /// Turns of the extra copies' fetches of their jobs' files.
    copy_fetches: Arc<tokio::sync::Semaphore>,
    messages_sent: u64,
    /// Bumped whenever a job of this home changes or gets log output, so
    /// that clients following a job wake up (see `server`).
    activity: watch::Sender<u64>,
    /// What the status page shows, published from here.
    status: Publisher,
    /// Why the disk cannot be written, while it cannot: the node then takes
    /// no jobs and offers no workers.
    disk_problem: Option<String>,
    /// Jobs or workers ended since the heap's free memory was last handed
    /// back (see [`Node::release_memory`]).
    ended_since_release: bool,
    /// Checkpoints held here, and where those of this home's jobs are.
    checkpoints: checkpoints::CheckpointState,
    /// The primaries of the jobs this node holds copies of, for the
    /// client connections.
    primaries: crate::forward::Primaries,
    /// The nonces this node gave its jobs' owners (see [`crate::owner`]).
    sessions: crate::owner::SharedSessions,
    /// How long replica messages are held back (zero but in tests: see
    /// [`TEST_REPLICA_DELAY`]).
    replica_delay: Duration,
    /// The favour ledger's changes when it was last saved (see
    /// [`Node::save_favours`]).
    favours_saved: u64,
    /// The avoided nodes' change count as last written (see
    /// `save_avoided`).
    avoided_saved: u64,
}

/// What the loop is started with.
pub(crate) struct Parts {
    pub(crate) overlay: OverlayHandle,
    pub(crate) events: mpsc::Receiver<Event>,
    pub(crate) commands: mpsc::Receiver<Command>,
    pub(crate) sched: SchedulerConfig<PeerId>,
    pub(crate) store: Arc<Store>,
    pub(crate) sandbox: Sandbox,
    /// Native workers' sandbox, if this node runs native jobs.
    pub(crate) native: Option<crate::native::NativeWorkers>,
    pub(crate) dir: PathBuf,
    /// Finished home jobs kept in memory (`Config::finished_in_memory`).
    pub(crate) finished_in_memory: usize,
    /// How workers' checkpoints are kept (`Config::checkpoint_max_mib`...).
    pub(crate) checkpoints: crate::checkpoint::CheckpointSettings,
    pub(crate) activity: watch::Sender<u64>,
    pub(crate) status: Publisher,
    pub(crate) primaries: crate::forward::Primaries,
    pub(crate) sessions: crate::owner::SharedSessions,
    /// Who vouches for this node in its closed grid (itself, or the member
    /// that invited it); `None` in an open grid.
    pub(crate) vouched_by: Option<PeerId>,
}

fn cbor_advert(advert: &Advert<PeerId>) -> Vec<u8> {
    encode(advert)
}

impl Node {
    /// Runs the node until `shutdown` resolves.
    pub(crate) async fn run(parts: Parts, shutdown: impl std::future::Future<Output = ()>) {
        let Parts {
            overlay,
            mut events,
            mut commands,
            sched,
            store,
            sandbox,
            native,
            dir,
            finished_in_memory,
            checkpoints,
            activity,
            status,
            primaries,
            sessions,
            vouched_by,
        } = parts;
        let me = overlay.local_peer_id();
        let (local_tx, mut local_rx) = mpsc::channel::<LocalCall>(1024);
        let checkpoints = checkpoints::CheckpointState::open(&dir, checkpoints);
        let mut node = Node {
            me,
            epoch: Instant::now(),
            boot: random_u64(),
            machine: JobMachine::new(
                me,
                sched,
                MachineConfig::default(),
                Arc::new(replicas::StatementSigner(overlay.signer())),
            ),
            stall: StallWatch::new(),
            net: Net {
                me,
                overlay: overlay.clone(),
                local: local_tx,
                links: Links::new(me, overlay.clone()),
            },
            overlay,
            writer: Writer::start(store.clone()).expect("cannot start the store's writer thread"),
            store,
            sandbox,
            native,
            dir,
            jobs: HomeJobs::new(finished_in_memory),
            members: Members::default(),
            tasks: JoinSet::new(),
            answers: Answers::new(answers::MAX_ANSWERS),
            probing: BTreeSet::new(),
            neighbours: BTreeSet::new(),
            copy_fetches: Arc::new(tokio::sync::Semaphore::new(replicas::MAX_COPY_FETCHES)),
            messages_sent: 0,
            activity,
            status,
            disk_problem: None,
            ended_since_release: false,
            checkpoints,
            primaries,
            sessions,
            replica_delay: std::env::var(TEST_REPLICA_DELAY)
                .ok()
                .and_then(|ms| ms.parse().ok())
                .map_or(Duration::ZERO, |ms| {
                    Duration::from_millis(ms).min(MAX_TEST_REPLICA_DELAY)
                }),
            favours_saved: 0,
            avoided_saved: 0,
        };
        node.recover();
        // Its own owner, as its peers' credentials give theirs (see
        // `peers`): its own runs are kept apart from its owner's other
        // nodes' too.
        if let Some(owner) = vouched_by {
            node.feed(machine::Input::Owner { node: me, owner });
        }
        // The favour balances from before a restart (see `save_favours`).
        match node.store.favours() {
            Ok(accounts) => {
                node.machine.restore_favours(accounts);
                node.status.touch();
            }
            Err(e) => tracing::warn!("cannot read the favour balances; starting without: {e}"),
        }
        // The nodes this home found lying, from before a restart.
        match node.store.avoided() {
            Ok(nodes) => {
                let now = node.now();
                node.machine.restore_avoided(nodes, now);
                node.avoided_saved = node.machine.scheduler().avoided().changes();
            }
            Err(e) => tracing::warn!("cannot read the nodes avoided; starting without: {e}"),
        }
        node.net.links.accept().await;
        tokio::pin!(shutdown);
        let mut copies_check = tokio::time::interval(COPY_CHECK);
        copies_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut store_check = tokio::time::interval(STORE_CHECK);
        store_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ranks_check = tokio::time::interval(liveness::CHECK);
        ranks_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut release_check = tokio::time::interval(RELEASE_CHECK);
        release_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut distances_check = tokio::time::interval(PEER_DISTANCES_CHECK);
        distances_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let deadline = node
                .machine
                .next_timeout()
                .map(|t| tokio::time::Instant::from_std(node.epoch + t));
            let timer = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let publish_at = node.status.due().map(tokio::time::Instant::from_std);
            let publish = async {
                match publish_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut shutdown => break,
                Some(cmd) = commands.recv() => {
                    let response = match cmd.asked {
                        Asked::Submit(submission) => node.submit(*submission, &cmd.caller),
                        Asked::Request(request) => node.command(*request, &cmd.caller),
                    };
                    let _ = cmd.reply.send(response);
                    node.status.touch();
                }
                Some(event) = events.recv() => node.overlay_event(event),
                Some(call) = local_rx.recv() => {
                    node.rpc(node.me, call.rpc, Reply::Local(call.reply), Some(Duration::ZERO));
                }
                Some(done) = node.tasks.join_next() => {
                    match done {
                        Ok(done) => node.done(done),
                        Err(e) => tracing::error!("a node task failed: {e}"),
                    }
                    node.status.touch();
                }
                _ = copies_check.tick() => {
                    node.refresh_stale_copies();
                    node.collect_checkpoints();
                }
                _ = store_check.tick() => {
                    node.check_store();
                    node.save_favours();
                    node.save_avoided();
                }
                _ = ranks_check.tick() => node.check_stalls(),
                _ = release_check.tick() => node.release_memory(),
                _ = distances_check.tick() => node.ask_peer_distances(),
                () = timer => {
                    let now = node.now();
                    let out = node.machine.handle_timeout(now);
                    node.execute(out);
                    node.status.touch();
                }
                () = publish => {}
            }
            if node.status.is_due() {
                node.publish_status();
            }
        }
        node.shutdown();
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Asks the overlay how far its peers are, and what its own addresses
    /// say of where this node can be reached from, for the scheduler (off
    /// the loop; the answer comes back as [`Done::PeerDistances`]).
    fn ask_peer_distances(&mut self) {
        let overlay = self.overlay.clone();
        self.tasks.spawn(async move {
            match (overlay.known_peers().await, overlay.own_addrs().await) {
                (Ok(peers), Ok(own)) => {
                    // The node's overlay keeps the default table: below its
                    // size, it has forgotten no peer it heard of.
                    let max_known = zorilla_core::neighbours::NeighbourConfig::default().max_known;
                    let every_peer = peers.len() < max_known;
                    Done::PeerDistances(
                        peers.into_iter().map(|p| p.rtt).collect(),
                        every_peer,
                        zorilla_overlay::addrs::reachability(&own),
                    )
                }
                _ => Done::Nothing,
            }
        });
    }

    /// Follows whether the disk can be written: the store tries a failed
    /// disk again by itself (this is the call that lets it), and the
    /// scheduler offers no workers while it cannot be written.
    fn check_store(&mut self) {
        let problem = if self.store.retry() {
            None
        } else {
            self.store.unwritable()
        };
        if problem == self.disk_problem {
            return;
        }
        match &problem {
            Some(reason) => tracing::warn!("the disk cannot be written ({reason}): no jobs taken"),
            None => tracing::info!("the disk can be written again: jobs taken again"),
        }
        let paused = problem.is_some();
        self.disk_problem = problem;
        let out = self.machine.set_paused(self.now(), paused);
        self.execute(out);
        self.status.touch();
    }

    /// Hands the heap's free memory back to the system (off the loop) if
    /// jobs or workers ended since it last did: what a job's burst of
    /// output or messages allocated is freed when it ends, but glibc keeps
    /// freed memory in its arenas (see [`crate::heap`]). At most once per
    /// [`RELEASE_CHECK`], and not at all while nothing ends.
    fn release_memory(&mut self) {
        if std::mem::take(&mut self.ended_since_release) {
            drop(tokio::task::spawn_blocking(crate::heap::release));
        }
    }

    /// Hands the status page a fresh view of this loop's state.
    fn publish_status(&mut self) {
        let members = self
            .members
            .iter()
            .map(|(job, m)| status::Member {
                job: *job,
                home: m.home,
                running: m.workers.keys().copied().collect(),
                starting: m.pending.keys().copied().collect(),
                ranks: m.net.nodes(),
            })
            .collect();
        self.status.publish(status::LoopState {
            epoch: self.epoch,
            sched: self.machine.scheduler(),
            jobs: self.jobs.all_under_way(),
            finished: self.jobs.finished(),
            members,
            disk_problem: self.disk_problem.clone(),
        });
    }

    /// After a restart: jobs that were under way cannot be resumed here
    /// (the scheduler's state and the workers' state are gone), but one of
    /// their copies may have taken them over (see `replicas`): this node
    /// asks the grid (see [`Node::find_moved`]), and a job no node holds is
    /// marked failed with the reason. Finished jobs stay as they were.
    fn recover(&mut self) {
        let mut jobs = match self.store.jobs() {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::error!("cannot read stored jobs: {e}");
                return;
            }
        };
        // The newest are the ones kept in memory (see `Finished`).
        jobs.sort_by_key(|j| (j.submitted_unix, j.id));
        let mut under_way = Vec::new();
        for mut job in jobs {
            if job.moved_to.is_some() {
                continue;
            }
            if !job.phase.is_terminal() {
                under_way.push(job.id);
                job.reason = "this node, its home, restarted: asking the grid which node holds \
                              the job now"
                    .into();
            }
            self.jobs.add_finished(job);
        }
        if !under_way.is_empty() {
            tracing::info!(
                jobs = under_way.len(),
                "jobs were under way at the restart: asking the grid which nodes hold them now"
            );
            let overlay = self.overlay.clone();
            self.tasks.spawn(Self::find_moved(overlay, under_way));
        }
        let jobs = self.jobs.finished_count();
        tracing::info!(jobs, "state recovered");
    }

    /// Asks the grid which node holds each of `jobs` now (once this node
    /// knows peers, within [`MOVED_WAIT`]; not at all if it has found no
    /// peer within [`JOIN_WAIT`]).
    async fn find_moved(overlay: OverlayHandle, jobs: Vec<u64>) -> Done {
        let start = Instant::now();
        let mut found: BTreeMap<u64, Option<PeerId>> = jobs.iter().map(|j| (*j, None)).collect();
        // Asked again while the grid is still being joined (the peers
        // connected so far may not be the job's), within MOVED_WAIT; a node
        // that finds no peer at all within JOIN_WAIT has nobody to ask.
        let mut ever_connected = false;
        while start.elapsed() < MOVED_WAIT {
            let connected = overlay
                .known_peers()
                .await
                .is_ok_and(|peers| peers.iter().any(|p| p.connected));
            ever_connected |= connected;
            if !ever_connected && start.elapsed() >= JOIN_WAIT {
                break;
            }
            if connected {
                for (job, home) in found.iter_mut().filter(|(_, h)| h.is_none()) {
                    *home = crate::forward::find_home(&overlay, *job)
                        .await
                        .filter(|p| *p != overlay.local_peer_id());
                }
                if found.values().all(Option::is_some) {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Done::Moved(found.into_iter().collect())
    }

    /// Where this node's jobs that were under way at its restart are now:
    /// a job another node holds is that node's; one nobody holds failed.
    fn moved(&mut self, found: Vec<(u64, Option<PeerId>)>) {
        for (id, home) in found {
            let Ok(Some(mut job)) = self.store.job(id) else {
                continue;
            };
            if job.phase.is_terminal() {
                continue;
            }
            match home {
                Some(home) => {
                    tracing::info!(job = %JobId(id), %home, "the job is held by another node since this one restarted");
                    job.moved_to = Some(StoredPeer(home));
                }
                None => {
                    let was = job.phase;
                    job.close_ranks(OutcomeCode::Lost, "lost: the home node restarted");
                    job.advance(
                        JobPhase::Failed,
                        format!(
                            "the home node restarted while the job was {was:?}; its workers were lost"
                        ),
                    );
                    tracing::warn!(job = %JobId(id), "job was {was:?} at restart and no node holds it; marked failed");
                }
            }
            self.persist(&job);
            self.jobs.update(job);
        }
    }

    /// Saves the favour ledger if it changed since it was last saved: at
    /// most once per [`STORE_CHECK`] and when the node shuts down, so a
    /// node killed loses at most that much of its balances.
    fn save_favours(&mut self) {
        let ledger = self.machine.scheduler().favours();
        let changes = ledger.changes();
        if changes == self.favours_saved {
            return;
        }
        match self.store.put_favours(ledger.accounts()) {
            Ok(()) => self.favours_saved = changes,
            Err(e) => tracing::warn!("cannot save the favour balances: {e}"),
        }
    }

    /// Writes the nodes this home avoids to the store when they changed
    /// since the last write, with when each was found out.
    fn save_avoided(&mut self) {
        let avoided = self.machine.scheduler().avoided();
        let changes = avoided.changes();
        if changes == self.avoided_saved {
            return;
        }
        let now = self.now();
        let unix = crate::store::unix_ms();
        let nodes = avoided.iter().map(|(peer, at)| {
            let ago = now.saturating_sub(at).as_millis() as u64;
            (*peer, unix.saturating_sub(ago))
        });
        match self.store.put_avoided(nodes) {
            Ok(()) => self.avoided_saved = changes,
            Err(e) => tracing::warn!("cannot save the nodes avoided: {e}"),
        }
    }

    fn shutdown(&mut self) {
        self.save_favours();
        self.save_avoided();
        for member in self.members.values_mut() {
            for (_, worker) in member.workers.drain() {
                worker.cancel();
            }
            member.net.close();
        }
        let ids: Vec<u64> = self.jobs.all_under_way().keys().copied().collect();
        for id in ids {
            if let Some(job) = self.jobs.under_way_mut(id)
                && !job.phase.is_terminal()
            {
                job.close_ranks(OutcomeCode::Lost, "lost: the home node shut down");
                job.advance(
                    JobPhase::Failed,
                    "the home node shut down while the job was under way",
                );
                let job = job.clone();
                self.persist(&job);
            }
        }
    }

    fn persist(&self, job: &JobRecord) {
        if let Err(e) = self.store.put_job(job) {
            tracing::error!(job = %JobId(job.id), "cannot store job: {e}");
        }
        self.activity.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// A random number: std's per-instance random hasher keys are a good
/// enough source (job ids, a first file source) without an OS-rng
/// dependency.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// A random number below `n` (0 for `n` = 0).
fn random_below(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (random_u64() % n as u64) as usize
    }
}

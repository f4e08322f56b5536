//! The node's event loop: one `tokio::select!` over shutdown, client
//! commands, overlay events, calls from this node's own tasks, finished
//! tasks and the scheduler's timer. Each branch hands its event to the core's
//! [`Scheduler`] (or to the job bookkeeping here) and executes what comes
//! out. Every decision about where workers go is the core's; this module
//! does the IO: messages, files, workers, the database.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use zorilla_core::advert::{Advert, JobId, Message, WorkerCount};
use zorilla_core::flood::FloodId;
use zorilla_core::liveness::{Answer, LivenessConfig, RankLiveness};
use zorilla_core::node::{Input, JobEvent, JobSpec, Output, Phase, Scheduler, SchedulerConfig};
use zorilla_core::resources::Resources;
use zorilla_overlay::{Event, OverlayHandle, PeerId, Responder};
use zorilla_sandbox::jobfs;
use zorilla_sandbox::{
    CancelHandle, ChangeKind, Limits, MembershipChange, Outcome, OutputKind, Program, Sandbox,
    WorkerSpec,
};

use crate::link::{Inbox, Links};
use crate::net::{BarrierItem, JobNet, LocalCall, Net, NetTransport};
use crate::protocol::{
    ErrorKind, JobPhase, JobRequest, JobStatus, LogChunk, LogPage, MAX_LOG_PAGE_BYTES, NamedFile,
    NodeInfo, Pending, RankStatus, Request, Response,
};
use crate::status::{self, Publisher};
use crate::store::{Append, FileRef, JobRecord, Store, StoreError, Writer};
use crate::validate;
use crate::wire::{
    BLOCK_BYTES, JobInfo, MAX_FILE_BYTES, PeerReply, PeerRpc, Placed, decode, encode,
};

mod liveness;

/// A client request on its way into the event loop.
pub(crate) struct Command {
    pub(crate) request: Request,
    pub(crate) reply: oneshot::Sender<Response>,
}

/// How often copies of jobs look whether their home has been quiet.
const COPY_CHECK: Duration = Duration::from_secs(5);
/// How long a copy waits for word from its home before it asks.
const COPY_STALE: Duration = Duration::from_secs(15);

/// How often the loop looks whether its disk can be written again (the
/// store tries it only after its own pause; see `Store::retry`).
const STORE_CHECK: Duration = Duration::from_secs(1);

/// Pauses between the liveness probes of a peer whose connection was
/// lost: three probes in all.
const PROBE_PAUSES: [Duration; 2] = [Duration::from_millis(500), Duration::from_secs(2)];

/// Where the answer to a peer call goes.
enum Reply {
    Overlay(Responder),
    Local(oneshot::Sender<PeerReply>),
}

/// What a finished background task tells the loop.
enum Done {
    /// Workers of a job are ready to start here.
    Prepared {
        job: u64,
        ranks: Vec<u32>,
        result: Box<Result<(JobInfo, Program, PathBuf), String>>,
    },
    /// A worker here ended and its output went to the home.
    WorkerEnded { job: u64, rank: u32 },
    /// A liveness probe of a peer failed.
    PeerDead(PeerId),
    /// A node holding ranks of our jobs answered which it runs (`Err`:
    /// it did not answer).
    RanksAnswered {
        peer: PeerId,
        answer: Result<Answer, String>,
    },
    /// A node took a grant; `boot` says which run of it.
    Granted { peer: PeerId, boot: u64 },
    /// A copy asked its home for the job's state.
    Refreshed {
        job: u64,
        info: Result<Box<JobInfo>, String>,
    },
    /// Nothing to do.
    Nothing,
}

/// A job with workers on this node (the home's own jobs included).
struct MemberJob {
    home: PeerId,
    net: Arc<JobNet>,
    workers: HashMap<u32, CancelHandle>,
    /// Inbox ends of ranks whose workers are being prepared.
    pending: HashMap<u32, Ends>,
    stopped: bool,
    /// When the home last told this copy anything (or it asked).
    heard: Instant,
    /// When each rank was given to this node (see `liveness`).
    born: HashMap<u32, Instant>,
}

/// What the home keeps in memory of its finished jobs: how many there are
/// per phase, and the newest few records (for the status page). Everything
/// else about them (records, logs, outputs) is read from the store when
/// asked, so that a home's memory does not grow with every job it ran.
#[derive(Default)]
struct Finished {
    counts: BTreeMap<JobPhase, u64>,
    /// The newest finished jobs, oldest first, at most [`status::MAX_JOBS`].
    recent: VecDeque<JobRecord>,
}

impl Finished {
    fn add(&mut self, job: JobRecord) {
        *self.counts.entry(job.phase).or_default() += 1;
        if self.recent.len() >= status::MAX_JOBS {
            self.recent.pop_front();
        }
        self.recent.push_back(job);
    }

    fn recent(&self, id: u64) -> Option<&JobRecord> {
        self.recent.iter().rev().find(|j| j.id == id)
    }

    fn recent_mut(&mut self, id: u64) -> Option<&mut JobRecord> {
        self.recent.iter_mut().rev().find(|j| j.id == id)
    }
}

/// Everything the loop owns.
pub(crate) struct Node {
    me: PeerId,
    epoch: Instant,
    /// This run of the node: random at every start, never stored, so that
    /// homes tell a restart from a node that was only quiet.
    boot: u64,
    sched: Scheduler<PeerId>,
    /// Whether the nodes holding ranks of this home's jobs still run them.
    liveness: RankLiveness<PeerId>,
    overlay: OverlayHandle,
    net: Net,
    store: Arc<Store>,
    /// Writes what workers send (logs, outputs) off the loop.
    writer: Writer,
    /// Output bytes accepted per job under way at this home (see
    /// [`Node::output_room`]).
    output_bytes: HashMap<u64, u64>,
    sandbox: Sandbox,
    dir: PathBuf,
    /// Jobs this node is home to that are under way (finished ones move
    /// to `finished` and the store).
    jobs: BTreeMap<u64, JobRecord>,
    finished: Finished,
    placement: BTreeMap<u64, BTreeMap<u32, Placed>>,
    lost_ranks: BTreeMap<u64, BTreeSet<u32>>,
    members: HashMap<u64, MemberJob>,
    tasks: JoinSet<Done>,
    probing: BTreeSet<PeerId>,
    /// The overlay's current neighbours (from its change events).
    neighbours: BTreeSet<PeerId>,
    messages_sent: u64,
    /// Bumped whenever a job of this home changes or gets log output, so
    /// that clients following a job wake up (see `server`).
    activity: watch::Sender<u64>,
    /// What the status page shows, published from here.
    status: Publisher,
    /// Why the disk cannot be written, while it cannot: the node then takes
    /// no jobs and offers no workers.
    disk_problem: Option<String>,
}

/// What the loop is started with.
pub(crate) struct Parts {
    pub(crate) overlay: OverlayHandle,
    pub(crate) events: mpsc::Receiver<Event>,
    pub(crate) commands: mpsc::Receiver<Command>,
    pub(crate) sched: SchedulerConfig<PeerId>,
    pub(crate) store: Arc<Store>,
    pub(crate) sandbox: Sandbox,
    pub(crate) dir: PathBuf,
    pub(crate) activity: watch::Sender<u64>,
    pub(crate) status: Publisher,
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
            dir,
            activity,
            status,
        } = parts;
        let me = overlay.local_peer_id();
        let (local_tx, mut local_rx) = mpsc::channel::<LocalCall>(1024);
        let mut node = Node {
            me,
            epoch: Instant::now(),
            boot: random_u64(),
            sched: Scheduler::new(me, sched),
            liveness: RankLiveness::new(LivenessConfig::default()),
            net: Net {
                me,
                overlay: overlay.clone(),
                local: local_tx,
                links: Links::new(me, overlay.clone()),
            },
            overlay,
            writer: Writer::start(store.clone()).expect("cannot start the store's writer thread"),
            output_bytes: HashMap::new(),
            store,
            sandbox,
            dir,
            jobs: BTreeMap::new(),
            finished: Finished::default(),
            placement: BTreeMap::new(),
            lost_ranks: BTreeMap::new(),
            members: HashMap::new(),
            tasks: JoinSet::new(),
            probing: BTreeSet::new(),
            neighbours: BTreeSet::new(),
            messages_sent: 0,
            activity,
            status,
            disk_problem: None,
        };
        node.recover();
        node.net.links.accept().await;
        tokio::pin!(shutdown);
        let mut copies_check = tokio::time::interval(COPY_CHECK);
        copies_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut store_check = tokio::time::interval(STORE_CHECK);
        store_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ranks_check = tokio::time::interval(liveness::CHECK);
        ranks_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let deadline = node
                .sched
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
                    let response = node.command(cmd.request);
                    let _ = cmd.reply.send(response);
                    node.status.touch();
                }
                Some(event) = events.recv() => node.overlay_event(event),
                Some(call) = local_rx.recv() => {
                    node.rpc(node.me, call.rpc, Reply::Local(call.reply));
                }
                Some(done) = node.tasks.join_next() => {
                    match done {
                        Ok(done) => node.done(done),
                        Err(e) => tracing::error!("a node task failed: {e}"),
                    }
                    node.status.touch();
                }
                _ = copies_check.tick() => node.refresh_stale_copies(),
                _ = store_check.tick() => node.check_store(),
                _ = ranks_check.tick() => node.check_ranks(),
                () = timer => {
                    let now = node.now();
                    let out = node.sched.handle_timeout(now);
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
        let out = self.sched.set_paused(self.now(), paused);
        self.execute(out);
        self.status.touch();
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
            sched: &self.sched,
            jobs: &self.jobs,
            finished: &self.finished.recent,
            members,
            disk_problem: self.disk_problem.clone(),
        });
    }

    /// After a restart: jobs that were under way cannot be resumed (the
    /// scheduler's state and the workers' state are gone), so they are
    /// marked failed with the reason; finished jobs stay as they were.
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
        for mut job in jobs {
            if !job.phase.is_terminal() {
                let was = job.phase;
                job.close_ranks("lost: the home node restarted");
                job.advance(
                    JobPhase::Failed,
                    format!(
                        "the home node restarted while the job was {was:?}; its workers were lost"
                    ),
                );
                self.persist(&job);
                tracing::warn!(job = %JobId(job.id), "job was {was:?} at restart; marked failed");
            }
            self.finished.add(job);
        }
        let jobs: u64 = self.finished.counts.values().sum();
        tracing::info!(jobs, "state recovered");
    }

    fn shutdown(&mut self) {
        for member in self.members.values_mut() {
            for (_, worker) in member.workers.drain() {
                worker.cancel();
            }
            member.net.close();
        }
        let ids: Vec<u64> = self.jobs.keys().copied().collect();
        for id in ids {
            if let Some(job) = self.jobs.get_mut(&id)
                && !job.phase.is_terminal()
            {
                job.close_ranks("lost: the home node shut down");
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

    // ----- client commands -----

    fn command(&mut self, request: Request) -> Response {
        match request {
            Request::Submit {
                job,
                module,
                inputs,
            } => self.submit(job, module, inputs),
            Request::Status { job } => match self.status(job) {
                Some(status) => Response::Status(status),
                None => not_found(job),
            },
            Request::List => {
                // Finished jobs from the store; if it cannot be read, the
                // ones in memory.
                let stored = self.store.jobs().unwrap_or_else(|e| {
                    tracing::warn!("cannot read the stored jobs: {e}");
                    self.finished.recent.iter().cloned().collect()
                });
                let mut all: BTreeMap<u64, JobStatus> = stored
                    .iter()
                    .filter(|j| !self.jobs.contains_key(&j.id))
                    .map(|j| (j.id, self.status_of(j)))
                    .collect();
                all.extend(self.jobs.values().map(|j| (j.id, self.status_of(j))));
                Response::Jobs(all.into_values().collect())
            }
            Request::Cancel { job } => {
                if self.record(job).is_none() {
                    return not_found(job);
                }
                self.end_home_job(job, JobPhase::Cancelled, "cancelled by user".into());
                let out = self.sched.handle(self.now(), Input::Cancel(JobId(job)));
                self.execute(out);
                self.status(job)
                    .map_or_else(|| not_found(job), Response::Status)
            }
            // Waiting for more (`wait_secs`) is the connection's business
            // (see `server`): the loop answers at once.
            Request::Logs { job, from, .. } => {
                let Some(record) = self.record(job) else {
                    return not_found(job);
                };
                let terminal = record.phase.is_terminal();
                match self.store.logs_from(job, from, MAX_LOG_PAGE_BYTES) {
                    Ok((chunks, next)) => Response::Logs(LogPage {
                        ended: terminal && chunks.is_empty(),
                        chunks,
                        next,
                    }),
                    Err(e) => Response::error(ErrorKind::Internal, e.to_string()),
                }
            }
            Request::Resize { job, max_workers } => self.resize(job, max_workers),
            // Answered by the connection from the overlay handle.
            Request::Peers => Response::error(ErrorKind::Internal, "peers are not the loop's"),
            // Answered by the connection from the store.
            Request::Outputs { .. } | Request::OutputBlock { .. } => {
                Response::error(ErrorKind::Internal, "outputs are not the loop's")
            }
            Request::NodeInfo => {
                let r = self.sched.config().resources;
                Response::NodeInfo(NodeInfo {
                    peer: self.me.to_string(),
                    listen: Vec::new(),
                    cores: r.cores,
                    memory_mib: r.memory_mib,
                    disk_mib: r.disk_mib,
                    // Workers whose tasks still exist, not what the
                    // scheduler has booked: a stopped worker counts until
                    // it has really ended.
                    running: self
                        .members
                        .iter()
                        .filter(|(_, m)| !m.workers.is_empty())
                        .map(|(job, m)| {
                            let mut ranks: Vec<u32> = m.workers.keys().copied().collect();
                            ranks.sort_unstable();
                            (*job, ranks)
                        })
                        .collect(),
                    neighbours: self.neighbours.len(),
                    messages_sent: self.messages_sent,
                    disk_problem: self.store.unwritable(),
                    jobs: self
                        .jobs
                        .values()
                        .fold(self.finished.counts.clone(), |mut by, job| {
                            *by.entry(job.phase).or_insert(0) += 1;
                            by
                        }),
                    // Filled in by the connection, which knows them.
                    version: String::new(),
                    network: String::new(),
                    uptime_secs: 0,
                })
            }
        }
    }

    fn submit(&mut self, request: JobRequest, module: Vec<u8>, inputs: Vec<NamedFile>) -> Response {
        if let Some(reason) = self.store.unwritable() {
            return refused(reason);
        }
        let spec = spec_of(&request);
        // The documented maxima first, then this node's own limits.
        if let Err(e) = validate::submission(&request, &module, &inputs) {
            return Response::error(ErrorKind::BadRequest, e.to_string());
        }
        if let Err(e) = spec.validate(self.sched.config()) {
            return Response::error(ErrorKind::BadRequest, e.to_string());
        }
        let id = loop {
            let id = random_u64();
            if !self.jobs.contains_key(&id) && !matches!(self.store.job(id), Ok(Some(_))) {
                break id;
            }
        };
        let file_ref = |name: &str, data: &[u8]| FileRef {
            name: name.to_owned(),
            sha256: hex::encode(Sha256::digest(data)),
            size: data.len() as u64,
        };
        let module_ref = file_ref("module.wasm", &module);
        let input_refs: Vec<FileRef> = inputs.iter().map(|f| file_ref(&f.name, &f.data)).collect();
        let mut files: Vec<(&str, &[u8])> = vec![(&module_ref.sha256, &module)];
        for (r, f) in input_refs.iter().zip(&inputs) {
            files.push((&r.sha256, &f.data));
        }
        let record = JobRecord {
            id,
            // Stored straight as scheduling: the scheduler gets the job in
            // this same step, so a crash cannot fall between the two.
            phase: JobPhase::Scheduling,
            reason: "looking for workers".into(),
            request,
            module: module_ref.clone(),
            inputs: input_refs.clone(),
            ranks: BTreeMap::new(),
            submitted_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        // Stored before anything else happens: an accepted job is never lost.
        match self.store.put_submission(&record, &files) {
            Ok(()) => {}
            Err(StoreError::Unwritable(reason)) => {
                self.check_store();
                return refused(reason);
            }
            Err(e) => return Response::error(ErrorKind::Internal, e.to_string()),
        }
        self.activity.send_modify(|n| *n = n.wrapping_add(1));
        self.jobs.insert(id, record);
        tracing::info!(job = %JobId(id), "job submitted");
        let out = self.sched.handle(
            self.now(),
            Input::Submit {
                job: JobId(id),
                spec,
            },
        );
        self.execute(out);
        Response::Submitted { job: id }
    }

    fn resize(&mut self, job: u64, max_workers: u32) -> Response {
        if self.record(job).is_none() {
            return not_found(job);
        }
        match self.sched.resize(self.now(), JobId(job), max_workers) {
            Ok(out) => {
                if let Some(record) = self.jobs.get_mut(&job) {
                    record.request.max_workers = max_workers;
                    let record = record.clone();
                    self.persist(&record);
                }
                tracing::info!(job = %JobId(job), max_workers, "job resized");
                self.execute(out);
                self.status(job)
                    .map_or_else(|| not_found(job), Response::Status)
            }
            Err(e) => Response::error(ErrorKind::BadRequest, e.to_string()),
        }
    }

    /// A job of this home, under way or finished (then from the newest
    /// kept in memory, or else the store).
    fn record(&self, id: u64) -> Option<JobRecord> {
        if let Some(job) = self.jobs.get(&id).or_else(|| self.finished.recent(id)) {
            return Some(job.clone());
        }
        self.store.job(id).unwrap_or_else(|e| {
            tracing::warn!(job = %JobId(id), "cannot read the job: {e}");
            None
        })
    }

    /// Puts a changed record of a job back where it is kept in memory.
    fn update(&mut self, record: JobRecord) {
        if let Some(job) = self.jobs.get_mut(&record.id) {
            *job = record;
        } else if let Some(job) = self.finished.recent_mut(record.id) {
            *job = record;
        }
    }

    fn status(&self, id: u64) -> Option<JobStatus> {
        Some(self.status_of(&self.record(id)?))
    }

    fn status_of(&self, job: &JobRecord) -> JobStatus {
        let id = job.id;
        let reason = if job.phase == JobPhase::Scheduling {
            self.sched
                .report(JobId(id))
                .map(|r| format!("pending: {}", r.explain()))
                .unwrap_or_else(|| job.reason.clone())
        } else {
            job.reason.clone()
        };
        let seeking =
            job.phase <= JobPhase::Running && (job.ranks.len() as u32) < job.request.max_workers;
        let pending = seeking
            .then(|| self.sched.report(JobId(id)))
            .flatten()
            .map(|r| Pending {
                floods: r.floods,
                radius: r.radius,
                budget_ms: r.budget.map(|b| b.as_millis() as u64),
                nodes_answered: r.nodes_answered,
                offers: r.offers,
                workers_offered: r.workers_offered,
                declines: r
                    .declines
                    .iter()
                    .map(|(k, n)| (k.to_string(), *n))
                    .collect(),
                refusals: r
                    .refusals
                    .iter()
                    .map(|(k, n)| (k.to_string(), *n))
                    .collect(),
                granted: r.granted,
                needed: r.needed,
            });
        JobStatus {
            job: id,
            phase: job.phase,
            reason,
            ranks: job.ranks.clone(),
            request: job.request.clone(),
            pending,
            submitted_unix: job.submitted_unix,
        }
    }

    // ----- overlay -----

    fn overlay_event(&mut self, event: Event) {
        match event {
            Event::Flood {
                header,
                payload,
                distance,
                from,
                origin,
                ..
            } => match decode::<Advert<PeerId>>(&payload) {
                Ok(mut advert) => {
                    advert.flood = header;
                    // Out-of-range values are refused here, before they
                    // reach the scheduler (see `zorilla_core::limits`).
                    // No strike: the neighbour that forwarded the copy is
                    // not its author (the overlay forwards before the node
                    // reads it).
                    if let Err(e) = zorilla_core::limits::check_advert(&advert) {
                        tracing::warn!(%origin, via = %from, "advert refused: {e}");
                        return;
                    }
                    // Held or declined, the pending queue may change.
                    self.status.touch();
                    let out = self
                        .sched
                        .handle(self.now(), Input::AdvertDelivered { advert, distance });
                    self.execute(out);
                }
                Err(e) => tracing::debug!("undecodable advert: {e}"),
            },
            Event::Request {
                peer,
                payload,
                responder,
            } => match decode::<PeerRpc>(&payload) {
                Ok(rpc) => match validate::peer_rpc(&rpc) {
                    Ok(()) => self.rpc(peer, rpc, Reply::Overlay(responder)),
                    Err(e) => {
                        tracing::warn!(%peer, "request refused: {e}");
                        self.overlay
                            .report_misbehaviour(peer, format!("request refused: {e}"));
                        self.reply(
                            Reply::Overlay(responder),
                            PeerReply::Error(format!("refused: {e}")),
                        );
                    }
                },
                Err(e) => self.reply(
                    Reply::Overlay(responder),
                    PeerReply::Error(format!("malformed request: {e}")),
                ),
            },
            Event::PeerLost { peer } => self.maybe_probe(peer),
            Event::NeighboursChanged { added, removed } => {
                for peer in removed {
                    self.neighbours.remove(&peer);
                }
                self.neighbours.extend(added);
            }
            Event::PeerConnected { .. } | Event::Listening { .. } => {}
        }
    }

    /// The overlay closes connections it does not need, so a lost
    /// connection is not a lost peer: peers we have jobs with are probed,
    /// and only a failed probe counts.
    fn maybe_probe(&mut self, peer: PeerId) {
        let involved = self
            .placement
            .values()
            .any(|ranks| ranks.values().any(|p| p.node == peer))
            || self.members.values().any(|m| m.home == peer);
        if !involved || !self.probing.insert(peer) {
            return;
        }
        let net = self.net.clone();
        self.tasks.spawn(async move {
            // Spaced out, so that a node that is only slow (its cores busy
            // with workers, its event loop starved) gets seconds to answer
            // rather than two quick tries; a dead one is declared after
            // the pauses plus the timeouts.
            if net.call(peer, PeerRpc::Ping).await.is_ok() {
                return Done::Nothing;
            }
            for pause in PROBE_PAUSES {
                tokio::time::sleep(pause).await;
                if net.call(peer, PeerRpc::Ping).await.is_ok() {
                    return Done::Nothing;
                }
            }
            Done::PeerDead(peer)
        });
    }

    fn reply(&self, to: Reply, reply: PeerReply) {
        match to {
            Reply::Local(tx) => {
                let _ = tx.send(reply);
            }
            Reply::Overlay(responder) => {
                let overlay = self.overlay.clone();
                tokio::spawn(async move {
                    let _ = overlay.respond(responder, encode(&reply)).await;
                });
            }
        }
    }

    fn send(&mut self, to: PeerId, rpc: PeerRpc) {
        self.messages_sent += 1;
        let net = self.net.clone();
        self.tasks.spawn(async move {
            if let Err(e) = net.call(to, rpc).await {
                tracing::debug!(peer = %to, "send failed: {e}");
            }
            Done::Nothing
        });
    }

    /// Sends a grant; the answer says which run of the node took it (see
    /// [`zorilla_core::liveness::RankLiveness::booted`]).
    fn send_grant(&mut self, to: PeerId, msg: Message<PeerId>) {
        self.messages_sent += 1;
        let net = self.net.clone();
        self.tasks.spawn(async move {
            match net.call(to, PeerRpc::Sched(msg)).await {
                Ok(PeerReply::Granted { boot }) => Done::Granted { peer: to, boot },
                Ok(_) => Done::Nothing,
                Err(e) => {
                    tracing::debug!(peer = %to, "grant failed: {e}");
                    Done::Nothing
                }
            }
        });
    }

    fn rpc(&mut self, from: PeerId, rpc: PeerRpc, reply: Reply) {
        self.status.note_rpc(&rpc);
        let answer = match rpc {
            PeerRpc::Ping => PeerReply::Ack,
            PeerRpc::Ranks { jobs } => self.ranks_asked(from, jobs),
            PeerRpc::Status => return self.status_reply(reply, None),
            PeerRpc::StatusJob { job } => return self.status_reply(reply, Some(job)),
            PeerRpc::Sched(msg) => {
                let granted = matches!(msg, Message::Grant { .. });
                let out = self.sched.handle(
                    self.now(),
                    Input::Message {
                        from,
                        msg,
                        rtt: None,
                    },
                );
                self.execute(out);
                if granted {
                    PeerReply::Granted { boot: self.boot }
                } else {
                    PeerReply::Ack
                }
            }
            PeerRpc::GetJob { job } => match self.job_info(job) {
                Some(info) => PeerReply::Job(Box::new(info)),
                None => PeerReply::Error(format!("job {} unknown here", JobId(job))),
            },
            PeerRpc::GetBlock {
                sha256,
                offset,
                len,
            } => match check_hash(&sha256) {
                Err(e) => PeerReply::Error(e),
                Ok(()) => {
                    match self
                        .store
                        .blob_block(&sha256, offset, (len as usize).min(BLOCK_BYTES))
                    {
                        Ok(Some(block)) => PeerReply::Block(block),
                        // Not a file of a job of ours: perhaps one this node
                        // fetched to run workers (then it is complete and
                        // hash-checked).
                        Ok(None) => {
                            match cached_block(&self.dir.join("files"), &sha256, offset, len) {
                                Some(block) => PeerReply::Block(block),
                                None => PeerReply::Error(format!("no file {sha256} here")),
                            }
                        }
                        Err(e) => PeerReply::Error(e.to_string()),
                    }
                }
            },
            PeerRpc::Placement {
                job,
                phase,
                ranks,
                replaced,
            } => {
                self.placement_pushed(job, phase, ranks, replaced);
                PeerReply::Ack
            }
            PeerRpc::Barrier {
                job,
                to,
                from: src,
                msg,
            } => match self.members.get(&job).and_then(|m| m.net.barrier(to)) {
                Some(tx) => match tx.try_send(BarrierItem {
                    from: src,
                    node: from,
                    msg,
                }) {
                    Ok(()) => PeerReply::Ack,
                    Err(_) => PeerReply::Error("barrier queue full or closed".into()),
                },
                None => PeerReply::Error(format!("rank {to} not here")),
            },
            PeerRpc::Log { job, chunk } => match self.home_only(from, job, |_| Ok(())) {
                PeerReply::Ack => return self.append(reply, Append::Log { job, chunk }),
                refused => refused,
            },
            PeerRpc::Output {
                job,
                name,
                offset,
                data,
            } => match self.accept_output(from, job, &name, data.len()) {
                Ok(()) => {
                    let last = data.len() < BLOCK_BYTES;
                    let item = Append::Output {
                        job,
                        name,
                        offset,
                        data,
                        last,
                    };
                    return self.append(reply, item);
                }
                Err(e) => PeerReply::Error(e),
            },
            PeerRpc::WorkerEnded {
                job,
                rank,
                success,
                outcome,
            } => {
                self.worker_ended(from, job, rank, success, outcome);
                PeerReply::Ack
            }
        };
        self.reply(reply, answer);
    }

    /// Answers a remote view off the loop: the answer reads the database
    /// and is encoded and cut to size there.
    fn status_reply(&self, to: Reply, job: Option<String>) {
        let status = self.status.status();
        let overlay = self.overlay.clone();
        tokio::spawn(async move {
            let answer =
                tokio::task::spawn_blocking(move || status::answer(&status, job.as_deref()))
                    .await
                    .unwrap_or_else(|e| PeerReply::Error(format!("status: {e}")));
            match to {
                Reply::Local(tx) => {
                    let _ = tx.send(answer);
                }
                Reply::Overlay(r) => {
                    let _ = overlay.respond(r, encode(&answer)).await;
                }
            }
        });
    }

    /// Hands a log chunk or output block to the store's writer, and
    /// answers the sender once it is written (so a sender waits for the
    /// disk, and the loop does not).
    fn append(&self, to: Reply, item: Append) {
        let writer = self.writer.clone();
        let activity = self.activity.clone();
        let overlay = self.overlay.clone();
        tokio::spawn(async move {
            let answer = match writer.append(item).await {
                Ok(()) => {
                    activity.send_modify(|n| *n = n.wrapping_add(1));
                    PeerReply::Ack
                }
                Err(e) => PeerReply::Error(e.to_string()),
            };
            match to {
                Reply::Local(tx) => {
                    let _ = tx.send(answer);
                }
                Reply::Overlay(r) => {
                    let _ = overlay.respond(r, encode(&answer)).await;
                }
            }
        });
    }

    /// Whether a block of `len` bytes of output `name` of `job` from
    /// `from` is taken: only while the job is under way here, from a node
    /// running the rank the name starts with, and while the job's outputs
    /// stay within what this home keeps for a job ([`output_room`]). A
    /// refusal says why in one sentence, which the sender puts in the
    /// job's log.
    fn accept_output(
        &mut self,
        from: PeerId,
        job: u64,
        name: &str,
        len: usize,
    ) -> Result<(), String> {
        let Some(record) = self.jobs.get(&job) else {
            return Err(format!(
                "job {} is over (or unknown here): its outputs are no longer taken",
                JobId(job)
            ));
        };
        // Clients write outputs under these names: one that could leave
        // their directory, or that names a rank the sender does not run,
        // is refused here already.
        let sender = from.to_string();
        check_output_name(name, |rank| {
            record.ranks.get(&rank).is_some_and(|r| r.node == sender)
        })?;
        let room = output_room(&record.request, self.sched.config().resources.disk_mib);
        let store = &self.store;
        let used = self
            .output_bytes
            .entry(job)
            .or_insert_with(|| store.output_bytes(job).unwrap_or(0));
        let after = used.saturating_add(len as u64);
        if after > room {
            return Err(format!(
                "the outputs of job {} reached the {} MiB its home keeps for one job",
                JobId(job),
                room / (1024 * 1024)
            ));
        }
        *used = after;
        Ok(())
    }

    /// Accepts output for a job only from a node that runs (or ran) one of
    /// its ranks.
    fn home_only(
        &mut self,
        from: PeerId,
        job: u64,
        f: impl FnOnce(&mut Self) -> Result<(), String>,
    ) -> PeerReply {
        let from_rank = |j: &JobRecord| j.ranks.values().any(|r| r.node == from.to_string());
        // Late output of a finished job is checked against its stored record.
        let known = match self.jobs.get(&job) {
            Some(j) => from_rank(j),
            None => self.record(job).is_some_and(|j| from_rank(&j)),
        };
        if !known {
            return PeerReply::Error(format!("job {} has no worker on {from}", JobId(job)));
        }
        match f(self) {
            Ok(()) => PeerReply::Ack,
            Err(e) => PeerReply::Error(e),
        }
    }

    fn job_info(&self, job: u64) -> Option<JobInfo> {
        let record = self.record(job)?;
        Some(JobInfo {
            id: job,
            home: self.me,
            phase: record.phase,
            request: record.request.clone(),
            module: record.module.clone(),
            inputs: record.inputs.clone(),
            ranks: self.placement.get(&job).cloned().unwrap_or_default(),
        })
    }

    // ----- the core's outputs -----

    fn execute(&mut self, out: Vec<Output<PeerId>>) {
        let mut changed = BTreeSet::new();
        for output in out {
            match output {
                Output::Send {
                    to,
                    msg: msg @ Message::Grant { .. },
                } => self.send_grant(to, msg),
                Output::Send { to, msg } => self.send(to, PeerRpc::Sched(msg)),
                Output::Flood(advert) => {
                    self.messages_sent += 1;
                    let overlay = self.overlay.clone();
                    let id = FloodId {
                        job: advert.job,
                        seq: advert.flood.seq,
                    };
                    let header = advert.flood;
                    let payload = cbor_advert(&advert);
                    tokio::spawn(async move {
                        if let Err(e) = overlay.flood(id, header, payload).await {
                            tracing::warn!("flood failed: {e}");
                        }
                    });
                }
                Output::StartWorkers {
                    job,
                    home,
                    ranks,
                    incarnation,
                } => self.start_workers(job.0, home, ranks, incarnation),
                Output::StopWorkers { job, reason } => {
                    tracing::info!(job = %job, "stopping workers: {reason}");
                    self.stop_workers(job.0);
                }
                Output::Job(event) => {
                    if let Some(job) = self.job_event(event) {
                        changed.insert(job);
                    }
                }
            }
        }
        for job in changed {
            self.push_placement(job, Vec::new());
        }
    }

    /// Applies an event of a home job; returns the job if its placement or
    /// phase changed.
    fn job_event(&mut self, event: JobEvent<PeerId>) -> Option<u64> {
        match event {
            JobEvent::Rejected { job, error } => {
                self.end_home_job(job.0, JobPhase::Failed, format!("rejected: {error}"));
                None
            }
            JobEvent::Granted {
                job,
                node,
                ranks,
                incarnation,
                ..
            } => {
                tracing::info!(job = %job, %node, ?ranks, "workers granted");
                if node != self.me {
                    self.liveness.placed(self.now(), job, node, &ranks);
                }
                let replaced: Vec<u32> = {
                    let lost = self.lost_ranks.entry(job.0).or_default();
                    ranks.iter().copied().filter(|r| lost.remove(r)).collect()
                };
                let placement = self.placement.entry(job.0).or_default();
                for rank in &ranks {
                    placement.insert(*rank, Placed { node, incarnation });
                }
                if let Some(record) = self.jobs.get_mut(&job.0) {
                    for rank in &ranks {
                        record.ranks.insert(
                            *rank,
                            RankStatus {
                                node: node.to_string(),
                                outcome: None,
                            },
                        );
                    }
                    let record = record.clone();
                    self.persist(&record);
                }
                if !replaced.is_empty() {
                    self.push_placement(job.0, replaced);
                    return None;
                }
                Some(job.0)
            }
            JobEvent::Started { job, workers } => {
                if let Some(record) = self.jobs.get_mut(&job.0)
                    && record.advance(JobPhase::Running, format!("running with {workers} workers"))
                {
                    let record = record.clone();
                    self.persist(&record);
                }
                Some(job.0)
            }
            JobEvent::Full { .. } => None,
            JobEvent::WorkersLost { job, node, ranks } => {
                tracing::warn!(job = %job, %node, ?ranks, "workers lost");
                self.liveness.forget(job, &node, &ranks);
                if let Some(placement) = self.placement.get_mut(&job.0) {
                    for rank in &ranks {
                        placement.remove(rank);
                    }
                }
                self.lost_ranks.entry(job.0).or_default().extend(&ranks);
                if let Some(record) = self.jobs.get_mut(&job.0) {
                    for rank in &ranks {
                        if let Some(r) = record.ranks.get_mut(rank) {
                            // The loop may have said how (`liveness`).
                            r.outcome
                                .get_or_insert_with(|| format!("lost: node {node} failed or left"));
                        }
                    }
                    let record = record.clone();
                    self.persist(&record);
                }
                Some(job.0)
            }
            JobEvent::Ended { job, phase, reason } => {
                self.liveness.forget_job(job);
                let phase = match phase {
                    Phase::Scheduling | Phase::Running => return None,
                    Phase::Completed => JobPhase::Completed,
                    Phase::Cancelled => JobPhase::Cancelled,
                    Phase::Failed => JobPhase::Failed,
                };
                self.end_home_job(job.0, phase, reason);
                Some(job.0)
            }
        }
    }

    fn end_home_job(&mut self, job: u64, phase: JobPhase, reason: String) {
        if let Some(record) = self.jobs.get_mut(&job)
            && record.advance(phase, reason.clone())
        {
            tracing::info!(job = %JobId(job), ?phase, "job ended: {reason}");
            // Ranks still running were stopped with the job (`advance`);
            // their nodes do not report back for a job that is over.
            let record = record.clone();
            self.persist(&record);
            // Finished: out of memory (but for the newest few).
            self.jobs.remove(&job);
            self.output_bytes.remove(&job);
            self.finished.add(record);
        }
    }

    /// Sends the job's current placement and phase to every node with one
    /// of its ranks (the copies).
    fn push_placement(&mut self, job: u64, replaced: Vec<u32>) {
        let Some(phase) = self
            .jobs
            .get(&job)
            .or_else(|| self.finished.recent(job))
            .map(|r| r.phase)
        else {
            return;
        };
        let ranks = if phase.is_terminal() {
            // The last push of a finished job: its placement is not kept.
            self.lost_ranks.remove(&job);
            self.placement.remove(&job).unwrap_or_default()
        } else {
            self.placement.get(&job).cloned().unwrap_or_default()
        };
        let nodes: BTreeSet<PeerId> = ranks.values().map(|p| p.node).collect();
        for node in nodes {
            let rpc = PeerRpc::Placement {
                job,
                phase,
                ranks: ranks.clone(),
                replaced: replaced.clone(),
            };
            if node == self.me {
                self.placement_pushed(job, phase, ranks.clone(), replaced.clone());
            } else {
                self.send(node, rpc);
            }
        }
    }

    fn placement_pushed(
        &mut self,
        job: u64,
        phase: JobPhase,
        ranks: BTreeMap<u32, Placed>,
        replaced: Vec<u32>,
    ) {
        self.status.job_phase(job, phase);
        let Some(member) = self.members.get_mut(&job) else {
            return;
        };
        member.heard = Instant::now();
        member.net.set_ranks(ranks);
        let size = member.net.size.load(std::sync::atomic::Ordering::SeqCst);
        for rank in replaced {
            let change = MembershipChange {
                kind: ChangeKind::Replaced,
                rank,
                size,
            };
            for worker in member.workers.keys() {
                if let Some(inbox) = member.net.inbox(*worker) {
                    inbox.push_membership(change);
                }
            }
        }
        if phase == JobPhase::Cancelled || phase == JobPhase::Failed {
            self.stop_workers(job);
        }
    }

    // ----- workers on this node -----

    fn start_workers(&mut self, job: u64, home: PeerId, ranks: Vec<u32>, incarnation: u32) {
        let member = self.members.entry(job).or_insert_with(|| MemberJob {
            home,
            net: JobNet::new(job, self.net.links.clone()),
            workers: HashMap::new(),
            pending: HashMap::new(),
            stopped: false,
            heard: Instant::now(),
            born: HashMap::new(),
        });
        member.stopped = false;
        // Inboxes exist from now on, so messages for these ranks queue
        // while the module is fetched.
        for rank in &ranks {
            member.born.insert(*rank, Instant::now());
            let ends = member.net.register(*rank, incarnation);
            member.pending.insert(*rank, ends);
        }
        let net = self.net.clone();
        let sandbox = self.sandbox.clone();
        let dir = self.dir.join("jobs").join(JobId(job).to_string());
        let files = self.dir.join("files");
        let job_net = member.net.clone();
        let ranks_started = ranks.clone();
        self.tasks.spawn(async move {
            let result = prepare(net, sandbox, home, job, dir, files).await;
            if let Ok((info, _, _)) = &result {
                job_net.set_ranks(info.ranks.clone());
            }
            Done::Prepared {
                job,
                ranks: ranks_started,
                result: Box::new(result),
            }
        });
    }

    fn stop_workers(&mut self, job: u64) {
        if let Some(member) = self.members.get_mut(&job) {
            member.stopped = true;
            for worker in member.workers.values() {
                worker.cancel();
            }
            member.net.close();
        }
    }

    /// Copies of jobs whose home has said nothing for [`COPY_STALE`] ask it
    /// for the job's state: a lost push (a cancel, a replaced rank) is
    /// found out within that time instead of never.
    fn refresh_stale_copies(&mut self) {
        for (job, member) in &mut self.members {
            if member.heard.elapsed() < COPY_STALE || member.home == self.me {
                continue;
            }
            member.heard = Instant::now();
            let (net, home, job) = (self.net.clone(), member.home, *job);
            self.tasks.spawn(async move {
                let info = match net.call_ok(home, PeerRpc::GetJob { job }).await {
                    Ok(PeerReply::Job(info)) => match validate::job_info(&info) {
                        Ok(()) => Ok(info),
                        Err(e) => Err(format!("the home's copy of the job is refused: {e}")),
                    },
                    Ok(other) => Err(format!("{other:?}")),
                    Err(e) => Err(e),
                };
                Done::Refreshed { job, info }
            });
        }
    }

    fn done(&mut self, done: Done) {
        match done {
            Done::Nothing => {}
            Done::RanksAnswered { peer, answer } => self.ranks_answered(peer, answer),
            Done::Granted { peer, boot } => {
                let now = self.now();
                self.liveness.booted(now, &peer, boot);
            }
            Done::Refreshed { job, info } => match info {
                Ok(info) => {
                    if info.phase.is_terminal() {
                        tracing::info!(
                            job = %JobId(job),
                            phase = ?info.phase,
                            "asked the quiet home: the job is over"
                        );
                    }
                    self.placement_pushed(job, info.phase, info.ranks, Vec::new());
                }
                Err(e) => tracing::debug!(job = %JobId(job), "asking the home for the job: {e}"),
            },
            Done::PeerDead(peer) => {
                self.probing.remove(&peer);
                tracing::warn!(%peer, "peer does not answer; treating it as lost");
                let out = self.sched.handle(self.now(), Input::PeerLost(peer));
                self.execute(out);
                // Workers of jobs whose home is gone are stopped.
                let orphaned: Vec<u64> = self
                    .members
                    .iter()
                    .filter(|(_, m)| m.home == peer)
                    .map(|(j, _)| *j)
                    .collect();
                for job in orphaned {
                    self.stop_workers(job);
                }
            }
            Done::WorkerEnded { job, rank } => {
                let mut empty = false;
                if let Some(member) = self.members.get_mut(&job) {
                    member.workers.remove(&rank);
                    empty = member.workers.is_empty();
                }
                if empty {
                    self.members.remove(&job);
                }
                let out = self.sched.handle(
                    self.now(),
                    Input::WorkersEnded {
                        job: JobId(job),
                        ranks: vec![rank],
                    },
                );
                self.execute(out);
            }
            Done::Prepared { job, ranks, result } => self.prepared(job, ranks, *result),
        }
    }

    fn prepared(
        &mut self,
        job: u64,
        ranks: Vec<u32>,
        result: Result<(JobInfo, Program, PathBuf), String>,
    ) {
        let Some(member) = self.members.get_mut(&job) else {
            return;
        };
        let ends: Vec<(u32, Ends)> = ranks
            .iter()
            .filter_map(|r| member.pending.remove(r).map(|e| (*r, e)))
            .collect();
        let home = member.home;
        let stopped = member.stopped;
        let job_net = member.net.clone();
        if let Ok((info, _, _)) = &result {
            self.status.job_copy(job, home, &info.request, info.phase);
        }
        let (info, program, dir) = match result {
            Ok(ok) if !stopped => ok,
            Ok(_) => {
                for rank in ranks {
                    self.tasks
                        .spawn(async move { Done::WorkerEnded { job, rank } });
                }
                return;
            }
            Err(e) => {
                tracing::warn!(job = %JobId(job), "cannot start workers: {e}");
                for rank in ranks {
                    let net = self.net.clone();
                    let outcome = format!("could not start: {e}");
                    self.tasks.spawn(async move {
                        let rpc = PeerRpc::WorkerEnded {
                            job,
                            rank,
                            success: false,
                            outcome,
                        };
                        let _ = net.call(home, rpc).await;
                        Done::WorkerEnded { job, rank }
                    });
                }
                return;
            }
        };
        let limits = Limits {
            memory_bytes: info.request.memory_mib.saturating_mul(1024 * 1024),
            cpu_time: match info.request.cpu_time_secs {
                0 => Duration::MAX,
                secs => Duration::from_secs(secs),
            },
            wall_time: validate::wall_time(&info.request).unwrap_or(Duration::MAX),
            output_bytes: 64 * 1024 * 1024,
            // The disk a job asks for per worker; 0 leaves the node's cap.
            disk_bytes: match info.request.disk_mib {
                0 => u64::MAX,
                mib => mib.saturating_mul(1024 * 1024),
            },
        };
        for (rank, (inbox, barrier_rx)) in ends {
            let job_dir = dir.join(rank.to_string());
            if let Err(e) = link_inputs(&dir.join("inputs"), &job_dir.join("inputs")) {
                tracing::warn!("cannot prepare the job directory: {e}");
            }
            let (out_tx, out_rx) = mpsc::channel(16);
            let transport = NetTransport::new(
                rank,
                self.net.clone(),
                job_net.clone(),
                inbox,
                barrier_rx,
                random_u64(),
            );
            let spec = WorkerSpec {
                program_name: "worker".into(),
                args: info.request.args.clone(),
                env: vec![
                    ("ZORILLA_JOB".into(), JobId(job).to_string()),
                    ("ZORILLA_RANK".into(), rank.to_string()),
                ],
                job_dir: Some(job_dir.clone()),
                limits,
                output: Some(out_tx),
                transport: Some(Box::new(transport)),
            };
            let handle = self.sandbox.start(&program, spec);
            self.status.worker_started();
            if let Some(member) = self.members.get_mut(&job) {
                member.workers.insert(rank, handle.cancel_handle());
            }
            tracing::info!(job = %JobId(job), rank, "worker started");
            let net = self.net.clone();
            // What the worker may leave in /outputs is what may go home.
            let outputs_limit = limits.capped_by(&self.sandbox.config().caps).disk_bytes;
            self.tasks.spawn(supervise(
                net,
                home,
                job,
                rank,
                handle,
                out_rx,
                job_dir,
                outputs_limit,
            ));
        }
    }
}

type Ends = (Arc<Inbox>, mpsc::Receiver<BarrierItem>);

/// A submission refused because the disk cannot be written.
fn refused(reason: String) -> Response {
    Response::error(
        ErrorKind::Busy,
        format!(
            "this node cannot write to its disk ({reason}): it accepts no jobs until space is freed"
        ),
    )
}

fn not_found(job: u64) -> Response {
    Response::error(
        ErrorKind::NotFound,
        format!("no job {} on this node", JobId(job)),
    )
}

/// The core's view of a job request.
pub(crate) fn spec_of(request: &JobRequest) -> JobSpec {
    JobSpec {
        per_worker: Resources::new(request.cores, request.memory_mib, request.disk_mib),
        workers: WorkerCount {
            min: request.min_workers,
            max: request.max_workers,
        },
        strategy: request.strategy,
        lifetime: Duration::from_secs(request.lifetime_secs),
        on_worker_lost: request.on_worker_lost,
    }
}

/// Gets the job's copy from its home, and its module and inputs (from the
/// local file cache or in blocks from the home, hash-checked), and loads the
/// module.
async fn prepare(
    net: Net,
    sandbox: Sandbox,
    home: PeerId,
    job: u64,
    dir: PathBuf,
    files: PathBuf,
) -> Result<(JobInfo, Program, PathBuf), String> {
    // A connection the overlay closes under us (it prunes connections it
    // does not need) fails one request, not the job: try three times, as
    // for file blocks.
    let mut attempt = 0;
    let info = loop {
        attempt += 1;
        match net.call_ok(home, PeerRpc::GetJob { job }).await {
            Ok(PeerReply::Job(info)) => {
                validate::job_info(&info)
                    .map_err(|e| format!("the home's copy of the job is refused: {e}"))?;
                break *info;
            }
            Ok(other) => return Err(format!("unexpected answer from the home: {other:?}")),
            Err(e) if attempt >= 3 => return Err(e),
            Err(e) => tracing::debug!(job = %JobId(job), "asking the home for the job: {e}; again"),
        }
    };
    check_job_info(&info).map_err(|e| format!("the home sent a job this node refuses: {e}"))?;
    tokio::fs::create_dir_all(&files)
        .await
        .map_err(|e| e.to_string())?;
    // Files come from the home or from another node of the job that has
    // them already, in random order, so that a job starting on many nodes
    // does not have them all fetch from the home.
    let mut sources: Vec<PeerId> = info
        .ranks
        .values()
        .map(|p| p.node)
        .filter(|p| *p != net.me && *p != home)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    sources.push(home);
    let start = random_below(sources.len());
    sources.rotate_left(start);
    let module = fetch(&net, &sources, &files, &info.module).await?;
    let inputs = dir.join("inputs");
    tokio::fs::create_dir_all(&inputs)
        .await
        .map_err(|e| e.to_string())?;
    for input in &info.inputs {
        let data = fetch(&net, &sources, &files, input).await?;
        // The name was checked (`check_job_info`): one plain file name.
        tokio::fs::write(inputs.join(&input.name), data)
            .await
            .map_err(|e| e.to_string())?;
    }
    let program = tokio::task::spawn_blocking(move || sandbox.load(&module))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("module refused: {e}"))?;
    Ok((info, program, dir))
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

/// Gets a content-addressed file: from the local cache, else in blocks from
/// `sources` in turn (the next one after a failure; a node of the job that
/// has not got the file yet fails fast), hash-checked, then cached. The
/// file's hash and size were checked ([`check_job_info`]).
async fn fetch(
    net: &Net,
    sources: &[PeerId],
    files: &Path,
    file: &FileRef,
) -> Result<Vec<u8>, String> {
    let path = files.join(&file.sha256);
    let cached = {
        let (files, sha256, size) = (files.to_owned(), file.sha256.clone(), file.size);
        tokio::task::spawn_blocking(move || jobfs::read_file(&files, &sha256, size)).await
    };
    if let Ok(Ok(data)) = cached
        && hex::encode(Sha256::digest(&data)) == file.sha256
    {
        return Ok(data);
    }
    let mut data = Vec::with_capacity(usize::try_from(file.size).unwrap_or(0));
    let mut failures = 0;
    while (data.len() as u64) < file.size {
        let rpc = PeerRpc::GetBlock {
            sha256: file.sha256.clone(),
            offset: data.len() as u64,
            len: BLOCK_BYTES as u32,
        };
        let from = sources[failures % sources.len().max(1)];
        match net.call_ok(from, rpc).await {
            Ok(PeerReply::Block(block))
                if !block.is_empty() && block.len() as u64 <= file.size - data.len() as u64 =>
            {
                data.extend_from_slice(&block)
            }
            other => {
                failures += 1;
                if failures >= 3 * sources.len().max(1) {
                    return Err(format!("cannot fetch {}: {other:?}", file.name));
                }
            }
        }
    }
    if hex::encode(Sha256::digest(&data)) != file.sha256 {
        return Err(format!("{} does not match its hash", file.name));
    }
    // A temporary name of this fetch's own: two jobs of one module starting
    // here at once fetch the same file, and a shared name let one rename
    // the other's file away ("No such file or directory").
    let tmp = path.with_extension(format!("part-{:016x}", random_u64()));
    tokio::fs::write(&tmp, &data)
        .await
        .map_err(|e| e.to_string())?;
    tokio::fs::rename(&tmp, &path)
        .await
        .map_err(|e| e.to_string())?;
    Ok(data)
}

/// Gives each rank its own view of the job's inputs (hard links, copies
/// where links fail). `from` holds only what [`prepare`] wrote there; `to`
/// is the rank's own, and nothing is written through a link in either.
fn link_inputs(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    let listing = jobfs::walk(from)?;
    for (name, size) in listing.files {
        let dest = to.join(&name);
        // `link` neither follows a link at `from` nor writes through one
        // at `dest` (it fails if `dest` exists).
        if std::fs::hard_link(from.join(&name), &dest).is_ok() {
            continue;
        }
        if std::fs::symlink_metadata(&dest).is_ok() {
            continue; // Already there (a replaced rank's directory).
        }
        let (mut source, _) = jobfs::open_file(from, &name, size)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut target = jobfs::create_file(to, &name)?;
        std::io::copy(&mut source, &mut target)?;
    }
    Ok(())
}

/// Refuses a job copy whose files or names could make this node touch a
/// path outside the job's directories or allocate without bound: hashes
/// must be 64 lowercase hex digits (they name files in the cache), sizes at
/// most [`MAX_FILE_BYTES`], input names plain distinct file names.
fn check_job_info(info: &JobInfo) -> Result<(), String> {
    let mut names = BTreeSet::new();
    for file in std::iter::once(&info.module).chain(&info.inputs) {
        check_hash(&file.sha256)?;
        if file.size > MAX_FILE_BYTES {
            return Err(format!(
                "{:?} has {} bytes, more than the {MAX_FILE_BYTES} a job file may have",
                file.name, file.size
            ));
        }
    }
    for input in &info.inputs {
        jobfs::check_file_name(&input.name)
            .map_err(|e| format!("bad input file name {:?}: {e}", input.name))?;
        if !names.insert(input.name.as_str()) {
            return Err(format!("input file {:?} appears twice", input.name));
        }
    }
    Ok(())
}

/// A file hash from a peer, before it names anything on disk.
fn check_hash(sha256: &str) -> Result<(), String> {
    if jobfs::is_sha256_hex(sha256) {
        Ok(())
    } else {
        Err(format!(
            "{:?} is not a file hash (64 lowercase hex digits)",
            sha256.chars().take(80).collect::<String>()
        ))
    }
}

/// The most output bytes a home keeps of one job: the disk this node
/// offers to jobs (`disk_mib` of its configuration), and no more than the
/// job's workers may leave in all when the job says how much disk each
/// gets (its `disk_mib` times its most workers).
fn output_room(request: &JobRequest, home_disk_mib: u64) -> u64 {
    let mut mib = home_disk_mib;
    if request.disk_mib > 0 {
        mib = mib.min(
            request
                .disk_mib
                .saturating_mul(u64::from(request.max_workers)),
        );
    }
    mib.saturating_mul(1024 * 1024)
}

/// Checks the name of an output file a worker node sends: `rank/path`,
/// a relative name that stays inside a directory ([`jobfs::check_relative`]),
/// whose rank the sender runs (`runs`).
fn check_output_name(name: &str, runs: impl Fn(u32) -> bool) -> Result<(), String> {
    jobfs::check_relative(name).map_err(|e| format!("output name {name:?} refused: {e}"))?;
    let rank = name
        .split_once('/')
        .and_then(|(rank, _)| rank.parse::<u32>().ok().filter(|r| r.to_string() == rank));
    match rank {
        Some(rank) if runs(rank) => Ok(()),
        _ => Err(format!(
            "output name {name:?} refused: not rank/file for a rank of the sender"
        )),
    }
}

/// A block of a file in this node's fetched-file cache `files`, by hash
/// only (anything else is refused before it touches the disk), opened
/// without following a link.
fn cached_block(files: &Path, sha256: &str, offset: u64, len: u32) -> Option<Vec<u8>> {
    use std::io::{Read, Seek};
    check_hash(sha256).ok()?;
    let (mut file, size) = jobfs::open_file(files, sha256, u64::MAX).ok()?;
    file.seek(std::io::SeekFrom::Start(offset.min(size))).ok()?;
    let want = u64::from(len.min(BLOCK_BYTES as u32)).min(size.saturating_sub(offset));
    let mut block = Vec::with_capacity(want as usize);
    file.take(want).read_to_end(&mut block).ok()?;
    Some(block)
}

/// Streams a worker's output to the home while it runs, then its output
/// files (see [`send_outputs`]), then how it ended.
#[allow(clippy::too_many_arguments)]
async fn supervise(
    net: Net,
    home: PeerId,
    job: u64,
    rank: u32,
    handle: zorilla_sandbox::WorkerHandle,
    mut output: mpsc::Receiver<zorilla_sandbox::OutputChunk>,
    job_dir: PathBuf,
    outputs_limit: u64,
) -> Done {
    let send_chunk = |chunk: zorilla_sandbox::OutputChunk| {
        let net = net.clone();
        async move {
            for piece in chunk.data.chunks(BLOCK_BYTES) {
                let chunk = LogChunk {
                    rank,
                    stderr: chunk.kind == OutputKind::Stderr,
                    data: piece.to_vec(),
                };
                let _ = net.call(home, PeerRpc::Log { job, chunk }).await;
            }
        }
    };
    let cancel = handle.cancel_handle();
    let wait = handle.wait();
    tokio::pin!(wait);
    let report = loop {
        tokio::select! {
            Some(chunk) = output.recv() => send_chunk(chunk).await,
            report = &mut wait => break report,
        }
    };
    let cancelled = report.outcome == Outcome::Cancelled;
    let drain = async {
        while let Ok(chunk) = output.try_recv() {
            send_chunk(chunk).await;
        }
    };
    if cancelled {
        // Cancelled: the job is over at its home (or this node is
        // stopping). The last output goes if it can go quickly; the worker
        // then counts as ended here at once, without reporting an end
        // nobody waits for.
        let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
        let _ = std::fs::remove_dir_all(&job_dir);
        return Done::WorkerEnded { job, rank };
    }
    drain.await;
    let outputs = job_dir.join("outputs");
    let sent = send_outputs(&net, home, job, rank, &outputs, outputs_limit);
    tokio::select! {
        () = sent => {}
        // The job was stopped while its outputs went home: they are not
        // wanted any more.
        () = cancel.cancelled() => {
            let _ = std::fs::remove_dir_all(&job_dir);
            return Done::WorkerEnded { job, rank };
        }
    }
    let (success, outcome) = match &report.outcome {
        Outcome::Exited(0) => (true, "exited with status 0".to_string()),
        Outcome::Exited(code) => (false, format!("exited with status {code}")),
        other => (false, other.to_string()),
    };
    // The home refuses longer reports: cut at a character boundary.
    let mut outcome = outcome;
    if outcome.len() > validate::MAX_OUTCOME_BYTES {
        let mut cut = validate::MAX_OUTCOME_BYTES - 3;
        while !outcome.is_char_boundary(cut) {
            cut -= 1;
        }
        outcome.truncate(cut);
        outcome.push_str("...");
    }
    let rpc = PeerRpc::WorkerEnded {
        job,
        rank,
        success,
        outcome,
    };
    for _ in 0..3 {
        if net.call(home, rpc.clone()).await.is_ok() {
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&job_dir);
    Done::WorkerEnded { job, rank }
}

/// Sends the regular files a worker left in `outputs` (and in directories
/// below it) to the home, named `rank/path`, in blocks, never holding more
/// than a block in memory; `limit` bytes in all. Nothing is opened through
/// a link (see [`jobfs`]): every other entry (a link, a pipe, a device, a
/// file beyond the limit) is skipped with a line in the rank's log. A block
/// the home refuses (the job is over, it has all the outputs its home
/// keeps, the home's disk is full) ends the sending, with the home's
/// reason in the rank's log.
async fn send_outputs(net: &Net, home: PeerId, job: u64, rank: u32, outputs: &Path, limit: u64) {
    use tokio::io::AsyncReadExt;
    let log = |line: String| {
        let chunk = LogChunk {
            rank,
            stderr: true,
            data: format!("zorilla: {line}\n").into_bytes(),
        };
        async move {
            let _ = net.call(home, PeerRpc::Log { job, chunk }).await;
        }
    };
    let root = outputs.to_owned();
    let listing = match tokio::task::spawn_blocking(move || jobfs::walk(&root)).await {
        Ok(Ok(listing)) => listing,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => return,
        Ok(Err(e)) => return log(format!("cannot read outputs/: {e}")).await,
        Err(e) => return log(format!("cannot read outputs/: {e}")).await,
    };
    for (name, why) in &listing.skipped {
        log(format!("skipped outputs/{name}: {why}")).await;
    }
    if listing.truncated {
        log(format!(
            "outputs/ has more than {} entries; the rest were not sent",
            jobfs::MAX_ENTRIES
        ))
        .await;
    }
    let mut left = limit;
    for (name, _) in listing.files {
        let (root, relative) = (outputs.to_owned(), name.clone());
        let opened =
            tokio::task::spawn_blocking(move || jobfs::open_file(&root, &relative, left)).await;
        let (file, size) = match opened {
            Ok(Ok(opened)) => opened,
            Ok(Err(why)) => {
                log(format!("skipped outputs/{name}: {why}")).await;
                continue;
            }
            Err(e) => {
                log(format!("skipped outputs/{name}: {e}")).await;
                continue;
            }
        };
        left -= size;
        let mut file = tokio::fs::File::from_std(file).take(size);
        let sent_as = format!("{rank}/{name}");
        let mut offset = 0u64;
        loop {
            let mut block = Vec::with_capacity(BLOCK_BYTES);
            while block.len() < BLOCK_BYTES {
                let want = BLOCK_BYTES - block.len();
                match (&mut file).take(want as u64).read_buf(&mut block).await {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => {
                        log(format!("reading outputs/{name} stopped: {e}")).await;
                        break;
                    }
                }
            }
            let last = block.len() < BLOCK_BYTES;
            let n = block.len() as u64;
            let rpc = PeerRpc::Output {
                job,
                name: sent_as.clone(),
                offset,
                data: block,
            };
            let mut answer = Err(String::new());
            for _ in 0..3 {
                answer = net.call(home, rpc.clone()).await;
                if answer.is_ok() {
                    break;
                }
            }
            match answer {
                Ok(PeerReply::Error(e)) => {
                    return log(format!("outputs/{name} and the rest were not sent: {e}")).await;
                }
                Ok(_) => {}
                // A file with a hole is worse than none: the home has it
                // up to here, and the log says so.
                Err(e) => {
                    return log(format!("outputs/{name} could not be sent home: {e}")).await;
                }
            }
            offset += n;
            if last {
                break;
            }
        }
    }
}

impl Node {
    /// A rank ended on some node: record it, and end the job when every rank
    /// is done (or one failed).
    fn worker_ended(&mut self, from: PeerId, job: u64, rank: u32, success: bool, outcome: String) {
        let Some(mut record) = self.record(job) else {
            return;
        };
        let Some(status) = record.ranks.get_mut(&rank) else {
            return;
        };
        if status.node != from.to_string() {
            return; // A replaced worker's late report.
        }
        self.liveness.ended(JobId(job), &from, rank);
        status.outcome = Some(outcome.clone());
        self.persist(&record);
        self.update(record.clone());
        if record.phase.is_terminal() {
            return;
        }
        if !success {
            if outcome == Outcome::Cancelled.to_string() {
                return;
            }
            let reason = format!("rank {rank} on {from}: {outcome}");
            self.end_home_job(job, JobPhase::Failed, reason.clone());
            let out = self.sched.handle(
                self.now(),
                Input::Fail {
                    job: JobId(job),
                    reason,
                },
            );
            self.execute(out);
            self.push_placement(job, Vec::new());
            return;
        }
        let all_done = record
            .ranks
            .values()
            .all(|r| r.outcome.as_deref() == Some("exited with status 0"));
        let running = self.sched.phase(JobId(job)) == Some(Phase::Running);
        let enough = record.ranks.len() as u32 >= record.request.min_workers;
        if all_done && running && enough {
            let n = record.ranks.len();
            self.end_home_job(
                job,
                JobPhase::Completed,
                format!("all {n} workers exited with status 0"),
            );
            let out = self.sched.handle(self.now(), Input::Finish(JobId(job)));
            self.execute(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, data: &[u8]) -> FileRef {
        FileRef {
            name: name.into(),
            sha256: hex::encode(Sha256::digest(data)),
            size: data.len() as u64,
        }
    }

    /// What a GetBlock from a peer reaches: only a hash names a file, and
    /// a cached file is read without following a link.
    #[test]
    fn a_block_request_names_a_cached_file_by_hash_only() {
        let dir = tempfile::tempdir().unwrap();
        let files = dir.path().join("files");
        std::fs::create_dir(&files).unwrap();
        std::fs::write(dir.path().join("identity.ed25519"), b"PRIVATE KEY").unwrap();
        let data = b"module bytes".to_vec();
        let good = file("m", &data).sha256;
        std::fs::write(files.join(&good), &data).unwrap();
        assert_eq!(cached_block(&files, &good, 7, 100).unwrap(), b"bytes");
        assert_eq!(cached_block(&files, &good, 100, 100).unwrap(), b"");
        for bad in [
            "../identity.ed25519",
            "/etc/passwd",
            "..",
            "",
            good.to_uppercase().as_str(),
        ] {
            assert!(check_hash(bad).is_err(), "{bad:?}");
            assert_eq!(cached_block(&files, bad, 0, 100), None, "{bad:?}");
        }
        // A well-formed hash that is a link in the cache is not followed.
        let linked = "f".repeat(64);
        std::os::unix::fs::symlink("../identity.ed25519", files.join(&linked)).unwrap();
        assert_eq!(cached_block(&files, &linked, 0, 100), None);
        let error = check_hash("../identity.ed25519").unwrap_err();
        assert_eq!(
            error,
            "\"../identity.ed25519\" is not a file hash (64 lowercase hex digits)"
        );
    }

    #[test]
    fn a_job_copy_with_paths_for_names_or_huge_files_is_refused() {
        let info = |module: FileRef, inputs: Vec<FileRef>| JobInfo {
            id: 1,
            home: PeerId::random(),
            phase: JobPhase::Running,
            request: crate::protocol::JobRequest::default(),
            module,
            inputs,
            ranks: BTreeMap::new(),
        };
        let module = file("module.wasm", b"\0asm");
        assert!(check_job_info(&info(module.clone(), vec![file("in.txt", b"x")])).is_ok());
        let bad_hash = FileRef {
            sha256: "../../identity.ed25519".into(),
            ..module.clone()
        };
        let huge = FileRef {
            size: u64::MAX,
            ..module.clone()
        };
        for (module, inputs) in [
            (bad_hash.clone(), vec![]),
            (module.clone(), vec![bad_hash]),
            (huge, vec![]),
            (
                module.clone(),
                vec![file("../../../../identity.ed25519", b"x")],
            ),
            (module.clone(), vec![file("/etc/passwd", b"x")]),
            (module.clone(), vec![file("sub/x", b"x")]),
            (module.clone(), vec![file("..", b"x")]),
            (module.clone(), vec![file("a", b"x"), file("a", b"y")]),
        ] {
            let info = info(module, inputs);
            assert!(check_job_info(&info).is_err(), "{info:?}");
        }
    }

    #[test]
    fn output_names_are_a_rank_of_the_sender_then_a_relative_path() {
        let runs = |rank: u32| rank == 3;
        for good in ["3/ok.txt", "3/sub/deep.txt"] {
            assert_eq!(check_output_name(good, runs), Ok(()), "{good}");
        }
        for bad in [
            "4/ok.txt",
            "3",
            "03/ok.txt",
            "+3/ok.txt",
            "3/../../x",
            "/3/x",
            "3/",
            "x/ok.txt",
            "3/a\0b",
        ] {
            assert!(check_output_name(bad, runs).is_err(), "{bad:?}");
        }
    }

    /// The inputs a rank sees are the job's, copied or linked, and a link
    /// already in the rank's directory is not written through.
    #[test]
    fn inputs_are_linked_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("inputs");
        let to = dir.path().join("0/inputs");
        std::fs::create_dir_all(&from).unwrap();
        std::fs::create_dir_all(&to).unwrap();
        std::fs::write(from.join("a.txt"), b"a").unwrap();
        std::fs::write(from.join("b.txt"), b"b").unwrap();
        std::fs::write(dir.path().join("victim"), b"untouched").unwrap();
        std::os::unix::fs::symlink("../../victim", to.join("b.txt")).unwrap();
        link_inputs(&from, &to).unwrap();
        assert_eq!(std::fs::read(to.join("a.txt")).unwrap(), b"a");
        assert_eq!(
            std::fs::read(dir.path().join("victim")).unwrap(),
            b"untouched"
        );
    }
}

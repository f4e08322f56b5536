//! The node's event loop: one `tokio::select!` over shutdown, client
//! commands, overlay events, calls from this node's own tasks, finished
//! tasks and the scheduler's timer. Each branch hands its event to the core's
//! [`Scheduler`] (or to the job bookkeeping here) and executes what comes
//! out. Every decision about where workers go is the core's; this module
//! does the IO: messages, files, workers, the database.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use zorilla_core::advert::{Advert, JobId, WorkerCount};
use zorilla_core::flood::FloodId;
use zorilla_core::node::{Input, JobEvent, JobSpec, Output, Phase, Scheduler, SchedulerConfig};
use zorilla_core::resources::Resources;
use zorilla_overlay::{Event, OverlayHandle, PeerId, Responder};
use zorilla_sandbox::{
    CancelHandle, ChangeKind, Delivery, Limits, MembershipChange, Outcome, OutputKind, Program,
    Sandbox, WorkerSpec,
};

use crate::net::{BarrierItem, JobNet, LocalCall, Net, NetTransport};
use crate::protocol::{
    ErrorKind, JobPhase, JobRequest, JobStatus, LogChunk, LogPage, MAX_LOG_PAGE_BYTES, NamedFile,
    NodeInfo, Pending, RankStatus, Request, Response,
};
use crate::status::{self, Publisher};
use crate::store::{FileRef, JobRecord, Store};
use crate::validate;
use crate::wire::{BLOCK_BYTES, JobInfo, PeerReply, PeerRpc, decode, encode};

/// A client request on its way into the event loop.
pub(crate) struct Command {
    pub(crate) request: Request,
    pub(crate) reply: oneshot::Sender<Response>,
}

/// How often copies of jobs look whether their home has been quiet.
const COPY_CHECK: Duration = Duration::from_secs(5);
/// How long a copy waits for word from its home before it asks.
const COPY_STALE: Duration = Duration::from_secs(15);

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
}

/// Everything the loop owns.
pub(crate) struct Node {
    me: PeerId,
    epoch: Instant,
    sched: Scheduler<PeerId>,
    overlay: OverlayHandle,
    net: Net,
    store: Arc<Store>,
    sandbox: Sandbox,
    dir: PathBuf,
    /// Jobs this node is home to.
    jobs: BTreeMap<u64, JobRecord>,
    placement: BTreeMap<u64, BTreeMap<u32, PeerId>>,
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
            sched: Scheduler::new(me, sched),
            net: Net {
                me,
                overlay: overlay.clone(),
                local: local_tx,
            },
            overlay,
            store,
            sandbox,
            dir,
            jobs: BTreeMap::new(),
            placement: BTreeMap::new(),
            lost_ranks: BTreeMap::new(),
            members: HashMap::new(),
            tasks: JoinSet::new(),
            probing: BTreeSet::new(),
            neighbours: BTreeSet::new(),
            messages_sent: 0,
            activity,
            status,
        };
        node.recover();
        tokio::pin!(shutdown);
        let mut copies_check = tokio::time::interval(COPY_CHECK);
        copies_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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
                ranks: m.net.ranks.borrow().clone(),
            })
            .collect();
        self.status.publish(status::LoopState {
            epoch: self.epoch,
            sched: &self.sched,
            jobs: &self.jobs,
            members,
        });
    }

    /// After a restart: jobs that were under way cannot be resumed (the
    /// scheduler's state and the workers' state are gone), so they are
    /// marked failed with the reason; finished jobs stay as they were.
    fn recover(&mut self) {
        let jobs = match self.store.jobs() {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::error!("cannot read stored jobs: {e}");
                return;
            }
        };
        for mut job in jobs {
            if !job.phase.is_terminal() {
                let was = job.phase;
                job.advance(
                    JobPhase::Failed,
                    format!(
                        "the home node restarted while the job was {was:?}; its workers were lost"
                    ),
                );
                self.persist(&job);
                tracing::warn!(job = %JobId(job.id), "job was {was:?} at restart; marked failed");
            }
            self.jobs.insert(job.id, job);
        }
        tracing::info!(jobs = self.jobs.len(), "state recovered");
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
                && job.advance(
                    JobPhase::Failed,
                    "the home node shut down while the job was under way",
                )
            {
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
                Response::Jobs(self.jobs.keys().filter_map(|id| self.status(*id)).collect())
            }
            Request::Cancel { job } => {
                if !self.jobs.contains_key(&job) {
                    return not_found(job);
                }
                self.end_home_job(job, JobPhase::Cancelled, "cancelled by user".into());
                let out = self.sched.handle(self.now(), Input::Cancel(JobId(job)));
                self.execute(out);
                Response::Status(self.status(job).expect("job exists"))
            }
            // Waiting for more (`wait_secs`) is the connection's business
            // (see `server`): the loop answers at once.
            Request::Logs { job, from, .. } => {
                let Some(record) = self.jobs.get(&job) else {
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
            Request::Outputs { job } => {
                if !self.jobs.contains_key(&job) {
                    return not_found(job);
                }
                match self.store.outputs(job) {
                    Ok(files) => Response::Outputs(files),
                    Err(e) => Response::error(ErrorKind::Internal, e.to_string()),
                }
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
                    jobs: self.jobs.values().fold(BTreeMap::new(), |mut by, job| {
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
            if !self.jobs.contains_key(&id) {
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
        if let Err(e) = self.store.put_submission(&record, &files) {
            return Response::error(ErrorKind::Internal, e.to_string());
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
        if !self.jobs.contains_key(&job) {
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
                Response::Status(self.status(job).expect("job exists"))
            }
            Err(e) => Response::error(ErrorKind::BadRequest, e.to_string()),
        }
    }

    fn status(&self, id: u64) -> Option<JobStatus> {
        let job = self.jobs.get(&id)?;
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
        Some(JobStatus {
            job: id,
            phase: job.phase,
            reason,
            ranks: job.ranks.clone(),
            request: job.request.clone(),
            pending,
            submitted_unix: job.submitted_unix,
        })
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
            .any(|ranks| ranks.values().any(|p| *p == peer))
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

    /// A block of a file in this node's fetched-file cache.
    fn cached_block(&self, sha256: &str, offset: u64, len: u32) -> Option<Vec<u8>> {
        use std::io::{Read, Seek};
        // Only a hash names a file: nothing else can reach the disk.
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut file = std::fs::File::open(self.dir.join("files").join(sha256)).ok()?;
        file.seek(std::io::SeekFrom::Start(offset)).ok()?;
        let mut block = Vec::with_capacity((len as usize).min(BLOCK_BYTES));
        file.take(len.min(BLOCK_BYTES as u32) as u64)
            .read_to_end(&mut block)
            .ok()?;
        Some(block)
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

    fn rpc(&mut self, from: PeerId, rpc: PeerRpc, reply: Reply) {
        self.status.note_rpc(&rpc);
        let answer = match rpc {
            PeerRpc::Ping => PeerReply::Ack,
            PeerRpc::Status => return self.status_reply(reply, None),
            PeerRpc::StatusJob { job } => return self.status_reply(reply, Some(job)),
            PeerRpc::Sched(msg) => {
                let out = self.sched.handle(
                    self.now(),
                    Input::Message {
                        from,
                        msg,
                        rtt: None,
                    },
                );
                self.execute(out);
                PeerReply::Ack
            }
            PeerRpc::GetJob { job } => match self.job_info(job) {
                Some(info) => PeerReply::Job(Box::new(info)),
                None => PeerReply::Error(format!("job {} unknown here", JobId(job))),
            },
            PeerRpc::GetBlock {
                sha256,
                offset,
                len,
            } => match self
                .store
                .blob_block(&sha256, offset, (len as usize).min(BLOCK_BYTES))
            {
                Ok(Some(block)) => PeerReply::Block(block),
                // Not a file of a job of ours: perhaps one this node fetched
                // to run workers (then it is complete and hash-checked).
                Ok(None) => match self.cached_block(&sha256, offset, len) {
                    Some(block) => PeerReply::Block(block),
                    None => PeerReply::Error(format!("no file {sha256} here")),
                },
                Err(e) => PeerReply::Error(e.to_string()),
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
            PeerRpc::Rank {
                job,
                from: src,
                to,
                payload,
            } => {
                let inbox = self.members.get(&job).and_then(|m| m.net.inbox(to));
                match inbox {
                    None => PeerReply::Error(format!("rank {to} of job {} not here", JobId(job))),
                    Some(inbox) => {
                        let delivery = Delivery::Message { from: src, payload };
                        match inbox.try_send(delivery) {
                            Ok(()) => PeerReply::Ack,
                            Err(mpsc::error::TrySendError::Closed(_)) => {
                                PeerReply::Error("closed: the rank ended".into())
                            }
                            Err(mpsc::error::TrySendError::Full(delivery)) => {
                                // Back-pressure: the answer waits for room,
                                // and the sender waits for the answer.
                                let overlay = self.overlay.clone();
                                tokio::spawn(async move {
                                    let answer = match inbox.send(delivery).await {
                                        Ok(()) => PeerReply::Ack,
                                        Err(_) => PeerReply::Error("closed: the rank ended".into()),
                                    };
                                    match reply {
                                        Reply::Local(tx) => {
                                            let _ = tx.send(answer);
                                        }
                                        Reply::Overlay(r) => {
                                            let _ = overlay.respond(r, encode(&answer)).await;
                                        }
                                    }
                                });
                                return;
                            }
                        }
                    }
                }
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
            PeerRpc::Log { job, chunk } => self.home_only(from, job, |node| {
                node.store
                    .append_log(job, &chunk)
                    .map_err(|e| e.to_string())?;
                node.activity.send_modify(|n| *n = n.wrapping_add(1));
                Ok(())
            }),
            PeerRpc::Output {
                job,
                name,
                offset,
                data,
            } => self.home_only(from, job, |node| {
                node.store
                    .append_output(job, &name, offset, &data)
                    .map_err(|e| e.to_string())
            }),
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

    /// Accepts output for a job only from a node that runs (or ran) one of
    /// its ranks.
    fn home_only(
        &mut self,
        from: PeerId,
        job: u64,
        f: impl FnOnce(&mut Self) -> Result<(), String>,
    ) -> PeerReply {
        let known = self
            .jobs
            .get(&job)
            .is_some_and(|j| j.ranks.values().any(|r| r.node == from.to_string()));
        if !known {
            return PeerReply::Error(format!("job {} has no worker on {from}", JobId(job)));
        }
        match f(self) {
            Ok(()) => PeerReply::Ack,
            Err(e) => PeerReply::Error(e),
        }
    }

    fn job_info(&self, job: u64) -> Option<JobInfo> {
        let record = self.jobs.get(&job)?;
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
                Output::StartWorkers { job, home, ranks } => self.start_workers(job.0, home, ranks),
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
                job, node, ranks, ..
            } => {
                tracing::info!(job = %job, %node, ?ranks, "workers granted");
                let replaced: Vec<u32> = {
                    let lost = self.lost_ranks.entry(job.0).or_default();
                    ranks.iter().copied().filter(|r| lost.remove(r)).collect()
                };
                let placement = self.placement.entry(job.0).or_default();
                for rank in &ranks {
                    placement.insert(*rank, node);
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
                if let Some(placement) = self.placement.get_mut(&job.0) {
                    for rank in &ranks {
                        placement.remove(rank);
                    }
                }
                self.lost_ranks.entry(job.0).or_default().extend(&ranks);
                if let Some(record) = self.jobs.get_mut(&job.0) {
                    for rank in &ranks {
                        if let Some(r) = record.ranks.get_mut(rank) {
                            r.outcome = Some(format!("lost: node {node} failed or left"));
                        }
                    }
                    let record = record.clone();
                    self.persist(&record);
                }
                Some(job.0)
            }
            JobEvent::Ended { job, phase, reason } => {
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
            // Ranks still running are stopped with the job; their nodes
            // do not report back for a job that is over.
            if phase != JobPhase::Completed {
                for rank in record.ranks.values_mut() {
                    rank.outcome
                        .get_or_insert_with(|| "stopped with the job".into());
                }
            }
            let record = record.clone();
            self.persist(&record);
        }
    }

    /// Sends the job's current placement and phase to every node with one
    /// of its ranks (the copies).
    fn push_placement(&mut self, job: u64, replaced: Vec<u32>) {
        let Some(record) = self.jobs.get(&job) else {
            return;
        };
        let ranks = self.placement.get(&job).cloned().unwrap_or_default();
        let nodes: BTreeSet<PeerId> = ranks.values().copied().collect();
        let phase = record.phase;
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
        ranks: BTreeMap<u32, PeerId>,
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
                    let _ = inbox.try_send(Delivery::Membership(change));
                }
            }
        }
        if phase == JobPhase::Cancelled || phase == JobPhase::Failed {
            self.stop_workers(job);
        }
    }

    // ----- workers on this node -----

    fn start_workers(&mut self, job: u64, home: PeerId, ranks: Vec<u32>) {
        let member = self.members.entry(job).or_insert_with(|| MemberJob {
            home,
            net: JobNet::new(job),
            workers: HashMap::new(),
            pending: HashMap::new(),
            stopped: false,
            heard: Instant::now(),
        });
        member.stopped = false;
        // Inboxes exist from now on, so messages for these ranks queue
        // while the module is fetched.
        for rank in &ranks {
            let ends = member.net.register(*rank);
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
            cpu_fuel: u64::MAX,
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
            self.tasks
                .spawn(supervise(net, home, job, rank, handle, out_rx, job_dir));
        }
    }
}

type Ends = (mpsc::Receiver<Delivery>, mpsc::Receiver<BarrierItem>);

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
    tokio::fs::create_dir_all(&files)
        .await
        .map_err(|e| e.to_string())?;
    // Files come from the home or from another node of the job that has
    // them already, in random order, so that a job starting on many nodes
    // does not have them all fetch from the home.
    let mut sources: Vec<PeerId> = info
        .ranks
        .values()
        .copied()
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
/// has not got the file yet fails fast), hash-checked, then cached.
async fn fetch(
    net: &Net,
    sources: &[PeerId],
    files: &std::path::Path,
    file: &FileRef,
) -> Result<Vec<u8>, String> {
    let path = files.join(&file.sha256);
    if let Ok(data) = tokio::fs::read(&path).await
        && hex::encode(Sha256::digest(&data)) == file.sha256
    {
        return Ok(data);
    }
    let mut data = Vec::with_capacity(file.size as usize);
    let mut failures = 0;
    while (data.len() as u64) < file.size {
        let rpc = PeerRpc::GetBlock {
            sha256: file.sha256.clone(),
            offset: data.len() as u64,
            len: BLOCK_BYTES as u32,
        };
        let from = sources[failures % sources.len().max(1)];
        match net.call_ok(from, rpc).await {
            Ok(PeerReply::Block(block)) if !block.is_empty() => data.extend_from_slice(&block),
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
    let tmp = path.with_extension("part");
    tokio::fs::write(&tmp, &data)
        .await
        .map_err(|e| e.to_string())?;
    tokio::fs::rename(&tmp, &path)
        .await
        .map_err(|e| e.to_string())?;
    Ok(data)
}

/// Gives each rank its own view of the job's inputs (hard links, copies
/// where links fail).
fn link_inputs(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if !dest.exists() && std::fs::hard_link(entry.path(), &dest).is_err() {
            std::fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

/// Streams a worker's output to the home while it runs, then its output
/// files, then how it ended.
async fn supervise(
    net: Net,
    home: PeerId,
    job: u64,
    rank: u32,
    handle: zorilla_sandbox::WorkerHandle,
    mut output: mpsc::Receiver<zorilla_sandbox::OutputChunk>,
    job_dir: PathBuf,
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
    if let Ok(entries) = std::fs::read_dir(&outputs) {
        for entry in entries.flatten() {
            let Ok(data) = std::fs::read(entry.path()) else {
                continue;
            };
            let name = format!("{rank}/{}", entry.file_name().to_string_lossy());
            let mut offset = 0usize;
            loop {
                let end = (offset + BLOCK_BYTES).min(data.len());
                let rpc = PeerRpc::Output {
                    job,
                    name: name.clone(),
                    offset: offset as u64,
                    data: data[offset..end].to_vec(),
                };
                let _ = net.call(home, rpc).await;
                offset = end;
                if offset >= data.len() {
                    break;
                }
            }
        }
    }
    let (success, outcome) = match &report.outcome {
        Outcome::Exited(0) => (true, "exited with status 0".to_string()),
        Outcome::Exited(code) => (false, format!("exited with status {code}")),
        other => (false, format!("{other:?}")),
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

impl Node {
    /// A rank ended on some node: record it, and end the job when every rank
    /// is done (or one failed).
    fn worker_ended(&mut self, from: PeerId, job: u64, rank: u32, success: bool, outcome: String) {
        let Some(record) = self.jobs.get_mut(&job) else {
            return;
        };
        let Some(status) = record.ranks.get_mut(&rank) else {
            return;
        };
        if status.node != from.to_string() {
            return; // A replaced worker's late report.
        }
        status.outcome = Some(outcome.clone());
        let record = record.clone();
        self.persist(&record);
        if record.phase.is_terminal() {
            return;
        }
        if !success {
            if outcome == "Cancelled" {
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

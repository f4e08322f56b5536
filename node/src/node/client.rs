//! The loop's side of client requests: submitting, resizing, cancelling
//! and reading jobs this node is home to, each as far as its caller may
//! (see [`crate::owner`]).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use zorilla_core::advert::JobId;
use zorilla_core::machine;
use zorilla_core::node::Input;
use zorilla_overlay::PeerId;

use super::{Done, Node, Reply};
use crate::origin::JobOrigin;
use crate::owner::{Access, Caller};
use crate::protocol::{
    ErrorKind, JobPhase, JobRequest, JobStatus, LogPage, MAX_LOG_PAGE_BYTES, NodeInfo, Pending,
    Request, Response,
};
use crate::store::{FileRef, JobRecord, StoreError};
use crate::validate::Submission;
use crate::wire::forward::ForwardRpc;
use crate::wire::{PeerReply, RefusalKind};

impl Node {
    /// What `caller` may have of `job` (a job this node is home to) when it
    /// asks `request`: `Err` with the answer if it may not ask it at all.
    fn gate(&self, caller: &Caller, job: u64, request: &Request) -> Result<Access, Box<Response>> {
        let Some(record) = self.record(job) else {
            return Err(Box::new(not_found(job)));
        };
        let access =
            crate::owner::access(caller, &self.sessions, job, record.owner.as_ref(), request)
                .map_err(|e| Box::new(e.response()))?;
        // Anybody may see that a job exists; the rest is its owner's.
        match (access, request) {
            (Access::Full, _) | (Access::Public, Request::Status { .. }) => Ok(access),
            (Access::Public, _) => Err(Box::new(crate::owner::owners_only(
                job,
                record.owner.as_ref(),
            ))),
        }
    }

    /// Answers a client's request, made by `caller`.
    pub(super) fn command(&mut self, request: Request, caller: &Caller) -> Response {
        if let Some(job) = crate::forward::job_of(&request)
            && !matches!(request, Request::Challenge { .. })
        {
            match self.gate(caller, job, &request) {
                Ok(Access::Full) => {}
                Ok(Access::Public) => {
                    return self
                        .status(job)
                        .map_or_else(|| not_found(job), |s| Response::Status(s.public()));
                }
                Err(refused) => return *refused,
            }
        }
        match request {
            // A submission comes in checked ([`Asked::Submit`]), never as
            // a plain request.
            Request::Submit { .. } => Response::error(
                ErrorKind::BadRequest,
                "a submission is taken only through the client port's checks",
            ),
            Request::Status { job } => match self.status(job) {
                Some(status) => Response::Status(status),
                None => not_found(job),
            },
            // Any client may ask its job's home for a nonce: a proof made
            // with it holds only with the owner's signature.
            Request::Challenge { job } => match self.record(job) {
                Some(_) => {
                    let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
                    Response::Challenge {
                        nonce: sessions.issue(job).to_vec(),
                    }
                }
                None => not_found(job),
            },
            // Unwrapped by the connection, and by `forwarded`.
            Request::Owner { .. } => Response::error(
                ErrorKind::BadRequest,
                "an owner's proof cannot hold another",
            ),
            Request::List => {
                // Finished jobs from the store; if it cannot be read, the
                // ones in memory.
                let stored = self.store.jobs().unwrap_or_else(|e| {
                    tracing::warn!("cannot read the stored jobs: {e}");
                    self.jobs.finished().iter().cloned().collect()
                });
                let mut all: BTreeMap<u64, JobStatus> = stored
                    .iter()
                    .filter(|j| !self.jobs.is_under_way(j.id) && j.moved_to.is_none())
                    .map(|j| (j.id, self.status_of(j)))
                    .collect();
                all.extend(
                    self.jobs
                        .all_under_way()
                        .values()
                        .map(|j| (j.id, self.status_of(j))),
                );
                // The admin sees every job whole; anybody else, that they
                // exist (an owner asks for its own one by one).
                let shown = |s: JobStatus| if caller.admin { s } else { s.public() };
                Response::Jobs(all.into_values().map(shown).collect())
            }
            Request::Cancel { job } => {
                if self.record(job).is_none() {
                    return not_found(job);
                }
                self.end_home_job(job, JobPhase::Cancelled, "cancelled by user".into());
                self.feed_sched(Input::Cancel(JobId(job)));
                self.status(job)
                    .map_or_else(|| not_found(job), Response::Status)
            }
            // Waiting for more (`wait_secs`) is the connection's business
            // (see `server`): the loop answers at once.
            Request::Logs { job, from, .. } => self.logs_page(job, from, MAX_LOG_PAGE_BYTES),
            Request::Resize { job, max_workers } => self.resize(job, max_workers),
            // Answered by the connection from the overlay handle.
            Request::Peers | Request::Revoke { .. } => {
                Response::error(ErrorKind::Internal, "peers are not the loop's")
            }
            // Answered by the connection from the store.
            Request::Outputs { .. } | Request::OutputBlock { .. } => {
                Response::error(ErrorKind::Internal, "outputs are not the loop's")
            }
            Request::NodeInfo => {
                let r = self.machine.scheduler().config().resources;
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
                    peers_measured: self.machine.scheduler().peer_distances().len(),
                    jobs: self.jobs.counts(),
                    // Filled in by the connection, which knows them.
                    version: String::new(),
                    network: String::new(),
                    uptime_secs: 0,
                    grid: None,
                })
            }
        }
    }

    /// A client's submission (within the documented maxima, checked
    /// where it came in): admitted within this node's own limits, stored,
    /// then handed to the scheduler.
    pub(super) fn submit(&mut self, submission: Submission, caller: &Caller) -> Response {
        if let Some(reason) = self.store.unwritable() {
            return refused(reason);
        }
        let owner = caller.submitter.clone();
        let (request, module, inputs) = submission.into_parts();
        let spec = match self.machine.admit(request.spec()) {
            Ok(spec) => spec,
            Err(e) => return Response::error(ErrorKind::BadRequest, e.to_string()),
        };
        // The id names this node as the job's first home (see
        // `crate::origin`); a fresh nonce until it is new here.
        let (id, origin) = loop {
            let origin = JobOrigin::new(self.me);
            let id = origin.id();
            if !self.jobs.is_under_way(id) && !matches!(self.store.job(id), Ok(Some(_))) {
                break (id, origin);
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
            kept_run: None,
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
            moved_from: None,
            moved_to: None,
            owner: owner.as_ref().map(|o| o.user),
            owner_proof: owner.map(|o| o.proof),
            origin: Some(origin),
            tasks: None,
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
        let owner = record.owner.map(|o| o.key());
        self.jobs.start(record);
        tracing::info!(job = %JobId(id), "job submitted");
        // Its log starts with its spec, and its first copies are placed,
        // before it is flooded (see `zorilla_core::machine`).
        self.feed(machine::Input::Submit {
            job: JobId(id),
            spec,
            owner,
        });
        Response::Submitted { job: id }
    }

    pub(super) fn resize(&mut self, job: u64, max_workers: u32) -> Response {
        if self.record(job).is_none() {
            return not_found(job);
        }
        match self.machine.resize(self.now(), JobId(job), max_workers) {
            Ok(out) => {
                if let Some(record) = self.jobs.under_way_mut(job) {
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
    pub(super) fn record(&self, id: u64) -> Option<JobRecord> {
        if let Some(job) = self.jobs.get(id) {
            return Some(job.clone()).filter(|job| job.moved_to.is_none());
        }
        // A job that moved to another node is that node's to answer for.
        self.store
            .job(id)
            .unwrap_or_else(|e| {
                tracing::warn!(job = %JobId(id), "cannot read the job: {e}");
                None
            })
            .filter(|job| job.moved_to.is_none())
    }

    /// Puts a changed record of a job back where it is kept in memory.
    pub(super) fn update(&mut self, record: JobRecord) {
        self.jobs.update(record);
    }

    pub(super) fn status(&self, id: u64) -> Option<JobStatus> {
        Some(self.status_of(&self.record(id)?))
    }

    /// The home of `job` as this node knows it: itself if it holds the
    /// job's record and no newer primary, else the primary its copy knows.
    pub(super) fn home_of(&self, job: u64) -> Option<PeerId> {
        if let Some(primary) = self.primary_of(job) {
            return Some(primary);
        }
        self.record(job).map(|_| self.me)
    }

    /// Answers where a job's home is, or a client's request another node
    /// passed on (see [`crate::forward`]).
    pub(super) fn forward_rpc(&mut self, rpc: ForwardRpc, reply: Reply) {
        match rpc {
            ForwardRpc::WhereIs { job } => self.reply(reply, PeerReply::Home(self.home_of(job))),
            ForwardRpc::Client(request) => self.forwarded(*request, reply),
        }
    }

    /// A client's request that another node passed on (see
    /// [`crate::forward`]): answered here if this node is the job's home,
    /// never passed on again, as a stranger's unless it carries the job's
    /// owner's proof (see [`crate::owner`]).
    fn forwarded(&mut self, request: Request, reply: Reply) {
        let Some(job) = crate::forward::job_of(&request) else {
            return self.reply(
                reply,
                PeerReply::refused(RefusalKind::Malformed, "not a request about a job"),
            );
        };
        // Not the home (any more): the asker looks for it again.
        let home = self.home_of(job);
        if home != Some(self.me) {
            return self.reply(reply, PeerReply::Home(home));
        }
        // The node that passed it on is nobody's admin here: only an owner's
        // proof, which it cannot make, shows more than that the job exists.
        let (caller, request) = match request {
            Request::Owner { proof, request } => (
                Caller {
                    proof: Some(proof),
                    ..Caller::default()
                },
                *request,
            ),
            request => (Caller::default(), request),
        };
        let answer = match request {
            Request::Logs { job, from, .. } => match self.gate(&caller, job, &request) {
                Ok(_) => self.logs_page(job, from, crate::forward::MAX_FORWARDED_BYTES),
                Err(refused) => *refused,
            },
            request @ (Request::Outputs { .. } | Request::OutputBlock { .. }) => {
                let store = self.store.clone();
                let sessions = self.sessions.clone();
                let overlay_reply = reply;
                self.tasks.spawn(async move {
                    let answer = tokio::task::spawn_blocking(move || {
                        crate::server::outputs(&store, &sessions, &caller, request)
                    })
                    .await
                    .unwrap_or_else(|e| Response::error(ErrorKind::Internal, e.to_string()));
                    Done::Reply {
                        to: overlay_reply,
                        reply: PeerReply::Client(Box::new(answer)),
                    }
                });
                return;
            }
            request => self.command(request, &caller),
        };
        self.reply(reply, PeerReply::Client(Box::new(answer)));
    }

    /// A page of `job`'s log from chunk `from`, of at most `max_bytes`.
    pub(super) fn logs_page(&self, job: u64, from: u64, max_bytes: usize) -> Response {
        let Some(record) = self.record(job) else {
            return not_found(job);
        };
        let terminal = record.phase.is_terminal();
        if let Some(kept) = record.kept() {
            return self.kept_logs_page(job, from, max_bytes, terminal, kept);
        }
        match self.store.logs_from(job, from, max_bytes) {
            Ok((_, _, stored)) if from > stored => Response::error(
                ErrorKind::BadRequest,
                format!(
                    "from is {from}, past the end of job {}'s log ({stored} chunks so far)",
                    JobId(job)
                ),
            ),
            // Ended with the page that carries the last chunk of a
            // job that is over, not one call later.
            Ok((chunks, next, stored)) => Response::Logs(LogPage {
                ended: terminal && next >= stored,
                chunks,
                next,
            }),
            Err(e) => Response::error(ErrorKind::Internal, e.to_string()),
        }
    }

    /// [`Node::logs_page`] of a job that ran more than once and kept the
    /// run whose workers are `first..first + size`: that run's chunks only,
    /// with their ranks within the run. A page of the store's with none
    /// of them is skipped, so that a page is empty only at the end.
    fn kept_logs_page(
        &self,
        job: u64,
        mut from: u64,
        max_bytes: usize,
        terminal: bool,
        (first, size): (u32, u32),
    ) -> Response {
        loop {
            match self.store.logs_from(job, from, max_bytes) {
                Ok((chunks, next, stored)) => {
                    let chunks: Vec<crate::protocol::LogChunk> = chunks
                        .into_iter()
                        .filter_map(|mut chunk| {
                            chunk.rank = chunk.rank.checked_sub(first).filter(|r| *r < size)?;
                            Some(chunk)
                        })
                        .collect();
                    if !chunks.is_empty() || next >= stored || next <= from {
                        return Response::Logs(LogPage {
                            ended: terminal && next >= stored,
                            chunks,
                            next,
                        });
                    }
                    from = next;
                }
                Err(e) => return Response::error(ErrorKind::Internal, e.to_string()),
            }
        }
    }

    pub(super) fn status_of(&self, job: &JobRecord) -> JobStatus {
        let id = job.id;
        let reason = if job.phase == JobPhase::Scheduling {
            self.machine
                .scheduler()
                .report(JobId(id))
                .map(|r| format!("pending: {}", r.explain()))
                .unwrap_or_else(|| job.reason.clone())
        } else {
            job.reason.clone()
        };
        let seeking =
            job.phase <= JobPhase::Running && (job.ranks.len() as u32) < job.request.max_workers;
        let pending = seeking
            .then(|| self.machine.scheduler().report(JobId(id)))
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
                apart: r.apart,
            });
        JobStatus {
            job: id,
            phase: job.phase,
            reason,
            ranks: job
                .ranks
                .iter()
                .map(|(rank, r)| (*rank, r.clone().map_node(|n| n.to_string())))
                .collect(),
            request: job.request.clone(),
            pending,
            submitted_unix: job.submitted_unix,
            home: Some(self.me.to_string()),
            moved_from: job.moved_from.map(|n| n.to_string()),
            owner: job.owner.map(|o| o.to_string()),
            tasks: job.tasks.clone().map(|t| t.map_node(|n| n.to_string())),
        }
    }
}

/// A submission refused because the disk cannot be written.
pub(super) fn refused(reason: String) -> Response {
    Response::error(
        ErrorKind::Busy,
        format!(
            "this node cannot write to its disk ({reason}): it accepts no jobs until space is freed"
        ),
    )
}

pub(super) fn not_found(job: u64) -> Response {
    Response::error(
        ErrorKind::NotFound,
        format!("no job {} on this node", JobId(job)),
    )
}

/// The most output bytes a home keeps of one job: the disk this node
/// offers to jobs (`disk_mib` of its configuration), and no more than the
/// job's workers may leave in all when the job says how much disk each
/// gets (its `disk_mib` times its most workers; a job array's, times its
/// tasks; a replicated job's, times its runs: every run's outputs come
/// home until the runs are compared).
pub(super) fn output_room(request: &JobRequest, home_disk_mib: u64) -> u64 {
    let mut mib = home_disk_mib;
    if request.disk_mib > 0 {
        let workers = request.tasks.as_ref().map_or(
            request
                .max_workers
                .saturating_mul(u32::from(request.replicas.max(1))),
            |t| t.count,
        );
        mib = mib.min(request.disk_mib.saturating_mul(u64::from(workers)));
    }
    mib.saturating_mul(1024 * 1024)
}

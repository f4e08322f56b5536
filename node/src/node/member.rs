//! The loop's side of the workers that run on this node: starting them
//! (once their job's files are here), stopping them, and supervising each
//! until its output and its end have reached the job's home.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use zorilla_core::advert::JobId;
use zorilla_core::machine;
use zorilla_core::node::{Failure, Input, LostPolicy, Output, WorkerEnd};
use zorilla_overlay::PeerId;
use zorilla_sandbox::{Limits, Outcome, OutputChunk, OutputKind, WorkerHandle, WorkerSpec, jobfs};

use super::digest;
use super::files::{PrepareError, Runnable, link_inputs, prepare};
use super::members::{Ends, RunningWorker};
use super::{COPY_STALE, Done, MachineOutput, NoState, Node, random_u64};
use crate::net::{BarrierItem, Net, NetTransport, World};
use crate::protocol::{JobPhase, LogChunk};
use crate::validate;
use crate::wire::barrier::BarrierRpc;
use crate::wire::files::BLOCK_BYTES;
use crate::wire::job_copy::{JobCopy, Placed};
use crate::wire::member::MemberRpc;
use crate::wire::sched::SchedRpc;
use crate::wire::{PeerReply, PeerRpc, RefusalKind};

impl Node {
    /// Takes a peer's scheduling message to the core. A grant comes with
    /// the job's copy, which goes with the core's decision: workers start
    /// with it (`start_workers`, where the node becomes one of the job's
    /// copies), or the grant is withdrawn and it goes.
    pub(super) fn sched_rpc(
        &mut self,
        from: PeerId,
        rpc: SchedRpc,
        rtt: Option<Duration>,
    ) -> PeerReply {
        let (grant, copy) = match rpc {
            SchedRpc::Message(msg) => {
                self.feed_sched(Input::Message { from, msg, rtt });
                return PeerReply::Ack;
            }
            SchedRpc::Grant { grant, copy } => (grant, copy),
        };
        let job = grant.job().0;
        let input = Input::Message {
            from,
            msg: grant,
            rtt,
        };
        let out = self
            .machine
            .handle(self.now(), machine::Input::Sched(input));
        let mut copy = Some(*copy);
        for output in out {
            match output {
                MachineOutput::Sched(Output::StartWorkers {
                    job: started,
                    home,
                    ranks,
                    incarnation,
                    placement,
                }) if started.0 == job && copy.is_some() => {
                    self.start_workers(job, home, ranks, incarnation, placement, copy.take())
                }
                output => self.execute(vec![output]),
            }
        }
        PeerReply::Granted { boot: self.boot }
    }

    /// Hands a barrier message to the rank it is for, if it runs here.
    pub(super) fn barrier_rpc(&self, from: PeerId, rpc: BarrierRpc) -> PeerReply {
        let BarrierRpc {
            job,
            to,
            from: src,
            msg,
        } = rpc;
        match self.members.get(&job).and_then(|m| m.net.barrier(to)) {
            Some(tx) => match tx.try_send(BarrierItem {
                from: src,
                node: from,
                msg,
            }) {
                Ok(()) => PeerReply::Ack,
                Err(_) => {
                    PeerReply::refused(RefusalKind::Unavailable, "barrier queue full or closed")
                }
            },
            None => PeerReply::refused(RefusalKind::NotHere, format!("rank {to} not here")),
        }
    }

    /// The copy of a granted job, if its origin gives the job's id (so
    /// that it names the job's first home: see [`crate::origin`]) and it
    /// names the owner its advert named (by which this node's owner's
    /// policy let it in) with the owner's signature of the job; a home
    /// that says otherwise misbehaves.
    fn check_copy(&self, job: u64, home: PeerId, copy: JobCopy) -> Result<JobCopy, PrepareError> {
        let advertised = self
            .machine
            .scheduler()
            .engaged_owner(JobId(job))
            .flatten()
            .copied();
        let named = copy.owner.map(|o| o.key());
        let checked = if copy.first_home(job).is_none() {
            Err("does not show the first home and nonce the job's id was made from".to_owned())
        } else if named != advertised {
            Err(format!(
                "its copy names owner {}, its advert {}",
                named.map_or("none".into(), |o| o.to_string()),
                advertised.map_or("none".into(), |o| o.to_string())
            ))
        } else {
            match (&copy.owner, &copy.owner_proof) {
                (None, _) => Ok(()),
                (Some(_), None) => Err("its owner's signature is missing".to_owned()),
                (Some(user), Some(proof)) => {
                    let inputs: Vec<(&str, &str)> = copy
                        .inputs
                        .iter()
                        .map(|f| (f.name.as_str(), f.sha256.as_str()))
                        .collect();
                    crate::owner::check_submission(
                        user,
                        proof,
                        &copy.request,
                        &copy.module.sha256,
                        &inputs,
                    )
                }
            }
        };
        match checked {
            Ok(()) => Ok(copy),
            Err(why) => {
                let why = format!("the home granted job {} with a copy that {why}", JobId(job));
                self.overlay.report_misbehaviour(home, why.clone());
                Err(PrepareError::Owner(why))
            }
        }
    }

    /// Starts workers of a job granted to this node: the grant carried
    /// the job's placement, and its copy came with it (`granted`, see
    /// [`SchedRpc::Grant`]; a job of our own's copy is its record), so only
    /// the files are fetched before the workers start.
    pub(super) fn start_workers(
        &mut self,
        job: u64,
        home: PeerId,
        ranks: Vec<u32>,
        incarnation: u32,
        placement: BTreeMap<u32, Placed>,
        granted: Option<JobCopy>,
    ) {
        let copy = match granted {
            Some(copy) => self.check_copy(job, home, copy),
            None if home == self.me => self
                .job_copy(job)
                .ok_or(PrepareError::NotUnderWay(JobId(job))),
            None => Err(PrepareError::NoCopy),
        };
        // A node running a job's workers holds a copy of its state, once
        // the grant is taken and its copy checked.
        if let Ok(copy) = &copy
            && home != self.me
        {
            self.feed(machine::Input::Granted {
                job: JobId(job),
                home,
                copy: copy.clone(),
            });
            self.publish_primaries();
        }
        // Inboxes exist from now on, so messages for these ranks queue
        // while the module is fetched.
        self.members
            .given(job, home, &ranks, incarnation, &placement, &self.net.links);
        let net = self.net.clone();
        let sandbox = self.sandbox.clone();
        let dir = self.dir.join("jobs").join(JobId(job).to_string());
        let files = self.dir.join("files");
        self.tasks.spawn(async move {
            let result = match copy {
                Ok(copy) => prepare(net, sandbox, home, copy, &placement, dir, files).await,
                Err(e) => Err(e),
            };
            Done::Prepared {
                job,
                ranks,
                incarnation,
                result: Box::new(result),
            }
        });
    }

    pub(super) fn stop_workers(&mut self, job: u64) {
        self.members.stop(job);
    }

    /// Copies of jobs whose home has said nothing for [`COPY_STALE`] ask it
    /// for the job's state: a lost push (a cancel, a replaced rank) is
    /// found out within that time instead of never.
    pub(super) fn refresh_stale_copies(&mut self) {
        for (job, home) in self.members.stale(&self.me, COPY_STALE) {
            let net = self.net.clone();
            self.tasks.spawn(async move {
                let info = match net
                    .call_ok(home, PeerRpc::Member(MemberRpc::GetJob { job }))
                    .await
                {
                    Ok(PeerReply::Job(info)) => match info.check() {
                        Ok(()) => Ok(info),
                        Err(e) => Err(NoState::Refused(e)),
                    },
                    Ok(_) => Err(NoState::NotAJob),
                    Err(e) => Err(NoState::Call(e)),
                };
                Done::Refreshed { job, info }
            });
        }
    }

    pub(super) fn done(&mut self, done: Done) {
        match done {
            Done::Then(first, then) => {
                self.tasks.spawn(async move {
                    then.await;
                    Done::Nothing
                });
                self.done(*first);
            }
            Done::Nothing => {}
            Done::Reply { to, reply } => self.reply(to, reply),
            Done::Moved(found) => self.moved(found),
            Done::PeerDistances(distances, every_peer, reach) => {
                self.feed(machine::Input::PeerDistances {
                    distances,
                    every_peer,
                });
                if reach != self.machine.scheduler().reachability() {
                    tracing::info!(
                        "reachability: {reach} (a native job's ranks are placed on nodes that reach each other)"
                    );
                }
                self.feed(machine::Input::Reachability(reach));
            }
            Done::RanksAnswered {
                peer,
                answer,
                asked,
            } => self.ranks_answered(peer, answer, asked),
            Done::Granted { peer, boot } => {
                self.feed(machine::Input::Booted { node: peer, boot });
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
                    let home = info.home;
                    self.placement_changed(job, home, info.phase, info.ranks, Vec::new());
                }
                Err(e) => tracing::debug!(job = %JobId(job), "asking the home for the job: {e}"),
            },
            Done::PeerDead(peer) => {
                self.probing.remove(&peer);
                // The scheduler loses it (unless this node may be the one
                // cut off), copies of jobs whose primary it was choose the
                // next, homes whose copy it held place another.
                self.feed(machine::Input::PeerDead(peer));
                // Workers of jobs whose home is gone are stopped, unless
                // this node holds a copy of the job's state: then they wait
                // for the job's next home.
                let orphaned: Vec<u64> = self
                    .members
                    .iter()
                    .filter(|(j, m)| m.home == peer && !self.is_copy(**j))
                    .map(|(j, _)| *j)
                    .collect();
                for job in orphaned {
                    self.stop_workers(job);
                }
            }
            Done::WorkerEnded {
                job,
                rank,
                incarnation,
            } => {
                self.ended_since_release = true;
                // A stopped worker of a rank that runs here again: the
                // fresh worker's resources stay taken.
                let Some(empty) = self.members.worker_ended(job, rank, incarnation) else {
                    return;
                };
                // A copy keeps the job's ranks that ended here (their
                // outputs, for a new home) until the job is over.
                if empty && !self.is_copy(job) {
                    self.members.remove(&job);
                }
                self.feed_sched(Input::WorkersEnded {
                    job: JobId(job),
                    ranks: vec![rank],
                });
            }
            Done::Prepared {
                job,
                ranks,
                incarnation,
                result,
            } => self.prepared(job, ranks, incarnation, *result),
        }
    }

    pub(super) fn prepared(
        &mut self,
        job: u64,
        ranks: Vec<u32>,
        incarnation: u32,
        result: Result<(JobCopy, Runnable, PathBuf), PrepareError>,
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
        if let Ok((copy, _, _)) = &result {
            self.status
                .job_copy(job, home, &copy.request, copy.owner, JobPhase::Running);
        }
        let (info, program, dir) = match result {
            Ok(ok) if !stopped => ok,
            Ok(_) => {
                for rank in ranks {
                    self.tasks.spawn(async move {
                        Done::WorkerEnded {
                            job,
                            rank,
                            incarnation,
                        }
                    });
                }
                return;
            }
            Err(e) => {
                tracing::warn!(job = %JobId(job), "cannot start workers: {e}");
                for rank in ranks {
                    let net = self.net.clone();
                    let end = WorkerEnd::Failed(Failure::NotStarted(cut_outcome(e.to_string())));
                    self.tasks.spawn(async move {
                        // No digest: a worker that never ran computed
                        // nothing to compare.
                        let rpc = PeerRpc::Member(MemberRpc::WorkerEnded {
                            job,
                            rank,
                            incarnation,
                            end,
                            digest: None,
                        });
                        let _ = net.call(home, rpc).await;
                        Done::WorkerEnded {
                            job,
                            rank,
                            incarnation,
                        }
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
        // The job's home as it is now and as it moves (see `replicas`).
        if let Some(copies) = self.machine.copies(JobId(job)).cloned() {
            self.publish_copies(job, copies);
        }
        let Some((home_rx, copies_rx)) = self
            .members
            .get(&job)
            .map(|m| (m.home_tx.subscribe(), m.copies_tx.subscribe()))
        else {
            return;
        };
        for (rank, (inbox, barrier_rx)) in ends {
            // Per incarnation: a worker stopped for a rollback cleans up
            // its own directory and log, never its rank's fresh worker's.
            let job_dir = dir.join(format!("{rank}.{incarnation}"));
            let native = matches!(program, Runnable::Native(_));
            if let Err(e) = link_inputs(&dir.join("inputs"), &job_dir.join("inputs"), native) {
                tracing::warn!("cannot prepare the job directory: {e}");
            }
            let (out_tx, out_rx) = mpsc::channel(16);
            // A job array's task is a world of its own (rank 0 of 1): its
            // rank at the home is its task index, which it reads from
            // ZORILLA_TASK, with its line of the task arguments file. So
            // is each run of a job of one rank that runs more than once:
            // its worker at the home is its run. A run of several ranks
            // is a world of its own over the overlay (`net::World`).
            // A job that runs whole more than once (an array's replicas
            // are checks of its tasks, each a world of one anyway).
            let replicated = info.request.runs() > 1;
            let size = info.request.max_workers.max(1);
            let solo = info.request.tasks.is_some() || (replicated && size == 1);
            let transport: Box<dyn zorilla_sandbox::transport::Transport> = if solo {
                drop((inbox, barrier_rx));
                Box::new(zorilla_sandbox::local::LocalGroup::solo(SOLO_INBOX))
            } else {
                let transport = NetTransport::new(
                    rank,
                    self.net.clone(),
                    job_net.clone(),
                    inbox,
                    barrier_rx,
                    random_u64(),
                );
                Box::new(match replicated {
                    true => transport.in_world(World {
                        base: rank - rank % size,
                        size,
                    }),
                    false => transport,
                })
            };
            // Its rank within its run: every run's worker is the same
            // rank, with the same random bytes.
            let world_rank = if replicated { rank % size } else { rank };
            // A deterministic worker's environment is the same in every
            // run of the job: without the job's id.
            let deterministic =
                info.request
                    .deterministic
                    .map(|seed| zorilla_sandbox::Determinism {
                        seed,
                        rank: world_rank,
                    });
            let mut args = info.request.args.clone();
            let mut env = vec![("ZORILLA_RANK".into(), world_rank.to_string())];
            if let Some(tasks) = &info.request.tasks {
                env = vec![
                    ("ZORILLA_RANK".into(), "0".into()),
                    ("ZORILLA_TASK".into(), rank.to_string()),
                    ("ZORILLA_TASKS".into(), tasks.count.to_string()),
                ];
                if let Some(file) = &tasks.args_file {
                    match task_args(&dir.join("inputs").join(file), rank) {
                        Ok(words) => args.extend(words),
                        Err(e) => tracing::warn!(job = %JobId(job), task = rank, "{e}"),
                    }
                }
            }
            if deterministic.is_none() {
                env.insert(0, ("ZORILLA_JOB".into(), JobId(job).to_string()));
            }
            let handle = match &program {
                Runnable::Wasm(program) => {
                    let spec = WorkerSpec {
                        program_name: "worker".into(),
                        args,
                        env,
                        job_dir: Some(job_dir.clone()),
                        limits,
                        output: Some(out_tx),
                        transport: Some(transport),
                        checkpoints: Some(self.worker_checkpoints(
                            job,
                            home_rx.clone(),
                            copies_rx.clone(),
                            rank,
                            incarnation,
                        )),
                        deterministic,
                    };
                    self.sandbox.start(program, spec)
                }
                Runnable::Native(exe) => {
                    // The MPI library's process management interface and
                    // the `zorilla.h` calls, each on a socket the worker
                    // inherits (see `pmi` and `nativeapi`).
                    let size = transport.size().max(1);
                    let checkpoints = self.worker_checkpoints(
                        job,
                        home_rx.clone(),
                        copies_rx.clone(),
                        rank,
                        incarnation,
                    );
                    let inherit = match (socket_pair(), socket_pair()) {
                        (Ok((pmi, pmi_theirs)), Ok((api, api_theirs))) => {
                            tokio::spawn(crate::pmi::serve(job, rank, size, pmi, transport));
                            tokio::spawn(crate::nativeapi::serve(job, rank, api, checkpoints));
                            let library =
                                self.native.as_ref().and_then(|n| n.pmi_library.as_deref());
                            env.extend(crate::pmi::env(job, rank, size, library));
                            let api_fd = zorilla_sandbox::native::INHERITED_FD + 1;
                            env.push((crate::nativeapi::ENV.into(), api_fd.to_string()));
                            env.push(("ZORILLA_SIZE".into(), size.to_string()));
                            vec![pmi_theirs, api_theirs]
                        }
                        (Err(e), _) | (_, Err(e)) => {
                            tracing::warn!(job = %JobId(job), rank, "no sockets for a native worker: {e}");
                            Vec::new()
                        }
                    };
                    let started = StartedWith { args, env, inherit };
                    match self.start_native(exe, started, &job_dir, limits, out_tx) {
                        Ok(handle) => handle,
                        Err(e) => {
                            tracing::warn!(job = %JobId(job), rank, "cannot start a native worker: {e}");
                            zorilla_sandbox::WorkerHandle::failed(format!(
                                "its native worker could not start: {e}"
                            ))
                        }
                    }
                }
            };
            if let Some(member) = self.members.get_mut(&job) {
                let running = RunningWorker {
                    cancel: handle.cancel_handle(),
                    waiting: handle.waiting(),
                };
                member.workers.insert(rank, running);
                self.status.worker_started(job, member.home, rank);
            }
            tracing::info!(job = %JobId(job), rank, "worker started");
            let net = self.net.clone();
            // The limits in force: what the worker may leave in /outputs
            // is what may go home, and an end by a limit names its figure.
            let in_force = limits.capped_by(&self.sandbox.config().caps);
            let log_file = dir.join("logs").join(format!("{rank}.{incarnation}"));
            let rolls_back =
                info.request.on_worker_lost == LostPolicy::Rollback && info.request.max_workers > 1;
            self.tasks.spawn(supervise(
                net,
                home_rx.clone(),
                job,
                rank,
                incarnation,
                handle,
                out_rx,
                job_dir,
                log_file,
                in_force,
                // Compared at the home: a replicated job's runs, a
                // spot-checked array's tasks (the member cannot tell
                // which will be checked).
                info.request.compared(),
                rolls_back,
            ));
        }
    }
}

/// What a native worker's program is started with: its arguments, its
/// whole environment, and the sockets it inherits (its PMI server's and
/// its `zorilla.h` calls').
struct StartedWith {
    args: Vec<String>,
    env: Vec<(String, String)>,
    inherit: Vec<std::os::fd::OwnedFd>,
}

/// A connected pair of sockets: the node's end (for tokio) and the
/// worker's.
fn socket_pair() -> std::io::Result<(tokio::net::UnixStream, std::os::fd::OwnedFd)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    ours.set_nonblocking(true)?;
    Ok((tokio::net::UnixStream::from_std(ours)?, theirs.into()))
}

/// How long a failed rank of a job that rolls back together waits before
/// its end goes home (see `supervise`): longer than the home takes to
/// learn that a node is lost.
const ROLLBACK_GRACE: Duration = Duration::from_secs(5);

/// The inbox of a job array task's own one-rank world: it can only send
/// to itself.
const SOLO_INBOX: usize = 16;

/// The words of line `task` (from 0) of a job array's task arguments
/// file, split at white space. The file is one of the job's inputs,
/// bounded as they are, and was checked at submission to have a line for
/// every task.
fn task_args(file: &Path, task: u32) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        format!(
            "cannot read the task arguments file {}: {e}",
            file.display()
        )
    })?;
    let line = text.lines().nth(task as usize).ok_or_else(|| {
        format!(
            "the task arguments file {} has no line for task {task}",
            file.display()
        )
    })?;
    Ok(line.split_whitespace().map(str::to_owned).collect())
}

impl Node {
    /// Starts a native worker of `info`'s job in `job_dir`: its program
    /// copied there (the worker's own, as everything in its directory),
    /// in the kernel's sandbox. Fails if this node runs no native workers
    /// (its owner's policy decided on the offer; this is its machine
    /// saying it again) or the directory cannot be made ready.
    fn start_native(
        &self,
        exe: &[u8],
        with: StartedWith,
        job_dir: &Path,
        limits: Limits,
        output: mpsc::Sender<OutputChunk>,
    ) -> Result<WorkerHandle, String> {
        let StartedWith { args, env, inherit } = with;
        let Some(native) = &self.native else {
            return Err("this node runs no native workers".into());
        };
        std::fs::create_dir_all(job_dir.join("outputs"))
            .map_err(|e| format!("cannot make its job directory: {e}"))?;
        let program = job_dir.join(crate::native::PROGRAM);
        let mut file = jobfs::create_file(job_dir, crate::native::PROGRAM)
            .map_err(|e| format!("cannot write its program: {e}"))?;
        std::io::Write::write_all(&mut file, exe)
            .and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(0o755))
            })
            .map_err(|e| format!("cannot write its program {}: {e}", program.display()))?;
        let spec = zorilla_sandbox::native::NativeSpec {
            exe: Path::new("/job").join(crate::native::PROGRAM),
            args,
            env,
            job_dir: job_dir.to_owned(),
            // The PMI library Open MPI programs load is shown with the
            // system's paths, wherever the owner put it.
            read_only_paths: native
                .read_only
                .iter()
                .chain(&native.pmi_library)
                .cloned()
                .collect(),
            limits,
            max_processes: crate::native::MAX_PROCESSES,
            output: Some(output),
            inherit,
        };
        Ok(native.sandbox.start(spec))
    }
}

/// Streams a worker's output to the home while it runs, then its output
/// files (see [`send_outputs`]), then how it ended. `home` is the job's
/// home as the loop knows it: when the job changes home (see `replicas`),
/// the new home is sent the rank's log from its start (kept in
/// `log_file`, outside the worker's directory) and, once the worker has
/// ended, its outputs and end again, for as long as the job lasts here
/// (the worker's directory and log are kept until the loop forgets the
/// job, which closes `home`). So a rank's outputs reach a node besides the
/// home (this one) before its end is taken as known.
#[allow(clippy::too_many_arguments)]
pub(super) async fn supervise(
    net: Net,
    mut home: watch::Receiver<PeerId>,
    job: u64,
    rank: u32,
    incarnation: u32,
    handle: zorilla_sandbox::WorkerHandle,
    mut output: mpsc::Receiver<zorilla_sandbox::OutputChunk>,
    job_dir: PathBuf,
    log_file: PathBuf,
    limits: Limits,
    compared: bool,
    rolls_back: bool,
) -> Done {
    let outputs_limit = limits.disk_bytes;
    let mut log = KeptLog::create(log_file).await;
    // What the worker computed, for a job whose results are compared
    // (see `digest`); other jobs' output is not hashed.
    let mut hasher = compared.then(digest::ResultHasher::new);
    let cancel = handle.cancel_handle();
    let wait = handle.wait();
    tokio::pin!(wait);
    let report = loop {
        tokio::select! {
            Some(chunk) = output.recv() => {
                if let Some(hasher) = &mut hasher {
                    hasher.output(&chunk);
                }
                let to = *home.borrow();
                log.send(&net, to, job, rank, chunk).await;
            }
            Ok(()) = home.changed() => {
                let to = *home.borrow_and_update();
                log.resend(&net, to, job, rank).await;
            }
            report = &mut wait => break report,
        }
    };
    let mut cancelled = report.outcome == Outcome::Cancelled;
    let failed = !matches!(report.outcome, Outcome::Exited(0) | Outcome::Cancelled);
    if failed && rolls_back {
        // A rank of a job that rolls back together often fails because
        // another rank was lost: an MPI library gets an error, or a wrong
        // result, from the lost peer at once, while the home learns of
        // the loss later. Had this end gone home first, it would have
        // failed the job; so it waits a while for the rollback, which
        // stops this worker too and makes its end moot.
        cancelled = tokio::time::timeout(ROLLBACK_GRACE, cancel.cancelled())
            .await
            .is_ok();
    }
    let drain = async {
        while let Ok(chunk) = output.try_recv() {
            if let Some(hasher) = &mut hasher {
                hasher.output(&chunk);
            }
            let to = *home.borrow();
            log.send(&net, to, job, rank, chunk).await;
        }
    };
    if cancelled {
        // Cancelled: the job is over at its home (or this node is
        // stopping). The last output goes if it can go quickly; the worker
        // then counts as ended here at once, without reporting an end
        // nobody waits for.
        let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
        let _ = std::fs::remove_dir_all(&job_dir);
        log.remove();
        return Done::WorkerEnded {
            job,
            rank,
            incarnation,
        };
    }
    drain.await;
    let outputs = job_dir.join("outputs");
    if digest::corrupts() {
        // A test's lying member: what it sends and hashes is made up.
        let chunk = OutputChunk {
            kind: OutputKind::Stdout,
            data: digest::MADE_UP.to_vec(),
        };
        if let Some(hasher) = &mut hasher {
            hasher.output(&chunk);
        }
        let to = *home.borrow();
        log.send(&net, to, job, rank, chunk).await;
        let root = outputs.clone();
        let _ = tokio::task::spawn_blocking(move || digest::corrupt_outputs(&root)).await;
    }
    let to = *home.borrow_and_update();
    let sent = send_outputs(&net, to, job, rank, &outputs, outputs_limit);
    tokio::select! {
        () = sent => {}
        // The job was stopped while its outputs went home: they are not
        // wanted any more.
        () = cancel.cancelled() => {
            let _ = std::fs::remove_dir_all(&job_dir);
            log.remove();
            return Done::WorkerEnded {
            job,
            rank,
            incarnation,
        };
        }
    }
    // What the worker sent goes before its end: a home that took the end
    // for known while a message of the rank was still on its way could
    // take the others' wait for it for a stall.
    net.links.settled(job, rank, incarnation).await;
    let end = worker_end(report.outcome, &limits);
    let digest = match hasher {
        Some(hasher) => {
            let root = outputs.clone();
            let files =
                tokio::task::spawn_blocking(move || digest::outputs_digest(&root, outputs_limit))
                    .await
                    .unwrap_or_default();
            Some(hasher.finish(&end, files))
        }
        None => None,
    };
    let rpc = PeerRpc::Member(MemberRpc::WorkerEnded {
        job,
        rank,
        incarnation,
        end,
        digest,
    });
    let mut ended = Ended {
        net,
        home,
        log,
        outputs,
        outputs_limit,
        job,
        rank,
        rpc,
        cancel,
    };
    // The worker counts as ended here (its resources free, the job
    // forgotten if nothing else of it runs here) once its end is
    // acknowledged: the home acknowledges it once a copy holds it.
    ended.report(to).await;
    // Until the loop forgets the job (it ended, or this node holds no
    // copy of it), a new home gets it all again.
    let follow = async move {
        while ended.home.changed().await.is_ok() {
            let to = *ended.home.borrow_and_update();
            ended.send_all(to).await;
            ended.report(to).await;
        }
        let _ = std::fs::remove_dir_all(&job_dir);
        ended.log.remove();
    };
    let ended = Done::WorkerEnded {
        job,
        rank,
        incarnation,
    };
    Done::Then(Box::new(ended), Box::pin(follow))
}

/// How often a member reports a worker's end that no home has
/// acknowledged yet (as the simulator's members do).
const END_REPORT_RETRY: Duration = Duration::from_secs(1);
/// How many times it does, at most, before it takes the end for lost with
/// the home (a new home still gets it: see [`supervise`]).
const MAX_END_REPORTS: u32 = 120;

/// A worker that ended and what its home must get of it.
struct Ended {
    net: Net,
    home: watch::Receiver<PeerId>,
    log: KeptLog,
    outputs: PathBuf,
    outputs_limit: u64,
    job: u64,
    rank: u32,
    /// Its report ([`MemberRpc::WorkerEnded`]).
    rpc: PeerRpc,
    cancel: zorilla_sandbox::CancelHandle,
}

impl Ended {
    /// Sends `to` (a new home) the rank's log from its start and its
    /// outputs.
    async fn send_all(&mut self, to: PeerId) {
        self.log.resend(&self.net, to, self.job, self.rank).await;
        send_outputs(
            &self.net,
            to,
            self.job,
            self.rank,
            &self.outputs,
            self.outputs_limit,
        )
        .await;
    }

    /// Reports the end to `to` until a home acknowledges it, following
    /// the job to a new home (which is sent the rest first), at most
    /// [`MAX_END_REPORTS`] times; not once the job is stopped here.
    async fn report(&mut self, mut to: PeerId) {
        for _ in 0..MAX_END_REPORTS {
            match self.net.call_ok(to, self.rpc.clone()).await {
                Ok(_) => return,
                Err(e) => {
                    tracing::debug!(job = %JobId(self.job), rank = self.rank, home = %to, "the end of a worker is not acknowledged yet: {e}")
                }
            }
            tokio::select! {
                changed = self.home.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    to = *self.home.borrow_and_update();
                    self.send_all(to).await;
                }
                () = self.cancel.cancelled() => return,
                () = tokio::time::sleep(END_REPORT_RETRY) => {}
            }
        }
        tracing::warn!(job = %JobId(self.job), rank = self.rank, "no home acknowledged the end of the rank's worker after {MAX_END_REPORTS} reports");
    }
}

/// A rank's log as it was sent home, kept in a file so that a new home can
/// be sent it from the start. Writing it is best effort: a log that cannot
/// be kept is still sent, and a new home then gets what was kept.
struct KeptLog {
    path: PathBuf,
    file: Option<tokio::fs::File>,
}

impl KeptLog {
    async fn create(path: PathBuf) -> KeptLog {
        if let Some(dir) = path.parent() {
            let _ = tokio::fs::create_dir_all(dir).await;
        }
        let file = tokio::fs::File::create(&path).await.ok();
        KeptLog { path, file }
    }

    /// Sends `chunk` to `home`, in blocks, and keeps it.
    async fn send(
        &mut self,
        net: &Net,
        home: PeerId,
        job: u64,
        rank: u32,
        chunk: zorilla_sandbox::OutputChunk,
    ) {
        use tokio::io::AsyncWriteExt;
        let stderr = chunk.kind == OutputKind::Stderr;
        if let Some(file) = &mut self.file {
            // A record: the stream, the length, the bytes.
            let mut head = [0u8; 5];
            head[0] = u8::from(stderr);
            head[1..].copy_from_slice(&(chunk.data.len() as u32).to_le_bytes());
            if file.write_all(&head).await.is_err() || file.write_all(&chunk.data).await.is_err() {
                self.file = None;
            }
        }
        send_log(net, home, job, rank, stderr, &chunk.data).await;
    }

    /// Sends everything kept to `home`.
    async fn resend(&mut self, net: &Net, home: PeerId, job: u64, rank: u32) {
        use tokio::io::AsyncReadExt;
        if let Some(file) = &mut self.file {
            use tokio::io::AsyncWriteExt;
            let _ = file.flush().await;
        }
        let Ok(mut file) = tokio::fs::File::open(&self.path).await else {
            return;
        };
        let mut head = [0u8; 5];
        while file.read_exact(&mut head).await.is_ok() {
            let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
            // What this node wrote itself: a record is never larger than a
            // worker's output chunk; anything else is not read.
            if len > 16 * BLOCK_BYTES {
                return;
            }
            let mut data = vec![0; len];
            if file.read_exact(&mut data).await.is_err() {
                return;
            }
            send_log(net, home, job, rank, head[0] == 1, &data).await;
        }
    }

    fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sends a piece of a rank's output to `home`, in blocks.
async fn send_log(net: &Net, home: PeerId, job: u64, rank: u32, stderr: bool, data: &[u8]) {
    for piece in data.chunks(BLOCK_BYTES) {
        let chunk = LogChunk {
            rank,
            stderr,
            data: piece.to_vec(),
        };
        let _ = net
            .call(home, PeerRpc::Member(MemberRpc::Log { job, chunk }))
            .await;
    }
}

/// How a worker ended, for its home: the sandbox's outcome with the
/// figure of the limit in force that it hit (`limits`, capped by the
/// node's caps).
pub(super) fn worker_end(outcome: Outcome, limits: &Limits) -> WorkerEnd {
    let mib = |bytes: u64| bytes / (1024 * 1024);
    let failure = match outcome {
        Outcome::Exited(code) => return WorkerEnd::Exited(code),
        Outcome::Cancelled => return WorkerEnd::Cancelled,
        Outcome::Trapped(trap) => {
            let trap = trap.strip_prefix("wasm trap: ").unwrap_or(&trap);
            Failure::Trapped(cut_outcome(trap.to_owned()))
        }
        Outcome::OutOfMemory => Failure::OutOfMemory {
            limit_mib: mib(limits.memory_bytes),
        },
        Outcome::CpuLimit(limit) => Failure::CpuLimit { limit },
        Outcome::TimeLimit(limit) => Failure::TimeLimit { limit },
        Outcome::OutputLimit => Failure::OutputLimit {
            limit_mib: mib(limits.output_bytes),
        },
        Outcome::DiskLimit => Failure::DiskLimit {
            limit_mib: mib(limits.disk_bytes),
        },
        Outcome::ProcessLimit(limit) => Failure::ProcessLimit { limit },
        Outcome::Failed(why) => Failure::NotStarted(cut_outcome(why)),
    };
    WorkerEnd::Failed(failure)
}

/// A worker's outcome in words, cut at a character boundary to what the
/// home takes ([`validate::MAX_OUTCOME_BYTES`]).
fn cut_outcome(mut outcome: String) -> String {
    if outcome.len() > validate::MAX_OUTCOME_BYTES {
        let mut cut = validate::MAX_OUTCOME_BYTES - 3;
        while !outcome.is_char_boundary(cut) {
            cut -= 1;
        }
        outcome.truncate(cut);
        outcome.push_str("...");
    }
    outcome
}

/// Sends the regular files a worker left in `outputs` (and in directories
/// below it) to the home, named `rank/path`, in blocks, never holding more
/// than a block in memory; `limit` bytes in all. Nothing is opened through
/// a link (see [`jobfs`]): every other entry (a link, a pipe, a device, a
/// file beyond the limit) is skipped with a line in the rank's log. A block
/// the home refuses (the job is over, it has all the outputs its home
/// keeps, the home's disk is full) ends the sending, with the home's
/// reason in the rank's log.
pub(super) async fn send_outputs(
    net: &Net,
    home: PeerId,
    job: u64,
    rank: u32,
    outputs: &Path,
    limit: u64,
) {
    use tokio::io::AsyncReadExt;
    let log = |line: String| {
        let chunk = LogChunk {
            rank,
            stderr: true,
            data: format!("zorilla: {line}\n").into_bytes(),
        };
        async move {
            let _ = net
                .call(home, PeerRpc::Member(MemberRpc::Log { job, chunk }))
                .await;
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
            let rpc = PeerRpc::Member(MemberRpc::Output {
                job,
                name: sent_as.clone(),
                offset,
                data: block,
            });
            let mut answer = net.call(home, rpc.clone()).await;
            for _ in 1..3 {
                if answer.is_ok() {
                    break;
                }
                answer = net.call(home, rpc.clone()).await;
            }
            match answer {
                Ok(PeerReply::Refused(e)) => {
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

//! The loop's side of other nodes: overlay events, and the requests peers
//! make of this node (scheduling messages, job copies, file blocks,
//! outputs, logs, placements, barriers, liveness questions).

use super::client::output_room;
use super::files::{cached_block, check_hash, check_output_name};
use super::*;

impl Node {
    pub(super) fn overlay_event(&mut self, event: Event) {
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
                    self.feed_sched(Input::AdvertDelivered { advert, distance });
                }
                Err(e) => tracing::debug!("undecodable advert: {e}"),
            },
            Event::Request {
                peer,
                payload,
                responder,
                rtt,
            } => match decode::<PeerRpc>(&payload) {
                Ok(rpc) => match validate::peer_rpc(&rpc) {
                    Ok(()) => self.rpc(peer, rpc, Reply::Overlay(responder), rtt),
                    Err(e) => {
                        tracing::warn!(%peer, "request refused: {e}");
                        self.overlay
                            .report_misbehaviour(peer, format!("request refused: {e}"));
                        self.reply(
                            Reply::Overlay(responder),
                            PeerReply::refused(RefusalKind::Malformed, e.to_string()),
                        );
                    }
                },
                Err(e) => self.reply(
                    Reply::Overlay(responder),
                    PeerReply::refused(RefusalKind::Malformed, format!("malformed request: {e}")),
                ),
            },
            Event::PeerLost { peer } => self.maybe_probe(peer),
            Event::NeighboursChanged { added, removed } => {
                for peer in removed {
                    self.neighbours.remove(&peer);
                }
                self.neighbours.extend(added);
                self.checkpoint_neighbours();
                let near = self.neighbours.iter().map(|p| (*p, None)).collect();
                self.feed(machine::Input::Neighbours(near));
            }
            Event::PeerConnected { .. } | Event::Listening { .. } => {}
        }
    }

    /// The overlay closes connections it does not need, so a lost
    /// connection is not a lost peer: peers we have jobs with are probed,
    /// and only a failed probe counts.
    pub(super) fn maybe_probe(&mut self, peer: PeerId) {
        // Copies of the same job too: whether a copy is gone decides
        // whether the others are a majority after the home's death.
        let involved = self.runs_ours(&peer)
            || self.members.values().any(|m| m.home == peer)
            || self.shares_replica_with(&peer);
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

    pub(super) fn reply(&self, to: Reply, reply: PeerReply) {
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

    /// Sends `rpc`; an answer that says which run of the node took a
    /// grant goes to liveness (see
    /// [`zorilla_core::liveness::RankLiveness::booted`]).
    pub(super) fn send(&mut self, to: PeerId, rpc: PeerRpc) {
        self.messages_sent += 1;
        let net = self.net.clone();
        self.tasks.spawn(async move {
            match net.call(to, rpc).await {
                Ok(PeerReply::Granted { boot }) => Done::Granted { peer: to, boot },
                Ok(_) => Done::Nothing,
                Err(e) => {
                    tracing::debug!(peer = %to, "send failed: {e}");
                    Done::Nothing
                }
            }
        });
    }

    /// Sends `rpc` to `to` after `delay` (see [`super::TEST_REPLICA_DELAY`]).
    pub(super) fn send_late(&mut self, to: PeerId, rpc: PeerRpc, delay: Duration) {
        self.messages_sent += 1;
        let net = self.net.clone();
        self.tasks.spawn(async move {
            tokio::time::sleep(delay).await;
            if let Err(e) = net.call(to, rpc).await {
                tracing::debug!(peer = %to, "send failed: {e}");
            }
            Done::Nothing
        });
    }

    /// Answers a peer's request; `rtt` is the sender's RTT as this node
    /// measured it, if it did (the core ranks offers by it).
    pub(super) fn rpc(&mut self, from: PeerId, rpc: PeerRpc, reply: Reply, rtt: Option<Duration>) {
        self.status.note_rpc(&rpc);
        let answer = match rpc {
            PeerRpc::Ping => PeerReply::Ack,
            PeerRpc::Ranks { jobs } => self.ranks_asked(from, jobs),
            PeerRpc::Status => return self.status_reply(reply, status::Asked::Node),
            PeerRpc::StatusJob { job } => return self.status_reply(reply, status::Asked::Job(job)),
            PeerRpc::Summary => return self.status_reply(reply, status::Asked::Summary),
            PeerRpc::Checkpoint(rpc) => return self.checkpoint_rpc(from, rpc, reply),
            PeerRpc::Sched(msg) => {
                self.sched_message(from, msg, rtt);
                PeerReply::Ack
            }
            PeerRpc::WhereIs { job } => PeerReply::Home(self.home_of(job)),
            PeerRpc::Client(request) => return self.forwarded(*request, reply),
            PeerRpc::Replica { job, msg, copy } => {
                self.replica_message(from, job, *msg, copy.map(|c| *c));
                PeerReply::Ack
            }
            PeerRpc::Grant { grant, copy } => {
                // The copy goes with the core's decision: workers start
                // with it (`start_workers`, where the node becomes one of
                // the job's copies), or the grant is withdrawn and it goes.
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
                        }) if started.0 == job && copy.is_some() => self.start_workers(
                            job,
                            home,
                            ranks,
                            incarnation,
                            placement,
                            copy.take(),
                        ),
                        output => self.execute(vec![output]),
                    }
                }
                PeerReply::Granted { boot: self.boot }
            }
            PeerRpc::GetJob { job } if !self.of_job(job, &from) => self.refuse_data(
                from,
                format!("it asked for job {} of which it holds no part", JobId(job)),
            ),
            PeerRpc::GetJob { job } => match self.job_info(job) {
                Some(info) => PeerReply::Job(Box::new(info)),
                None => PeerReply::refused(
                    RefusalKind::NotHere,
                    format!("job {} unknown here", JobId(job)),
                ),
            },
            PeerRpc::GetBlock {
                sha256,
                offset,
                len,
            } => match check_hash(&sha256) {
                Err(e) => PeerReply::refused(RefusalKind::Malformed, e.to_string()),
                Ok(()) if !self.may_fetch_file(&from, &sha256) => self.refuse_data(
                    from,
                    format!("it asked for file {sha256}, of no job of which it holds a part"),
                ),
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
                                None => PeerReply::refused(
                                    RefusalKind::NotHere,
                                    format!("no file {sha256} here"),
                                ),
                            }
                        }
                        Err(e) => PeerReply::refused(RefusalKind::Unavailable, e.to_string()),
                    }
                }
            },
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
                    Err(_) => {
                        PeerReply::refused(RefusalKind::Unavailable, "barrier queue full or closed")
                    }
                },
                None => PeerReply::refused(RefusalKind::NotHere, format!("rank {to} not here")),
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
                Err(e) => PeerReply::refused(RefusalKind::NotAllowed, e),
            },
            PeerRpc::WorkerEnded {
                job,
                rank,
                incarnation,
                end,
            } => {
                // Acknowledged once a copy holds the end (the member
                // forgets the rank then): see `zorilla_core::machine`.
                return self.feed(machine::Input::EndReported {
                    job: JobId(job),
                    node: from,
                    rank,
                    incarnation,
                    end,
                    reply,
                });
            }
        };
        self.reply(reply, answer);
    }

    /// Answers a remote view off the loop: the answer reads the database
    /// and is encoded and cut to size there.
    pub(super) fn status_reply(&self, to: Reply, asked: status::Asked) {
        let status = self.status.status();
        let overlay = self.overlay.clone();
        tokio::spawn(async move {
            let answer = tokio::task::spawn_blocking(move || status::answer(&status, &asked))
                .await
                .unwrap_or_else(|e| {
                    PeerReply::refused(RefusalKind::Unavailable, format!("status: {e}"))
                });
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
    pub(super) fn append(&self, to: Reply, item: Append) {
        let writer = self.writer.clone();
        let activity = self.activity.clone();
        let overlay = self.overlay.clone();
        tokio::spawn(async move {
            let answer = match writer.append(item).await {
                Ok(()) => {
                    activity.send_modify(|n| *n = n.wrapping_add(1));
                    PeerReply::Ack
                }
                Err(e) => PeerReply::refused(RefusalKind::Unavailable, e.to_string()),
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
    pub(super) fn accept_output(
        &mut self,
        from: PeerId,
        job: u64,
        name: &str,
        len: usize,
    ) -> Result<(), String> {
        let Some(record) = self.jobs.under_way(job) else {
            return Err(format!(
                "job {} is over (or unknown here): its outputs are no longer taken",
                JobId(job)
            ));
        };
        // Clients write outputs under these names: one that could leave
        // their directory, or that names a rank the sender does not run,
        // is refused here already.
        check_output_name(name, |rank| {
            record.ranks.get(&rank).is_some_and(|r| *r.node == from)
        })
        .map_err(|e| e.to_string())?;
        let room = output_room(
            &record.request,
            self.machine.scheduler().config().resources.disk_mib,
        );
        let store = &self.store;
        self.jobs
            .take_output(job, len as u64, room, || {
                store.output_bytes(job).unwrap_or(0)
            })
            .map_err(|_| {
                format!(
                    "the outputs of job {} reached the {} MiB its home keeps for one job",
                    JobId(job),
                    room / (1024 * 1024)
                )
            })
    }

    /// Accepts output for a job only from a node that runs (or ran) one of
    /// its ranks.
    pub(super) fn home_only(
        &mut self,
        from: PeerId,
        job: u64,
        f: impl FnOnce(&mut Self) -> Result<(), String>,
    ) -> PeerReply {
        let from_rank = |j: &JobRecord| j.ranks.values().any(|r| *r.node == from);
        // Late output of a finished job is checked against its stored record.
        let known = match self.jobs.under_way(job) {
            Some(j) => from_rank(j),
            None => self.record(job).is_some_and(|j| from_rank(&j)),
        };
        if !known {
            return PeerReply::refused(
                RefusalKind::NotAllowed,
                format!("job {} has no worker on {from}", JobId(job)),
            );
        }
        match f(self) {
            Ok(()) => PeerReply::Ack,
            Err(e) => PeerReply::refused(RefusalKind::NotAllowed, e),
        }
    }

    /// Whether `peer` is of `job` as this node knows it: its home, a node
    /// holding a copy of its state, or a node running its ranks. Only they
    /// get the job's copy, files and checkpoints.
    pub(super) fn of_job(&self, job: u64, peer: &PeerId) -> bool {
        self.shares_job_replica(job, peer)
            || self
                .jobs
                .under_way(job)
                .is_some_and(|record| record.ranks.values().any(|r| *r.node == *peer))
            || self.members.get(&job).is_some_and(|m| m.home == *peer)
    }

    /// Whether `peer` may fetch the file `sha256`: it is a module or input
    /// of a job that `peer` is of ([`Node::of_job`]), as this node knows.
    fn may_fetch_file(&self, peer: &PeerId, sha256: &str) -> bool {
        let uses = |module: &FileRef, inputs: &[FileRef]| {
            module.sha256 == sha256 || inputs.iter().any(|f| f.sha256 == sha256)
        };
        let home_jobs = self
            .jobs
            .all_under_way()
            .iter()
            .filter(|(_, r)| uses(&r.module, &r.inputs))
            .map(|(job, _)| *job);
        let copied = self.replica_jobs_using(|copy| uses(&copy.module, &copy.inputs));
        home_jobs.chain(copied).any(|job| self.of_job(job, peer))
    }

    /// Refuses a request for a job's data from a node that is not of the
    /// job. Not counted as misbehaviour: an honest copy asks late for the
    /// files of a job that has ended meanwhile (and counting it banned the
    /// job's own nodes from each other under a run of short jobs).
    fn refuse_data(&self, from: PeerId, why: String) -> PeerReply {
        tracing::info!(%from, "refused: {why}");
        PeerReply::refused(RefusalKind::NotAllowed, why)
    }

    /// Hands a scheduling message of a peer to the core and executes what
    /// comes out.
    fn sched_message(&mut self, from: PeerId, msg: Message<PeerId>, rtt: Option<Duration>) {
        let input = Input::Message { from, msg, rtt };
        self.feed_sched(input);
    }

    pub(super) fn job_info(&self, job: u64) -> Option<JobInfo> {
        let record = self.record(job)?;
        Some(JobInfo {
            id: job,
            home: self.me,
            phase: record.phase,
            request: record.request.clone(),
            module: record.module.clone(),
            inputs: record.inputs.clone(),
            // A finished job's placement went out with its last change.
            ranks: if record.phase.is_terminal() {
                BTreeMap::new()
            } else {
                self.machine
                    .scheduler()
                    .ranks(JobId(job))
                    .map(|table| table.placement())
                    .unwrap_or_default()
            },
        })
    }
}

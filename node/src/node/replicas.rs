//! The loop's side of a job's replicated state (issue 16; the decisions
//! are the core's [`Replica`] and [`Scheduler::adopt`]): the home logs its
//! job's events ([`JobEntry`]) for the job's copies, which are the nodes
//! that run its ranks and, while there are fewer than [`REPLICATION`] of
//! them, near nodes that run none; a copy that the copies chose when the
//! home fell silent takes the job over as its home; a node that hears of a
//! new primary follows the job there (its workers' reports, logs and
//! outputs go there, those of ranks that ended here sent again); an old
//! primary that learns of a newer one steps down. A home's grants and its
//! acknowledgements of rank ends wait until a copy holds their entry (the
//! core's rule, [`zorilla_core::commit`]).

use zorilla_core::commit::{Outbox, Word, end_index};
use zorilla_core::copies::choose_copies;
use zorilla_core::node::{JobEntry, JobState};
use zorilla_core::replica::{Action, Msg, Replica, Signature, Signer, Statement, Timing};
use zorilla_overlay::identity::PeerSigner;

use super::files::{check_job_copy, fetch};
use super::*;
use crate::wire::ReplicaMsg;

/// The copies a job has besides its home when it can have them: extra
/// copies are placed on near nodes while its workers' nodes are fewer.
pub(super) const REPLICATION: usize = zorilla_core::copies::DEFAULT_DEGREE;
/// The most jobs this node holds replicas of (a peer cannot make it hold
/// more: replicas of unknown jobs are taken only with the job's copy, and
/// not beyond this).
pub(super) const MAX_REPLICAS: usize = 4096;
/// The most copies of one job a home remembers as gone (see
/// [`JobReplica::gone`]); past it, a gone copy is replaced all the same but
/// may be chosen again.
const MAX_GONE: usize = 64;
/// How often replicas are ticked (heartbeats, leases, elections): well
/// within the heartbeat of [`Timing::default`].
pub(super) const TICK: Duration = Duration::from_millis(100);
/// How long a copy keeps the replica of a job it knows ended (it names
/// the job's home to clients meanwhile; it holds no election for it). The
/// primary forgets an ended job once its copies hold the end.
const ENDED_KEPT: Duration = Duration::from_secs(60);
/// How long a node remembers that a job's primary dropped its copy
/// (longer than a copy that missed its drop takes to stand and hear so).
const DROPPED_KEPT: Duration = Duration::from_secs(60);
/// How many extra copies fetch their job's files at once.
pub(super) const MAX_COPY_FETCHES: usize = 4;

/// This node's replica of one job.
pub(super) struct JobReplica {
    replica: Replica<PeerId, JobEntry<PeerId>>,
    /// What a home needs of the job besides its log (a copy's; the home
    /// has its record).
    copy: Option<JobCopy>,
    /// When the job ended here (the replica is dropped a while after).
    ended_at: Option<Instant>,
    /// The primary's extra copies: nodes that run none of the job's ranks
    /// (kept while they can serve, see [`choose_copies`]).
    extras: BTreeSet<PeerId>,
    /// The primary: copies found gone (at most [`MAX_GONE`]), which hold
    /// no copy of the job again (as the simulator's failover does).
    gone: BTreeSet<PeerId>,
    /// The primary's words that wait until a copy holds the log up to
    /// their entry (grants, acknowledgements of rank ends), and what it
    /// said to the same nodes after them: the core's rule
    /// ([`zorilla_core::commit`]).
    /// (An acknowledgement held is the answer to the member's report.)
    held: Outbox<PeerId, Reply>,
}

impl JobReplica {
    fn new(replica: Replica<PeerId, JobEntry<PeerId>>, copy: Option<JobCopy>) -> JobReplica {
        JobReplica {
            replica,
            copy,
            ended_at: None,
            extras: BTreeSet::new(),
            gone: BTreeSet::new(),
            held: Outbox::default(),
        }
    }
}

/// Signs this node's statements about its jobs' replicas (votes, and as a
/// primary the copies) with its peer key, and checks other nodes' with
/// theirs (the core's [`Signer`]).
#[derive(Debug)]
pub(super) struct StatementSigner(pub(super) PeerSigner);

/// What a statement's signature covers besides it: no signature made for
/// another purpose passes for one.
const STATEMENT_CONTEXT: &str = "zorilla replica statement 1";

impl Signer<PeerId> for StatementSigner {
    fn sign(&self, statement: &Statement<'_, PeerId>) -> Signature {
        Signature(self.0.sign(&encode(&(STATEMENT_CONTEXT, statement))))
    }

    fn verify(
        &self,
        signer: &PeerId,
        statement: &Statement<'_, PeerId>,
        signature: &Signature,
    ) -> bool {
        PeerSigner::verify(
            signer,
            &encode(&(STATEMENT_CONTEXT, statement)),
            &signature.0,
        )
    }
}

impl Node {
    fn timing() -> Timing {
        Timing::default()
    }

    /// What signs and checks this node's votes.
    fn statement_signer(&self) -> Arc<dyn Signer<PeerId>> {
        Arc::new(StatementSigner(self.overlay.signer()))
    }

    /// A job was submitted here: its log starts with its spec.
    pub(super) fn replicate_new_job(
        &mut self,
        job: u64,
        spec: zorilla_core::node::JobSpec,
        owner: Option<PeerId>,
    ) {
        let mut replica = Replica::primary(
            job,
            self.me,
            self.now(),
            Self::timing(),
            self.statement_signer(),
        );
        let mut out = Vec::new();
        if let Err(e) = replica.propose(JobEntry::Submitted { spec, owner }, &mut out) {
            tracing::warn!(job = %JobId(job), "cannot log the job: {e}");
        }
        self.replicas.insert(job, JobReplica::new(replica, None));
        // Copies from the start: a job still waiting for its workers
        // survives its home as well.
        out.extend(self.choose_copies(job));
        self.replica_actions(job, out);
    }

    /// A home job's event goes into its log; a grant or a loss changes
    /// which nodes hold copies.
    pub(super) fn replicate_event(&mut self, event: &JobEvent<PeerId>) {
        let job = event.job().0;
        let Some(entry) = JobEntry::of(event) else {
            self.replicas.remove(&job);
            return;
        };
        // A grant still held that the home took back goes nowhere; what
        // waited behind it goes now.
        let now = self
            .replicas
            .get_mut(&job)
            .map(|h| h.held.take_back(event))
            .unwrap_or_default();
        for (to, msg) in now {
            self.send_now(to, msg);
        }
        let Some(held) = self.replicas.get_mut(&job) else {
            return;
        };
        if matches!(event, JobEvent::Ended { .. }) {
            held.ended_at = Some(Instant::now());
        }
        let mut out = Vec::new();
        if let Err(e) = held.replica.propose(entry, &mut out) {
            tracing::warn!(job = %JobId(job), "cannot log the job's event: {e}");
        }
        if matches!(
            event,
            JobEvent::Granted { .. } | JobEvent::WorkersLost { .. }
        ) {
            out.extend(self.choose_copies(job));
        }
        self.replica_actions(job, out);
        // A job that ended with no copy has nothing left to replicate.
        if matches!(event, JobEvent::Ended { .. })
            && self
                .replicas
                .get(&job)
                .is_some_and(|h| h.replica.copies().is_empty())
        {
            self.replicas.remove(&job);
        }
    }

    /// The job's copies: the nodes running its ranks, and near nodes that
    /// run none while those are fewer than [`REPLICATION`] (the core's
    /// [`choose_copies`]). The overlay's neighbours are the near nodes (it
    /// keeps the nearest it finds, and a few far ones); the loop does not
    /// know their distances, so among them the rendezvous hash spreads the
    /// extra copies of different jobs.
    fn choose_copies(&mut self, job: u64) -> Vec<Action<PeerId, JobEntry<PeerId>>> {
        let members: Vec<PeerId> = self
            .sched
            .placement(JobId(job))
            .map(|nodes| nodes.into_keys().collect())
            .unwrap_or_default();
        let near: Vec<(PeerId, Option<Duration>)> =
            self.neighbours.iter().map(|p| (*p, None)).collect();
        let Some(held) = self.replicas.get_mut(&job) else {
            return Vec::new();
        };
        let copies = choose_copies(
            job,
            &self.me,
            members,
            &held.extras,
            &near,
            |p| !held.gone.contains(p),
            REPLICATION,
        );
        held.extras = copies.extras;
        held.replica.set_copies(copies.all, 1)
    }

    /// The overlay's neighbours changed: home jobs that have fewer copies
    /// than they should (a job submitted before this node knew its
    /// neighbours, or whose extra copy went) place them now.
    pub(super) fn replicas_neighbours_changed(&mut self) {
        let short: Vec<u64> = self
            .replicas
            .iter()
            .filter(|(_, h)| {
                h.replica.is_primary()
                    && h.ended_at.is_none()
                    && h.replica.copies().len() < REPLICATION
            })
            .map(|(job, _)| *job)
            .collect();
        for job in short {
            let out = self.choose_copies(job);
            self.replica_actions(job, out);
        }
    }

    /// A worker node took a grant with the job's copy (checked: its
    /// origin gives the job's id): it holds a copy of the job's state from
    /// now on, starting from the job's first epoch, so it follows the home
    /// that granted only as far as that home's mandate proves it.
    pub(super) fn replicate_as_member(&mut self, job: u64, home: PeerId, copy: &JobCopy) {
        if home == self.me || self.replicas.contains_key(&job) {
            return;
        }
        let Some(first) = copy.first_home(job) else {
            return;
        };
        if self.replicas.len() >= MAX_REPLICAS {
            tracing::warn!(job = %JobId(job), "holding replicas of {MAX_REPLICAS} jobs: no copy of this one");
            return;
        }
        let replica = Replica::copy(
            job,
            self.me,
            first,
            self.now(),
            Self::timing(),
            self.statement_signer(),
        );
        self.replicas
            .insert(job, JobReplica::new(replica, Some(copy.clone())));
    }

    /// An extra copy (a node that runs none of the job's ranks) gets the
    /// job's module and inputs into its file cache, so that if it takes
    /// the job over it can hand them to the workers it places: the files
    /// are then held by at least two nodes. At most [`MAX_COPY_FETCHES`]
    /// fetches run at once; the others wait their turn.
    fn fetch_job_files(&mut self, job: u64, primary: PeerId, copy: &JobCopy) {
        let net = self.net.clone();
        let files = self.dir.join("files");
        let wanted: Vec<FileRef> = std::iter::once(copy.module.clone())
            .chain(copy.inputs.iter().cloned())
            .collect();
        let slots = self.copy_fetches.clone();
        self.tasks.spawn(async move {
            let Ok(_slot) = slots.acquire_owned().await else {
                return Done::Nothing;
            };
            if let Err(e) = tokio::fs::create_dir_all(&files).await {
                tracing::warn!(job = %JobId(job), "as a copy of the job, cannot keep its files: {e}");
                return Done::Nothing;
            }
            for file in &wanted {
                if let Err(e) = fetch(&net, &[primary], &files, file).await {
                    tracing::warn!(job = %JobId(job), "as a copy of the job, could not get its file {}: {e}", file.name);
                }
            }
            Done::Nothing
        });
    }

    /// A replica message from `from`. Only the job's replicas are heard:
    /// the primary and the copies this node knows of, or, for a job this
    /// node holds no replica of, a primary that sends the job's copy with
    /// its log (it chose this node as an extra copy). Such an invitation is
    /// taken only if the copy's origin gives the job's id: the new replica
    /// starts from the job's first epoch and adopts the inviter's only if
    /// it is that epoch or its mandate proves it (else the replica is
    /// dropped at once, and the inviter reported).
    pub(super) fn replica_message(
        &mut self,
        from: PeerId,
        job: u64,
        msg: ReplicaMsg,
        copy: Option<JobCopy>,
    ) {
        let now = self.now();
        let mut invited_now = false;
        if !self.replicas.contains_key(&job) {
            // Only a primary that names this node among the job's copies
            // invites it (an append that leaves it out tells a dropped copy).
            let invited = matches!(&msg, Msg::Append { epoch, copies: Some(copies), .. }
                if epoch.primary == from && copies.contains(&self.me));
            let Some(copy) = copy.clone().filter(|_| invited) else {
                // A copy that stands for election hears that this node holds
                // none (it was named but never reached, or lost its state);
                // not from a node the primary dropped, whose word would let
                // another dropped copy win.
                let answer = Replica::answer_without_replica(job, &msg, &*self.statement_signer())
                    .filter(|_| !self.dropped_copies.contains_key(&job));
                if let Some(answer) = answer {
                    self.send(
                        from,
                        PeerRpc::Replica {
                            job,
                            msg: Box::new(answer),
                            copy: None,
                        },
                    );
                }
                return;
            };
            if let Err(e) = check_job_copy(&copy) {
                tracing::warn!(job = %JobId(job), %from, "refused to hold a copy of the job: {e}");
                return;
            }
            let Some(first) = copy.first_home(job) else {
                self.overlay.report_misbehaviour(
                    from,
                    format!(
                        "it invited this node to hold a copy of job {} without the first home and nonce the job's id was made from",
                        JobId(job)
                    ),
                );
                return;
            };
            if self.replicas.len() >= MAX_REPLICAS {
                return;
            }
            invited_now = true;
            let replica = Replica::copy(
                job,
                self.me,
                first,
                now,
                Self::timing(),
                self.statement_signer(),
            );
            self.replicas
                .insert(job, JobReplica::new(replica, Some(copy)));
        }
        let Some(held) = self.replicas.get_mut(&job) else {
            return;
        };
        // A primary also hears a replica it dropped, in its epoch: one that
        // missed that it was dropped stands for election (the answer tells
        // it), one that heard acknowledges (the notice stops).
        let dropped_standing = held.replica.is_primary()
            && matches!(msg, Msg::Standing { .. } | Msg::Ack { .. })
            && msg.epoch() == held.replica.epoch();
        // A node that names itself primary of a newer epoch is heard as
        // one of the job's copies, or with the votes that elected it (the
        // core checks them from the epoch this replica knows: a new copy
        // invited, or granted workers, by a home of a later epoch; a home
        // that replaced a copy it took for gone that won the election
        // meanwhile); the primary of an older one is heard (an old home
        // come back: it is answered with the epoch in charge and its
        // mandate, and steps down).
        let stale_primary = msg.epoch().primary == from && msg.epoch() < held.replica.epoch();
        let newer_primary = msg.epoch().primary == from && msg.epoch() > held.replica.epoch();
        let mandated = matches!(
            &msg,
            Msg::Append {
                mandate: Some(_),
                ..
            } | Msg::Alive {
                mandate: Some(_),
                ..
            }
        );
        let known = from == *held.replica.primary_peer()
            || held.replica.copies().contains(&from)
            || stale_primary
            || dropped_standing
            || (newer_primary && mandated);
        if !known {
            if newer_primary {
                self.overlay.report_misbehaviour(
                    from,
                    format!(
                        "it named itself the home of job {}, of which it holds no part",
                        JobId(job)
                    ),
                );
            } else {
                tracing::debug!(job = %JobId(job), %from, "replica message from a node not of the job: ignored");
            }
            if invited_now {
                self.replicas.remove(&job);
            }
            return;
        }
        if held.copy.is_none()
            && let Some(copy) = copy
        {
            held.copy = Some(copy);
        }
        let before = *held.replica.primary_peer();
        let epoch = msg.epoch().clone();
        let out = held.replica.on_message(now, from, msg);
        let after = *held.replica.primary_peer();
        let primary = held.replica.is_primary();
        if invited_now {
            let taken = (*held.replica.epoch() == epoch)
                .then(|| held.copy.clone())
                .flatten();
            match taken {
                Some(copy) => {
                    tracing::info!(job = %JobId(job), home = %from, "holding a copy of the job's state");
                    self.fetch_job_files(job, from, &copy);
                }
                // The inviter's epoch did not prove itself: no copy is
                // kept (the refusal below reports it).
                None => {
                    self.replicas.remove(&job);
                }
            }
        }
        self.replica_actions(job, out);
        if before != after && !primary && after != self.me {
            self.follow(job, after);
        }
    }

    /// Heartbeats, leases and elections of every replica; replicas of jobs
    /// that ended a while ago are dropped.
    pub(super) fn tick_replicas(&mut self) {
        let now = self.now();
        // Replicas of jobs long over, the primary's of a job that ended
        // once every copy holds its end, and copies the primary dropped.
        // A primary that forgot an ended job earlier (once one copy held
        // the end) answered a copy that missed the end, and stood for
        // election, as a node holding no replica: that copy then took the
        // finished job over from its live home (seen under churn).
        let over: Vec<(u64, bool)> = self
            .replicas
            .iter()
            .filter(|(_, held)| {
                held.ended_at.is_some_and(|at| at.elapsed() >= ENDED_KEPT)
                    || (held.ended_at.is_some()
                        && held.replica.is_primary()
                        && held.replica.held_by_every_copy() >= held.replica.len())
                    || held.replica.is_dropped()
            })
            .map(|(job, held)| (*job, held.replica.is_dropped()))
            .collect();
        self.dropped_copies
            .retain(|_, at| at.elapsed() < DROPPED_KEPT);
        for (job, dropped) in over {
            self.replicas.remove(&job);
            self.forget_idle_member(job);
            if dropped && self.dropped_copies.len() < MAX_REPLICAS {
                self.dropped_copies.insert(job, Instant::now());
            }
        }
        let jobs: Vec<u64> = self.replicas.keys().copied().collect();
        for job in jobs {
            let Some(held) = self.replicas.get_mut(&job) else {
                continue;
            };
            // A copy that knows the job ended holds no election for it.
            if held.ended_at.is_some() && !held.replica.is_primary() {
                continue;
            }
            let out = held.replica.tick(now);
            self.replica_actions(job, out);
        }
        self.publish_primaries();
    }

    /// `peer` is gone: copies whose primary it was stand for election at
    /// once rather than after the lease, and a home whose copy it held
    /// places another in its stead, if it hears most of its copies. A home
    /// that does not may be the one cut off: it keeps its copies (had it
    /// replaced them all by none, it would forget an ended job at once as
    /// held by every copy, and not step down when the cut heals).
    pub(super) fn replicas_peer_gone(&mut self, peer: PeerId) {
        let now = self.now();
        let jobs: Vec<u64> = self.replicas.keys().copied().collect();
        for job in jobs {
            let Some(held) = self.replicas.get_mut(&job) else {
                continue;
            };
            let replace = held.replica.is_primary()
                && held.ended_at.is_none()
                && held.replica.copies().contains(&peer)
                && held.replica.in_touch(now);
            if replace && held.gone.len() < MAX_GONE {
                held.gone.insert(peer);
            }
            let mut out = held.replica.peer_gone(now, &peer);
            if replace {
                out.extend(self.choose_copies(job));
            }
            self.replica_actions(job, out);
        }
    }

    /// Whether `peer` is the primary or a copy of a job this node holds a
    /// replica of.
    pub(super) fn shares_replica_with(&self, peer: &PeerId) -> bool {
        self.replicas
            .values()
            .any(|h| h.replica.primary_peer() == peer || h.replica.copies().contains(peer))
    }

    /// Whether `peer` is the primary or a copy of `job` as this node's
    /// replica of it knows.
    pub(super) fn shares_job_replica(&self, job: u64, peer: &PeerId) -> bool {
        self.replicas
            .get(&job)
            .is_some_and(|h| h.replica.primary_peer() == peer || h.replica.copies().contains(peer))
    }

    /// The jobs this node holds a copy of whose copy `uses` says yes to.
    pub(super) fn replica_jobs_using(
        &self,
        uses: impl Fn(&JobCopy) -> bool,
    ) -> impl Iterator<Item = u64> {
        self.replicas
            .iter()
            .filter(move |(_, h)| h.copy.as_ref().is_some_and(&uses))
            .map(|(job, _)| *job)
    }

    /// Whether this node is `job`'s home and has not heard most of the
    /// job's copies within the lease (it may be the one cut off).
    pub(super) fn out_of_touch(&self, job: u64, now: zorilla_core::Time) -> bool {
        self.replicas.get(&job).is_some_and(|held| {
            held.replica.is_primary() && held.ended_at.is_none() && !held.replica.in_touch(now)
        })
    }

    /// Whether this node holds a replica of `job` that is not its primary
    /// (its workers wait for the job's next home rather than stop).
    pub(super) fn is_copy(&self, job: u64) -> bool {
        self.replicas
            .get(&job)
            .is_some_and(|held| !held.replica.is_primary() && held.ended_at.is_none())
    }

    /// A job with no worker running here any more that this node holds no
    /// live copy of is forgotten here (what its ended ranks kept goes).
    fn forget_idle_member(&mut self, job: u64) {
        let idle = self
            .members
            .get(&job)
            .is_some_and(|m| m.workers.is_empty() && m.pending.is_empty());
        if idle && !self.is_copy(job) {
            self.members.remove(&job);
        }
    }

    /// Tells `peer`, which acts as `job`'s home, of the primary in charge
    /// now, if this node's replica knows a newer one (it steps down on
    /// hearing it).
    pub(super) fn tell_newer_primary(&mut self, job: u64, peer: PeerId) {
        let Some(held) = self.replicas.get(&job) else {
            return;
        };
        let epoch = held.replica.epoch().clone();
        if epoch.primary == peer {
            return;
        }
        self.send(
            peer,
            PeerRpc::Replica {
                job,
                msg: Box::new(held.replica.alive()),
                copy: None,
            },
        );
    }

    /// The job's home said it is over: this node's copy of it holds no
    /// election for it any more, and is dropped after [`ENDED_KEPT`].
    pub(super) fn replica_job_over(&mut self, job: u64) {
        if let Some(held) = self.replicas.get_mut(&job)
            && !held.replica.is_primary()
            && held.ended_at.is_none()
        {
            held.ended_at = Some(Instant::now());
        }
    }

    /// Hands the client connections the primaries of the jobs this node
    /// holds copies of (see [`crate::forward`]), when they changed.
    fn publish_primaries(&mut self) {
        let now: BTreeMap<u64, PeerId> = self
            .replicas
            .iter()
            .filter(|(_, h)| !h.replica.is_primary())
            .map(|(job, h)| (*job, *h.replica.primary_peer()))
            .collect();
        let mut shared = self.primaries.write().unwrap_or_else(|e| e.into_inner());
        if *shared != now {
            *shared = now;
        }
    }

    /// Tells the workers of `job` here (if any) the job's copies as this
    /// node's replica knows them now, for their checkpoints' holders.
    pub(super) fn publish_copies(&self, job: u64) {
        let (Some(member), Some(held)) = (self.members.get(&job), self.replicas.get(&job)) else {
            return;
        };
        let copies = held.replica.copies();
        member.copies_tx.send_if_modified(|now| {
            // Called after every replica message: compared in place, the
            // list is made only when it changed.
            let changed = !now.iter().eq(copies.iter());
            if changed {
                *now = copies.iter().copied().collect();
            }
            changed
        });
    }

    /// The job's primary as this node's replica knows it.
    pub(super) fn primary_of(&self, job: u64) -> Option<PeerId> {
        self.replicas.get(&job).map(|h| *h.replica.primary_peer())
    }

    fn replica_actions(&mut self, job: u64, mut actions: Vec<Action<PeerId, JobEntry<PeerId>>>) {
        // Messages first: a new primary's first appends (sent when it
        // takes over) must not overtake what it said as a copy.
        actions.sort_by_key(|a| match a {
            Action::Send { .. } => 0,
            _ => 1,
        });
        for action in actions {
            match action {
                Action::Send { to, msg } => {
                    // A copy that may not hold the job yet gets it with the
                    // log (an extra copy, or one that is behind).
                    let copy = match &msg {
                        Msg::Append {
                            copies: Some(_), ..
                        } => self.replica_copy(job).map(Box::new),
                        _ => None,
                    };
                    self.send(
                        to,
                        PeerRpc::Replica {
                            job,
                            msg: Box::new(msg),
                            copy,
                        },
                    );
                }
                Action::BecamePrimary { epoch } => self.take_over(job, epoch.term),
                Action::SteppedDown { epoch } => {
                    // Grants not sent are the new primary's to make (and what
                    // waited behind them is stale).
                    let unsaid = self
                        .replicas
                        .get_mut(&job)
                        .map(|h| h.held.step_down())
                        .unwrap_or_default();
                    self.unsay(job, unsaid);
                    self.step_down(job, epoch.primary);
                }
                Action::Refused { from, why } => {
                    if why.is_misbehaviour() {
                        self.overlay.report_misbehaviour(
                            from,
                            format!(
                                "a replica message about job {} was refused: {why}",
                                JobId(job)
                            ),
                        );
                    } else {
                        tracing::debug!(job = %JobId(job), %from, "replica message refused: {why}");
                    }
                }
                Action::Dropped { entries } => {
                    tracing::warn!(
                        job = %JobId(job),
                        entries = entries.len(),
                        "entries of a primary that stepped down are not in the new primary's log"
                    );
                }
                Action::Appended { entries, .. } => {
                    let ended = entries
                        .iter()
                        .any(|e| matches!(e, JobEntry::Event(JobEvent::Ended { .. })));
                    if ended && let Some(held) = self.replicas.get_mut(&job) {
                        held.ended_at = Some(Instant::now());
                        self.forget_idle_member(job);
                    }
                }
                // Messages that waited for a copy to hold a grant go now.
                // (The primary of a job that ended forgets it once every
                // copy holds the whole log: see `tick_replicas`.)
                Action::Committed { index } => {
                    let ready = self
                        .replicas
                        .get_mut(&job)
                        .map(|h| h.held.committed(index))
                        .unwrap_or_default();
                    self.say(ready);
                }
            }
        }
        self.publish_copies(job);
    }

    /// A grant of a job this node is primary of goes out only once a copy
    /// holds the log up to it (its entry and those before): a copy that
    /// takes the job over then knows of every worker the home started,
    /// rather than placing the rank again while the first worker runs.
    /// What the home sends the same node about the job meanwhile waits
    /// behind the grant, so that the node hears it in order (messages may
    /// still overtake each other on the way: the core numbers holds for
    /// that, see [`zorilla_core::advert::HoldId`]). The message back if it
    /// can go now. (The rule is the core's: [`zorilla_core::commit`].)
    pub(super) fn hold_message(
        &mut self,
        to: PeerId,
        msg: Message<PeerId>,
    ) -> Option<Message<PeerId>> {
        let Some(held) = self.replicas.get_mut(&msg.job().0) else {
            return Some(msg);
        };
        held.held.message(&held.replica, to, msg)
    }

    /// Answers a member's report of a rank's end, which the scheduler has
    /// taken: once the end's entry is committed (a copy holds it), so that
    /// an end the member forgets is never lost with this home.
    pub(super) fn acknowledge_end(&mut self, job: u64, node: PeerId, rank: u32, reply: Reply) {
        let Some(held) = self.replicas.get_mut(&job) else {
            return self.reply(reply, PeerReply::Ack);
        };
        if !held.replica.is_primary() {
            // An old home, or a copy taken for the home: the member hears
            // to report it to the job's home.
            let why = format!("this node is not the home of job {}", JobId(job));
            return self.reply(reply, PeerReply::refused(RefusalKind::NotHere, why));
        }
        // An end not in the log (a stale worker's) is not the job's: it is
        // acknowledged at once, as the simulator does.
        let index = end_index(held.replica.entries(), &node, rank).unwrap_or(0);
        if let Some(reply) = held.held.end_ack(&held.replica, index, node, reply) {
            self.reply(reply, PeerReply::Ack);
        }
    }

    /// Says the words whose time came.
    fn say(&mut self, words: Vec<(PeerId, Word<PeerId, Reply>)>) {
        for (to, word) in words {
            match word {
                Word::Message(msg) => self.send_now(to, msg),
                Word::EndAck(reply) => self.reply(reply, PeerReply::Ack),
            }
        }
    }

    /// This node is not the job's primary any more: a member waiting for
    /// the acknowledgement of an end hears to report it again.
    fn unsay(&mut self, job: u64, acks: Vec<(PeerId, Reply)>) {
        for (_, reply) in acks {
            self.reply(
                reply,
                PeerReply::refused(
                    RefusalKind::NotHere,
                    format!("this node is not the home of job {} any more", JobId(job)),
                ),
            );
        }
    }

    /// The job's copy as this node can hand it on: its record's if it is
    /// home, else the one it was given.
    fn replica_copy(&self, job: u64) -> Option<JobCopy> {
        self.job_copy(job)
            .or_else(|| self.replicas.get(&job).and_then(|h| h.copy.clone()))
    }

    /// The copies chose this node: it becomes the job's home in the state
    /// the log describes.
    fn take_over(&mut self, job: u64, term: u64) {
        let Some(held) = self.replicas.get(&job) else {
            return;
        };
        let Some(state) = JobState::replay(held.replica.entries()) else {
            tracing::warn!(job = %JobId(job), "took over a job whose log lacks its spec: nothing to run");
            return;
        };
        let Some(copy) = held.copy.clone() else {
            tracing::warn!(job = %JobId(job), "took over a job this node has no copy of");
            return;
        };
        // The home it ran under: a member follows it; an extra copy knows
        // it as the primary that wrote the log.
        let old_home = self.members.get(&job).map(|m| m.home).or_else(|| {
            held.replica
                .last_epoch()
                .map(|e| e.primary)
                .filter(|p| *p != self.me)
        });
        let old = old_home.map_or_else(|| "its home".to_owned(), |h| format!("node {h}"));
        tracing::warn!(job = %JobId(job), term, "took the job over from {old}, which fell silent");
        let mut ranks = BTreeMap::new();
        for (rank, r) in state.ranks.iter() {
            let mut status = RankStatus::running(StoredPeer(r.node));
            if let Some(outcome) = &r.outcome {
                status.ended(outcome, &r.node);
            }
            ranks.insert(rank, status);
        }
        let phase = JobPhase::from(state.phase);
        let record = JobRecord {
            id: job,
            phase,
            reason: format!("taken over from {old} (term {term})"),
            request: copy.request,
            module: copy.module,
            inputs: copy.inputs,
            ranks,
            submitted_unix: copy.submitted_unix,
            moved_from: old_home.map(StoredPeer),
            moved_to: None,
            owner: copy.owner,
            owner_proof: copy.owner_proof,
            origin: copy.origin,
        };
        self.persist(&record);
        if phase.is_terminal() {
            self.jobs.add_finished(record);
        } else {
            self.jobs.start(record);
        }
        let now = self.now();
        for (node, ranks) in state.ranks.by_node() {
            if node != self.me {
                self.liveness.placed(now, JobId(job), node, &ranks);
            }
        }
        let out = self.sched.adopt(now, JobId(job), term, state);
        self.follow(job, self.me);
        self.execute(out);
        let out = self.choose_copies(job);
        self.replica_actions(job, out);
    }

    /// A newer primary is in charge: this node is no longer the job's home.
    fn step_down(&mut self, job: u64, primary: PeerId) {
        if !self.sched.step_down(JobId(job), primary) {
            return;
        }
        tracing::warn!(job = %JobId(job), %primary, "another node is the job's home now: stepped down");
        self.liveness.forget_job(JobId(job));
        self.stall.forget_job(JobId(job));
        // The record stays for what it holds, marked as the new home's (also
        // when this node ended the job on stale knowledge before it heard
        // of the new primary: that end is not the job's).
        let record = self.jobs.remove(job).or_else(|| {
            self.jobs
                .get(job)
                .cloned()
                .or_else(|| self.store.job(job).ok().flatten())
        });
        if let Some(mut record) = record {
            record.moved_to = Some(StoredPeer(primary));
            self.persist(&record);
            self.jobs.update(record);
        }
        self.follow(job, primary);
    }

    /// The job's home is `home` now: the ranks here report there, and
    /// what ranks that ended here sent to the old home is sent again.
    pub(super) fn follow(&mut self, job: u64, home: PeerId) {
        self.sched.home_moved(JobId(job), home);
        let Some(member) = self.members.get_mut(&job) else {
            return;
        };
        if member.home == home {
            return;
        }
        tracing::info!(job = %JobId(job), %home, "the job's home moved");
        member.home = home;
        member.heard = Instant::now();
        let _ = member.home_tx.send(home);
    }
}

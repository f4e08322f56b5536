//! The loop's side of the status: [`Publisher`] remembers what may have
//! changed and, at most every [`PUBLISH_EVERY`], builds a fresh view of the
//! loop's jobs, workers, pending adverts and resources in use from its
//! [`LoopState`], swaps it into [`NodeStatus`] and announces the pages that
//! changed. It also keeps what this node knows of the jobs it runs workers
//! of without being their home.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zorilla_core::advert::JobId;
use zorilla_core::node::Scheduler;
use zorilla_overlay::PeerId;
use zorilla_webui::model::{
    Creditor, JobPhase, JobRole, JobSummary, MAX_CREDITORS, PendingAdvert, WorkerInfo, WorkerState,
};

use super::convert::{home_entry, job_name, resources, state_by_phase, strategy, submitted};
use super::source::NodeStatus;
use super::view::{ChangeKey, JobEntry, LoopView, PendingEntry, diff};
use crate::owner::UserId;
use crate::protocol::{self, JobRequest};
use crate::store::{JobRecord, unix_ms};
use crate::wire::PeerRpc;

/// The loop rebuilds the view at most this often.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// Jobs shown: every job under way first, then the newest ended ones (a
/// home keeps `finished_in_memory` finished jobs in memory, as many as
/// this by default; older ones are read from the store when their page is
/// asked for).
pub(crate) const MAX_JOBS: usize = 500;
/// Jobs this node ran workers of (and is not home to) that it remembers.
const MAX_PARTICIPATED: usize = 256;

/// A job with workers on this node, as the loop describes it.
pub(crate) struct Member {
    pub(crate) job: u64,
    pub(crate) home: PeerId,
    /// Ranks whose workers run here.
    pub(crate) running: Vec<u32>,
    /// Ranks whose workers are being prepared here.
    pub(crate) starting: Vec<u32>,
    /// Where every rank of the job runs, as far as this node knows.
    pub(crate) ranks: BTreeMap<u32, PeerId>,
}

/// The loop's state that the view is built from.
pub(crate) struct LoopState<'a> {
    pub(crate) epoch: Instant,
    pub(crate) sched: &'a Scheduler<PeerId>,
    /// Home jobs under way.
    pub(crate) jobs: &'a BTreeMap<u64, JobRecord>,
    /// The newest finished home jobs (the rest are in the store).
    pub(crate) finished: &'a VecDeque<JobRecord>,
    pub(crate) members: Vec<Member>,
    /// Why the disk cannot be written, while it cannot.
    pub(crate) disk_problem: Option<String>,
}

/// A job this node runs (or ran) workers of without being its home.
#[derive(Debug, Clone)]
struct Participation {
    home: PeerId,
    request: Option<JobRequest>,
    /// The job's owner, as its copy names it.
    owner: Option<UserId>,
    phase: JobPhase,
    ranks: BTreeMap<u32, PeerId>,
    /// This node's own ranks.
    local: BTreeMap<u32, WorkerState>,
    first_seen_ms: u64,
}

/// The loop's side: remembers what changed and publishes new views. See
/// the [module documentation](self).
pub(crate) struct Publisher {
    status: Arc<NodeStatus>,
    /// The loop's state may have changed since the last view.
    dirty: bool,
    /// Jobs whose log grew since the last announcement.
    logs: BTreeSet<u64>,
    last: Option<Instant>,
    workers_started: u64,
    participated: BTreeMap<u64, Participation>,
}

impl Publisher {
    /// The publisher of `status`; the first view goes out at once.
    pub(crate) fn new(status: Arc<NodeStatus>) -> Publisher {
        Publisher {
            status,
            dirty: true,
            logs: BTreeSet::new(),
            last: None,
            workers_started: 0,
            participated: BTreeMap::new(),
        }
    }

    /// The shared status (for answering remote views).
    pub(crate) fn status(&self) -> Arc<NodeStatus> {
        self.status.clone()
    }

    /// Something the pages show may have changed.
    pub(crate) fn touch(&mut self) {
        self.dirty = true;
    }

    /// A peer's request arrived: marks what it may change.
    pub(crate) fn note_rpc(&mut self, rpc: &PeerRpc) {
        use crate::wire::member::MemberRpc;
        match rpc {
            PeerRpc::Member(MemberRpc::Log { job, .. }) => {
                self.logs.insert(*job);
            }
            PeerRpc::Sched(_) | PeerRpc::Member(MemberRpc::WorkerEnded { .. }) => {
                self.dirty = true;
            }
            // Nothing shown changes.
            PeerRpc::Member(MemberRpc::GetJob { .. } | MemberRpc::Output { .. })
            | PeerRpc::Ping
            | PeerRpc::File(_)
            | PeerRpc::Barrier(_)
            | PeerRpc::Ranks(_)
            | PeerRpc::Replica(_)
            | PeerRpc::Forward(_)
            | PeerRpc::View(_)
            | PeerRpc::Checkpoint(_) => {}
        }
    }

    /// A worker of rank `rank` of `job` (home `home`) started on this node.
    pub(crate) fn worker_started(&mut self, job: u64, home: PeerId, rank: u32) {
        self.workers_started += 1;
        self.dirty = true;
        if home != self.status.me {
            // Noted at once: a worker that ends before the next view is
            // made would otherwise never be seen here (the views sample
            // what runs).
            self.participation(job, home)
                .local
                .entry(rank)
                .or_insert(WorkerState::Running);
        }
    }

    /// This node got the copy of a job it runs workers of.
    pub(crate) fn job_copy(
        &mut self,
        job: u64,
        home: PeerId,
        request: &JobRequest,
        owner: Option<UserId>,
        job_phase: protocol::JobPhase,
    ) {
        if home == self.status.me {
            return; // A job of our own: its record says it all.
        }
        let p = self.participation(job, home);
        p.request = Some(request.clone());
        p.owner = owner;
        p.phase = p.phase.max(job_phase.into());
        self.dirty = true;
    }

    /// The home pushed a job's phase.
    pub(crate) fn job_phase(&mut self, job: u64, home: PeerId, job_phase: protocol::JobPhase) {
        if let Some(p) = self.participated.get_mut(&job)
            && p.home == home
        {
            p.phase = p.phase.max(job_phase.into());
            self.dirty = true;
        }
    }

    fn participation(&mut self, job: u64, home: PeerId) -> &mut Participation {
        if !self.participated.contains_key(&job) && self.participated.len() >= MAX_PARTICIPATED {
            // Forget the oldest ended one (or else the oldest).
            let oldest = self
                .participated
                .iter()
                .min_by_key(|(_, p)| (!p.phase_is_terminal(), p.first_seen_ms))
                .map(|(j, _)| *j);
            if let Some(oldest) = oldest {
                self.participated.remove(&oldest);
            }
        }
        self.participated
            .entry(job)
            .or_insert_with(|| Participation {
                home,
                request: None,
                owner: None,
                phase: JobPhase::Running,
                ranks: BTreeMap::new(),
                local: BTreeMap::new(),
                first_seen_ms: unix_ms(),
            })
    }

    /// When [`publish`](Self::publish) is next due, if anything changed.
    pub(crate) fn due(&self) -> Option<Instant> {
        if !self.dirty && self.logs.is_empty() {
            return None;
        }
        Some(match self.last {
            Some(last) => last + PUBLISH_EVERY,
            None => Instant::now(),
        })
    }

    /// Whether [`publish`](Self::publish) is due now.
    pub(crate) fn is_due(&self) -> bool {
        self.due().is_some_and(|at| at <= Instant::now())
    }

    /// Builds the view from the loop's state (if it may have changed),
    /// swaps it in and announces what changed.
    pub(crate) fn publish(&mut self, state: LoopState<'_>) {
        self.last = Some(Instant::now());
        let mut changes = BTreeSet::new();
        if std::mem::take(&mut self.dirty) {
            let view = Arc::new(self.build(state));
            let old = self.status.local.send_replace(view.clone());
            changes = diff(&old, &view);
        }
        for job in std::mem::take(&mut self.logs) {
            changes.insert(ChangeKey::Job(JobId(job).to_string()));
        }
        for change in changes {
            self.status.announce(change.into());
        }
    }

    fn build(&mut self, state: LoopState<'_>) -> LoopView {
        let me = self.status.me;
        let sched = state.sched;
        let mut jobs = Vec::with_capacity(state.jobs.len() + self.participated.len());
        // A home keeps every job it ever had: pick the ones shown before
        // building anything for them.
        let started_ms = self.status.started_ms;
        let records: BTreeMap<u64, &JobRecord> = state
            .finished
            .iter()
            .chain(state.jobs.values())
            .map(|r| (r.id, r))
            .collect();
        let mut home: Vec<(bool, std::cmp::Reverse<u64>, u64)> = records
            .iter()
            .map(|(id, r)| {
                let since = submitted(r, started_ms);
                (r.phase.is_terminal(), std::cmp::Reverse(since), *id)
            })
            .collect();
        if home.len() > MAX_JOBS {
            home.select_nth_unstable(MAX_JOBS);
            home.truncate(MAX_JOBS);
        }
        for (_, _, id) in home {
            let report = sched.report(JobId(id));
            jobs.push(home_entry(me, report, id, records[&id], started_ms));
        }
        // Workers of other homes' jobs. A rank of ours that no longer runs
        // here has ended (how, only its home knows).
        for p in self.participated.values_mut() {
            for s in p.local.values_mut() {
                if matches!(s, WorkerState::Starting | WorkerState::Running) {
                    *s = WorkerState::Exited;
                }
            }
        }
        for member in &state.members {
            if member.home == me {
                continue;
            }
            let p = self.participation(member.job, member.home);
            if !member.ranks.is_empty() {
                p.ranks = member.ranks.clone();
            }
            for rank in &member.starting {
                p.local.insert(*rank, WorkerState::Starting);
            }
            for rank in &member.running {
                p.local.insert(*rank, WorkerState::Running);
            }
        }
        for (id, p) in &mut self.participated {
            if records.contains_key(id) {
                continue;
            }
            if matches!(p.phase, JobPhase::Cancelled | JobPhase::Failed) {
                for s in p.local.values_mut() {
                    if *s == WorkerState::Exited {
                        *s = WorkerState::Failed;
                    }
                }
            }
            jobs.push(p.entry(*id, me));
        }
        // Jobs under way first, then the newest.
        let key = |j: &JobEntry| {
            (
                j.summary.phase > JobPhase::Running,
                std::cmp::Reverse(j.since_ms),
            )
        };
        jobs.sort_by(|a, b| {
            key(a)
                .cmp(&key(b))
                .then_with(|| a.summary.id.cmp(&b.summary.id))
        });
        jobs.truncate(MAX_JOBS);

        let pending = sched
            .pending()
            .map(|(advert, expires_at)| PendingEntry {
                advert: PendingAdvert {
                    job_id: advert.job.to_string(),
                    job_name: format!(
                        "{} ({}-{} workers of {})",
                        &advert.job.to_string()[..8],
                        advert.workers.min,
                        advert.workers.max,
                        advert.per_worker
                    ),
                    home: advert.home.to_string(),
                    workers_wanted: advert.workers.max,
                    expires_in_secs: 0,
                },
                expires_at: state.epoch + expires_at,
            })
            .collect();
        let offered = sched.config().resources;
        let mut creditors: Vec<Creditor> = sched
            .favours()
            .creditors()
            .map(|(node, balance)| Creditor {
                node_id: node.to_string(),
                balance_core_secs: balance / 1000,
            })
            .filter(|c| c.balance_core_secs > 0)
            .collect();
        creditors.sort_by(|a, b| {
            b.balance_core_secs
                .cmp(&a.balance_core_secs)
                .then_with(|| a.node_id.cmp(&b.node_id))
        });
        creditors.truncate(MAX_CREDITORS);
        let avoided = sched
            .avoided()
            .iter()
            .take(zorilla_webui::model::MAX_AVOIDED_SHOWN)
            .map(|(node, _)| node.to_string())
            .collect();
        LoopView {
            in_use: resources(offered.saturating_sub(&sched.free())),
            workers_running: state.members.iter().map(|m| m.running.len() as u32).sum(),
            workers_started: self.workers_started,
            jobs,
            pending,
            disk_problem: state.disk_problem,
            creditors,
            avoided,
        }
    }
}

impl Participation {
    fn phase_is_terminal(&self) -> bool {
        self.phase > JobPhase::Running
    }

    /// The job's entry on this node (`me`).
    fn entry(&self, job: u64, me: PeerId) -> JobEntry {
        let request = self.request.as_ref();
        let mut workers: Vec<WorkerInfo> = self
            .ranks
            .iter()
            .map(|(rank, node)| WorkerInfo {
                node: node.to_string(),
                index: *rank,
                state: self
                    .local
                    .get(rank)
                    .copied()
                    .unwrap_or_else(|| state_by_phase(self.phase)),
                exit_code: None,
                ended: None,
            })
            .collect();
        // Ranks of ours the placement does not list (yet).
        for (rank, state) in &self.local {
            if !self.ranks.contains_key(rank) {
                workers.push(WorkerInfo {
                    node: me.to_string(),
                    index: *rank,
                    state: *state,
                    exit_code: None,
                    ended: None,
                });
            }
        }
        JobEntry {
            summary: JobSummary {
                id: JobId(job).to_string(),
                name: job_name(job, request),
                role: JobRole::Participant,
                phase: self.phase,
                workers_joined: self.ranks.len().max(self.local.len()) as u32,
                workers_needed: request.map_or(0, |r| r.min_workers),
                home: self.home.to_string(),
                owner: self.owner.map(|owner| owner.to_string()),
                strategy: strategy(request),
                flood_radius: 0,
                age_secs: 0,
                pending_reason: None,
            },
            since_ms: self.first_seen_ms,
            workers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zorilla_core::resources::Resources as CoreResources;
    use zorilla_webui::{Change, StatusSource};

    use crate::protocol::LogChunk;
    use crate::status::answer;
    use crate::store::Store;
    use crate::wire::{PeerReply, encode};

    fn chunk(rank: u32, stderr: bool, text: &str) -> LogChunk {
        LogChunk {
            rank,
            stderr,
            data: text.as_bytes().to_vec(),
        }
    }

    /// A node's status over a real (unconnected) overlay, a scheduler with
    /// nothing going on, and `n` stored home jobs: every tenth running (two
    /// ranks), the rest completed (four ranks).
    async fn with_jobs(
        n: u64,
    ) -> (
        Publisher,
        Arc<NodeStatus>,
        Scheduler<PeerId>,
        BTreeMap<u64, JobRecord>,
        tempfile::TempDir,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = zorilla_overlay::OverlayConfig {
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()],
            mdns: false,
            ..zorilla_overlay::OverlayConfig::default()
        };
        let (overlay, _events) = zorilla_overlay::Overlay::start(config).await.unwrap();
        let me = overlay.local_peer_id();
        let store = Arc::new(Store::open(&dir.path().join("state.redb")).unwrap());
        let status = NodeStatus::new(
            overlay,
            "test".into(),
            None,
            None,
            CoreResources::new(4, 1024, 1024),
            crate::cpuspeed::CpuSpeed {
                figure: zorilla_core::resources::REFERENCE_SPEED,
                source: crate::cpuspeed::Source::Configured,
            },
            store,
        );
        let sched = Scheduler::new(me, zorilla_core::node::SchedulerConfig::default());
        let jobs = (1..=n)
            .map(|id| {
                let running = id % 10 == 0;
                let ranks = (0..if running { 2 } else { 4 })
                    .map(|r| {
                        let mut status =
                            protocol::RankStatus::running(crate::store::StoredPeer(me));
                        if !running {
                            status.ended(&zorilla_core::node::RankOutcome::Exited(0), &me);
                        }
                        (r, status)
                    })
                    .collect();
                let record = JobRecord {
                    kept_run: None,
                    id,
                    phase: if running {
                        protocol::JobPhase::Running
                    } else {
                        protocol::JobPhase::Completed
                    },
                    reason: "r".into(),
                    request: JobRequest {
                        args: vec!["arg".into(); 3],
                        ..JobRequest::default()
                    },
                    module: crate::store::FileRef {
                        name: "module.wasm".into(),
                        sha256: "00".into(),
                        size: 1,
                    },
                    inputs: Vec::new(),
                    ranks,
                    submitted_unix: 1_700_000_000 + id,
                    moved_from: None,
                    moved_to: None,
                    owner: None,
                    owner_proof: None,
                    origin: None,
                    tasks: None,
                };
                (id, record)
            })
            .collect();
        (Publisher::new(status.clone()), status, sched, jobs, dir)
    }

    static NO_JOBS: VecDeque<JobRecord> = VecDeque::new();

    fn state<'a>(
        sched: &'a Scheduler<PeerId>,
        jobs: &'a BTreeMap<u64, JobRecord>,
    ) -> LoopState<'a> {
        LoopState {
            epoch: Instant::now(),
            sched,
            jobs,
            finished: &NO_JOBS,
            members: Vec::new(),
            disk_problem: None,
        }
    }

    #[tokio::test]
    async fn a_long_history_shows_the_jobs_under_way_then_the_newest() {
        let (mut publisher, status, sched, jobs, _dir) = with_jobs(1200).await;
        let mut changes = status.subscribe();
        assert!(publisher.is_due(), "the first view goes out at once");
        publisher.publish(state(&sched, &jobs));
        let shown = status.jobs();
        assert_eq!(shown.len(), MAX_JOBS);
        // 120 running, newest first, then the newest completed.
        assert!(shown[..120].iter().all(|j| j.phase == JobPhase::Running));
        assert_eq!(shown[0].id, JobId(1200).to_string());
        assert_eq!(shown[120].id, JobId(1199).to_string());
        assert!(shown[120..].iter().all(|j| j.phase == JobPhase::Completed));
        assert_eq!(status.overview().home_jobs.len(), MAX_JOBS);
        let job = status.job(&shown[0].id).unwrap();
        assert_eq!(job.workers.len(), 2);
        assert!(job.log_tail.is_empty());
        let mut got = BTreeSet::new();
        while let Ok(change) = changes.try_recv() {
            got.insert(format!("{change:?}"));
        }
        assert_eq!(got, BTreeSet::from(["Jobs".into(), "Node".into()]));

        // Nothing changed: nothing is announced, and nothing is due.
        assert!(!publisher.is_due());
        publisher.touch();
        publisher.publish(state(&sched, &jobs));
        assert!(changes.try_recv().is_err());
        // A log chunk announces its job's page only.
        publisher.note_rpc(&PeerRpc::Member(crate::wire::member::MemberRpc::Log {
            job: 1200,
            chunk: protocol::LogChunk {
                rank: 0,
                stderr: false,
                data: b"x\n".to_vec(),
            },
        }));
        assert!(publisher.due().is_some());
        publisher.publish(state(&sched, &jobs));
        assert_eq!(
            changes.try_recv().unwrap(),
            Change::Job(JobId(1200).to_string())
        );
        assert!(changes.try_recv().is_err());
        // The remote view's answer fits.
        match answer(&status, &crate::wire::view::ViewRpc::Node) {
            PeerReply::Status(snap) => assert_eq!(snap.jobs.len(), MAX_JOBS),
            other => panic!("{other:?}"),
        }
        match answer(
            &status,
            &crate::wire::view::ViewRpc::Job {
                job: "nonsense".into(),
            },
        ) {
            PeerReply::StatusJob(None) => {}
            other => panic!("{other:?}"),
        }
    }

    /// A finished home job older than the view's newest is still shown,
    /// from the store (the home does not keep it in memory).
    #[tokio::test]
    async fn an_old_finished_job_is_read_from_the_store() {
        let (mut publisher, status, sched, jobs, _dir) = with_jobs(3).await;
        let mut old = jobs[&1].clone();
        old.id = 0x77;
        status.store.put_job(&old).unwrap();
        status
            .store
            .append_log(0x77, &chunk(0, false, "from the store\n"))
            .unwrap();
        publisher.publish(state(&sched, &jobs));
        let id = JobId(0x77).to_string();
        assert!(status.jobs().iter().all(|j| j.id != id));
        let detail = status.job(&id).expect("read from the store");
        assert_eq!(detail.summary.role, JobRole::Home);
        assert_eq!(detail.summary.phase, JobPhase::Completed);
        assert_eq!(detail.workers.len(), 4);
        assert_eq!(detail.log_tail[0].text, "from the store");
        assert!(status.job(&JobId(0x78).to_string()).is_none());
    }

    /// What a publish costs a home with a long history:
    /// `cargo test -p zorilla-node --lib publish_cost -- --ignored --nocapture`.
    #[tokio::test]
    #[ignore = "a measurement, not a test"]
    async fn publish_cost() {
        for n in [100, 1_000, 10_000] {
            let (mut publisher, status, sched, jobs, _dir) = with_jobs(n).await;
            let rounds = 50;
            let start = Instant::now();
            for _ in 0..rounds {
                publisher.touch();
                publisher.publish(state(&sched, &jobs));
            }
            let publish = start.elapsed() / rounds;
            let start = Instant::now();
            let bytes = encode(&answer(&status, &crate::wire::view::ViewRpc::Node)).len();
            let remote = start.elapsed();
            println!(
                "{n} stored jobs: publish {:.2} ms; remote-view answer {:.2} ms, {bytes} bytes",
                publish.as_secs_f64() * 1e3,
                remote.as_secs_f64() * 1e3
            );
        }
    }
}

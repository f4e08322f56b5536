//! The jobs this node runs workers of, for other homes and for itself:
//! per job its home as this node knows it, its network side, its workers
//! and the incarnation of each rank's latest one. The loop drives it: a
//! grant gives ranks ([`Members::given`]), a worker's end frees its rank
//! unless a newer worker of it runs ([`Members::worker_ended`]), a job
//! whose home said nothing for a while is asked again ([`Members::stale`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use zorilla_overlay::PeerId;
use zorilla_sandbox::{CancelHandle, Waiting};

use crate::link::{Inbox, Links};
use crate::net::{BarrierItem, JobNet};
use crate::wire::job_copy::Placed;

/// A worker running here, as the loop holds it.
pub(super) struct RunningWorker {
    pub(super) cancel: CancelHandle,
    /// Whether it waits in a receive without a deadline (see `liveness`).
    pub(super) waiting: Waiting,
}

impl RunningWorker {
    pub(super) fn cancel(&self) {
        self.cancel.cancel();
    }
}

/// A job with workers on this node (the home's own jobs included).
pub(super) struct MemberJob {
    pub(super) home: PeerId,
    pub(super) net: Arc<JobNet>,
    pub(super) workers: HashMap<u32, RunningWorker>,
    /// The incarnation of each rank's latest worker here: an older one's
    /// end (stopped for a rollback, its rank since given a fresh worker
    /// here) changes nothing of the new one's.
    pub(super) incarnations: HashMap<u32, u32>,
    /// Inbox ends of ranks whose workers are being prepared.
    pub(super) pending: HashMap<u32, Ends>,
    pub(super) stopped: bool,
    /// When the home last told this copy anything (or it asked).
    pub(super) heard: Instant,
    /// When each rank was given to this node (see `liveness`).
    pub(super) born: HashMap<u32, Instant>,
    /// The job's home as this node knows it, for the tasks that send to
    /// it (the job may change home: see `replicas`).
    pub(super) home_tx: watch::Sender<PeerId>,
    /// The job's copies as this node's replica knows them, for the
    /// holders of its workers' checkpoints (see `checkpoint`): one of them
    /// becomes the home if the home is lost.
    pub(super) copies_tx: watch::Sender<Vec<PeerId>>,
}

/// The ends of a rank's inbox, made before its worker starts.
pub(super) type Ends = (Arc<Inbox>, mpsc::Receiver<BarrierItem>);

/// The jobs with workers on this node.
#[derive(Default)]
pub(super) struct Members {
    jobs: HashMap<u64, MemberJob>,
}

impl Members {
    pub(super) fn get(&self, job: &u64) -> Option<&MemberJob> {
        self.jobs.get(job)
    }

    pub(super) fn get_mut(&mut self, job: &u64) -> Option<&mut MemberJob> {
        self.jobs.get_mut(job)
    }

    pub(super) fn remove(&mut self, job: &u64) -> Option<MemberJob> {
        self.jobs.remove(job)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&u64, &MemberJob)> {
        self.jobs.iter()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&u64, &mut MemberJob)> {
        self.jobs.iter_mut()
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut MemberJob> {
        self.jobs.values_mut()
    }

    /// Whether this node runs (or prepares) workers of a job of `home`'s.
    pub(super) fn runs_for(&self, home: &PeerId) -> bool {
        self.jobs.values().any(|m| m.home == *home)
    }

    /// `home` gives this node `ranks` of `job` (their `incarnation`, the
    /// job's whole `placement`): the job's entry is made, or renewed (a
    /// job stopped before, for a rollback, gets a network of its own for
    /// the fresh workers), and each rank's inbox exists from now on, so
    /// that messages for it queue while its module is fetched.
    pub(super) fn given(
        &mut self,
        job: u64,
        home: PeerId,
        ranks: &[u32],
        incarnation: u32,
        placement: &BTreeMap<u32, Placed>,
        links: &Arc<Links>,
    ) {
        let now = Instant::now();
        let member = self.jobs.entry(job).or_insert_with(|| MemberJob {
            home,
            net: JobNet::new(job, links.clone()),
            workers: HashMap::new(),
            incarnations: HashMap::new(),
            pending: HashMap::new(),
            stopped: false,
            heard: now,
            born: HashMap::new(),
            home_tx: watch::channel(home).0,
            copies_tx: watch::channel(Vec::new()).0,
        });
        if member.stopped {
            member.net = JobNet::new(job, links.clone());
        }
        member.stopped = false;
        member.heard = now;
        member.net.set_ranks(placement.clone());
        for rank in ranks {
            member.born.insert(*rank, now);
            member.incarnations.insert(*rank, incarnation);
            let ends = member.net.register(*rank, incarnation);
            member.pending.insert(*rank, ends);
        }
    }

    /// Stops `job`'s workers here and closes its network (their ends come
    /// back through [`Members::worker_ended`]).
    pub(super) fn stop(&mut self, job: u64) {
        if let Some(member) = self.jobs.get_mut(&job) {
            member.stopped = true;
            for worker in member.workers.values() {
                worker.cancel();
            }
            member.net.close();
        }
    }

    /// Worker `incarnation` of `rank` of `job` ended: its rank is free
    /// unless a newer worker of it runs here (then `None`: the fresh
    /// worker's resources stay taken). `Some(true)` if no worker of the
    /// job runs here any more, nor waits to start.
    pub(super) fn worker_ended(&mut self, job: u64, rank: u32, incarnation: u32) -> Option<bool> {
        let Some(member) = self.jobs.get_mut(&job) else {
            return Some(true);
        };
        if member
            .incarnations
            .get(&rank)
            .is_some_and(|latest| *latest != incarnation)
        {
            return None;
        }
        member.workers.remove(&rank);
        member.incarnations.remove(&rank);
        // Ranks granted and still being prepared count too: a job array's
        // next task is often granted to this node before its last one's
        // end is taken in, and forgetting the job then left that task
        // never started and never reported (the array never ended).
        Some(member.workers.is_empty() && member.pending.is_empty())
    }

    /// The jobs of other homes that have said nothing for `after`, with
    /// their homes: each is marked heard now, so that it is asked once per
    /// `after`.
    pub(super) fn stale(&mut self, me: &PeerId, after: Duration) -> Vec<(u64, PeerId)> {
        let mut stale = Vec::new();
        for (job, member) in &mut self.jobs {
            if member.heard.elapsed() < after || member.home == *me {
                continue;
            }
            member.heard = Instant::now();
            stale.push((*job, member.home));
        }
        stale
    }
}

#[cfg(test)]
mod tests {
    use zorilla_overlay::{Overlay, OverlayConfig};

    use super::*;

    async fn links() -> Arc<Links> {
        let (overlay, mut events) = Overlay::start(OverlayConfig::local("members-test"))
            .await
            .unwrap();
        tokio::spawn(async move { while events.recv().await.is_some() {} });
        Links::new(overlay.local_peer_id(), overlay)
    }

    fn placement(ranks: &[u32], node: PeerId, incarnation: u32) -> BTreeMap<u32, Placed> {
        ranks
            .iter()
            .map(|r| (*r, Placed { node, incarnation }))
            .collect()
    }

    #[tokio::test]
    async fn given_ranks_have_inboxes_before_their_workers_start() {
        let links = links().await;
        let (home, me) = (PeerId::random(), PeerId::random());
        let mut members = Members::default();
        members.given(7, home, &[0, 1], 3, &placement(&[0, 1], me, 3), &links);
        let member = members.get(&7).unwrap();
        assert_eq!(member.home, home);
        assert_eq!(member.pending.len(), 2);
        assert_eq!(member.incarnations.get(&1), Some(&3));
        assert!(members.runs_for(&home));
        assert!(!members.runs_for(&me));
    }

    #[tokio::test]
    async fn a_stopped_job_given_ranks_again_gets_a_fresh_network() {
        let links = links().await;
        let (home, me) = (PeerId::random(), PeerId::random());
        let mut members = Members::default();
        members.given(7, home, &[0], 1, &placement(&[0], me, 1), &links);
        let first = members.get(&7).unwrap().net.clone();
        members.stop(7);
        assert!(members.get(&7).unwrap().stopped);
        members.given(7, home, &[0], 2, &placement(&[0], me, 2), &links);
        let member = members.get(&7).unwrap();
        assert!(!member.stopped);
        assert!(!Arc::ptr_eq(&first, &member.net));
    }

    #[tokio::test]
    async fn an_older_workers_end_leaves_the_newer_workers_rank_taken() {
        let links = links().await;
        let (home, me) = (PeerId::random(), PeerId::random());
        let mut members = Members::default();
        members.given(7, home, &[0], 1, &placement(&[0], me, 1), &links);
        members.given(7, home, &[0], 2, &placement(&[0], me, 2), &links);
        // Both workers started: their ends were taken, as `prepared` does.
        members.get_mut(&7).unwrap().pending.clear();
        assert_eq!(members.worker_ended(7, 0, 1), None);
        assert_eq!(members.get(&7).unwrap().incarnations.get(&0), Some(&2));
        assert_eq!(members.worker_ended(7, 0, 2), Some(true));
        assert!(members.get(&7).unwrap().incarnations.is_empty());
        // A job not known here has nothing left running.
        assert_eq!(members.worker_ended(8, 0, 0), Some(true));
    }

    /// A job array's next task, granted here before its last one's end
    /// is taken in, keeps the job: it waits to start.
    #[tokio::test]
    async fn a_job_whose_next_rank_waits_to_start_is_not_left_empty() {
        let links = links().await;
        let (home, me) = (PeerId::random(), PeerId::random());
        let mut members = Members::default();
        members.given(7, home, &[0], 1, &placement(&[0], me, 1), &links);
        members.get_mut(&7).unwrap().pending.clear();
        members.given(7, home, &[1], 2, &placement(&[1], me, 2), &links);
        assert_eq!(members.worker_ended(7, 0, 1), Some(false));
        members.get_mut(&7).unwrap().pending.clear();
        assert_eq!(members.worker_ended(7, 1, 2), Some(true));
    }

    #[tokio::test]
    async fn only_other_homes_quiet_jobs_are_stale_and_once_per_period() {
        let links = links().await;
        let (home, me) = (PeerId::random(), PeerId::random());
        let mut members = Members::default();
        members.given(1, home, &[0], 0, &placement(&[0], me, 0), &links);
        members.given(2, me, &[0], 0, &placement(&[0], me, 0), &links);
        assert!(members.stale(&me, Duration::from_secs(3600)).is_empty());
        assert_eq!(members.stale(&me, Duration::ZERO), vec![(1, home)]);
        // Marked heard: not stale again within the period.
        assert!(members.stale(&me, Duration::from_secs(3600)).is_empty());
    }
}

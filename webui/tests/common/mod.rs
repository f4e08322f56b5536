//! Shared by the tests: a fake [`StatusSource`] with hostile strings in it,
//! and (in `client`, which the node's tests use too) a tiny HTTP/1.0 client
//! for loopback.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

mod client;
#[allow(unused_imports)] // Not every test uses the client.
pub use client::*;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use tokio::sync::broadcast;
use zorilla_webui::model::*;
use zorilla_webui::{Change, RemoteError, StatusSource, WebConfig, snapshot};

pub const ME: &str = "12D3KooWMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMe";
pub const NEAR: &str = "12D3KooWNearNearNearNearNearNearNearNearNearNearNe";
pub const FAR: &str = "12D3KooWFarFarFarFarFarFarFarFarFarFarFarFarFarFarF";
pub const GONE: &str = "12D3KooWGoneGoneGoneGoneGoneGoneGoneGoneGoneGoneGo";
pub const XSS1: &str = "<script>alert(1)</script>";
pub const XSS2: &str = "\"><img src=x onerror=alert(2)>";
pub const XSS3: &str = "'><svg onload=alert(3)>";

/// The fake node's state, and what its peers answer.
pub struct Fake {
    pub state: Mutex<State>,
    pub tx: broadcast::Sender<Change>,
}

pub struct State {
    pub snap: NodeSnapshot,
    pub details: HashMap<String, JobDetail>,
    /// Peers that answer a remote view.
    pub remotes: HashMap<String, (NodeSnapshot, HashMap<String, JobDetail>)>,
}

pub fn job(id: &str, name: &str, phase: JobPhase, home: &str) -> JobSummary {
    JobSummary {
        id: id.into(),
        name: name.into(),
        role: if home == ME {
            JobRole::Home
        } else {
            JobRole::Participant
        },
        phase,
        workers_joined: 2,
        workers_needed: 4,
        home: home.into(),
        owner: None,
        strategy: "flood".into(),
        flood_radius: 3,
        age_secs: 125,
        pending_reason: (phase == JobPhase::Scheduling)
            .then(|| format!("2 floods so far, radius 3 {XSS3}")),
    }
}

fn peer(
    id: &str,
    name: Option<&str>,
    rtt: Option<f64>,
    link: LinkKind,
    connected: bool,
) -> PeerInfo {
    PeerInfo {
        peer_id: id.into(),
        name: name.map(Into::into),
        rtt_ms: rtt,
        link,
        connected,
        coordinates: None,
    }
}

pub fn node_snapshot(id: &str, name: &str, jobs: Vec<JobSummary>) -> NodeSnapshot {
    NodeSnapshot {
        overview: NodeOverview {
            node_id: id.into(),
            name: name.into(),
            version: "0.1.0".into(),
            uptime_secs: 3725,
            network: format!("testgrid{XSS2}"),
            listen_addresses: vec!["/ip4/127.0.0.1/tcp/4001".into(), format!("/dns/{XSS1}")],
            offered: Resources {
                cores: 8,
                memory_bytes: 16 << 30,
                disk_bytes: 100 << 30,
            },
            cpu_speed: 1500,
            cpu_speed_source: Some("measured at this start".into()),
            in_use: Resources {
                cores: 2,
                memory_bytes: 512 << 20,
                disk_bytes: 1 << 30,
            },
            workers_running: 2,
            home_jobs: jobs
                .iter()
                .filter(|j| j.home == id)
                .map(|j| j.id.clone())
                .collect(),
            problem: None,
            addresses: vec![AddressInfo {
                address: format!("/dns/{XSS1}/tcp/4001"),
                reachable: false,
                why: XSS2.into(),
            }],
            position: Some(Position {
                coordinates: vec![12.5, -3.25, 0.5],
                error: 0.25,
            }),
            grid: Some(zorilla_webui::model::GridAccess::Closed {
                fingerprint: XSS1.into(),
                expires_unix: u64::MAX,
            }),
            creditors: vec![Creditor {
                node_id: format!("creditor{XSS1}"),
                balance_core_secs: 3600,
            }],
            avoided: vec![format!("liar{XSS1}")],
        },
        peers: vec![
            PeerInfo {
                coordinates: Some(vec![1.0, 2.0, 0.3]),
                ..peer(NEAR, Some(XSS1), Some(4.5), LinkKind::Near, true)
            },
            peer(FAR, Some("far-node"), Some(80.0), LinkKind::Far, true),
            peer(GONE, Some(XSS2), None, LinkKind::None, false),
        ],
        jobs,
        pending: vec![PendingAdvert {
            job_id: "adv-1".into(),
            job_name: XSS2.into(),
            home: FAR.into(),
            workers_wanted: 3,
            expires_in_secs: 42,
        }],
        counters: Counters {
            floods_sent: 7,
            floods_forwarded: 31,
            messages_sent: 1000,
            messages_received: 1200,
            workers_started: 5,
        },
    }
}

pub fn detail(summary: JobSummary, lines: usize) -> JobDetail {
    JobDetail {
        workers: vec![
            WorkerInfo {
                node: ME.into(),
                index: 0,
                state: WorkerState::Running,
                exit_code: None,
                ended: None,
            },
            WorkerInfo {
                node: NEAR.into(),
                index: 1,
                state: WorkerState::Failed,
                exit_code: Some(3),
                ended: Some("exited with status 3".into()),
            },
        ],
        log_tail: (0..lines)
            .map(|i| LogLine {
                at_secs: i as f64 * 0.5,
                worker: (i % 3 != 0).then_some((i % 2) as u32),
                text: if i == lines - 1 {
                    format!("last line {XSS1}\r\n{XSS2}")
                } else {
                    format!("line {i}")
                },
            })
            .collect(),
        summary,
    }
}

impl Fake {
    pub fn new() -> Arc<Self> {
        let jobs = vec![
            job("job-1", XSS1, JobPhase::Running, ME),
            job("job-2", XSS2, JobPhase::Scheduling, ME),
            job("job/3?x", "participant job", JobPhase::Running, FAR),
        ];
        let mut details = HashMap::new();
        details.insert("job-1".to_string(), detail(jobs[0].clone(), 500));
        details.insert("job-2".to_string(), detail(jobs[1].clone(), 0));
        details.insert("job/3?x".to_string(), detail(jobs[2].clone(), 3));
        let far_jobs = vec![job("far-job", "far's own job", JobPhase::Running, FAR)];
        let mut far_details = HashMap::new();
        far_details.insert("far-job".to_string(), detail(far_jobs[0].clone(), 5));
        let mut remotes = HashMap::new();
        remotes.insert(
            FAR.to_string(),
            (node_snapshot(FAR, "far-node", far_jobs), far_details),
        );
        let (tx, _) = broadcast::channel(16);
        Arc::new(Self {
            state: Mutex::new(State {
                snap: node_snapshot(ME, "alpha", jobs),
                details,
                remotes,
            }),
            tx,
        })
    }

    /// A job submitted here: it appears and the change is announced.
    pub fn submit(&self, summary: JobSummary) {
        {
            let mut s = self.state.lock().unwrap();
            s.snap.overview.home_jobs.insert(0, summary.id.clone());
            s.details
                .insert(summary.id.clone(), detail(summary.clone(), 1));
            s.snap.jobs.insert(0, summary);
        }
        let _ = self.tx.send(Change::Jobs);
    }
}

impl StatusSource for Fake {
    fn overview(&self) -> NodeOverview {
        self.state.lock().unwrap().snap.overview.clone()
    }
    fn peers(&self) -> Vec<PeerInfo> {
        self.state.lock().unwrap().snap.peers.clone()
    }
    fn jobs(&self) -> Vec<JobSummary> {
        self.state.lock().unwrap().snap.jobs.clone()
    }
    fn job(&self, id: &str) -> Option<JobDetail> {
        self.state.lock().unwrap().details.get(id).cloned()
    }
    fn pending(&self) -> Vec<PendingAdvert> {
        self.state.lock().unwrap().snap.pending.clone()
    }
    fn counters(&self) -> Counters {
        self.state.lock().unwrap().snap.counters
    }
    fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.tx.subscribe()
    }
    fn remote(&self, peer: &str) -> BoxFuture<'static, Result<NodeSnapshot, RemoteError>> {
        let s = self.state.lock().unwrap();
        let answer = if peer == ME {
            Ok(snapshot(self))
        } else if peer == GONE {
            Err(RemoteError::Unreachable("no route".into()))
        } else {
            s.remotes
                .get(peer)
                .map(|(snap, _)| snap.clone())
                .ok_or(RemoteError::UnknownPeer)
        };
        async move { answer }.boxed()
    }
    fn remote_job(
        &self,
        peer: &str,
        job: &str,
    ) -> BoxFuture<'static, Result<Option<JobDetail>, RemoteError>> {
        let s = self.state.lock().unwrap();
        let answer = if peer == GONE {
            Err(RemoteError::Unreachable("no route".into()))
        } else {
            s.remotes
                .get(peer)
                .map(|(_, jobs)| jobs.get(job).cloned())
                .ok_or(RemoteError::UnknownPeer)
        };
        async move { answer }.boxed()
    }
    fn summary(&self) -> NodeSummary {
        let s = self.state.lock().unwrap();
        summary_of(&s.snap)
    }
    fn remote_summary(&self, peer: &str) -> BoxFuture<'static, Result<NodeSummary, RemoteError>> {
        let s = self.state.lock().unwrap();
        let answer = if peer == GONE {
            Err(RemoteError::Unreachable("no route".into()))
        } else if peer == NEAR {
            Ok(NodeSummary {
                name: XSS1.into(),
                site: None,
                offered_cores: 2,
                used_cores: 1,
                workers_running: 1,
                jobs: vec![NodeJob {
                    id: "job-1".into(),
                    name: XSS1.into(),
                    home: ME.into(),
                    ranks: 1,
                }],
            })
        } else {
            s.remotes
                .get(peer)
                .map(|(snap, _)| summary_of(snap))
                .ok_or(RemoteError::UnknownPeer)
        };
        async move { answer }.boxed()
    }
}

/// What a node of the fake says about itself: its cores, and one worker of
/// each running job it lists.
pub fn summary_of(snap: &NodeSnapshot) -> NodeSummary {
    NodeSummary {
        name: snap.overview.name.clone(),
        site: None,
        offered_cores: snap.overview.offered.cores,
        used_cores: snap.overview.in_use.cores,
        workers_running: snap.overview.workers_running,
        jobs: snap
            .jobs
            .iter()
            .filter(|j| j.phase == JobPhase::Running)
            .map(|j| NodeJob {
                id: j.id.clone(),
                name: j.name.clone(),
                home: j.home.clone(),
                ranks: 1,
            })
            .collect(),
    }
}

/// Serves the fake on an ephemeral loopback port.
pub async fn start(fake: Arc<Fake>) -> SocketAddr {
    let config = WebConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..WebConfig::default()
    };
    zorilla_webui::serve(config, fake).await.expect("serve")
}

//! Conversions between the status page's model (`zorilla_webui::model`)
//! and the wire's remote-view types ([`crate::wire::view`]), both ways: the
//! one module that names both.
//!
//! Towards the wire, every list and text is cut to the wire's maxima (what
//! the pages show is within them already; the cut keeps the bound should
//! the pages' own maxima grow). From the wire, the values were checked by
//! `Snapshot::check` or `JobDetail::check` (`crate::wire::view`) first.

use zorilla_webui::model as m;

use super::convert::cut;
use crate::wire::view::{self as w, MAX_TEXT_BYTES};

// What the pages show fits the wire's maxima (the cuts below only hold
// the bound should the pages' own maxima grow past them).
const _: () = {
    assert!(super::MAX_JOBS <= w::MAX_JOBS);
    assert!(super::poll::MAX_PEERS <= w::MAX_PEERS);
    assert!(zorilla_webui::MAX_LOG_LINES <= w::MAX_LOG_LINES);
    assert!(zorilla_webui::MAX_LOG_LINE_BYTES + "stderr: ".len() <= w::MAX_TEXT_BYTES);
};

fn text(s: String) -> String {
    cut(s, MAX_TEXT_BYTES)
}

fn texts(list: Vec<String>, max: usize) -> Vec<String> {
    list.into_iter().take(max).map(text).collect()
}

fn list<A, B: From<A>>(list: Vec<A>, max: usize) -> Vec<B> {
    list.into_iter().take(max).map(B::from).collect()
}

impl From<m::Resources> for w::Resources {
    fn from(r: m::Resources) -> Self {
        w::Resources {
            cores: r.cores,
            memory_bytes: r.memory_bytes,
            disk_bytes: r.disk_bytes,
        }
    }
}

impl From<w::Resources> for m::Resources {
    fn from(r: w::Resources) -> Self {
        m::Resources {
            cores: r.cores,
            memory_bytes: r.memory_bytes,
            disk_bytes: r.disk_bytes,
        }
    }
}

impl From<m::NodeOverview> for w::Overview {
    fn from(o: m::NodeOverview) -> Self {
        w::Overview {
            node_id: text(o.node_id),
            name: text(o.name),
            version: text(o.version),
            uptime_secs: o.uptime_secs,
            network: text(o.network),
            listen_addresses: texts(o.listen_addresses, w::MAX_LISTEN_ADDRESSES),
            offered: o.offered.into(),
            cpu_speed: o.cpu_speed.min(zorilla_core::limits::MAX_SPEED),
            in_use: o.in_use.into(),
            workers_running: o.workers_running,
            home_jobs: texts(o.home_jobs, w::MAX_JOBS),
            problem: o.problem.map(text),
        }
    }
}

impl From<w::Overview> for m::NodeOverview {
    fn from(o: w::Overview) -> Self {
        m::NodeOverview {
            node_id: o.node_id,
            name: o.name,
            version: o.version,
            uptime_secs: o.uptime_secs,
            network: o.network,
            listen_addresses: o.listen_addresses,
            offered: o.offered.into(),
            cpu_speed: o.cpu_speed,
            // Not on the wire: for the node's own page.
            cpu_speed_source: None,
            in_use: o.in_use.into(),
            workers_running: o.workers_running,
            home_jobs: o.home_jobs,
            problem: o.problem,
            // Not on the wire: what a node believes of its own addresses
            // is for its own page.
            addresses: Vec::new(),
            position: None,
            grid: None,
            // Not on the wire: a node's balances with others are its own.
            creditors: Vec::new(),
            avoided: Vec::new(),
        }
    }
}

impl From<m::LinkKind> for w::Link {
    fn from(l: m::LinkKind) -> Self {
        match l {
            m::LinkKind::Near => w::Link::Near,
            m::LinkKind::Far => w::Link::Far,
            m::LinkKind::None => w::Link::None,
        }
    }
}

impl From<w::Link> for m::LinkKind {
    fn from(l: w::Link) -> Self {
        match l {
            w::Link::Near => m::LinkKind::Near,
            w::Link::Far => m::LinkKind::Far,
            w::Link::None => m::LinkKind::None,
        }
    }
}

impl From<m::PeerInfo> for w::Peer {
    fn from(p: m::PeerInfo) -> Self {
        w::Peer {
            peer_id: text(p.peer_id),
            name: p.name.map(text),
            rtt_ms: p.rtt_ms,
            link: p.link.into(),
            connected: p.connected,
            coordinates: p.coordinates.map(|mut c| {
                c.truncate(w::MAX_COORDINATES);
                c
            }),
        }
    }
}

impl From<w::Peer> for m::PeerInfo {
    fn from(p: w::Peer) -> Self {
        m::PeerInfo {
            peer_id: p.peer_id,
            name: p.name,
            rtt_ms: p.rtt_ms,
            link: p.link.into(),
            connected: p.connected,
            coordinates: p.coordinates,
        }
    }
}

impl From<m::JobPhase> for w::Phase {
    fn from(p: m::JobPhase) -> Self {
        match p {
            m::JobPhase::Scheduling => w::Phase::Scheduling,
            m::JobPhase::Running => w::Phase::Running,
            m::JobPhase::Completed => w::Phase::Completed,
            m::JobPhase::Cancelled => w::Phase::Cancelled,
            m::JobPhase::Failed => w::Phase::Failed,
        }
    }
}

impl From<w::Phase> for m::JobPhase {
    fn from(p: w::Phase) -> Self {
        match p {
            w::Phase::Scheduling => m::JobPhase::Scheduling,
            w::Phase::Running => m::JobPhase::Running,
            w::Phase::Completed => m::JobPhase::Completed,
            w::Phase::Cancelled => m::JobPhase::Cancelled,
            w::Phase::Failed => m::JobPhase::Failed,
        }
    }
}

impl From<m::JobRole> for w::Role {
    fn from(r: m::JobRole) -> Self {
        match r {
            m::JobRole::Home => w::Role::Home,
            m::JobRole::Participant => w::Role::Participant,
        }
    }
}

impl From<w::Role> for m::JobRole {
    fn from(r: w::Role) -> Self {
        match r {
            w::Role::Home => m::JobRole::Home,
            w::Role::Participant => m::JobRole::Participant,
        }
    }
}

impl From<m::JobSummary> for w::JobSummary {
    fn from(j: m::JobSummary) -> Self {
        w::JobSummary {
            id: text(j.id),
            name: text(j.name),
            role: j.role.into(),
            phase: j.phase.into(),
            workers_joined: j.workers_joined,
            workers_needed: j.workers_needed,
            home: text(j.home),
            owner: j.owner.map(text),
            strategy: text(j.strategy),
            flood_radius: j.flood_radius,
            age_secs: j.age_secs,
            pending_reason: j.pending_reason.map(text),
        }
    }
}

impl From<w::JobSummary> for m::JobSummary {
    fn from(j: w::JobSummary) -> Self {
        m::JobSummary {
            id: j.id,
            name: j.name,
            role: j.role.into(),
            phase: j.phase.into(),
            workers_joined: j.workers_joined,
            workers_needed: j.workers_needed,
            home: j.home,
            owner: j.owner,
            strategy: j.strategy,
            flood_radius: j.flood_radius,
            age_secs: j.age_secs,
            pending_reason: j.pending_reason,
        }
    }
}

impl From<m::WorkerState> for w::WorkerState {
    fn from(s: m::WorkerState) -> Self {
        match s {
            m::WorkerState::Starting => w::WorkerState::Starting,
            m::WorkerState::Running => w::WorkerState::Running,
            m::WorkerState::Exited => w::WorkerState::Exited,
            m::WorkerState::Failed => w::WorkerState::Failed,
            m::WorkerState::Lost => w::WorkerState::Lost,
        }
    }
}

impl From<w::WorkerState> for m::WorkerState {
    fn from(s: w::WorkerState) -> Self {
        match s {
            w::WorkerState::Starting => m::WorkerState::Starting,
            w::WorkerState::Running => m::WorkerState::Running,
            w::WorkerState::Exited => m::WorkerState::Exited,
            w::WorkerState::Failed => m::WorkerState::Failed,
            w::WorkerState::Lost => m::WorkerState::Lost,
        }
    }
}

impl From<m::WorkerInfo> for w::Worker {
    fn from(x: m::WorkerInfo) -> Self {
        w::Worker {
            node: text(x.node),
            index: x.index,
            state: x.state.into(),
            exit_code: x.exit_code,
            ended: x.ended.map(text),
        }
    }
}

impl From<w::Worker> for m::WorkerInfo {
    fn from(x: w::Worker) -> Self {
        m::WorkerInfo {
            node: x.node,
            index: x.index,
            state: x.state.into(),
            exit_code: x.exit_code,
            ended: x.ended,
        }
    }
}

impl From<m::LogLine> for w::LogLine {
    fn from(l: m::LogLine) -> Self {
        w::LogLine {
            at_secs: l.at_secs,
            worker: l.worker,
            text: text(l.text),
        }
    }
}

impl From<w::LogLine> for m::LogLine {
    fn from(l: w::LogLine) -> Self {
        m::LogLine {
            at_secs: l.at_secs,
            worker: l.worker,
            text: l.text,
        }
    }
}

impl From<m::JobDetail> for w::JobDetail {
    fn from(j: m::JobDetail) -> Self {
        // The newest lines are the ones kept.
        let skip = j.log_tail.len().saturating_sub(w::MAX_LOG_LINES);
        w::JobDetail {
            summary: j.summary.into(),
            workers: list(j.workers, w::MAX_WORKERS),
            log_tail: j.log_tail.into_iter().skip(skip).map(Into::into).collect(),
        }
    }
}

impl From<w::JobDetail> for m::JobDetail {
    fn from(j: w::JobDetail) -> Self {
        m::JobDetail {
            summary: j.summary.into(),
            workers: list(j.workers, usize::MAX),
            log_tail: list(j.log_tail, usize::MAX),
        }
    }
}

impl From<m::PendingAdvert> for w::Advert {
    fn from(a: m::PendingAdvert) -> Self {
        w::Advert {
            job_id: text(a.job_id),
            job_name: text(a.job_name),
            home: text(a.home),
            workers_wanted: a.workers_wanted,
            expires_in_secs: a.expires_in_secs,
        }
    }
}

impl From<w::Advert> for m::PendingAdvert {
    fn from(a: w::Advert) -> Self {
        m::PendingAdvert {
            job_id: a.job_id,
            job_name: a.job_name,
            home: a.home,
            workers_wanted: a.workers_wanted,
            expires_in_secs: a.expires_in_secs,
        }
    }
}

impl From<m::Counters> for w::Counters {
    fn from(c: m::Counters) -> Self {
        w::Counters {
            floods_sent: c.floods_sent,
            floods_forwarded: c.floods_forwarded,
            messages_sent: c.messages_sent,
            messages_received: c.messages_received,
            workers_started: c.workers_started,
        }
    }
}

impl From<w::Counters> for m::Counters {
    fn from(c: w::Counters) -> Self {
        m::Counters {
            floods_sent: c.floods_sent,
            floods_forwarded: c.floods_forwarded,
            messages_sent: c.messages_sent,
            messages_received: c.messages_received,
            workers_started: c.workers_started,
        }
    }
}

impl From<m::NodeSnapshot> for w::Snapshot {
    fn from(s: m::NodeSnapshot) -> Self {
        w::Snapshot {
            overview: s.overview.into(),
            peers: list(s.peers, w::MAX_PEERS),
            jobs: list(s.jobs, w::MAX_JOBS),
            pending: list(s.pending, w::MAX_PENDING),
            counters: s.counters.into(),
        }
    }
}

impl From<w::Snapshot> for m::NodeSnapshot {
    fn from(s: w::Snapshot) -> Self {
        m::NodeSnapshot {
            overview: s.overview.into(),
            peers: list(s.peers, usize::MAX),
            jobs: list(s.jobs, usize::MAX),
            pending: list(s.pending, usize::MAX),
            counters: s.counters.into(),
        }
    }
}

impl From<m::NodeSummary> for w::Summary {
    fn from(s: m::NodeSummary) -> Self {
        let short = |t: String| cut(t, w::MAX_SUMMARY_TEXT_BYTES);
        let id = |t: String| cut(t, w::MAX_SUMMARY_ID_BYTES);
        w::Summary {
            name: short(s.name),
            site: s.site.map(short),
            offered_cores: s.offered_cores,
            used_cores: s.used_cores.min(s.offered_cores),
            workers_running: s.workers_running,
            jobs: s
                .jobs
                .into_iter()
                .take(w::MAX_SUMMARY_JOBS)
                .map(|j| w::SummaryJob {
                    id: id(j.id),
                    name: short(j.name),
                    home: id(j.home),
                    ranks: j.ranks.min(w::MAX_WORKERS as u32),
                })
                .collect(),
        }
    }
}

impl From<w::Summary> for m::NodeSummary {
    fn from(s: w::Summary) -> Self {
        m::NodeSummary {
            name: s.name,
            site: s.site,
            offered_cores: s.offered_cores,
            used_cores: s.used_cores,
            workers_running: s.workers_running,
            jobs: s
                .jobs
                .into_iter()
                .map(|j| m::NodeJob {
                    id: j.id,
                    name: j.name,
                    home: j.home,
                    ranks: j.ranks,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::encode;

    fn snapshot() -> m::NodeSnapshot {
        m::NodeSnapshot {
            overview: m::NodeOverview {
                node_id: "12D3KooW".into(),
                name: "n".into(),
                version: "0.1.0".into(),
                uptime_secs: 7,
                network: "grid".into(),
                listen_addresses: vec!["/ip4/127.0.0.1/tcp/1".into()],
                offered: m::Resources {
                    cores: 4,
                    memory_bytes: 1 << 30,
                    disk_bytes: 1 << 31,
                },
                cpu_speed: 1500,
                cpu_speed_source: None,
                in_use: m::Resources::default(),
                workers_running: 1,
                home_jobs: vec!["00000000000000aa".into()],
                problem: Some("disk full".into()),
                addresses: Vec::new(),
                position: None,
                grid: None,
                creditors: Vec::new(),
                avoided: Vec::new(),
            },
            peers: vec![m::PeerInfo {
                peer_id: "p".into(),
                name: None,
                rtt_ms: Some(1.5),
                link: m::LinkKind::Far,
                connected: true,
                coordinates: Some(vec![1.0, 2.0]),
            }],
            jobs: vec![m::JobSummary {
                id: "00000000000000aa".into(),
                name: "00000000 x".into(),
                role: m::JobRole::Participant,
                phase: m::JobPhase::Cancelled,
                workers_joined: 2,
                workers_needed: 3,
                home: "h".into(),
                owner: None,
                strategy: "spread".into(),
                flood_radius: 4,
                age_secs: 5,
                pending_reason: Some("why".into()),
            }],
            pending: vec![m::PendingAdvert {
                job_id: "j".into(),
                job_name: "jn".into(),
                home: "h".into(),
                workers_wanted: 6,
                expires_in_secs: 9,
            }],
            counters: m::Counters {
                floods_sent: 1,
                floods_forwarded: 2,
                messages_sent: 3,
                messages_received: 4,
                workers_started: 5,
            },
        }
    }

    fn job() -> m::JobDetail {
        m::JobDetail {
            summary: snapshot().jobs.remove(0),
            workers: vec![m::WorkerInfo {
                node: "n".into(),
                index: 1,
                state: m::WorkerState::Lost,
                exit_code: Some(-1),
                ended: Some("lost".into()),
            }],
            log_tail: vec![m::LogLine {
                at_secs: 0.5,
                worker: Some(1),
                text: "hello".into(),
            }],
        }
    }

    /// Nodes of the version before the wire had its own types sent the
    /// model itself: the bytes are the same, both ways.
    #[test]
    fn the_wire_encodes_as_the_model_did() {
        let snap = snapshot();
        let wire = w::Snapshot::from(snap.clone());
        assert_eq!(encode(&wire), encode(&snap));
        assert_eq!(m::NodeSnapshot::from(wire), snap);
        let job = job();
        let wire = w::JobDetail::from(job.clone());
        assert_eq!(encode(&wire), encode(&job));
        assert_eq!(m::JobDetail::from(wire), job);
    }

    /// A view beyond the wire's maxima is cut on the way out, so that the
    /// asking node accepts it.
    #[test]
    fn views_are_cut_to_the_wire_maxima() {
        let mut snap = snapshot();
        snap.jobs = vec![snap.jobs[0].clone(); w::MAX_JOBS + 1];
        snap.peers = vec![snap.peers[0].clone(); w::MAX_PEERS + 1];
        snap.peers[0].coordinates = Some(vec![0.0; w::MAX_COORDINATES + 1]);
        snap.overview.name = "é".repeat(w::MAX_TEXT_BYTES);
        snap.overview.listen_addresses = vec![String::new(); w::MAX_LISTEN_ADDRESSES + 1];
        let wire = w::Snapshot::from(snap);
        assert_eq!(wire.jobs.len(), w::MAX_JOBS);
        assert_eq!(wire.peers.len(), w::MAX_PEERS);
        assert!(wire.overview.name.len() <= w::MAX_TEXT_BYTES);
        assert_eq!(wire.check(), Ok(()));

        let mut job = job();
        job.log_tail = (0..w::MAX_LOG_LINES + 5)
            .map(|i| m::LogLine {
                at_secs: i as f64,
                worker: None,
                text: "x".repeat(w::MAX_TEXT_BYTES + 1),
            })
            .collect();
        let wire = w::JobDetail::from(job);
        assert_eq!(wire.log_tail.len(), w::MAX_LOG_LINES);
        assert_eq!(wire.log_tail[0].at_secs, 5.0, "the newest lines stay");
        assert_eq!(wire.check(), Ok(()));
    }

    /// An answer beyond the maxima is refused with a sentence.
    #[test]
    fn a_view_beyond_the_maxima_is_refused() {
        let mut wire = w::Snapshot::from(snapshot());
        wire.peers = vec![wire.peers[0].clone(); w::MAX_PEERS + 1];
        let why = wire.check().unwrap_err().to_string();
        assert!(why.contains("peers"), "{why}");
        let mut wire = w::Snapshot::from(snapshot());
        wire.jobs[0].name = "x".repeat(w::MAX_TEXT_BYTES + 1);
        assert!(wire.check().is_err());
        for speed in [0, zorilla_core::limits::MAX_SPEED + 1] {
            let mut wire = w::Snapshot::from(snapshot());
            wire.overview.cpu_speed = speed;
            let why = wire.check().unwrap_err().to_string();
            assert!(why.contains("CPU speed"), "{speed}: {why}");
        }
        let mut job = w::JobDetail::from(job());
        job.workers = vec![job.workers[0].clone(); w::MAX_WORKERS + 1];
        let why = job.check().unwrap_err().to_string();
        assert!(why.contains("workers"), "{why}");
    }
}

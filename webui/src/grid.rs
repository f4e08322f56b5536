//! The grid view: the nodes this node knows, grouped by site (or by
//! distance when no node names a site), each with its cores and jobs as it
//! says itself, and the placement of one job drawn on them (`/grid`,
//! `/grid?job=ID`, `/api/grid`).
//!
//! Every node answers for itself only ([`StatusSource::summary`], a few
//! hundred bytes); the view gathers those answers through the overlay
//! ([`StatusSource::remote_summary`]) at a bounded cost, whoever asks for
//! the page and however often:
//! - at most [`GridSettings::max_peers`] peers are asked for one view (the
//!   nodes of the job shown first, then the nearest by RTT), all at once,
//!   each waited for at most [`GridSettings::timeout`];
//! - an answer (or a failure) is kept for [`GridSettings::fresh_for`], and
//!   views gather one at a time, so each peer is asked at most once per
//!   `fresh_for` however many browsers reload or stream the page: a
//!   stranger's requests do not multiply the node's overlay traffic;
//! - the cache holds at most [`MAX_CACHED`] answers.
//!
//! A peer that did not answer is shown with the reason (no answer in time,
//! unreachable, refused answer), never left out; known peers beyond the
//! limit are counted on the page.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::future::join_all;

use crate::model::{
    GridGroup, GridJob, GridNode, GridView, Grouping, NodeSummary, PeerInfo, WorkerState,
};
use crate::source::StatusSource;

/// The most answers the grid view keeps.
pub const MAX_CACHED: usize = 1024;

/// How the grid view asks its peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridSettings {
    /// The most peers asked for one view (0: this node only). Default
    /// [`GridSettings::DEFAULT_MAX_PEERS`], at most
    /// [`GridSettings::MOST_PEERS`].
    pub max_peers: usize,
    /// How long the view waits for the peers' answers (all asked at once).
    pub timeout: Duration,
    /// How long an answer is used before the peer is asked again.
    pub fresh_for: Duration,
}

impl GridSettings {
    /// The default number of peers asked.
    pub const DEFAULT_MAX_PEERS: usize = 32;
    /// The most peers a view may be configured to ask.
    pub const MOST_PEERS: usize = 256;
    /// The default wait for answers.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);
    /// The default time an answer is kept.
    pub const DEFAULT_FRESH_FOR: Duration = Duration::from_secs(5);
}

impl Default for GridSettings {
    fn default() -> Self {
        Self {
            max_peers: Self::DEFAULT_MAX_PEERS,
            timeout: Self::DEFAULT_TIMEOUT,
            fresh_for: Self::DEFAULT_FRESH_FOR,
        }
    }
}

/// One peer's answer as kept: when it was asked, what it said or why not.
struct Cached {
    at: Instant,
    answer: Result<NodeSummary, String>,
}

/// Gathers grid views: the bound on peers asked, the one timeout, the
/// cache. One per web server.
pub(crate) struct Gatherer {
    settings: GridSettings,
    /// Held while a view gathers, so that views gather one at a time and
    /// the second finds the first's answers.
    cache: tokio::sync::Mutex<BTreeMap<String, Cached>>,
}

impl Gatherer {
    pub(crate) fn new(mut settings: GridSettings) -> Self {
        settings.max_peers = settings.max_peers.min(GridSettings::MOST_PEERS);
        Self {
            settings,
            cache: tokio::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// The grid as `source` sees it now, with the placement of `job`.
    pub(crate) async fn view(&self, source: &dyn StatusSource, job: Option<&str>) -> GridView {
        self.view_at(source, job, Instant::now()).await
    }

    /// [`Gatherer::view`] at time `now`.
    pub(crate) async fn view_at(
        &self,
        source: &dyn StatusSource,
        job: Option<&str>,
        now: Instant,
    ) -> GridView {
        let me = source.overview().node_id;
        let mine = source.summary();
        let peers = source.peers();
        let detail = job.and_then(|id| source.job(id));
        // Where the job's workers are, by the record this node holds.
        let mut placed: BTreeMap<String, u32> = BTreeMap::new();
        if let Some(detail) = &detail {
            for w in detail
                .workers
                .iter()
                .filter(|w| w.state != WorkerState::Lost)
            {
                *placed.entry(w.node.clone()).or_default() += 1;
            }
        }
        let first: Vec<String> = placed.keys().cloned().collect();
        let plan = plan(&me, &peers, &first, self.settings.max_peers);
        let answers = self.ask(source, &plan, now).await;
        let mut nodes = vec![GridNode {
            node_id: me.clone(),
            this_node: true,
            rtt_ms: None,
            summary: Some(mine),
            no_answer: None,
            job_ranks: 0,
            job_home: false,
        }];
        let rtt = |id: &str| {
            peers
                .iter()
                .find(|p| p.peer_id == id)
                .and_then(|p| p.rtt_ms)
        };
        for (peer, answer) in &answers {
            let (summary, no_answer) = match answer {
                Ok(s) => (Some(s.clone()), None),
                Err(why) => (None, Some(why.clone())),
            };
            nodes.push(GridNode {
                node_id: peer.clone(),
                this_node: false,
                rtt_ms: rtt(peer),
                summary,
                no_answer,
                job_ranks: 0,
                job_home: false,
            });
        }
        // Nodes of the job beyond the limit: shown, not asked.
        for node in placed.keys() {
            if !nodes.iter().any(|n| &n.node_id == node) {
                nodes.push(GridNode {
                    node_id: node.clone(),
                    this_node: false,
                    rtt_ms: rtt(node),
                    summary: None,
                    no_answer: Some(format!(
                        "not asked: the view asks at most {} peers",
                        self.settings.max_peers
                    )),
                    job_ranks: 0,
                    job_home: false,
                });
            }
        }
        let answered = answers.iter().filter(|(_, a)| a.is_ok()).count();
        let job = job.map(|id| place(id, detail.as_ref(), &placed, &mut nodes));
        let (grouped_by, groups) = group(nodes);
        GridView {
            grouped_by,
            groups,
            known_peers: peers.iter().filter(|p| p.peer_id != me).count() as u32,
            limit: self.settings.max_peers as u32,
            asked: answers.len() as u32,
            answered: answered as u32,
            job,
        }
    }

    /// The answers of the peers of `plan`, asking those without a fresh
    /// one (all at once, with one timeout).
    async fn ask(
        &self,
        source: &dyn StatusSource,
        plan: &[String],
        now: Instant,
    ) -> Vec<(String, Result<NodeSummary, String>)> {
        let mut cache = self.cache.lock().await;
        let fresh_for = self.settings.fresh_for;
        let fresh = |c: &Cached| now.saturating_duration_since(c.at) < fresh_for;
        let stale: Vec<&String> = plan
            .iter()
            .filter(|p| !cache.get(*p).is_some_and(fresh))
            .collect();
        let timeout = self.settings.timeout;
        let asks = stale.iter().map(|peer| {
            let answer = source.remote_summary(peer);
            async move {
                match tokio::time::timeout(timeout, answer).await {
                    Ok(Ok(summary)) => Ok(summary),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!(
                        "no answer within {} s",
                        timeout.as_secs_f64().max(0.001)
                    )),
                }
            }
        });
        let answers = join_all(asks).await;
        for (peer, answer) in stale.into_iter().zip(answers) {
            cache.insert(peer.clone(), Cached { at: now, answer });
        }
        let planned: BTreeSet<&String> = plan.iter().collect();
        cache.retain(|peer, c| planned.contains(peer) || fresh(c));
        while cache.len() > MAX_CACHED {
            let oldest = cache
                .iter()
                .filter(|(peer, _)| !planned.contains(peer))
                .min_by_key(|(_, c)| c.at)
                .map(|(peer, _)| peer.clone());
            match oldest {
                Some(peer) => cache.remove(&peer),
                None => break,
            };
        }
        plan.iter()
            .filter_map(|p| cache.get(p).map(|c| (p.clone(), c.answer.clone())))
            .collect()
    }
}

/// Whom a view asks: the nodes in `first` (the job's), then the known
/// peers nearest first (unmeasured last, then by id), never `me`, at most
/// `max`.
pub(crate) fn plan(me: &str, peers: &[PeerInfo], first: &[String], max: usize) -> Vec<String> {
    let mut by_rtt: Vec<&PeerInfo> = peers.iter().collect();
    by_rtt.sort_by(|a, b| {
        a.rtt_ms
            .unwrap_or(f64::MAX)
            .total_cmp(&b.rtt_ms.unwrap_or(f64::MAX))
            .then(a.peer_id.cmp(&b.peer_id))
    });
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for id in first
        .iter()
        .map(String::as_str)
        .chain(by_rtt.iter().map(|p| p.peer_id.as_str()))
    {
        if out.len() >= max {
            break;
        }
        if id != me && seen.insert(id) {
            out.push(id.to_string());
        }
    }
    out
}

/// Marks where job `id` runs on `nodes` and describes it: by the job's
/// record here (`detail`, counted into `placed`) if this node knows the
/// job, else by what the nodes said they run.
fn place(
    id: &str,
    detail: Option<&crate::model::JobDetail>,
    placed: &BTreeMap<String, u32>,
    nodes: &mut [GridNode],
) -> GridJob {
    let said = |n: &GridNode| {
        n.summary
            .as_ref()
            .and_then(|s| s.jobs.iter().find(|j| j.id == id))
            .cloned()
    };
    let home = match detail {
        Some(d) => Some(d.summary.home.clone()),
        None => nodes.iter().find_map(|n| said(n).map(|j| j.home)),
    };
    let name = match detail {
        Some(d) => d.summary.name.clone(),
        None => nodes
            .iter()
            .find_map(|n| said(n).map(|j| j.name))
            .unwrap_or_default(),
    };
    for n in nodes.iter_mut() {
        n.job_ranks = match detail {
            Some(_) => placed.get(&n.node_id).copied().unwrap_or(0),
            None => said(n).map_or(0, |j| j.ranks),
        };
        n.job_home = home.as_deref() == Some(n.node_id.as_str());
    }
    let source = match detail {
        Some(d) if d.summary.role == crate::model::JobRole::Home => {
            "the job's record on this node, its home"
        }
        Some(_) => "this node's copy of the job's placement (it runs workers of the job)",
        None => "what the nodes asked say they run now",
    };
    GridJob {
        id: id.to_string(),
        name,
        home,
        ranks: nodes.iter().map(|n| n.job_ranks).sum(),
        nodes: nodes.iter().filter(|n| n.job_ranks > 0).count() as u32,
        source: source.into(),
    }
}

/// The distance classes, in order.
const CLASSES: [&str; 5] = [
    "below 1 ms",
    "1 to 10 ms",
    "10 to 50 ms",
    "over 50 ms",
    "RTT not measured",
];

fn distance_class(node: &GridNode) -> usize {
    match node.rtt_ms {
        _ if node.this_node => 0,
        Some(ms) if ms < 1.0 => 0,
        Some(ms) if ms < 10.0 => 1,
        Some(ms) if ms < 50.0 => 2,
        Some(ms) if ms.is_finite() => 3,
        _ => 4,
    }
}

/// Groups the nodes: by site if any node says it has one, else by
/// distance class. This node's group first, then by distance; nearest
/// first within a group.
fn group(nodes: Vec<GridNode>) -> (Grouping, Vec<GridGroup>) {
    let by_site = nodes
        .iter()
        .any(|n| n.summary.as_ref().is_some_and(|s| s.site.is_some()));
    // (order key, label) -> nodes
    let mut groups: BTreeMap<String, (f64, Vec<GridNode>)> = BTreeMap::new();
    for node in nodes {
        let (label, key) = if by_site {
            let label = match &node.summary {
                Some(s) => s.site.clone().unwrap_or_else(|| "no site given".into()),
                None => "site not known (no answer)".into(),
            };
            (label, 0.0)
        } else {
            let class = distance_class(&node);
            (CLASSES[class].to_string(), class as f64)
        };
        let key = if node.this_node {
            f64::NEG_INFINITY
        } else if by_site {
            node.rtt_ms.unwrap_or(f64::MAX)
        } else {
            key
        };
        let entry = groups.entry(label).or_insert((f64::MAX, Vec::new()));
        entry.0 = entry.0.min(key);
        entry.1.push(node);
    }
    let mut groups: Vec<(f64, GridGroup)> = groups
        .into_iter()
        .map(|(label, (key, mut nodes))| {
            nodes.sort_by(|a, b| {
                b.this_node
                    .cmp(&a.this_node)
                    .then(
                        a.rtt_ms
                            .unwrap_or(f64::MAX)
                            .total_cmp(&b.rtt_ms.unwrap_or(f64::MAX)),
                    )
                    .then(a.node_id.cmp(&b.node_id))
            });
            (key, GridGroup { label, nodes })
        })
        .collect();
    groups.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.label.cmp(&b.1.label)));
    let grouping = if by_site {
        Grouping::Site
    } else {
        Grouping::Distance
    };
    (grouping, groups.into_iter().map(|(_, g)| g).collect())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::FutureExt as _;
    use futures::future::BoxFuture;
    use tokio::sync::broadcast;

    use super::*;
    use crate::model::*;
    use crate::source::{Change, RemoteError};

    /// A node with `peers` peers at 1, 2, ... ms; every peer answers but
    /// `silent`, which never does; counts the questions.
    struct Counting {
        peers: Vec<PeerInfo>,
        silent: Option<String>,
        asked: Arc<AtomicUsize>,
    }

    fn id(i: usize) -> String {
        format!("peer-{i:03}")
    }

    impl Counting {
        fn new(n: usize) -> Self {
            Self {
                peers: (0..n)
                    .map(|i| PeerInfo {
                        peer_id: id(i),
                        name: None,
                        // Listed farthest first: the plan sorts.
                        rtt_ms: Some((n - i) as f64),
                        link: LinkKind::Near,
                        connected: true,
                        coordinates: None,
                    })
                    .collect(),
                silent: None,
                asked: Arc::default(),
            }
        }
    }

    impl StatusSource for Counting {
        fn overview(&self) -> NodeOverview {
            NodeOverview {
                node_id: "me".into(),
                ..NodeOverview::default()
            }
        }
        fn peers(&self) -> Vec<PeerInfo> {
            self.peers.clone()
        }
        fn jobs(&self) -> Vec<JobSummary> {
            Vec::new()
        }
        fn job(&self, _: &str) -> Option<JobDetail> {
            None
        }
        fn pending(&self) -> Vec<PendingAdvert> {
            Vec::new()
        }
        fn counters(&self) -> Counters {
            Counters::default()
        }
        fn subscribe(&self) -> broadcast::Receiver<Change> {
            broadcast::channel(1).1
        }
        fn remote(&self, _: &str) -> BoxFuture<'static, Result<NodeSnapshot, RemoteError>> {
            async { Err(RemoteError::UnknownPeer) }.boxed()
        }
        fn remote_job(
            &self,
            _: &str,
            _: &str,
        ) -> BoxFuture<'static, Result<Option<JobDetail>, RemoteError>> {
            async { Err(RemoteError::UnknownPeer) }.boxed()
        }
        fn summary(&self) -> NodeSummary {
            NodeSummary {
                name: "me".into(),
                offered_cores: 4,
                ..NodeSummary::default()
            }
        }
        fn remote_summary(
            &self,
            peer: &str,
        ) -> BoxFuture<'static, Result<NodeSummary, RemoteError>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            if self.silent.as_deref() == Some(peer) {
                return futures::future::pending().boxed();
            }
            let summary = NodeSummary {
                name: peer.to_string(),
                offered_cores: 2,
                used_cores: 1,
                ..NodeSummary::default()
            };
            async move { Ok(summary) }.boxed()
        }
    }

    fn settings() -> GridSettings {
        GridSettings {
            max_peers: 32,
            timeout: Duration::from_millis(200),
            fresh_for: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn a_view_asks_at_most_the_limit_the_nearest_first() {
        let source = Counting::new(40);
        let gatherer = Gatherer::new(settings());
        let view = gatherer.view_at(&source, None, Instant::now()).await;
        assert_eq!(source.asked.load(Ordering::SeqCst), 32);
        assert_eq!((view.asked, view.answered), (32, 32));
        assert_eq!((view.known_peers, view.limit), (40, 32));
        // The nearest 32: those at 1..=32 ms (ids 8..40).
        let shown: BTreeSet<String> = view
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .filter(|n| !n.this_node)
            .map(|n| n.node_id.clone())
            .collect();
        assert_eq!(shown, (8..40).map(id).collect());
        assert_eq!(view.grouped_by, Grouping::Distance);
        assert_eq!(view.groups[0].nodes[0].node_id, "me");
    }

    #[tokio::test]
    async fn answers_are_kept_so_reloads_ask_no_one_again() {
        let source = Arc::new(Counting::new(40));
        let gatherer = Arc::new(Gatherer::new(settings()));
        let t0 = Instant::now();
        // Ten browsers at once, then ten reloads within `fresh_for`.
        let views = (0..10).map(|_| gatherer.view_at(source.as_ref(), None, t0));
        join_all(views).await;
        assert_eq!(source.asked.load(Ordering::SeqCst), 32);
        for i in 0..10 {
            let at = t0 + Duration::from_millis(400 * i);
            gatherer.view_at(source.as_ref(), None, at).await;
        }
        assert_eq!(source.asked.load(Ordering::SeqCst), 32);
        // Once stale, asked again: once each.
        let later = t0 + Duration::from_secs(6);
        gatherer.view_at(source.as_ref(), None, later).await;
        gatherer.view_at(source.as_ref(), None, later).await;
        assert_eq!(source.asked.load(Ordering::SeqCst), 64);
    }

    #[tokio::test]
    async fn a_silent_peer_is_shown_with_why_within_the_timeout() {
        let mut source = Counting::new(3);
        source.silent = Some(id(1));
        let gatherer = Gatherer::new(settings());
        let started = Instant::now();
        let view = gatherer.view_at(&source, None, started).await;
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!((view.asked, view.answered), (3, 2));
        let silent = view
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .find(|n| n.node_id == id(1))
            .expect("the silent peer is shown");
        assert_eq!(silent.summary, None);
        assert_eq!(silent.no_answer.as_deref(), Some("no answer within 0.2 s"));
    }

    #[test]
    fn plans_put_the_jobs_nodes_first_and_never_this_node() {
        let source = Counting::new(5);
        let first = vec![id(0), "me".into(), id(0)];
        let plan = plan("me", &source.peers, &first, 3);
        // id(0) is the farthest (5 ms), but runs the job.
        assert_eq!(plan, vec![id(0), id(4), id(3)]);
    }
}

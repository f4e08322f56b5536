//! The status page of real nodes: three `zorilla-node` processes on
//! 127.0.0.1 (ports chosen by the OS), a job with hostile arguments and
//! hostile output submitted through the client library, and the pages and
//! JSON API read over HTTP: the overview, peers, jobs, the job's page with
//! its workers and log tail, the participant's view, a remote view of the
//! home through another node, live updates, metrics, bad requests, and a
//! job that waits for a full grid (why it waits, the adverts held).
//! Every wait polls with a deadline.

#[path = "../../webui/tests/common/client.rs"]
mod http;

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use http::{EventStream, assert_escaped, get};
use serde::de::DeserializeOwned;
use zorilla_node::protocol::{JobRequest, NamedFile};
use zorilla_webui::model::{
    Counters, JobDetail, JobPhase, JobRole, JobSummary, NodeOverview, NodeSnapshot, PeerInfo,
    PendingAdvert, WorkerState,
};

/// What the job's argument and input say: markup that must stay text.
const HOSTILE_ARG: &str = "<script>alert('arg')</script>";
const HOSTILE_NAME: &str = "<img src=x onerror=alert(1)>";

async fn get_json<T: DeserializeOwned>(addr: SocketAddr, path: &str) -> T {
    let r = get(addr, path).await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    assert!(
        r.content_type().starts_with("application/json"),
        "GET {path}"
    );
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("GET {path}: {e}: {}", r.body))
}

/// GETs `path` until `done` holds for its JSON, for at most `within`.
async fn poll_json<T: DeserializeOwned + std::fmt::Debug>(
    addr: SocketAddr,
    path: &str,
    within: Duration,
    what: &str,
    done: impl Fn(&T) -> bool,
) -> T {
    let start = Instant::now();
    loop {
        let value: T = get_json(addr, path).await;
        if done(&value) {
            return value;
        }
        assert!(
            start.elapsed() < within,
            "timed out waiting for {what}; last GET {path}: {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn hello(workers: u32) -> JobRequest {
    JobRequest {
        min_workers: workers,
        max_workers: workers,
        strategy: zorilla_core::advert::Strategy::Spread,
        lifetime_secs: 30,
        args: vec![HOSTILE_ARG.into()],
        ..JobRequest::default()
    }
}

fn name_file() -> Vec<NamedFile> {
    vec![NamedFile {
        name: "name.txt".into(),
        data: HOSTILE_NAME.as_bytes().to_vec(),
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_pages_of_a_real_grid() {
    let started = Instant::now();
    let grid = grid(3, 1);
    let (n0, n1) = (&grid.nodes[0], &grid.nodes[1]);
    wait_for_neighbours(&grid.nodes, 2, Duration::from_secs(30)).await;

    // The address is on the ready line (after the other fields, which the
    // harness read too) and in the state directory.
    let written = std::fs::read_to_string(n0.dir.join("web.addr")).unwrap();
    assert_eq!(written, n0.web.to_string());

    // The overview of the node itself.
    let overview: NodeOverview = get_json(n0.web, "/api/overview").await;
    assert_eq!(overview.node_id, n0.peer);
    assert_eq!(overview.network, grid.network);
    assert_eq!(overview.offered.cores, 1);
    assert_eq!(overview.offered.memory_bytes, 1024 * 1024 * 1024);
    assert!(!overview.version.is_empty());
    assert!(
        overview.listen_addresses.contains(&n0.listen),
        "{overview:?} vs {}",
        n0.listen
    );

    // Its peers, with measured RTTs and the network coordinates they
    // reported, once the poller has seen them.
    let others: Vec<&str> = grid.nodes[1..].iter().map(|n| n.peer.as_str()).collect();
    let peers: Vec<PeerInfo> = poll_json(
        n0.web,
        "/api/peers",
        Duration::from_secs(20),
        "both peers with RTTs and coordinates",
        |peers: &Vec<PeerInfo>| {
            others.iter().all(|o| {
                peers.iter().any(|p| {
                    p.peer_id == *o
                        && p.rtt_ms.is_some_and(|r| r >= 0.0)
                        && p.coordinates.as_ref().is_some_and(|c| c.len() == 3)
                })
            })
        },
    )
    .await;
    assert!(peers.iter().all(|p| p.peer_id != n0.peer), "{peers:?}");
    // And its own coordinate, moved from where every node starts (the
    // origin, knowing nothing) by its samples.
    let overview: NodeOverview = poll_json(
        n0.web,
        "/api/overview",
        Duration::from_secs(20),
        "our own coordinate, learnt",
        |o: &NodeOverview| o.position.as_ref().is_some_and(|p| p.error < 1.0),
    )
    .await;
    let position = overview.position.unwrap();
    assert_eq!(position.coordinates.len(), 3, "{position:?}");
    let page = get(n0.web, "/").await;
    assert!(page.body.contains("Network coordinates"), "{}", page.body);

    // A live stream of the jobs page is open before the job is submitted.
    let mut live = EventStream::open(n0.web, "/events/jobs").await;
    assert_eq!(live.status, 200, "{}", live.head);

    // A job of two workers, one per node (spread): one runs on the home, one
    // elsewhere. Its argument and its input are markup.
    let mut client = n0.client().await;
    let job = client
        .submit(hello(2), wasm("hello"), name_file())
        .await
        .unwrap();
    let id = format!("{job:016x}");
    let update_deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let body = tokio::time::timeout(
            update_deadline.saturating_duration_since(Instant::now()),
            live.next_update(),
        )
        .await
        .expect("a live update naming the new job");
        if body.contains(&id) {
            assert_escaped("live update", &body);
            break;
        }
    }
    let status = wait_completed(&mut client, job, Duration::from_secs(60)).await;
    let worker_nodes: Vec<String> = status.ranks.values().map(|r| r.node.clone()).collect();
    assert_eq!(worker_nodes.len(), 2);
    let participant = worker_nodes
        .iter()
        .find(|n| **n != n0.peer)
        .expect("a worker off the home")
        .clone();

    // The jobs list: the job, completed, its name from its argument.
    let jobs: Vec<JobSummary> = poll_json(
        n0.web,
        "/api/jobs",
        Duration::from_secs(10),
        "the job completed on the jobs list",
        |jobs: &Vec<JobSummary>| {
            jobs.iter()
                .any(|j| j.id == id && j.phase == JobPhase::Completed)
        },
    )
    .await;
    let summary = jobs.iter().find(|j| j.id == id).unwrap();
    assert_eq!(summary.role, JobRole::Home);
    assert_eq!(summary.home, n0.peer);
    assert_eq!(
        (summary.workers_joined, summary.workers_needed),
        (2, 2),
        "{summary:?}"
    );
    assert_eq!(summary.strategy, "spread");
    assert!(summary.name.contains(HOSTILE_ARG), "{summary:?}");
    let overview: NodeOverview = get_json(n0.web, "/api/overview").await;
    assert_eq!(overview.home_jobs, vec![id.clone()]);

    // The job's JSON: both workers exited 0 on their nodes, and the log
    // tail holds the greeting (raw: JSON is data).
    let detail: JobDetail = get_json(n0.web, &format!("/api/jobs/{id}")).await;
    let mut nodes: Vec<&str> = detail.workers.iter().map(|w| w.node.as_str()).collect();
    nodes.sort_unstable();
    let mut expected: Vec<&str> = worker_nodes.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(nodes, expected);
    assert!(
        detail
            .workers
            .iter()
            .all(|w| w.state == WorkerState::Exited && w.exit_code == Some(0)),
        "{detail:?}"
    );
    let greeting = format!("Hello, {HOSTILE_NAME}!");
    let texts: Vec<&str> = detail.log_tail.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(
        texts.iter().filter(|t| **t == greeting).count(),
        2,
        "{texts:?}"
    );
    assert!(texts.contains(&format!("arg 1: {HOSTILE_ARG}").as_str()));
    assert!(
        texts.contains(&"stderr: hello: wrote /outputs/greeting.txt"),
        "{texts:?}"
    );
    assert!(
        detail
            .log_tail
            .iter()
            .all(|l| l.worker.is_some() && l.at_secs >= 0.0 && l.at_secs < 60.0),
        "{detail:?}"
    );

    // The job's page: everything from the job is there, as text.
    let page = get(n0.web, &format!("/jobs/{id}")).await;
    assert_eq!(page.status, 200);
    assert!(page.content_type().starts_with("text/html"));
    assert_escaped("job page", &page.body);
    assert!(
        page.body
            .contains("Hello, &lt;img src=x onerror=alert(1)&gt;!"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("&lt;script&gt;alert('arg')&lt;/script&gt;")
    );
    for path in ["/", "/jobs", "/peers", "/pending"] {
        let r = get(n0.web, path).await;
        assert_eq!(r.status, 200, "{path}");
        assert_escaped(path, &r.body);
    }

    // The node that ran the other worker lists the job as a participant.
    let other = grid.nodes.iter().find(|n| n.peer == participant).unwrap();
    let jobs: Vec<JobSummary> = poll_json(
        other.web,
        "/api/jobs",
        Duration::from_secs(10),
        "the participant's view of the job ending",
        |jobs: &Vec<JobSummary>| {
            jobs.iter()
                .any(|j| j.id == id && j.phase == JobPhase::Completed)
        },
    )
    .await;
    let seen = jobs.iter().find(|j| j.id == id).unwrap();
    assert_eq!(
        (seen.role, seen.home.as_str()),
        (JobRole::Participant, n0.peer.as_str())
    );
    // Its own worker shows as exited once the home acknowledged its end,
    // which waits until a copy holds it: possibly a moment after the home
    // told it the job completed.
    let _: JobDetail = poll_json(
        other.web,
        &format!("/api/jobs/{id}"),
        Duration::from_secs(10),
        "the participant's worker shown as exited",
        |detail: &JobDetail| {
            detail
                .workers
                .iter()
                .any(|w| w.node == participant && w.state == WorkerState::Exited)
        },
    )
    .await;
    let page = get(other.web, &format!("/jobs/{id}")).await;
    assert_eq!(page.status, 200);
    assert_escaped("participant's job page", &page.body);

    // A remote view of the home through n1: the home's snapshot and job,
    // fetched over the overlay.
    let snap: NodeSnapshot = get_json(n1.web, &format!("/api/peers/{}", n0.peer)).await;
    assert_eq!(snap.overview.node_id, n0.peer);
    assert!(snap.jobs.iter().any(|j| j.id == id), "{snap:?}");
    assert!(snap.peers.iter().any(|p| p.peer_id == n1.peer));
    let remote: Option<JobDetail> =
        get_json(n1.web, &format!("/api/peers/{}/jobs/{id}", n0.peer)).await;
    // Another node is not the job's owner: it sees that the job exists,
    // not its arguments, workers or log (issue 28).
    let remote = remote.expect("the home knows the job");
    assert!(
        remote.log_tail.is_empty() && remote.workers.is_empty(),
        "{remote:?}"
    );
    assert_eq!(remote.summary.name, remote.summary.id, "{remote:?}");
    let page = get(n1.web, &format!("/peers/{}/jobs/{id}", n0.peer)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Remote view of"), "{}", page.body);
    assert!(!page.body.contains("Hello, &lt;img"), "{}", page.body);
    assert_escaped("remote job page", &page.body);
    let page = get(n1.web, &format!("/peers/{}", n0.peer)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_escaped("remote overview", &page.body);

    // Metrics. The overlay's counters are sampled every POLL_EVERY (200
    // ms), the jobs' phases are the loop's own: the home's flood may not
    // be counted yet when the job has completed.
    poll_json(
        n0.web,
        "/api/counters",
        Duration::from_secs(10),
        "the home's flood counted",
        |c: &Counters| c.floods_sent >= 1,
    )
    .await;
    let metrics = get(n0.web, "/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.body.contains("zorilla_jobs{phase=\"completed\"} 1"),
        "{}",
        metrics.body
    );
    let here = worker_nodes.iter().filter(|n| **n == n0.peer).count();
    assert!(
        metrics
            .body
            .contains(&format!("zorilla_workers_started_total {here}")),
        "{}",
        metrics.body
    );
    let floods: u64 = metrics
        .body
        .lines()
        .find_map(|l| l.strip_prefix("zorilla_floods_sent_total "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no flood counter in\n{}", metrics.body));
    assert!(floods >= 1, "the home flooded its job's advert");

    // Bad requests get clear errors, quickly, and the node keeps serving.
    for (path, code) in [
        ("/api/jobs/0000000000000000", 404),
        ("/api/jobs/not-a-job", 404),
        ("/api/peers/not-a-peer", 404),
        ("/jobs/%3Cscript%3E", 404),
    ] {
        let r = get(n0.web, path).await;
        assert_eq!(r.status, code, "{path}: {}", r.body);
        assert_escaped(path, &r.body);
    }
    // A well-formed peer id nobody knows: not found, within the timeout.
    let stranger = "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo";
    let asked = Instant::now();
    let r = get(n0.web, &format!("/api/peers/{stranger}")).await;
    assert!(matches!(r.status, 404 | 502), "{}: {}", r.status, r.body);
    assert!(asked.elapsed() < Duration::from_secs(11));
    let overview: NodeOverview = get_json(n0.web, "/api/overview").await;
    assert_eq!(overview.node_id, n0.peer);

    // The pending queue, and why a job waits: idle workers fill the three
    // one-core nodes, so the next job's advert waits at the others.
    let blocker = JobRequest {
        min_workers: 3,
        max_workers: 3,
        strategy: zorilla_core::advert::Strategy::Spread,
        ..JobRequest::default()
    };
    let blocker = client.submit(blocker, wasm("idle"), vec![]).await.unwrap();
    wait_for(
        &mut client,
        blocker,
        Duration::from_secs(30),
        "the grid full",
        |s| s.phase == zorilla_node::protocol::JobPhase::Running && s.ranks.len() == 3,
    )
    .await;
    let waiting = client
        .submit(hello(1), wasm("hello"), name_file())
        .await
        .unwrap();
    let wid = format!("{waiting:016x}");
    poll_json(
        n0.web,
        "/api/jobs",
        Duration::from_secs(10),
        "why the job waits",
        |jobs: &Vec<JobSummary>| {
            jobs.iter().any(|j| {
                j.id == wid
                    && j.phase == JobPhase::Scheduling
                    && j.pending_reason
                        .as_deref()
                        .is_some_and(|r| r.contains("0 of 1 workers granted"))
            })
        },
    )
    .await;
    let held: Vec<PendingAdvert> = poll_json(
        n1.web,
        "/api/pending",
        Duration::from_secs(10),
        "the advert held by a busy node",
        |held: &Vec<PendingAdvert>| held.iter().any(|a| a.job_id == wid),
    )
    .await;
    let advert = held.iter().find(|a| a.job_id == wid).unwrap();
    assert_eq!(advert.home, n0.peer);
    assert_eq!(advert.workers_wanted, 1);
    assert!(advert.expires_in_secs <= 30, "{advert:?}");
    let page = get(n1.web, "/pending").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(&wid), "{}", page.body);
    // Room again: the advert is taken and the job runs.
    client.cancel(blocker).await.unwrap();
    wait_completed(&mut client, waiting, Duration::from_secs(30)).await;
    poll_json(
        n1.web,
        "/api/pending",
        Duration::from_secs(10),
        "the advert gone",
        |held: &Vec<PendingAdvert>| held.iter().all(|a| a.job_id != wid),
    )
    .await;
    println!("status pages of a real grid: {:?}", started.elapsed());
}

/// The grid view of real nodes: four nodes on two sites (named with
/// `--site`), with 1, 2, 3 and 2 cores; a job of three idle workers
/// spread from the first. The first node's grid view lists every node by
/// its site with the cores it offers and uses, and draws the job where
/// the nodes themselves say its workers run, with its home.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grid_view_shows_every_node_by_site_and_where_a_job_runs() {
    use zorilla_webui::model::{GridView, Grouping};
    let dir = tempfile::tempdir().unwrap();
    let network = format!("test-grid-view-{}", std::process::id());
    let sites = ["amsterdam", "amsterdam", "delft", "delft"];
    let cores = [1u32, 2, 3, 2];
    let mut nodes: Vec<TestNode> = Vec::new();
    for i in 0..4 {
        let bootstrap = nodes.first().map(|n| n.listen.clone());
        nodes.push(TestNode::start_with(
            &dir.path().join(format!("n{i}")),
            &network,
            bootstrap.as_deref(),
            cores[i],
            "127.0.0.1",
            &["--site".into(), sites[i].into()],
        ));
    }
    wait_for_neighbours(&nodes, 3, Duration::from_secs(30)).await;
    let home = &nodes[0];
    let mut client = home.client().await;
    let request = JobRequest {
        min_workers: 3,
        max_workers: 3,
        strategy: zorilla_core::advert::Strategy::Spread,
        lifetime_secs: 30,
        ..JobRequest::default()
    };
    let job = client.submit(request, wasm("idle"), vec![]).await.unwrap();
    let id = format!("{job:016x}");
    let path = format!("/api/grid?job={id}");
    // Answers are kept for a few seconds: poll until they show the job.
    let view: GridView = poll_json(
        home.web,
        &path,
        Duration::from_secs(60),
        "every node answering, and the job's three workers on the nodes' own word",
        |v: &GridView| {
            let all = v.groups.iter().flat_map(|g| g.nodes.iter());
            v.answered == 3
                && v.job.as_ref().is_some_and(|j| j.ranks == 3)
                && all
                    .filter_map(|n| n.summary.as_ref())
                    .flat_map(|s| s.jobs.iter())
                    .filter(|j| j.id == id)
                    .map(|j| j.ranks)
                    .sum::<u32>()
                    == 3
        },
    )
    .await;
    assert_eq!(view.grouped_by, Grouping::Site);
    assert_eq!((view.known_peers, view.asked, view.limit), (3, 3, 32));
    let labels: Vec<&str> = view.groups.iter().map(|g| g.label.as_str()).collect();
    assert_eq!(labels, ["amsterdam", "delft"], "this node's site first");
    assert!(view.groups[0].nodes[0].this_node);
    for (i, node) in nodes.iter().enumerate() {
        let group = view
            .groups
            .iter()
            .find(|g| g.nodes.iter().any(|n| n.node_id == node.peer))
            .unwrap_or_else(|| panic!("node {i} is not in the view: {view:?}"));
        assert_eq!(group.label, sites[i]);
        let shown = group.nodes.iter().find(|n| n.node_id == node.peer).unwrap();
        let summary = shown.summary.as_ref().expect("it answered");
        assert_eq!(summary.offered_cores, cores[i], "node {i}");
        assert_eq!(summary.site.as_deref(), Some(sites[i]));
        // What the home placed there is what the node says it runs, each
        // worker on a core of its own.
        let said = summary
            .jobs
            .iter()
            .find(|j| j.id == id)
            .map_or(0, |j| j.ranks);
        assert_eq!(shown.job_ranks, said, "node {i}: {view:?}");
        assert!(said <= 1, "spread: one worker a node");
        assert_eq!(summary.used_cores, said, "node {i}");
        assert_eq!(summary.free_cores(), cores[i] - said, "node {i}");
        assert_eq!(shown.job_home, i == 0);
        if i > 0 {
            assert!(shown.rtt_ms.is_some(), "node {i}: RTT measured");
        }
    }
    let placed = view.job.as_ref().unwrap();
    assert_eq!((placed.ranks, placed.nodes), (3, 3));
    assert_eq!(placed.home.as_deref(), Some(home.peer.as_str()));

    // The page draws the same, the job's nodes marked.
    let r = get(home.web, &format!("/grid?job={id}")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("3 workers on 3 nodes"), "{}", r.body);
    assert_eq!(r.body.matches("<tr class=\"placed\"").count(), 3);
    assert_eq!(
        r.body.matches("<rect class=\"gridnode").count(),
        4,
        "four boxes"
    );
    client.cancel(job).await.unwrap();
}

/// A node given no `cpu_speed` measures its own at its first start, keeps
/// it in its state directory and reads it back at the next; its status
/// page shows the figure and where it came from, and a configured figure
/// wins over the kept one. The figure shown is the one the scheduler's
/// offers carry: both are the daemon's one resolved value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_measures_its_cpu_speed_once_and_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let node_dir = dir.path().join("n0");
    let args = |extra: &[String]| {
        let mut args = TestNode::args(&node_dir, "cpu-speed", None, 1, "127.0.0.1", extra);
        // The harness pins the figure (its nodes share one machine); this
        // test is of the measurement, so that pin goes.
        let at = args.iter().position(|a| a == "--cpu-speed").unwrap();
        args.drain(at..at + 2);
        args
    };
    let overview = |node: &TestNode| {
        let web = node.web;
        async move { get_json::<NodeOverview>(web, "/api/overview").await }
    };

    let node = TestNode::spawn(&node_dir, args(&[]));
    let first = overview(&node).await;
    assert!(
        (1..=zorilla_core::limits::MAX_SPEED).contains(&first.cpu_speed),
        "{first:?}"
    );
    assert_eq!(
        first.cpu_speed_source.as_deref(),
        Some("measured at this start")
    );
    let kept = std::fs::read_to_string(node_dir.join("cpu-speed")).unwrap();
    assert!(
        kept.starts_with(&format!("{} ", first.cpu_speed)),
        "{kept:?}"
    );
    let page = get(node.web, "/").await.body;
    assert!(
        page.contains(&format!(
            "CPU speed {}, measured at this start (",
            first.cpu_speed
        )),
        "{page}"
    );
    drop(node);

    let node = TestNode::spawn(&node_dir, args(&[]));
    let again = overview(&node).await;
    assert_eq!(again.cpu_speed, first.cpu_speed);
    assert_eq!(
        again.cpu_speed_source.as_deref(),
        Some("measured at an earlier start")
    );
    drop(node);

    let node = TestNode::spawn(&node_dir, args(&["--cpu-speed".into(), "4321".into()]));
    let configured = overview(&node).await;
    assert_eq!(configured.cpu_speed, 4321);
    assert_eq!(
        configured.cpu_speed_source.as_deref(),
        Some("configured (cpu_speed)")
    );
}

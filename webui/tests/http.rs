//! HTTP tests of every page and API route over a fake node: status codes,
//! content types, content, escaping of hostile strings, 404s, access rules,
//! live updates over server-sent events.

mod common;

use std::sync::Arc;

use common::*;
use zorilla_webui::model::{
    JobDetail, JobPhase, JobSummary, NodeOverview, PeerInfo, PendingAdvert, Position,
};
use zorilla_webui::{MAX_LOG_LINES, NodeSnapshot, ServeError, WebConfig};

fn html_ok(what: &str, r: &Response) {
    assert_eq!(r.status, 200, "{what}: {}", r.body);
    assert_eq!(r.content_type(), "text/html; charset=utf-8", "{what}");
    assert!(r.body.starts_with("<!DOCTYPE html>"), "{what}");
    assert!(
        r.header("content-security-policy")
            .is_some_and(|c| c.contains("script-src 'self'")),
        "{what}: no CSP"
    );
    assert_eq!(
        r.header("x-content-type-options"),
        Some("nosniff"),
        "{what}"
    );
    assert_escaped(what, &r.body);
}

fn json_ok<T: serde::de::DeserializeOwned>(what: &str, r: &Response) -> T {
    assert_eq!(r.status, 200, "{what}: {}", r.body);
    assert_eq!(r.content_type(), "application/json", "{what}");
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{what}: {e}: {}", r.body))
}

#[tokio::test]
async fn overview_page() {
    let addr = start(Fake::new()).await;
    let r = get(addr, "/").await;
    html_ok("/", &r);
    let b = &r.body;
    for want in [
        "<h1>alpha</h1>",
        ME,
        "1h 2m",
        "testgrid&quot;&gt;&lt;img src=x onerror=alert(2)&gt;",
        "/ip4/127.0.0.1/tcp/4001",
        "16.0 GiB",
        "512.0 MiB",
        "Jobs this node is home to (2)",
        // The favours it owes, the creditor's id escaped.
        "<table id=\"creditors\">",
        "3600 core s",
        "creditor&lt;script&gt;",
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "href=\"/jobs/job-1\"",
        "data-live=\"/events/overview\"",
        "<script src=\"/static/live.js\" defer></script>",
    ] {
        assert!(b.contains(want), "overview lacks {want:?}:\n{b}");
    }
    assert!(b.contains("id=\"workers-running\">2<"), "{b}");
    assert!(
        b.contains("CPU speed 1500, measured at this start ("),
        "{b}"
    );
}

#[tokio::test]
async fn peers_page_with_neighbourhood_picture() {
    let addr = start(Fake::new()).await;
    let r = get(addr, "/peers").await;
    html_ok("/peers", &r);
    let b = &r.body;
    assert!(b.contains("<h1>Peers (3)</h1>"), "{b}");
    assert!(b.contains("<svg id=\"neighbourhood\""), "{b}");
    // One line per linked peer, near and far drawn differently; no line to
    // the peer without a link.
    assert_eq!(b.matches("<line class=\"near\"").count(), 1, "{b}");
    assert_eq!(b.matches("<line class=\"far\"").count(), 1, "{b}");
    assert_eq!(b.matches("<circle class=\"peer ").count(), 3, "{b}");
    assert!(b.contains("4.5 ms") && b.contains("80.0 ms"), "{b}");
    assert!(b.contains(&format!("href=\"/peers/{FAR}\"")), "{b}");
    assert!(b.contains("not connected"), "{b}");
}

#[tokio::test]
async fn network_coordinates_on_the_overview_and_the_peers_page() {
    let addr = start(Fake::new()).await;
    let b = get(addr, "/").await.body;
    assert!(
        b.contains("id=\"position\"><code>12.50, -3.25, 0.50</code> ms, relative error 0.25<"),
        "{b}"
    );
    let b = get(addr, "/peers").await.body;
    assert!(b.contains("<th>Coordinates</th>"), "{b}");
    assert!(b.contains("<code>1.00, 2.00, 0.30</code>"), "{b}");
    let o: NodeOverview = json_ok("/api/overview", &get(addr, "/api/overview").await);
    assert_eq!(
        o.position,
        Some(Position {
            coordinates: vec![12.5, -3.25, 0.5],
            error: 0.25
        })
    );
    let p: Vec<PeerInfo> = json_ok("/api/peers", &get(addr, "/api/peers").await);
    let near = p.iter().find(|p| p.peer_id == NEAR).unwrap();
    assert_eq!(near.coordinates, Some(vec![1.0, 2.0, 0.3]));
}

#[tokio::test]
async fn jobs_page() {
    let addr = start(Fake::new()).await;
    let r = get(addr, "/jobs").await;
    html_ok("/jobs", &r);
    let b = &r.body;
    assert!(b.contains("<h1>Jobs (3)</h1>"), "{b}");
    assert!(b.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{b}");
    assert!(
        b.contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"),
        "{b}"
    );
    assert!(b.contains("2 floods so far, radius 3"), "{b}");
    assert!(b.contains("2/4"), "{b}");
    // An id with '/' and '?' is percent-encoded in links.
    assert!(b.contains("href=\"/jobs/job%2F3%3Fx\""), "{b}");
    assert!(b.contains("(participant)"), "{b}");
}

#[tokio::test]
async fn job_page_workers_and_bounded_log_tail() {
    let addr = start(Fake::new()).await;
    let r = get(addr, "/jobs/job-1").await;
    html_ok("/jobs/job-1", &r);
    let b = &r.body;
    assert!(b.contains("id=\"workers\""), "{b}");
    assert!(
        b.contains("this node") && b.contains("worker failed"),
        "{b}"
    );
    assert!(
        b.contains(&format!("Log (last {MAX_LOG_LINES} lines)")),
        "{b}"
    );
    assert!(b.contains("line 499") || b.contains("last line"), "{b}");
    assert!(
        b.contains("line 300") && !b.contains("line 299\n"),
        "only the tail: {b}"
    );
    assert!(b.contains("last line &lt;script&gt;"), "{b}");
    assert!(b.contains("data-live=\"/events/jobs/job-1\""), "{b}");

    let r = get(addr, "/jobs/job%2F3%3Fx").await;
    html_ok("/jobs/job%2F3%3Fx", &r);
    assert!(r.body.contains("participant job"), "{}", r.body);

    let r = get(addr, "/jobs/nope").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.content_type(), "text/html; charset=utf-8");
    let r = get(addr, "/jobs/%3Cscript%3E").await;
    assert_eq!(r.status, 404);
    assert_escaped("404 of a hostile id", &r.body);
}

#[tokio::test]
async fn pending_page() {
    let addr = start(Fake::new()).await;
    let r = get(addr, "/pending").await;
    html_ok("/pending", &r);
    let b = &r.body;
    assert!(b.contains("Pending queue (1)"), "{b}");
    assert!(b.contains("42s"), "{b}");
    assert!(b.contains("href=\"/jobs/adv-1\""), "{b}");
}

#[tokio::test]
async fn remote_views() {
    let addr = start(Fake::new()).await;
    let base = format!("/peers/{FAR}");
    for (path, want) in [
        (base.clone(), "<h1>far-node</h1>"),
        (format!("{base}/peers"), "Peers (3)"),
        (format!("{base}/jobs"), "far's own job"),
        (format!("{base}/jobs/far-job"), "id=\"workers\""),
        (format!("{base}/pending"), "Pending queue (1)"),
    ] {
        let r = get(addr, &path).await;
        html_ok(&path, &r);
        assert!(r.body.contains(want), "{path} lacks {want}:\n{}", r.body);
        assert!(r.body.contains("Remote view of"), "{path}");
        // Links stay inside the remote view; its live stream polls the peer.
        assert!(r.body.contains(&format!("href=\"{base}/jobs\"")), "{path}");
        let live = format!("data-live=\"/events{path}\"");
        assert!(r.body.contains(&live), "{path} lacks {live}");
    }
    assert_eq!(get(addr, "/peers/12D3KooWUnknown").await.status, 404);
    assert_eq!(get(addr, "/peers/12D3KooWUnknown/jobs").await.status, 404);
    assert_eq!(get(addr, &format!("{base}/jobs/nope")).await.status, 404);
    let r = get(addr, &format!("/peers/{GONE}")).await;
    assert_eq!(r.status, 502);
    assert!(r.body.contains("unreachable"), "{}", r.body);
    let r = get(addr, "/peers/%3Cscript%3Ealert(1)%3C%2Fscript%3E").await;
    assert_eq!(r.status, 404);
    assert_escaped("remote 404", &r.body);
}

#[tokio::test]
async fn json_api_mirrors_the_pages() {
    let fake = Fake::new();
    let addr = start(fake.clone()).await;
    let o: NodeOverview = json_ok("/api/overview", &get(addr, "/api/overview").await);
    assert_eq!(o.node_id, ME);
    let p: Vec<PeerInfo> = json_ok("/api/peers", &get(addr, "/api/peers").await);
    assert_eq!(p.len(), 3);
    let j: Vec<JobSummary> = json_ok("/api/jobs", &get(addr, "/api/jobs").await);
    assert_eq!(j[0].name, XSS1);
    let d: JobDetail = json_ok("/api/jobs/job-1", &get(addr, "/api/jobs/job-1").await);
    assert_eq!(d.log_tail.len(), MAX_LOG_LINES);
    assert_eq!(d.workers.len(), 2);
    let d: JobDetail = json_ok(
        "/api/jobs/job%2F3%3Fx",
        &get(addr, "/api/jobs/job%2F3%3Fx").await,
    );
    assert_eq!(d.summary.id, "job/3?x");
    let q: Vec<PendingAdvert> = json_ok("/api/pending", &get(addr, "/api/pending").await);
    assert_eq!(q[0].expires_in_secs, 42);
    let c: zorilla_webui::model::Counters =
        json_ok("/api/counters", &get(addr, "/api/counters").await);
    assert_eq!(c.floods_forwarded, 31);
    let s: NodeSnapshot = json_ok("/api/snapshot", &get(addr, "/api/snapshot").await);
    assert_eq!(s, zorilla_webui::snapshot(fake.as_ref()));

    let r = get(addr, "/api/jobs/nope").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.content_type(), "application/json");
    assert!(r.body.contains("\"error\""), "{}", r.body);

    // Remote.
    let s: NodeSnapshot = json_ok("remote", &get(addr, &format!("/api/peers/{FAR}")).await);
    assert_eq!(s.overview.name, "far-node");
    let o: NodeOverview = json_ok(
        "remote overview",
        &get(addr, &format!("/api/peers/{FAR}/overview")).await,
    );
    assert_eq!(o.node_id, FAR);
    let p: Vec<PeerInfo> = json_ok(
        "remote peers",
        &get(addr, &format!("/api/peers/{FAR}/peers")).await,
    );
    assert_eq!(p.len(), 3);
    let j: Vec<JobSummary> = json_ok(
        "remote jobs",
        &get(addr, &format!("/api/peers/{FAR}/jobs")).await,
    );
    assert_eq!(j[0].id, "far-job");
    let d: JobDetail = json_ok(
        "remote job",
        &get(addr, &format!("/api/peers/{FAR}/jobs/far-job")).await,
    );
    assert_eq!(d.summary.phase, JobPhase::Running);
    let q: Vec<PendingAdvert> = json_ok(
        "remote pending",
        &get(addr, &format!("/api/peers/{FAR}/pending")).await,
    );
    assert_eq!(q.len(), 1);
    assert_eq!(get(addr, "/api/peers/nobody").await.status, 404);
    assert_eq!(get(addr, "/api/peers/nobody/jobs").await.status, 404);
    assert_eq!(
        get(addr, &format!("/api/peers/{FAR}/jobs/nope"))
            .await
            .status,
        404
    );
    let r = get(addr, &format!("/api/peers/{GONE}/overview")).await;
    assert_eq!(r.status, 502);
    assert_eq!(r.content_type(), "application/json");
}

#[tokio::test]
async fn prometheus_metrics() {
    let addr = start(Fake::new()).await;
    let r = get(addr, "/metrics").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type(), "text/plain; version=0.0.4; charset=utf-8");
    let b = &r.body;
    for want in [
        "# TYPE zorilla_jobs gauge",
        "zorilla_jobs{phase=\"running\"} 2",
        "zorilla_jobs{phase=\"scheduling\"} 1",
        "zorilla_jobs{phase=\"failed\"} 0",
        "zorilla_workers_running 2",
        "zorilla_floods_sent_total 7",
        "zorilla_floods_forwarded_total 31",
        "zorilla_messages_total{direction=\"sent\"} 1000",
        "zorilla_messages_total{direction=\"received\"} 1200",
        "zorilla_peers{link=\"near\"} 1",
        "# TYPE zorilla_peer_rtt_seconds summary",
        "zorilla_peer_rtt_seconds{quantile=\"0.5\"} 0.0045",
        "zorilla_peer_rtt_seconds{quantile=\"0.99\"} 0.08",
        "zorilla_peer_rtt_seconds_count 2",
        // A hostile network name stays inside its label.
        "network=\"testgrid\\\"><img src=x onerror=alert(2)>\"} 1",
    ] {
        assert!(b.contains(want), "metrics lack {want:?}:\n{b}");
    }
    // Every sample line is `name{labels} value`, value a number.
    for line in b.lines().filter(|l| !l.starts_with('#')) {
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "bad sample line {line:?}");
    }
}

#[tokio::test]
async fn static_assets_and_unknown_routes() {
    let addr = start(Fake::new()).await;
    let r = get(addr, "/static/style.css").await;
    assert_eq!(
        (r.status, r.content_type()),
        (200, "text/css; charset=utf-8")
    );
    assert!(r.body.contains("@media"));
    let r = get(addr, "/static/live.js").await;
    assert_eq!(
        (r.status, r.content_type()),
        (200, "text/javascript; charset=utf-8")
    );
    assert!(r.body.contains("EventSource"));
    for path in ["/nope", "/api/nope", "/jobs/a/b", "/static/x.js"] {
        let r = get(addr, path).await;
        assert_eq!(r.status, 404, "{path}");
    }
}

#[tokio::test]
async fn read_only() {
    let addr = start(Fake::new()).await;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for method in ["POST", "PUT", "DELETE"] {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("{method} /jobs HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.contains(" 405 "), "{method}: {out}");
    }
}

#[tokio::test]
async fn loopback_refuses_foreign_host_names() {
    let addr = start(Fake::new()).await;
    let r = get_with(addr, "/", &[("Host", "evil.example:7474")]).await;
    assert_eq!(r.status, 421, "DNS rebinding guard: {}", r.body);
    let r = get_with(addr, "/api/overview", &[("Host", "localhost:7474")]).await;
    assert_eq!(r.status, 200);
}

/// Collects what the server logs (the test runtime is single-threaded, so
/// the thread's default subscriber sees the server's tasks).
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Name of the test below, as libtest knows it (`--exact`).
const OFF_LOOPBACK_TEST: &str = "token_required_off_loopback";
/// Set (to the parent's network namespace) when that test runs
/// re-executed inside a network namespace of its own.
const OFF_LOOPBACK_NETNS_ENV: &str = "ZORILLA_WEBUI_OFF_LOOPBACK_NETNS";
/// Printed by the re-executed test once it passed, so that the parent
/// never mistakes "no test ran" for success.
const OFF_LOOPBACK_PASSED: &str = "webui-netns: off-loopback scenario passed";

/// A page listening off loopback needs a token. It listens on 0.0.0.0,
/// so, to open nothing on the machine's real interfaces, the test
/// re-executes itself under `unshare --net` (util-linux; root or
/// CAP_SYS_ADMIN) and runs there with only `lo`, which it brings up. If
/// the namespace cannot be made the test fails and says why.
#[test]
fn token_required_off_loopback() {
    let Ok(parent) = std::env::var(OFF_LOOPBACK_NETNS_ENV) else {
        let exe = std::env::current_exe().expect("the test binary's path");
        let netns = std::fs::read_link("/proc/self/ns/net").expect("read /proc/self/ns/net");
        let output = std::process::Command::new("unshare")
            .args(["--net", "--"])
            .arg(&exe)
            .args([
                "--exact",
                OFF_LOOPBACK_TEST,
                "--nocapture",
                "--test-threads=1",
            ])
            .env(OFF_LOOPBACK_NETNS_ENV, &netns)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run `unshare` (util-linux), which this test needs: {e}")
            });
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        assert!(
            output.status.success() && stdout.contains(OFF_LOOPBACK_PASSED),
            "the test in its own network namespace (`unshare --net`: root or CAP_SYS_ADMIN) \
             failed or did not run ({}):\n{stdout}\n{stderr}",
            output.status
        );
        return;
    };
    let here = std::fs::read_link("/proc/self/ns/net").expect("read /proc/self/ns/net");
    assert_ne!(
        here.to_string_lossy(),
        parent,
        "{OFF_LOOPBACK_NETNS_ENV} is set but this is not a new network namespace"
    );
    let up = std::process::Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .expect("run `ip` (iproute2)");
    assert!(up.success(), "`ip link set lo up` failed");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(token_required_off_loopback_scenario());
    println!("{OFF_LOOPBACK_PASSED}");
}

async fn token_required_off_loopback_scenario() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _log_guard = tracing::subscriber::set_default(subscriber);
    let fake = Fake::new();
    // No token: refuses to start.
    let config = WebConfig {
        listen: "0.0.0.0:0".parse().unwrap(),
        token: None,
        ..WebConfig::default()
    };
    assert!(matches!(
        zorilla_webui::serve(config, fake.clone()).await,
        Err(ServeError::TokenRequired(_))
    ));
    let config = WebConfig {
        listen: "0.0.0.0:0".parse().unwrap(),
        token: Some("s3cret".into()),
        ..WebConfig::default()
    };
    let bound = zorilla_webui::serve(config, fake).await.unwrap();
    // Talk to it over loopback only.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], bound.port()));
    for path in [
        "/",
        "/api/overview",
        "/metrics",
        "/events/jobs",
        "/static/style.css",
    ] {
        let r = get(addr, path).await;
        assert_eq!(r.status, 401, "{path} without a token");
        assert!(
            r.headers
                .iter()
                .any(|(n, v)| n == "www-authenticate" && v.starts_with("Basic")),
            "{path}: {:?}",
            r.headers
        );
        let r = get_with(addr, path, &[("Authorization", "Bearer wrong")]).await;
        assert_eq!(r.status, 401, "{path} with a wrong token");
    }
    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        logged.contains("refused an unauthorised request") && logged.contains("missing token"),
        "{logged}"
    );
    assert!(logged.contains("wrong token"), "{logged}");
    assert!(
        !logged.contains("Bearer wrong"),
        "the token itself is never logged: {logged}"
    );
    let r = get_with(addr, "/", &[("Authorization", "Bearer s3cret")]).await;
    html_ok("/ with bearer", &r);
    // "browser:s3cret", as a browser sends it after the Basic prompt.
    let r = get_with(
        addr,
        "/api/overview",
        &[("Authorization", "Basic YnJvd3NlcjpzM2NyZXQ=")],
    )
    .await;
    assert_eq!(r.status, 200);
    // Off loopback the Host header is not restricted (the token is the guard).
    let r = get_with(
        addr,
        "/metrics",
        &[
            ("Authorization", "Bearer s3cret"),
            ("Host", "node7.example:7474"),
        ],
    )
    .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn live_updates_over_server_sent_events() {
    let fake = Fake::new();
    let addr = start(fake.clone()).await;
    let mut jobs = EventStream::open(addr, "/events/jobs").await;
    assert_eq!(jobs.status, 200);
    assert!(
        jobs.head
            .to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{}",
        jobs.head
    );
    let mut job1 = EventStream::open(addr, "/events/jobs/job-1").await;
    let mut overview = EventStream::open(addr, "/events/overview").await;
    // The current state straight away.
    let first = jobs.next_update().await;
    assert!(first.contains("<h1>Jobs (3)</h1>"), "{first}");
    assert_escaped("first update", &first);
    let first = job1.next_update().await;
    // The hostile log line with a carriage return arrives whole and escaped.
    assert!(
        first.contains("last line &lt;script&gt;alert(1)&lt;/script&gt;&#13;\n&quot;&gt;&lt;img"),
        "{first}"
    );
    overview.next_update().await;

    fake.submit(job("job-new", "fresh <b>job</b>", JobPhase::Scheduling, ME));
    let update = jobs.next_update().await;
    assert!(update.contains("<h1>Jobs (4)</h1>"), "{update}");
    assert!(update.contains("fresh &lt;b&gt;job&lt;/b&gt;"), "{update}");
    let update = overview.next_update().await;
    assert!(update.contains("Jobs this node is home to (3)"), "{update}");

    // A change of one job reaches that job's page.
    fake.tx
        .send(zorilla_webui::Change::Job("job-1".into()))
        .unwrap();
    let update = job1.next_update().await;
    assert!(update.contains("id=\"workers\""), "{update}");
}

#[tokio::test]
async fn live_streams_are_bounded() {
    let config = WebConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        max_live_streams: 2,
        ..WebConfig::default()
    };
    let fake = Fake::new();
    let addr = zorilla_webui::serve(config, fake.clone()).await.unwrap();
    let mut a = EventStream::open(addr, "/events/jobs").await;
    let mut b = EventStream::open(addr, "/events/peers").await;
    a.next_update().await;
    b.next_update().await;
    let c = get(addr, "/events/pending").await;
    assert_eq!(c.status, 503);
    // Closing one frees its slot.
    drop(a);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        // The server notices the closed stream when it next writes to it.
        let _ = fake.tx.send(zorilla_webui::Change::Jobs);
        let mut c = EventStream::open(addr, "/events/pending").await;
        if c.status == 200 {
            c.next_update().await;
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "slot never freed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let _ = Arc::strong_count(&fake);
}

#[tokio::test]
async fn live_remote_views_poll_the_peer() {
    let config = WebConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        remote_refresh: std::time::Duration::from_millis(20),
        ..WebConfig::default()
    };
    let fake = Fake::new();
    let addr = zorilla_webui::serve(config, fake.clone()).await.unwrap();
    let mut far = EventStream::open(addr, &format!("/events/peers/{FAR}/jobs")).await;
    assert_eq!(far.status, 200);
    let first = far.next_update().await;
    assert!(first.contains("far's own job"), "{first}");
    assert!(
        first.contains(&format!("href=\"/peers/{FAR}/jobs/far-job\"")),
        "{first}"
    );
    {
        let mut s = fake.state.lock().unwrap();
        let (snap, _) = s.remotes.get_mut(FAR).unwrap();
        snap.jobs
            .push(job("far-2", XSS1, JobPhase::Scheduling, FAR));
    }
    let update = far.next_update().await;
    assert!(update.contains("<h1>Jobs (2)</h1>"), "{update}");
    assert_escaped("remote update", &update);

    let mut gone = EventStream::open(addr, &format!("/events/peers/{GONE}")).await;
    let update = gone.next_update().await;
    assert!(update.contains("unreachable"), "{update}");
    let mut job = EventStream::open(addr, &format!("/events/peers/{FAR}/jobs/far-job")).await;
    assert!(job.next_update().await.contains("id=\"workers\""));
}

#[tokio::test]
async fn grid_page_groups_the_nodes_and_draws_a_jobs_placement() {
    let addr = start(Fake::new()).await;
    let r = get(addr, "/grid").await;
    html_ok("/grid", &r);
    let b = &r.body;
    for want in [
        "<h1>Grid (4 nodes)</h1>",
        "Asked 3 of 3 known peers",
        "2 answered",
        "below 1 ms",
        "1 to 10 ms",
        "over 50 ms",
        "RTT not measured",
        "no answer: peer unreachable: no route",
        "<svg id=\"grid-picture\"",
        "data-live=\"/events/grid\"",
        // NEAR's name is markup: escaped.
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "href=\"/api/grid\"",
    ] {
        assert!(b.contains(want), "/grid lacks {want:?}:\n{b}");
    }
    // Every node a box; the silent one dashed.
    assert_eq!(b.matches("<rect class=\"gridnode").count(), 4, "{b}");
    assert_eq!(b.matches("gridnode silent").count(), 1, "{b}");

    // A job's placement: its two workers on this node and NEAR.
    let r = get(addr, "/grid?job=job-1").await;
    html_ok("/grid?job=job-1", &r);
    let b = &r.body;
    assert!(b.contains("2 workers on 2 nodes"), "{b}");
    assert!(b.contains("the job's record on this node, its home"), "{b}");
    assert_eq!(b.matches("<tr class=\"placed\"").count(), 2, "{b}");
    assert!(b.contains("class=\"homebadge\""), "{b}");
    assert!(b.contains("data-live=\"/events/grid?job=job-1\""), "{b}");

    // The JSON twin.
    let view: zorilla_webui::model::GridView =
        json_ok("/api/grid", &get(addr, "/api/grid?job=job-1").await);
    assert_eq!((view.asked, view.answered, view.limit), (3, 2, 32));
    let job = view.job.expect("the job");
    assert_eq!((job.ranks, job.nodes), (2, 2));
    assert_eq!(job.home.as_deref(), Some(ME));
    let near = view
        .groups
        .iter()
        .flat_map(|g| g.nodes.iter())
        .find(|n| n.node_id == NEAR)
        .expect("NEAR");
    assert_eq!(near.rtt_ms, Some(4.5));
    assert_eq!(near.summary.as_ref().map(|s| s.free_cores()), Some(1));

    // The job page links to it.
    let r = get(addr, "/jobs/job-1").await;
    assert!(r.body.contains("href=\"/grid?job=job-1\""), "{}", r.body);
}

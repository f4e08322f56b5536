//! Memory before authentication (issue 12): strangers on the client port,
//! the status page and the overlay cannot make a real `zorilla-node`
//! allocate what they announce, and tokens too short to be secret are
//! refused at start. Memory is the node's resident set (`VmRSS`).

mod common;
// Shared with the overlay's tests, which use all of it.
#[allow(dead_code)]
#[path = "../../overlay/tests/raw_peer/mod.rs"]
mod raw_peer;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zorilla_node::protocol::frame::{self, DEFAULT_MAX_FRAME};
use zorilla_node::protocol::{Hello, PROTOCOL_VERSION, Response};

use common::TestNode;

const MIB: u64 = 1024 * 1024;
/// A token long enough to be accepted.
const TOKEN: &str = "limits-test-token-0123456789";

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

/// Samples the resident memory of `pid` every 20 ms until `stop` is set;
/// returns the highest value seen.
fn watch_rss(pid: u32, stop: tokio::sync::watch::Receiver<bool>) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut peak = rss(pid);
        while !*stop.borrow() {
            peak = peak.max(rss(pid));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        peak.max(rss(pid))
    })
}

fn start_node(dir: &Path, network: &str, extra: &[String]) -> TestNode {
    TestNode::start_with(&dir.join("n0"), network, None, 1, "127.0.0.1", extra)
}

/// Reads one response frame (or `None` if the connection closed first),
/// within `timeout`.
async fn read_response(stream: &mut tokio::net::tcp::OwnedReadHalf) -> Option<Response> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some((response, _))) = frame::parse::<Response>(&buf, DEFAULT_MAX_FRAME) {
            return Some(response);
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Whether the peer closes `stream` within `timeout` (reading and dropping
/// what comes).
async fn closes_within(stream: &mut tokio::net::tcp::OwnedReadHalf, timeout: Duration) -> bool {
    let mut chunk = [0u8; 4096];
    tokio::time::timeout(timeout, async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// Sends `total` bytes of junk in 64 KiB pieces, 5 ms apart (a slow
/// sender), stopping at the first error (the node closed); returns how
/// much went out.
async fn trickle(writer: &mut tokio::net::tcp::OwnedWriteHalf, total: usize) -> usize {
    let piece = vec![0x5a; 64 * 1024];
    let mut sent = 0;
    while sent < total {
        if writer.write_all(&piece).await.is_err() {
            break;
        }
        sent += piece.len();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sent
}

fn hello_frame(token: Option<&str>) -> Vec<u8> {
    let hello = Hello {
        version: PROTOCOL_VERSION,
        client: "limits test".into(),
        token: token.map(str::to_owned),
    };
    frame::encode(&hello, DEFAULT_MAX_FRAME).unwrap()
}

/// 16 connections that each announce a 64 MiB frame before any hello and
/// send 4 MiB of it slowly: each is told the first frame must be a small
/// hello and closed, the node's memory does not grow by what they sent,
/// and a normal client is served afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strangers_cannot_make_the_node_buffer_what_they_announce() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path(), "limits-hello", &[]);
    let pid = node.child.id();
    // Warm up: one client served.
    node.client().await.node_info().await.unwrap();
    let before = rss(pid);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let peak = watch_rss(pid, stopped);

    let mut attackers = Vec::new();
    for _ in 0..16 {
        let addr = node.client.clone();
        attackers.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr.as_str()).await.unwrap();
            let (mut reader, mut writer) = stream.into_split();
            // 64 MiB announced.
            writer
                .write_all(&(64 * MIB as u32).to_be_bytes())
                .await
                .unwrap();
            let sending = tokio::spawn(async move { trickle(&mut writer, 4 << 20).await });
            let response =
                tokio::time::timeout(Duration::from_secs(30), read_response(&mut reader))
                    .await
                    .expect("an answer within 30 s");
            let closed = closes_within(&mut reader, Duration::from_secs(30)).await;
            let sent = sending.await.unwrap();
            (response, closed, sent)
        }));
    }
    for attacker in attackers {
        let (response, closed, sent) = attacker.await.unwrap();
        match response {
            Some(Response::Error { message, .. }) => assert!(
                message.contains("at most 4096 bytes") && message.contains("67108864"),
                "{message}"
            ),
            other => panic!("expected an error about the frame's size, got {other:?}"),
        }
        assert!(closed, "the node keeps a stranger's connection open");
        assert!(
            sent < 4 << 20,
            "the node read all {sent} bytes of a stranger's frame"
        );
    }
    stop.send(true).unwrap();
    let grown = peak.await.unwrap().saturating_sub(before);
    assert!(
        grown < 20 * MIB,
        "the node grew by {} MiB for 16 strangers' frames",
        grown / MIB
    );
    // Still serving.
    let mut client = node.client().await;
    assert_eq!(client.node_info().await.unwrap().peer, node.peer);
}

/// After an accepted hello the normal 64 MiB cap applies, but the buffer
/// grows with the bytes that come, not with the length announced: 16
/// clients that announce 64 MiB and send 1 MiB cost tens of MiB, not 1 GiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn accepted_clients_cost_what_they_send_not_what_they_announce() {
    let dir = tempfile::tempdir().unwrap();
    let extra = ["--token".to_string(), TOKEN.into()];
    let node = start_node(dir.path(), "limits-accepted", &extra);
    let pid = node.child.id();
    let mut client =
        zorilla_node::client::Client::connect_with(node.client.as_str(), Some(TOKEN), "t")
            .await
            .unwrap();
    client.node_info().await.unwrap();
    let before = rss(pid);

    let mut held = Vec::new();
    for _ in 0..16 {
        let stream = TcpStream::connect(node.client.as_str()).await.unwrap();
        let (mut reader, mut writer) = stream.into_split();
        writer.write_all(&hello_frame(Some(TOKEN))).await.unwrap();
        let welcome = read_response(&mut reader).await;
        assert!(matches!(welcome, Some(Response::Welcome(_))), "{welcome:?}");
        writer
            .write_all(&(64 * MIB as u32).to_be_bytes())
            .await
            .unwrap();
        assert_eq!(trickle(&mut writer, 1 << 20).await, 1 << 20);
        held.push((reader, writer));
    }
    // Every byte has reached the node once it answers another request.
    assert_eq!(client.node_info().await.unwrap().peer, node.peer);
    let grown = rss(pid).saturating_sub(before);
    // What they sent, with room for the allocator's slack; announced was
    // 1 GiB.
    assert!(
        grown < 96 * MIB,
        "16 clients that sent 1 MiB each cost the node {} MiB",
        grown / MIB
    );
    drop(held);
    assert_eq!(client.node_info().await.unwrap().peer, node.peer);
}

/// Runs `zorilla-node` with `args` and `env`, expecting it to refuse to
/// start; returns what it wrote to stderr.
fn refused_start(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_zorilla-node"));
    command
        .args(["--state-dir", dir.to_str().unwrap(), "--mdns", "false"])
        .args(["--client", "127.0.0.1:0", "--web", "127.0.0.1:0"])
        .args(["--listen", "/ip4/127.0.0.1/tcp/0"])
        .args(args)
        .env_remove("ZORILLA_TOKEN")
        // anyhow adds a backtrace to the error when these ask for one.
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("zorilla-node {args:?} {env:?} started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    stderr
}

/// Tokens of one character or of whitespace are refused at start, with
/// one sentence, from the config file, `--token` and `ZORILLA_TOKEN`.
#[test]
fn short_and_blank_tokens_stop_the_node_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let short = "the token must be at least 16 bytes long (this one has 1)";
    let blank = "the token must not be only whitespace";

    let file = dir.path().join("zorilla.toml");
    std::fs::write(&file, "token = \"x\"\n").unwrap();
    let err = refused_start(&state, &["--config", file.to_str().unwrap()], &[]);
    assert!(err.contains(short), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one sentence: {err}");

    std::fs::write(&file, "token = \"   \"\n").unwrap();
    let err = refused_start(&state, &["--config", file.to_str().unwrap()], &[]);
    assert!(err.contains(blank), "{err}");

    let err = refused_start(&state, &["--token", "x"], &[]);
    assert!(err.contains(short), "{err}");

    let err = refused_start(&state, &[], &[("ZORILLA_TOKEN", "x")]);
    assert!(err.contains(short), "{err}");
    let err = refused_start(&state, &[], &[("ZORILLA_TOKEN", "                    ")]);
    assert!(err.contains(blank), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one sentence: {err}");
}

/// Sends an HTTP request head (and maybe more) and returns the status line
/// of the answer, or `None` if the connection closed without one.
async fn status_line(stream: &mut tokio::net::tcp::OwnedReadHalf) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            return Some(String::from_utf8_lossy(&buf[..end]).into_owned());
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    writer.write_all(request.as_bytes()).await.unwrap();
    status_line(&mut reader).await.unwrap_or_default()
}

/// The status page bounds a request before it looks at any token: huge
/// headers get 431 after a few KiB, a client that sends its headers slowly
/// is cut off, a request with a body gets 413, the node's memory stays
/// bounded, and a normal GET is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_status_page_bounds_requests_before_any_token() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path(), "limits-web", &[]);
    let pid = node.child.id();
    let web = node.web;
    assert!(get(web, "/api/overview").await.contains(" 200 "));
    let before = rss(pid);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let peak = watch_rss(pid, stopped);

    // 100 clients each sending 300 KiB of one header, and holding on.
    let mut huge = Vec::new();
    for _ in 0..100 {
        huge.push(tokio::spawn(async move {
            let stream = TcpStream::connect(web).await.unwrap();
            let (mut reader, mut writer) = stream.into_split();
            let head = b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ";
            writer.write_all(head).await.unwrap();
            let sending = tokio::spawn(async move {
                let sent = trickle(&mut writer, 300 * 1024).await;
                (sent, writer)
            });
            let status = tokio::time::timeout(Duration::from_secs(60), status_line(&mut reader))
                .await
                .expect("an answer within 60 s");
            let (sent, _writer) = sending.await.unwrap();
            (status, sent)
        }));
    }
    for client in huge {
        let (status, sent) = client.await.unwrap();
        assert!(
            status.as_deref().is_some_and(|s| s.contains(" 431 ")),
            "{status:?} after {sent} bytes of headers"
        );
    }
    stop.send(true).unwrap();
    let grown = peak.await.unwrap().saturating_sub(before);
    assert!(
        grown < 20 * MIB,
        "100 clients with huge headers cost the status page {} MiB",
        grown / MIB
    );

    // A client that sends its headers one byte a second is cut off.
    let stream = TcpStream::connect(web).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let slow = tokio::spawn(async move {
        for byte in b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaa" {
            if writer.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let started = Instant::now();
    assert!(
        closes_within(&mut reader, Duration::from_secs(30)).await,
        "a slow client's headers were waited for more than 30 s"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    slow.abort();

    // A request with a body: 413, whatever the body.
    let stream = TcpStream::connect(web).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let head = "GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 104857600\r\n\r\n";
    writer.write_all(head.as_bytes()).await.unwrap();
    let sending = tokio::spawn(async move { trickle(&mut writer, 8 << 20).await });
    let status = tokio::time::timeout(Duration::from_secs(30), status_line(&mut reader))
        .await
        .unwrap();
    assert!(
        status.as_deref().is_some_and(|s| s.contains(" 413 ")),
        "{status:?}"
    );
    drop(reader);
    sending.abort();

    // And the page still works.
    assert!(get(web, "/api/overview").await.contains(" 200 "));
}

/// A peer that opens many rpc streams and sends nearly a frame's worth on
/// each without ever finishing does not make the node hold all of it: the
/// inbound requests being read share one budget (32 MiB). The test waits
/// until every request has ended on the peers' side (all its bytes taken
/// by the node, or its stream reset by it), and checks that the node took
/// more than its budget's worth would show in memory and refused the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlay_requests_are_read_within_one_budget() {
    use raw_peer::{Protocol, RawEvent, RawPeer};

    let dir = tempfile::tempdir().unwrap();
    let network = "limits-overlay";
    let node = start_node(dir.path(), network, &[]);
    let pid = node.child.id();
    let target: libp2p::PeerId = node.peer.parse().unwrap();
    let before = rss(pid);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let peak = watch_rss(pid, stopped);

    // Two peers, 100 streams each (the node's limit per connection), each
    // carrying 900 KiB of a frame that never ends: 175 MiB in all.
    let junk = vec![0x5a; 900 * 1024];
    let mut peers = Vec::new();
    for _ in 0..2 {
        let mut peer = RawPeer::start_holding(network, Some(Duration::from_secs(20)));
        peer.dial(node.listen.parse().unwrap()).await.unwrap();
        peer.expect(RawEvent::Connected(target), Duration::from_secs(30))
            .await;
        for _ in 0..100 {
            peer.send(Protocol::Rpc, target, &junk).await;
        }
        peers.push(peer);
    }
    // Every request ends on the peer's side: written (the node read its
    // bytes: yamux grants a stream's window only as the node reads) or
    // failed (the node reset the stream). Streams are held open for 20 s
    // after their bytes, so the budget stays taken while this waits;
    // a request that neither ends is cut by the peers' request timeout
    // (30 s).
    let total = |f: fn(&raw_peer::Sent) -> usize| peers.iter().map(|p| f(p.sent())).sum::<usize>();
    let written = |s: &raw_peer::Sent| s.written.load(std::sync::atomic::Ordering::Acquire);
    let failed = |s: &raw_peer::Sent| s.failed.load(std::sync::atomic::Ordering::Acquire);
    let bytes = |s: &raw_peer::Sent| s.written_bytes.load(std::sync::atomic::Ordering::Acquire);
    let deadline = Instant::now() + Duration::from_secs(60);
    while total(written) + total(failed) < 200 {
        assert!(
            Instant::now() < deadline,
            "of 200 requests {} written and {} failed after 60 s",
            total(written),
            total(failed)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.send(true).unwrap();
    let grown = peak.await.unwrap().saturating_sub(before);
    let (taken, refused) = (total(bytes) as u64, total(failed));
    eprintln!(
        "the node took {} MiB of unfinished requests ({} requests) and refused {refused}; \
         its memory grew {} MiB at most",
        taken / MIB,
        total(written),
        grown / MIB
    );
    // The bytes arrived: the node read at least half its budget's worth
    // (it keeps what it read of an unfinished request until it ends).
    assert!(
        taken >= 16 * MIB,
        "the node took only {taken} bytes of 175 MiB of requests: the test did not load it"
    );
    // ... and refused requests once the budget was spent.
    assert!(
        refused > 0,
        "all 175 MiB of unfinished requests were taken: {taken} bytes"
    );
    assert!(
        grown < 64 * MIB,
        "175 MiB of unfinished requests ({} MiB taken) cost the node {} MiB",
        taken / MIB,
        grown / MIB
    );
    drop(peers);
    // The node still serves.
    let mut client = node.client().await;
    assert_eq!(client.node_info().await.unwrap().peer, node.peer);
}

/// A hello sent a byte a second (slowloris) is cut off by the handshake
/// timeout, which covers the whole hello, not each read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_hello_is_cut_off_by_the_handshake_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path(), "limits-slow-hello", &[]);
    let stream = TcpStream::connect(node.client.as_str()).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let hello = hello_frame(None);
    let slow = tokio::spawn(async move {
        for byte in hello {
            if writer.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let started = Instant::now();
    let response = tokio::time::timeout(Duration::from_secs(30), read_response(&mut reader))
        .await
        .expect("an answer within 30 s");
    match response {
        Some(Response::Error { message, .. }) => {
            assert!(message.contains("no hello within"), "{message}")
        }
        other => panic!("expected the handshake timeout, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(closes_within(&mut reader, Duration::from_secs(10)).await);
    slow.abort();
}

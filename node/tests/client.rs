//! The client protocol against running nodes: a round trip of every
//! request, bad frames, tokens and the client bound; then the `zorilla`
//! command-line tool through its real binary.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{TestNode, grid, nqueens, stdout_of, wait_completed, wait_for, wasm};
use zorilla_core::advert::JobId;
use zorilla_node::client::{Client, ClientError};
use zorilla_node::protocol::frame::{self, DEFAULT_MAX_FRAME};
use zorilla_node::protocol::{
    ErrorKind, Hello, JobPhase, JobRequest, NamedFile, PROTOCOL_VERSION, Response,
};

fn idle(min: u32, max: u32) -> JobRequest {
    JobRequest {
        min_workers: min,
        max_workers: max,
        lifetime_secs: 30,
        ..JobRequest::default()
    }
}

/// Every request of the protocol, once, on a grid of three one-core nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_round_trips() {
    let grid = grid(3, 1);
    let mut client = grid.nodes[0].client().await;
    assert_eq!(client.welcome().version, PROTOCOL_VERSION);
    assert_eq!(client.welcome().peer, grid.nodes[0].peer);

    // Submit, Status, Logs (paged), Outputs, List.
    let inputs = vec![NamedFile {
        name: "name.txt".into(),
        data: b"round trip".to_vec(),
    }];
    let hello = JobRequest {
        args: vec!["<arg>".into()],
        ..JobRequest::default()
    };
    let job = client.submit(hello, wasm("hello"), inputs).await.unwrap();
    let status = wait_completed(&mut client, job, Duration::from_secs(30)).await;
    assert_eq!(status.job, job);
    assert!(status.submitted_unix > 0);
    assert!(status.pending.is_none(), "a full job seeks nothing");
    let page = client.logs_page(job, 0, 0).await.unwrap();
    assert!(!page.chunks.is_empty());
    let out = stdout_of(&page.chunks);
    assert!(
        out.contains("round trip") && out.contains("<arg>"),
        "{out:?}"
    );
    let rest = client.logs_page(job, page.next, 0).await.unwrap();
    assert!(rest.chunks.is_empty() && rest.ended, "{rest:?}");
    let outputs = client.outputs(job).await.unwrap();
    assert_eq!(outputs.len(), 1);
    assert_eq!(outputs[0].name, "0/greeting.txt");
    assert!(client.list().await.unwrap().iter().any(|s| s.job == job));

    // Logs with a wait: the answer comes when the output does, not at the
    // end of the wait.
    let idle_job = client
        .submit(idle(1, 2), wasm("idle"), vec![])
        .await
        .unwrap();
    let asked = Instant::now();
    let page = client.logs_page(idle_job, 0, 30).await.unwrap();
    assert!(stdout_of(&page.chunks).contains("idle rank"), "{page:?}");
    assert!(asked.elapsed() < Duration::from_secs(20));

    // Resize: grows the malleable job to the third node.
    wait_for(
        &mut client,
        idle_job,
        Duration::from_secs(30),
        "2 workers",
        |s| s.running_workers() == 2,
    )
    .await;
    let status = client.resize(idle_job, 3).await.unwrap();
    assert_eq!(status.request.max_workers, 3);
    let status = wait_for(
        &mut client,
        idle_job,
        Duration::from_secs(30),
        "3 workers",
        |s| s.running_workers() == 3,
    )
    .await;
    let nodes: std::collections::BTreeSet<_> = status.ranks.values().map(|r| &r.node).collect();
    assert_eq!(nodes.len(), 3, "{status:?}");
    let err = client.resize(idle_job, 2).await.unwrap_err();
    assert!(err.to_string().contains("already placed"), "{err}");

    // Cancel, NodeInfo, Peers.
    let status = client.cancel(idle_job).await.unwrap();
    assert_eq!(status.phase, JobPhase::Cancelled);
    let info = client.node_info().await.unwrap();
    assert_eq!(info.peer, grid.nodes[0].peer);
    assert_eq!(info.network, format!("test-{}", std::process::id()));
    assert!(!info.version.is_empty() && !info.listen.is_empty());
    assert_eq!(info.jobs.get(&JobPhase::Completed), Some(&1));
    let peers = client.peers().await.unwrap();
    let others: Vec<&str> = grid.nodes[1..].iter().map(|n| n.peer.as_str()).collect();
    assert!(
        others
            .iter()
            .all(|p| peers.iter().any(|e| e.peer == *p && e.connected)),
        "{peers:?}"
    );

    // Errors: unknown job.
    match client.status(42).await {
        Err(ClientError::Node {
            kind: ErrorKind::NotFound,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

/// Writes raw bytes after a good hello and returns the node's answer.
fn raw_exchange(addr: &str, hello: &Hello, bytes: &[u8]) -> Option<Response> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(&frame::encode(hello, DEFAULT_MAX_FRAME).unwrap())
        .unwrap();
    let welcome = read_frame(&mut stream)?;
    if !matches!(welcome, Response::Welcome(_)) {
        return Some(welcome);
    }
    stream.write_all(bytes).unwrap();
    read_frame(&mut stream)
}

fn read_frame(stream: &mut TcpStream) -> Option<Response> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((response, _)) = frame::parse::<Response>(&buf, DEFAULT_MAX_FRAME).unwrap() {
            return Some(response);
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn hello(token: Option<&str>) -> Hello {
    Hello {
        version: PROTOCOL_VERSION,
        client: "raw test".into(),
        token: token.map(str::to_owned),
    }
}

fn error_of(response: Option<Response>) -> (ErrorKind, String) {
    match response {
        Some(Response::Error { kind, message }) => (kind, message),
        other => panic!("expected an error reply, got {other:?}"),
    }
}

/// Malformed, unknown and oversized frames, a wrong version, missing and
/// wrong tokens, and one client too many: each gets an error that says what
/// was wrong, and the node keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_clients_get_clear_errors_and_the_node_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let extra = [
        "--token".to_string(),
        "s3cret-token-0123".into(),
        "--max-clients".into(),
        "3".into(),
    ];
    let node = TestNode::start_with(
        &dir.path().join("n0"),
        "bad-clients",
        None,
        1,
        "127.0.0.1",
        &extra,
    );
    let addr = node.client.as_str();
    let good = hello(Some("s3cret-token-0123"));

    // Garbage CBOR in a well-formed frame.
    let (kind, message) = error_of(raw_exchange(addr, &good, &[0, 0, 0, 3, 0xff, 0x00, 0x13]));
    assert_eq!(kind, ErrorKind::BadRequest);
    assert!(message.contains("malformed"), "{message}");
    // Valid CBOR naming a request that does not exist.
    let mut unknown = Vec::new();
    ciborium::into_writer(&ciborium::Value::Text("Reboot".into()), &mut unknown).unwrap();
    let mut framed = (unknown.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(&unknown);
    let (_, message) = error_of(raw_exchange(addr, &good, &framed));
    assert!(message.contains("Reboot"), "{message}");
    // A length over the cap.
    let (_, message) = error_of(raw_exchange(addr, &good, &[0xff, 0xff, 0xff, 0xff]));
    assert!(message.contains("exceeds the cap"), "{message}");
    // Another protocol version.
    let old = Hello {
        version: PROTOCOL_VERSION + 1,
        ..good.clone()
    };
    let (kind, _) = error_of(raw_exchange(addr, &old, &[]));
    assert_eq!(kind, ErrorKind::Version);
    // No token, a wrong token (and both are logged).
    let (kind, message) = error_of(raw_exchange(addr, &hello(None), &[]));
    assert_eq!(kind, ErrorKind::Unauthorized);
    assert!(message.contains("needs a token"), "{message}");
    let (kind, message) = error_of(raw_exchange(addr, &hello(Some("s3cret-token-012X")), &[]));
    assert_eq!(
        (kind, message.as_str()),
        (ErrorKind::Unauthorized, "wrong token")
    );
    let log = std::fs::read_to_string(node.dir.join("node.log")).unwrap();
    assert!(log.contains("client refused: wrong token"), "{log}");

    // Three clients are served at once; a fourth is told the node is busy.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect_when_free(addr).await);
    }
    match Client::connect_with(addr, Some("s3cret-token-0123"), "fourth").await {
        Err(ClientError::Node {
            kind: ErrorKind::Busy,
            message,
        }) => assert!(message.contains("3 clients"), "{message}"),
        other => panic!("expected busy, got {other:?}"),
    }
    // After all that, the node still works.
    let first = held.first_mut().unwrap();
    let job = first
        .submit(nqueens(1, 8), wasm("nqueens"), vec![])
        .await
        .unwrap();
    wait_completed(first, job, Duration::from_secs(30)).await;
    drop(held);
    let mut again = connect_when_free(addr).await;
    assert_eq!(again.node_info().await.unwrap().peer, node.peer);
}

/// Connects, trying again while the node says it is busy: a closed
/// connection frees its slot only once the node has noticed, just after
/// the client has.
async fn connect_when_free(addr: &str) -> Client {
    let start = Instant::now();
    loop {
        match Client::connect_with(addr, Some("s3cret-token-0123"), "test").await {
            Ok(client) => return client,
            Err(ClientError::Node {
                kind: ErrorKind::Busy,
                ..
            }) if start.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

// ----- the CLI -----

fn examples() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples"))
}

fn zorilla(node: &TestNode) -> Command {
    let mut cmd = common::cli();
    cmd.env("ZORILLA_NODE", &node.client)
        .env_remove("ZORILLA_TOKEN")
        .env_remove("ZORILLA_STATE_DIR");
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run zorilla")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The job id in `zorilla submit --wait`'s or `--follow`'s "job ID ..."
/// lines.
fn job_named_in(stderr: &str) -> String {
    stderr
        .split_whitespace()
        .skip_while(|w| *w != "job")
        .nth(1)
        .unwrap_or_else(|| panic!("no job named in {stderr:?}"))
        .to_string()
}

/// `zorilla submit --wait` of the hello spec (outputs fetched), logs,
/// fetch, list, status, node and peers, with their exit codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_submits_waits_and_reads_everything_back() {
    let grid = grid(2, 1);
    let node = &grid.nodes[0];
    let work = tempfile::tempdir().unwrap();

    let out = run(zorilla(node)
        .current_dir(work.path())
        .arg("submit")
        .arg(examples().join("jobs/hello.toml"))
        .arg("--wait"));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("completed after"), "{stderr}");
    assert!(
        stderr.contains("ranks 0") || stderr.contains("ranks 1"),
        "{stderr}"
    );
    for rank in ["0", "1"] {
        let greeting = std::fs::read_to_string(
            work.path()
                .join("hello-output")
                .join(rank)
                .join("greeting.txt"),
        )
        .unwrap();
        assert!(greeting.contains("Zorilla"), "{greeting}");
    }
    let job = job_named_in(&stderr);

    // logs, with rank prefixes; a unique prefix of the id is enough.
    let out = run(zorilla(node).args(["logs", "--ranks", &job[..6]]));
    assert!(out.status.success());
    let logs = text(&out.stdout);
    assert!(logs.contains("[0] ") && logs.contains("[1] "), "{logs}");
    assert!(logs.contains("Zorilla"), "{logs}");

    // fetch into a directory of our choice.
    let fetched = work.path().join("fetched");
    let out = run(zorilla(node).arg("fetch").arg(&job).arg(&fetched));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(fetched.join("1/greeting.txt").exists());

    // list and status, as text and JSON.
    let out = run(zorilla(node).args(["list"]));
    assert!(text(&out.stdout).contains(&job));
    let out = run(zorilla(node).args(["list", "--json"]));
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(jobs[0]["job"], job.as_str());
    assert_eq!(jobs[0]["phase"], "completed");
    let out = run(zorilla(node).args(["status", &job]));
    assert!(text(&out.stdout).contains("phase     completed"));

    // node and peers.
    let out = run(zorilla(node).args(["node", "--json"]));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["peer"], node.peer.as_str());
    let out = run(zorilla(node).args(["peers"]));
    assert!(
        text(&out.stdout).contains(&grid.nodes[1].peer),
        "{}",
        text(&out.stdout)
    );

    // --follow streams the logs of a job while waiting.
    let out = run(zorilla(node).args([
        "submit",
        "--module",
        examples().join("wasm/nqueens.wasm").to_str().unwrap(),
        "--arg",
        "10",
        "--workers",
        "2",
        "--follow",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("nqueens N=10 ranks=2 solutions=724"),
        "{}",
        text(&out.stdout)
    );

    // Exit codes: no such job 4, not a job id 2, bad spec 2, refused 5,
    // unreachable 3; each with one sentence on stderr.
    let code = |out: &Output| out.status.code().unwrap();
    let out = run(zorilla(node).args(["status", "0123456789abcdef"]));
    assert_eq!(code(&out), 4, "{}", text(&out.stderr));
    let out = run(zorilla(node).args(["status", "nope"]));
    assert_eq!(code(&out), 2);
    let bad_spec = work.path().join("bad.toml");
    std::fs::write(&bad_spec, "workerz = 3\n").unwrap();
    let out = run(zorilla(node).arg("submit").arg(&bad_spec));
    assert_eq!(code(&out), 2);
    assert!(
        text(&out.stderr).contains("workerz"),
        "{}",
        text(&out.stderr)
    );
    let out = run(zorilla(node)
        .args(["submit", "--module"])
        .arg(bad_spec.as_os_str()));
    assert_eq!(code(&out), 5);
    assert!(
        text(&out.stderr).contains("module refused"),
        "{}",
        text(&out.stderr)
    );
    let out = run(zorilla(node).args(["--node", "127.0.0.1:1", "list"]));
    assert_eq!(code(&out), 3);
    assert!(text(&out.stderr).contains("is zorilla-node running"));
}

/// Four ranks whose lines reach the home in pieces, mixed with the other
/// ranks' pieces (`pieces`: a barrier after every piece): `submit
/// --follow` and `logs` show each rank's lines whole, and `logs --ranks`
/// the same lines after their rank.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_shows_each_ranks_lines_whole() {
    let grid = grid(2, 2);
    let node = &grid.nodes[0];
    const LINES: u32 = 4;
    let out = run(zorilla(node).args([
        "submit",
        "--module",
        examples().join("wasm/pieces.wasm").to_str().unwrap(),
        "--arg",
        &LINES.to_string(),
        "--workers",
        "4",
        "--follow",
    ]));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let job = job_named_in(&stderr);
    let expected = |prefixed: bool| {
        let mut lines: Vec<String> = (0..4)
            .flat_map(|rank| {
                (0..LINES).map(move |k| {
                    let line = format!("rank {rank} line {k}: first half, second half");
                    if prefixed {
                        format!("[{rank}] {line}")
                    } else {
                        line
                    }
                })
            })
            .collect();
        lines.sort();
        lines
    };
    let sorted = |bytes: &[u8]| {
        let mut lines: Vec<String> = text(bytes).lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    assert_eq!(sorted(&out.stdout), expected(false), "submit --follow");
    let out = run(zorilla(node).args(["logs", &job]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(sorted(&out.stdout), expected(false), "logs");
    let out = run(zorilla(node).args(["logs", "--ranks", &job]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(sorted(&out.stdout), expected(true), "logs --ranks");
}

/// Time limits end workers with a sentence a user understands: the node
/// owner's CPU cap, a job's own (smaller) CPU limit, and a job's
/// wall-clock limit on a worker that waits without computing (which the
/// CPU cap does not touch); and a trap, with the function it happened in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_says_which_time_limit_ended_a_worker() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::start_with(
        &dir.path().join("n0"),
        &format!("test-{}", std::process::id()),
        None,
        4,
        "127.0.0.1",
        &["--max-cpu-time-secs".into(), "2".into()],
    );
    let module = |name: &str| {
        examples()
            .join(format!("wasm/{name}.wasm"))
            .to_str()
            .unwrap()
            .to_owned()
    };
    let submit = |name: &str, extra: &[&str]| {
        let module = module(name);
        zorilla(&node)
            .args(["submit", "--wait", "--module", module.as_str()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run zorilla")
    };
    // All four at once (the node offers four cores).
    let capped = submit("spin", &[]);
    let asked = submit("spin", &["--cpu-time-secs", "1"]);
    let waiting = submit("idle", &["--wall-time-secs", "1"]);
    let trapped = submit("trap", &[]);
    for (child, sentence) in [
        (capped, "used its CPU-time limit of 2 s"),
        (asked, "used its CPU-time limit of 1 s"),
        (waiting, "ran past its wall-clock limit of 1 s"),
        (
            trapped,
            "crashed: wasm `unreachable` instruction executed in function explode",
        ),
    ] {
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("failed after") && stderr.contains(sentence),
            "expected {sentence:?}:\n{stderr}\n{}",
            node.log_tail()
        );
    }
}

/// A job that cannot get its workers: `status` says why (how far the
/// floods went, who answered, and what they said); Ctrl-C on `submit
/// --wait` asks whether to cancel, and "y" cancels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_explains_a_pending_job_and_ctrl_c_cancels_it() {
    let grid = grid(2, 1);
    let node = &grid.nodes[0];
    let mut child = zorilla(node)
        .args([
            "submit",
            "--module",
            examples().join("wasm/idle.wasm").to_str().unwrap(),
            "--workers",
            "5",
            "--lifetime-secs",
            "60",
            "--wait",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first progress line comes after the interrupt handler is set.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut job = None;
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap() > 0 {
        if let Some(rest) = line.strip_prefix("job ")
            && rest.contains("scheduling")
        {
            job = Some(rest[..16].to_string());
            break;
        }
        line.clear();
    }
    let job = job.expect("a progress line");

    // Status explains: 2 of 5 offered, by 2 nodes, both one-core.
    let start = Instant::now();
    let status = loop {
        let out = run(zorilla(node).args(["status", &job]));
        let status = text(&out.stdout);
        if status.contains("2 nodes answered") {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.contains("phase     scheduling"), "{status}");
    assert!(status.contains("0 of 5 workers granted"), "{status}");
    assert!(status.contains("offers for 2 workers"), "{status}");

    // Ctrl-C, then "y".
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"y\n").unwrap();
    drop(stdin);
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let exit = child.wait().unwrap();
    assert_eq!(exit.code(), Some(1), "{rest}");
    assert!(
        rest.contains("cancel job") && rest.contains("cancelled"),
        "{rest}"
    );
    let mut client = node.client().await;
    let id = u64::from_str_radix(&job, 16).unwrap();
    assert_eq!(client.status(id).await.unwrap().phase, JobPhase::Cancelled);
    assert_eq!(JobId(id).to_string(), job);
}

/// A node whose log goes to a file (as under a service manager that is not
/// journald, or `2> node.log`) writes plain text: no terminal colour codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_logging_to_a_file_writes_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::start(&dir.path().join("n0"), "plain-log", None, 1);
    let mut client = node.client().await;
    let name = NamedFile {
        name: "name.txt".into(),
        data: b"log".to_vec(),
    };
    let job = client
        .submit(JobRequest::default(), wasm("hello"), vec![name])
        .await
        .unwrap();
    wait_completed(&mut client, job, Duration::from_secs(60)).await;
    let log = std::fs::read_to_string(dir.path().join("n0").join("node.log")).unwrap();
    assert!(log.contains("job ended"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in the log file:\n{log}"
    );
}

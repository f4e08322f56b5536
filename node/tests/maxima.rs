//! The documented maxima (`zorilla_core::limits`) at a real node's doors:
//! submissions beyond them are refused with one sentence and the node keeps
//! answering; the CLI refuses such a spec before it sends anything; the
//! largest valid job runs on a worker of another node; and a hostile peer's
//! out-of-range adverts and messages do not crash the node.

mod common;
#[path = "../../overlay/tests/raw_peer/mod.rs"]
#[allow(dead_code)]
mod raw_peer;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{TestNode, nqueens, stdout_of, wait_completed, wasm};
use libp2p::{Multiaddr, PeerId};
use raw_peer::{Protocol, RawEvent, RawPeer};
use serde::Serialize;
use zorilla_core::advert::{
    Advert, FloodHeader, HoldId, JobId, Message, Phase, Placed, Strategy, WorkerCount,
};
use zorilla_core::flood::FloodId;
use zorilla_core::limits;
use zorilla_core::resources::{Machine, Resources};
use zorilla_node::client::{Client, ClientError};
use zorilla_node::protocol::{ErrorKind, JobPhase, JobRequest, NamedFile};

fn file(name: &str) -> NamedFile {
    NamedFile {
        name: name.into(),
        data: b"x".to_vec(),
    }
}

/// Submits and expects a refusal whose sentence contains `expected`.
async fn refused(
    client: &mut Client,
    request: JobRequest,
    module: Vec<u8>,
    inputs: Vec<NamedFile>,
    expected: &str,
) {
    match client.submit(request.clone(), module, inputs).await {
        Err(ClientError::Node {
            kind: ErrorKind::BadRequest,
            message,
        }) => {
            assert!(message.contains(expected), "{message:?} lacks {expected:?}");
            assert!(!message.contains('\n'), "{message:?}");
        }
        other => panic!("expected a refusal with {expected:?}, got {other:?}"),
    }
    // The node keeps answering.
    client.node_info().await.expect("the node still answers");
}

/// Lifetimes near 2^64 seconds (which made the home panic, and then every
/// peer that received the advert), and everything item 5 of issue 12 found
/// accepted but unable to start: each refused with its sentence, and the
/// node still runs a job afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submissions_that_cannot_work_are_refused_and_the_node_keeps_answering() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::start(&dir.path().join("n0"), "limits-submit", None, 1);
    let mut client = node.client().await;
    let ok = JobRequest::default();
    let hello = wasm("hello");
    let long = "n".repeat(256);
    let too_many: Vec<NamedFile> = (0..=limits::MAX_INPUTS)
        .map(|i| file(&i.to_string()))
        .collect();
    let cases: Vec<(JobRequest, Vec<u8>, Vec<NamedFile>, &str)> = vec![
        (
            JobRequest {
                lifetime_secs: u64::MAX,
                ..ok.clone()
            },
            hello.clone(),
            vec![],
            "lifetime is",
        ),
        (
            JobRequest {
                lifetime_secs: u64::MAX - 1,
                ..ok.clone()
            },
            hello.clone(),
            vec![],
            "lifetime is",
        ),
        (
            JobRequest {
                args: vec!["x".repeat(1 << 20)],
                ..ok.clone()
            },
            hello.clone(),
            vec![],
            "arguments' total size in bytes is 1048576, but must be at most 65536",
        ),
        (ok.clone(), hello.clone(), vec![file("a\0b")], "NUL"),
        (ok.clone(), hello.clone(), vec![file(&long)], "255 bytes"),
        (ok.clone(), hello.clone(), vec![file("a/b")], "'/'"),
        (ok.clone(), hello.clone(), vec![file("..")], "directory"),
        (ok.clone(), hello.clone(), vec![file("")], "empty"),
        (
            ok.clone(),
            hello.clone(),
            vec![file("a"), file("a")],
            "two input files",
        ),
        (ok.clone(), hello.clone(), too_many, "number of input files"),
        (
            JobRequest {
                memory_mib: 0,
                ..ok.clone()
            },
            hello.clone(),
            vec![],
            "memory_mib is 0",
        ),
        (
            JobRequest {
                cores: 0,
                ..ok.clone()
            },
            hello.clone(),
            vec![],
            "cores is 0",
        ),
        (
            JobRequest {
                cores: limits::MAX_CORES + 1,
                ..ok.clone()
            },
            hello.clone(),
            vec![],
            "cores is 1025",
        ),
        (
            JobRequest {
                min_workers: 0,
                ..ok.clone()
            },
            hello.clone(),
            vec![],
            "at least one worker",
        ),
        (
            JobRequest {
                min_workers: 3,
                max_workers: 2,
                ..ok.clone()
            },
            hello.clone(),
            vec![],
            "more than max workers",
        ),
        (
            JobRequest {
                wall_time_secs: u64::MAX,
                ..ok.clone()
            },
            hello.clone(),
            vec![],
            "wall_time_secs is",
        ),
        (ok.clone(), Vec::new(), vec![], "module is empty"),
    ];
    for (request, module, inputs, expected) in cases {
        refused(&mut client, request, module, inputs, expected).await;
    }
    let job = client
        .submit(nqueens(1, 8), wasm("nqueens"), vec![])
        .await
        .unwrap();
    wait_completed(&mut client, job, Duration::from_secs(60)).await;
}

/// The same refusals through `zorilla submit` with a spec file: exit code
/// 2, one sentence, and nothing sent (the node given does not exist, which
/// would be exit code 3).
#[test]
fn the_cli_refuses_an_out_of_range_spec_before_sending() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("m.wasm");
    std::fs::write(&module, wasm("hello")).unwrap();
    // TOML integers stop at 2^63 - 1.
    for (field, expected) in [
        ("lifetime_secs = 9223372036854775807", "lifetime is"),
        ("memory_mib = 0", "memory_mib is 0"),
        ("cores = 0", "cores is 0"),
        ("wall_time_secs = 9223372036854775807", "wall_time_secs is"),
        ("args = [\"a\\u0000b\"]", "NUL"),
        ("workers = 10001", "at most 10000 per job"),
    ] {
        let spec = dir.path().join("job.toml");
        std::fs::write(&spec, format!("module = \"m.wasm\"\n{field}\n")).unwrap();
        let out = common::cli()
            .env("ZORILLA_NODE", "127.0.0.1:1")
            .env_remove("ZORILLA_TOKEN")
            .env_remove("ZORILLA_STATE_DIR")
            .arg("submit")
            .arg(&spec)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{field}: {stderr}");
        assert!(stderr.contains(expected), "{field}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{field}: {stderr}");
    }
}

/// The largest valid arguments (the job's copy is then at its largest but
/// for the placement) run on a worker of another node: what can be
/// submitted can be carried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_valid_arguments_run_on_a_worker_of_another_node() {
    let dir = tempfile::tempdir().unwrap();
    let network = format!("limits-args-{}", std::process::id());
    // The home runs no workers itself.
    let no_workers = ["--max-workers-per-job".to_string(), "0".into()];
    let home = TestNode::start_with(
        &dir.path().join("n0"),
        &network,
        None,
        1,
        "127.0.0.1",
        &no_workers,
    );
    let other = TestNode::start(&dir.path().join("n1"), &network, Some(&home.listen), 1);
    let mut client = home.client().await;
    let per_arg = limits::MAX_ARGS_BYTES / limits::MAX_ARGS;
    let args: Vec<String> = (0..limits::MAX_ARGS)
        .map(|i| format!("{i:0>width$}", width = per_arg))
        .collect();
    let request = JobRequest {
        args: args.clone(),
        lifetime_secs: 60,
        ..JobRequest::default()
    };
    // hello reads its name from /inputs/name.txt.
    let name = NamedFile {
        name: "name.txt".into(),
        data: b"grid".to_vec(),
    };
    let job = client
        .submit(request, wasm("hello"), vec![name])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, Duration::from_secs(60)).await;
    assert_eq!(status.ranks[&0].node, other.peer, "{status:?}");
    let page = client.logs_page(job, 0, 0).await.unwrap();
    let out = stdout_of(&page.chunks);
    assert!(out.contains(&args[0]) && out.contains(&args[255]), "{out}");

    // One byte more is refused at submit, not lost at the workers.
    let mut request = JobRequest {
        args,
        ..JobRequest::default()
    };
    request.args[0].push('x');
    let err = client
        .submit(request, wasm("hello"), vec![])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("at most 65536"), "{err}");
}

// ----- a hostile peer -----

/// The overlay's flood frame, as its wire contract says (field for field).
#[derive(Serialize)]
struct FloodFrame {
    id: FloodId,
    origin: PeerId,
    header: FloodHeader,
    #[serde(with = "serde_bytes")]
    payload: Vec<u8>,
}

/// The overlay's rpc request carrying an application request.
#[derive(Serialize)]
enum RpcRequest {
    App(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// The node's peer requests that the test sends (same names, same shapes).
#[derive(Serialize)]
enum PeerRpc {
    Sched(SchedRpc),
}

/// The node's scheduling requests (same names, same shapes).
#[derive(Serialize)]
enum SchedRpc {
    Message(Message<PeerId>),
}

fn cbor<T: Serialize>(value: &T) -> Vec<u8> {
    let mut buf = Vec::new();
    ciborium::into_writer(value, &mut buf).unwrap();
    buf
}

fn hostile_advert(
    job: u64,
    home: PeerId,
    tweak: impl FnOnce(&mut Advert<PeerId>),
) -> Advert<PeerId> {
    let mut advert = Advert {
        job: JobId(job),
        home,
        per_worker: Resources::new(1, 64, 0),
        workers: WorkerCount::rigid(1),
        strategy: Strategy::Spread,
        // The advert: a lifetime just below 2^64 s.
        expires_in: Duration::from_secs(u64::MAX - 1),
        flood: FloodHeader {
            seq: 0,
            ttl: 1,
            latency_budget: None,
            path_rtt: Duration::ZERO,
        },
        owner: None,
        kind: zorilla_core::advert::WorkKind::Wasm,
        priority: 0,
        preemptible: false,
    };
    tweak(&mut advert);
    advert
}

/// Waits until the node's log has `count` lines containing `what`.
fn wait_log(node: &TestNode, what: &str, count: usize) {
    let start = Instant::now();
    loop {
        let log = std::fs::read_to_string(node.dir.join("node.log")).unwrap_or_default();
        if log.lines().filter(|l| l.contains(what)).count() >= count {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no {count} lines with {what:?}; log ends:\n{}",
            node.log_tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A peer sends adverts whose expiry is near 2^64 s (and other extreme
/// fields), an offer of `u32::MAX` workers at `Duration::MAX` for a job the
/// node is home to, and a placement with rank `u32::MAX`: each is refused
/// (and logged), and the node keeps running jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_peers_extreme_values_do_not_crash_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let network = format!("limits-hostile-{}", std::process::id());
    let node = TestNode::start(&dir.path().join("n0"), &network, None, 1);
    let node_id: PeerId = node.peer.parse().unwrap();
    let mut client = node.client().await;
    // A job the node is home to, which waits for a second worker.
    let waiting = client
        .submit(
            JobRequest {
                min_workers: 2,
                max_workers: 2,
                lifetime_secs: 120,
                ..JobRequest::default()
            },
            wasm("idle"),
            vec![],
        )
        .await
        .unwrap();

    let mut raw = RawPeer::start(&network);
    let me = raw.peer;
    raw.dial(node.listen.parse::<Multiaddr>().unwrap())
        .await
        .unwrap();
    raw.expect(RawEvent::Connected(node_id), Duration::from_secs(20))
        .await;

    let adverts = [
        hostile_advert(1, me, |_| {}),
        hostile_advert(2, me, |a| a.expires_in = Duration::MAX),
        hostile_advert(3, me, |a| {
            a.expires_in = Duration::from_secs(10);
            a.workers = WorkerCount::rigid(u32::MAX);
        }),
        hostile_advert(5, me, |a| {
            a.expires_in = Duration::from_secs(10);
            a.per_worker = Resources::new(u32::MAX, u64::MAX, u64::MAX);
        }),
        hostile_advert(4, me, |a| {
            a.expires_in = Duration::from_secs(10);
            a.flood.path_rtt = Duration::MAX;
            a.flood.latency_budget = Some(Duration::MAX);
        }),
    ];
    let offer = PeerRpc::Sched(SchedRpc::Message(Message::Offer {
        job: JobId(waiting),
        hold: HoldId(u32::MAX),
        workers: u32::MAX,
        distance: Duration::MAX,
        residue: Resources::new(u32::MAX, u64::MAX, u64::MAX),
        machine: Machine {
            cores: u32::MAX,
            busy: u32::MAX,
            speed: u32::MAX,
            reach: zorilla_core::resources::Reachability::BehindNat(std::net::IpAddr::V6(
                std::net::Ipv6Addr::from([0xff; 16]),
            )),
        },
    }));
    let placement = PeerRpc::Sched(SchedRpc::Message(Message::Placement {
        job: JobId(waiting),
        phase: Phase::Running,
        placement: BTreeMap::from([(
            u32::MAX,
            Placed {
                node: me,
                incarnation: u32::MAX,
            },
        )]),
        replaced: vec![u32::MAX],
    }));
    // The node delivers floods only from a peer it has identified: send
    // the adverts until it has (each refusal is logged; adverts cost the
    // forwarding neighbour no strike). Then the requests, once: each is a
    // strike, and five get the raw peer banned.
    let start = Instant::now();
    loop {
        for advert in &adverts {
            let frame = FloodFrame {
                id: FloodId {
                    job: advert.job,
                    seq: 0,
                },
                origin: me,
                header: advert.flood,
                payload: cbor(advert),
            };
            raw.send(Protocol::Flood, node_id, &cbor(&frame)).await;
        }
        let log = std::fs::read_to_string(node.dir.join("node.log")).unwrap_or_default();
        if log.lines().filter(|l| l.contains("advert refused")).count() >= adverts.len() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not every advert was refused; log ends:\n{}",
            node.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for rpc in [&offer, &placement] {
        raw.send(Protocol::Rpc, node_id, &cbor(&RpcRequest::App(cbor(rpc))))
            .await;
    }
    wait_log(&node, "advert expiry", 2);
    wait_log(&node, "max workers is 4294967295", 1);
    wait_log(&node, "latency budget is", 1);
    wait_log(&node, "cores is 4294967295", 1);
    wait_log(&node, "offered workers is 4294967295", 1);
    wait_log(&node, "rank is 4294967295", 1);

    // The node is alive and well: it answers, and runs a job.
    let status = client.status(waiting).await.unwrap();
    assert_eq!(status.phase, JobPhase::Scheduling, "{status:?}");
    assert!(status.ranks.is_empty(), "{status:?}");
    client.cancel(waiting).await.unwrap();
    let job = client
        .submit(nqueens(1, 8), wasm("nqueens"), vec![])
        .await
        .unwrap();
    wait_completed(&mut client, job, Duration::from_secs(60)).await;
}

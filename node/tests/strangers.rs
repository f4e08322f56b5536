//! What a stranger can do to a job (issue 28), on real nodes with a
//! hand-made peer (`raw_peer`) that sends what no real node would: naming
//! itself a job's home under a huge term changes nothing and is reported;
//! inviting a node to hold a copy of a job it knows the id of takes no copy
//! slot, so the job's real home places its copy there later; asking the
//! home for the job's copy and files, or a checkpoint holder for a rank's
//! checkpoint, gets it nothing.

mod common;
#[path = "../../overlay/tests/raw_peer/mod.rs"]
#[allow(dead_code)]
mod raw_peer;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{TestNode, wait_for, wait_for_neighbours, wasm};
use libp2p::{Multiaddr, PeerId};
use raw_peer::{Protocol, RawEvent, RawPeer};
use serde::Serialize;
use sha2::Digest;
use zorilla_core::advert::JobId;
use zorilla_core::node::JobEntry;
use zorilla_core::replica::{Epoch, Msg};
use zorilla_node::protocol::{JobPhase, JobRequest};

type ReplicaMsg = Msg<PeerId, JobEntry<PeerId>>;

/// The overlay's rpc request carrying an application request.
#[derive(Serialize)]
enum RpcRequest {
    App(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// The node's peer requests that the test sends (same names, same shapes).
#[derive(Serialize)]
enum PeerRpc {
    Member(MemberRpc),
    File(FileRpc),
    Replica(ReplicaRpc),
    Checkpoint(CheckpointRpc),
}

/// A member's request to a job's home (same names, same shapes).
#[derive(Serialize)]
enum MemberRpc {
    GetJob { job: u64 },
}

/// A request for a file (same names, same shapes).
#[derive(Serialize)]
enum FileRpc {
    GetBlock {
        sha256: String,
        offset: u64,
        len: u32,
    },
}

/// A replica message (same names, same shapes).
#[derive(Serialize)]
struct ReplicaRpc {
    job: u64,
    msg: Box<ReplicaMsg>,
    copy: Option<Box<JobCopy>>,
}

/// The node's checkpoint requests (same names, same shapes).
#[derive(Serialize)]
enum CheckpointRpc {
    Manifest {
        job: u64,
        rank: u32,
        seq: Option<u64>,
        #[serde(with = "serde_bytes")]
        ticket: Vec<u8>,
    },
    Get {
        job: u64,
        rank: u32,
        hash: [u8; 32],
        #[serde(with = "serde_bytes")]
        ticket: Vec<u8>,
    },
}

/// The node's job copy (same names, same shapes).
#[derive(Serialize)]
struct JobCopy {
    request: JobRequest,
    module: FileRef,
    inputs: Vec<FileRef>,
    submitted_unix: u64,
    owner: Option<String>,
    owner_proof: Option<()>,
    origin: Option<Origin>,
}

#[derive(Serialize)]
struct FileRef {
    name: String,
    sha256: String,
    size: u64,
}

#[derive(Serialize)]
struct Origin {
    home: PeerId,
    nonce: [u8; 16],
}

fn cbor<T: Serialize>(value: &T) -> Vec<u8> {
    let mut buf = Vec::new();
    ciborium::into_writer(value, &mut buf).unwrap();
    buf
}

/// Sends `rpc` to `to` as the node's rpc protocol carries it.
async fn send(raw: &RawPeer, to: PeerId, rpc: &PeerRpc) {
    raw.send(Protocol::Rpc, to, &cbor(&RpcRequest::App(cbor(rpc))))
        .await;
}

/// The raw peer, connected to each of `nodes`.
async fn raw_peer_at(network: &str, nodes: &[&TestNode]) -> RawPeer {
    let mut raw = RawPeer::start(network);
    for node in nodes {
        raw.dial(node.listen.parse::<Multiaddr>().unwrap())
            .await
            .unwrap();
        raw.expect(
            RawEvent::Connected(node.peer.parse().unwrap()),
            Duration::from_secs(20),
        )
        .await;
    }
    raw
}

fn log_of(node: &TestNode) -> String {
    std::fs::read_to_string(node.dir.join("node.log")).unwrap_or_default()
}

/// Waits until `node`'s log has a line with every one of `parts`.
async fn wait_log(node: &TestNode, parts: &[&str], deadline: Duration) {
    let start = Instant::now();
    while !log_of(node)
        .lines()
        .any(|l| parts.iter().all(|p| l.contains(p)))
    {
        assert!(
            start.elapsed() < deadline,
            "{}: no log line with {parts:?} within {deadline:?}; log ends:\n{}",
            node.peer,
            node.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The attack: a stranger sends a job's home and the node running
/// its other rank an `Append` (with `end: 0`, which used to drop every
/// copy's log) and an `Alive`, both naming itself primary under term 2^62.
/// Each node refuses them and reports the stranger; the home stays the
/// job's home, runs it on, and ends it when its owner cancels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_naming_itself_a_jobs_home_changes_nothing_and_is_reported() {
    let grid = common::grid(2, 1);
    let (home, member) = (&grid.nodes[0], &grid.nodes[1]);
    wait_for_neighbours(&grid.nodes, 1, Duration::from_secs(30)).await;
    let mut client = home.client().await;
    let request = JobRequest {
        min_workers: 2,
        max_workers: 2,
        lifetime_secs: 120,
        ..JobRequest::default()
    };
    let job = client.submit(request, wasm("idle"), vec![]).await.unwrap();
    wait_for(
        &mut client,
        job,
        Duration::from_secs(30),
        "both ranks running",
        |s| s.phase == JobPhase::Running && s.ranks.len() == 2,
    )
    .await;

    let raw = raw_peer_at(&grid.network, &[home, member]).await;
    let epoch = Epoch {
        term: 1 << 62,
        primary: raw.peer,
    };
    let append = ReplicaMsg::Append {
        epoch: epoch.clone(),
        after: 0,
        after_epoch: None,
        entries: Vec::new(),
        copies: None,
        roster: None,
        version: 0,
        end: 0,
        mandate: None,
    };
    let alive = ReplicaMsg::Alive {
        epoch,
        mandate: None,
    };
    for node in [home, member] {
        for msg in [&append, &alive] {
            let rpc = PeerRpc::Replica(ReplicaRpc {
                job,
                msg: Box::new(msg.clone()),
                copy: None,
            });
            send(&raw, node.peer.parse().unwrap(), &rpc).await;
        }
    }
    let named = format!("named itself the home of job {}", JobId(job));
    for node in [home, member] {
        wait_log(
            node,
            &["dropped a bad message", &raw.peer.to_string(), &named],
            Duration::from_secs(20),
        )
        .await;
    }
    for node in [home, member] {
        let log = log_of(node);
        for moved in ["stepped down", "home moved"] {
            assert!(!log.contains(moved), "{}: {moved}:\n{log}", node.peer);
        }
    }
    // Still the job's home: it runs the job and its owner ends it there.
    let status = client.status(job).await.unwrap();
    assert_eq!(status.phase, JobPhase::Running, "{status:?}");
    client.cancel(job).await.unwrap();
    wait_for(
        &mut client,
        job,
        Duration::from_secs(30),
        "cancelled",
        |s| s.phase == JobPhase::Cancelled,
    )
    .await;
}

/// A stranger that knows a job's id invites a node that holds no copy of
/// it to hold one, under an epoch of its own and with an origin that does
/// not make the job's id: the node refuses and reports it, and holds
/// nothing. When the job's real home later places a copy there (one of
/// its copies died), the node takes it, and neither reports the other.
/// Before job ids were bound to their first home, the node held the
/// stranger's copy, answered the real home with the stranger's epoch, and
/// the home reported it as misbehaving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_invitation_takes_no_copy_slot_from_the_jobs_home() {
    let mut grid = common::grid(5, 1);
    wait_for_neighbours(&grid.nodes[..1], 4, Duration::from_secs(60)).await;
    let mut client = grid.nodes[0].client().await;
    // A job that waits for ever (more workers than the grid has) runs
    // nowhere, so its home places three extra copies among its four
    // neighbours.
    let request = JobRequest {
        min_workers: 10,
        max_workers: 10,
        lifetime_secs: 300,
        ..JobRequest::default()
    };
    let job = client.submit(request, wasm("idle"), vec![]).await.unwrap();
    let id = JobId(job).to_string();
    let holding = |node: &TestNode| {
        log_of(node)
            .lines()
            .any(|l| l.contains("holding a copy of the job's state") && l.contains(&id))
    };
    let start = Instant::now();
    let holders = loop {
        let holders: Vec<usize> = (1..5).filter(|&i| holding(&grid.nodes[i])).collect();
        if holders.len() == 3 {
            break holders;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "copies held on nodes {holders:?}; the home's log ends:\n{}",
            grid.nodes[0].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let spare = (1..5).find(|i| !holders.contains(i)).unwrap();
    let spare_peer: PeerId = grid.nodes[spare].peer.parse().unwrap();

    let raw = raw_peer_at(&grid.network, &[&grid.nodes[spare]]).await;
    let epoch = Epoch {
        term: 1,
        primary: raw.peer,
    };
    let invitation = PeerRpc::Replica(ReplicaRpc {
        job,
        msg: Box::new(ReplicaMsg::Append {
            epoch,
            after: 0,
            after_epoch: None,
            entries: Vec::new(),
            copies: Some(BTreeSet::from([spare_peer])),
            roster: None,
            version: 1,
            end: 0,
            mandate: None,
        }),
        copy: Some(Box::new(JobCopy {
            request: JobRequest::default(),
            module: FileRef {
                name: "module.wasm".into(),
                sha256: "ab".repeat(32),
                size: 8,
            },
            inputs: Vec::new(),
            submitted_unix: 0,
            owner: None,
            owner_proof: None,
            origin: Some(Origin {
                home: raw.peer,
                nonce: [7; 16],
            }),
        })),
    });
    send(&raw, spare_peer, &invitation).await;
    let spare_node = &grid.nodes[spare];
    wait_log(
        spare_node,
        &[
            "dropped a bad message",
            &raw.peer.to_string(),
            "without the first home and nonce",
        ],
        Duration::from_secs(20),
    )
    .await;
    assert!(!holding(spare_node), "{}", spare_node.log_tail());

    // One copy dies: the home places its copy on the spare node, which
    // takes it.
    grid.nodes[holders[0]].kill();
    let spare_node = &grid.nodes[spare];
    wait_log(
        spare_node,
        &["holding a copy of the job's state", &id],
        Duration::from_secs(60),
    )
    .await;
    let home = &grid.nodes[0];
    let home_log = log_of(home);
    assert!(
        !home_log
            .lines()
            .any(|l| l.contains("dropped a bad message") && l.contains(&spare_node.peer)),
        "the home took its copy for a liar:\n{home_log}"
    );
    let spare_log = log_of(spare_node);
    assert!(
        !spare_log
            .lines()
            .any(|l| l.contains("dropped a bad message") && l.contains(&home.peer)),
        "the copy took its home for a liar:\n{spare_log}"
    );
    client.cancel(job).await.unwrap();
}

/// A stranger that knows a job's id asks its home for the job's copy and
/// for its module, and a node holding a rank's checkpoint for the rank's
/// manifest and a block (with a made-up ticket): each is refused, and the
/// nodes say so. (Before issue 28 every one was answered.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_gets_nothing_of_a_job_from_its_home_or_a_checkpoint_holder() {
    let grid = common::grid(3, 1);
    wait_for_neighbours(&grid.nodes, 2, Duration::from_secs(30)).await;
    let mut client = grid.nodes[0].client().await;
    // `heat` saves a checkpoint every 50 steps, each held by other nodes.
    let request = JobRequest {
        min_workers: 2,
        max_workers: 2,
        lifetime_secs: 120,
        args: ["200", "100000", "50", "2000"].map(String::from).to_vec(),
        ..JobRequest::default()
    };
    let module = wasm("heat");
    let sha256 = hex::encode(sha2::Sha256::digest(&module));
    let job = client.submit(request, module, vec![]).await.unwrap();
    let id = JobId(job).to_string();
    // A node that logged where a rank's checkpoint went: its holders.
    let start = Instant::now();
    let (rank, holder) = loop {
        let found = grid.nodes.iter().find_map(|n| {
            log_of(n).lines().find_map(|l| {
                if !(l.contains("checkpoint stored") && l.contains(&id)) {
                    return None;
                }
                let word = |key: &str| {
                    l.split_whitespace()
                        .find_map(|w| w.strip_prefix(key).map(str::to_owned))
                };
                let rank: u32 = word("rank=")?.parse().ok()?;
                let holder = word("holders=")?.split(',').next()?.to_owned();
                Some((rank, holder))
            })
        });
        if let Some(found) = found {
            break found;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no checkpoint stored; the home's log ends:\n{}",
            grid.nodes[0].log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let home = &grid.nodes[0];
    let holder = grid
        .nodes
        .iter()
        .find(|n| n.peer == holder)
        .expect("the holder is a node of the grid");

    let raw = raw_peer_at(&grid.network, &[home, holder]).await;
    let me = raw.peer.to_string();
    let home_peer: PeerId = home.peer.parse().unwrap();
    send(&raw, home_peer, &PeerRpc::Member(MemberRpc::GetJob { job })).await;
    let block = PeerRpc::File(FileRpc::GetBlock {
        sha256: sha256.clone(),
        offset: 0,
        len: 1024,
    });
    send(&raw, home_peer, &block).await;
    let holder_peer: PeerId = holder.peer.parse().unwrap();
    let manifest = PeerRpc::Checkpoint(CheckpointRpc::Manifest {
        job,
        rank,
        seq: None,
        ticket: vec![0; 64],
    });
    send(&raw, holder_peer, &manifest).await;
    let get = PeerRpc::Checkpoint(CheckpointRpc::Get {
        job,
        rank,
        hash: [0; 32],
        ticket: Vec::new(),
    });
    send(&raw, holder_peer, &get).await;

    let deadline = Duration::from_secs(20);
    wait_log(
        home,
        &[
            "refused",
            &me,
            &format!("job {id} of which it holds no part"),
        ],
        deadline,
    )
    .await;
    wait_log(
        home,
        &["refused", &me, &format!("file {sha256}, of no job")],
        deadline,
    )
    .await;
    let leave = format!("checkpoints of rank {rank} of job {id} without the home's leave");
    let start = Instant::now();
    while log_of(holder)
        .lines()
        .filter(|l| l.contains(&me) && l.contains(&leave))
        .count()
        < 2
    {
        assert!(
            start.elapsed() < deadline,
            "the holder did not refuse both; its log ends:\n{}",
            holder.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.cancel(job).await.unwrap();
}

//! Native jobs (issue 32) against real nodes: whose native jobs a node
//! runs is its owner's choice, and every other node declines with a reason
//! its home shows; MPICH and Open MPI programs wired up by the nodes'
//! PMI-1 servers; native checkpoints with replacement and rollback, and native ranks
//! through their home's failover.

mod common;

use std::time::Duration;

use common::{Net, wait_for};
use zorilla_core::advert::WorkKind;
use zorilla_core::node::LostPolicy;
use zorilla_node::client::{Client, ClientError};
use zorilla_node::owner::UserKey;
use zorilla_node::protocol::{ErrorKind, JobPhase, JobRequest, JobStatus};

async fn connect(node: &common::TestNode, user: &UserKey) -> Client {
    Client::connect_with(node.client.as_str(), None, "native test")
        .await
        .unwrap()
        .as_user(user.clone())
}

/// A native job of this machine's `echo`, saying hello.
fn native_echo() -> (JobRequest, Vec<u8>) {
    let exe = std::fs::read("/bin/echo").unwrap();
    let arch = zorilla_node::native::executable_arch(&exe).unwrap();
    let request = JobRequest {
        kind: WorkKind::Native(arch),
        lifetime_secs: 60,
        args: ["hello", "from", "a", "native", "worker"]
            .map(String::from)
            .to_vec(),
        ..JobRequest::default()
    };
    (request, exe)
}

/// Waits until the home's report of `job` counts a decline for `reason`.
async fn wait_declined(client: &mut Client, job: u64, reason: &str) {
    let status = wait_for(client, job, Duration::from_secs(30), reason, |s| {
        s.pending
            .as_ref()
            .is_some_and(|p| p.declines.get(reason).is_some_and(|n| *n >= 1))
    })
    .await;
    assert_eq!(status.phase, JobPhase::Scheduling, "{status:?}");
    assert!(status.ranks.is_empty(), "nothing runs: {status:?}");
}

/// Three nodes: the home (node 0, no cores), node 1 whose owner runs no
/// native jobs (the default), node 2 whose owner runs Alice's. Bob's native
/// job is declined by both, each saying why; Alice's runs on node 2, in
/// the kernel's sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_node_whose_owner_lists_the_user_runs_a_native_job_and_the_home_says_why() {
    let (alice, bob) = (UserKey::generate(), UserKey::generate());
    let alice_id = alice.id().to_string();
    let grid = common::sites_grid_of(
        Net::Loopback,
        &[3],
        |i| if i == 0 { 0 } else { 1 },
        |i| {
            if i == 2 {
                vec!["--native-user".into(), alice_id.clone()]
            } else {
                Vec::new()
            }
        },
    );
    common::wait_for_neighbours(&grid.nodes, 2, Duration::from_secs(30)).await;
    let (request, exe) = native_echo();

    let mut as_bob = connect(&grid.nodes[0], &bob).await;
    let bobs = as_bob
        .submit(request.clone(), exe.clone(), Vec::new())
        .await
        .unwrap();
    wait_declined(&mut as_bob, bobs, "owner runs no native jobs").await;
    wait_declined(
        &mut as_bob,
        bobs,
        "owner does not run this user's native jobs",
    )
    .await;

    let mut as_alice = connect(&grid.nodes[0], &alice).await;
    let alices = as_alice.submit(request, exe, Vec::new()).await.unwrap();
    let done = common::wait_completed(&mut as_alice, alices, Duration::from_secs(60)).await;
    assert_eq!(done.ranks[&0].node, grid.nodes[2].peer, "{done:?}");
    let logs = common::stdout_of(&as_alice.logs(alices).await.unwrap());
    assert_eq!(logs, "hello from a native worker\n");
}

/// A native executable is not taken for a WebAssembly module, nor a
/// module for a native executable: the submission is refused, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_whose_module_is_not_of_its_kind_is_refused_with_a_sentence() {
    let grid = common::grid(1, 1);
    let mut client = connect(&grid.nodes[0], &UserKey::generate()).await;
    let (native, exe) = native_echo();
    let refused = |r: Result<u64, ClientError>| match r {
        Err(ClientError::Node {
            kind: ErrorKind::BadRequest,
            message,
        }) => message,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let message = refused(client.submit(JobRequest::default(), exe, Vec::new()).await);
    assert!(message.contains("is a native executable"), "{message}");
    let message = refused(
        client
            .submit(native, common::wasm("nqueens"), Vec::new())
            .await,
    );
    assert!(message.contains("not an ELF executable"), "{message}");
}

/// A native worker cannot read the node's own state (its keys, its
/// database), and a cancel leaves none of its processes running, however
/// they hide (here a `sleep` it `exec`s into, with a mark no other process
/// has).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_worker_sees_nothing_of_its_node_and_a_cancel_ends_all_of_it() {
    let alice = UserKey::generate();
    let alice_id = alice.id().to_string();
    let grid = common::sites_grid_of(
        Net::Loopback,
        &[1],
        |_| 1,
        |_| vec!["--native-user".into(), alice_id.clone()],
    );
    let state = grid.nodes[0].dir.clone();
    let secret = state.join("secret-of-the-node");
    std::fs::write(&secret, "the node's own").unwrap();
    // Seconds no other process of the machine sleeps for.
    let mark = 900_000 + std::process::id() % 90_000;
    let script = format!(
        "cat {} 2>/dev/null || echo cannot read the node; ls {} 2>/dev/null || echo cannot list it; \
         echo started; exec sleep {mark}",
        secret.display(),
        state.display()
    );
    let request = JobRequest {
        args: vec!["-c".into(), script],
        ..native_echo().0
    };
    let sh = std::fs::read("/bin/sh").unwrap();
    let mut client = connect(&grid.nodes[0], &alice).await;
    let job = client.submit(request, sh, Vec::new()).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let out = loop {
        let out = common::stdout_of(&client.logs(job).await.unwrap());
        if out.contains("started") {
            break out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never started: {out:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(out, "cannot read the node\ncannot list it\nstarted\n");
    let sleeping = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .any(|cmd| cmd == format!("sleep\0{mark}\0").as_bytes())
    };
    assert!(sleeping(), "the worker's sleep runs");
    let cancelled = client.cancel(job).await.unwrap();
    assert_eq!(cancelled.phase, JobPhase::Cancelled);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while sleeping() {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker's sleep still runs 30 s after the cancel"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A home without cores (node 0) and `n` nodes of `cores` cores, each
/// running `user`'s native jobs (Open MPI's through the PMI-1 library),
/// all knowing each other.
async fn native_grid(user: &UserKey, n: usize, cores: u32) -> common::Grid {
    let id = user.id().to_string();
    let library = common::pmi_library().display().to_string();
    let grid = common::sites_grid_of(
        Net::Loopback,
        &[n + 1],
        |i| if i == 0 { 0 } else { cores },
        |_| {
            vec![
                "--native-user".into(),
                id.clone(),
                "--native-pmi-library".into(),
                library.clone(),
            ]
        },
    );
    common::wait_for_neighbours(&grid.nodes, n, Duration::from_secs(30)).await;
    grid
}

/// A native job of `exe` with `workers` ranks, losing them by `lost`.
fn native_job(exe: &[u8], workers: u32, lost: LostPolicy, args: &[&str]) -> JobRequest {
    JobRequest {
        kind: WorkKind::Native(zorilla_node::native::executable_arch(exe).unwrap()),
        lifetime_secs: 120,
        min_workers: workers,
        max_workers: workers,
        on_worker_lost: lost,
        args: args.iter().map(|a| a.to_string()).collect(),
        ..JobRequest::default()
    }
}

/// Waits until `job` is over, asking `client`; its status and stdout
/// (asserting that it completed).
async fn completed(client: &mut Client, job: u64) -> (JobStatus, String) {
    let start = std::time::Instant::now();
    let status = loop {
        // A status a node cannot give now (the job's home just moved) is
        // asked again.
        if let Ok(s) = client.status(job).await
            && s.phase.is_terminal()
        {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "job {job} not over in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let logs = client.logs(job).await.unwrap();
    let (out, err) = (common::stdout_of(&logs), common::stderr_of(&logs));
    assert_eq!(
        status.phase,
        JobPhase::Completed,
        "{status:?}\n{out}\n{err}"
    );
    (status, out)
}

/// Waits until the job's stdout has a line `done` says is there.
async fn wait_line(client: &mut Client, job: u64, what: &str, done: impl Fn(&str) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let out = common::stdout_of(&client.logs(job).await.unwrap());
        if out.lines().any(&done) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "no {what}: {out:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The values of `key=` in the stdout lines that start with `prefix`.
fn values(out: &str, prefix: &str) -> Vec<u32> {
    out.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|v| v.parse().ok())
        .collect()
}

/// An MPI program built with MPICH runs unchanged as a native job of 3
/// ranks, first all on one node, then on two: its ranks wire up through
/// the nodes' PMI-1 servers (issue 32, item 3) and pass a token round the
/// ring and sum their ranks over MPICH's own transport. (With three ranks
/// or more, Debian 12's MPICH 4.0.2 hangs in `MPI_Finalize` in most runs
/// without the fix the node preloads, `sdk/native/zorilla_ucx.c`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mpich_program_runs_unchanged_on_one_node_and_across_nodes() {
    let alice = UserKey::generate();
    let exe = common::build_native("mpicc.mpich", &["examples/native/mpi_ring.c"]);
    // One node of 3 cores, then two of 2.
    for (n, cores) in [(1, 3), (2, 2)] {
        let grid = native_grid(&alice, n, cores).await;
        let mut client = connect(&grid.nodes[0], &alice).await;
        ring_runs(&mut client, &exe, 3, n).await;
    }
}

/// Runs `exe`, an MPI ring (`examples/native/mpi_ring.*`), as a native
/// job of `ranks` through `client`, and checks that it completed on
/// `nodes` nodes, every rank printing its token and the sum of ranks.
async fn ring_runs(client: &mut Client, exe: &[u8], ranks: u32, nodes: usize) {
    let request = native_job(exe, ranks, LostPolicy::Fail, &[]);
    let job = client
        .submit(request, exe.to_vec(), Vec::new())
        .await
        .unwrap();
    let (status, out) = completed(client, job).await;
    // Rank 0 starts the token at 1; each other rank adds 1 on its way, and
    // the last sends it back to rank 0.
    let sum: u32 = (0..ranks).sum();
    for rank in 0..ranks {
        let token = if rank == 0 { ranks } else { rank + 1 };
        let line = format!("rank {rank} of {ranks}: token {token}, sum of ranks {sum}\n");
        assert!(out.contains(&line), "{nodes} nodes: no {line:?} in {out:?}");
    }
    let used: std::collections::BTreeSet<_> =
        status.ranks.values().map(|r| r.node.clone()).collect();
    assert_eq!(used.len(), nodes, "{status:?}");
}

/// The same program built with Open MPI (Debian's `mpicc`), unchanged, runs
/// as a native job of 3 ranks, on one node and across two: Open MPI's
/// "flux" component loads the node's PMI-1 library
/// (`sdk/native/zorilla_pmi.c`), which speaks to the same PMI-1 servers,
/// and the ranks then talk over Open MPI's TCP transport.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_mpi_program_runs_unchanged_on_one_node_and_across_nodes() {
    let alice = UserKey::generate();
    let exe = common::build_native("mpicc.openmpi", &["examples/native/mpi_ring.c"]);
    for (n, cores) in [(1, 3), (2, 2)] {
        let grid = native_grid(&alice, n, cores).await;
        let mut client = connect(&grid.nodes[0], &alice).await;
        ring_runs(&mut client, &exe, 3, n).await;
    }
}

/// The ring in C, C++ and Fortran (`examples/native/mpi_ring.*`), each
/// built unchanged with MPICH's and with Open MPI's compiler, runs as a
/// native job of 4 ranks on a grid of 4 nodes, a rank on each. Each MPICH
/// job would hang in `MPI_Finalize` about one run in two without the
/// node's fix of it; the six jobs run one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programs_in_c_cpp_and_fortran_of_either_mpi_run_unchanged_on_four_nodes() {
    let alice = UserKey::generate();
    let grid = native_grid(&alice, 4, 1).await;
    let mut client = connect(&grid.nodes[0], &alice).await;
    for mpi in ["mpich", "openmpi"] {
        for (compiler, source) in [
            ("mpicc", "examples/native/mpi_ring.c"),
            ("mpicxx", "examples/native/mpi_ring.cpp"),
            ("mpif90", "examples/native/mpi_ring.f90"),
        ] {
            let exe = common::build_native(&format!("{compiler}.{mpi}"), &[source]);
            ring_runs(&mut client, &exe, 4, 4).await;
        }
    }
}

/// `examples/native/count.c` with `sdk/native/zorilla_native.c`: a native
/// program that saves a checkpoint every 10 steps through `zorilla.h`.
fn native_count() -> Vec<u8> {
    common::build_native(
        "gcc",
        &["examples/native/count.c", "sdk/native/zorilla_native.c"],
    )
}

/// A native rank's checkpoints are kept on other nodes as a WebAssembly
/// rank's are (issue 32, item 4): its node is killed mid-run, the rank is
/// replaced on another node, and the fresh worker resumes from the latest
/// checkpoint it saved instead of from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_native_rank_resumes_from_its_checkpoint() {
    let alice = UserKey::generate();
    let exe = native_count();
    let mut grid = native_grid(&alice, 3, 1).await;
    let mut client = connect(&grid.nodes[0], &alice).await;
    let request = native_job(&exe, 1, LostPolicy::Replace, &["400"]);
    let job = client.submit(request, exe, Vec::new()).await.unwrap();
    // A checkpoint kept on another node, well into the run.
    wait_line(&mut client, job, "checkpoint kept", |l| {
        l.strip_prefix("count checkpoint=")
            .and_then(|rest| rest.split_once(" copies="))
            .is_some_and(|(at, copies)| {
                at.parse::<u32>().unwrap_or(0) >= 50 && copies.parse::<i32>().unwrap_or(0) >= 1
            })
    })
    .await;
    let node = client.status(job).await.unwrap().ranks[&0].node.clone();
    let victim = grid.nodes.iter().position(|n| n.peer == node).unwrap();
    assert_ne!(victim, 0, "the home has no cores");
    grid.nodes[victim].kill();

    let (status, out) = completed(&mut client, job).await;
    assert_ne!(status.ranks[&0].node, node, "replaced elsewhere");
    let starts = values(&out, "count rank=0 start=");
    assert_eq!(starts.len(), 2, "{out}");
    assert_eq!(starts[0], 0, "{out}");
    assert!(
        starts[1] >= 50 && starts[1] < 400,
        "resumed at {}: {out}",
        starts[1]
    );
    assert!(out.contains("count done=400"), "{out}");
}

/// The home's failover does not stop native ranks (issue 32, item 4): the
/// home (without cores) is killed while a native rank runs on another
/// node; a copy of the job takes it over, and the rank runs on to its end
/// on the same node, without starting again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_rank_runs_on_through_its_homes_failover() {
    let alice = UserKey::generate();
    let exe = native_count();
    let mut grid = native_grid(&alice, 3, 1).await;
    let mut client = connect(&grid.nodes[0], &alice).await;
    let request = native_job(&exe, 1, LostPolicy::Replace, &["300"]);
    let job = client.submit(request, exe, Vec::new()).await.unwrap();
    let running = wait_for(&mut client, job, Duration::from_secs(60), "its rank", |s| {
        s.running_workers() == 1
    })
    .await;
    let node = running.ranks[&0].node.clone();
    let worker = grid.nodes.iter().position(|n| n.peer == node).unwrap();
    assert_ne!(worker, 0, "the home has no cores");
    // Granted is not yet started: the rank's node fetches the program
    // from the home first, and a home killed before that leaves no node
    // with the program. So the kill waits for the rank's first line.
    wait_line(&mut client, job, "the rank's start", |l| {
        l.starts_with("count rank=0 start=")
    })
    .await;
    grid.nodes[0].kill();

    // Through the rank's node, until the new home answers.
    let mut asked = connect(&grid.nodes[worker], &alice).await;
    let (status, out) = completed(&mut asked, job).await;
    assert_ne!(status.home.as_deref(), Some(grid.nodes[0].peer.as_str()));
    assert_eq!(status.ranks[&0].node, node, "the rank ran on where it was");
    assert_eq!(
        values(&out, "count rank=0 start="),
        [0],
        "never started again: {out}"
    );
    assert!(out.contains("count done=300"), "{out}");
}

/// An MPICH program's collective checkpoints (`ZMPI_Checkpoint_save` of
/// the native library) roll a job back (issue 32, item 4): of a job of 2
/// ranks on 2 nodes with `on_worker_lost = "rollback"`, one rank's node is
/// killed; both ranks start again, wired up anew through their PMI
/// servers, from the latest generation both hold, and finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mpich_job_rolls_back_to_its_ranks_common_checkpoint() {
    let alice = UserKey::generate();
    let exe = common::build_native(
        "mpicc.mpich",
        &[
            "examples/native/mpi_steps.c",
            "sdk/native/zmpi_checkpoint.c",
            "sdk/native/zorilla_native.c",
        ],
    );
    // Three nodes of one core: one spare.
    let mut grid = native_grid(&alice, 3, 1).await;
    let mut client = connect(&grid.nodes[0], &alice).await;
    let request = native_job(&exe, 2, LostPolicy::Rollback, &["300"]);
    let job = client.submit(request, exe, Vec::new()).await.unwrap();
    wait_line(&mut client, job, "checkpoint", |l| {
        l.starts_with("steps rank=1 checkpoint=50 copies=")
    })
    .await;
    let node = client.status(job).await.unwrap().ranks[&1].node.clone();
    let victim = grid.nodes.iter().position(|n| n.peer == node).unwrap();
    grid.nodes[victim].kill();

    let (_, out) = completed(&mut client, job).await;
    for rank in 0..2 {
        let starts = values(&out, &format!("steps rank={rank} start="));
        assert!(starts.len() >= 2, "rank {rank} started again: {out}");
        assert_eq!(starts[0], 0, "{out}");
        let resumed = *starts.last().unwrap();
        assert!(
            (50..300).contains(&resumed),
            "rank {rank} resumed at {resumed}: {out}"
        );
        assert!(
            out.contains(&format!("steps rank={rank} done=300")),
            "{out}"
        );
    }
}

//! Parallel guests over the in-process transport: N-Queens and pi give the
//! right answers on any number of ranks (N-Queens also when a worker is
//! lost and replaced mid-job), barriers hold every rank, and the host API
//! behaves as documented, including membership changes; a worker shows
//! whether it waits in a receive without a deadline.

mod common;

use common::*;
use tokio::sync::oneshot;
use zorilla_sandbox::local::{LocalGroup, LocalTransport};
use zorilla_sandbox::transport::BoxFuture;
use zorilla_sandbox::{
    Delivery, Outcome, Program, Rank, Sandbox, Transport, TransportError, WorkerSpec,
};

/// Runs `program` on `ranks` workers of one in-process job; returns each
/// rank's stdout after checking that every rank exited 0.
async fn run_job(sandbox: &Sandbox, program: &Program, ranks: u32, argv: &[&str]) -> Vec<String> {
    let (_group, endpoints) = LocalGroup::new(ranks, 16);
    let running: Vec<_> = endpoints
        .into_iter()
        .map(|endpoint| {
            let spec = WorkerSpec {
                args: args(argv),
                transport: Some(Box::new(endpoint)),
                ..WorkerSpec::default()
            };
            start_collecting(sandbox, program, spec, None)
        })
        .collect();
    let mut stdouts = Vec::new();
    for (rank, worker) in running.into_iter().enumerate() {
        let done = worker.finish().await;
        assert_eq!(
            done.report.outcome,
            Outcome::Exited(0),
            "rank {rank}: {done:?}"
        );
        stdouts.push(done.stdout);
    }
    stdouts
}

async fn nqueens(sandbox: &Sandbox, ranks: u32, n: u32) -> String {
    let program = load(sandbox, "nqueens");
    let stdouts = run_job(sandbox, &program, ranks, &[&n.to_string()]).await;
    // Only rank 0 reports.
    assert!(stdouts[1..].iter().all(String::is_empty), "{stdouts:?}");
    stdouts[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nqueens_on_1_4_and_16_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    for ranks in [1, 4, 16] {
        assert_eq!(
            nqueens(&sandbox, ranks, 8).await,
            format!("nqueens N=8 ranks={ranks} solutions=92\n")
        );
        assert_eq!(
            nqueens(&sandbox, ranks, 10).await,
            format!("nqueens N=10 ranks={ranks} solutions=724\n")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nqueens_12_on_16_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    assert_eq!(
        nqueens(&sandbox, 16, 12).await,
        "nqueens N=12 ranks=16 solutions=14200\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nqueens_14_on_4_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    assert_eq!(
        nqueens(&sandbox, 4, 14).await,
        "nqueens N=14 ranks=4 solutions=365596\n"
    );
}

/// A rank's transport that hands its worker the first message (for an
/// nqueens worker: its first task), says so, and then delivers nothing more:
/// the worker solves that task, asks for the next one and waits for ever
/// while rank 0 counts it as busy, like a worker whose node went quiet.
struct QuietAfterFirstMessage {
    inner: LocalTransport,
    first: Option<oneshot::Sender<()>>,
}

impl Transport for QuietAfterFirstMessage {
    fn rank(&self) -> Rank {
        self.inner.rank()
    }
    fn size(&self) -> u32 {
        self.inner.size()
    }
    fn send(&mut self, to: Rank, payload: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>> {
        self.inner.send(to, payload)
    }
    fn recv(&mut self) -> BoxFuture<'_, Result<Delivery, TransportError>> {
        Box::pin(async move {
            let Some(first) = self.first.take() else {
                return std::future::pending().await;
            };
            let delivery = self.inner.recv().await;
            assert!(
                matches!(delivery, Ok(Delivery::Message { from: 0, .. })),
                "{delivery:?}"
            );
            let _ = first.send(());
            delivery
        })
    }
    fn barrier(&mut self) -> BoxFuture<'_, Result<(), TransportError>> {
        self.inner.barrier()
    }
}

/// A worker is lost holding a task rank 0 handed it; its rank gets a fresh
/// worker. Rank 0 hears of the replacement, hands the lost task out again,
/// and the count is exact (nothing lost, nothing counted twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nqueens_survives_a_replaced_worker() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let program = load(&sandbox, "nqueens");
    let spec = |transport: Box<dyn Transport>| WorkerSpec {
        args: args(&["12"]),
        transport: Some(transport),
        ..WorkerSpec::default()
    };
    let (group, endpoints) = LocalGroup::new(4, 16);
    let (got_task, has_task) = oneshot::channel();
    let mut got_task = Some(got_task);
    let mut running = Vec::new();
    for endpoint in endpoints {
        let transport: Box<dyn Transport> = if endpoint.rank() == 1 {
            Box::new(QuietAfterFirstMessage {
                inner: endpoint,
                first: got_task.take(),
            })
        } else {
            Box::new(endpoint)
        };
        running.push(Some(start_collecting(
            &sandbox,
            &program,
            spec(transport),
            None,
        )));
    }
    // Rank 0 has handed rank 1 work; rank 1 still holds a task.
    has_task.await.unwrap();
    // The group replaces the rank, then the lost worker is stopped. (In this
    // order, as in the node, where a message to a lost rank waits for its
    // replacement: the other way round, rank 0 could answer rank 1 after
    // its worker is gone and before the replacement, get ECLOSED, and exit.)
    let fresh = group.replace(1).await.unwrap();
    let lost = running[1].take().unwrap();
    lost.handle.cancel();
    assert_eq!(lost.finish().await.report.outcome, Outcome::Cancelled);
    running[1] = Some(start_collecting(
        &sandbox,
        &program,
        spec(Box::new(fresh)),
        None,
    ));

    let mut finished = Vec::new();
    for (rank, worker) in running.into_iter().enumerate() {
        let done = worker.unwrap().finish().await;
        assert_eq!(
            done.report.outcome,
            Outcome::Exited(0),
            "rank {rank}: {done:?}"
        );
        finished.push(done);
    }
    assert_eq!(finished[0].stdout, "nqueens N=12 ranks=4 solutions=14200\n");
    assert!(
        finished[0]
            .stderr
            .contains("nqueens: rank 1 was replaced\n"),
        "{:?}",
        finished[0].stderr
    );
}

/// Barriers on 5 ranks, each rank late in turn: nobody gets through a
/// barrier before the late rank has entered it (see examples/src/barrier.c).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn barrier_holds_every_rank_until_the_last_enters() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let stdouts = run_job(&sandbox, &load(&sandbox, "barrier"), 5, &["10", "20"]).await;
    assert!(stdouts.iter().all(|s| !s.contains("FAIL")), "{stdouts:?}");
    assert_eq!(stdouts[0], "barrier ranks=5 rounds=10 ok\n");
}

/// The worker shown in the README (kept identical to examples/src/sum.c)
/// runs and reduces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_example_worker_sums_over_all_ranks() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let source = std::fs::read_to_string(root.join("examples/src/sum.c")).unwrap();
    let start = readme.find("```c\n").expect("a C block in the README") + 5;
    let end = start + readme[start..].find("```").unwrap();
    assert!(
        source.ends_with(&readme[start..end]),
        "README's C example and examples/src/sum.c differ"
    );
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let program = load(&sandbox, "sum");
    let out = run_job(&sandbox, &program, 4, &[]).await;
    assert_eq!(out[0], "sum over 4 ranks = 10\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_reduces_over_all_ranks_reproducibly() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let program = load(&sandbox, "pi");
    let first = run_job(&sandbox, &program, 5, &["20000"]).await;
    let again = run_job(&sandbox, &program, 5, &["20000"]).await;
    assert_eq!(first, again, "seeded per rank, so runs agree");
    let line = first[0].trim_end();
    assert!(
        line.starts_with("pi ranks=5 samples=100000 hits="),
        "{line}"
    );
    let estimate: f64 = line.rsplit('=').next().unwrap().parse().unwrap();
    assert!((3.10..3.18).contains(&estimate), "{estimate}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pingpong_between_two_workers() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let stdouts = run_job(&sandbox, &load(&sandbox, "pingpong"), 2, &["50"]).await;
    assert!(
        stdouts[0].starts_with("pingpong iterations=50 roundtrip_ns="),
        "{stdouts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_api_calls_behave_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let done = run(&sandbox, &load(&sandbox, "api"), WorkerSpec::default()).await;
    assert_eq!(done.report.outcome, Outcome::Exited(0), "{}", done.stdout);
    assert!(!done.stdout.contains("FAIL"), "{}", done.stdout);
    assert!(
        done.stdout.ends_with("api: 0 failures\n"),
        "{}",
        done.stdout
    );
}

/// Starts the `api` guest in watch mode on `endpoint` and returns once it
/// has done its own checks and asked to be told of membership changes.
async fn api_watching(sandbox: &Sandbox, endpoint: LocalTransport) -> Running {
    let spec = WorkerSpec {
        args: args(&["watch"]),
        transport: Some(Box::new(endpoint)),
        ..WorkerSpec::default()
    };
    let (waiting, is_waiting) = oneshot::channel();
    let running = start_collecting(
        sandbox,
        &load(sandbox, "api"),
        spec,
        Some(("waiting\n", waiting)),
    );
    is_waiting.await.unwrap();
    running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_reach_the_guest() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let (group, mut endpoints) = LocalGroup::new(1, 4);
    let running = api_watching(&sandbox, endpoints.pop().unwrap()).await;
    let mut newcomer = group.join().await;
    newcomer
        .send(0, b"hello from the newcomer".to_vec())
        .await
        .unwrap();
    let done = running.finish().await;
    assert_eq!(done.report.outcome, Outcome::Exited(0), "{}", done.stdout);
    assert!(
        done.stdout.contains("membership kind=1 rank=1 size=2\n"),
        "{}",
        done.stdout
    );
    assert!(
        done.stdout
            .contains("message from 1: hello from the newcomer\n"),
        "{}",
        done.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_reaches_the_guest() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let (group, mut endpoints) = LocalGroup::new(2, 4);
    let mut old = endpoints.pop().unwrap();
    // The guest's checks include one barrier: rank 1 meets it there.
    let partner = tokio::spawn(async move { old.barrier().await });
    let running = api_watching(&sandbox, endpoints.pop().unwrap()).await;
    partner.await.unwrap().unwrap();
    let mut fresh = group.replace(1).await.unwrap();
    fresh
        .send(0, b"hello from the replacement".to_vec())
        .await
        .unwrap();
    let done = running.finish().await;
    assert_eq!(done.report.outcome, Outcome::Exited(0), "{}", done.stdout);
    // kind=2 is ZORILLA_REPLACED; the size stays the same.
    assert!(
        done.stdout.contains("membership kind=2 rank=1 size=2\n"),
        "{}",
        done.stdout
    );
    assert!(
        done.stdout
            .contains("message from 1: hello from the replacement\n"),
        "{}",
        done.stdout
    );
}

/// A worker in a receive without a deadline shows that it waits (what its
/// node tells the home's stall check), and stops showing it once the
/// receive is over (here: the worker was cancelled in it). A receive with
/// a deadline never shows: the worker wakes by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_receive_without_a_deadline_shows_as_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox(dir.path());
    let program = load(&sandbox, "stagger");
    let deadline = std::time::Duration::from_secs(20);

    // `stagger 0 -1`: a receive for ever.
    let spec = WorkerSpec {
        args: args(&["0", "-1"]),
        job_dir: Some(dir.path().join("job")),
        ..WorkerSpec::default()
    };
    let running = start_collecting(&sandbox, &program, spec, None);
    let waiting = running.handle.waiting();
    let start = std::time::Instant::now();
    while waiting.waited().is_none() {
        assert!(start.elapsed() < deadline, "the worker never waited");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    running.handle.cancel();
    let done = running.finish().await;
    assert_eq!(done.report.outcome, Outcome::Cancelled, "{done:?}");
    assert_eq!(waiting.waited(), None);

    // `stagger 0 1`: a receive of at most a second, then the end.
    let spec = WorkerSpec {
        args: args(&["0", "1"]),
        job_dir: Some(dir.path().join("job")),
        ..WorkerSpec::default()
    };
    let running = start_collecting(&sandbox, &program, spec, None);
    let waiting = running.handle.waiting();
    let mut finish = std::pin::pin!(running.finish());
    let done = loop {
        tokio::select! {
            done = &mut finish => break done,
            () = tokio::time::sleep(std::time::Duration::from_millis(10)) => {
                assert_eq!(waiting.waited(), None, "a receive with a deadline shows as waiting");
            }
        }
    };
    assert_eq!(done.report.outcome, Outcome::Exited(0), "{done:?}");
    assert!(done.stdout.ends_with("rank 0 done\n"), "{done:?}");
}

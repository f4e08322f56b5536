//! Checkpoints on a grid of real `zorilla-node` processes on 127.0.0.1: a
//! worker of the `heat` stencil saves its iteration and grid every few
//! steps (stored as blocks on other nodes, the home told where); its node
//! is killed (-9); the fresh worker that replaces the rank on another node
//! loads the latest checkpoint and computes only the steps after it, and
//! the result is exactly that of an uninterrupted run, also when one of
//! the checkpoint's two holders is killed with it. When the job ends,
//! its home tells the holders to drop its checkpoints. A rigid stencil
//! whose ranks exchange boundaries every step (`halo`, and the same in
//! MPI with collective checkpoints, `sdk/tests/halo_mpi.c`) rolls every
//! rank back to one checkpoint generation when a worker node is killed.
//! Every wait has a deadline.

mod common;

use std::time::{Duration, Instant};

use common::{
    grid, stderr_of, stdout_of, wait_completed, wait_for, wait_for_neighbours, wasm, zmpicc,
};
use zorilla_core::advert::Strategy;
use zorilla_core::node::LostPolicy;
use zorilla_node::protocol::{JobPhase, JobRequest, JobStatus};

const CELLS: usize = 500;
const ITERATIONS: u64 = 3000;
const EVERY: u64 = 100;
/// A pause after each step: the run lasts seconds without using the
/// loaded machine's CPU.
const PAUSE_US: u64 = 2000;

/// The `heat` guest's checksum, computed here independently of it.
fn heat_checksum(rank: u64) -> u64 {
    let mut grid: Vec<u64> = (0..CELLS as u64)
        .map(|i| ((i.wrapping_mul(2654435761) + rank * 40503) % 1000003) << 16)
        .collect();
    let mut next = grid.clone();
    for _ in 0..ITERATIONS {
        for i in 1..CELLS - 1 {
            next[i] = (grid[i - 1] + 2 * grid[i] + grid[i + 1]) >> 2;
        }
        grid.clone_from(&next);
    }
    grid.iter().enumerate().fold(0u64, |sum, (i, v)| {
        sum.wrapping_add(v.wrapping_mul(i as u64 + 1))
    })
}

/// The value of `key=` in the guest's last line for `rank` that has it.
fn last_value(stdout: &str, rank: u32, key: &str) -> Option<u64> {
    let prefix = format!("heat rank={rank} ");
    stdout
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
        })
        .next_back()
}

/// The holders the node in `dir` last logged for a checkpoint of `rank` of
/// `job`.
fn holders_logged(dir: &std::path::Path, job: u64, rank: u32) -> Vec<String> {
    let id = format!("{job:016x}");
    let log = std::fs::read_to_string(dir.join("node.log")).unwrap_or_default();
    let line = log
        .lines()
        .rfind(|l| {
            l.contains("checkpoint stored")
                && l.contains(&id)
                && l.contains(&format!("rank={rank} "))
        })
        .unwrap_or_else(|| panic!("no checkpoint of rank {rank} logged in {}", dir.display()));
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("holders="))
        .unwrap_or_else(|| panic!("no holders in {line}"))
        .split(',')
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_rank_resumes_the_stencil_from_its_checkpoint() {
    resume_after_a_kill(false).await;
}

/// The worker's node and one of the two holders of its checkpoint (not the
/// home) are killed together: the fresh worker loads the checkpoint from
/// the other holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_survives_the_loss_of_one_of_its_holders() {
    resume_after_a_kill(true).await;
}

/// Submits the two-rank `heat` job (a rank lost is replaced) and waits
/// until both ranks run: the job and its status then.
async fn start_heat(client: &mut zorilla_node::client::Client) -> (u64, JobStatus) {
    let request = JobRequest {
        min_workers: 2,
        max_workers: 2,
        strategy: Strategy::Spread,
        lifetime_secs: 120,
        on_worker_lost: LostPolicy::Replace,
        args: [CELLS as u64, ITERATIONS, EVERY, PAUSE_US]
            .iter()
            .map(u64::to_string)
            .collect(),
        ..JobRequest::default()
    };
    let job = client.submit(request, wasm("heat"), vec![]).await.unwrap();
    let running = wait_for(client, job, Duration::from_secs(60), "2 ranks", |s| {
        s.running_workers() == 2
    })
    .await;
    (job, running)
}

async fn resume_after_a_kill(and_a_holder: bool) {
    let mut grid = grid(4, 1);
    // Every node knows the three others: each checkpoint goes to two
    // nodes besides its worker's.
    wait_for_neighbours(&grid.nodes, 3, Duration::from_secs(60)).await;
    let mut client = grid.nodes[0].client().await;
    let (job, running) = start_heat(&mut client).await;
    // The rank that does not run on the home (killing the home is another
    // story).
    let (rank, victim) = rank_away_from_home(&grid, &running);

    // Wait for a checkpoint well into the run, then kill its node.
    let what = format!("rank {rank}'s checkpoint past {}", 5 * EVERY);
    let seen = wait_stdout(&mut client, job, Duration::from_secs(90), &what, |stdout| {
        last_value(stdout, rank, "checkpoint").filter(|at| *at >= 5 * EVERY)
    })
    .await;
    grid.nodes[victim].kill();
    let mut killed = vec![victim];
    if and_a_holder {
        let holders = holders_logged(&grid.nodes[victim].dir, job, rank);
        assert_eq!(holders.len(), 2, "{holders:?}");
        // The first the fresh worker's node asks, unless it is the home
        // (then the other, which stays one holder short all the same).
        let index = |peer: &String| grid.nodes.iter().position(|n| &n.peer == peer).unwrap();
        let holder = match index(&holders[0]) {
            0 => index(&holders[1]),
            first => first,
        };
        grid.nodes[holder].kill();
        killed.push(holder);
    }

    let status = wait_completed(&mut client, job, Duration::from_secs(180)).await;
    let logs = client.logs(job).await.unwrap();
    let stdout = stdout_of(&logs);
    let context = format!("stdout:\n{stdout}\nstderr:\n{}", stderr_of(&logs));
    assert_ne!(
        status.ranks[&rank].node, grid.nodes[victim].peer,
        "the rank was replaced elsewhere; {context}"
    );
    // Two starts of the rank: the first at 0, the replacement at its
    // latest checkpoint, at least the one seen before the kill.
    let starts: Vec<u64> = stdout
        .lines()
        .filter(|l| l.starts_with(&format!("heat rank={rank} start=")))
        .filter_map(|l| l.rsplit('=').next()?.parse().ok())
        .collect();
    assert_eq!(starts.len(), 2, "{context}");
    assert_eq!(starts[0], 0, "{context}");
    let resumed = starts[1];
    assert!(resumed >= seen && resumed < ITERATIONS, "{context}");
    // The replacement computed only what came after its checkpoint: fewer
    // steps than a start from the beginning redoes.
    let computed = last_value(&stdout, rank, "computed").unwrap();
    assert_eq!(computed, ITERATIONS - resumed, "{context}");
    assert!(computed < ITERATIONS, "{context}");
    // The work a failure cost (BENCHMARKS.md): the steps redone.
    eprintln!(
        "checkpoint test: killed after checkpoint {seen}, resumed at {resumed}; \
         the replacement computed {computed} of {ITERATIONS} steps (every {EVERY})"
    );
    // And both ranks' results are exact.
    for r in [0, 1] {
        let line = format!(
            "heat rank={r} done iterations={ITERATIONS} computed={} checksum={:016x}",
            if r == rank { computed } else { ITERATIONS },
            heat_checksum(u64::from(r))
        );
        assert!(stdout.contains(&line), "missing {line:?}; {context}");
    }
    // Each save was kept on two other nodes.
    assert!(
        stdout.contains(&format!("heat rank={rank} checkpoint={seen} copies=2")),
        "{context}"
    );

    // The job is over: its home tells the holders, which drop its
    // checkpoints.
    let start = Instant::now();
    let id = format!("{job:016x}");
    loop {
        let dropped = grid.nodes.iter().enumerate().any(|(i, n)| {
            !killed.contains(&i)
                && std::fs::read_to_string(n.dir.join("node.log"))
                    .unwrap_or_default()
                    .lines()
                    .any(|l| l.contains("checkpoints of an ended job dropped") && l.contains(&id))
        });
        if dropped {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no holder dropped the ended job's checkpoints"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The job's home and a holder of a rank's checkpoint are killed together
/// (issue 16). The home runs no rank (it has no cores); the holder killed
/// is the node of the other rank if that node holds the checkpoint, else
/// either holder. A copy takes the job over; a rank lost with the holder
/// is replaced, and its fresh worker starts from the beginning (the index
/// of checkpoints was the lost home's), which its node logs with the
/// reason; the job completes with both ranks' exact results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_and_a_checkpoint_holder_killed_together() {
    let mut grid = common::grid_with_idle_home(4, 1);
    let nodes = &mut grid.nodes;
    wait_for_neighbours(nodes, 4, Duration::from_secs(60)).await;
    let mut client = nodes[0].client().await;
    let (job, running) = start_heat(&mut client).await;
    let node_of = |peer: &String| nodes.iter().position(|n| &n.peer == peer).unwrap();
    let what = format!("rank 0's checkpoint past {}", 5 * EVERY);
    wait_stdout(&mut client, job, Duration::from_secs(90), &what, |stdout| {
        last_value(stdout, 0, "checkpoint").filter(|at| *at >= 5 * EVERY)
    })
    .await;
    let worker0 = node_of(&running.ranks[&0].node);
    let worker1 = node_of(&running.ranks[&1].node);
    let holders: Vec<usize> = holders_logged(&nodes[worker0].dir, job, 0)
        .iter()
        .map(node_of)
        .collect();
    let holder = if holders.contains(&worker1) {
        worker1
    } else {
        *holders
            .iter()
            .find(|h| **h != 0)
            .expect("a holder besides the home")
    };
    nodes[0].kill();
    nodes[holder].kill();

    // Through a node that lives on (rank 0's), until the new home answers.
    let mut asked = nodes[worker0].client().await;
    let (_, stdout, context) = completed_under_a_new_home(&mut asked, job, nodes).await;
    for r in [0u32, 1] {
        let computed = last_value(&stdout, r, "computed").expect("each rank finished");
        let line = format!(
            "heat rank={r} done iterations={ITERATIONS} computed={computed} checksum={:016x}",
            heat_checksum(u64::from(r))
        );
        assert!(stdout.contains(&line), "missing {line:?}; {context}");
    }
    if holder == worker1 {
        // Rank 1 was lost with the holder: its replacement started over,
        // and its node said why. (What its first worker printed went to
        // the lost home and died with its own node: two failures at once;
        // the replacement's start is the last.)
        let starts: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with("heat rank=1 start="))
            .collect();
        assert_eq!(starts.last(), Some(&"heat rank=1 start=0"), "{context}");
        assert_eq!(
            last_value(&stdout, 1, "computed"),
            Some(ITERATIONS),
            "{context}"
        );
        // (Its first worker ran on the holder, now dead: a line about
        // rank 1 on another node is the replacement's.)
        let id = format!("{job:016x}");
        let said = nodes.iter().enumerate().any(|(i, n)| {
            i != 0
                && i != holder
                && std::fs::read_to_string(n.dir.join("node.log"))
                    .unwrap_or_default()
                    .lines()
                    .any(|l| {
                        l.contains("it starts from the beginning")
                            && l.contains(&id)
                            && l.contains("rank=1 ")
                    })
        });
        assert!(said, "no node logged why rank 1 starts over; {context}");
    }
}

/// Waits, asking through `asked` (a node that lives on), until `job` is
/// over after its home, `nodes[0]`, died; asserts that it completed under
/// another home. Its status, stdout, and both with stderr for messages.
async fn completed_under_a_new_home(
    asked: &mut zorilla_node::client::Client,
    job: u64,
    nodes: &[common::TestNode],
) -> (JobStatus, String, String) {
    let old_home = nodes[0].peer.as_str();
    let start = Instant::now();
    let status = loop {
        if let Ok(s) = asked.status(job).await
            && s.phase.is_terminal()
        {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "the job never ended after its home died; the nodes' logs:{}",
            nodes
                .iter()
                .map(|n| format!("\n--- {}\n{}", n.peer, n.log_tail()))
                .collect::<String>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let logs = asked.logs(job).await.unwrap();
    let stdout = stdout_of(&logs);
    let context = format!(
        "{status:?}\nstdout:\n{stdout}\nstderr:\n{}",
        stderr_of(&logs)
    );
    assert_eq!(
        status.phase,
        zorilla_node::protocol::JobPhase::Completed,
        "{context}"
    );
    assert_ne!(status.home.as_deref(), Some(old_home), "{context}");
    (status, stdout, context)
}

/// A rank that does not run on the home (node 0; killing the home is
/// another story), and the index of the node it runs on.
fn rank_away_from_home(grid: &common::Grid, running: &JobStatus) -> (u32, usize) {
    let (&rank, placed) = running
        .ranks
        .iter()
        .find(|(_, r)| r.node != grid.nodes[0].peer)
        .expect("a rank away from the home");
    let node = grid
        .nodes
        .iter()
        .position(|n| n.peer == placed.node)
        .unwrap();
    (rank, node)
}

/// Reads the job's stdout every 50 ms until `found` finds in it what is
/// waited for; panics after `deadline` naming `what`, with the stdout.
async fn wait_stdout<T>(
    client: &mut zorilla_node::client::Client,
    job: u64,
    deadline: Duration,
    what: &str,
    found: impl Fn(&str) -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        let stdout = stdout_of(&client.logs(job).await.unwrap());
        if let Some(value) = found(&stdout) {
            return value;
        }
        assert!(
            start.elapsed() < deadline,
            "no {what} after {deadline:?}: {stdout}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `halo` stencil's run: cells per rank, steps, checkpoint generation
/// every so many steps, and the pause after each step.
const HALO_CELLS: usize = 100;
const HALO_RANKS: u32 = 3;
const HALO_ITERATIONS: u64 = 2000;
const HALO_EVERY: u64 = 100;
const HALO_PAUSE_US: u64 = 2000;

/// The `halo` guest's checksum of `rank`'s cells, computed here
/// independently of it (one rod of `HALO_RANKS * HALO_CELLS` cells).
fn halo_checksum(rank: u32) -> u64 {
    let total = HALO_RANKS as usize * HALO_CELLS;
    let mut rod: Vec<u64> = (0..total as u64)
        .map(|i| (i.wrapping_mul(2654435761) % 1000003) << 16)
        .collect();
    let mut next = rod.clone();
    for _ in 0..HALO_ITERATIONS {
        for i in 1..total - 1 {
            next[i] = (rod[i - 1] + 2 * rod[i] + rod[i + 1]) >> 2;
        }
        rod.clone_from(&next);
    }
    let base = rank as usize * HALO_CELLS;
    rod[base..base + HALO_CELLS]
        .iter()
        .enumerate()
        .fold(0u64, |sum, (i, v)| {
            sum.wrapping_add(v.wrapping_mul((base + i) as u64 + 1))
        })
}

/// The `halo` guest's lines for `rank`, in order, without their prefix.
/// (Found wherever they start: the job's log joins its ranks' output as it
/// comes, so a rank's line may follow another's unfinished one.)
fn halo_lines(stdout: &str, rank: u32) -> impl Iterator<Item = &str> {
    let prefix = format!("{rank} ");
    stdout
        .split("halo rank=")
        .filter_map(move |seg| seg.strip_prefix(prefix.as_str()))
        .map(|rest| rest.lines().next().unwrap_or(""))
}

/// The values of `key=` in the `halo` guest's lines for `rank` that have
/// it, in order.
fn halo_values(stdout: &str, rank: u32, key: &str) -> Vec<u64> {
    halo_lines(stdout, rank)
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
        })
        .collect()
}

/// How far the first worker of `rank` got: its last `at=` line before the
/// rank's second start.
fn halo_reached(stdout: &str, rank: u32) -> u64 {
    let mut starts = 0;
    let mut reached = 0;
    for rest in halo_lines(stdout, rank) {
        if rest.starts_with("start=") {
            starts += 1;
            if starts == 2 {
                break;
            }
        } else if let Some(at) = rest.strip_prefix("at=").and_then(|v| v.parse().ok()) {
            reached = reached.max(at);
        }
    }
    reached
}

/// A rigid stencil whose ranks exchange their boundaries every step, with
/// `on_worker_lost = "rollback"` (the LBG-SQUARE case, issue 16): a worker
/// node is killed (-9) after the ranks saved a few checkpoint generations
/// together; the home stops the other workers and every rank restarts from
/// the same generation, the latest all of them hold (the lost one on
/// another node); the steps redone are fewer than a start over would redo,
/// and every rank's result is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rigid_stencil_rolls_every_rank_back_to_a_common_checkpoint() {
    rolls_back_to_a_common_checkpoint(wasm("halo"), "halo").await;
}

/// The same stencil written with MPI (sdk/tests/halo_mpi.c, built with
/// zmpicc): its checkpoints are ZMPI_Checkpoint_save's, collective (a
/// barrier, then every rank saves the same generation), and the same
/// rollback brings every rank back to one generation with exact results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mpi_stencil_rolls_back_with_collective_checkpoints() {
    let build = tempfile::tempdir().unwrap();
    let module = zmpicc(build.path(), "halo_mpi");
    rolls_back_to_a_common_checkpoint(module, "halo_mpi").await;
}

/// Submits the halo stencil `module` (halo's own, or the MPI one) with
/// `on_worker_lost = "rollback"`, spread, and waits for its ranks to run.
async fn start_halo(
    client: &mut zorilla_node::client::Client,
    module: Vec<u8>,
) -> (u64, JobStatus) {
    let request = JobRequest {
        min_workers: HALO_RANKS,
        max_workers: HALO_RANKS,
        strategy: Strategy::Spread,
        lifetime_secs: 120,
        // The MPI library's buffers need more than the default.
        memory_mib: 160,
        on_worker_lost: LostPolicy::Rollback,
        args: [
            HALO_CELLS as u64,
            HALO_ITERATIONS,
            HALO_EVERY,
            HALO_PAUSE_US,
        ]
        .iter()
        .map(u64::to_string)
        .collect(),
        ..JobRequest::default()
    };
    let job = client.submit(request, module, vec![]).await.unwrap();
    let running = wait_for(client, job, Duration::from_secs(60), "3 ranks", |s| {
        s.running_workers() == HALO_RANKS
    })
    .await;
    (job, running)
}

/// The rollback tests' body: `module` is a halo stencil (its output lines
/// and checksums are halo's), `what` names it in the figures printed.
async fn rolls_back_to_a_common_checkpoint(module: Vec<u8>, what: &str) {
    let mut grid = grid(5, 1);
    wait_for_neighbours(&grid.nodes, 4, Duration::from_secs(60)).await;
    let mut client = grid.nodes[0].client().await;
    let (job, running) = start_halo(&mut client, module).await;
    let (rank, victim) = rank_away_from_home(&grid, &running);

    // Every rank saved generation 5 or later (a save returns once the home
    // indexed it): the common generation is at least 5. Then the kill.
    let waited = format!("a common checkpoint past {}", 5 * HALO_EVERY);
    let progress = wait_stdout(
        &mut client,
        job,
        Duration::from_secs(120),
        &waited,
        |stdout| {
            let last: Vec<u64> = (0..HALO_RANKS)
                .map(|r| {
                    halo_values(stdout, r, "checkpoint")
                        .last()
                        .copied()
                        .unwrap_or(0)
                })
                .collect();
            last.iter()
                .all(|at| *at >= 5 * HALO_EVERY)
                .then(|| last.into_iter().max().unwrap())
        },
    )
    .await;
    grid.nodes[victim].kill();

    // Until the job ends; on the deadline, what every rank printed and what
    // the nodes said of the job.
    let start = Instant::now();
    let status = loop {
        let status = client.status(job).await;
        if let Ok(status) = &status
            && status.phase.is_terminal()
        {
            break status.clone();
        }
        if start.elapsed() > Duration::from_secs(240) {
            let stdout = client
                .logs(job)
                .await
                .map(|logs| stdout_of(&logs))
                .unwrap_or_default();
            let id = format!("{job:016x}");
            let said: Vec<String> = grid
                .nodes
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != victim)
                .flat_map(|(i, n)| {
                    let log = std::fs::read_to_string(n.dir.join("node.log")).unwrap_or_default();
                    log.lines()
                        .filter(|l| l.contains(&id) || l.contains("WARN"))
                        .map(|l| format!("n{i}: {l}"))
                        .collect::<Vec<_>>()
                })
                .collect();
            panic!(
                "the job did not end after the rollback: {status:?}\nstdout:\n{stdout}\nnodes:\n{}",
                said.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        status.phase,
        zorilla_node::protocol::JobPhase::Completed,
        "{status:?}"
    );
    let logs = client.logs(job).await.unwrap();
    let stdout = stdout_of(&logs);
    let context = format!("stdout:\n{stdout}\nstderr:\n{}", stderr_of(&logs));
    assert_ne!(
        status.ranks[&rank].node, grid.nodes[victim].peer,
        "the lost rank runs elsewhere; {context}"
    );
    // Every rank started twice: at 0, then from the same generation.
    let mut restarts = Vec::new();
    for r in 0..HALO_RANKS {
        let starts = halo_values(&stdout, r, "start");
        assert_eq!(starts.len(), 2, "rank {r}; {context}");
        assert_eq!(starts[0], 0, "rank {r}; {context}");
        restarts.push(starts[1]);
    }
    let resumed = restarts[0];
    assert!(
        restarts.iter().all(|at| *at == resumed),
        "the ranks restarted from different steps {restarts:?}; {context}"
    );
    assert!(
        (5 * HALO_EVERY..HALO_ITERATIONS).contains(&resumed),
        "{context}"
    );
    // Each fresh worker computed only the steps after the generation: the
    // steps redone (from the generation to where the job was) are fewer
    // than a start over would redo.
    for r in 0..HALO_RANKS {
        let computed = halo_values(&stdout, r, "computed");
        assert_eq!(
            computed.last().copied(),
            Some(HALO_ITERATIONS - resumed),
            "rank {r}; {context}"
        );
    }
    // How far each rank's first worker got (to the tenth of a checkpoint
    // interval): the steps redone are those from the generation on.
    let reached: Vec<u64> = (0..HALO_RANKS).map(|r| halo_reached(&stdout, r)).collect();
    for (r, at) in reached.iter().enumerate() {
        assert!(*at >= resumed, "rank {r} reached {at}; {context}");
        assert!(at - resumed < *at, "rank {r}; {context}");
    }
    let redone: u64 = reached.iter().map(|at| at - resumed).sum();
    let without: u64 = reached.iter().sum();
    // The home said why, and from which generation.
    let home_log = std::fs::read_to_string(grid.nodes[0].dir.join("node.log")).unwrap();
    let generation = resumed / HALO_EVERY;
    assert!(
        home_log
            .lines()
            .any(|l| l.contains("the job rolls back")
                && l.contains(&format!("generation={generation}"))),
        "the home logged no rollback to generation {generation}"
    );
    // The work a failure cost (BENCHMARKS.md).
    eprintln!(
        "rollback test ({what}): {HALO_RANKS} ranks, a checkpoint generation every {HALO_EVERY} \
         steps; the last checkpoint read before the kill: step {progress}; the ranks had \
         reached steps {reached:?}; every rank restarted from generation {generation} \
         (step {resumed}): {redone} rank-steps redone in all, against {without} from the \
         start without checkpoints; each fresh worker computed {} of {HALO_ITERATIONS}",
        HALO_ITERATIONS - resumed
    );
    // And every rank's result is exact.
    for r in 0..HALO_RANKS {
        let line = format!(
            "halo rank={r} done iterations={HALO_ITERATIONS} computed={} checksum={:016x}",
            HALO_ITERATIONS - resumed,
            halo_checksum(r)
        );
        assert!(stdout.contains(&line), "missing {line:?}; {context}");
    }
}

/// The rollback stencil's home and a worker node die together (-9): a
/// copy takes the job over and rolls every rank back to the latest common
/// generation (it knows where the generations are from the job's log).
/// The lost rank's fresh worker, on another node, reads its checkpoint
/// from holders that never heard of the new home: they take its ticket
/// because the writer named the job's copies with its checkpoint. Every
/// rank resumes from that generation with an exact result. (Before, the
/// holders refused the new home's ticket and the job could not resume.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stencil_rolls_back_under_a_new_home_when_its_home_and_a_worker_die_together() {
    let mut grid = common::grid_with_idle_home(5, 1);
    wait_for_neighbours(&grid.nodes, 5, Duration::from_secs(60)).await;
    let mut client = grid.nodes[0].client().await;
    let (job, running) = start_halo(&mut client, wasm("halo")).await;
    let waited = format!("a common checkpoint past {}", 5 * HALO_EVERY);
    wait_stdout(
        &mut client,
        job,
        Duration::from_secs(120),
        &waited,
        |stdout| {
            (0..HALO_RANKS)
                .all(|r| {
                    halo_values(stdout, r, "checkpoint")
                        .last()
                        .is_some_and(|at| *at >= 5 * HALO_EVERY)
                })
                .then_some(())
        },
    )
    .await;
    // The victim: a rank's node whose death with the home leaves every
    // rank's checkpoints a holder (each goes to two nodes, the home among
    // the candidates: a rank held on the home and the victim alone would
    // have no generation left, two failures beyond the replication).
    let node_of = |peer: &String| grid.nodes.iter().position(|n| &n.peer == peer).unwrap();
    let holders: Vec<(u32, usize, Vec<usize>)> = running
        .ranks
        .iter()
        .map(|(r, placed)| {
            let writer = node_of(&placed.node);
            let held = holders_logged(&grid.nodes[writer].dir, job, *r);
            (*r, writer, held.iter().map(node_of).collect())
        })
        .collect();
    let (rank, victim) = holders
        .iter()
        .map(|(r, writer, _)| (*r, *writer))
        .find(|(_, v)| {
            holders
                .iter()
                .all(|(_, _, held)| held.iter().any(|h| *h != 0 && h != v))
        })
        .unwrap_or_else(|| panic!("every rank's node holds the only other copy of a rank's checkpoints besides the home: {holders:?}"));
    let survivor = holders
        .iter()
        .map(|(_, writer, _)| *writer)
        .find(|w| *w != victim)
        .expect("a node running another rank");
    grid.nodes[0].kill();
    grid.nodes[victim].kill();

    // Through a node that lives on, until the new home ends the job.
    let mut asked = grid.nodes[survivor].client().await;
    let (status, stdout, context) = completed_under_a_new_home(&mut asked, job, &grid.nodes).await;
    assert_ne!(
        status.ranks[&rank].node, grid.nodes[victim].peer,
        "{context}"
    );
    // The lost rank's fresh worker (what its first worker printed died
    // with its node and the old home) resumed from a generation, as every
    // other rank did: the same step, past the start.
    let resumed = halo_values(&stdout, rank, "start").last().copied();
    assert!(
        resumed.is_some_and(|at| (5 * HALO_EVERY..HALO_ITERATIONS).contains(&at)),
        "rank {rank} started over; {context}"
    );
    let resumed = resumed.unwrap();
    for r in 0..HALO_RANKS {
        assert_eq!(
            halo_values(&stdout, r, "start").last().copied(),
            Some(resumed),
            "rank {r}; {context}"
        );
        let line = format!(
            "halo rank={r} done iterations={HALO_ITERATIONS} computed={} checksum={:016x}",
            HALO_ITERATIONS - resumed,
            halo_checksum(r)
        );
        assert!(stdout.contains(&line), "missing {line:?}; {context}");
    }
}

/// A rank of a job that rolls back together which fails on its own (no
/// node is lost) still fails the job, with its own reason: its node holds
/// such an end back for a while (a rank often fails because another was
/// lost, and the rollback then stops it too, see the member's
/// `ROLLBACK_GRACE`), and sends it home when no rollback came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_failing_on_its_own_still_fails_a_job_that_rolls_back() {
    let grid = grid(3, 1);
    wait_for_neighbours(&grid.nodes, 2, Duration::from_secs(60)).await;
    let mut client = grid.nodes[0].client().await;
    let request = JobRequest {
        min_workers: 2,
        max_workers: 2,
        strategy: Strategy::Spread,
        lifetime_secs: 120,
        on_worker_lost: LostPolicy::Rollback,
        ..JobRequest::default()
    };
    let job = client.submit(request, wasm("trap"), vec![]).await.unwrap();
    let status = wait_for(&mut client, job, Duration::from_secs(60), "its end", |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(status.phase, JobPhase::Failed, "{status:?}");
    assert!(
        status.reason.contains("in function explode"),
        "not the rank's own reason: {status:?}"
    );
}

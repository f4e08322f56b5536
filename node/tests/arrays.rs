//! Job arrays on real nodes, through the `zorilla` tool as a user runs
//! them: a spec with `task_args` (a task per line), the tasks spread over
//! the grid, a task that fails run again elsewhere and listed when it
//! keeps failing, outputs fetched per task, and the home's record keeping
//! no record of ended tasks.

mod common;

use std::time::Duration;

use common::{cli, grid_with_idle_home, run, wait_for};
use zorilla_node::protocol::{JobPhase, OutcomeCode};

/// The sweep guest, as a file a spec can name.
fn sweep_module(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("sweep.wasm");
    std::fs::write(&path, common::wasm("sweep")).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_runs_a_task_per_line_over_the_grid_retries_a_failing_task_and_lists_it() {
    // The home runs nothing itself; two nodes of 2 cores take the tasks.
    let grid = grid_with_idle_home(2, 2);
    let home = &grid.nodes[0];
    common::wait_for_neighbours(&grid.nodes, 1, Duration::from_secs(30)).await;
    let dir = tempfile::tempdir().unwrap();
    sweep_module(dir.path());
    // Twelve parameters; task 5's always fails.
    let params: Vec<String> = (0..12)
        .map(|i| {
            if i == 5 {
                "fail".into()
            } else {
                format!("{}", 10 + i)
            }
        })
        .collect();
    std::fs::write(dir.path().join("params.txt"), params.join("\n") + "\n").unwrap();
    std::fs::write(
        dir.path().join("sweep.toml"),
        "module = \"sweep.wasm\"\ntask_args = \"params.txt\"\nmax_running = 3\nretries = 1\n\
         lifetime_secs = 120\n",
    )
    .unwrap();
    let out = run(
        cli()
            .args(["--node", &home.client, "submit"])
            .arg(dir.path().join("sweep.toml")),
        "zorilla submit",
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let job = u64::from_str_radix(&id, 16).unwrap_or_else(|e| panic!("{id:?}: {e}"));

    let mut client = home.client().await;
    let most_running = std::cell::Cell::new(0);
    let status = wait_for(
        &mut client,
        job,
        Duration::from_secs(120),
        "the array's end",
        |s| {
            let running = s.tasks.as_ref().map_or(0, |t| t.running);
            most_running.set(most_running.get().max(running));
            s.phase.is_terminal()
        },
    )
    .await;
    assert_eq!(status.phase, JobPhase::Failed, "{status:?}");
    assert!(
        status
            .reason
            .starts_with("1 of 12 tasks failed after their retries; the first, task 5 on ")
            && status.reason.ends_with(": exited with status 3"),
        "{}",
        status.reason
    );
    let tasks = status
        .tasks
        .clone()
        .expect("an array's status has its tasks");
    assert_eq!(
        (
            tasks.count,
            tasks.waiting,
            tasks.running,
            tasks.done,
            tasks.failed
        ),
        (12, 0, 0, 11, 1),
        "{tasks:?}"
    );
    assert_eq!(
        tasks.failed_tasks.keys().copied().collect::<Vec<_>>(),
        vec![5]
    );
    assert_eq!(tasks.failed_tasks[&5].code, Some(OutcomeCode::Exited));
    assert_eq!(tasks.failed_tasks[&5].exit_status, Some(3));
    // No record of ended tasks: the array's record does not grow with them.
    assert!(status.ranks.is_empty(), "{:?}", status.ranks);
    assert!(
        most_running.get() <= 3,
        "at most max_running at once: {}",
        most_running.get()
    );

    // Task 5 ran twice, once on each node (the retry goes elsewhere); the
    // others ran over both nodes.
    let logs = client.logs(job).await.unwrap();
    let stderr = common::stderr_of(&logs);
    assert_eq!(
        stderr.matches("sweep: task 5 asked to fail").count(),
        2,
        "{stderr}"
    );
    let ran_on = |node: &common::TestNode| {
        std::fs::read_to_string(node.dir.join("node.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("worker started") && l.contains(&id))
            .count()
    };
    let (a, b) = (ran_on(&grid.nodes[1]), ran_on(&grid.nodes[2]));
    assert_eq!(a + b, 13, "12 tasks and one retry: {a} + {b}");
    assert!(a > 0 && b > 0, "spread over the grid: {a} and {b}");

    // `zorilla status` shows the counts and the failed task.
    let out = run(
        cli().args(["--node", &home.client, "status", &id]),
        "zorilla status",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("tasks     12 in all: 0 waiting, 0 running, 11 done, 1 failed (a failed task runs again up to 1 times)"),
        "{text}"
    );
    assert!(text.contains("  failed    5  node …"), "{text}");

    // Outputs per task, under the task's index.
    let fetched = dir.path().join("fetched");
    run(
        cli()
            .args(["--node", &home.client, "fetch", &id])
            .arg(&fetched),
        "zorilla fetch",
    );
    for task in 0..12u32 {
        let result = std::fs::read_to_string(fetched.join(task.to_string()).join("result.txt"));
        if task == 5 {
            assert!(result.is_err(), "task 5 wrote nothing");
        } else {
            let x = 10 + i64::from(task);
            assert_eq!(
                result.unwrap(),
                format!("task {task} of 12: {x}^2 = {}\n", x * x)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_of_tasks_without_arguments_completes_with_every_task_done() {
    let grid = grid_with_idle_home(1, 2);
    let home = &grid.nodes[0];
    common::wait_for_neighbours(&grid.nodes, 1, Duration::from_secs(30)).await;
    let dir = tempfile::tempdir().unwrap();
    let module = sweep_module(dir.path());
    let out = run(
        cli()
            .args(["--node", &home.client, "submit", "--module"])
            .arg(&module)
            .args(["--tasks", "20", "--json"]),
        "zorilla submit --tasks",
    );
    let id: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = id["job"].as_str().unwrap().to_string();
    let job = u64::from_str_radix(&id, 16).unwrap();
    let mut client = home.client().await;
    let status = common::wait_completed(&mut client, job, Duration::from_secs(120)).await;
    assert_eq!(status.reason, "all 20 tasks exited with status 0");
    let tasks = status.tasks.unwrap();
    assert_eq!((tasks.done, tasks.failed), (20, 0));
    let stdout = common::stdout_of(&client.logs(job).await.unwrap());
    for task in 0..20 {
        assert!(
            stdout.contains(&format!("task {task} of 20: {task}^2 = {}\n", task * task)),
            "{stdout}"
        );
    }
}

#[test]
fn a_spec_with_too_few_task_argument_lines_is_refused_before_it_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    sweep_module(dir.path());
    std::fs::write(dir.path().join("params.txt"), "1\n2\n").unwrap();
    std::fs::write(
        dir.path().join("sweep.toml"),
        "module = \"sweep.wasm\"\ntasks = 3\ntask_args = \"params.txt\"\n",
    )
    .unwrap();
    // No node is asked: the address is one nothing listens on.
    let out = cli()
        .args(["--node", "127.0.0.1:1", "submit"])
        .arg(dir.path().join("sweep.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "the task arguments file cannot be used: it has 2 lines, but the job has 3 tasks (a line each)"
        ),
        "{stderr}"
    );
}

/// The home runs tasks of its own array too, beside the other nodes, and
/// every one of many short tasks ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_of_many_short_tasks_runs_on_every_node_the_home_too_and_ends() {
    let grid = common::grid(3, 2);
    let home = &grid.nodes[0];
    common::wait_for_neighbours(&grid.nodes, 2, Duration::from_secs(30)).await;
    let request = zorilla_node::protocol::JobRequest {
        min_workers: 1,
        max_workers: 100,
        memory_mib: 16,
        lifetime_secs: 300,
        args: vec!["spin".into(), "20".into()],
        tasks: Some(zorilla_node::protocol::Tasks {
            count: 100,
            retries: 0,
            args_file: None,
            spot_checks: 0,
        }),
        ..Default::default()
    };
    let mut client = home.client().await;
    let job = client
        .submit(request, common::wasm("sweep"), vec![])
        .await
        .unwrap();
    let status = common::wait_completed(&mut client, job, Duration::from_secs(120)).await;
    assert_eq!(status.reason, "all 100 tasks exited with status 0");
}

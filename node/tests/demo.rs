//! The README's main job: `zorilla-demo` (12 real nodes in three emulated
//! sites, a 16-worker nqueens job through the real `zorilla` tool) ends with
//! the right answer, the workers on the two nearest sites, its wall time
//! against the native one-core time, and every node stopped cleanly.

use std::process::Command;
use std::sync::Mutex;

/// One demo grid at a time in this file: three grids of 12 nodes at once
/// on a 2-core machine delayed the nearer site's offers beyond the home's
/// settling time, and the job went partly to the farther site (the
/// placement is the scheduler's call on the offers it has when they
/// settle, which is what the first test checks).
static ONE_GRID: Mutex<()> = Mutex::new(());

fn one_grid() -> std::sync::MutexGuard<'static, ()> {
    // A test that failed holding it does not fail the others.
    ONE_GRID.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn the_demo_runs_nqueens_on_the_nearest_sites_and_shuts_down_cleanly() {
    let _grid = one_grid();
    // The `zorilla` tool the demo runs makes its user key here, not in the
    // user's configuration.
    let key_dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_zorilla-demo"))
        .env("ZORILLA_USER_KEY", key_dir.path().join("user.key"))
        .args(["--queens", "10"])
        .output()
        .expect("run zorilla-demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("nqueens N=10 ranks=16 solutions=724"),
        "{stdout}"
    );
    assert!(
        stdout.contains("10-Queens has 724 solutions: correct"),
        "{stdout}"
    );
    // Concentrate: the submitter's site's 8 cores, then the nearer site's.
    assert!(
        stdout.contains("amsterdam  ( 1 ms from the submitter):  8 workers on 4 nodes"),
        "{stdout}"
    );
    assert!(
        stdout.contains("delft      (10 ms from the submitter):  8 workers on 4 nodes"),
        "{stdout}"
    );
    assert!(
        stdout.contains("paris      (40 ms from the submitter):  0 workers"),
        "{stdout}"
    );
    // The job's wall time beside the same source run natively (gcc is
    // there: scripts/install-test-deps.sh installs it).
    assert!(
        stdout.contains("natively on one core: a speed-up of")
            || stdout.contains("natively on one core: a SLOW-DOWN of"),
        "{stdout}"
    );
    assert!(
        stdout.contains("12 of 12 nodes stopped cleanly"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Status page of the submitting node: http://127.0.0.1:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("drawn on the grid view by site: http://127.0.0.1:")
            && stdout.contains("/grid?job="),
        "{stdout}"
    );
}

/// `--closed`: the same job on a closed grid, each node with a credential
/// signed by a grid key the demo made.
#[test]
fn the_demo_runs_a_closed_grid_with_one_flag() {
    let _grid = one_grid();
    let out = Command::new(env!("CARGO_BIN_EXE_zorilla-demo"))
        .args(["--closed", "--queens", "10", "--workers", "8"])
        // Should the grid not form, the demo's report shows the tails of
        // the lagging nodes' logs: with what the gates did.
        .env("RUST_LOG", "info,zorilla_overlay::membership=debug")
        .output()
        .expect("run zorilla-demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("A closed grid: grid key "), "{stdout}");
    assert!(
        stdout.contains("10-Queens has 724 solutions: correct"),
        "{stdout}"
    );
    assert!(
        stdout.contains("12 of 12 nodes stopped cleanly"),
        "{stdout}"
    );
}

/// The pids of the running `zorilla-node` processes whose parent is `parent`.
fn nodes_of(parent: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if head.ends_with("(zorilla-node") && fields.get(1) == Some(&parent.to_string().as_str()) {
            pids.push(pid);
        }
    }
    pids
}

/// Whether `pid` is still a live process (a zombie waiting for its reaper
/// counts as ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

/// `zorilla-demo --keep` stops its grid when it is asked to terminate
/// (SIGTERM, as `timeout` or `kill` send; SIGHUP takes the same path), and
/// its nodes, in a process group of their own, end with it when it is
/// killed outright.
#[test]
fn the_demo_stops_its_grid_on_sigterm_and_its_nodes_end_with_it_when_killed() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let _grid = one_grid();

    for signal in [rustix::process::Signal::TERM, rustix::process::Signal::KILL] {
        // What the demo writes to stderr goes to a file, shown when it fails:
        // a demo that ends early says why there.
        let mut errors = tempfile::tempfile().expect("a file for the demo's stderr");
        let key_dir = tempfile::tempdir().unwrap();
        let mut demo = Command::new(env!("CARGO_BIN_EXE_zorilla-demo"))
            .env("ZORILLA_USER_KEY", key_dir.path().join("user.key"))
            .args(["--queens", "8", "--workers", "4", "--keep"])
            .stdout(Stdio::piped())
            .stderr(errors.try_clone().expect("the stderr file"))
            .spawn()
            .expect("run zorilla-demo");
        let mut stderr_of_demo = move || {
            use std::io::{Read, Seek};
            let mut text = String::new();
            let _ = errors.rewind();
            let _ = errors.read_to_string(&mut text);
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        };
        let stdout = demo.stdout.take().unwrap();
        let (lines, seen) = std::sync::mpsc::sync_channel(256);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let mut printed = String::new();
        let deadline = Instant::now() + Duration::from_secs(240);
        while !printed.contains("The grid keeps running") {
            let left = deadline.saturating_duration_since(Instant::now());
            match seen.recv_timeout(left) {
                Ok(line) => printed.push_str(&(line + "\n")),
                Err(e) => panic!(
                    "the demo did not reach --keep ({e}):\n{printed}\nits stderr:\n{}",
                    stderr_of_demo()
                ),
            }
        }
        let nodes = nodes_of(demo.id());
        assert_eq!(nodes.len(), 12, "{nodes:?}\n{printed}");

        let pid = rustix::process::Pid::from_child(&demo);
        rustix::process::kill_process(pid, signal).unwrap();
        let status = demo.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while nodes.iter().any(|n| alive(*n)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let left: Vec<u32> = nodes.iter().copied().filter(|n| alive(*n)).collect();
        // Leave nothing behind even when the assertion fails.
        for n in &left {
            if let Some(pid) = rustix::process::Pid::from_raw(*n as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        assert!(left.is_empty(), "after {signal:?} nodes {left:?} still run");
        if signal == rustix::process::Signal::TERM {
            // The rest of what it printed, up to its end.
            while let Ok(line) = seen.recv_timeout(Duration::from_secs(10)) {
                printed.push_str(&(line + "\n"));
            }
            assert!(
                status.success(),
                "{status}\n{printed}\nits stderr:\n{}",
                stderr_of_demo()
            );
            assert!(printed.contains("Asked to terminate."), "{printed}");
            assert!(
                printed.contains("12 of 12 nodes stopped cleanly"),
                "{printed}"
            );
        }
    }
}

/// `scripts/demo.sh` builds every crate with the features a
/// `cargo build --release --workspace` gave it, so that neither build
/// compiles again what the other built: the features of each package of
/// the demo's build (by `cargo tree`, which resolves them as `cargo build`
/// does for the same selection) are those of the workspace's build.
#[test]
fn the_demo_builds_with_the_features_of_a_workspace_build() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = std::fs::read_to_string(root.join("scripts/demo.sh")).unwrap();
    let builds: Vec<&str> = script
        .lines()
        .filter_map(|line| line.trim().strip_prefix("cargo build "))
        .collect();
    assert_eq!(builds.len(), 1, "one cargo build in demo.sh: {builds:?}");
    // What selects packages and features; targets and the profile do not
    // change which features a package gets.
    let selection: Vec<&str> = builds[0]
        .split_whitespace()
        .filter(|arg| !["--release", "--bins", "--lib", "--locked"].contains(arg))
        .collect();
    let features = |selection: &[&str]| -> std::collections::BTreeSet<String> {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(&root)
            .args(["tree", "--locked", "-e", "normal,build", "--prefix", "none"])
            .args(["--format", "{p} [{f}]"])
            .args(selection)
            .output()
            .expect("run cargo tree");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| line.trim_end_matches(" (*)").to_owned())
            .filter(|line| !line.is_empty())
            .collect()
    };
    let workspace = features(&["--workspace"]);
    let demo = features(&selection);
    let differing: Vec<&String> = demo.difference(&workspace).collect();
    assert!(
        differing.is_empty(),
        "demo.sh builds these with other features than `cargo build --workspace`: {differing:?}"
    );
}

//! The README's main job: `zorilla-demo` (12 real nodes in three emulated
//! sites, a 16-worker nqueens job through the real `zorilla` tool) ends with
//! the right answer, the workers on the two nearest sites, its wall time
//! against the native one-core time, and every node stopped cleanly.

use std::process::Command;

#[test]
fn the_demo_runs_nqueens_on_the_nearest_sites_and_shuts_down_cleanly() {
    let out = Command::new(env!("CARGO_BIN_EXE_zorilla-demo"))
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
}

//! Issue 13's benchmark of the output store: 1 GiB of output appended in
//! 64 KiB blocks through the store's writer thread, one block at a time as
//! a worker node sends them (64 MiB with `ZORILLA_BENCH_SHORT=1`, as CI
//! runs it). It reports the time and the bytes the process wrote, from
//! `/proc/self/io` (`wchar`: bytes handed to `write` and its kin;
//! `write_bytes`: bytes sent to the storage layer), over the output's size.
//! Target: at most 2x. Storing each output file as one growing value wrote
//! it over and over (quadratic: 223 GB for a 270 MB output).
//!
//! Run: `cargo bench --workspace --bench store`.

use std::time::Duration;

const MIB: u64 = 1024 * 1024;

/// `ZORILLA_BENCH_SHORT=1` (CI): a small size, same code.
fn short() -> bool {
    std::env::var_os("ZORILLA_BENCH_SHORT").is_some()
}

/// `(wchar, write_bytes)` of this process so far.
fn written() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("wchar:"), field("write_bytes:"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let total = if short() { 64 * MIB } else { 1024 * MIB };
    let block = 64 * 1024;
    // Beside the build, on the disk (a tmpfs would hide the writes).
    // (It may not exist yet: the build can be elsewhere, CARGO_TARGET_DIR.)
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    std::fs::create_dir_all(&base).unwrap();
    let dir = tempfile::tempdir_in(&base).unwrap();
    let before = written();
    let took: Duration = zorilla_node::bench_append(dir.path(), total, block)
        .await
        .unwrap();
    let after = written();
    let wchar = after.0 - before.0;
    let write_bytes = after.1 - before.1;
    let mib = total / MIB;
    println!(
        "appended {mib} MiB in {} KiB blocks in {:.2} s ({:.0} MiB/s); wrote {} MiB ({} MiB to the disk)",
        block / 1024,
        took.as_secs_f64(),
        mib as f64 / took.as_secs_f64(),
        wchar / MIB,
        write_bytes / MIB
    );
    println!(
        "RESULT store.append_time {:.2} s ({mib} MiB)",
        took.as_secs_f64()
    );
    println!(
        "RESULT store.append_written {:.2} x the output (handed to write)",
        wchar as f64 / total as f64
    );
    println!(
        "RESULT store.append_disk {:.2} x the output (sent to the disk)",
        write_bytes as f64 / total as f64
    );
}

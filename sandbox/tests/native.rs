//! Native workers in their kernel sandbox: real processes (plain programs of
//! the machine: sh, cat, ls, awk, unshare), run as root as in CI. Each test
//! makes its own job directory and its own workers' control groups; every
//! wait is for an event, bounded in time.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use zorilla_sandbox::native::{NativeConfig, NativeSandbox, NativeSpec, SYSTEM_PATHS};
use zorilla_sandbox::{Limits, Outcome, OutputChunk, OutputKind, WorkerReport};

/// Bound on any one worker in these tests.
const PATIENCE: Duration = Duration::from_secs(60);

fn config(cgroup_name: &str) -> NativeConfig {
    let mut config = NativeConfig::new(env!("CARGO_BIN_EXE_zorilla-native-init").into());
    config.cgroup_name = cgroup_name.to_owned();
    config
}

/// A sandbox of the test's own: its workers' groups are made in parents of
/// its own, removed when it is dropped.
struct Own(NativeSandbox);

impl std::ops::Deref for Own {
    type Target = NativeSandbox;
    fn deref(&self) -> &NativeSandbox {
        &self.0
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        for parent in self.0.cgroup_parents() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

fn sandbox() -> Own {
    static MADE: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "zorilla-native-test-{}-{}",
        std::process::id(),
        MADE.fetch_add(1, Ordering::Relaxed)
    );
    Own(NativeSandbox::probe(config(&name))
        .unwrap_or_else(|e| panic!("{e} (these tests need root, as in CI)")))
}

fn limits(f: impl FnOnce(&mut Limits)) -> Limits {
    let mut limits = Limits::UNLIMITED;
    f(&mut limits);
    limits
}

fn sh(job_dir: &Path, script: &str, limits: Limits) -> NativeSpec {
    NativeSpec {
        exe: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        job_dir: job_dir.to_path_buf(),
        read_only_paths: SYSTEM_PATHS.iter().map(PathBuf::from).collect(),
        limits,
        max_processes: 64,
        output: None,
        inherit: Vec::new(),
    }
}

#[derive(Debug)]
struct Done {
    report: WorkerReport,
    stdout: String,
    stderr: String,
}

/// Runs a worker to its end, collecting its output.
async fn run(sandbox: &NativeSandbox, mut spec: NativeSpec) -> Done {
    let (tx, rx) = mpsc::channel(16);
    spec.output = Some(tx);
    let handle = sandbox.start(spec);
    let collect = collect(rx);
    let (report, (stdout, stderr)) =
        tokio::time::timeout(PATIENCE, async { tokio::join!(handle.wait(), collect) })
            .await
            .expect("the worker ended in time");
    Done {
        report,
        stdout,
        stderr,
    }
}

async fn collect(mut rx: mpsc::Receiver<OutputChunk>) -> (String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while let Some(chunk) = rx.recv().await {
        match chunk.kind {
            OutputKind::Stdout => out.extend(chunk.data),
            OutputKind::Stderr => err.extend(chunk.data),
        }
    }
    (
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_writes_its_directory_reads_listed_paths_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    std::fs::create_dir(&job).unwrap();
    std::fs::write(job.join("input.txt"), "from the job\n").unwrap();
    // A file the test made outside the job directory, and one in a
    // directory the owner did not list.
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "secret\n").unwrap();
    let script = format!(
        "cat input.txt; echo written > /job/out.txt; head -n 1 /etc/passwd; \
         cat {} || echo no-secret; cat /root/.bashrc /var/log/dpkg.log || echo no-root; \
         echo x > /usr/zorilla-test || echo no-usr-write; \
         echo x > /proc/self/comm || echo no-proc-write; \
         echo 1 > /sys/kernel/mm/ksm/run || echo no-sys-write; \
         for d in job proc tmp dev usr etc root var home sys boot; do \
           test -e /$d && echo has-$d; done; id -u",
        secret.display()
    );
    let done = run(&sandbox(), sh(&job, &script, Limits::UNLIMITED)).await;
    assert_eq!(done.report.outcome, Outcome::Exited(0), "{done:?}");
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(lines[0], "from the job");
    assert!(lines[1].starts_with("root:"), "{done:?}");
    assert!(lines.contains(&"no-secret"), "{done:?}");
    assert!(lines.contains(&"no-root"), "{done:?}");
    assert!(lines.contains(&"no-usr-write"), "{done:?}");
    // /proc is writable as far as mounts go: Landlock refuses this.
    assert!(lines.contains(&"no-proc-write"), "{done:?}");
    // /sys is listed (MPI libraries read it), read-only.
    assert!(lines.contains(&"no-sys-write"), "{done:?}");
    // The root holds only the sandbox's own directories and listed paths.
    for entry in ["job", "proc", "tmp", "dev", "usr", "etc", "sys"] {
        let has = format!("has-{entry}");
        assert!(lines.contains(&has.as_str()), "{entry} missing: {done:?}");
    }
    for entry in ["root", "var", "home", "boot"] {
        let has = format!("has-{entry}");
        assert!(!lines.contains(&has.as_str()), "{entry} shown: {done:?}");
    }
    // Not root inside.
    assert_eq!(lines.last(), Some(&"1000"), "{done:?}");
    assert!(done.stderr.contains("secret.txt: No such file"), "{done:?}");
    assert_eq!(
        std::fs::read_to_string(job.join("out.txt")).unwrap(),
        "written\n"
    );
    assert!(!Path::new("/usr/zorilla-test").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_own_program_runs_from_its_directory() {
    // A C program built now, linked against the machine's C library, as a
    // user's binary would be.
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    std::fs::create_dir(&job).unwrap();
    let source = dir.path().join("prog.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n\
         int main(int argc, char **argv) {\n\
           char *buf = malloc(1 << 20);\n\
           printf(\"%s uid %d pid %d %s\\n\", argv[1], (int)getuid(), (int)getpid(),\n\
                  getenv(\"GREETING\"));\n\
           free(buf);\n\
           return 7;\n\
         }\n",
    )
    .unwrap();
    let built = std::process::Command::new("cc")
        .arg("-o")
        .arg(job.join("prog"))
        .arg(&source)
        .status()
        .expect("cc (gcc) is on every machine these tests run on");
    assert!(built.success());
    let spec = NativeSpec {
        exe: "/job/prog".into(),
        args: vec!["hello".into()],
        env: vec![("GREETING".into(), "howdy".into())],
        ..sh(&job, "", Limits::UNLIMITED)
    };
    let done = run(&sandbox(), spec).await;
    assert_eq!(done.report.outcome, Outcome::Exited(7), "{done:?}");
    assert_eq!(done.stdout, "hello uid 1000 pid 2 howdy\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_sees_only_its_own_processes() {
    let dir = tempfile::tempdir().unwrap();
    // The test's own process is visible on the host, and not in the job.
    let script = format!(
        "ls /proc | grep -c '^[0-9]*$'; test -e /proc/{}/status && echo host-visible; \
         ls /proc/1/fd > /dev/null 2>&1 || echo first-closed; echo $$",
        std::process::id()
    );
    let script = format!("echo ${{CARGO_PKG_NAME:-clean-env}}; {script}");
    assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
    let done = run(&sandbox(), sh(dir.path(), &script, Limits::UNLIMITED)).await;
    assert_eq!(done.report.outcome, Outcome::Exited(0), "{done:?}");
    let lines: Vec<&str> = done.stdout.lines().collect();
    // Nothing of the node's environment.
    assert_eq!(lines[0], "clean-env");
    let lines = &lines[1..];
    // The namespace's first process, sh, ls and grep (the test's process
    // is not one of them whatever its number).
    let count: usize = lines[0].parse().unwrap();
    assert!(count <= 4, "{done:?}");
    assert!(!lines.contains(&"host-visible") || std::process::id() <= 4);
    // The namespace's first process holds the status pipe to the node: the
    // job cannot reach it through /proc (it is not dumpable).
    assert!(lines.contains(&"first-closed"), "{done:?}");
    // sh is the second process of its namespace.
    assert_eq!(lines.last(), Some(&"2"), "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exceeding_the_memory_limit_is_out_of_memory() {
    let dir = tempfile::tempdir().unwrap();
    // A string that doubles until it is far beyond 32 MiB.
    let script = "awk 'BEGIN { s = \"x\"; for (i = 0; i < 40; i++) s = s s; print length(s) }'";
    let limits = limits(|l| l.memory_bytes = 32 << 20);
    let done = run(&sandbox(), sh(dir.path(), script, limits)).await;
    assert_eq!(done.report.outcome, Outcome::OutOfMemory, "{done:?}");
    assert_eq!(
        done.report.outcome.to_string(),
        "needed more memory than its limit allows"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_ends_at_the_process_limit() {
    let dir = tempfile::tempdir().unwrap();
    // Each round starts a copy of itself in the background; bounded by
    // its depth in case the limit did not hold.
    let script =
        "bomb() { [ $1 -gt 12 ] && exit 0; bomb $(($1+1)) & bomb $(($1+1)); wait; }; bomb 0";
    let mut spec = sh(dir.path(), script, limits(|l| l.wall_time = PATIENCE));
    spec.max_processes = 16;
    let done = run(&sandbox(), spec).await;
    assert_eq!(done.report.outcome, Outcome::ProcessLimit(16), "{done:?}");
    assert_eq!(
        done.report.outcome.to_string(),
        "tried to run more than its limit of 16 processes and threads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_job_ends_at_its_cpu_time_limit() {
    let dir = tempfile::tempdir().unwrap();
    let cpu = Duration::from_millis(300);
    let spec = sh(
        dir.path(),
        "while :; do :; done",
        limits(|l| l.cpu_time = cpu),
    );
    let done = run(&sandbox(), spec).await;
    assert_eq!(done.report.outcome, Outcome::CpuLimit(cpu), "{done:?}");
    assert!(done.report.cpu_time >= cpu, "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_job_ends_at_its_wall_clock_limit() {
    let dir = tempfile::tempdir().unwrap();
    let wall = Duration::from_millis(300);
    let spec = sh(dir.path(), "sleep 600", limits(|l| l.wall_time = wall));
    let done = run(&sandbox(), spec).await;
    assert_eq!(done.report.outcome, Outcome::TimeLimit(wall), "{done:?}");
    assert!(done.report.cpu_time < Duration::from_secs(1), "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_and_disk_limits_hold_and_exit_statuses_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    let loud = sh(dir.path(), "yes", limits(|l| l.output_bytes = 1000));
    let done = run(&sandbox(), loud).await;
    assert_eq!(done.report.outcome, Outcome::OutputLimit, "{done:?}");
    assert_eq!(done.stdout.len(), 1000);
    assert_eq!(done.report.output_bytes, 1000);

    let writer = sh(
        dir.path(),
        "while :; do head -c 100000 /dev/zero >> /job/big; done",
        limits(|l| l.disk_bytes = 1 << 20),
    );
    let done = run(&sandbox(), writer).await;
    assert_eq!(done.report.outcome, Outcome::DiskLimit, "{done:?}");

    let failing = sh(dir.path(), "echo bye >&2; exit 3", Limits::UNLIMITED);
    let done = run(&sandbox(), failing).await;
    assert_eq!(done.report.outcome, Outcome::Exited(3), "{done:?}");
    assert_eq!(done.stderr, "bye\n");

    let missing = NativeSpec {
        exe: "/job/missing".into(),
        ..sh(dir.path(), "", Limits::UNLIMITED)
    };
    let done = run(&sandbox(), missing).await;
    assert_eq!(
        done.report.outcome.to_string(),
        "could not start: cannot run /job/missing: No such file or directory (os error 2)",
        "{done:?}"
    );

    let killed = sh(dir.path(), "kill -SEGV $$", Limits::UNLIMITED);
    let done = run(&sandbox(), killed).await;
    assert_eq!(
        done.report.outcome.to_string(),
        "was stopped by a trap: killed by signal 11 (SIGSEGV)",
        "{done:?}"
    );
}

/// Host processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_everything_the_job_started() {
    let sandbox = sandbox();
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("{}.{}", 900_000 + std::process::id() % 90_000, 5);
    // A child and a grandchild that ignore SIGTERM, and the job itself.
    let script = format!(
        "trap '' TERM; (trap '' TERM; sleep {marker} & sleep {marker}) & sleep {marker} & \
         while [ $(ls /proc | grep -c '^[0-9]*$') -lt 6 ]; do sleep 0.01; done; echo started; wait"
    );
    let before = groups(&sandbox);
    let (tx, mut rx) = mpsc::channel(16);
    let mut spec = sh(dir.path(), &script, Limits::UNLIMITED);
    spec.output = Some(tx);
    let handle = sandbox.start(spec);
    let first = tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .expect("the job started in time")
        .expect("output");
    assert_eq!(first.data, b"started\n");
    // The three sleeps, and the shells and helpers whose command lines
    // hold the script.
    assert!(processes_with(&marker).len() >= 3);
    // The worker's group in each hierarchy.
    let made: Vec<PathBuf> = groups(&sandbox)
        .into_iter()
        .filter(|g| !before.contains(g))
        .collect();
    assert_eq!(made.len(), sandbox.cgroup_parents().len());
    handle.cancel();
    let report = tokio::time::timeout(PATIENCE, handle.wait())
        .await
        .expect("the worker ended in time");
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert_eq!(processes_with(&marker), Vec::<u32>::new());
    for group in made {
        assert!(!group.exists(), "{} is left", group.display());
    }
}

/// The workers' groups of `sandbox` that exist now.
fn groups(sandbox: &Own) -> Vec<PathBuf> {
    sandbox
        .cgroup_parents()
        .iter()
        .flat_map(|parent| std::fs::read_dir(parent).unwrap())
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_a_job_has_no_business_making_fail_with_eperm() {
    let dir = tempfile::tempdir().unwrap();
    // Without the filter an unprivileged process may make a user namespace
    // (and the worker's own may have children): the refusal is seccomp's.
    let script = "unshare --user true || echo refused; \
                  unshare --mount true || echo refused-mount";
    let done = run(&sandbox(), sh(dir.path(), script, Limits::UNLIMITED)).await;
    assert_eq!(done.report.outcome, Outcome::Exited(0), "{done:?}");
    assert_eq!(done.stdout, "refused\nrefused-mount\n", "{done:?}");
    assert!(done.stderr.contains("Operation not permitted"), "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abstract_sockets_of_the_machine_cannot_be_reached() {
    // The network namespace is the machine's (MPI needs it), and with it
    // the abstract Unix sockets of the machine's services: Landlock scopes
    // them out.
    use std::os::linux::net::SocketAddrExt;
    let name = format!("zorilla-native-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); \
         s.connect(b'\\0{name}')\" 2>&1 | tail -n 1"
    );
    let done = run(&sandbox(), sh(dir.path(), &script, Limits::UNLIMITED)).await;
    assert_eq!(done.report.outcome, Outcome::Exited(0), "{done:?}");
    assert!(
        done.stdout.contains("PermissionError") || done.stdout.contains("not permitted"),
        "{done:?}"
    );
    // The same connection from outside works: the socket is there.
    std::os::unix::net::UnixStream::connect_addr(&addr).unwrap();
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_running_together_have_identities_of_their_own() {
    use std::os::unix::fs::MetadataExt;
    let sandbox = sandbox();
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    std::fs::create_dir(&first).unwrap();
    std::fs::create_dir(&second).unwrap();
    // The first worker runs until cancelled, once it has written its file.
    let (tx, mut rx) = mpsc::channel(4);
    let mut spec = sh(
        &first,
        "echo mine > /job/a.txt; echo ready; sleep 600",
        Limits::UNLIMITED,
    );
    spec.output = Some(tx);
    let running = sandbox.start(spec);
    let ready = tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .expect("the first worker started in time");
    assert_eq!(ready.map(|c| c.data), Some(b"ready\n".to_vec()));
    let done = run(&sandbox, sh(&second, "ls /job; id -u", Limits::UNLIMITED)).await;
    assert_eq!(done.report.outcome, Outcome::Exited(0), "{done:?}");
    // Its own empty directory; the same id inside.
    assert_eq!(done.stdout, "1000\n", "{done:?}");
    let owner = |p: &Path| std::fs::metadata(p).unwrap().uid();
    assert_ne!(owner(&first), owner(&second));
    assert_eq!(owner(&first.join("a.txt")), owner(&first));
    running.cancel();
    let report = tokio::time::timeout(PATIENCE, running.wait())
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Cancelled);
}

#[test]
fn the_probe_names_the_mechanism_it_cannot_enforce() {
    // A control-group "root" that is an ordinary directory.
    let fake = tempfile::tempdir().unwrap();
    for ctrl in ["memory", "pids", "cpuacct"] {
        std::fs::create_dir(fake.path().join(ctrl)).unwrap();
    }
    let mut faked = config("zorilla-native-test-fake");
    faked.cgroup_root = Some(fake.path().to_path_buf());
    let err = NativeSandbox::probe(faked).err().expect("refused");
    let sentence = err.to_string();
    assert!(
        sentence.starts_with("this node cannot sandbox native jobs: control groups: "),
        "{sentence}"
    );
    assert!(sentence.contains("memory controller"), "{sentence}");

    // A helper that is not there.
    let mut missing = config("zorilla-native-test-missing");
    missing.init_program = fake.path().join("no-such-helper");
    let sentence = NativeSandbox::probe(missing)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        sentence.contains("cannot start the sandbox helper"),
        "{sentence}"
    );
}

/// The socket a worker is given is its descriptor 3, both ways, and its
/// end closes when the worker ends; a worker given none has no descriptor
/// 3 (nothing else of the node's leaks in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_talks_over_the_socket_it_inherits_as_descriptor_3_and_gets_no_other() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    std::fs::create_dir(&job).unwrap();
    let sandbox = sandbox();
    let (ours, theirs) = UnixStream::pair().unwrap();
    let mut spec = sh(
        &job,
        "echo hello >&3 && read answer <&3 && echo \"got $answer\"",
        Limits::UNLIMITED,
    );
    spec.inherit = vec![theirs.into()];
    let talk = std::thread::spawn(move || {
        let mut lines = BufReader::new(ours.try_clone().unwrap());
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        (&ours).write_all(b"welcome\n").unwrap();
        // The worker's end closes with it: end of file, not a hang.
        let mut rest = String::new();
        lines.read_line(&mut rest).unwrap();
        (line, rest)
    });
    let done = run(&sandbox, spec).await;
    assert_eq!(done.report.outcome, Outcome::Exited(0), "{done:?}");
    assert_eq!(done.stdout, "got welcome\n", "{done:?}");
    let (said, rest) = talk.join().unwrap();
    assert_eq!(said, "hello\n");
    assert_eq!(rest, "", "the worker's end is closed once it ended");

    let done = run(
        &sandbox,
        sh(
            &job,
            "if [ -e /proc/self/fd/3 ]; then echo open; else echo closed; fi",
            Limits::UNLIMITED,
        ),
    )
    .await;
    assert_eq!(done.stdout, "closed\n", "{done:?}");
}

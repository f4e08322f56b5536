//! A node whose disk fills up: a real `zorilla-node` with its state
//! directory on a small file system of its own (a tmpfs in a mount
//! namespace that the test creates, so nothing else is filled and no mount
//! outlives the test). Needs root, as CI has.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{log_tail_of, wait_completed, wasm};
use zorilla_node::ReadyLine;
use zorilla_node::client::{Client, ClientError};
use zorilla_node::protocol::{ErrorKind, JobPhase, JobRequest, NamedFile};

/// The size of the node's file system.
const DISK_MIB: u32 = 24;

/// A tmpfs mounted at `dir` in a mount namespace of its own, kept by a
/// holder process: the mount exists only in that namespace, and goes when
/// the holder is killed (on drop).
struct SmallDisk {
    holder: Child,
    /// The holder's pid: `/proc/PID/root` reaches the namespace's files.
    pid: u32,
    dir: PathBuf,
}

impl SmallDisk {
    fn new(dir: &Path) -> SmallDisk {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test mounts a small file system in a mount namespace of its own: run it as root"
        );
        std::fs::create_dir_all(dir).unwrap();
        let script = format!(
            "mount -t tmpfs -o size={DISK_MIB}m zorilla-disk-test \"$1\" && echo $$ && exec sleep 600"
        );
        let mut holder = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(&script)
            .arg("sh")
            .arg(dir)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start unshare");
        let mut line = String::new();
        BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let pid = line.trim().parse().unwrap_or_else(|_| {
            let _ = holder.kill();
            panic!("could not mount a tmpfs in a mount namespace (said {line:?})")
        });
        SmallDisk {
            holder,
            pid,
            dir: dir.to_owned(),
        }
    }

    /// A path in the small file system, as seen from outside its namespace.
    fn outside(&self, name: &str) -> PathBuf {
        let inner = self.dir.strip_prefix("/").unwrap();
        Path::new(&format!("/proc/{}/root", self.pid))
            .join(inner)
            .join(name)
    }

    /// Fills the file system up with a file `name`; returns its size.
    fn fill(&self, name: &str) -> u64 {
        let mut file = std::fs::File::create(self.outside(name)).unwrap();
        let block = vec![0x5a_u8; 256 * 1024];
        let mut written = 0u64;
        for _ in 0..(4 * DISK_MIB) {
            match file.write(&block) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        written
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// A node run inside the small disk's namespace.
struct Node {
    child: Child,
    client: String,
    log: PathBuf,
}

impl Node {
    fn start(disk: &SmallDisk, log: &Path) -> Node {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let mut child = Command::new("nsenter")
            .arg(format!("--mount=/proc/{}/ns/mnt", disk.pid))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_zorilla-node"))
            .arg("--state-dir")
            .arg(&disk.dir)
            .arg("--network")
            .arg(format!("disk-{}", std::process::id()))
            .args([
                "--client",
                "127.0.0.1:0",
                "--listen",
                "/ip4/127.0.0.1/tcp/0",
                "--mdns",
                "false",
                "--cores",
                "2",
                "--memory-mib",
                "1024",
                "--disk-mib",
                "16",
            ])
            .env("RUST_LOG", "info,zorilla_overlay=warn,libp2p=warn")
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .expect("start zorilla-node");
        let ready = ReadyLine::wait(child.stdout.take().unwrap(), Duration::from_secs(30))
            .unwrap_or_else(|| panic!("the node did not get ready:\n{}", log_tail_of(log)));
        Node {
            child,
            client: ready.client,
            log: log.to_owned(),
        }
    }

    async fn client(&self) -> Client {
        Client::connect(self.client.as_str()).await.unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hello() -> (JobRequest, Vec<u8>, Vec<NamedFile>) {
    let inputs = vec![NamedFile {
        name: "name.txt".into(),
        data: b"disk".to_vec(),
    }];
    (JobRequest::default(), wasm("hello"), inputs)
}

const REFUSED: &str = "this node cannot write to its disk (No space left on device): it accepts no jobs until space is freed";

/// Fills the node's disk: a submission that needs room is refused with the
/// reason, and so is every later one, while the node keeps answering and
/// says why (`NodeInfo::disk_problem`); once the filler is deleted the node
/// takes and completes jobs again without a restart, and every job it had
/// accepted is there, after a restart too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_jobs_until_space_is_freed_and_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = SmallDisk::new(&tmp.path().join("state"));
    let log = tmp.path().join("node.log");
    let mut node = Node::start(&disk, &log);
    let mut client = node.client().await;

    let (request, module, inputs) = hello();
    let before = client.submit(request, module, inputs).await.unwrap();
    wait_completed(&mut client, before, Duration::from_secs(60)).await;

    let filled = disk.fill("filler");
    assert!(filled > 0, "nothing could be written");
    // A job with an input larger than the room left needs the disk.
    let (request, module, _) = hello();
    let big = vec![NamedFile {
        name: "big.bin".into(),
        data: vec![1u8; 4 * 1024 * 1024],
    }];
    let refusal = |r: Result<u64, ClientError>| match r {
        Err(ClientError::Node { kind, message }) => (kind, message),
        other => panic!("not refused: {other:?}\n{}", log_tail_of(&node.log)),
    };
    assert_eq!(
        refusal(client.submit(request, module, big).await),
        (ErrorKind::Busy, REFUSED.to_string())
    );
    // Every later submission, small ones too, is refused the same way.
    for _ in 0..3 {
        let (request, module, inputs) = hello();
        assert_eq!(
            refusal(client.submit(request, module, inputs).await),
            (ErrorKind::Busy, REFUSED.to_string())
        );
    }
    // The node keeps answering, and says why it takes nothing.
    let info = client.node_info().await.unwrap();
    assert_eq!(
        info.disk_problem.as_deref(),
        Some("No space left on device")
    );
    assert_eq!(
        client.status(before).await.unwrap().phase,
        JobPhase::Completed
    );
    assert_eq!(client.list().await.unwrap().len(), 1);

    std::fs::remove_file(disk.outside("filler")).unwrap();
    let start = Instant::now();
    loop {
        let info = client.node_info().await.unwrap();
        if info.disk_problem.is_none() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the node did not find its disk writable again: {info:?}\n{}",
            log_tail_of(&node.log)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (request, module, inputs) = hello();
    let after = client.submit(request, module, inputs).await.unwrap();
    wait_completed(&mut client, after, Duration::from_secs(60)).await;

    drop(client);
    drop(node);
    node = Node::start(&disk, &log);
    let mut client = node.client().await;
    let mut jobs: Vec<(u64, JobPhase)> = client
        .list()
        .await
        .unwrap()
        .iter()
        .map(|s| (s.job, s.phase))
        .collect();
    jobs.sort_unstable();
    let mut expected = vec![(before, JobPhase::Completed), (after, JobPhase::Completed)];
    expected.sort_unstable();
    assert_eq!(jobs, expected);
    assert!(!client.logs(after).await.unwrap().is_empty());
}

//! Tests of the store: its parts together, and through a disk that fills.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redb::Database;

use super::db::{CACHE_BYTES, Deferred, MAX_DEFERRED_BYTES, RETRY_MAX};
use super::outputs::OutputFile;
use super::schema::OUTPUTS;
use super::*;
use crate::protocol::{JobPhase, JobRequest, LogChunk, OutcomeCode, RankStatus};

#[test]
fn everything_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let job = JobRecord {
        kept_run: None,
        id: 7,
        phase: JobPhase::Running,
        reason: "running".into(),
        request: JobRequest::default(),
        module: FileRef {
            name: "m".into(),
            sha256: "ab".into(),
            size: 3,
        },
        inputs: vec![],
        ranks: Default::default(),
        submitted_unix: 0,
        moved_from: None,
        moved_to: None,
        owner: None,
        owner_proof: None,
        origin: None,
        tasks: None,
    };
    {
        let store = Store::open(&path).unwrap();
        store.put_submission(&job, &[("ab", b"xyz")]).unwrap();
        for data in [b"one".to_vec(), b"two".to_vec()] {
            store
                .append_log(
                    7,
                    &LogChunk {
                        rank: 0,
                        stderr: false,
                        data,
                    },
                )
                .unwrap();
        }
        store.append_output(7, "0/out", 0, b"he", false).unwrap();
        store.append_output(7, "0/out", 2, b"llo", true).unwrap();
        store.append_output(8, "0/out", 0, b"other", true).unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.jobs().unwrap(), vec![job]);
    assert_eq!(store.blob_block("ab", 1, 10).unwrap().unwrap(), b"yz");
    let (chunks, next, _) = store.logs_from(7, 0, usize::MAX).unwrap();
    let logs: Vec<Vec<u8>> = chunks.into_iter().map(|c| c.data).collect();
    assert_eq!(logs, vec![b"one".to_vec(), b"two".to_vec()]);
    assert_eq!(next, 2);
    // Pages: at least one chunk each, then on from `next`.
    let (page, next, _) = store.logs_from(7, 0, 1).unwrap();
    assert_eq!((page.len(), next), (1, 1));
    let (page, next, _) = store.logs_from(7, next, 1).unwrap();
    assert_eq!((page[0].data.as_slice(), next), (b"two".as_slice(), 2));
    assert!(store.logs_from(7, next, 1).unwrap().0.is_empty());
    let (files, more) = store.output_files(7, "", 10).unwrap();
    assert_eq!(
        (files, more),
        (
            vec![OutputFile {
                name: "0/out".into(),
                size: 5
            }],
            false
        )
    );
    assert_eq!(
        store.output_block(7, "0/out", 0, 100).unwrap(),
        Some((b"hello".to_vec(), 5))
    );
    assert_eq!(store.output_block(7, "0/other", 0, 100).unwrap(), None);
}

/// Bytes of the files below `dir`.
fn tree_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                tree_size(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

/// An output of many blocks costs its own size on disk (each block is
/// written where it goes, not the whole file again), reads back in
/// blocks, and starts afresh when sent again from 0.
#[test]
fn outputs_grow_by_their_blocks_and_read_back_in_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.redb")).unwrap();
    let empty = tree_size(dir.path());
    let block: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
    let blocks = 128u64; // 32 MiB
    for i in 0..blocks {
        let offset = i * block.len() as u64;
        store
            .append_output(3, "0/big", offset, &block, i + 1 == blocks)
            .unwrap();
    }
    let size = blocks * block.len() as u64;
    let used = tree_size(dir.path()) - empty;
    assert!(
        used >= size && used < size + 1024 * 1024,
        "{used} bytes on disk for {size}"
    );
    let (files, _) = store.output_files(3, "", 10).unwrap();
    assert_eq!(files[0].size, size);
    // A block from the middle, and the end.
    let (data, total) = store.output_block(3, "0/big", 1000, 5000).unwrap().unwrap();
    assert_eq!((data.as_slice(), total), (&block[1000..6000], size));
    let (data, _) = store
        .output_block(3, "0/big", size - 10, 100)
        .unwrap()
        .unwrap();
    assert_eq!(data, &block[block.len() - 10..]);
    assert!(
        store
            .output_block(3, "0/big", size + 5, 100)
            .unwrap()
            .unwrap()
            .0
            .is_empty()
    );
    // Sent again from the start: the old tail goes.
    store.append_output(3, "0/big", 0, b"again", true).unwrap();
    assert_eq!(
        store.output_block(3, "0/big", 0, 100).unwrap(),
        Some((b"again".to_vec(), 5))
    );
}

/// Listing pages: at most `max` names, in order, after the one given.
#[test]
fn output_listing_pages_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.redb")).unwrap();
    for name in ["0/a", "0/b", "1/a", "1/sub/c"] {
        store
            .append_output(5, name, 0, name.as_bytes(), true)
            .unwrap();
    }
    store
        .append_output(6, "0/z", 0, b"other job", true)
        .unwrap();
    let names =
        |files: Vec<OutputFile>| -> Vec<String> { files.into_iter().map(|f| f.name).collect() };
    let (page, more) = store.output_files(5, "", 2).unwrap();
    assert_eq!(
        (names(page), more),
        (vec!["0/a".into(), "0/b".into()], true)
    );
    let (page, more) = store.output_files(5, "0/b", 2).unwrap();
    assert_eq!(
        (names(page), more),
        (vec!["1/a".into(), "1/sub/c".into()], false)
    );
    assert_eq!(store.output_bytes(5).unwrap(), 3 + 3 + 3 + 7);
    assert!(store.output_files(7, "", 2).unwrap().0.is_empty());
}

/// The writer thread: what many senders hand it at once is all
/// written, each sender's in its order, and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_writes_what_many_senders_hand_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(Store::open(&dir.path().join("state.redb")).unwrap());
    let writer = Writer::start(store.clone()).unwrap();
    let mut tasks = Vec::new();
    for rank in 0..8u32 {
        let writer = writer.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..50u32 {
                let chunk = LogChunk {
                    rank,
                    stderr: false,
                    data: format!("{rank}:{i}\n").into_bytes(),
                };
                writer.append(Append::Log { job: 9, chunk }).await.unwrap();
                let item = Append::Output {
                    job: 9,
                    name: format!("{rank}/out"),
                    offset: u64::from(i) * 4,
                    data: i.to_le_bytes().to_vec(),
                    last: i == 49,
                };
                writer.append(item).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let (logs, next, _) = store.logs_from(9, 0, usize::MAX).unwrap();
    assert_eq!(next, 400);
    for rank in 0..8u32 {
        let lines: Vec<String> = logs
            .iter()
            .filter(|c| c.rank == rank)
            .map(|c| String::from_utf8_lossy(&c.data).into_owned())
            .collect();
        let expected: Vec<String> = (0..50).map(|i| format!("{rank}:{i}\n")).collect();
        assert_eq!(lines, expected);
        let (data, size) = store
            .output_block(9, &format!("{rank}/out"), 0, 1000)
            .unwrap()
            .unwrap();
        assert_eq!(size, 200);
        let expected: Vec<u8> = (0..50u32).flat_map(|i| i.to_le_bytes()).collect();
        assert_eq!(data, expected);
    }
}

/// Outputs that an older version kept whole in the database move to
/// files when the store opens.
#[test]
fn outputs_of_an_older_database_move_to_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(OUTPUTS)
            .unwrap()
            .insert((4, "0/old.txt"), b"kept".as_slice())
            .unwrap();
        tx.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.output_block(4, "0/old.txt", 0, 100).unwrap(),
        Some((b"kept".to_vec(), 4))
    );
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.output_files(4, "", 10).unwrap().0.len(), 1);
}

#[test]
fn log_tail_is_the_newest_chunks_with_their_arrival_times() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.redb")).unwrap();
    let before = unix_ms();
    for i in 0..10 {
        let chunk = LogChunk {
            rank: i % 2,
            stderr: false,
            data: format!("line {i}\n").into_bytes(),
        };
        store.append_log(1, &chunk).unwrap();
    }
    let other = LogChunk {
        rank: 0,
        stderr: true,
        data: b"other job\n".to_vec(),
    };
    store.append_log(2, &other).unwrap();
    // Enough chunks for more than 3 lines, oldest first.
    let tail = store.log_tail(1, 3, 1 << 20).unwrap();
    let texts: Vec<&[u8]> = tail.iter().map(|(_, c)| c.data.as_slice()).collect();
    assert_eq!(texts, [b"line 6\n", b"line 7\n", b"line 8\n", b"line 9\n"]);
    assert!(tail.iter().all(|(at, _)| *at >= before), "{tail:?}");
    // The byte bound stops it too, after at least one chunk.
    let tail = store.log_tail(1, 100, 1).unwrap();
    assert_eq!(tail.len(), 1);
    assert_eq!(tail[0].1.data, b"line 9\n");
    assert!(store.log_tail(3, 100, 1 << 20).unwrap().is_empty());
}

/// A file backend whose writes fail with "No space left on device"
/// while `full` is set: a disk that fills up and is freed again.
#[derive(Debug)]
struct Disk {
    inner: redb::backends::FileBackend,
    full: std::sync::Arc<AtomicBool>,
}

impl Disk {
    fn check(&self) -> std::io::Result<()> {
        if self.full.load(Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(28));
        }
        Ok(())
    }
}

impl redb::StorageBackend for Disk {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.check()?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.check()?;
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.check()?;
        self.inner.write(offset, data)
    }
    fn close(&self) -> std::io::Result<()> {
        self.inner.close()
    }
}

fn store_on(path: &Path, full: &std::sync::Arc<AtomicBool>) -> Store {
    let (file, full) = (path.to_owned(), full.clone());
    Store::with_opener(
        path,
        Box::new(move || -> Result<Database, redb::Error> {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&file)?;
            let disk = Disk {
                inner: redb::backends::FileBackend::new(f)?,
                full: full.clone(),
            };
            Ok(redb::Builder::new()
                .set_cache_size(CACHE_BYTES)
                .create_with_backend(disk)?)
        }),
    )
    .unwrap()
}

/// A job record of `id` in `phase` (for tests of what keeps records).
pub(crate) fn job(id: u64, phase: JobPhase) -> JobRecord {
    JobRecord {
        kept_run: None,
        id,
        phase,
        reason: format!("{phase:?}"),
        request: JobRequest::default(),
        module: FileRef {
            name: "m".into(),
            sha256: "ab".into(),
            size: 3,
        },
        inputs: vec![],
        ranks: Default::default(),
        submitted_unix: 0,
        moved_from: None,
        moved_to: None,
        owner: None,
        owner_proof: None,
        origin: None,
        tasks: None,
    }
}

/// The store through a full disk: new jobs are refused with the reason,
/// changes of accepted jobs wait in memory, and once the disk has room
/// again the store writes them by itself, without a restart.
#[test]
fn a_full_disk_refuses_new_jobs_keeps_accepted_writes_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let full = std::sync::Arc::new(AtomicBool::new(false));
    let store = store_on(&path, &full);
    store
        .put_submission(&job(1, JobPhase::Scheduling), &[("ab", b"xyz")])
        .unwrap();
    assert_eq!(store.unwritable(), None);

    full.store(true, Ordering::SeqCst);
    let refused = store.put_submission(&job(2, JobPhase::Scheduling), &[]);
    let reason = "No space left on device".to_string();
    assert_eq!(refused, Err(StoreError::Unwritable(reason.clone())));
    assert_eq!(
        refused.unwrap_err().to_string(),
        "this node cannot write to its disk (No space left on device)"
    );
    assert_eq!(store.unwritable(), Some(reason.clone()));
    // Changes of the accepted job are kept, not refused.
    store.put_job(&job(1, JobPhase::Running)).unwrap();
    store.put_job(&job(1, JobPhase::Completed)).unwrap();
    let chunk = LogChunk {
        rank: 0,
        stderr: false,
        data: b"line\n".to_vec(),
    };
    store.append_log(1, &chunk).unwrap();
    store.append_output(1, "0/out", 0, b"he", false).unwrap();
    store.append_output(1, "0/out", 2, b"llo", true).unwrap();
    assert_eq!(store.job(1).unwrap().unwrap().phase, JobPhase::Completed);
    // Still full: tries fail, and nothing waiting is dropped.
    for _ in 0..3 {
        assert!(!store.retry());
    }
    assert_eq!(
        store.put_submission(&job(2, JobPhase::Scheduling), &[]),
        Err(StoreError::Unwritable(reason))
    );

    full.store(false, Ordering::SeqCst);
    let start = Instant::now();
    while !store.retry() {
        assert!(
            start.elapsed() < RETRY_MAX * 3,
            "the store did not try the disk again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(store.unwritable(), None);
    store
        .put_submission(&job(2, JobPhase::Scheduling), &[])
        .unwrap();
    let check = |store: &Store| {
        let phases: Vec<(u64, JobPhase)> = store
            .jobs()
            .unwrap()
            .iter()
            .map(|j| (j.id, j.phase))
            .collect();
        assert_eq!(
            phases,
            [(1, JobPhase::Completed), (2, JobPhase::Scheduling)]
        );
        let (logs, next, _) = store.logs_from(1, 0, usize::MAX).unwrap();
        assert_eq!((logs, next), (vec![chunk.clone()], 1));
        assert_eq!(
            store.output_block(1, "0/out", 0, 100).unwrap(),
            Some((b"hello".to_vec(), 5))
        );
        assert_eq!(store.blob_block("ab", 0, 10).unwrap().unwrap(), b"xyz");
    };
    check(&store);
    drop(store);
    check(&Store::open(&path).unwrap());
}

/// An output block whose file cannot be written (here: a file stands
/// where the job's directory goes) makes the store unwritable; the
/// block and those after it wait in memory, in order, and are written
/// once the obstacle is gone, without a restart.
#[test]
fn an_output_that_cannot_be_written_waits_and_is_written_later() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.redb")).unwrap();
    std::fs::create_dir_all(dir.path().join("outputs")).unwrap();
    let obstacle = dir.path().join("outputs").join("2");
    std::fs::write(&obstacle, b"in the way").unwrap();
    store
        .append_output(2, "0/out", 0, b"first ", false)
        .unwrap();
    assert!(store.unwritable().is_some());
    store.append_output(2, "0/out", 6, b"second", true).unwrap();
    assert!(store.output_files(2, "", 10).unwrap().0.is_empty());
    std::fs::remove_file(&obstacle).unwrap();
    let start = Instant::now();
    while !store.retry() {
        assert!(
            start.elapsed() < RETRY_MAX * 3,
            "the store did not try the disk again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        store.output_block(2, "0/out", 0, 100).unwrap(),
        Some((b"first second".to_vec(), 12))
    );
}

/// What waits for the disk is bounded: past [`MAX_DEFERRED_BYTES`]
/// output is refused, while a job's record is always kept (the newest).
#[test]
fn deferred_writes_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let full = std::sync::Arc::new(AtomicBool::new(false));
    let store = store_on(&path, &full);
    full.store(true, Ordering::SeqCst);
    let block = vec![7u8; MAX_DEFERRED_BYTES / 4 - 1024];
    for i in 0..4 {
        let offset = (i * block.len()) as u64;
        store
            .append_output(1, "0/big", offset, &block, false)
            .unwrap();
    }
    assert!(matches!(
        store.append_output(1, "0/big", 4 * block.len() as u64, &block, false),
        Err(StoreError::Unwritable(_))
    ));
    for phase in [JobPhase::Running, JobPhase::Completed] {
        store.put_job(&job(1, phase)).unwrap();
    }
    let jobs = store.deferred_count(|d| matches!(d, Deferred::Job { .. }));
    assert_eq!(jobs, 1);
}

#[test]
fn phases_only_move_forward() {
    let mut job = JobRecord {
        kept_run: None,
        id: 1,
        phase: JobPhase::Scheduling,
        reason: String::new(),
        request: JobRequest::default(),
        module: FileRef {
            name: String::new(),
            sha256: String::new(),
            size: 0,
        },
        inputs: vec![],
        ranks: Default::default(),
        submitted_unix: 0,
        moved_from: None,
        moved_to: None,
        owner: None,
        owner_proof: None,
        origin: None,
        tasks: None,
    };
    assert!(!job.advance(JobPhase::Scheduling, "again"));
    assert!(job.advance(JobPhase::Running, "go"));
    assert!(job.advance(JobPhase::Cancelled, "stop"));
    assert!(!job.advance(JobPhase::Failed, "late"));
    assert_eq!(job.phase, JobPhase::Cancelled);
}

#[test]
fn a_job_that_ends_lists_no_rank_running() {
    let rank = |exited: bool| {
        let mut status = RankStatus::running(node());
        if exited {
            status.ended(&zorilla_core::node::RankOutcome::Exited(0), &"n");
        }
        status
    };
    let mut job = JobRecord {
        kept_run: None,
        id: 7,
        phase: JobPhase::Running,
        reason: "running".into(),
        request: JobRequest::default(),
        module: FileRef {
            name: "m".into(),
            sha256: "ab".into(),
            size: 3,
        },
        inputs: vec![],
        ranks: [(0, rank(false)), (1, rank(true)), (2, rank(false))]
            .into_iter()
            .collect(),
        submitted_unix: 0,
        moved_from: None,
        moved_to: None,
        owner: None,
        owner_proof: None,
        origin: None,
        tasks: None,
    };
    job.close_ranks(OutcomeCode::Lost, "lost: the home node restarted");
    assert!(job.advance(JobPhase::Failed, "the home node restarted"));
    let outcomes: Vec<Option<&str>> = job.ranks.values().map(|r| r.outcome.as_deref()).collect();
    assert_eq!(
        outcomes,
        [
            Some("lost: the home node restarted"),
            Some("exited with status 0"),
            Some("lost: the home node restarted")
        ]
    );
    let codes: Vec<_> = job
        .ranks
        .values()
        .map(|r| (r.code, r.exit_status))
        .collect();
    assert_eq!(
        codes,
        [
            (Some(OutcomeCode::Lost), None),
            (Some(OutcomeCode::Exited), Some(0)),
            (Some(OutcomeCode::Lost), None)
        ]
    );
    let mut cancelled = job.clone();
    cancelled.phase = JobPhase::Running;
    *cancelled.ranks.get_mut(&0).unwrap() = RankStatus::running(node());
    assert!(cancelled.advance(JobPhase::Cancelled, "cancelled by user"));
    assert_eq!(
        cancelled.ranks[&0].outcome.as_deref(),
        Some("stopped with the job")
    );
    assert_eq!(cancelled.ranks[&0].code, Some(OutcomeCode::Stopped));
}

/// A node for a record's ranks.
fn node() -> crate::store::StoredPeer {
    crate::store::StoredPeer(zorilla_overlay::PeerId::random())
}

/// A record names its nodes as peer ids kept as text, as records written
/// before they were typed do: such a record decodes, and one whose node is
/// no peer id does not (it would match no sender later).
#[test]
fn a_records_nodes_are_peer_ids_stored_as_text() {
    let peer = node();
    let mut bytes = Vec::new();
    ciborium::into_writer(&RankStatus::running(peer), &mut bytes).unwrap();
    let as_text: RankStatus = ciborium::from_reader(bytes.as_slice()).unwrap();
    assert_eq!(as_text.node, peer.to_string());
    let back: RankStatus<crate::store::StoredPeer> =
        ciborium::from_reader(bytes.as_slice()).unwrap();
    assert_eq!(back.node, peer);
    let mut bytes = Vec::new();
    ciborium::into_writer(&RankStatus::running("n".to_string()), &mut bytes).unwrap();
    let err = ciborium::from_reader::<RankStatus<crate::store::StoredPeer>, _>(bytes.as_slice())
        .unwrap_err();
    assert!(
        matches!(&err, ciborium::de::Error::Semantic(_, why) if why.starts_with("node \"n\"")),
        "{err:?}"
    );
}

/// The favour balances a node saved are what it reads back after a
/// reopen, and a save replaces what was there (an account gone from the
/// ledger is gone from the store).
#[test]
fn favour_accounts_survive_a_reopen_and_a_save_replaces_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let (a, b) = (
        zorilla_overlay::PeerId::random(),
        zorilla_overlay::PeerId::random(),
    );
    {
        let store = Store::open(&path).unwrap();
        assert_eq!(store.favours().unwrap(), vec![]);
        store
            .put_favours([(&a, 5_000, 1_000), (&b, 0, 7)].into_iter())
            .unwrap();
    }
    let store = Store::open(&path).unwrap();
    let mut got = store.favours().unwrap();
    got.sort();
    let mut want = vec![(a, 5_000, 1_000), (b, 0, 7)];
    want.sort();
    assert_eq!(got, want);
    store.put_favours([(&b, 9, 9)].into_iter()).unwrap();
    assert_eq!(store.favours().unwrap(), vec![(b, 9, 9)]);
}

#[test]
fn the_nodes_avoided_survive_a_reopen_oldest_first_and_are_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let (a, b) = (
        zorilla_overlay::PeerId::random(),
        zorilla_overlay::PeerId::random(),
    );
    {
        let store = Store::open(&path).unwrap();
        assert_eq!(store.avoided().unwrap(), vec![]);
        store
            .put_avoided([(a, 2_000), (b, 1_000)].into_iter())
            .unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.avoided().unwrap(), vec![b, a], "oldest first");
    store.put_avoided([(a, 5)].into_iter()).unwrap();
    assert_eq!(store.avoided().unwrap(), vec![a]);
}

//! The thread that writes logs and outputs: the event loop hands it what
//! workers send (through a bounded queue, so a flood of output slows the
//! senders, not the node) and answers the sender once it is written.
//! Whatever waits in the queue when the thread wakes is written in one
//! transaction (group commit): one sync of the database for many log
//! chunks, and output blocks at their offsets in their own files, each in
//! O(its bytes).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::db::{Deferred, Store};
use super::schema::{StoreError, err, unix_ms};
use crate::protocol::LogChunk;

/// Writes waiting for the thread, at most: with blocks of at most 256 KiB,
/// about 16 MiB.
const QUEUE: usize = 64;
/// The most bytes written in one transaction (past it the rest waits for
/// the next), so that a sender is answered soon.
const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// A write of a worker's log or output.
#[derive(Debug)]
pub(crate) enum Append {
    /// A chunk of a rank's stdout or stderr.
    Log { job: u64, chunk: LogChunk },
    /// A block of an output file (see [`Store::append_output`]).
    Output {
        job: u64,
        name: String,
        offset: u64,
        data: Vec<u8>,
        last: bool,
    },
}

impl Append {
    fn into_deferred(self) -> Result<Deferred, StoreError> {
        Ok(match self {
            Append::Log { job, chunk } => {
                let mut bytes = Vec::new();
                ciborium::into_writer(&chunk, &mut bytes).map_err(err)?;
                Deferred::Log {
                    job,
                    chunk: bytes,
                    at_ms: unix_ms(),
                }
            }
            Append::Output {
                job,
                name,
                offset,
                data,
                last,
            } => Deferred::Output {
                job,
                name,
                offset,
                data,
                last,
            },
        })
    }

    fn bytes(&self) -> usize {
        match self {
            Append::Log { chunk, .. } => chunk.data.len(),
            Append::Output { data, .. } => data.len(),
        }
    }
}

type Job = (Append, oneshot::Sender<Result<(), StoreError>>);

/// The handle of the writing thread; cloned freely. The thread ends when
/// every handle is gone.
#[derive(Clone)]
pub(crate) struct Writer {
    queue: mpsc::Sender<Job>,
}

impl Writer {
    /// Starts the thread writing to `store`.
    pub(crate) fn start(store: Arc<Store>) -> std::io::Result<Writer> {
        let (queue, rx) = mpsc::channel(QUEUE);
        std::thread::Builder::new()
            .name("zorilla-store".into())
            .spawn(move || run(&store, rx))?;
        Ok(Writer { queue })
    }

    /// Writes `item` (waiting for room in the queue, then for the write).
    pub(crate) async fn append(&self, item: Append) -> Result<(), StoreError> {
        let (done, answer) = oneshot::channel();
        self.queue
            .send((item, done))
            .await
            .map_err(|_| StoreError::Failed("the store's writer stopped".into()))?;
        answer
            .await
            .unwrap_or_else(|_| Err(StoreError::Failed("the store's writer stopped".into())))
    }
}

fn run(store: &Store, mut rx: mpsc::Receiver<Job>) {
    let mut next: Option<Job> = None;
    loop {
        let Some(first) = next.take().or_else(|| rx.blocking_recv()) else {
            return;
        };
        let mut bytes = first.0.bytes();
        let mut batch = vec![first];
        while bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(job) => {
                    bytes += job.0.bytes();
                    batch.push(job);
                }
                Err(_) => break,
            }
        }
        // A batch may not hold a file's block twice out of order: blocks
        // of one sender come one at a time, so order is kept as queued.
        let mut items = Vec::with_capacity(batch.len());
        let mut answers = Vec::with_capacity(batch.len());
        for (item, done) in batch {
            match item.into_deferred() {
                Ok(item) => {
                    items.push(item);
                    answers.push(done);
                }
                Err(e) => {
                    let _ = done.send(Err(e));
                }
            }
        }
        let results = store.write_or_defer_all(items);
        for (done, result) in answers.into_iter().zip(results) {
            let _ = done.send(result);
        }
        next = rx.try_recv().ok();
    }
}

/// For `node/benches/store.rs`: opens a store in `dir` and appends `total`
/// bytes of output to one file in blocks of `block` bytes through a
/// [`Writer`], one block at a time as a worker node sends them (the last
/// block synced); returns the time taken.
#[doc(hidden)]
pub async fn bench_append(
    dir: &std::path::Path,
    total: u64,
    block: usize,
) -> Result<std::time::Duration, String> {
    let store = Arc::new(Store::open(&dir.join("state.redb")).map_err(|e| e.to_string())?);
    let writer = Writer::start(store).map_err(|e| e.to_string())?;
    let data = vec![0x5a_u8; block];
    let started = std::time::Instant::now();
    let mut offset = 0u64;
    while offset < total {
        let n = (total - offset).min(block as u64) as usize;
        let item = Append::Output {
            job: 1,
            name: "0/out.bin".into(),
            offset,
            data: data[..n].to_vec(),
            last: offset + n as u64 >= total,
        };
        writer.append(item).await.map_err(|e| e.to_string())?;
        offset += n as u64;
    }
    Ok(started.elapsed())
}

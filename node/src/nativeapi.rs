//! The `zorilla.h` calls of native programs (issue 32, item 4): a native
//! rank's checkpoints, kept by the same store as a WebAssembly rank's (on
//! other nodes of the grid, found again by the rank's next worker), reached
//! through a socket the worker inherits (`ZORILLA_FD`, the descriptor after
//! the PMI server's) and the small C library
//! `sdk/native/zorilla_native.c`.
//!
//! The protocol, one request at a time, each a line and, for a save, its
//! bytes:
//!
//! | request | answer |
//! |---|---|
//! | `save <generation> <len>` + `len` bytes | `ok <places>` |
//! | `size` | `ok <len> <generation>` |
//! | `load` | `ok <len> <generation>` + `len` bytes |
//!
//! or `err <code>`, a `ZORILLA_E*` status of `zorilla.h` (generation 0:
//! none). Who may speak: only the rank's own program, through the
//! descriptor it inherited. Bounds: a line of at most [`MAX_LINE`] bytes,
//! a save of at most the store's limit (`ETOOBIG` past it, the bytes read
//! and dropped in pieces, never held); a request that is not one of these
//! disconnects the rank, and the node goes on.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use zorilla_sandbox::checkpoint::MAX_GENERATION;
use zorilla_sandbox::hostapi::{EINVAL, ETOOBIG, checkpoint_status};
use zorilla_sandbox::{Checkpoint, Checkpoints};

/// The longest request line.
const MAX_LINE: u64 = 128;

/// The environment variable that names the descriptor.
pub(crate) const ENV: &str = "ZORILLA_FD";

/// An answer: its line and the bytes after it, or a `zorilla.h` status.
type Answer = Result<(String, Option<Arc<Vec<u8>>>), i32>;

/// Serves one native rank's `zorilla.h` calls on `stream` until it closes.
pub(crate) async fn serve(job: u64, rank: u32, stream: UnixStream, store: Arc<dyn Checkpoints>) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut line = String::new();
    // The checkpoint fetched last (`size` then `load` fetch it once, as
    // the WebAssembly host's calls do); a save makes it stale.
    let mut loaded: Option<Checkpoint> = None;
    loop {
        line.clear();
        match (&mut read).take(MAX_LINE).read_line(&mut line).await {
            Ok(0) => return,
            Ok(_) if line.ends_with('\n') => {}
            Ok(_) | Err(_) => {
                tracing::warn!(
                    job,
                    rank,
                    "zorilla calls: a request that is not one; disconnected"
                );
                return;
            }
        }
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        let reply: Answer = match words.as_slice() {
            ["save", generation, len] => {
                let (Ok(generation), Ok(len)) = (generation.parse::<u64>(), len.parse::<u64>())
                else {
                    tracing::warn!(
                        job,
                        rank,
                        "zorilla calls: a save that is not one; disconnected"
                    );
                    return;
                };
                if len > store.limit() || generation > MAX_GENERATION {
                    // Read past the bytes without keeping them.
                    if tokio::io::copy(&mut (&mut read).take(len), &mut tokio::io::sink())
                        .await
                        .is_err()
                    {
                        return;
                    }
                    Err(if len > store.limit() { ETOOBIG } else { EINVAL })
                } else {
                    let mut data = vec![0; len as usize];
                    if read.read_exact(&mut data).await.is_err() {
                        return;
                    }
                    loaded = None;
                    let generation = (generation > 0).then_some(generation);
                    store
                        .save(data, generation)
                        .await
                        .map(|places| (format!("ok {places}\n"), None))
                        .map_err(checkpoint_status)
                }
            }
            [what @ ("size" | "load")] => {
                let latest = match loaded.take() {
                    Some(checkpoint) => Ok(checkpoint),
                    None => store.load().await.map_err(checkpoint_status),
                };
                latest.map(|checkpoint| {
                    let data = (*what == "load").then(|| checkpoint.data.clone());
                    let head = header(&checkpoint);
                    loaded = Some(checkpoint);
                    (head, data)
                })
            }
            _ => {
                tracing::warn!(
                    job,
                    rank,
                    "zorilla calls: a request that is not one; disconnected"
                );
                return;
            }
        };
        let written = match reply {
            Ok((head, data)) => {
                let mut ok = write.write_all(head.as_bytes()).await.is_ok();
                if let Some(data) = data
                    && ok
                {
                    ok = write.write_all(&data).await.is_ok();
                }
                ok
            }
            Err(code) => write
                .write_all(format!("err {code}\n").as_bytes())
                .await
                .is_ok(),
        };
        if !written {
            return;
        }
    }
}

fn header(checkpoint: &Checkpoint) -> String {
    format!(
        "ok {} {}\n",
        checkpoint.data.len(),
        checkpoint.generation.unwrap_or(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use zorilla_sandbox::checkpoint::MemoryCheckpoints;
    use zorilla_sandbox::hostapi::ENOCHECKPOINT;

    async fn ask(s: &mut BufReader<UnixStream>, request: &[u8]) -> String {
        s.get_mut().write_all(request).await.unwrap();
        let mut reply = String::new();
        s.read_line(&mut reply).await.unwrap();
        reply
    }

    /// What one worker saves, the next worker of its rank loads; a save
    /// past the store's limit is refused without ending the conversation;
    /// a request that is not one ends it.
    #[tokio::test]
    async fn a_rank_saves_and_its_next_worker_loads_within_the_limit() {
        let store = MemoryCheckpoints::new(16);
        let (ours, theirs) = UnixStream::pair().unwrap();
        tokio::spawn(serve(1, 0, theirs, Arc::new(store.clone())));
        let mut s = BufReader::new(ours);
        assert_eq!(
            ask(&mut s, b"size\n").await,
            format!("err {ENOCHECKPOINT}\n")
        );
        assert_eq!(ask(&mut s, b"save 0 5\nhello").await, "ok 1\n");
        assert_eq!(
            ask(&mut s, b"save 0 17\n0123456789abcdefg").await,
            format!("err {ETOOBIG}\n")
        );
        assert_eq!(ask(&mut s, b"save 3 2\nhi").await, "ok 1\n");
        drop(s);

        let (ours, theirs) = UnixStream::pair().unwrap();
        tokio::spawn(serve(1, 0, theirs, Arc::new(store)));
        let mut s = BufReader::new(ours);
        assert_eq!(ask(&mut s, b"size\n").await, "ok 2 3\n");
        assert_eq!(ask(&mut s, b"load\n").await, "ok 2 3\n");
        let mut data = [0u8; 2];
        s.read_exact(&mut data).await.unwrap();
        assert_eq!(&data, b"hi");
        // A save makes what was fetched stale.
        assert_eq!(ask(&mut s, b"save 0 3\nabc").await, "ok 1\n");
        assert_eq!(ask(&mut s, b"size\n").await, "ok 3 0\n");
        s.get_mut().write_all(b"format c:\n").await.unwrap();
        let mut rest = String::new();
        assert_eq!(s.read_line(&mut rest).await.unwrap(), 0);
    }
}

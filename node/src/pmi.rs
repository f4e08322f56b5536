//! The process management interface the MPI library of a native job's
//! ranks expects (issue 32, item 3): PMI-1's wire protocol, as MPICH's
//! `mpiexec` (Hydra) serves it and MPICH's library speaks it. Open MPI 4
//! speaks it too, through its "flux" component and the node's PMI-1
//! library (`sdk/native/zorilla_pmi.c`, see [`env`]); its values are
//! padded with blanks, so a value is the rest of its line.
//!
//! Each native rank gets one end of a socket pair as its descriptor 3
//! (`PMI_FD=3`, with `PMI_RANK` and `PMI_SIZE`; see
//! `zorilla_sandbox::native::NativeSpec::inherit`); the node serves the
//! other end, one [`serve`] task per rank. A rank's library puts its
//! addresses into a key-value space, enters a barrier (a *fence*), and
//! then gets the other ranks' addresses. A fence is an exchange over the
//! job's rank transport (the same links, with the same guarantees, as a
//! WebAssembly worker's messages): every rank sends the keys it put since
//! the last fence to rank 0, which sends all of them to every rank. So a
//! job's ranks wire up whether they run on one node or on many, and then
//! talk over their MPI library's own transports.
//!
//! Who may speak: only the rank's own program, through the descriptor it
//! inherited (nothing else of the machine can reach the socket). What it
//! may do: lines of at most [`MAX_LINE`] bytes, keys and values within the
//! sizes it is told (`get_maxes`), at most [`MAX_KVS_BYTES`] of keys and
//! values per job; a rank that goes beyond is told so (`rc=-1`) or, for a
//! line that is not PMI, disconnected, and the node goes on.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use zorilla_sandbox::transport::{Delivery, Transport};

/// The longest line a rank may send, newline included.
pub(crate) const MAX_LINE: usize = 4096;
/// The longest key (`keylen_max`).
pub(crate) const MAX_KEY: usize = 64;
/// The longest value (`vallen_max`).
pub(crate) const MAX_VALUE: usize = 1024;
/// The longest key-value space name (`kvsname_max`).
const MAX_KVSNAME: usize = 256;
/// The most bytes of keys and values one rank holds for its job.
pub(crate) const MAX_KVS_BYTES: usize = 8 << 20;
/// The most bytes of keys and values one fence carries: each rank's keys
/// put since the last fence, at most a space's, from every rank.
const MAX_FENCE_BYTES: usize = 2 * MAX_KVS_BYTES;

/// What the environment of a native rank says about its PMI server:
/// where it is, for MPICH's library, and, with the node's library for
/// native ranks (`library`), the switch of Open MPI 4's "flux" component,
/// which then loads that library to speak to the server. That library is
/// also preloaded into every rank: it carries the fix for MPICH 4.0's
/// `MPI_Finalize` over UCX (`sdk/native/zorilla_ucx.c`), which only MPICH
/// programs' calls reach.
pub(crate) fn env(
    job: u64,
    rank: u32,
    size: u32,
    library: Option<&std::path::Path>,
) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "PMI_FD".into(),
            zorilla_sandbox::native::INHERITED_FD.to_string(),
        ),
        ("PMI_RANK".into(), rank.to_string()),
        ("PMI_SIZE".into(), size.to_string()),
        // Each rank's sandbox has a /dev/shm of its own, so MPICH's
        // shared memory between ranks of one node cannot work: its ranks
        // talk through the network stack even on one node.
        ("MPIR_CVAR_NOLOCAL".into(), "1".into()),
    ];
    if let Some(library) = library {
        env.extend([
            // Open MPI takes it as its job id, the same for every rank of
            // the job: 32 bits, of which it drops the top one of each half
            // in places (so those are 0, lest ranks disagree), and whose
            // low half must not be 0 (its own daemons').
            ("FLUX_JOB_ID".into(), ((job & 0x7fff_7ffe) | 1).to_string()),
            (
                "FLUX_PMI_LIBRARY_PATH".into(),
                library.display().to_string(),
            ),
            ("LD_PRELOAD".into(), library.display().to_string()),
        ]);
    }
    env
}

/// The keys one rank sent at a fence, or all of them as rank 0 sends them
/// back.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Fence {
    puts: Vec<(String, String)>,
}

/// One rank's server: its key-value space and its part of the fences.
struct Server {
    rank: u32,
    size: u32,
    kvsname: String,
    kvs: BTreeMap<String, String>,
    bytes: usize,
    /// Keys put since the last fence (a key put again once, with its last
    /// value: so never more than the space holds).
    fresh: BTreeMap<String, String>,
    transport: Box<dyn Transport>,
}

/// Serves rank `rank` of `size` of job `job` on `stream` until the rank
/// finalizes or its end of the socket closes; fences go over `transport`.
pub(crate) async fn serve(
    job: u64,
    rank: u32,
    size: u32,
    stream: UnixStream,
    transport: Box<dyn Transport>,
) {
    let mut server = Server {
        rank,
        size,
        kvsname: format!("zorilla-{job:016x}"),
        kvs: BTreeMap::new(),
        bytes: 0,
        fresh: BTreeMap::new(),
        transport,
    };
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match read_line(&mut lines, &mut line).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(why) => {
                tracing::warn!(job, rank, "PMI: {why}; disconnected");
                return;
            }
        }
        let text = match std::str::from_utf8(&line) {
            // Only the line's end goes: a value's trailing blanks are its own.
            Ok(text) => text.trim_end_matches(['\n', '\r']),
            Err(_) => {
                tracing::warn!(job, rank, "PMI: a line that is not UTF-8; disconnected");
                return;
            }
        };
        let reply = match server.answer(text).await {
            Ok(Some(reply)) => reply,
            Ok(None) => return,
            Err(why) => {
                tracing::warn!(job, rank, "PMI: {why}; disconnected");
                return;
            }
        };
        if write.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
        if reply.starts_with("cmd=finalize_ack") {
            return;
        }
    }
}

/// Reads one line into `line` (without limit beyond [`MAX_LINE`]); false
/// at the end of the stream.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> Result<bool, String> {
    loop {
        let buffered = reader
            .fill_buf()
            .await
            .map_err(|e| format!("cannot read: {e}"))?;
        if buffered.is_empty() {
            return Ok(false);
        }
        let (take, done) = match buffered.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buffered.len(), false),
        };
        if line.len() + take > MAX_LINE {
            return Err(format!("a line longer than {MAX_LINE} bytes"));
        }
        line.extend_from_slice(&buffered[..take]);
        reader.consume(take);
        if done {
            return Ok(true);
        }
    }
}

/// The `key=value` words of a command line.
fn words(text: &str) -> BTreeMap<&str, &str> {
    text.split_ascii_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect()
}

impl Server {
    /// The reply to one line; `None` when the rank aborts.
    async fn answer(&mut self, text: &str) -> Result<Option<String>, String> {
        // A value is the rest of its line and may hold anything, even
        // what looks like other words: only what comes before it is read
        // as words.
        let (head, value) = match text.split_once(" value=") {
            Some((head, value)) => (head, Some(value)),
            None => (text, None),
        };
        let words = words(head);
        let Some(cmd) = words.get("cmd").copied() else {
            return Err("a line without a command".into());
        };
        let reply = match cmd {
            "init" => "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n".to_owned(),
            "get_maxes" => format!(
                "cmd=maxes kvsname_max={MAX_KVSNAME} keylen_max={MAX_KEY} vallen_max={MAX_VALUE} rc=0\n"
            ),
            "get_appnum" => "cmd=appnum appnum=0 rc=0\n".to_owned(),
            "get_my_kvsname" => format!("cmd=my_kvsname kvsname={} rc=0\n", self.kvsname),
            "get_universe_size" => format!("cmd=universe_size size={} rc=0\n", self.size),
            "put" => match self.put(&words, value) {
                Ok(()) => "cmd=put_result rc=0\n".to_owned(),
                Err(why) => format!("cmd=put_result rc=-1 msg={}\n", why.replace(' ', "_")),
            },
            "get" => match words.get("key").and_then(|k| self.kvs.get(*k)) {
                Some(value) => format!("cmd=get_result rc=0 value={value}\n"),
                None => "cmd=get_result rc=-1 msg=key_not_found\n".to_owned(),
            },
            "barrier_in" => match self.fence().await {
                Ok(()) => "cmd=barrier_out rc=0\n".to_owned(),
                Err(why) => return Err(format!("the fence failed: {why}")),
            },
            "finalize" => "cmd=finalize_ack rc=0\n".to_owned(),
            "abort" => {
                tracing::info!(
                    rank = self.rank,
                    "PMI: the rank aborted: {}",
                    words.get("msg").copied().unwrap_or("")
                );
                return Ok(None);
            }
            other => format!("cmd={other}_result rc=-1 msg=not_served\n"),
        };
        Ok(Some(reply))
    }

    /// Takes a `put`: a key and value within the sizes, while the space
    /// has room. The value is the rest of the line, blanks included (Open
    /// MPI pads its values with blanks; MPICH's have none, so for them the
    /// rest of the line is the last word).
    fn put(&mut self, words: &BTreeMap<&str, &str>, value: Option<&str>) -> Result<(), String> {
        let (Some(key), Some(value)) = (words.get("key"), value) else {
            return Err("a put needs a key and a value".into());
        };
        if key.is_empty() || key.len() > MAX_KEY || value.len() > MAX_VALUE {
            return Err(format!(
                "keys are 1 to {MAX_KEY} bytes and values at most {MAX_VALUE}"
            ));
        }
        self.insert(key.to_string(), value.to_string())?;
        self.fresh.insert(key.to_string(), value.to_string());
        Ok(())
    }

    /// Adds a key to this rank's space, within [`MAX_KVS_BYTES`].
    fn insert(&mut self, key: String, value: String) -> Result<(), String> {
        let added = key.len() + value.len();
        let replaced = self.kvs.get(&key).map_or(0, |v| key.len() + v.len());
        let bytes = (self.bytes + added).saturating_sub(replaced);
        if bytes > MAX_KVS_BYTES {
            return Err(format!(
                "the job's key-value space is full ({MAX_KVS_BYTES} bytes)"
            ));
        }
        self.bytes = bytes;
        self.kvs.insert(key, value);
        Ok(())
    }

    /// A fence: every rank's fresh keys to rank 0, all of them back to
    /// every rank (2 (size - 1) messages).
    async fn fence(&mut self) -> Result<(), String> {
        let mine = Fence {
            puts: std::mem::take(&mut self.fresh).into_iter().collect(),
        };
        if self.size <= 1 {
            return Ok(());
        }
        if self.rank == 0 {
            // Each rank's keys are taken as they come, so that a space
            // that would overflow fails the fence before more is held.
            let mut all = mine.puts;
            let mut bytes = fence_bytes(&all);
            for _ in 1..self.size {
                let fence = self.receive().await?;
                bytes = bytes.saturating_add(fence_bytes(&fence.puts));
                if bytes > MAX_FENCE_BYTES {
                    return Err(format!(
                        "the ranks put more than {MAX_FENCE_BYTES} bytes of keys in one fence"
                    ));
                }
                self.merge(&fence.puts)?;
                all.extend(fence.puts);
            }
            let bytes = encode(&Fence { puts: all })?;
            for rank in 1..self.size {
                self.transport
                    .send(rank, bytes.clone())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        } else {
            let bytes = encode(&mine)?;
            self.transport
                .send(0, bytes)
                .await
                .map_err(|e| e.to_string())?;
            let all = self.receive().await?;
            self.merge(&all.puts)
        }
    }

    /// The next fence message from another rank (membership changes are
    /// skipped: a native job's ranks do not change while they run).
    async fn receive(&mut self) -> Result<Fence, String> {
        loop {
            match self.transport.recv().await.map_err(|e| e.to_string())? {
                Delivery::Message { payload, .. } => {
                    if payload.len() > MAX_FENCE_BYTES {
                        return Err(format!(
                            "a fence message larger than {MAX_FENCE_BYTES} bytes"
                        ));
                    }
                    return ciborium::from_reader(payload.as_slice())
                        .map_err(|e| format!("a fence message that does not decode: {e}"));
                }
                Delivery::Membership(_) => continue,
            }
        }
    }

    /// Takes the keys of a fence (this rank's own among them).
    fn merge(&mut self, puts: &[(String, String)]) -> Result<(), String> {
        for (key, value) in puts {
            if key.len() > MAX_KEY || value.len() > MAX_VALUE {
                return Err("a fence message with a key or value too long".into());
            }
            self.insert(key.clone(), value.clone())?;
        }
        Ok(())
    }
}

/// The bytes of keys and values of `puts`.
fn fence_bytes(puts: &[(String, String)]) -> usize {
    puts.iter().map(|(k, v)| k.len() + v.len()).sum()
}

fn encode(fence: &Fence) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    ciborium::into_writer(fence, &mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zorilla_sandbox::local::LocalGroup;

    /// Two ranks on one local group, each served on a socket pair, speak
    /// what MPICH's library sends (recorded from a real run): after the
    /// fence each gets the other's key; lines out of bounds are refused.
    #[tokio::test]
    async fn two_ranks_put_fence_and_get_each_others_keys() {
        let (_group, mut ends) = LocalGroup::new(2, 16);
        let (t1, t0) = (ends.pop().unwrap(), ends.pop().unwrap());
        let (a0, b0) = UnixStream::pair().unwrap();
        let (a1, b1) = UnixStream::pair().unwrap();
        tokio::spawn(serve(7, 0, 2, b0, Box::new(t0)));
        tokio::spawn(serve(7, 1, 2, b1, Box::new(t1)));
        async fn say(s: &mut BufReader<UnixStream>, line: &str) -> String {
            s.get_mut().write_all(line.as_bytes()).await.unwrap();
            let mut reply = String::new();
            s.read_line(&mut reply).await.unwrap();
            reply
        }
        let (mut r0, mut r1) = (BufReader::new(a0), BufReader::new(a1));
        for (r, me) in [(&mut r0, 0), (&mut r1, 1)] {
            let reply = say(r, "cmd=init pmi_version=1 pmi_subversion=1\n").await;
            assert!(reply.starts_with("cmd=response_to_init"), "{reply}");
            assert!(say(r, "cmd=get_maxes\n").await.contains("vallen_max=1024"));
            let reply = say(r, "cmd=get_my_kvsname\n").await;
            assert_eq!(
                reply,
                "cmd=my_kvsname kvsname=zorilla-0000000000000007 rc=0\n"
            );
            let reply = say(
                r,
                &format!(
                    "cmd=put kvsname=zorilla-0000000000000007 key=hostname[{me}] value=h{me}\n"
                ),
            )
            .await;
            assert_eq!(reply, "cmd=put_result rc=0\n");
        }
        // Both enter the fence; neither leaves before the other entered.
        r0.get_mut().write_all(b"cmd=barrier_in\n").await.unwrap();
        r1.get_mut().write_all(b"cmd=barrier_in\n").await.unwrap();
        for r in [&mut r0, &mut r1] {
            let mut reply = String::new();
            r.read_line(&mut reply).await.unwrap();
            assert_eq!(reply, "cmd=barrier_out rc=0\n");
        }
        let reply = say(&mut r1, "cmd=get kvsname=x key=hostname[0]\n").await;
        assert_eq!(reply, "cmd=get_result rc=0 value=h0\n");
        let reply = say(&mut r0, "cmd=get kvsname=x key=hostname[1]\n").await;
        assert_eq!(reply, "cmd=get_result rc=0 value=h1\n");
        let reply = say(&mut r0, "cmd=get kvsname=x key=PMI_process_mapping\n").await;
        assert_eq!(reply, "cmd=get_result rc=-1 msg=key_not_found\n");
        let long = "v".repeat(MAX_VALUE + 1);
        let reply = say(&mut r0, &format!("cmd=put kvsname=x key=k value={long}\n")).await;
        assert!(reply.starts_with("cmd=put_result rc=-1"), "{reply}");
        assert_eq!(
            say(&mut r0, "cmd=finalize\n").await,
            "cmd=finalize_ack rc=0\n"
        );
        // A line past the bound disconnects the rank.
        let huge = format!("cmd=put key=k value={}\n", "v".repeat(MAX_LINE));
        r1.get_mut().write_all(huge.as_bytes()).await.unwrap();
        let mut reply = String::new();
        assert_eq!(r1.read_line(&mut reply).await.unwrap(), 0, "{reply}");
    }

    /// A value is the rest of its line: Open MPI's, padded with blanks,
    /// come back whole, and words inside a value (` key=`, ` cmd=`) are
    /// the value's, not the command's.
    #[tokio::test]
    async fn a_value_is_the_rest_of_its_line_blanks_and_all() {
        let (a, b) = UnixStream::pair().unwrap();
        tokio::spawn(serve(9, 0, 1, b, Box::new(LocalGroup::solo(4))));
        let mut r = BufReader::new(a);
        for (line, reply) in [
            (
                "cmd=put kvsname=x key=k value=cG1peA  -\n",
                "cmd=put_result rc=0\n",
            ),
            (
                "cmd=put kvsname=x key=j value=a key=k cmd=finalize \n",
                "cmd=put_result rc=0\n",
            ),
            ("cmd=barrier_in\n", "cmd=barrier_out rc=0\n"),
            (
                "cmd=get kvsname=x key=k\n",
                "cmd=get_result rc=0 value=cG1peA  -\n",
            ),
            (
                "cmd=get kvsname=x key=j\n",
                "cmd=get_result rc=0 value=a key=k cmd=finalize \n",
            ),
        ] {
            r.get_mut().write_all(line.as_bytes()).await.unwrap();
            let mut got = String::new();
            r.read_line(&mut got).await.unwrap();
            assert_eq!(got, reply, "after {line:?}");
        }
    }

    /// A rank's key-value space is bounded: puts past [`MAX_KVS_BYTES`]
    /// are refused (the rank goes on), and a key put again takes its last
    /// value, within the space.
    #[tokio::test]
    async fn puts_past_the_space_are_refused_and_a_key_put_again_takes_its_last_value() {
        let (a, b) = UnixStream::pair().unwrap();
        tokio::spawn(serve(9, 0, 1, b, Box::new(LocalGroup::solo(4))));
        let mut r = BufReader::new(a);
        let value = "v".repeat(MAX_VALUE);
        let mut taken = 0usize;
        loop {
            let line = format!("cmd=put kvsname=x key=k{taken} value={value}\n");
            r.get_mut().write_all(line.as_bytes()).await.unwrap();
            let mut reply = String::new();
            r.read_line(&mut reply).await.unwrap();
            if reply.starts_with("cmd=put_result rc=-1") {
                assert!(reply.contains("full"), "{reply}");
                break;
            }
            assert_eq!(reply, "cmd=put_result rc=0\n");
            taken += 1;
            assert!(taken * MAX_VALUE <= MAX_KVS_BYTES, "{taken} puts taken");
        }
        assert!(
            (taken + 1) * (MAX_VALUE + 6) > MAX_KVS_BYTES,
            "only {taken} puts taken"
        );
        // Put again: the value is replaced, and the space has room for it.
        for v in ["one", "two"] {
            let line = format!("cmd=put kvsname=x key=k0 value={v}\n");
            r.get_mut().write_all(line.as_bytes()).await.unwrap();
            let mut reply = String::new();
            r.read_line(&mut reply).await.unwrap();
            assert_eq!(reply, "cmd=put_result rc=0\n");
        }
        r.get_mut().write_all(b"cmd=barrier_in\n").await.unwrap();
        let mut reply = String::new();
        r.read_line(&mut reply).await.unwrap();
        assert_eq!(reply, "cmd=barrier_out rc=0\n");
        r.get_mut().write_all(b"cmd=get key=k0\n").await.unwrap();
        let mut reply = String::new();
        r.read_line(&mut reply).await.unwrap();
        assert_eq!(reply, "cmd=get_result rc=0 value=two\n");
    }
}

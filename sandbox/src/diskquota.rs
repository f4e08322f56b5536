//! A worker's disk limit, and the node's, held at each write to a file.
//!
//! WASI has no quotas, and measuring `/outputs` every [`crate::DISK_POLL`]
//! lets a fast guest write far past its limit between two measures (a
//! guest writing 400 MB/s went 41 MiB over a 100 MiB limit). So the
//! sandbox wraps WASI's `fd_write` and `fd_pwrite`: before a write to a
//! file (any descriptor but stdin, stdout and stderr, which have their own
//! output limit) it counts the bytes the write can add (WASI writes the
//! first non-empty buffer of a call, so that buffer's length) against what
//! `/outputs` held at the last measure plus everything written since. Only
//! when that count would pass the limit is `/outputs` measured again; if
//! the write would still pass it, the worker ends with
//! [`crate::Outcome::DiskLimit`] before the write, so the files never hold
//! more than the limit. The poll stays for what a write does not count
//! (a file made larger by `fd_filestat_set_size` or a write far past its
//! end; such sparse files cost no disk but count at their full size).
//!
//! The node's offer of disk ([`crate::SandboxConfig::disk_bytes`]) holds
//! for all its workers together: every worker's count is its share of one
//! [`DiskBudget`], and a write that would take the shares past it makes
//! every worker's `/outputs` be measured again; if it still would, the
//! write fails with `ENOSPC` ("No space left on device"), as on a full
//! disk, and the worker goes on (it may delete files, or end). The files
//! of a worker that ended count until they are gone (the node sends them
//! to the job's home, then removes them).
//!
//! The wrappers then call WASI's own functions, as the linker code that
//! `wasmtime-wasi` generates does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use wasmtime::{Caller, Extern, Linker};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p1::wasi_snapshot_preview1 as wasi;

use crate::limits::{LimitFlag, LimitHit};

/// How often a worker's `/outputs` is measured against its disk limit.
pub const DISK_POLL: Duration = Duration::from_millis(100);

/// The module name of WASI preview 1.
const WASI: &str = "wasi_snapshot_preview1";

/// The most buffers of one write looked at for its first non-empty one
/// (WASI itself looks at all; a write whose first non-empty buffer comes
/// later counts as empty here and is caught by the poll).
const MAX_BUFFERS: u32 = 1024;

/// The disk that workers may keep in their `/outputs` together: the
/// node's offer, one per sandbox (a worker on its own has one without a
/// limit). Each worker that has a directory holds a share: the bytes its
/// directory held at its last measure, plus those it was let write since
/// (at least what it holds). A worker that ended keeps its share until
/// its directory is measured empty or missing, or until more than
/// [`MAX_ENDED`] shares of ended workers are kept.
pub(crate) struct DiskBudget {
    limit: u64,
    shares: Mutex<Shares>,
}

#[derive(Default)]
struct Shares {
    next: u64,
    /// The sum of the shares' `counted`.
    total: u64,
    by_worker: BTreeMap<u64, Share>,
}

impl Shares {
    fn remove(&mut self, worker: u64) {
        if let Some(share) = self.by_worker.remove(&worker) {
            self.total = self.total.saturating_sub(share.counted);
        }
    }
}

/// The most shares of ended workers kept; beyond them the oldest is
/// dropped (its files, if still there, count no more).
pub(crate) const MAX_ENDED: usize = 256;

struct Share {
    /// The worker's `/outputs` on the host.
    dir: PathBuf,
    /// The worker ended; its files may still be there.
    ended: bool,
    counted: u64,
    /// Of `counted`, what writes under way may add: a measure taken
    /// meanwhile may not see it yet.
    in_flight: u64,
}

/// A share as it was when a measure began.
struct Before {
    worker: u64,
    dir: PathBuf,
    counted: u64,
    in_flight: u64,
}

impl DiskBudget {
    /// A budget of `limit` bytes (`u64::MAX`: none).
    pub(crate) fn new(limit: u64) -> Arc<DiskBudget> {
        Arc::new(DiskBudget {
            limit,
            shares: Mutex::default(),
        })
    }

    fn shares(&self) -> MutexGuard<'_, Shares> {
        // A panic while the lock was held left sums that are still sums.
        self.shares.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new share, of nothing yet, for the worker writing to `dir`.
    fn join(&self, dir: PathBuf) -> u64 {
        let mut shares = self.shares();
        let worker = shares.next;
        shares.next += 1;
        shares.by_worker.insert(
            worker,
            Share {
                dir,
                ended: false,
                counted: 0,
                in_flight: 0,
            },
        );
        worker
    }

    /// The worker ended: its share is kept while its files are (see
    /// [`DiskBudget::settle`]), up to [`MAX_ENDED`] such shares; a share
    /// of nothing goes at once.
    fn leave(&self, worker: u64) {
        let mut shares = self.shares();
        if let Some(share) = shares.by_worker.get_mut(&worker) {
            share.ended = true;
            share.in_flight = 0;
            if share.counted == 0 {
                shares.remove(worker);
            }
        }
        let ended: Vec<u64> = shares
            .by_worker
            .iter()
            .filter(|(_, share)| share.ended)
            .map(|(id, _)| *id)
            .collect();
        for id in &ended[..ended.len().saturating_sub(MAX_ENDED)] {
            shares.remove(*id);
        }
    }

    fn counted(&self, worker: u64) -> u64 {
        self.shares()
            .by_worker
            .get(&worker)
            .map_or(0, |share| share.counted)
    }

    /// Counts a write of `len` bytes to `worker`'s share, unless the
    /// shares would pass the limit.
    fn take(&self, worker: u64, len: u64) -> bool {
        let mut shares = self.shares();
        let total = shares.total.saturating_add(len);
        if total > self.limit {
            return false;
        }
        let Some(share) = shares.by_worker.get_mut(&worker) else {
            return false;
        };
        share.counted = share.counted.saturating_add(len);
        share.in_flight = share.in_flight.saturating_add(len);
        shares.total = total;
        true
    }

    /// The write of `len` bytes counted by [`DiskBudget::take`] is over.
    fn landed(&self, worker: u64, len: u64) {
        if let Some(share) = self.shares().by_worker.get_mut(&worker) {
            share.in_flight = share.in_flight.saturating_sub(len);
        }
    }

    /// The shares of `worker` (or of all workers), before a measure.
    fn before(&self, worker: Option<u64>) -> Vec<Before> {
        self.shares()
            .by_worker
            .iter()
            .filter(|(id, _)| worker.is_none_or(|w| w == **id))
            .map(|(id, share)| Before {
                worker: *id,
                dir: share.dir.clone(),
                counted: share.counted,
                in_flight: share.in_flight,
            })
            .collect()
    }

    /// Sets each measured share to what its directory held, plus what
    /// may not have been on disk yet when it was measured: the writes
    /// under way when the measure began and those counted since. The
    /// share of an ended worker whose files are gone goes.
    fn settle(&self, measured: Vec<(Before, u64)>) {
        let mut guard = self.shares();
        let shares = &mut *guard;
        for (before, bytes) in measured {
            let Some(share) = shares.by_worker.get_mut(&before.worker) else {
                continue;
            };
            if share.ended && bytes == 0 {
                shares.remove(before.worker);
                continue;
            }
            let since = share.counted.saturating_sub(before.counted);
            let settled = bytes.saturating_add(before.in_flight).saturating_add(since);
            shares.total = shares
                .total
                .saturating_sub(share.counted)
                .saturating_add(settled);
            share.counted = settled;
        }
    }

    /// Measures the directories of `worker` (or of all workers) again and
    /// settles their shares.
    async fn measure(&self, worker: Option<u64>) {
        let before = self.before(worker);
        let measured = tokio::task::spawn_blocking(move || {
            before
                .into_iter()
                .map(|b| {
                    let bytes = crate::jobfs::tree_bytes(&b.dir);
                    (b, bytes)
                })
                .collect()
        })
        .await
        .unwrap_or_default();
        self.settle(measured);
    }
}

/// What a worker may still write to its files.
pub(crate) struct DiskQuota {
    /// The worker's share of `budget`; `None`: no directory, or no limit.
    share: Option<u64>,
    /// The worker's own limit.
    limit: u64,
    budget: Arc<DiskBudget>,
    /// Set to [`LimitHit::Disk`] when a write passes the worker's limit.
    flag: Arc<LimitFlag>,
    /// When this worker last had every share measured: a guest writing
    /// to a full disk again and again has them measured at most once a
    /// [`DISK_POLL`] (its other writes fail at once).
    measured_all: Option<Instant>,
}

/// Why a write may not be made.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// It would pass the worker's own limit: the worker ends.
    Worker,
    /// It would pass the node's offer: the write fails with `ENOSPC`.
    Node,
}

/// What the wrappers need of a store's data: its quota and its WASI
/// context (the worker's store data implements it).
pub(crate) trait DiskQuotaState: Send + 'static {
    fn disk_and_wasi(&mut self) -> (&mut DiskQuota, &mut WasiP1Ctx);
}

impl DiskQuota {
    /// The quota of a worker writing to `dir`, held to `limit` and to
    /// `budget` with the node's other workers.
    pub(crate) fn new(
        dir: Option<PathBuf>,
        limit: u64,
        budget: Arc<DiskBudget>,
        flag: Arc<LimitFlag>,
    ) -> DiskQuota {
        let limited = limit != u64::MAX || budget.limit != u64::MAX;
        let share = dir.filter(|_| limited).map(|dir| budget.join(dir));
        DiskQuota {
            share,
            limit,
            budget,
            flag,
            measured_all: None,
        }
    }

    /// Counts `len` more bytes, or says which limit they would pass (then
    /// nothing is counted).
    async fn take(&mut self, len: u64) -> Result<(), Refusal> {
        let Some(me) = self.share else {
            return Ok(());
        };
        if self.budget.counted(me).saturating_add(len) > self.limit {
            self.budget.measure(Some(me)).await;
            if self.budget.counted(me).saturating_add(len) > self.limit {
                return Err(Refusal::Worker);
            }
        }
        if self.budget.take(me, len) {
            return Ok(());
        }
        // Other workers' shares may count more than their files hold (a
        // file written over counts twice until measured).
        let now = Instant::now();
        if self
            .measured_all
            .is_none_or(|at| now.duration_since(at) >= DISK_POLL)
        {
            self.measured_all = Some(now);
            self.budget.measure(None).await;
        }
        match self.budget.take(me, len) {
            true => Ok(()),
            false => Err(Refusal::Node),
        }
    }

    /// The write of `len` bytes that [`DiskQuota::take`] let through is
    /// over.
    fn landed(&self, len: u64) {
        if let Some(me) = self.share {
            self.budget.landed(me, len);
        }
    }
}

impl Drop for DiskQuota {
    fn drop(&mut self) {
        if let Some(me) = self.share {
            self.budget.leave(me);
        }
    }
}

/// The length of the first non-empty buffer of the `count` buffers (each
/// a 32-bit pointer and a 32-bit length) at `iovs` in guest memory, 0 if
/// none (or if they are not in memory: then WASI refuses the write).
fn first_buffer_len<T>(caller: &mut Caller<'_, T>, iovs: i32, count: i32) -> u64 {
    let Some(memory) = caller
        .get_export("memory")
        .and_then(|export| export.into_memory())
    else {
        return 0;
    };
    let data = memory.data(&*caller);
    let base = iovs as u32 as usize;
    for i in 0..(count as u32).min(MAX_BUFFERS) as usize {
        let at = base.saturating_add(i * 8).saturating_add(4);
        let Some(bytes) = data.get(at..at.saturating_add(4)) else {
            return 0;
        };
        let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if len != 0 {
            return u64::from(len);
        }
    }
    0
}

/// What a write may do, by [`check`].
enum Checked {
    /// Be made: it counted this many bytes.
    Write(u64),
    /// Fail with `ENOSPC`: the node's workers keep all it offers.
    Full,
}

/// Checks a write of the buffers at `iovs` to `fd` against the worker's
/// limit (an error ends the worker) and the node's.
async fn check<T: DiskQuotaState>(
    caller: &mut Caller<'_, T>,
    fd: i32,
    iovs: i32,
    count: i32,
) -> wasmtime::Result<Checked> {
    // 0, 1 and 2 are stdin, stdout and stderr: not files.
    if (0..=2).contains(&fd) {
        return Ok(Checked::Write(0));
    }
    let len = first_buffer_len(caller, iovs, count);
    let (disk, _) = caller.data_mut().disk_and_wasi();
    match disk.take(len).await {
        Ok(()) => Ok(Checked::Write(len)),
        Err(Refusal::Node) => Ok(Checked::Full),
        Err(Refusal::Worker) => {
            disk.flag.set(LimitHit::Disk);
            wasmtime::bail!("disk limit of {} bytes reached in /outputs", disk.limit)
        }
    }
}

/// Checks a write, then makes it or answers `ENOSPC`.
async fn checked_write<T: DiskQuotaState>(
    caller: &mut Caller<'_, T>,
    call: Write,
) -> wasmtime::Result<i32> {
    let (Write::AtCursor([fd, iovs, count, _]) | Write::At([fd, iovs, count], ..)) = call;
    match check(caller, fd, iovs, count).await? {
        Checked::Full => Ok(wasmtime_wasi::p1::types::Errno::Nospc as i32),
        Checked::Write(len) => {
            let written = write(caller, call).await;
            caller.data_mut().disk_and_wasi().0.landed(len);
            written
        }
    }
}

/// A write as WASI preview 1 names it.
enum Write {
    /// `fd_write(fd, iovs, count, written)`.
    AtCursor([i32; 4]),
    /// `fd_pwrite(fd, iovs, count, offset, written)`.
    At([i32; 3], i64, i32),
}

/// Makes the write with WASI's own function, on the guest's memory.
async fn write<T: DiskQuotaState>(
    caller: &mut Caller<'_, T>,
    call: Write,
) -> wasmtime::Result<i32> {
    use wasi::WasiSnapshotPreview1;
    let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
        wasmtime::bail!("missing required memory export");
    };
    // What WASI may copy out of the guest's memory in one call, as its own
    // linker code sets it before every call.
    let fuel = wasmtime::AsContextMut::as_context_mut(&mut *caller).hostcall_fuel();
    let (bytes, state) = memory.data_and_store_mut(&mut *caller);
    let mut guest = wiggle::GuestMemory::Unshared(bytes);
    let (_, ctx) = state.disk_and_wasi();
    ctx.set_hostcall_fuel(fuel);
    match call {
        Write::AtCursor([fd, iovs, count, written]) => {
            wasi::fd_write(ctx, &mut guest, fd, iovs, count, written).await
        }
        Write::At([fd, iovs, count], offset, written) => {
            wasi::fd_pwrite(ctx, &mut guest, fd, iovs, count, offset, written).await
        }
    }
}

/// Replaces WASI's `fd_write` and `fd_pwrite` in `linker` (which has
/// WASI) with the checking wrappers.
pub(crate) fn add_to_linker<T: DiskQuotaState>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    linker.func_wrap_async(
        WASI,
        "fd_write",
        |mut caller: Caller<'_, T>, (fd, iovs, count, written): (i32, i32, i32, i32)| {
            Box::new(async move {
                checked_write(&mut caller, Write::AtCursor([fd, iovs, count, written])).await
            })
        },
    )?;
    linker.func_wrap_async(
        WASI,
        "fd_pwrite",
        |mut caller: Caller<'_, T>,
         (fd, iovs, count, offset, written): (i32, i32, i32, i64, i32)| {
            Box::new(async move {
                checked_write(&mut caller, Write::At([fd, iovs, count], offset, written)).await
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A measure sets a share to what its files hold, plus what writes
    /// under way at its start or counted since may still add.
    #[test]
    fn a_measure_keeps_what_writes_under_way_may_add() {
        let budget = DiskBudget::new(100);
        let me = budget.join(PathBuf::from("/nonexistent-a"));
        assert!(budget.take(me, 40));
        budget.landed(me, 40);
        assert!(budget.take(me, 10)); // under way
        let before = budget.before(Some(me));
        assert!(budget.take(me, 5)); // counted during the measure
        // The files held 30: 40 were written over in part.
        budget.settle(before.into_iter().map(|b| (b, 30)).collect());
        assert_eq!(budget.counted(me), 30 + 10 + 5);
        assert_eq!(budget.shares().total, 45);
        assert!(budget.take(me, 55));
        assert!(!budget.take(me, 1), "the budget is full");
    }

    /// An ended worker's share counts until its files are gone, and at
    /// most [`MAX_ENDED`] of them are kept.
    #[test]
    fn ended_workers_count_until_their_files_are_gone() {
        let budget = DiskBudget::new(u64::MAX);
        let ended = budget.join(PathBuf::from("/nonexistent-b"));
        assert!(budget.take(ended, 7));
        budget.leave(ended);
        assert_eq!(budget.shares().total, 7);
        let measured = budget.before(None).into_iter().map(|b| (b, 0)).collect();
        budget.settle(measured);
        assert_eq!(budget.shares().total, 0);
        assert!(budget.shares().by_worker.is_empty());
        // A worker that counted nothing leaves nothing behind.
        let idle = budget.join(PathBuf::from("/nonexistent-d"));
        budget.leave(idle);
        assert!(budget.shares().by_worker.is_empty());

        for _ in 0..MAX_ENDED + 10 {
            let id = budget.join(PathBuf::from("/nonexistent-c"));
            assert!(budget.take(id, 1));
            budget.leave(id);
        }
        assert_eq!(budget.shares().by_worker.len(), MAX_ENDED);
        assert_eq!(budget.shares().total, MAX_ENDED as u64);
    }
}

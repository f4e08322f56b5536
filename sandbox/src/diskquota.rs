//! A worker's disk limit, held at each write to a file.
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
//! The wrappers then call WASI's own functions, as the linker code that
//! `wasmtime-wasi` generates does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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

/// What a worker may still write to its files.
pub(crate) struct DiskQuota {
    /// The directory measured (`/outputs` on the host); `None`: no limit.
    dir: Option<PathBuf>,
    limit: u64,
    /// Bytes under `dir` at the last measure plus those written since: at
    /// least what it holds.
    used: u64,
    /// Set to [`LimitHit::Disk`] when a write is refused.
    flag: Arc<LimitFlag>,
}

/// What the wrappers need of a store's data: its quota and its WASI
/// context (the worker's store data implements it).
pub(crate) trait DiskQuotaState: Send + 'static {
    fn disk_and_wasi(&mut self) -> (&mut DiskQuota, &mut WasiP1Ctx);
}

impl DiskQuota {
    pub(crate) fn new(dir: Option<PathBuf>, limit: u64, flag: Arc<LimitFlag>) -> DiskQuota {
        DiskQuota {
            dir: dir.filter(|_| limit != u64::MAX),
            limit,
            used: 0,
            flag,
        }
    }

    /// Counts `len` more bytes; false if they would pass the limit (then
    /// nothing is counted).
    async fn take(&mut self, len: u64) -> bool {
        let Some(dir) = &self.dir else {
            return true;
        };
        if self.used.saturating_add(len) > self.limit {
            let dir = dir.clone();
            self.used = tokio::task::spawn_blocking(move || crate::jobfs::tree_bytes(&dir))
                .await
                .unwrap_or(u64::MAX);
            if self.used.saturating_add(len) > self.limit {
                return false;
            }
        }
        self.used = self.used.saturating_add(len);
        true
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

/// Checks a write of the buffers at `iovs` to `fd` against the limit.
async fn check<T: DiskQuotaState>(
    caller: &mut Caller<'_, T>,
    fd: i32,
    iovs: i32,
    count: i32,
) -> wasmtime::Result<()> {
    // 0, 1 and 2 are stdin, stdout and stderr: not files.
    if (0..=2).contains(&fd) {
        return Ok(());
    }
    let len = first_buffer_len(caller, iovs, count);
    let (disk, _) = caller.data_mut().disk_and_wasi();
    if disk.take(len).await {
        return Ok(());
    }
    disk.flag.set(LimitHit::Disk);
    wasmtime::bail!("disk limit of {} bytes reached in /outputs", disk.limit)
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
                check(&mut caller, fd, iovs, count).await?;
                write(&mut caller, Write::AtCursor([fd, iovs, count, written])).await
            })
        },
    )?;
    linker.func_wrap_async(
        WASI,
        "fd_pwrite",
        |mut caller: Caller<'_, T>,
         (fd, iovs, count, offset, written): (i32, i32, i32, i64, i32)| {
            Box::new(async move {
                check(&mut caller, fd, iovs, count).await?;
                write(&mut caller, Write::At([fd, iovs, count], offset, written)).await
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

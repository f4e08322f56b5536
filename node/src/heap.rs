//! Handing freed heap memory back to the system.
//!
//! glibc's allocator keeps what a thread frees in that thread's arena, for
//! the next allocation there, and returns only the top of an arena to the
//! system on its own. After a burst that passes through several threads
//! (a worker flooding its log: megabytes of chunks through the event loop,
//! the links and the store's writer), the node's resident memory would
//! stay at the burst's peak although nothing holds it. [`release`] asks
//! glibc to return every free page of every arena (`malloc_trim(0)`); the
//! event loop calls it, off the loop, after jobs or workers ended (see
//! `Node::release_memory`). Other allocators and C libraries return memory
//! by themselves or not at all: there it does nothing.

/// Returns the heap's free pages to the system, if the C library can.
/// Takes each arena's lock in turn (milliseconds for tens of MiB): call it
/// off the event loop.
pub(crate) fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::trim();
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod glibc {
    // SAFETY: `malloc_trim` is glibc's (since 2.0, in every glibc this
    // target links): it takes an amount of padding to leave at the top of
    // the main arena and returns 1 if memory was released, 0 if not. It
    // locks each arena itself, so it may be called from any thread at any
    // time, and it touches no memory of ours.
    unsafe extern "C" {
        safe fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }

    pub(super) fn trim() {
        malloc_trim(0);
    }
}

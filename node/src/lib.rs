//! The Zorilla node: the `zorilla-node` daemon that every machine of a grid
//! runs, and the client library that talks to it.
//!
//! Where workers go and what becomes of a job are `zorilla_core`'s
//! decisions; this crate does the IO around them (`docs/ARCHITECTURE.md`
//! follows a job through these modules).
//!
//! Public:
//! - [`config`]: the TOML configuration, flags and environment overrides,
//!   and detection of the machine's cores, memory and disk.
//! - [`protocol`]: the client protocol (length-prefixed CBOR over TCP).
//! - [`client`]: an async client of it, used by the `zorilla` tool and tests.
//! - [`jobspec`]: job spec files (`zorilla submit job.toml`) and how they
//!   become a request with its module and inputs.
//! - [`owner`]: users and the jobs they own: user keys, signed
//!   submissions and requests, who may see or change a job.
//! - [`native`]: native jobs' executables (ELF, their architecture) as
//!   a node checks them; whose native jobs a node runs is the core's
//!   `NativePolicy`.
//! - [`validate`]: the checks of everything that comes from a client or a
//!   peer against the documented maxima of `zorilla_core::limits`.
//! - `daemon`, as [`run`] / [`Daemon`]: staged start-up (state directory,
//!   database, sandbox, overlay, client listener, status page, event loop)
//!   and orderly shutdown.
//! - `fuzz` (hidden): entry points for the fuzz harness, not an API.
//!
//! Private:
//! - `node`: the event loop; it drives the core's scheduler, rank liveness
//!   and job replicas, and executes their actions.
//! - `server`: the client listener: handshake and token, each request
//!   checked and handed to the event loop.
//! - `forward`: a client's request about a job homed elsewhere goes to
//!   the job's home.
//! - `wire`: what nodes say to each other over the overlay's rpc.
//! - `origin`: a job's id, bound to the node that accepted it.
//! - `pmi`: the MPI library's process management interface (PMI-1) for
//!   native ranks, its fences over the job's rank links.
//! - `nativeapi`: the `zorilla.h` calls of native ranks (checkpoints),
//!   served on a socket each inherits.
//! - `net`: calls between nodes, and the sandbox's transport over them.
//! - `link`: the message path between workers: rank inboxes, and streams
//!   (or direct connections) between nodes.
//! - `checkpoint`: a worker's checkpoints, kept as blocks on other nodes.
//! - `store`: redb (jobs, files, logs, outputs) and the checkpoints this
//!   node holds for others.
//! - `status`: what the status page of `zorilla-webui` shows, published by
//!   the event loop, and the remote views.
//! - `cpuspeed`: the node's CPU speed figure, measured once and kept.
//! - `heap`: handing freed heap memory back to the system.

mod checkpoint;
pub mod client;
pub mod config;
mod cpuspeed;
mod daemon;
pub(crate) mod forward;
#[doc(hidden)]
pub mod fuzz;
mod heap;
pub mod jobspec;
mod link;
pub mod native;
mod nativeapi;
mod net;
mod node;
mod origin;
pub mod owner;
mod pmi;
pub mod protocol;
mod server;
mod status;
mod store;
pub mod validate;
mod wire;

pub use daemon::{Daemon, ReadyLine, WorkerTimeCaps, run};
#[doc(hidden)]
pub use store::bench_append;

//! The Zorilla node: the `zorilla-node` daemon that every machine of a grid
//! runs, and the client library that talks to it.
//!
//! The parts:
//! - [`config`]: the TOML configuration, flags and environment overrides,
//!   and detection of the machine's cores, memory and disk.
//! - [`protocol`]: the client protocol (length-prefixed CBOR over TCP) and
//!   [`client`]: an async client of it.
//! - [`run`] / [`Daemon`]: start-up (state directory, database, sandbox,
//!   overlay, client listener, status page) and the event loop (`node`),
//!   which drives the core's scheduler and executes its actions.
//! - [`validate`]: the checks of everything that comes from a client or a
//!   peer against the documented maxima of `zorilla_core::limits`.
//! - Private: `store` (redb: jobs, files, logs, outputs), `wire` (what
//!   nodes say to each other over the overlay's rpc), `net` (calls between
//!   nodes and the sandbox transport over them), `server` (the client
//!   listener), `status` (what the status page of `zorilla-webui` shows,
//!   published by the event loop, and the remote views).

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
mod net;
mod node;
pub mod owner;
pub mod protocol;
mod server;
mod status;
mod store;
pub mod validate;
mod wire;

pub use daemon::{Daemon, ReadyLine, WorkerTimeCaps, run};
#[doc(hidden)]
pub use store::bench_append;

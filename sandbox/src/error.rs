//! Errors raised before a worker runs: a module refused, an engine or cache
//! that cannot be set up, a job directory that cannot be opened.
//!
//! How a worker *ended* is not an error but an [`crate::Outcome`].

use std::path::PathBuf;

/// Why the sandbox refused a module or could not start a worker.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The bytes are not a valid WebAssembly module.
    #[error("not a valid WebAssembly module: {0}")]
    InvalidModule(String),
    /// The module imports something the sandbox does not provide.
    #[error("module imports `{module}::{name}`, which the Zorilla sandbox does not provide")]
    UnknownImport {
        /// The import's module name (e.g. `wasi_snapshot_preview1`).
        module: String,
        /// The import's field name.
        name: String,
    },
    /// The module imports a provided name with the wrong type.
    #[error("module import does not match what the sandbox provides: {0}")]
    IncompatibleImport(String),
    /// The module has no `_start` function (it is not a WASI command).
    #[error("module exports no `_start` function: only WASI command modules can run as workers")]
    NoEntryPoint,
    /// The WebAssembly engine could not be configured.
    #[error("cannot configure the WebAssembly engine: {0}")]
    Engine(String),
    /// The on-disk module cache could not be used.
    #[error("module cache {path}: {source}")]
    Cache {
        /// The file or directory concerned.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// The job directory could not be prepared or opened.
    #[error("job directory {path}: {source}")]
    JobDir {
        /// The directory concerned.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// The worker could not be instantiated (e.g. all worker slots are busy).
    #[error("cannot instantiate the worker: {0}")]
    Instantiate(String),
}

//! The engine's epoch ticker: a thread that bumps the epoch every tick, so
//! that a running guest yields to the executor at least that often (see
//! [`crate::SandboxConfig::epoch_tick`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::Engine;

/// Bumps the engine's epoch every tick until dropped.
pub(crate) struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    pub(crate) fn start(engine: Engine, tick: Duration) -> std::io::Result<Ticker> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("zorilla-epoch".to_owned())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    // An early (spurious) wake-up only makes a tick short.
                    std::thread::park_timeout(tick);
                    engine.increment_epoch();
                }
            })?;
        Ok(Ticker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

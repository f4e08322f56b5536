//! Status page of a Zorilla node: HTML pages, a JSON API and Prometheus
//! metrics, served by every `zorilla-node` (issue 7).
//!
//! The node plugs in through one trait and one call:
//!
//! 1. it implements [`StatusSource`] (snapshots of its state as the plain
//!    structs of [`model`], a `broadcast` receiver of [`Change`]s, and remote
//!    fetches of a peer's [`NodeSnapshot`] and job through the overlay);
//! 2. it calls [`serve`] with a [`WebConfig`] and gets the bound address.
//!
//! A node answering a peer's remote-view rpc replies with [`snapshot`] of its
//! own source (and [`StatusSource::job`] for one job), so the same pages can
//! be opened for any node of the grid from one browser tab.
//!
//! Parts:
//! - [`model`]: the data shown, serde structs (the JSON API is these);
//! - [`source`]: the trait, the change notifications, the remote errors;
//! - `pages`: HTML rendering with `maud` (escapes by default), style sheet and
//!   the small live-update script, both served from the binary;
//! - `svg`: the neighbourhood picture laid out by RTT;
//! - `metrics`: the Prometheus text format;
//! - `server`: routes, access control (loopback or token), server-sent events.
//!
//! The interface is read-only: no route changes anything on the node. Every
//! string that came from the network or a job is escaped in HTML, in
//! attributes, in the SVG and in metric labels. Everything is bounded: live
//! streams ([`WebConfig::max_live_streams`]), log tails ([`MAX_LOG_LINES`],
//! [`MAX_LOG_LINE_BYTES`]), peers drawn in the picture, remote waits.

pub mod model;
pub mod source;

mod metrics;
mod pages;
mod server;
mod svg;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

pub use model::NodeSnapshot;
pub use source::{Change, RemoteError, StatusSource, snapshot};

/// The most log lines a job page or `/api/jobs/{id}` shows (the newest).
pub const MAX_LOG_LINES: usize = 200;
/// The longest log line shown, in bytes; longer lines are cut.
pub const MAX_LOG_LINE_BYTES: usize = 2048;

/// Where and how the web interface listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebConfig {
    /// The address to listen on. Loopback by default; any other address
    /// needs `token`.
    pub listen: SocketAddr,
    /// The token required off loopback: the same as the client port's.
    /// Ignored on a loopback address.
    pub token: Option<String>,
    /// The most live-update streams open at once; more get 503.
    pub max_live_streams: usize,
    /// How often a live remote view asks its peer again.
    pub remote_refresh: Duration,
}

impl WebConfig {
    /// The default port.
    pub const DEFAULT_PORT: u16 = 7474;
    /// The default bound on live streams.
    pub const DEFAULT_MAX_LIVE_STREAMS: usize = 32;
    /// The default refresh of live remote views.
    pub const DEFAULT_REMOTE_REFRESH: Duration = Duration::from_secs(5);
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, Self::DEFAULT_PORT)),
            token: None,
            max_live_streams: Self::DEFAULT_MAX_LIVE_STREAMS,
            remote_refresh: Self::DEFAULT_REMOTE_REFRESH,
        }
    }
}

/// Why the web interface could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A non-loopback address without a token.
    #[error("the web interface listens on {0}, which is not loopback: a token is required")]
    TokenRequired(SocketAddr),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Starts the web interface on the current tokio runtime and returns the
/// address it is bound to (useful with port 0). The server runs as a spawned
/// task until the runtime shuts down.
pub async fn serve(
    config: WebConfig,
    source: Arc<dyn StatusSource>,
) -> Result<SocketAddr, ServeError> {
    let access = if config.listen.ip().is_loopback() {
        server::Access::Loopback
    } else {
        match config.token.as_deref() {
            Some(token) if !token.is_empty() => server::Access::Token(token.into()),
            _ => return Err(ServeError::TokenRequired(config.listen)),
        }
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: config.listen,
        source,
    })?;
    let app = server::router(
        source,
        access,
        config.max_live_streams.max(1),
        config.remote_refresh.max(Duration::from_millis(10)),
    )
    .into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(%addr, "web interface stopped: {e}");
        }
    });
    tracing::info!(%addr, "web interface listening");
    Ok(addr)
}

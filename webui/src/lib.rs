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
//! - [`grid`]: the grid view, gathered from the peers at a bounded cost;
//! - `pages`: HTML rendering with `maud` (escapes by default), style sheet and
//!   the small live-update script, both served from the binary;
//! - `svg`: the neighbourhood picture laid out by RTT;
//! - `escape`: percent-encoding of ids in links, used by both;
//! - `metrics`: the Prometheus text format;
//! - `server`: routes, access control (loopback or token), server-sent events.
//!
//! The interface is read-only: no route changes anything on the node. Every
//! string that came from the network or a job is escaped in HTML, in
//! attributes, in the SVG and in metric labels. Everything is bounded: live
//! streams ([`WebConfig::max_live_streams`]), log tails ([`MAX_LOG_LINES`],
//! [`MAX_LOG_LINE_BYTES`]), peers drawn in the picture, remote waits.
//!
//! Every request is bounded before its token is looked at, since anyone who
//! can reach the port can send one: at most
//! [`WebConfig::max_connections`] connections are served at once (more wait
//! in the kernel's accept queue, costing the node nothing), the request line
//! and headers together are at most [`MAX_REQUEST_HEAD`] bytes in at most
//! [`MAX_HEADERS`] headers (more gets 431), they must arrive within
//! [`HEADER_READ_TIMEOUT`] (also the most an idle connection is kept), and a
//! request with a body gets 413 (every route is a read-only GET; the body is
//! never read). So the page's connections hold at most about
//! `max_connections` × [`MAX_CONNECTION_BUFFER`] of buffers.

pub mod grid;
pub mod model;
pub mod source;

mod escape;
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

/// The most bytes of a request's line and headers together.
pub const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// The most headers in one request.
pub const MAX_HEADERS: usize = 64;
/// How long a client may take to send a request's line and headers, and
/// how long an idle connection is kept for its next request.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a connection buffers, each way (hyper's read and write
/// buffers; the smallest hyper allows is 8 KiB).
pub const MAX_CONNECTION_BUFFER: usize = 64 * 1024;

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
    /// The most connections served at once (live streams included); more
    /// wait to be accepted until one closes.
    pub max_connections: usize,
    /// How the grid view asks the peers.
    pub grid: grid::GridSettings,
}

impl WebConfig {
    /// The default port.
    pub const DEFAULT_PORT: u16 = 7474;
    /// The default bound on live streams.
    pub const DEFAULT_MAX_LIVE_STREAMS: usize = 32;
    /// The default refresh of live remote views.
    pub const DEFAULT_REMOTE_REFRESH: Duration = Duration::from_secs(5);
    /// The default bound on connections: room for every live stream and as
    /// many browsers again.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 128;
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, Self::DEFAULT_PORT)),
            token: None,
            max_live_streams: Self::DEFAULT_MAX_LIVE_STREAMS,
            remote_refresh: Self::DEFAULT_REMOTE_REFRESH,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            grid: grid::GridSettings::default(),
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
        config.grid,
    );
    tokio::spawn(accept_loop(listener, app, config.max_connections.max(1)));
    tracing::info!(%addr, "web interface listening");
    Ok(addr)
}

/// Serves connections, at most `max_connections` at once, each over
/// HTTP/1 with the bounds of the module doc. (`axum::serve` sets none of
/// them: no header timeout, about 400 KB of buffer per connection, no bound
/// on connections.)
async fn accept_loop(listener: tokio::net::TcpListener, app: axum::Router, max_connections: usize) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt as _;

    let slots = Arc::new(tokio::sync::Semaphore::new(max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_headers(MAX_HEADERS)
        .max_header_size(MAX_REQUEST_HEAD)
        .max_buf_size(MAX_CONNECTION_BUFFER);
    loop {
        // A free slot first: connections over the bound stay in the
        // kernel's queue rather than in the node's memory.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                // Out of file descriptors, say: wait rather than spin.
                tracing::warn!("web: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // The guard logs who asked.
        let service = app.clone().map_request(
            move |mut request: axum::extract::Request<hyper::body::Incoming>| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                request
            },
        );
        let connection = http.serve_connection(
            TokioIo::new(stream),
            hyper_util::service::TowerToHyperService::new(service),
        );
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%peer, "web: connection ended: {e}");
            }
            drop(slot);
        });
    }
}

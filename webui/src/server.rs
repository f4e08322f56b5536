//! The HTTP server: routes, access control, the JSON API, and the live event
//! streams.
//!
//! Routes (every page has a JSON twin under `/api`):
//!
//! | page | JSON | what |
//! | --- | --- | --- |
//! | `/` | `/api/overview` | this node |
//! | `/peers` | `/api/peers` | peers, with the neighbourhood picture |
//! | `/jobs` | `/api/jobs` | jobs |
//! | `/jobs/{id}` | `/api/jobs/{id}` | one job, its workers and log tail |
//! | `/pending` | `/api/pending` | adverts held |
//! | `/grid`, `/grid?job=ID` | `/api/grid`, `/api/grid?job=ID` | the grid: the nodes this node knows by site or distance, their cores and jobs as each says (at most `grid_view_peers` asked, answers kept a few seconds: see [`crate::grid`]), and where job ID's workers are |
//! | | `/api/counters`, `/api/snapshot` | counters; everything at once |
//! | `/peers/{peer}`, `/peers/{peer}/{peers,jobs,pending}`, `/peers/{peer}/jobs/{id}` | `/api/peers/{peer}/{overview,peers,jobs,pending}`, `/api/peers/{peer}/jobs/{id}`, `/api/peers/{peer}` | the same pages of a peer, fetched through the overlay |
//! | `/events/{overview,peers,jobs,pending}`, `/events/jobs/{id}` | | server-sent events: `update` events carrying the page body, after each [`Change`] that affects it |
//! | `/events/grid`, `/events/grid?job=ID` | | the same for the grid view, gathered again every [`crate::WebConfig::remote_refresh`] (from the answers kept) |
//! | `/events/peers/{peer}`, `/events/peers/{peer}/...` | | the same for remote views, polling the peer every [`crate::WebConfig::remote_refresh`] |
//! | `/metrics` | | Prometheus text |
//! | `/static/style.css`, `/static/live.js` | | served from the binary |
//!
//! Access: on a loopback address no token is needed, but the `Host` header
//! must name a loopback host (against DNS rebinding). On any other address
//! every request needs the token, as `Authorization: Bearer TOKEN` or as the
//! password of HTTP Basic authentication (any user name), which is how a
//! browser sends it; a missing or wrong token gets 401 and a log line.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use futures::stream;
use maud::Markup;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, broadcast};

use crate::grid::{Gatherer, GridSettings};
use crate::model::{JobDetail, NodeSnapshot};
use crate::pages::{self, Scope, View};
use crate::source::{Change, RemoteError, StatusSource, snapshot};
use crate::{MAX_LOG_LINES, escape, metrics};

/// How long a remote view waits for the peer.
pub(crate) const REMOTE_TIMEOUT: Duration = Duration::from_secs(10);

/// The content security policy of every response: our own script and style
/// sheet only, no inline script, nothing from elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Who may ask.
#[derive(Clone)]
pub(crate) enum Access {
    /// Loopback: anyone on this machine, with a loopback `Host`.
    Loopback,
    /// Elsewhere: the token is required.
    Token(Arc<str>),
}

#[derive(Clone)]
struct AppState {
    source: Arc<dyn StatusSource>,
    access: Access,
    streams: Arc<Semaphore>,
    remote_refresh: Duration,
    grid: Arc<Gatherer>,
}

/// The router over a source, with the given access rule, at most
/// `max_streams` live event streams at once, and remote views refreshed
/// every `remote_refresh`.
pub(crate) fn router(
    source: Arc<dyn StatusSource>,
    access: Access,
    max_streams: usize,
    remote_refresh: Duration,
    grid: GridSettings,
) -> Router {
    let state = AppState {
        source,
        access,
        streams: Arc::new(Semaphore::new(max_streams)),
        remote_refresh,
        grid: Arc::new(Gatherer::new(grid)),
    };
    Router::new()
        .route("/", get(|s: State<AppState>| local_page(s, View::Overview)))
        .route(
            "/peers",
            get(|s: State<AppState>| local_page(s, View::Peers)),
        )
        .route("/jobs", get(|s: State<AppState>| local_page(s, View::Jobs)))
        .route(
            "/jobs/{id}",
            get(|s: State<AppState>, Path(id): Path<String>| local_page(s, View::Job(id))),
        )
        .route(
            "/pending",
            get(|s: State<AppState>| local_page(s, View::Pending)),
        )
        .route("/grid", get(grid_page))
        .route("/api/grid", get(api_grid))
        .route("/events/grid", get(grid_events))
        .route(
            "/peers/{peer}",
            get(|s: State<AppState>, Path(p): Path<String>| remote_page(s, p, View::Overview)),
        )
        .route(
            "/peers/{peer}/peers",
            get(|s: State<AppState>, Path(p): Path<String>| remote_page(s, p, View::Peers)),
        )
        .route(
            "/peers/{peer}/jobs",
            get(|s: State<AppState>, Path(p): Path<String>| remote_page(s, p, View::Jobs)),
        )
        .route(
            "/peers/{peer}/jobs/{id}",
            get(
                |s: State<AppState>, Path((p, id)): Path<(String, String)>| {
                    remote_page(s, p, View::Job(id))
                },
            ),
        )
        .route(
            "/peers/{peer}/pending",
            get(|s: State<AppState>, Path(p): Path<String>| remote_page(s, p, View::Pending)),
        )
        .route(
            "/api/overview",
            get(|s: State<AppState>| api_local(s, Part::Overview)),
        )
        .route(
            "/api/peers",
            get(|s: State<AppState>| api_local(s, Part::Peers)),
        )
        .route(
            "/api/jobs",
            get(|s: State<AppState>| api_local(s, Part::Jobs)),
        )
        .route("/api/jobs/{id}", get(api_local_job))
        .route(
            "/api/pending",
            get(|s: State<AppState>| api_local(s, Part::Pending)),
        )
        .route(
            "/api/counters",
            get(|s: State<AppState>| api_local(s, Part::Counters)),
        )
        .route(
            "/api/snapshot",
            get(|s: State<AppState>| api_local(s, Part::All)),
        )
        .route(
            "/api/peers/{peer}",
            get(|s: State<AppState>, Path(p): Path<String>| api_remote(s, p, Part::All)),
        )
        .route(
            "/api/peers/{peer}/overview",
            get(|s: State<AppState>, Path(p): Path<String>| api_remote(s, p, Part::Overview)),
        )
        .route(
            "/api/peers/{peer}/peers",
            get(|s: State<AppState>, Path(p): Path<String>| api_remote(s, p, Part::Peers)),
        )
        .route(
            "/api/peers/{peer}/jobs",
            get(|s: State<AppState>, Path(p): Path<String>| api_remote(s, p, Part::Jobs)),
        )
        .route("/api/peers/{peer}/jobs/{id}", get(api_remote_job))
        .route(
            "/api/peers/{peer}/pending",
            get(|s: State<AppState>, Path(p): Path<String>| api_remote(s, p, Part::Pending)),
        )
        .route(
            "/events/overview",
            get(|s: State<AppState>| events(s, View::Overview)),
        )
        .route(
            "/events/peers",
            get(|s: State<AppState>| events(s, View::Peers)),
        )
        .route(
            "/events/jobs",
            get(|s: State<AppState>| events(s, View::Jobs)),
        )
        .route(
            "/events/jobs/{id}",
            get(|s: State<AppState>, Path(id): Path<String>| events(s, View::Job(id))),
        )
        .route(
            "/events/pending",
            get(|s: State<AppState>| events(s, View::Pending)),
        )
        .route(
            "/events/peers/{peer}",
            get(|s: State<AppState>, Path(p): Path<String>| remote_events(s, p, View::Overview)),
        )
        .route(
            "/events/peers/{peer}/peers",
            get(|s: State<AppState>, Path(p): Path<String>| remote_events(s, p, View::Peers)),
        )
        .route(
            "/events/peers/{peer}/jobs",
            get(|s: State<AppState>, Path(p): Path<String>| remote_events(s, p, View::Jobs)),
        )
        .route(
            "/events/peers/{peer}/jobs/{id}",
            get(
                |s: State<AppState>, Path((p, id)): Path<(String, String)>| {
                    remote_events(s, p, View::Job(id))
                },
            ),
        )
        .route(
            "/events/peers/{peer}/pending",
            get(|s: State<AppState>, Path(p): Path<String>| remote_events(s, p, View::Pending)),
        )
        .route("/metrics", get(metrics_text))
        .route(
            "/static/style.css",
            get(|| async { asset("text/css; charset=utf-8", pages::STYLE) }),
        )
        .route(
            "/static/live.js",
            get(|| async { asset("text/javascript; charset=utf-8", pages::SCRIPT) }),
        )
        .fallback(|| async {
            html(
                StatusCode::NOT_FOUND,
                pages::error_page("Not found", "There is no such page."),
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Access control and the headers every response carries.
async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let from = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "?".to_string(), |c| c.0.to_string());
    let headers = request.headers();
    // Before the token: every route is a read-only GET, so a body is
    // refused unread, whoever sends it.
    let refused = if has_body(headers) {
        tracing::warn!(%from, path = %request.uri().path(), "web: refused a request with a body");
        let mut response = (
            StatusCode::PAYLOAD_TOO_LARGE,
            "this status page takes no request bodies\n",
        )
            .into_response();
        // The unread body makes the connection unusable for another request.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        Some(response)
    } else {
        access_refusal(&state.access, &request, &from)
    };
    let mut response = match refused {
        Some(r) => r,
        None => next.run(request).await,
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// The answer to a request that the access rule refuses, or `None`.
fn access_refusal(access: &Access, request: &Request, from: &str) -> Option<Response> {
    let headers = request.headers();
    match access {
        Access::Loopback => match headers.get(header::HOST) {
            Some(host) if !loopback_host(host) => {
                tracing::warn!(%from, path = %request.uri().path(), "web: refused a request for a non-loopback Host");
                Some(
                    (
                        StatusCode::MISDIRECTED_REQUEST,
                        "this status page answers to loopback host names only\n",
                    )
                        .into_response(),
                )
            }
            _ => None,
        },
        Access::Token(token) => {
            if token_ok(headers, token) {
                None
            } else {
                let why = if headers.contains_key(header::AUTHORIZATION) {
                    "wrong token"
                } else {
                    "missing token"
                };
                tracing::warn!(%from, path = %request.uri().path(), why, "web: refused an unauthorised request");
                let mut response =
                    (StatusCode::UNAUTHORIZED, "a token is required\n").into_response();
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"zorilla-node\", charset=\"UTF-8\""),
                );
                response.headers_mut().append(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"zorilla-node\""),
                );
                Some(response)
            }
        }
    }
}

/// Whether a request announces a body (a length other than zero, or a
/// transfer coding).
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .any(|v| v.as_bytes() != b"0")
}

/// Whether a `Host` header names this machine's loopback.
fn loopback_host(host: &HeaderValue) -> bool {
    let Ok(host) = host.to_str() else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    let name = name.to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether the request carries the token (bearer, or Basic password).
fn token_ok(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        constant_time_eq(rest.as_bytes(), token.as_bytes())
    } else if scheme.eq_ignore_ascii_case("basic") {
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(rest) else {
            return false;
        };
        let password = match decoded.iter().position(|&b| b == b':') {
            Some(i) => &decoded[i + 1..],
            None => return false,
        };
        constant_time_eq(password, token.as_bytes())
    } else {
        false
    }
}

/// Compares without an early exit on the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn html(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// Why a page or API call failed.
enum Failure {
    NoJob(String),
    Remote(RemoteError),
    Timeout,
}

impl Failure {
    fn status(&self) -> StatusCode {
        match self {
            Self::NoJob(_) | Self::Remote(RemoteError::UnknownPeer) => StatusCode::NOT_FOUND,
            Self::Remote(RemoteError::Unreachable(_)) => StatusCode::BAD_GATEWAY,
            Self::Timeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    fn message(&self) -> String {
        match self {
            Self::NoJob(id) => format!("No job {id} is known there."),
            Self::Remote(e) => format!("Remote view: {e}."),
            Self::Timeout => "Remote view: the peer did not answer in time.".into(),
        }
    }

    fn page(&self) -> Response {
        let title = match self.status() {
            StatusCode::NOT_FOUND => "Not found",
            _ => "Peer unavailable",
        };
        html(self.status(), pages::error_page(title, &self.message()))
    }

    fn json(&self) -> Response {
        (
            self.status(),
            axum::Json(serde_json::json!({ "error": self.message() })),
        )
            .into_response()
    }
}

/// The log tail cut to what the web interface shows.
fn bounded(mut job: JobDetail) -> JobDetail {
    let skip = job.log_tail.len().saturating_sub(MAX_LOG_LINES);
    job.log_tail.drain(..skip);
    job
}

async fn fetch_remote(source: &dyn StatusSource, peer: &str) -> Result<NodeSnapshot, Failure> {
    match tokio::time::timeout(REMOTE_TIMEOUT, source.remote(peer)).await {
        Ok(Ok(snap)) => Ok(snap),
        Ok(Err(e)) => Err(Failure::Remote(e)),
        Err(_) => Err(Failure::Timeout),
    }
}

async fn fetch_remote_job(
    source: &dyn StatusSource,
    peer: &str,
    id: &str,
) -> Result<JobDetail, Failure> {
    match tokio::time::timeout(REMOTE_TIMEOUT, source.remote_job(peer, id)).await {
        Ok(Ok(Some(job))) => Ok(bounded(job)),
        Ok(Ok(None)) => Err(Failure::NoJob(id.to_string())),
        Ok(Err(e)) => Err(Failure::Remote(e)),
        Err(_) => Err(Failure::Timeout),
    }
}

/// The live stream of a local view.
fn live_url(view: &View) -> String {
    match view {
        View::Overview => "/events/overview".into(),
        other => format!("/events{}", other.path()),
    }
}

async fn local_page(State(state): State<AppState>, view: View) -> Response {
    let source = state.source.as_ref();
    let snap = snapshot(source);
    let job = match &view {
        View::Job(id) => match source.job(id) {
            Some(job) => Some(bounded(job)),
            None => return Failure::NoJob(id.clone()).page(),
        },
        _ => None,
    };
    let scope = Scope::local();
    let body = pages::body(&scope, &view, &snap, job.as_ref());
    let live = live_url(&view);
    html(
        StatusCode::OK,
        pages::layout(&scope, &view, &snap.overview, Some(&live), body),
    )
}

/// What a remote view shows, fetched from the peer.
async fn load_remote(
    source: &dyn StatusSource,
    peer: &str,
    view: &View,
) -> Result<(NodeSnapshot, Option<JobDetail>), Failure> {
    match view {
        View::Job(id) => {
            let (snap, job) = tokio::join!(
                fetch_remote(source, peer),
                fetch_remote_job(source, peer, id)
            );
            Ok((snap?, Some(job?)))
        }
        _ => Ok((fetch_remote(source, peer).await?, None)),
    }
}

/// The live stream of a remote view.
fn remote_live_url(peer: &str, view: &View) -> String {
    let page = match view {
        View::Overview => String::new(),
        other => other.path(),
    };
    format!("/events/peers/{}{page}", escape::path_segment(peer))
}

async fn remote_page(State(state): State<AppState>, peer: String, view: View) -> Response {
    let (snap, job) = match load_remote(state.source.as_ref(), &peer, &view).await {
        Ok(loaded) => loaded,
        Err(e) => return e.page(),
    };
    let live = remote_live_url(&peer, &view);
    let scope = Scope { remote: Some(peer) };
    let body = pages::body(&scope, &view, &snap, job.as_ref());
    html(
        StatusCode::OK,
        pages::layout(&scope, &view, &snap.overview, Some(&live), body),
    )
}

/// Which part of a snapshot an API route returns.
#[derive(Clone, Copy)]
enum Part {
    Overview,
    Peers,
    Jobs,
    Pending,
    Counters,
    All,
}

fn json<T: Serialize>(value: &T) -> Response {
    axum::Json(value).into_response()
}

fn part(snap: NodeSnapshot, part: Part) -> Response {
    match part {
        Part::Overview => json(&snap.overview),
        Part::Peers => json(&snap.peers),
        Part::Jobs => json(&snap.jobs),
        Part::Pending => json(&snap.pending),
        Part::Counters => json(&snap.counters),
        Part::All => json(&snap),
    }
}

async fn api_local(State(state): State<AppState>, which: Part) -> Response {
    let source = state.source.as_ref();
    match which {
        Part::Overview => json(&source.overview()),
        Part::Peers => json(&source.peers()),
        Part::Jobs => json(&source.jobs()),
        Part::Pending => json(&source.pending()),
        Part::Counters => json(&source.counters()),
        Part::All => json(&snapshot(source)),
    }
}

async fn api_local_job(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    match state.source.job(&id) {
        Some(job) => json(&bounded(job)),
        None => Failure::NoJob(id).json(),
    }
}

async fn api_remote(State(state): State<AppState>, peer: String, which: Part) -> Response {
    match fetch_remote(state.source.as_ref(), &peer).await {
        Ok(snap) => part(snap, which),
        Err(e) => e.json(),
    }
}

async fn api_remote_job(
    State(state): State<AppState>,
    Path((peer, id)): Path<(String, String)>,
) -> Response {
    match fetch_remote_job(state.source.as_ref(), &peer, &id).await {
        Ok(job) => json(&job),
        Err(e) => e.json(),
    }
}

/// The query of the grid view's routes.
#[derive(Deserialize)]
struct GridQuery {
    /// The job whose placement is drawn.
    job: Option<String>,
}

async fn grid_page(State(state): State<AppState>, Query(q): Query<GridQuery>) -> Response {
    let view = state
        .grid
        .view(state.source.as_ref(), q.job.as_deref())
        .await;
    let page = View::Grid(q.job);
    let live = live_url(&page);
    let overview = state.source.overview();
    html(
        StatusCode::OK,
        pages::layout(
            &Scope::local(),
            &page,
            &overview,
            Some(&live),
            pages::grid(&view),
        ),
    )
}

async fn api_grid(State(state): State<AppState>, Query(q): Query<GridQuery>) -> Response {
    json(
        &state
            .grid
            .view(state.source.as_ref(), q.job.as_deref())
            .await,
    )
}

/// A live stream of the grid view: gathered again every `remote_refresh`
/// (peers are asked at most once per the gatherer's `fresh_for`, however
/// many streams are open), an update sent when what it shows changed.
async fn grid_events(State(state): State<AppState>, Query(q): Query<GridQuery>) -> Response {
    let Ok(permit) = state.streams.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many live streams open\n",
        )
            .into_response();
    };
    let every = state.remote_refresh;
    let start = (state, q.job, permit, None::<String>);
    let updates = stream::unfold(start, move |(state, job, permit, last)| async move {
        let mut wait = last.is_some();
        loop {
            if wait {
                tokio::time::sleep(every).await;
            }
            wait = true;
            let view = state.grid.view(state.source.as_ref(), job.as_deref()).await;
            let body = pages::grid(&view).into_string();
            if last.as_deref() != Some(body.as_str()) {
                let event = update_event(&body);
                return Some((
                    Ok::<Event, Infallible>(event),
                    (state, job, permit, Some(body)),
                ));
            }
        }
    });
    Sse::new(updates)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    let snap = snapshot(state.source.as_ref());
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        metrics::render(&snap),
    )
        .into_response()
}

/// Whether a change can alter what a view shows.
fn affects(change: &Change, view: &View) -> bool {
    match (change, view) {
        (Change::Node, View::Overview) => true,
        (Change::Node, _) => false,
        (Change::Peers, v) => matches!(v, View::Peers),
        (Change::Jobs, v) => !matches!(v, View::Peers),
        (Change::Job(id), View::Job(shown)) => id == shown,
        (Change::Job(_), v) => matches!(v, View::Jobs | View::Overview),
        (Change::Pending, v) => matches!(v, View::Pending),
    }
}

/// The body of a local view as an SSE `update` event.
fn render_event(source: &dyn StatusSource, view: &View) -> Event {
    let snap = snapshot(source);
    let job = match view {
        View::Job(id) => source.job(id).map(bounded),
        _ => None,
    };
    let body = pages::body(&Scope::local(), view, &snap, job.as_ref()).into_string();
    update_event(&body)
}

/// An SSE `update` event carrying a rendered body.
fn update_event(body: &str) -> Event {
    // Carriage returns would split the data field; as a character reference
    // they render the same.
    Event::default()
        .event("update")
        .data(body.replace('\r', "&#13;"))
}

/// A live stream of a remote view: the peer is asked again every
/// `remote_refresh`, and an update is sent when what it shows changed (or it
/// stopped answering).
async fn remote_events(State(state): State<AppState>, peer: String, view: View) -> Response {
    let Ok(permit) = state.streams.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many live streams open\n",
        )
            .into_response();
    };
    let every = state.remote_refresh;
    let start = (state.source, peer, view, permit, None::<String>);
    let updates = stream::unfold(
        start,
        move |(source, peer, view, permit, last)| async move {
            let mut wait = last.is_some();
            loop {
                if wait {
                    tokio::time::sleep(every).await;
                }
                wait = true;
                let body = match load_remote(source.as_ref(), &peer, &view).await {
                    Ok((snap, job)) => {
                        let scope = Scope {
                            remote: Some(peer.clone()),
                        };
                        pages::body(&scope, &view, &snap, job.as_ref()).into_string()
                    }
                    Err(e) => pages::not_found_body(&e.message()).into_string(),
                };
                if last.as_deref() != Some(body.as_str()) {
                    let event = update_event(&body);
                    return Some((
                        Ok::<Event, Infallible>(event),
                        (source, peer, view, permit, Some(body)),
                    ));
                }
            }
        },
    );
    Sse::new(updates)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A live stream of one view: one `update` now, then one after each batch
/// of changes that affect it. At most `max_streams` at once (503 beyond).
async fn events(State(state): State<AppState>, view: View) -> Response {
    let Ok(permit) = state.streams.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many live streams open\n",
        )
            .into_response();
    };
    let changes = state.source.subscribe();
    let start = (state.source, changes, view, permit, true);
    let updates = stream::unfold(
        start,
        |(source, mut changes, view, permit, first)| async move {
            if !first {
                loop {
                    match changes.recv().await {
                        Ok(change) if affects(&change, &view) => break,
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
                // Coalesce what else is already queued: one rendering shows it all.
                while !matches!(
                    changes.try_recv(),
                    Err(broadcast::error::TryRecvError::Empty
                        | broadcast::error::TryRecvError::Closed)
                ) {}
            }
            let event = render_event(source.as_ref(), &view);
            Some((
                Ok::<Event, Infallible>(event),
                (source, changes, view, permit, false),
            ))
        },
    );
    Sse::new(updates)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:3000",
            "127.1.2.3",
            "[::1]:80",
            "[::1]",
            "a.localhost:1",
        ] {
            assert!(loopback_host(&HeaderValue::from_static(ok)), "{ok}");
        }
        for bad in [
            "evil.example",
            "10.0.0.1:80",
            "[::2]:80",
            "localhost.evil.example",
        ] {
            assert!(!loopback_host(&HeaderValue::from_static(bad)), "{bad}");
        }
    }

    #[test]
    fn tokens() {
        let mut h = HeaderMap::new();
        assert!(!token_ok(&h, "s3cret"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cret"),
        );
        assert!(token_ok(&h, "s3cret"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cre"),
        );
        assert!(!token_ok(&h, "s3cret"));
        // "user:s3cret"
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic dXNlcjpzM2NyZXQ="),
        );
        assert!(token_ok(&h, "s3cret"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic !!"));
        assert!(!token_ok(&h, "s3cret"));
    }

    #[test]
    fn changes_reach_the_views_that_show_them() {
        let job = View::Job("a".into());
        assert!(affects(&Change::Jobs, &View::Overview));
        assert!(affects(&Change::Job("a".into()), &job));
        assert!(!affects(&Change::Job("b".into()), &job));
        assert!(!affects(&Change::Peers, &View::Jobs));
        assert!(affects(&Change::Pending, &View::Pending));
    }
}

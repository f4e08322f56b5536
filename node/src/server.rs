//! The client-protocol listener: one task per connection (at most
//! [`ServerConfig::max_clients`] at once), handshake with version and token
//! check, then each request is checked and handed to the event loop, and
//! its answer written back. A whole frame that is not a valid request gets
//! a `BadRequest` error and the connection goes on; a frame over the cap,
//! or one cut off by the end of the connection, ends that connection only.
//!
//! Some requests are answered here rather than by the loop: `Peers` (from
//! the overlay handle), `Outputs` and `OutputBlock` (from the store, on a
//! blocking thread: reading a large output never holds up the loop), and
//! the waiting part of `Logs` (the loop answers at once; a connection that
//! asked to wait watches the loop's activity counter and asks again when
//! it moves, so the loop never holds a reply).
//!
//! # Memory
//!
//! Nothing a stranger can make large is allocated before its hello is
//! accepted: until then a connection reads frames of at most
//! [`HELLO_MAX_FRAME`] (4 KiB; a larger announced length closes the
//! connection with one error, before any of the frame is read), and the
//! whole hello must arrive within [`HANDSHAKE_TIMEOUT`] however slowly its
//! bytes trickle in. Read buffers grow as bytes arrive, never to an
//! announced length (see [`Connection`]). So strangers cost at most about
//! `max_clients` × 4 KiB of buffers, plus one small task per connection
//! beyond `max_clients` while it is told the node is busy (at most a
//! second: see [`Connection::close`]).
//!
//! An accepted client (one that knew the token, or any local client of a
//! node without one) may send frames up to [`DEFAULT_MAX_FRAME`] (64 MiB, a
//! module and its inputs); such a frame is held twice while it is decoded.
//! The bound for all clients together is therefore about `max_clients` ×
//! 2 × 64 MiB (16 GiB at the default 128 clients, each in the middle of a
//! submit), reached only by clients holding the token: they can run code on
//! the node anyway.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use zorilla_core::neighbours::LinkKind;
use zorilla_overlay::OverlayHandle;
use zorilla_sandbox::Sandbox;

use crate::node::{Asked, Command};
use crate::owner::{Access, BadUserId, Caller, SharedSessions, SubmitProof, Submitter, UserId};
use crate::protocol::frame::{DEFAULT_MAX_FRAME, FrameError, HELLO_MAX_FRAME};
use crate::protocol::{
    Connection, ConnectionError, ErrorKind, Hello, MAX_OUTPUT_LIST, MAX_WAIT_SECS, OutputData,
    OutputEntry, OutputPage, PROTOCOL_VERSION, PeerEntry, Request, Response, Welcome,
};
use crate::protocol::{JobRequest, NamedFile, Signed};
use crate::store::Store;

/// The default bound on clients connected at once.
pub(crate) const DEFAULT_MAX_CLIENTS: usize = 128;
/// How long a new connection may take to say hello: the whole hello frame
/// must be in by then, however slowly it is sent.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may sit idle between requests.
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// What the listener needs besides its socket.
#[derive(Clone)]
pub(crate) struct ServerConfig {
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) sandbox: Sandbox,
    pub(crate) overlay: OverlayHandle,
    pub(crate) network: String,
    /// The closed grid, if the node is in one.
    pub(crate) grid: Option<crate::protocol::GridInfo>,
    pub(crate) token: Option<String>,
    pub(crate) max_clients: usize,
    pub(crate) started: Instant,
    pub(crate) activity: watch::Receiver<u64>,
    pub(crate) store: Arc<Store>,
    /// The primaries of the jobs this node holds copies of (see
    /// [`crate::forward`]).
    pub(crate) primaries: crate::forward::Primaries,
    /// Bounds on looking for jobs' homes (see [`crate::forward`]).
    pub(crate) lookups: crate::forward::Lookups,
    /// The nonces this node gave for its jobs' owners (see
    /// [`crate::owner`]).
    pub(crate) sessions: SharedSessions,
}

/// What a connection knows of its client.
struct Client {
    /// It presented the node's token: this node's admin.
    admin: bool,
    /// The nonce of the connection's welcome (a signed submission signs
    /// it).
    nonce: [u8; crate::owner::NONCE_BYTES],
}

/// Accepts clients until the listener fails or the node stops.
pub(crate) async fn serve(listener: TcpListener, config: ServerConfig) {
    let slots = Arc::new(Semaphore::new(config.max_clients));
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let config = config.clone();
        let slot = slots.clone().try_acquire_owned();
        tokio::spawn(async move {
            let mut conn = Connection::new(stream, DEFAULT_MAX_FRAME);
            conn.set_read_cap(HELLO_MAX_FRAME);
            let Ok(_slot) = slot else {
                tracing::warn!(%addr, "client refused: {} clients connected", config.max_clients);
                let message = format!(
                    "the node already serves {} clients, its limit; try again shortly",
                    config.max_clients
                );
                let _ = conn.write(&Response::error(ErrorKind::Busy, message)).await;
                conn.close().await;
                return;
            };
            if let Err(e) = handle(&mut conn, addr, &config).await {
                tracing::debug!(%addr, "client connection ended: {e}");
                let _ = conn
                    .write(&Response::error(ErrorKind::BadRequest, e.to_string()))
                    .await;
            }
            conn.close().await;
        });
    }
}

/// Compares without an early exit, so the time taken does not tell how
/// much of a guessed token was right.
fn same_token(given: &str, expected: &str) -> bool {
    given.len() == expected.len()
        && given
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

async fn handle(
    conn: &mut Connection,
    addr: SocketAddr,
    config: &ServerConfig,
) -> Result<(), ConnectionError> {
    let hello = match tokio::time::timeout(HANDSHAKE_TIMEOUT, conn.read::<Hello>()).await {
        Ok(Err(ConnectionError::Frame(FrameError::TooLarge { len, .. }))) => {
            tracing::warn!(%addr, "client refused: a first frame of {len} bytes");
            let message = format!(
                "the first frame must be a hello of at most {HELLO_MAX_FRAME} bytes, \
                 and this one announced {len}"
            );
            conn.write(&Response::error(ErrorKind::BadRequest, message))
                .await?;
            return Ok(());
        }
        Ok(hello) => hello?,
        Err(_) => {
            let message = "no hello within 10 s; closing";
            conn.write(&Response::error(ErrorKind::BadRequest, message))
                .await?;
            return Ok(());
        }
    };
    let Some(hello) = hello else {
        return Ok(());
    };
    if hello.version != PROTOCOL_VERSION {
        let message = format!(
            "client speaks protocol version {}, this node speaks {PROTOCOL_VERSION}",
            hello.version
        );
        conn.write(&Response::error(ErrorKind::Version, message))
            .await?;
        return Ok(());
    }
    if let Some(expected) = &config.token {
        let given = hello.token.as_deref().unwrap_or("");
        if !same_token(given, expected) {
            // The hint (--token, ZORILLA_TOKEN) is the client's to give:
            // clients in other languages have other ways.
            let message = if given.is_empty() {
                "this node needs a token"
            } else {
                "wrong token"
            };
            tracing::warn!(%addr, client = %hello.client, "client refused: {message}");
            conn.write(&Response::error(ErrorKind::Unauthorized, message))
                .await?;
            return Ok(());
        }
    }
    // Only a node with a token has an admin: without one, any local
    // process may connect, and each is only the user it proves to be.
    let client = Client {
        admin: config.token.is_some(),
        nonce: crate::owner::fresh_nonce(),
    };
    conn.write(&Response::Welcome(Welcome {
        version: PROTOCOL_VERSION,
        peer: config.overlay.local_peer_id().to_string(),
        nonce: client.nonce.to_vec(),
    }))
    .await?;
    // Accepted: from now on a frame may carry a module.
    conn.set_read_cap(DEFAULT_MAX_FRAME);
    loop {
        let request = match tokio::time::timeout(IDLE_TIMEOUT, conn.read::<Request>()).await {
            // A whole frame that is not a request (unknown, a field of the
            // wrong type or missing, garbage): say so and read the next.
            Ok(Err(ConnectionError::Frame(e @ FrameError::Malformed { .. }))) => {
                conn.write(&Response::error(ErrorKind::BadRequest, e.to_string()))
                    .await?;
                continue;
            }
            Ok(request) => request?,
            Err(_) => {
                let message = "nothing sent for 10 minutes; closing";
                conn.write(&Response::error(ErrorKind::BadRequest, message))
                    .await?;
                return Ok(());
            }
        };
        let Some(request) = request else {
            return Ok(());
        };
        let response = answer(request, config, &client).await;
        conn.write(&response).await?;
    }
}

/// The answer to a request: this node's, or, for a job it is not home to,
/// the job's home's (see [`crate::forward`]), which checks an owner's
/// proof itself.
async fn answer(request: Request, config: &ServerConfig, client: &Client) -> Response {
    let mut caller = Caller {
        admin: client.admin,
        ..Caller::default()
    };
    let request = match request {
        Request::Submit {
            job,
            module,
            inputs,
            owner,
        } => {
            if let Some(signed) = owner {
                match check_submitter(&signed, &client.nonce, &job, &module, &inputs) {
                    Ok(submitter) => caller.submitter = Some(submitter),
                    Err(e) => return Response::error(ErrorKind::Unauthorized, e),
                }
            }
            let submit = Request::Submit {
                job,
                module,
                inputs,
                owner: None,
            };
            return answer_here(submit, caller, config).await;
        }
        request => request,
    };
    let (inner, forwarded) = match request {
        Request::Owner { proof, request } => {
            if let Err(e) = crate::validate::owner_request(&proof, &request) {
                return Response::error(ErrorKind::BadRequest, e.to_string());
            }
            caller.proof = Some(proof.clone());
            let forwarded = Request::Owner {
                proof,
                request: request.clone(),
            };
            (*request, forwarded)
        }
        request => (request.clone(), request),
    };
    let Some(job) = crate::forward::job_of(&inner) else {
        return answer_here(inner, caller, config).await;
    };
    let request = forwarded;
    let wait = match &request {
        Request::Logs { wait_secs, .. } => *wait_secs,
        _ => 0,
    };
    let here = answer_here(inner, caller, config).await;
    if !matches!(
        here,
        Response::Error {
            kind: ErrorKind::NotFound,
            ..
        }
    ) {
        return here;
    }
    let forwarded = crate::forward::forward(
        &config.overlay,
        &config.primaries,
        &config.lookups,
        job,
        request,
    );
    match forwarded.await {
        Some(there) => {
            // The home does not wait for more log on a forwarded request:
            // this connection waits a little before the client asks again.
            if let Response::Logs(page) = &there
                && wait > 0
                && page.chunks.is_empty()
                && !page.ended
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            there
        }
        None => here,
    }
}

/// The signer of a submission, if `signed` is its signature of the
/// submission on this connection (its `nonce`).
fn check_submitter(
    signed: &Signed,
    nonce: &[u8],
    job: &JobRequest,
    module: &[u8],
    inputs: &[NamedFile],
) -> Result<Submitter, String> {
    use sha2::{Digest, Sha256};
    let user: UserId = signed.user.parse().map_err(|e: BadUserId| e.to_string())?;
    let hash = |data: &[u8]| hex::encode(Sha256::digest(data));
    let module_sha256 = hash(module);
    let inputs: Vec<(String, String)> = inputs
        .iter()
        .map(|f| (f.name.clone(), hash(&f.data)))
        .collect();
    let inputs: Vec<(&str, &str)> = inputs
        .iter()
        .map(|(n, h)| (n.as_str(), h.as_str()))
        .collect();
    let proof = SubmitProof {
        nonce: nonce.to_vec(),
        signature: signed.signature.clone(),
        max_workers: job.max_workers,
    };
    crate::owner::check_submission(&user, &proof, job, &module_sha256, &inputs)
        .map_err(|e| format!("{e} on this connection"))?;
    Ok(Submitter { user, proof })
}

/// The answer of this node itself, to `caller`.
async fn answer_here(request: Request, caller: Caller, config: &ServerConfig) -> Response {
    match request {
        Request::Peers => peers(&config.overlay).await,
        Request::Revoke { revocations } => {
            if revocations.len() > crate::protocol::MAX_REVOCATIONS_PER_REQUEST {
                return Response::error(
                    ErrorKind::BadRequest,
                    format!(
                        "at most {} revocations at once",
                        crate::protocol::MAX_REVOCATIONS_PER_REQUEST
                    ),
                );
            }
            let items = revocations.into_iter().map(|r| r.into_vec()).collect();
            match config.overlay.revoke(items).await {
                Ok(new) => Response::Revoked { new: new as u64 },
                Err(e) => Response::error(ErrorKind::BadRequest, e.to_string()),
            }
        }
        Request::Outputs { .. } | Request::OutputBlock { .. } => {
            if let Err(e) = crate::validate::output_request(&request) {
                return Response::error(ErrorKind::BadRequest, e.to_string());
            }
            let store = config.store.clone();
            let sessions = config.sessions.clone();
            tokio::task::spawn_blocking(move || outputs(&store, &sessions, &caller, request))
                .await
                .unwrap_or_else(|e| Response::error(ErrorKind::Internal, e.to_string()))
        }
        Request::Logs {
            job,
            from,
            wait_secs,
        } => {
            let wait = Duration::from_secs(u64::from(wait_secs.min(MAX_WAIT_SECS)));
            let deadline = tokio::time::Instant::now() + wait;
            let mut activity = config.activity.clone();
            // An owner's proof is taken once (its sequence number is used
            // up): the asks after the first are the same request, let.
            let mut caller = Some(caller);
            loop {
                // Marked seen before asking, so a change while the loop
                // answers is not missed.
                activity.borrow_and_update();
                let asking = caller.take().unwrap_or(Caller {
                    admin: true,
                    ..Caller::default()
                });
                // As asked (the loop answers at once whatever the wait),
                // so that an owner's proof, which signs the request, holds.
                let response = ask(
                    Request::Logs {
                        job,
                        from,
                        wait_secs,
                    },
                    asking,
                    config,
                )
                .await;
                let done = match &response {
                    Response::Logs(page) => !page.chunks.is_empty() || page.ended,
                    _ => true,
                };
                if done
                    || tokio::time::timeout_at(deadline, activity.changed())
                        .await
                        .is_err()
                {
                    return response;
                }
            }
        }
        Request::NodeInfo => match ask(Request::NodeInfo, caller, config).await {
            Response::NodeInfo(mut info) => {
                if let Ok(listen) = config.overlay.listen_addrs().await {
                    info.listen = listen.iter().map(|a| a.to_string()).collect();
                }
                info.version = env!("CARGO_PKG_VERSION").to_string();
                info.network.clone_from(&config.network);
                info.grid.clone_from(&config.grid);
                info.uptime_secs = config.started.elapsed().as_secs();
                Response::NodeInfo(info)
            }
            other => other,
        },
        Request::Submit {
            job,
            module,
            inputs,
            ..
        } => {
            // What no node could run is refused first, with its sentence
            // (and before the module costs a compile); checked here once.
            let submission = match crate::validate::submission(job, module, inputs) {
                Ok(submission) => submission,
                Err(e) => return Response::error(ErrorKind::BadRequest, e.to_string()),
            };
            // A broken module is refused here, before the job is accepted
            // (a native executable was checked with the submission).
            let sandbox = config.sandbox.clone();
            let checked = tokio::task::spawn_blocking(move || {
                if !submission.request().kind.is_wasm() {
                    return (Ok(()), submission);
                }
                let checked = sandbox
                    .load(submission.module())
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                (checked, submission)
            })
            .await;
            let submission = match checked {
                Ok((Ok(()), submission)) => submission,
                Ok((Err(e), _)) => {
                    let message = format!("module refused: {e}");
                    return Response::error(ErrorKind::BadRequest, message);
                }
                Err(e) => {
                    let message = format!("module refused: the check failed: {e}");
                    return Response::error(ErrorKind::BadRequest, message);
                }
            };
            ask_loop(Asked::Submit(Box::new(submission)), caller, config).await
        }
        other => ask(other, caller, config).await,
    }
}

/// Hands a request of `caller` to the event loop and waits for its
/// answer.
async fn ask(request: Request, caller: Caller, config: &ServerConfig) -> Response {
    ask_loop(Asked::Request(Box::new(request)), caller, config).await
}

/// Hands what `caller` asks to the event loop and waits for its answer.
async fn ask_loop(asked: Asked, caller: Caller, config: &ServerConfig) -> Response {
    let (reply, rx) = oneshot::channel();
    let command = Command {
        asked,
        caller,
        reply,
    };
    match config.commands.send(command).await {
        Ok(()) => rx
            .await
            .unwrap_or_else(|_| Response::error(ErrorKind::Internal, "node is shutting down")),
        Err(_) => Response::error(ErrorKind::Internal, "node is shutting down"),
    }
}

/// Answers `Outputs` and `OutputBlock` from the store (blocking: reads the
/// database and the files), to the job's owner or this node's admin.
pub(crate) fn outputs(
    store: &Store,
    sessions: &SharedSessions,
    caller: &Caller,
    request: Request,
) -> Response {
    let job = match &request {
        Request::Outputs { job, .. } | Request::OutputBlock { job, .. } => *job,
        _ => return Response::error(ErrorKind::Internal, "not an outputs request"),
    };
    let id = zorilla_core::advert::JobId(job);
    let kept = match store.job(job) {
        Ok(Some(record)) if record.moved_to.is_none() => {
            match crate::owner::access(caller, sessions, job, record.owner.as_ref(), &request) {
                Ok(Access::Full) => record.kept(),
                Ok(Access::Public) => return crate::owner::owners_only(job, record.owner.as_ref()),
                Err(e) => return e.response(),
            }
        }
        Ok(Some(_)) => {
            return Response::error(
                ErrorKind::NotFound,
                format!("job {id} moved to another node"),
            );
        }
        Ok(None) => {
            return Response::error(ErrorKind::NotFound, format!("no job {id} on this node"));
        }
        Err(e) => return Response::error(ErrorKind::Internal, e.to_string()),
    };
    if let Some(kept) = kept {
        return kept_outputs(store, job, kept, request);
    }
    let answer = match request {
        Request::OutputBlock {
            name, offset, len, ..
        } => store
            .output_block(job, &name, offset, len as usize)
            .map(|block| match block {
                Some((data, size)) => Response::OutputBlock(OutputData { data, size }),
                None => Response::error(
                    ErrorKind::NotFound,
                    format!("job {id} has no output named {name:?}"),
                ),
            }),
        Request::Outputs { after, .. } => {
            store
                .output_files(job, &after, MAX_OUTPUT_LIST)
                .map(|(files, more)| {
                    let files = files
                        .into_iter()
                        .map(|f| OutputEntry {
                            name: f.name,
                            size: f.size,
                        })
                        .collect();
                    Response::Outputs(OutputPage { files, more })
                })
        }
        _ => return Response::error(ErrorKind::Internal, "not an outputs request"),
    };
    answer.unwrap_or_else(|e| Response::error(ErrorKind::Internal, e.to_string()))
}

/// [`outputs`] of a job that ran more than once and kept the results of
/// the run whose workers are `first..first + size` (see
/// [`JobRecord::kept`](crate::store::JobRecord::kept)): only that run's
/// files, named by their rank within the run, as an unreplicated job's.
fn kept_outputs(store: &Store, job: u64, (first, size): (u32, u32), request: Request) -> Response {
    // "rank/path" of the kept run's worker, as the home stored it.
    let stored = |name: &str| -> Option<String> {
        let (rank, path) = name.split_once('/')?;
        let rank: u32 = rank.parse().ok().filter(|r| *r < size)?;
        Some(format!("{}/{path}", first + rank))
    };
    let answer = match request {
        Request::OutputBlock {
            name, offset, len, ..
        } => match stored(&name) {
            None => Ok(None),
            Some(stored) => store.output_block(job, &stored, offset, len as usize),
        }
        .map(|block| match block {
            Some((data, size)) => Response::OutputBlock(OutputData { data, size }),
            None => Response::error(
                ErrorKind::NotFound,
                format!(
                    "job {} has no output named {name:?}",
                    zorilla_core::advert::JobId(job)
                ),
            ),
        }),
        Request::Outputs { after, .. } => {
            // A run's files are at most a worker's (bounded by
            // `jobfs::MAX_ENTRIES`): listed whole, then paged.
            store
                .output_files(job, "", usize::MAX - 1)
                .map(|(files, _)| {
                    let mut shown: Vec<OutputEntry> = files
                        .into_iter()
                        .filter_map(|f| {
                            let (worker, path) = f.name.split_once('/')?;
                            let worker: u32 = worker.parse().ok()?;
                            let rank = worker.checked_sub(first).filter(|r| *r < size)?;
                            Some(OutputEntry {
                                name: format!("{rank}/{path}"),
                                size: f.size,
                            })
                        })
                        .filter(|e| after.is_empty() || e.name.as_str() > after.as_str())
                        .collect();
                    shown.sort_by(|a, b| a.name.cmp(&b.name));
                    let more = shown.len() > MAX_OUTPUT_LIST;
                    shown.truncate(MAX_OUTPUT_LIST);
                    Response::Outputs(OutputPage { files: shown, more })
                })
        }
        _ => return Response::error(ErrorKind::Internal, "not an outputs request"),
    };
    answer.unwrap_or_else(|e| Response::error(ErrorKind::Internal, e.to_string()))
}

async fn peers(overlay: &OverlayHandle) -> Response {
    match overlay.known_peers().await {
        Ok(mut known) => {
            // Nearest first; unmeasured last.
            known.sort_by_key(|p| (p.rtt.is_none(), p.rtt));
            Response::Peers(
                known
                    .into_iter()
                    .map(|p| PeerEntry {
                        peer: p.peer.to_string(),
                        rtt_us: p.rtt.map(|r| r.as_micros() as u64),
                        link: p.kind.map(|k| {
                            match k {
                                LinkKind::Near => "near",
                                LinkKind::Far => "far",
                            }
                            .to_string()
                        }),
                        connected: p.connected,
                        addrs: p.addrs.iter().map(|a| a.to_string()).collect(),
                    })
                    .collect(),
            )
        }
        Err(e) => Response::error(ErrorKind::Internal, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::same_token;

    #[test]
    fn tokens_compare_exactly() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abd", "abc"));
        assert!(!same_token("ab", "abc"));
        assert!(!same_token("", "abc"));
    }
}

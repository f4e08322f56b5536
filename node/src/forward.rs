//! Clients reach a job through any node (issue 16): a request about a job
//! that this node is not home to (`Status`, `Logs`, `Outputs`,
//! `OutputBlock`, `Cancel`) goes to the job's home, and its answer comes
//! back as if this node had given it (the job's status names its home, so
//! the client can say where the job is).
//!
//! Finding the home costs little and is bounded: a node holding a copy of
//! the job knows its primary ([`Primaries`], published by the loop); any
//! other node asks at most [`MAX_ASKED`] of the peers it knows, all at
//! once, which of them is the job's home or knows it
//! ([`ForwardRpc::WhereIs`]), and keeps the answer for [`HOME_KEPT`] (at most
//! [`MAX_HOMES`] jobs), so that a client that follows a job through it
//! does not make it ask again at every request; a home kept that does not
//! answer as the job's home is forgotten, and looked for again. A forwarded request is answered by the node
//! that gets it and is never forwarded again, so a request crosses at most
//! one hop. What a forwarded request may see or do is the home's to
//! decide (see [`crate::owner`]): the node that forwards it is nobody's
//! admin there, and only the job's owner, proving it with a signature the
//! forwarding node cannot make, sees more than that the job exists.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use zorilla_overlay::{OverlayHandle, PeerId};

use crate::protocol::{ErrorKind, Request, Response};
use crate::wire::forward::ForwardRpc;
use crate::wire::{PeerReply, PeerRpc, decode, encode};

/// The most peers asked where a job's home is.
pub(crate) const MAX_ASKED: usize = 32;
/// How long the peers asked have to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the job's home has to answer a forwarded request.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(15);
/// The largest log page or output block a forwarded answer carries: well
/// within the overlay's 1 MiB message cap (clients read on from where a
/// short page or block ends).
pub(crate) const MAX_FORWARDED_BYTES: usize = 512 * 1024;

/// The primary of each job this node holds a copy of, as the loop last
/// published it.
pub(crate) type Primaries = Arc<RwLock<BTreeMap<u64, PeerId>>>;

/// How long a job that no peer asked knew is not asked about again.
const MISS_KEPT: Duration = Duration::from_secs(10);
/// The most jobs remembered as not found.
const MAX_MISSES: usize = 1024;
/// The most lookups under way at once (each asks up to [`MAX_ASKED`]
/// peers).
const MAX_LOOKUPS: usize = 4;
/// How long a home found is used without asking again.
const HOME_KEPT: Duration = Duration::from_secs(60);
/// The most homes found kept.
const MAX_HOMES: usize = 1024;

/// What keeps clients from making this node ask its peers without end:
/// jobs nobody knew are not asked about again for a while, and few
/// lookups run at once (a client asking for random job ids gets
/// `NotFound` at once rather than sending 32 messages each time).
#[derive(Clone)]
pub(crate) struct Lookups {
    misses: Arc<std::sync::Mutex<std::collections::VecDeque<(u64, std::time::Instant)>>>,
    /// Homes found, oldest first.
    homes: Arc<std::sync::Mutex<std::collections::VecDeque<(u64, PeerId, std::time::Instant)>>>,
    running: Arc<tokio::sync::Semaphore>,
}

impl Default for Lookups {
    fn default() -> Self {
        Lookups {
            misses: Default::default(),
            homes: Default::default(),
            running: Arc::new(tokio::sync::Semaphore::new(MAX_LOOKUPS)),
        }
    }
}

impl Lookups {
    /// The home of `job` found within [`HOME_KEPT`], if any.
    fn home(&self, job: u64) -> Option<PeerId> {
        let mut homes = self.homes.lock().unwrap_or_else(|e| e.into_inner());
        while homes
            .front()
            .is_some_and(|(_, _, at)| at.elapsed() >= HOME_KEPT)
        {
            homes.pop_front();
        }
        homes
            .iter()
            .rev()
            .find(|(j, ..)| *j == job)
            .map(|(_, home, _)| *home)
    }

    fn found(&self, job: u64, home: PeerId) {
        let mut homes = self.homes.lock().unwrap_or_else(|e| e.into_inner());
        homes.retain(|(j, ..)| *j != job);
        if homes.len() >= MAX_HOMES {
            homes.pop_front();
        }
        homes.push_back((job, home, std::time::Instant::now()));
    }

    /// `job`'s home as kept is not (or no longer) its home.
    fn forget(&self, job: u64) {
        let mut homes = self.homes.lock().unwrap_or_else(|e| e.into_inner());
        homes.retain(|(j, ..)| *j != job);
    }

    fn missed_lately(&self, job: u64) -> bool {
        let mut misses = self.misses.lock().unwrap_or_else(|e| e.into_inner());
        while misses
            .front()
            .is_some_and(|(_, at)| at.elapsed() >= MISS_KEPT)
        {
            misses.pop_front();
        }
        misses.iter().any(|(j, _)| *j == job)
    }

    fn missed(&self, job: u64) {
        let mut misses = self.misses.lock().unwrap_or_else(|e| e.into_inner());
        if misses.len() >= MAX_MISSES {
            misses.pop_front();
        }
        misses.push_back((job, std::time::Instant::now()));
    }
}

/// The job a request is about, if it can be answered by the job's home.
pub(crate) fn job_of(request: &Request) -> Option<u64> {
    match request {
        Request::Status { job }
        | Request::Cancel { job }
        | Request::Logs { job, .. }
        | Request::Outputs { job, .. }
        | Request::OutputBlock { job, .. }
        | Request::Resize { job, .. }
        | Request::Challenge { job } => Some(*job),
        Request::Owner { request, .. } => match request.as_ref() {
            Request::Owner { .. } => None,
            inner => job_of(inner),
        },
        _ => None,
    }
}

/// The answer of `job`'s home to `request`, if some node is its home and
/// answers: `None` when no node the asked peers know of holds it.
pub(crate) async fn forward(
    overlay: &OverlayHandle,
    primaries: &Primaries,
    lookups: &Lookups,
    job: u64,
    request: Request,
) -> Option<Response> {
    let me = overlay.local_peer_id();
    let known = primaries
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&job)
        .copied()
        .filter(|p| *p != me);
    let kept = known.is_none().then(|| lookups.home(job)).flatten();
    let mut failed = None;
    if let Some(home) = known.or(kept) {
        match ask_home(overlay, home, request.clone()).await {
            Ok(answer) => return Some(answer),
            Err(not_home) if known.is_some() => return Some(not_home.response(home)),
            // A home kept from an earlier lookup that is not (or no
            // longer) the job's home is forgotten, and the home looked for
            // once more; if nobody knows it now, the client hears what
            // became of the request, not that the job is unknown.
            Err(not_home) => {
                lookups.forget(job);
                failed = Some(not_home.response(home));
            }
        }
    }
    let home = match look_up(overlay, lookups, job).await {
        Ok(Some(home)) => home,
        Ok(None) => return failed,
        Err(busy) => return Some(failed.unwrap_or(busy)),
    };
    Some(
        ask_home(overlay, home, request)
            .await
            .unwrap_or_else(|not_home| not_home.response(home)),
    )
}

/// Asks the peers where `job`'s home is, and keeps the answer: `None` if
/// none knew (or none knew lately), an error if too many lookups run.
async fn look_up(
    overlay: &OverlayHandle,
    lookups: &Lookups,
    job: u64,
) -> Result<Option<PeerId>, Response> {
    if lookups.missed_lately(job) {
        return Ok(None);
    }
    let Ok(_slot) = lookups.running.try_acquire() else {
        return Err(Response::error(
            ErrorKind::Busy,
            "this node is looking for other jobs' homes; try again",
        ));
    };
    match find_home(overlay, job).await {
        Some(home) => {
            lookups.found(job, home);
            Ok(Some(home))
        }
        None => {
            lookups.missed(job);
            Ok(None)
        }
    }
}

/// Why a node asked as a job's home gave no answer of the home's.
enum NotHome {
    /// It did not answer, or not in time.
    Silent(String),
    /// It says it is not the job's home.
    Elsewhere,
    /// It refused, or answered with something else.
    Refused(String),
}

impl NotHome {
    fn response(self, home: PeerId) -> Response {
        let message = match self {
            NotHome::Silent(why) => format!("the job's home, node {home}, did not answer: {why}"),
            NotHome::Elsewhere => format!("node {home} is not the job's home any more"),
            NotHome::Refused(why) => format!("the job's home, node {home}, refused: {why}"),
        };
        Response::error(ErrorKind::Unreachable, message)
    }
}

/// `request`, passed on to `home`, and its answer.
async fn ask_home(
    overlay: &OverlayHandle,
    home: PeerId,
    request: Request,
) -> Result<Response, NotHome> {
    let request = shrink(request);
    let rpc = PeerRpc::Forward(ForwardRpc::Client(Box::new(request)));
    let call = overlay.request(home, encode(&rpc));
    let answer = match tokio::time::timeout(FORWARD_TIMEOUT, call).await {
        Ok(Ok(bytes)) => decode::<PeerReply>(&bytes),
        Ok(Err(e)) => return Err(NotHome::Silent(e.to_string())),
        Err(_) => {
            return Err(NotHome::Silent(format!(
                "no answer within {} s",
                FORWARD_TIMEOUT.as_secs()
            )));
        }
    };
    match answer {
        Ok(PeerReply::Client(response)) => Ok(*response),
        Ok(PeerReply::Home(_)) => Err(NotHome::Elsewhere),
        Ok(PeerReply::Refused(e)) => Err(NotHome::Refused(e.why)),
        Ok(_) | Err(_) => Err(NotHome::Refused("an answer of another kind".into())),
    }
}

/// Asks at most [`MAX_ASKED`] known peers, nearest first, where `job`'s
/// home is; the first that names one wins.
pub(crate) async fn find_home(overlay: &OverlayHandle, job: u64) -> Option<PeerId> {
    let mut known = overlay.known_peers().await.ok()?;
    known.sort_by_key(|p| (!p.connected, p.rtt.is_none(), p.rtt));
    let mut asks: futures::stream::FuturesUnordered<_> = known
        .into_iter()
        .take(MAX_ASKED)
        .map(|p| {
            let overlay = overlay.clone();
            async move {
                let bytes = overlay
                    .request(
                        p.peer,
                        encode(&PeerRpc::Forward(ForwardRpc::WhereIs { job })),
                    )
                    .await
                    .ok()?;
                match decode::<PeerReply>(&bytes).ok()? {
                    PeerReply::Home(home) => home,
                    _ => None,
                }
            }
        })
        .collect();
    let found = async {
        while let Some(answer) = asks.next().await {
            if answer.is_some() {
                return answer;
            }
        }
        None
    };
    tokio::time::timeout(ASK_TIMEOUT, found)
        .await
        .ok()
        .flatten()
}

/// The request as it is forwarded: pages and blocks cut to what one
/// overlay message carries, and no waiting at the home (this node's
/// connection waits, asking again).
fn shrink(request: Request) -> Request {
    match request {
        Request::OutputBlock {
            job,
            name,
            offset,
            len,
        } => Request::OutputBlock {
            job,
            name,
            offset,
            len: len.min(MAX_FORWARDED_BYTES as u32),
        },
        Request::Logs { job, from, .. } => Request::Logs {
            job,
            from,
            wait_secs: 0,
        },
        request => request,
    }
}

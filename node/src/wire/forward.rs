//! A client's questions about a job, passed between nodes: the node a
//! client asked finds the job's home and hands the question on (see
//! [`crate::forward`]).

use serde::{Deserialize, Serialize};

use crate::protocol::Request;
use crate::validate::{self, Invalid};

/// A request about finding a job's home, or passing a client's question
/// to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum ForwardRpc {
    /// Which node is the home of `job`, if the receiver knows? Answered
    /// with `PeerReply::Home`.
    WhereIs { job: u64 },
    /// A client's request about a job whose home the receiver is, from the
    /// node the client asked. Answered with `PeerReply::Client`; never
    /// forwarded again.
    Client(Box<Request>),
}

impl ForwardRpc {
    /// Only a client's questions about a job (status, logs, outputs,
    /// cancelling, resizing, its owner's nonce) are passed on, each within
    /// the client protocol's maxima.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        match self {
            ForwardRpc::WhereIs { .. } => Ok(()),
            ForwardRpc::Client(request) => match request.as_ref() {
                Request::Challenge { .. } => Ok(()),
                Request::Owner { proof, request } => validate::owner_request(proof, request),
                request => validate::owners_request(request).map_err(|_| Invalid::NotForwardable),
            },
        }
    }
}

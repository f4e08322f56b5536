//! How a command fails: one sentence for the user and the exit code it
//! maps to.

use zorilla_node::client::ClientError;
use zorilla_node::jobspec::SpecError;
use zorilla_node::protocol::ErrorKind;

/// A failure, with the exit code it maps to and one sentence for the user.
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

pub(crate) const EXIT_JOB_FAILED: u8 = 1;
pub(crate) const EXIT_USAGE: u8 = 2;
pub(crate) const EXIT_UNREACHABLE: u8 = 3;
pub(crate) const EXIT_NOT_FOUND: u8 = 4;
pub(crate) const EXIT_REFUSED: u8 = 5;
pub(crate) const EXIT_INTERRUPTED: u8 = 130;

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<SpecError> for Failure {
    fn from(e: SpecError) -> Self {
        Failure::new(EXIT_USAGE, e.to_string())
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Node { kind, message } => {
                let code = match kind {
                    ErrorKind::NotFound => EXIT_NOT_FOUND,
                    ErrorKind::Internal | ErrorKind::Version | ErrorKind::Unreachable => {
                        EXIT_UNREACHABLE
                    }
                    ErrorKind::BadRequest
                    | ErrorKind::Unauthorized
                    | ErrorKind::Busy
                    | ErrorKind::Stale => EXIT_REFUSED,
                };
                let hint = match kind {
                    // A node's token is one thing a node may want; a job's
                    // owner's key is the other (its sentence names it).
                    ErrorKind::Unauthorized
                        if message.contains("token") && !message.contains("user") =>
                    {
                        " (give the node's token with --token or ZORILLA_TOKEN)"
                    }
                    ErrorKind::Version => " (use a zorilla of the same version as the node)",
                    _ => "",
                };
                Failure::new(code, format!("the node says: {message}{hint}"))
            }
            other => Failure::new(
                EXIT_UNREACHABLE,
                format!("lost the connection to the node: {other}"),
            ),
        }
    }
}

pub(crate) type Result<T, E = Failure> = std::result::Result<T, E>;

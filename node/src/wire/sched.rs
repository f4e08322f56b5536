//! Scheduling between nodes: the core's messages (adverts' answers, offers,
//! claims, placements, refusals), and the grant that starts a member's
//! workers, which travels with the job's copy.

use serde::{Deserialize, Serialize};
use zorilla_core::advert::Message;
use zorilla_core::limits;
use zorilla_overlay::PeerId;

use super::job_copy::JobCopy;
use crate::validate::Invalid;

/// A scheduling request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum SchedRpc {
    /// A scheduling message of the core (a grant travels as
    /// [`SchedRpc::Grant`]).
    Message(Message<PeerId>),
    /// Home to member: the core's [`Message::Grant`] (the ranks to start,
    /// their incarnation, the job's whole placement) with the job's copy:
    /// everything the member needs to start its workers, in one message.
    /// Answered with `PeerReply::Granted`.
    Grant {
        grant: Message<PeerId>,
        copy: Box<JobCopy>,
    },
}

impl SchedRpc {
    /// Checks every count, rank and duration against
    /// [`zorilla_core::limits`]; a grant comes with its copy, and a copy
    /// only with a grant.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        match self {
            SchedRpc::Message(Message::Grant { .. }) => Err(Invalid::BareGrant),
            SchedRpc::Message(msg) => Ok(limits::check_message(msg)?),
            SchedRpc::Grant { grant, copy } => {
                if !matches!(grant, Message::Grant { .. }) {
                    return Err(Invalid::CopyWithoutGrant);
                }
                limits::check_message(grant)?;
                copy.check()
            }
        }
    }
}

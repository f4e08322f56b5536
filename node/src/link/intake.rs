//! Taking in one chunk from a peer: whether the addressed worker takes
//! it, and what becomes of the channel's state.

use std::borrow::Cow;
use std::sync::Arc;

use zorilla_core::channel::{ChannelId, Inbound, Received, STRIPE_BYTES};
use zorilla_overlay::PeerId;
use zorilla_overlay::streams::protocol::Refusal;

use super::inbox::{Inbox, JobRoutes, Source};
use super::lock::lock;
use super::peer_inbound::{PeerInbound, RecvChannel};
use crate::wire::job_copy::Placed;

/// Channels one peer may have open towards this node.
const MAX_CHANNELS_PER_PEER: usize = 1 << 16;

/// Whether data on `channel` from `peer` is taken by `inbox` (the
/// receiving rank's worker here), or refused and why. `sender` is given
/// for a channel with no state here yet: where the job places the sending
/// rank, as this node knows it.
pub(super) fn admit(
    channel: ChannelId,
    peer: PeerId,
    inbox: &Inbox,
    sender: Option<Option<Placed>>,
) -> Option<Refusal> {
    let here = inbox.incarnation();
    if here < channel.to_incarnation {
        // The addressed worker has not started here yet.
        return Some(Refusal::NotHere);
    }
    if here > channel.to_incarnation || inbox.is_closed() {
        // The addressed worker is gone (its rank has a newer one).
        return Some(Refusal::Closed);
    }
    // A channel opens only from a worker the job places on the peer: a
    // peer cannot make up senders (each would get a window here).
    match sender {
        None => None,
        Some(Some(p)) if p.node == peer && p.incarnation == channel.from_incarnation => None,
        // A worker its rank no longer has.
        Some(Some(p)) if p.incarnation > channel.from_incarnation => Some(Refusal::Closed),
        // Not placed there, as far as this node knows yet.
        Some(_) => Some(Refusal::NotHere),
    }
}

/// Why a chunk ended its stream.
#[derive(Debug)]
pub(super) enum Fault {
    /// The peer opened a newer stream: this one's rest is stale.
    Superseded,
    /// The peer broke the protocol.
    Violation(String),
    /// A message half received was lost here: the stream ends, so that
    /// the peer sends it again from its start.
    Lost,
}

/// Takes one chunk from `state`'s peer for `job` (if it is here).
pub(super) fn take_chunk(
    state: &Arc<PeerInbound>,
    job: Option<&dyn JobRoutes>,
    generation: u64,
    chunk: zorilla_core::channel::Chunk<'_>,
) -> Result<(), Fault> {
    let channel = chunk.channel;
    let inbox = job.and_then(|job| job.inbox(channel.to));
    let mut forgotten = Vec::new();
    let result = take_chunk_for(
        state,
        job,
        inbox.as_ref(),
        generation,
        chunk,
        &mut forgotten,
    );
    if let Some(inbox) = &inbox
        && !forgotten.is_empty()
    {
        inbox.forget(state, &forgotten);
    }
    result
}

/// [`take_chunk`] for `inbox` (the receiving rank's, if here); the
/// channels to it that a new channel replaced go to `forgotten`.
fn take_chunk_for(
    state: &Arc<PeerInbound>,
    job: Option<&dyn JobRoutes>,
    inbox: Option<&Arc<Inbox>>,
    generation: u64,
    chunk: zorilla_core::channel::Chunk<'_>,
    forgotten: &mut Vec<ChannelId>,
) -> Result<(), Fault> {
    let channel = chunk.channel;
    let peer = state.peer;
    let mut s = lock(&state.state);
    if s.stream != generation {
        return Err(Fault::Superseded);
    }
    let refusal = match inbox {
        None => Some(Refusal::NotHere),
        Some(inbox) => {
            // Who the job places on the peer matters only for a new channel.
            let fresh = !s.channels.contains_key(&channel);
            let placed = job
                .filter(|_| fresh)
                .and_then(|job| job.placed(channel.from));
            admit(channel, peer, inbox, fresh.then_some(placed))
        }
    };
    let expected = s.channels.get(&channel).map_or(0, |c| c.inbound.next());
    if let Some(reason) = refusal {
        // Refused once per attempt: the sender backs off and starts again
        // from the first message not received.
        let attempt = chunk.offset == 0 && chunk.seq == expected;
        if s.refused.insert(channel, reason) != Some(reason) || attempt {
            s.refusals.insert(channel, reason);
            drop(s);
            state.wake.notify_one();
        }
        return Ok(());
    }
    if s.refused.contains_key(&channel) {
        // Until the sender starts again where this side stands, what it
        // sent before it heard of the refusal is dropped.
        if chunk.offset != 0 || chunk.seq != expected {
            return Ok(());
        }
        s.refused.remove(&channel);
    }
    if !s.channels.contains_key(&channel) {
        // A new worker of either rank: the channels of the workers it
        // replaced are over (what they still hold was theirs).
        let replaced = |c: &ChannelId| {
            c.job == channel.job
                && c.from == channel.from
                && c.to == channel.to
                && (c.from_incarnation < channel.from_incarnation
                    || c.to_incarnation < channel.to_incarnation)
        };
        forgotten.extend(
            s.channels
                .keys()
                .filter(|c| replaced(c) && c.to_incarnation == channel.to_incarnation),
        );
        s.channels.retain(|c, _| !replaced(c));
        s.pending.retain(|c| !replaced(c));
        s.refused.retain(|c, _| !replaced(c));
        if s.channels.len() >= MAX_CHANNELS_PER_PEER {
            return Err(Fault::Violation("too many channels".into()));
        }
    }
    let c = s.channels.entry(channel).or_insert_with(|| RecvChannel {
        inbound: Inbound::new(),
        advertised: zorilla_core::channel::INITIAL_WINDOW,
    });
    let (bytes, offset, total) = (chunk.bytes, chunk.offset, chunk.total);
    // A message built in the worker's buffer: its claim there is looked
    // at and changed with the channel's state, under both locks.
    let loan = c.inbound.lent();
    let lent_to = loan.zip(inbox).map(|(_, inbox)| lock(&inbox.state));
    let received = c.inbound.on_chunk_in_place(chunk);
    if let (Some(loan), Some(mut inbox_state)) = (loan, lent_to) {
        match received {
            Ok(Received::Lent { last })
                if !inbox_state.write_lent(state, channel, loan, (offset, bytes, total), last) =>
            {
                // (Cannot happen: see `write_lent`.)
                c.inbound.give_back(loan, |_| None);
                return Err(Fault::Lost);
            }
            Ok(Received::Lent { .. }) => {}
            _ if c.inbound.lent() != Some(loan) => inbox_state.end_loan(state, channel),
            _ => {}
        }
    }
    let wake = match received {
        Err(v) => return Err(Fault::Violation(v.to_string())),
        // Part of a larger message: an ack (unchanged) goes back within
        // the ack delay all the same, so that the sender hears from this
        // node while a large message arrives slowly (a stream silent for
        // `ACK_SILENCE` with messages unacknowledged is taken for broken).
        // If the worker waits with a buffer that holds the message, the
        // rest of it is built there.
        Ok(Received::Partial) => {
            if let Some(inbox) = inbox {
                inbox.lend(state, channel, &mut c.inbound);
            }
            s.owe(channel, false)
        }
        Ok(Received::Lent { last: false }) => s.owe(channel, false),
        Ok(Received::Lent { last: true }) => {
            // Whole in the worker's buffer (acknowledged at once, as any
            // message that may have been striped).
            let wake = s.owe(channel, total >= STRIPE_BYTES);
            drop(s);
            if let Some(inbox) = inbox {
                inbox.written();
            }
            if wake {
                state.wake.notify_one();
            }
            return Ok(());
        }
        Ok(Received::Duplicate) => s.owe(channel, true),
        Ok(Received::Asked { total }) => {
            let start = s
                .channels
                .get(&channel)
                .map_or(0, |c| c.inbound.completed());
            drop(s);
            if let Some(inbox) = inbox {
                inbox.ask(state, channel, start, total);
            }
            return Ok(());
        }
        Ok(received @ (Received::Complete(_) | Received::Whole)) => {
            // A message that may have been striped is acknowledged at
            // once: its channel's next waits for it (a message of one
            // chunk never is).
            let striped =
                matches!(&received, Received::Complete(m) if m.len() as u64 >= STRIPE_BYTES);
            let wake = s.owe(channel, striped);
            drop(s);
            let message = match received {
                Received::Complete(message) => Cow::Owned(message),
                // Straight from the read buffer into the worker's, if it
                // waits with one (else copied into a message of its own).
                _ => Cow::Borrowed(bytes),
            };
            let source = Source::Remote(state.clone(), channel);
            if let Some(inbox) = inbox
                && inbox.push_remote(channel.from, message, source).is_err()
            {
                // The worker ended meanwhile.
                let mut s = lock(&state.state);
                s.refused.insert(channel, Refusal::Closed);
                s.refusals.insert(channel, Refusal::Closed);
                drop(s);
                state.wake.notify_one();
            }
            if wake {
                state.wake.notify_one();
            }
            return Ok(());
        }
    };
    drop(s);
    if wake {
        state.wake.notify_one();
    }
    Ok(())
}

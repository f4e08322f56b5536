//! Exactly-once, in-order, flow-controlled message channels between ranks.
//!
//! A *channel* carries the messages of one rank to another rank of the same
//! job ([`ChannelId`]). Between two nodes, every channel from the one to the
//! other shares one long-lived ordered stream; this module is what runs on
//! either end of it, without IO: the sender's [`Outbox`] (one per peer node)
//! and the receiver's [`Inbound`] (one per channel). The driver (the node)
//! moves bytes, and tells these state machines what happened.
//!
//! # Sequencing
//!
//! Messages of a channel are numbered from 0 (`seq`). A message is cut into
//! chunks of at most [`CHUNK_BYTES`] that carry `(seq, offset, total)`. The
//! receiver accepts only chunks of the next message it expects; a message
//! with a smaller number is a duplicate and is dropped, one with a larger
//! number a violation. It acknowledges cumulatively: "every message before
//! `next` arrived". The sender keeps each message until it is
//! acknowledged; when the stream breaks, [`Outbox::rewind`] sends every
//! unacknowledged message again from its first byte on the next stream,
//! and the receiver drops the half-built copy it had. So each message is
//! delivered exactly once and in order, across any number of
//! reconnections.
//!
//! # Striping
//!
//! Where the driver has *lanes* (further connections beside the stream,
//! see the node's `link` module) it turns striping on
//! ([`Outbox::set_striping`]): a message of at least [`STRIPE_BYTES`],
//! pushed onto a channel with nothing unacknowledged, is then cut at
//! multiples of [`CHUNK_BYTES`] into whole chunks, which go
//! on the lanes only, each to whichever lane's writer asks first
//! ([`Outbox::next_lane`]; the stream keeps carrying everything else, so
//! small messages never wait behind them). Chunks may then arrive out of
//! order, so a striped message is *alone* on its
//! channel: nothing before it is unacknowledged when it is pushed (a large
//! message pushed behind others goes on the stream instead, at once,
//! rather than wait for their acknowledgement), and nothing after it goes
//! until it is acknowledged (the receiver acknowledges a large message at
//! once). The receiver
//! therefore only ever sees chunks of the one message it expects out of
//! order, never a later message's: it takes a chunk of that message at
//! any offset at or below what arrived in order (its new bytes), or, ahead
//! of it, a whole chunk (or the last) at a multiple of [`CHUNK_BYTES`],
//! kept apart until the bytes before it arrive. A chunk it has already
//! (from a lane of a connection that broke) carries the same bytes,
//! because a channel's message `seq` is always the same message: it is
//! dropped. The credit is checked on whichever chunk of a message comes
//! first. So the argument above holds: a message completes only when
//! every byte of it arrived, once, and the next cannot start before.
//!
//! What it costs: what follows a striped message on its channel waits a
//! round trip for its acknowledgement, small beside the transfer of a MiB
//! or more; and the chunks that arrive ahead are copied once more (into their own
//! buffer, then into the message). Memory stays proportional to what
//! arrived: the in-order part grows by doubling (at most twice what it
//! holds, never past the message's length), chunks ahead hold exactly
//! their bytes, and nothing is allocated for what did not arrive.
//!
//! # Credit
//!
//! Positions count a channel's messages from its start, each message as its
//! [`footprint`]: its bytes plus [`MESSAGE_OVERHEAD`], so that empty
//! messages cost credit too (else a sender could queue any number of them
//! at a rank that never reads). The receiver lets a channel's sender send
//! up to a *limit*, a position carried in every [`Ack`] that never goes
//! down: a limit granted cannot be taken back. The sender may start a
//! message that ends within the limit. Every new channel starts with the
//! limit [`INITIAL_WINDOW`], which the sender assumes before any ack, so
//! small messages go without a round trip. After that the receiver raises
//! the limit to `consumed + window` as its worker reads, where the
//! channel's *window* is what the receiving rank lends it (below).
//!
//! A sender that must wait for credit while everything it sent is
//! acknowledged *asks*: it sends the first chunk of its next message
//! without bytes, which carries the message's length ([`Outbox::ask`],
//! [`Received::Asked`]). The receiver checks the limit on every first chunk
//! ([`Violation::NoCredit`]), so a channel never holds more than its limit
//! minus what the worker read, and the retransmission buffer of the sender
//! is bounded the same way. Credit is per channel, so a slow reader stalls
//! only its own senders; the stream never waits for a reader (its data has
//! been granted room already), so there is no head-of-line blocking between
//! jobs or ranks sharing it. Chunks of different channels are interleaved
//! round robin, so a 64 MiB message does not hold up a small one of another
//! channel for more than one chunk.
//!
//! # What a receiving rank holds
//!
//! Every channel to one rank (from workers on other nodes and on its own)
//! is lent credit by one [`RankReceiver`], the rank's receive policy:
//!
//! - Each channel has at least [`INITIAL_WINDOW`] (the sender assumes it).
//! - The rank lends larger windows, up to [`MAX_WINDOW`] each, from a
//!   budget ([`RANK_BUDGET`]) shared by all of its channels, to a channel
//!   whose sender asks for a message larger than its window: the window
//!   becomes twice the message (or twice the old window), so that such
//!   messages stream, or the message alone if the budget is short. An ask
//!   for a message that fits the window once the worker reads what it holds
//!   needs nothing: reading raises the limit.
//! - What the budget cannot cover (a message above [`MAX_WINDOW`], up to
//!   [`MAX_MESSAGE_BYTES`], or any when the budget is lent out) waits in
//!   order, and the rank grants such messages one at a time, beyond the
//!   budget, the next once the worker has read the last.
//! - While askers wait, every channel the worker reads gives back half of
//!   its window (not below [`INITIAL_WINDOW`]), so the budget moves to the
//!   waiting channels, oldest first: every sender progresses.
//!
//! A limit granted cannot be taken back, so a window lent counts against
//! the budget until the worker has read up to the limit it allowed. So a
//! receiving rank holds at most [`RANK_BUDGET`] + `channels` ×
//! [`INITIAL_WINDOW`] + one granted message ([`MAX_MESSAGE_BYTES`]), where
//! `channels` is the number of workers sending to it (at most
//! [`crate::limits::MAX_WORKERS`]): 16 MiB + 10,000 × 16 KiB + 64 MiB, about
//! 236 MiB, for the largest job, and about 96 MiB for a job of a thousand
//! ranks, whatever they send ([`RankReceiver::bound`]).
//!
//! Why so:
//!
//! - The initial window is what a sender may send to a rank it never
//!   heard from, so it is the one part of the bound that grows with the
//!   number of senders. It is small (16 KiB covers the eager messages of
//!   MPI programs: collectives of a few values, halo rows, control), and
//!   no smaller because every message above it waits a round trip on a
//!   channel's first use. A bound independent of the senders altogether
//!   would need the receiver to drop first messages beyond a pool and
//!   have them sent again later, delaying exactly the small messages that
//!   must be fast.
//! - A sender asks only when everything it sent is acknowledged: before
//!   that, an ack on its way may bring the credit, and the ask would be
//!   noise. The receiver keeps an ask until its credit covers it, so one
//!   ask per message suffices (and one per new stream).
//! - Windows rather than one grant per message: a channel that sends
//!   messages of a MiB keeps a window of two of them, so they stream
//!   without a round trip each; the budget caps what all such windows
//!   take together. A window lent to a sender that then goes quiet stays
//!   counted until that sender uses it (it is lent only to a sender that
//!   asked, so about to use it); meanwhile others still progress through
//!   the grant beyond the budget.
//! - The grant beyond the budget serves the messages no window can (up to
//!   64 MiB) and guarantees progress when the budget is lent out: it goes
//!   to the oldest asker and frees once the worker read that message, so
//!   a worker that reads (in any order of arrival) never deadlocks its
//!   senders. A sender that asks and then never sends the granted message
//!   (a `send` that timed out) keeps the grant until the worker has read
//!   that far of its channel: the rank's other large messages wait until
//!   then (only its own job's ranks can do that to it).
//!
//! # Driving contract
//!
//! Sender: [`Outbox::admits`] says whether a message may be queued now;
//! [`Outbox::push`] queues it; [`Outbox::next_chunk`] gives the next chunk
//! to write (round robin over channels; [`Outbox::next_shared`] the same
//! sharing its message, so that it can be written without the outbox);
//! [`Outbox::next_lane`] a chunk for a lane (with
//! [`Outbox::set_striping`] on); [`Outbox::on_ack`] takes an ack from the
//! peer; [`Outbox::rewind`] after the stream (and its lanes) was lost.
//! Receiver: [`Inbound::on_chunk`] for each chunk read;
//! [`Inbound::lend`] when the driver has a place for the message being
//! built (the waiting worker's memory: its further chunks are
//! [`Received::Lent`], written there by the driver) and
//! [`Inbound::give_back`] when it takes that place back before the message
//! is whole; [`Inbound::consumed`] when the worker takes a message;
//! [`Inbound::ack`] for the ack to send; [`Inbound::stream_lost`] when the
//! stream it came on ended. The receiving rank's [`RankReceiver`] is told
//! of asks ([`RankReceiver::asked`]) and reads
//! ([`RankReceiver::consumed`]) and answers with the channels whose credit
//! rose: the driver raises their [`Inbound::raise_limit`] to
//! [`RankReceiver::credit`] and acknowledges them.

mod chunk;
mod inbound;
mod outbox;
mod rank;
#[cfg(test)]
mod tests;

pub use chunk::{
    Ack, CHUNK_BYTES, ChannelId, Chunk, INITIAL_WINDOW, MAX_MESSAGE_BYTES, MAX_WINDOW,
    MESSAGE_OVERHEAD, RANK_BUDGET, STRIPE_BYTES, Violation, footprint,
};
pub use inbound::{Inbound, Received};
pub use outbox::{Admission, Outbox, SharedChunk};
pub use rank::RankReceiver;

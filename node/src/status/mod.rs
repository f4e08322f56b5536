//! What the node shows on its status page (`zorilla-webui`), and the remote
//! view's answers to peers.
//!
//! The web server never calls into the event loop, and the loop never waits
//! for the web server:
//! - the loop owns a [`Publisher`]. After an event that may change what the
//!   pages show it marks the publisher ([`Publisher::touch`],
//!   [`Publisher::note_rpc`]); at most every
//!   [`PUBLISH_EVERY`](publish::PUBLISH_EVERY) it then builds a fresh view
//!   of its jobs, workers, pending adverts and resources in use
//!   ([`Publisher::publish`]) and swaps it in. Rank-to-rank messages and
//!   file blocks, the chatty part of its traffic, change nothing shown and
//!   mark nothing.
//! - a poller task ([`poll_overlay`]) asks the overlay every
//!   [`POLL_EVERY`](poll::POLL_EVERY) for its peers, RTTs, listen addresses
//!   and counters.
//! - [`NodeStatus`], shared with the web server, answers every
//!   `StatusSource` call from the latest of both. Log tails come from the
//!   database (redb readers do not wait for the loop's writes).
//! - Which pages changed is found by comparing each new view with the one
//!   before; the changes go out on a bounded broadcast channel. A log chunk
//!   arriving announces its job's page (at most every `PUBLISH_EVERY` too).
//!
//! The grid view: [`NodeStatus`]'s `StatusSource::summary` is what this
//! node says about itself (its site, cores, and the jobs it runs workers
//! of), and `StatusSource::remote_summary` asks a peer for its own with a
//! [`ViewRpc::Summary`](crate::wire::view::ViewRpc::Summary); the web interface
//! bounds how many peers it asks and how often (`zorilla_webui::grid`).
//!
//! Remote views: [`NodeStatus`]'s `StatusSource::remote` and
//! `StatusSource::remote_job` send the peer a
//! [`ViewRpc::Node`](crate::wire::view::ViewRpc::Node) or
//! [`ViewRpc::Job`](crate::wire::view::ViewRpc::Job) and wait at most
//! [`REMOTE_TIMEOUT`](remote::REMOTE_TIMEOUT). The peer's loop hands such a
//! request to [`answer`] off the loop; the answer is cut to
//! [`MAX_REPLY_BYTES`](remote::MAX_REPLY_BYTES) (the overlay refuses frames
//! over 1 MiB).
//!
//! Parts:
//! - [`source`]: [`NodeStatus`], what the web server reads;
//! - [`publish`]: [`Publisher`], the loop's side;
//! - [`poll`]: [`poll_overlay`], the overlay poller;
//! - [`view`]: the published views and what differs between two of them;
//! - [`convert`]: the node's records, phases and log chunks as the page's
//!   model;
//! - [`remote`]: remote views, asking and answering;
//! - [`wire_view`]: the page's model as the wire's remote-view types and
//!   back.

mod convert;
mod poll;
mod publish;
mod remote;
mod source;
mod view;
mod wire_view;

pub(crate) use poll::poll_overlay;
pub(crate) use publish::{LoopState, MAX_JOBS, Member, Publisher};
pub(crate) use source::{NodeStatus, answer};

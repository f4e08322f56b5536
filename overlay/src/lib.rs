//! The libp2p overlay of Zorilla: transport, discovery, RTT measurement,
//! locality-aware neighbours and the flood and rpc protocols.
//!
//! Every decision is the core's ([`zorilla_core`]): which peers are
//! neighbours, probed, kept, closed and banned, and what peer exchange
//! tells ([`PeerKeeper`](zorilla_core::neighbours::keeper::PeerKeeper)),
//! and whether and where a flood copy goes
//! ([`FloodRouter`](zorilla_core::flood::FloodRouter)). This crate does the
//! IO around them: it feeds the keeper libp2p's events (connections,
//! identify, ping RTTs, peer exchange, bad frames) and executes its actions
//! (dial, close, ban, link announcements), and runs every flood copy it
//! receives through the router.
//!
//! The parts:
//! - [`overlay`]: [`Overlay::start`] and the [`OverlayHandle`] / [`Event`]
//!   API the node uses; the event loop behind it.
//! - [`config`]: the [`OverlayConfig`] with its defaults.
//! - [`identity`]: the persistent ed25519 identity.
//! - [`addrs`]: which addresses of a peer are true for whom (no loopback
//!   address kept for, or passed on to, a node on another host), and what
//!   the node believes of its own (observed ones confirmed before use).
//! - [`latency`]: emulated latency between sites on one machine.
//! - [`membership`]: closed grids: grid keys, membership credentials,
//!   revocations, and the gate that checks a peer's credential before any
//!   other protocol reaches it.
//! - [`streams`]: long-lived raw streams between nodes for the messages
//!   between workers (`/zorilla/<network>/ranks/5`), and their frames.
//! - [`direct`]: the rank data plane, direct TLS connections (AES-GCM)
//!   authenticated by the nodes' libp2p identities, which carry the same
//!   frames when they can be made.
//! - `wire`: the CBOR frames of `/zorilla/<network>/flood/1` and
//!   `/zorilla/<network>/rpc/4` and their size-capped codec.
//! - [`cbor`]: the check of CBOR from outside before it is decoded (no
//!   header may declare more than the input could hold).
//! - `fuzz` (hidden): entry points for the fuzz harness, not an API.
//!
//! Transport: TCP, noise, yamux; QUIC beside it if configured
//! (`OverlayConfig::quic`) and built in (cargo feature `quic`, on by
//! default; see [`QUIC_SUPPORTED`]); circuit relay v2 for nodes behind NATs, with
//! AutoNAT v2 (is this node reachable?), DCUtR hole punching and UPnP
//! ([`config::NatConfig`]; the event loop's `nat` module). Joining:
//! bootstrap addresses, mDNS (on by default), and peer exchange over the
//! rpc protocol. In a closed grid ([`OverlayConfig::grid`]) a peer must
//! first show a membership credential ([`membership`]). Separate grids never
//! mix: the network name is part of every protocol name and of identify's
//! protocol version, and peers announcing another one are disconnected and
//! refused.

//!
//! # Use
//!
//! ```no_run
//! use zorilla_core::advert::{FloodHeader, JobId};
//! use zorilla_core::flood::FloodId;
//! use zorilla_overlay::{Event, Overlay, OverlayConfig};
//!
//! # async fn node() -> Result<(), Box<dyn std::error::Error>> {
//! let config = OverlayConfig {
//!     network: "physics-lab".into(),
//!     state_dir: Some("/var/lib/zorilla".into()),
//!     bootstrap: vec!["/ip4/192.0.2.7/tcp/4001".parse()?],
//!     ..OverlayConfig::default()
//! };
//! let (overlay, mut events) = Overlay::start(config).await?;
//!
//! // Flood an advert (the node's own CBOR) over 3 hops.
//! let id = FloodId { job: JobId(42), seq: 0 };
//! let header = FloodHeader { seq: 0, ttl: 3, latency_budget: None, path_rtt: Default::default() };
//! overlay.flood(id, header, b"advert".to_vec()).await?;
//!
//! // The node must keep draining its events.
//! while let Some(event) = events.recv().await {
//!     match event {
//!         Event::Flood { origin, payload, distance, .. } => {
//!             // Decode the advert; answer its home `origin` directly:
//!             let _answer = overlay.request(origin, payload).await;
//!             let _ = distance;
//!         }
//!         Event::Request { payload, responder, .. } => {
//!             overlay.respond(responder, payload).await?;
//!         }
//!         _ => {}
//!     }
//! }
//! # Ok(())
//! # }
//! ```

pub mod addrs;
pub mod cbor;
pub mod config;
pub mod direct;
#[doc(hidden)]
pub mod fuzz;
pub mod identity;
pub mod latency;
pub mod membership;
pub mod overlay;
pub mod streams;
mod wire;

pub use config::{ConfigError, OverlayConfig, QUIC_SUPPORTED};
pub use direct::{DirectPlane, DirectStream};
pub use latency::{LatencyEmulation, SharedTopology, Topology};
pub use libp2p::{Multiaddr, PeerId};
pub use overlay::{
    Event, KnownPeer, Neighbour, Overlay, OverlayError, OverlayHandle, OverlayStats, RequestError,
    Responder,
};
pub use streams::{PeerStream, StreamError};

//! The overlay poller: reads the overlay's peers, listen addresses and
//! counters every [`POLL_EVERY`] into the status, announcing changes.

use std::sync::Arc;
use std::time::Duration;

use zorilla_core::neighbours::LinkKind as CoreLink;
use zorilla_webui::Change;
use zorilla_webui::model::{AddressInfo, LinkKind, PeerInfo};

use super::source::NodeStatus;
use super::view::{NetView, coordinates};

/// The overlay's peers and counters are read this often (RTTs change
/// continually; the peers page follows them at this pace at most).
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(200);
/// Peers listed.
pub(super) const MAX_PEERS: usize = 1000;
/// Own addresses listed (the overlay bounds them already: interfaces
/// plus a few observed).
const MAX_ADDRESSES: usize = 64;

/// Reads the overlay's peers, addresses and counters every [`POLL_EVERY`]
/// into `status`, announcing changes, until the overlay stops.
pub(crate) async fn poll_overlay(status: Arc<NodeStatus>) {
    let overlay = status.overlay.clone();
    let mut tick = tokio::time::interval(POLL_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (Ok(known), Ok(listen), Ok(own), Ok(stats), Ok(position)) = (
            overlay.known_peers().await,
            overlay.listen_addrs().await,
            overlay.own_addrs().await,
            overlay.stats().await,
            overlay.position().await,
        ) else {
            return; // The overlay stopped.
        };
        let mut peers: Vec<PeerInfo> = known
            .into_iter()
            .map(|p| PeerInfo {
                peer_id: p.peer.to_string(),
                name: None,
                rtt_ms: p.rtt.map(|d| d.as_secs_f64() * 1e3),
                link: match p.kind {
                    Some(CoreLink::Near) => LinkKind::Near,
                    Some(CoreLink::Far) => LinkKind::Far,
                    None => LinkKind::None,
                },
                connected: p.connected,
                coordinates: p.coord.as_ref().map(coordinates),
            })
            .collect();
        // Neighbours first, nearest first.
        peers.sort_by(PeerInfo::display_order);
        peers.truncate(MAX_PEERS);
        let view = NetView {
            peers,
            listen: listen.iter().map(|a| a.to_string()).collect(),
            addresses: own
                .into_iter()
                .take(MAX_ADDRESSES)
                .map(|a| AddressInfo {
                    address: a.addr.to_string(),
                    reachable: a.reach.reachable_from_other_hosts(),
                    why: a.reach.why(a.origin),
                })
                .collect(),
            stats,
            position: Some(position),
        };
        let old = status.net.borrow().clone();
        if old.peers != view.peers {
            status.announce(Change::Peers);
        }
        // Our coordinate moves a little with every RTT sample: shown when
        // the page is next drawn, never announced by itself.
        if old.listen != view.listen || old.addresses != view.addresses {
            status.announce(Change::Node);
        }
        status.net.send_replace(Arc::new(view));
    }
}

//! What a simulated node's overlay is: the real peer keeping, or the
//! paper's links (their upkeep is in [`super::peers`]).

use std::collections::BTreeMap;
use std::time::Duration;

use zorilla_core::neighbours::keeper::PeerKeeper;

/// What a simulated node's overlay is.
pub(crate) enum NodeOverlay {
    /// The real peer keeping; connections are numbered by the simulator.
    Ours(Box<PeerKeeper<u32, u64>>),
    /// The paper's overlay: the RTTs the node measured (the minimum of its
    /// samples); the links are built by the simulator.
    Paper(BTreeMap<u32, Duration>),
}

impl NodeOverlay {
    /// The node's measured RTT to `peer`.
    pub(crate) fn rtt(&self, peer: &u32) -> Option<Duration> {
        match self {
            NodeOverlay::Ours(keeper) => keeper.table().rtt(peer),
            NodeOverlay::Paper(rtts) => rtts.get(peer).copied(),
        }
    }
}

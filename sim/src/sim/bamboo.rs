//! The paper's overlay: RTTs measured by the nodes, and the Bamboo-like
//! links built from them.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use rand::seq::IndexedRandom;

use super::Sim;
use super::node_overlay::NodeOverlay;

impl Sim {
    /// The paper's node's RTT to `peer`, measuring it first if it never
    /// did.
    pub(super) fn measured_rtt(&mut self, node: u32, peer: u32) -> Duration {
        if self.nodes[node as usize].overlay.rtt(&peer).is_none() {
            self.measure(node, peer);
        }
        self.nodes[node as usize]
            .overlay
            .rtt(&peer)
            .unwrap_or(Duration::MAX)
    }

    /// The paper's node measures `peer`: the minimum of a few samples.
    fn measure(&mut self, node: u32, peer: u32) {
        for _ in 0..self.scenario.overlay.samples.max(1) {
            let rtt = self.sample(node, peer);
            if let NodeOverlay::Paper(rtts) = &mut self.nodes[node as usize].overlay {
                let best = rtts.entry(peer).or_insert(rtt);
                *best = (*best).min(rtt);
            }
        }
    }

    /// The paper's overlay, after Bamboo: random 64-bit ids; a leaf set of
    /// the id-adjacent nodes (random with respect to location), and a
    /// routing table whose every entry is the nearest of a few measured
    /// candidates with the right id prefix (proximity neighbour selection):
    /// `baseline_rows` rows (by default all) of digits of
    /// `baseline_digit_bits` bits (binary by default).
    pub(super) fn build_overlay_bamboo(&mut self) {
        let n = self.grid.len();
        let ids: Vec<u64> = (0..n).map(|_| self.rng.random()).collect();
        let mut ring: Vec<u32> = (0..n as u32).collect();
        ring.sort_by_key(|i| ids[*i as usize]);
        let position: BTreeMap<u32, usize> =
            ring.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let leaves = self.scenario.overlay.baseline_leaves / 2;
        let candidates = self.scenario.overlay.baseline_candidates;
        let bits = self.scenario.overlay.baseline_digit_bits;
        let rows = self.scenario.overlay.baseline_rows.unwrap_or(64 / bits);
        // The first `rows` digits of an id, as a prefix per length.
        let prefix = |id: u64, digits: u32| id.checked_shr(64 - bits * digits).unwrap_or(0);
        let mut by_prefix: BTreeMap<(u32, u64), Vec<u32>> = BTreeMap::new();
        for node in 0..n as u32 {
            let id = ids[node as usize];
            for digits in 1..=rows {
                by_prefix
                    .entry((digits, prefix(id, digits)))
                    .or_default()
                    .push(node);
            }
        }
        for node in 0..n as u32 {
            let id = ids[node as usize];
            let mut chosen: Vec<u32> = Vec::new();
            let at = position[&node];
            for k in 1..=leaves {
                chosen.push(ring[(at + k) % n]);
                chosen.push(ring[(at + n - k % n) % n]);
            }
            for row in 0..rows {
                let own_prefix = prefix(id, row);
                for digit in 0..1u64 << bits {
                    let entry = (own_prefix << bits) | digit;
                    if entry == prefix(id, row + 1) {
                        continue;
                    }
                    let Some(bucket) = by_prefix.get(&(row + 1, entry)) else {
                        continue;
                    };
                    let sample: Vec<u32> = bucket
                        .choose_multiple(&mut self.rng, candidates)
                        .copied()
                        .collect();
                    let mut best: Option<(Duration, u32)> = None;
                    for peer in sample {
                        self.measure(node, peer);
                        let rtt = self.nodes[node as usize]
                            .overlay
                            .rtt(&peer)
                            .unwrap_or(Duration::MAX);
                        if best.is_none_or(|(b, _)| rtt < b) {
                            best = Some((rtt, peer));
                        }
                    }
                    if let Some((_, peer)) = best {
                        chosen.push(peer);
                    }
                }
            }
            chosen.sort_unstable();
            chosen.dedup();
            chosen.retain(|p| *p != node);
            let mut neighbours = Vec::with_capacity(chosen.len());
            for peer in chosen {
                let rtt = self.measured_rtt(node, peer);
                neighbours.push((peer, rtt));
            }
            self.nodes[node as usize].neighbours = neighbours;
            self.tell_links(node);
        }
    }
}

//! Churn: a node fails, its peers detect the failure, and it rejoins with
//! a fresh state.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::seq::IndexedRandom;
use zorilla_core::Time;
use zorilla_core::advert::JobId;

use super::failover::MachineInput;
use super::mode::Mode;
use super::node_overlay::NodeOverlay;
use super::{Event, RunEnd, Sim};

impl Sim {
    /// Fails `node` at `at`, as the scenario's churn would (its detection
    /// and rejoin follow the scenario's `[churn]` times, if it has any).
    pub fn fail_at(&mut self, node: u32, at: Time) {
        self.push(at, Event::Fail { node });
    }

    pub(super) fn fail(&mut self, node: u32) {
        if !self.nodes[node as usize].alive {
            return;
        }
        self.nodes[node as usize].alive = false;
        self.up[node as usize] = false;
        self.watch_silent(node);
        self.failover_fail(node);
        let jobs: Vec<(JobId, Vec<u32>)> = self
            .running
            .range((node, JobId(0))..=(node, JobId(u64::MAX)))
            .map(|((_, job), ranks)| (*job, ranks.keys().copied().collect()))
            .collect();
        for (job, ranks) in jobs {
            self.running.remove(&(node, job));
            self.workers_gone(node, job, &ranks, None, RunEnd::Stopped);
        }
        if let Some(churn) = &self.scenario.churn {
            let detect = self.now + Duration::from_secs_f64(churn.detect_after_s);
            let rejoin = self.now + Duration::from_secs_f64(churn.rejoin_after_s);
            self.push(detect, Event::Detect { node });
            self.push(rejoin.max(detect), Event::Rejoin { node });
        }
    }

    /// Peers notice a failure: those linked to the node (overlay) and those
    /// sharing a job with it (direct connections).
    pub(super) fn detect(&mut self, failed: u32) {
        // Nodes with a direct connection to the failed one through a job:
        // homes of jobs it ran workers for, and nodes running workers of
        // jobs it was home to.
        let mut partners = BTreeSet::new();
        for r in self.jobs.values() {
            if r.placement.contains_key(&failed) {
                partners.insert(r.home);
            }
        }
        for (node, job) in self.running.keys() {
            if self.jobs.get(job).is_some_and(|r| r.home == failed) {
                partners.insert(*node);
            }
        }
        // Ours: the connections to it close, and each keeper acts on that
        // (a neighbour is redialed, which fails, and replaced). The paper's:
        // the nodes that measured it drop it from their links.
        let knowers: BTreeSet<u32> = self.connections_fail(failed).into_iter().collect();
        // Nodes that share a job's replica with it probe it, as a node
        // does, and find it gone.
        if self.failover.is_some() {
            partners.extend(
                self.nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| n.alive && n.machine.shares_replica_with(&failed))
                    .map(|(i, _)| i as u32),
            );
        }
        // Only they and the partners hear of it, in node order.
        let told: BTreeSet<u32> = knowers.union(&partners).copied().collect();
        for node in told {
            if node == failed || !self.nodes[node as usize].alive {
                continue;
            }
            let knows = knowers.contains(&node);
            if knows {
                let n = &mut self.nodes[node as usize];
                n.router.peer_lost(&failed);
                if let NodeOverlay::Paper(rtts) = &mut n.overlay {
                    rtts.remove(&failed);
                    n.neighbours.retain(|(p, _)| *p != failed);
                    self.tell_links(node);
                }
            }
            if knows || partners.contains(&node) {
                self.feed_machine(node, MachineInput::PeerDead(failed));
            }
        }
        let lost: Vec<JobId> = self
            .jobs
            .values()
            .filter(|r| r.placement.contains_key(&failed))
            .map(|r| r.id)
            .collect();
        for job in lost {
            if let Some(r) = self.jobs.get_mut(&job) {
                r.placement.remove(&failed);
            }
        }
    }

    pub(super) fn rejoin(&mut self, node: u32) {
        if self.nodes[node as usize].alive {
            return;
        }
        let fresh = self.fresh_node(node, None);
        self.nodes[node as usize] = fresh;
        self.up[node as usize] = true;
        let alive: Vec<u32> = (0..self.nodes.len() as u32)
            .filter(|n| self.nodes[*n as usize].alive)
            .collect();
        match self.mode {
            Mode::Ours | Mode::OursHop | Mode::OursNearest | Mode::OursFcfs => {
                self.rejoin_ours(node, &alive)
            }
            Mode::Paper => {
                // A Bamboo node joins with a random set of measured peers.
                let count = self.scenario.overlay.baseline_leaves + 16;
                let picks: Vec<u32> = alive
                    .choose_multiple(&mut self.rng, count)
                    .copied()
                    .collect();
                let mut neighbours = Vec::new();
                for peer in picks.into_iter().filter(|p| *p != node) {
                    let rtt = self.measured_rtt(node, peer);
                    neighbours.push((peer, rtt));
                    let back = self.sample(peer, node);
                    self.nodes[peer as usize].neighbours.push((node, back));
                    self.tell_links(peer);
                }
                self.nodes[node as usize].neighbours = neighbours;
                self.tell_links(node);
            }
        }
    }
}

//! The loop's side of other nodes: overlay events, probes of peers that
//! may be gone, sending requests, and the door of peers' requests (checked
//! when decoded, then handed by concern to the part of the node that owns
//! it: [`crate::wire`] has one file per concern, and so, mostly, does this
//! module's parent).

use std::time::Duration;

use zorilla_core::advert::Advert;
use zorilla_core::machine;
use zorilla_core::node::Input;
use zorilla_overlay::{Event, PeerId};

use super::{Done, Node, PROBE_PAUSES, Reply};
use crate::status;
use crate::store::Append;
use crate::wire::replica::ReplicaRpc;
use crate::wire::view::ViewRpc;
use crate::wire::{PeerReply, PeerRpc, RefusalKind, decode, encode};

impl Node {
    pub(super) fn overlay_event(&mut self, event: Event) {
        match event {
            Event::Flood {
                header,
                payload,
                distance,
                from,
                origin,
                ..
            } => match decode::<Advert<PeerId>>(&payload) {
                Ok(mut advert) => {
                    advert.flood = header;
                    // Out-of-range values are refused here, before they
                    // reach the scheduler (see `zorilla_core::limits`).
                    // No strike: the neighbour that forwarded the copy is
                    // not its author (the overlay forwards before the node
                    // reads it).
                    if let Err(e) = zorilla_core::limits::check_advert(&advert) {
                        tracing::warn!(%origin, via = %from, "advert refused: {e}");
                        return;
                    }
                    // Held or declined, the pending queue may change.
                    self.status.touch();
                    self.feed_sched(Input::AdvertDelivered { advert, distance });
                }
                Err(e) => tracing::debug!("undecodable advert: {e}"),
            },
            Event::Request {
                peer,
                payload,
                responder,
                rtt,
            } => match decode::<PeerRpc>(&payload) {
                Ok(rpc) => match rpc.check() {
                    Ok(()) => self.rpc(peer, rpc, Reply::Overlay(responder), rtt),
                    Err(e) => {
                        tracing::warn!(%peer, "request refused: {e}");
                        self.overlay
                            .report_misbehaviour(peer, format!("request refused: {e}"));
                        self.reply(
                            Reply::Overlay(responder),
                            PeerReply::refused(RefusalKind::Malformed, e.to_string()),
                        );
                    }
                },
                Err(e) => self.reply(
                    Reply::Overlay(responder),
                    PeerReply::refused(RefusalKind::Malformed, format!("malformed request: {e}")),
                ),
            },
            Event::PeerLost { peer } => self.maybe_probe(peer),
            Event::NeighboursChanged { added, removed } => {
                for peer in removed {
                    self.neighbours.remove(&peer);
                }
                self.neighbours.extend(added);
                self.checkpoint_neighbours();
                let near = self.neighbours.iter().map(|p| (*p, None)).collect();
                self.feed(machine::Input::Neighbours(near));
            }
            // A closed grid's member: who vouches for it keeps the runs of
            // a replicated job apart (see `zorilla_core::runs`).
            Event::Member { peer, vouched_by } => {
                self.feed(machine::Input::Owner {
                    node: peer,
                    owner: vouched_by,
                });
            }
            Event::PeerConnected { .. } | Event::Listening { .. } => {}
        }
    }

    /// The overlay closes connections it does not need, so a lost
    /// connection is not a lost peer: peers we have jobs with are probed,
    /// and only a failed probe counts.
    pub(super) fn maybe_probe(&mut self, peer: PeerId) {
        // Copies of the same job too: whether a copy is gone decides
        // whether the others are a majority after the home's death.
        let involved = self.runs_ours(&peer)
            || self.members.runs_for(&peer)
            || self.shares_replica_with(&peer);
        if !involved || !self.probing.insert(peer) {
            return;
        }
        let net = self.net.clone();
        self.tasks.spawn(async move {
            // Spaced out, so that a node that is only slow (its cores busy
            // with workers, its event loop starved) gets seconds to answer
            // rather than two quick tries; a dead one is declared after
            // the pauses plus the timeouts.
            if net.call(peer, PeerRpc::Ping).await.is_ok() {
                return Done::Nothing;
            }
            for pause in PROBE_PAUSES {
                tokio::time::sleep(pause).await;
                if net.call(peer, PeerRpc::Ping).await.is_ok() {
                    return Done::Nothing;
                }
            }
            Done::PeerDead(peer)
        });
    }

    /// Answers `to` with `reply`.
    pub(super) fn reply(&mut self, to: Reply, reply: PeerReply) {
        match to {
            Reply::Local(tx) => {
                let _ = tx.send(reply);
            }
            to => self.answer_later(to, async move { reply }),
        }
    }

    /// Answers `to` with what `answer` makes, off the loop, as one of the
    /// node's [`Answers`] (unanswered beyond their bound: the asker's call
    /// fails).
    pub(super) fn answer_later(
        &mut self,
        to: Reply,
        answer: impl std::future::Future<Output = PeerReply> + Send + 'static,
    ) {
        let overlay = self.overlay.clone();
        let run = self.answers.spawn(async move {
            let answer = answer.await;
            match to {
                Reply::Local(tx) => {
                    let _ = tx.send(answer);
                }
                Reply::Overlay(r) => {
                    let _ = overlay.respond(r, encode(&answer)).await;
                }
            }
        });
        if !run && self.answers.dropped().is_power_of_two() {
            tracing::warn!(
                "{} answers under way: a request goes unanswered ({} so far)",
                self.answers.under_way(),
                self.answers.dropped()
            );
        }
    }

    /// Sends `rpc`; an answer that says which run of the node took a
    /// grant goes to liveness (see
    /// [`zorilla_core::liveness::RankLiveness::booted`]).
    pub(super) fn send(&mut self, to: PeerId, rpc: PeerRpc) {
        self.messages_sent += 1;
        let net = self.net.clone();
        self.tasks.spawn(async move {
            match net.call(to, rpc).await {
                Ok(PeerReply::Granted { boot }) => Done::Granted { peer: to, boot },
                Ok(_) => Done::Nothing,
                Err(e) => {
                    tracing::debug!(peer = %to, "send failed: {e}");
                    Done::Nothing
                }
            }
        });
    }

    /// Sends `rpc` to `to` after `delay` (see [`super::TEST_REPLICA_DELAY`]).
    pub(super) fn send_late(&mut self, to: PeerId, rpc: PeerRpc, delay: Duration) {
        self.messages_sent += 1;
        let net = self.net.clone();
        self.tasks.spawn(async move {
            tokio::time::sleep(delay).await;
            if let Err(e) = net.call(to, rpc).await {
                tracing::debug!(peer = %to, "send failed: {e}");
            }
            Done::Nothing
        });
    }

    /// Answers a peer's request, checked when it was decoded: each
    /// concern's requests go to the part of the node that owns it. `rtt`
    /// is the sender's RTT as this node measured it, if it did (the core
    /// ranks offers by it).
    pub(super) fn rpc(&mut self, from: PeerId, rpc: PeerRpc, reply: Reply, rtt: Option<Duration>) {
        self.status.note_rpc(&rpc);
        let answer = match rpc {
            PeerRpc::Ping => PeerReply::Ack,
            PeerRpc::Sched(rpc) => self.sched_rpc(from, rpc, rtt),
            PeerRpc::Member(rpc) => return self.member_rpc(from, rpc, reply),
            PeerRpc::File(rpc) => self.file_rpc(from, rpc),
            PeerRpc::Barrier(rpc) => self.barrier_rpc(from, rpc),
            PeerRpc::Ranks(rpc) => self.ranks_asked(from, rpc.jobs),
            PeerRpc::Replica(ReplicaRpc { job, msg, copy }) => {
                self.replica_message(from, job, *msg, copy.map(|c| *c));
                PeerReply::Ack
            }
            PeerRpc::Forward(rpc) => return self.forward_rpc(rpc, reply),
            PeerRpc::View(rpc) => return self.status_reply(reply, rpc),
            PeerRpc::Checkpoint(rpc) => return self.checkpoint_rpc(from, rpc, reply),
        };
        self.reply(reply, answer);
    }

    /// Answers a remote view off the loop: the answer reads the database
    /// and is encoded and cut to size there.
    pub(super) fn status_reply(&mut self, to: Reply, asked: ViewRpc) {
        let status = self.status.status();
        self.answer_later(to, async move {
            tokio::task::spawn_blocking(move || status::answer(&status, &asked))
                .await
                .unwrap_or_else(|e| {
                    PeerReply::refused(RefusalKind::Unavailable, format!("status: {e}"))
                })
        });
    }

    /// Hands a log chunk or output block to the store's writer, and
    /// answers the sender once it is written (so a sender waits for the
    /// disk, and the loop does not).
    pub(super) fn append(&mut self, to: Reply, item: Append) {
        let writer = self.writer.clone();
        let activity = self.activity.clone();
        self.answer_later(to, async move {
            match writer.append(item).await {
                Ok(()) => {
                    activity.send_modify(|n| *n = n.wrapping_add(1));
                    PeerReply::Ack
                }
                Err(e) => PeerReply::refused(RefusalKind::Unavailable, e.to_string()),
            }
        });
    }
}

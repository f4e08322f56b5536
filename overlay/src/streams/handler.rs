//! The per-connection side of the ranks stream protocol: opens the
//! substreams the behaviour asks for and hands accepted ones to the node.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::task::{Context, Poll};

use libp2p::core::upgrade::ReadyUpgrade;
use libp2p::swarm::handler::{
    ConnectionEvent, DialUpgradeError, FullyNegotiatedInbound, FullyNegotiatedOutbound,
};
use libp2p::swarm::{ConnectionHandler, ConnectionHandlerEvent, SubstreamProtocol};
use libp2p::{PeerId, StreamProtocol};

use super::{OpenReply, Shared, StreamError};

/// One connection's handler.
pub(crate) struct Handler {
    peer: PeerId,
    /// The peer's IP address on this connection, unless relayed.
    remote_ip: Option<std::net::IpAddr>,
    protocol: StreamProtocol,
    shared: Shared,
    /// Open requests not yet turned into substream requests.
    to_open: VecDeque<OpenReply>,
}

impl Handler {
    pub(super) fn new(
        peer: PeerId,
        remote_ip: Option<std::net::IpAddr>,
        protocol: StreamProtocol,
        shared: Shared,
    ) -> Self {
        Handler {
            peer,
            remote_ip,
            protocol,
            shared,
            to_open: VecDeque::new(),
        }
    }
}

impl ConnectionHandler for Handler {
    type FromBehaviour = OpenReply;
    type ToBehaviour = Infallible;
    type InboundProtocol = ReadyUpgrade<StreamProtocol>;
    type OutboundProtocol = ReadyUpgrade<StreamProtocol>;
    type InboundOpenInfo = ();
    type OutboundOpenInfo = OpenReply;

    fn listen_protocol(&self) -> SubstreamProtocol<Self::InboundProtocol> {
        SubstreamProtocol::new(ReadyUpgrade::new(self.protocol.clone()), ())
    }

    fn on_behaviour_event(&mut self, reply: OpenReply) {
        self.to_open.push_back(reply);
    }

    fn poll(
        &mut self,
        _: &mut Context<'_>,
    ) -> Poll<ConnectionHandlerEvent<Self::OutboundProtocol, OpenReply, Infallible>> {
        match self.to_open.pop_front() {
            Some(reply) => Poll::Ready(ConnectionHandlerEvent::OutboundSubstreamRequest {
                protocol: SubstreamProtocol::new(ReadyUpgrade::new(self.protocol.clone()), reply),
            }),
            None => Poll::Pending,
        }
    }

    fn on_connection_event(
        &mut self,
        event: ConnectionEvent<'_, Self::InboundProtocol, Self::OutboundProtocol, (), OpenReply>,
    ) {
        match event {
            ConnectionEvent::FullyNegotiatedInbound(FullyNegotiatedInbound {
                protocol: stream,
                ..
            }) => {
                self.shared
                    .deliver(self.shared.wrap(self.peer, self.remote_ip, stream));
            }
            ConnectionEvent::FullyNegotiatedOutbound(FullyNegotiatedOutbound {
                protocol: stream,
                info: reply,
            }) => {
                let _ = reply.send(Ok(self.shared.wrap(self.peer, self.remote_ip, stream)));
            }
            ConnectionEvent::DialUpgradeError(DialUpgradeError { info: reply, error }) => {
                let _ = reply.send(Err(StreamError::Refused(error.to_string())));
            }
            _ => {}
        }
    }
}

//! A TCP dial that falls back to a fresh local port when reusing the
//! listen port fails.
//!
//! libp2p's TCP transport dials from the node's listen port (port reuse,
//! so that NATs map the node's outbound connections to the port it
//! listens on; hole punching needs it). It binds the dial socket to the
//! *unspecified* address and that port, `0.0.0.0:PORT`, and such a bind
//! fails with "address in use" whenever another socket of the machine
//! holds PORT on any of its addresses without port reuse: a node listening
//! on 127.0.3.1:38767 cannot dial at all while some other program's
//! connection or listener has 127.0.0.1:38767. The transport retries
//! without reuse only when `connect` fails, not when `bind` does, so such
//! a node never joined (the demo's closed grid, one run in twenty: a node
//! with no neighbour for a minute, each bootstrap dial refused with
//! `AddrInUse`). Here such a dial is made again at once from a port of its
//! own.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::future::BoxFuture;
use libp2p::Multiaddr;
use libp2p::core::transport::TransportEvent;
use libp2p::core::transport::{DialOpts, ListenerId, PortUse, Transport, TransportError};

/// The TCP transport `T` whose reusing dials fall back to a new port.
pub(super) struct FreshPortOnConflict<T> {
    inner: T,
}

impl<T> FreshPortOnConflict<T> {
    pub(super) fn new(inner: T) -> Self {
        FreshPortOnConflict { inner }
    }
}

impl<T> Transport for FreshPortOnConflict<T>
where
    T: Transport<Error = io::Error> + Unpin,
    T::Dial: Send + 'static,
    T::Output: Send + 'static,
{
    type Output = T::Output;
    type Error = io::Error;
    type ListenerUpgrade = T::ListenerUpgrade;
    type Dial = BoxFuture<'static, io::Result<T::Output>>;

    fn listen_on(
        &mut self,
        id: ListenerId,
        addr: Multiaddr,
    ) -> Result<(), TransportError<Self::Error>> {
        self.inner.listen_on(id, addr)
    }

    fn remove_listener(&mut self, id: ListenerId) -> bool {
        self.inner.remove_listener(id)
    }

    fn dial(
        &mut self,
        addr: Multiaddr,
        opts: DialOpts,
    ) -> Result<Self::Dial, TransportError<Self::Error>> {
        let reusing = self.inner.dial(addr.clone(), opts)?;
        if opts.port_use != PortUse::Reuse {
            return Ok(reusing.boxed());
        }
        // Made now (the socket, not the connection): the future cannot
        // reach the transport later. Dropped unused when the first works.
        let fresh = self.inner.dial(
            addr,
            DialOpts {
                port_use: PortUse::New,
                ..opts
            },
        )?;
        Ok(async move {
            match reusing.await {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    tracing::debug!(error = %e, "the listen port is taken on another address; dialing from a new port");
                    fresh.await
                }
                done => done,
            }
        }
        .boxed())
    }

    fn poll(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<TransportEvent<Self::ListenerUpgrade, Self::Error>> {
        Pin::new(&mut self.get_mut().inner).poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, TcpListener};

    use libp2p::core::Endpoint;
    use libp2p::multiaddr::Protocol;

    use super::*;

    fn tcp(ip: Ipv4Addr, port: u16) -> Multiaddr {
        Multiaddr::from(ip).with(Protocol::Tcp(port))
    }

    /// A node listening on 127.0.0.2:P dials out while another socket
    /// holds 127.0.0.1:P: libp2p's reusing dial alone fails with "address
    /// in use"; through the wrapper the connection is made.
    #[tokio::test]
    async fn a_dial_whose_listen_port_is_taken_elsewhere_is_made_from_a_new_port() {
        let remote = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let remote_addr = tcp(Ipv4Addr::LOCALHOST, remote.local_addr().unwrap().port());

        let mut transport = FreshPortOnConflict::new(libp2p::tcp::tokio::Transport::new(
            libp2p::tcp::Config::default(),
        ));
        transport
            .listen_on(ListenerId::next(), tcp(Ipv4Addr::new(127, 0, 0, 2), 0))
            .unwrap();
        let port = loop {
            let event = futures::future::poll_fn(|cx| Pin::new(&mut transport).poll(cx)).await;
            if let TransportEvent::NewAddress { listen_addr, .. } = event {
                match listen_addr.iter().nth(1) {
                    Some(Protocol::Tcp(port)) => break port,
                    other => panic!("not a TCP address: {other:?}"),
                }
            }
        };
        // The same port on another loopback address, held without reuse.
        let _squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
        let opts = DialOpts {
            role: Endpoint::Dialer,
            port_use: PortUse::Reuse,
        };

        let plain = transport
            .inner
            .dial(remote_addr.clone(), opts)
            .unwrap()
            .await;
        assert_eq!(
            plain.err().map(|e| e.kind()),
            Some(io::ErrorKind::AddrInUse),
            "libp2p's own dial from the taken port"
        );
        let dial = transport.dial(remote_addr, opts).unwrap();
        let stream = dial.await.expect("dialed from a new port");
        assert_ne!(stream.0.local_addr().unwrap().port(), port);
        let (accepted, _) = remote.accept().unwrap();
        assert_eq!(
            accepted.peer_addr().unwrap(),
            stream.0.local_addr().unwrap()
        );
    }
}

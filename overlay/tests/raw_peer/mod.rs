//! A hand-made libp2p peer for tests: it identifies itself as a node of a
//! network, as a real node does, but speaks the overlay's flood and rpc
//! protocols with raw bytes, so that a test can send frames no real node
//! would. It answers the node's own requests correctly, so that every
//! offence the node counts is one the test chose to commit.
//!
//! The protocol names and the identify version are written out here rather
//! than taken from the crate: they are the wire contract this peer tests.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, StreamExt};
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{Multiaddr, PeerId, StreamProtocol, identify, noise, ping, tcp, yamux};
use tokio::sync::{mpsc, oneshot};

/// Which of the overlay's protocols a raw frame goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// `/zorilla/<network>/flood/1`.
    Flood,
    /// `/zorilla/<network>/rpc/4`.
    Rpc,
}

/// What happened to the raw peer, as far as the test cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RawEvent {
    /// A connection to `peer` opened.
    Connected(PeerId),
    /// The last connection to `peer` closed.
    Disconnected(PeerId),
}

/// How the requests the raw peer sent went, so far: each request ends
/// written (every byte taken by the node's side of its stream, which
/// yamux's flow control grants only as the node reads) or failed (the
/// stream was reset, say, by a node that refused the request).
#[derive(Debug, Default)]
pub(crate) struct Sent {
    /// Requests whose bytes were all written.
    pub(crate) written: AtomicUsize,
    /// Their bytes.
    pub(crate) written_bytes: AtomicUsize,
    /// Requests whose writing failed.
    pub(crate) failed: AtomicUsize,
}

/// Sends bytes as they are: no encoding, no cap. With `hold`, a request's
/// stream is kept open that long after its bytes (a frame that never ends).
#[derive(Debug, Clone, Default)]
struct RawCodec {
    hold: Option<Duration>,
    sent: Arc<Sent>,
}

async fn read_all<T: AsyncRead + Unpin + Send>(io: &mut T) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    io.take(4 << 20).read_to_end(&mut buf).await?;
    Ok(buf)
}

async fn write_all<T: AsyncWrite + Unpin + Send>(io: &mut T, buf: Vec<u8>) -> io::Result<()> {
    io.write_all(&buf).await?;
    io.flush().await
}

impl request_response::Codec for RawCodec {
    type Protocol = StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> io::Result<Vec<u8>> {
        read_all(io).await
    }

    async fn read_response<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> io::Result<Vec<u8>> {
        read_all(io).await
    }

    async fn write_request<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Vec<u8>,
    ) -> io::Result<()> {
        let len = req.len();
        if let Err(e) = write_all(io, req).await {
            self.sent.failed.fetch_add(1, Ordering::AcqRel);
            return Err(e);
        }
        self.sent.written_bytes.fetch_add(len, Ordering::AcqRel);
        self.sent.written.fetch_add(1, Ordering::AcqRel);
        if let Some(hold) = self.hold {
            tokio::time::sleep(hold).await;
        }
        Ok(())
    }

    async fn write_response<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        res: Vec<u8>,
    ) -> io::Result<()> {
        write_all(io, res).await
    }
}

#[derive(NetworkBehaviour)]
struct Behaviour {
    identify: identify::Behaviour,
    ping: ping::Behaviour,
    flood: request_response::Behaviour<RawCodec>,
    rpc: request_response::Behaviour<RawCodec>,
}

/// The CBOR of the flood protocol's acknowledgement (a unit struct: null).
const FLOOD_ACK: &[u8] = &[0xf6];

/// The CBOR of the rpc protocol's `Done` answer (a unit variant: its name).
fn rpc_done() -> Vec<u8> {
    let mut buf = Vec::new();
    ciborium::into_writer(&"Done", &mut buf).expect("encodes");
    buf
}

enum Command {
    Send(Protocol, PeerId, Vec<u8>),
    Dial(Multiaddr, oneshot::Sender<Result<(), String>>),
}

/// The test's handle on a running raw peer.
pub(crate) struct RawPeer {
    /// Its peer id.
    pub(crate) peer: PeerId,
    commands: mpsc::Sender<Command>,
    /// What happened to it.
    pub(crate) events: mpsc::Receiver<RawEvent>,
    /// How its requests went.
    sent: Arc<Sent>,
}

impl RawPeer {
    /// Starts a raw peer of `network` (it listens nowhere; it only dials).
    pub(crate) fn start(network: &str) -> RawPeer {
        Self::start_holding(network, None)
    }

    /// Starts a raw peer whose requests, if `hold` is given, keep their
    /// streams open that long after their bytes, up to 1000 at once per
    /// connection.
    pub(crate) fn start_holding(network: &str, hold: Option<Duration>) -> RawPeer {
        Self::start_with(network, hold, Vec::new())
    }

    /// Starts a raw peer that tells its peers (identify) it listens at
    /// `claimed`, where it does not.
    pub(crate) fn start_claiming(network: &str, claimed: Vec<Multiaddr>) -> RawPeer {
        Self::start_with(network, None, claimed)
    }

    fn start_with(network: &str, hold: Option<Duration>, claimed: Vec<Multiaddr>) -> RawPeer {
        let sent = Arc::new(Sent::default());
        let codec = RawCodec {
            hold,
            sent: sent.clone(),
        };
        let rr_config = request_response::Config::default()
            .with_request_timeout(hold.unwrap_or(Duration::ZERO) + Duration::from_secs(10))
            .with_max_concurrent_streams(1000);
        let identify_version = format!("/zorilla/{network}/1");
        let flood = StreamProtocol::try_from_owned(format!("/zorilla/{network}/flood/1")).unwrap();
        let rpc = StreamProtocol::try_from_owned(format!("/zorilla/{network}/rpc/4")).unwrap();
        let mut swarm = libp2p::SwarmBuilder::with_new_identity()
            .with_tokio()
            .with_tcp(
                tcp::Config::default(),
                noise::Config::new,
                yamux::Config::default,
            )
            .expect("tcp transport")
            .with_behaviour(|key| Behaviour {
                identify: identify::Behaviour::new(identify::Config::new(
                    identify_version,
                    key.public(),
                )),
                ping: ping::Behaviour::new(ping::Config::new()),
                flood: request_response::Behaviour::with_codec(
                    codec.clone(),
                    [(flood, ProtocolSupport::Full)],
                    rr_config.clone(),
                ),
                rpc: request_response::Behaviour::with_codec(
                    codec,
                    [(rpc, ProtocolSupport::Full)],
                    rr_config,
                ),
            })
            .expect("behaviour")
            .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(300)))
            .build();
        // Identify sends the external addresses with the listen ones.
        for addr in claimed {
            swarm.add_external_address(addr);
        }
        let peer = *swarm.local_peer_id();
        let (command_tx, mut commands) = mpsc::channel::<Command>(16);
        let (event_tx, events) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    command = commands.recv() => match command {
                        None => break,
                        Some(Command::Send(Protocol::Flood, to, bytes)) => {
                            swarm.behaviour_mut().flood.send_request(&to, bytes);
                        }
                        Some(Command::Send(Protocol::Rpc, to, bytes)) => {
                            swarm.behaviour_mut().rpc.send_request(&to, bytes);
                        }
                        Some(Command::Dial(addr, reply)) => {
                            let _ = reply.send(swarm.dial(addr).map_err(|e| e.to_string()));
                        }
                    },
                    event = swarm.select_next_some() => {
                        let report = match event {
                            SwarmEvent::ConnectionEstablished { peer_id, .. } => {
                                Some(RawEvent::Connected(peer_id))
                            }
                            SwarmEvent::ConnectionClosed { peer_id, num_established: 0, .. } => {
                                Some(RawEvent::Disconnected(peer_id))
                            }
                            // Answer the node's own requests as a node would.
                            SwarmEvent::Behaviour(BehaviourEvent::Flood(
                                request_response::Event::Message {
                                    message: request_response::Message::Request { channel, .. },
                                    ..
                                },
                            )) => {
                                let _ = swarm.behaviour_mut().flood.send_response(channel, FLOOD_ACK.to_vec());
                                None
                            }
                            SwarmEvent::Behaviour(BehaviourEvent::Rpc(
                                request_response::Event::Message {
                                    message: request_response::Message::Request { channel, .. },
                                    ..
                                },
                            )) => {
                                let _ = swarm.behaviour_mut().rpc.send_response(channel, rpc_done());
                                None
                            }
                            _ => None,
                        };
                        if let Some(report) = report
                            && event_tx.send(report).await.is_err()
                        {
                            break;
                        }
                    }
                }
            }
        });
        RawPeer {
            peer,
            commands: command_tx,
            events,
            sent,
        }
    }

    /// How the requests sent so far went.
    #[allow(dead_code)] // node/tests/limits.rs
    pub(crate) fn sent(&self) -> &Sent {
        &self.sent
    }

    /// Dials `addr`.
    pub(crate) async fn dial(&self, addr: Multiaddr) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Dial(addr, tx))
            .await
            .expect("raw peer runs");
        rx.await.expect("raw peer answers")
    }

    /// Sends `bytes` as one request on `protocol` to `to`.
    pub(crate) async fn send(&self, protocol: Protocol, to: PeerId, bytes: &[u8]) {
        self.commands
            .send(Command::Send(protocol, to, bytes.to_vec()))
            .await
            .expect("raw peer runs");
    }

    /// Waits for `wanted`, skipping other events; fails after `timeout`.
    pub(crate) async fn expect(&mut self, wanted: RawEvent, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(event)) if event == wanted => return,
                Ok(Some(_)) => {}
                Ok(None) => panic!("the raw peer stopped before {wanted:?}"),
                Err(_) => panic!("no {wanted:?} within {timeout:?}"),
            }
        }
    }
}

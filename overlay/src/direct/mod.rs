//! The rank data plane: connections of its own between two nodes, for the
//! messages between the workers of jobs, beside the libp2p connection.
//!
//! A rank stream through libp2p crosses the connection's task, yamux and
//! noise (ChaCha20-Poly1305 only): several context switches and a cipher
//! at under 2 GB/s per core. A direct connection is TCP with TLS 1.3 on
//! it, read and written by the node's own tasks: AES-GCM (rustls with
//! aws-lc-rs, AES-NI), nothing in between.
//!
//! # Who may connect
//!
//! Both ends are authenticated by their libp2p identities, with the
//! certificates libp2p's own TLS transport derives from a node's key
//! ([`libp2p::tls::certificate`]: a self-signed certificate carrying the
//! host key and its signature over the certificate's key). The dialer
//! names the peer it means to reach and refuses any other
//! ([`verifier`]); the listener takes a connection only from a peer it
//! *expects*: one it offered its port to, over an authenticated libp2p
//! rank stream (which only a peer the overlay admitted, membership
//! credential and all, can open), within [`EXPECT_KEPT`]. Until the TLS
//! handshake is done and the peer is known and expected, a connection
//! holds nothing but its socket and rustls's own bounded handshake state;
//! at most [`MAX_HANDSHAKES`] handshakes run at once, each for at most
//! [`HANDSHAKE_TIMEOUT`]. After that the connection carries the ranks
//! protocol's bounded frames ([`crate::streams::protocol`]).
//!
//! # How a connection comes about
//!
//! The node decides (see the node's `link` module): a sender whose libp2p
//! rank stream brings it the receiver's offer of where its plane listens
//! ([`Frame::Offer`](crate::streams::protocol::Frame::Offer): the port,
//! and the address when the plane listens on one) dials the address
//! offered, then the IP address its libp2p connection to the receiver has
//! ([`PeerStream::remote_ip`](crate::PeerStream)), and uses the direct
//! connection if the dial and the handshake succeed, the libp2p stream
//! otherwise (relayed connections, NATs, firewalls). This module only
//! listens, dials and authenticates.
//!
//! # Lanes
//!
//! Beside its direct connection, a sender may open *lanes* to the same
//! peer ([`DirectPlane::dial_lane`]): further connections, authenticated
//! exactly the same way, that carry chunks of large messages so that one
//! message uses several connections (and cores) at once. A lane says so
//! in the TLS handshake (its own ALPN protocol, [`Role::Lane`]); what it
//! joins and how many a receiver takes are the node's business (its
//! `link` module), as is how many a sender opens
//! ([`DirectPlane::lanes`], at most [`MAX_LANES`]).
//!
//! A peer whose membership of a closed grid is revoked (or expires) is cut
//! off here too ([`DirectPlane::cut`]): its direct connections end at once,
//! and it is not expected again for [`EXPECT_KEPT`].
//!
//! The plane listens on the IP address of the node's first TCP listen
//! address, on a port chosen by the OS. It is off with emulated latency
//! ([`crate::latency`] delays libp2p's TCP connections only) and when
//! [`OverlayConfig::direct_ranks`](crate::OverlayConfig::direct_ranks) is
//! false.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{AsyncReadExt, AsyncWriteExt};
use futures_rustls::{TlsAcceptor, TlsConnector, TlsStream};
use libp2p::PeerId;
use libp2p::identity::Keypair;
use libp2p::tcp::tokio::TcpStream;
use rustls::pki_types::ServerName;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;
use zorilla_core::bounded::make_room;

#[cfg(test)]
mod tests;
pub mod verifier;

/// How long a peer the node offered its port to may connect.
pub const EXPECT_KEPT: Duration = Duration::from_secs(600);
/// The most peers expected at once; the oldest is forgotten first.
pub const MAX_EXPECTED: usize = 4096;
/// The most TLS handshakes the listener runs at once; connections beyond
/// are closed at once.
pub const MAX_HANDSHAKES: usize = 32;
/// How long an inbound handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// What a listener sends first on a connection it takes (see
/// [`DirectPlane::dial`]).
const WELCOME: [u8; 1] = [0x5a];
/// How long a dial (TCP connect and TLS handshake) may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(3);
/// The most lanes a node opens or takes beside one direct connection.
pub const MAX_LANES: u8 = 4;
/// Lanes beside each direct connection on a machine with at least
/// [`LANE_CORES`] cores (see the node's `link` module for why two).
pub const DEFAULT_LANES: u8 = 2;
/// The fewest cores on which a node opens lanes unless configured
/// otherwise ([`default_lanes`]).
pub const LANE_CORES: usize = 4;

/// Lanes beside each direct connection unless configured otherwise:
/// [`DEFAULT_LANES`] on a machine with [`LANE_CORES`] cores or more, none
/// on a smaller one. A lane is a task at each end, which pays only with a
/// core free to run it: on 2 cores striping made 4 MiB messages 5-30%
/// slower (`BENCHMARKS.md`, "Striping over lanes").
pub fn default_lanes() -> u8 {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if cores >= LANE_CORES {
        DEFAULT_LANES
    } else {
        0
    }
}

/// What a direct connection is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A link's connection: every frame of the ranks protocol.
    Primary,
    /// A lane beside a link's connection: chunks of large messages only.
    Lane,
}

/// An authenticated direct connection to or from a peer (futures'
/// `AsyncRead + AsyncWrite`).
pub struct DirectStream {
    /// The peer at the other end, as its certificate proves.
    pub peer: PeerId,
    /// What the dialer opened it for.
    pub role: Role,
    /// The TLS stream.
    pub stream: CutStream,
}

/// A direct connection's TLS stream, which [`DirectPlane::cut`] ends from
/// outside: reads and writes fail from then on, even one already waiting.
pub struct CutStream {
    inner: TlsStream<TcpStream>,
    /// Ready once the connection's peer was cut off.
    cut: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl CutStream {
    /// The TLS stream (its state: cipher suite, certificates).
    pub fn get_ref(&self) -> &TlsStream<TcpStream> {
        &self.inner
    }

    /// The local port of its TCP connection.
    pub fn local_port(&self) -> Option<u16> {
        let (tcp, _) = self.inner.get_ref();
        tcp.0.local_addr().ok().map(|a| a.port())
    }

    fn check(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        match self.cut.as_mut().poll(cx) {
            Poll::Ready(()) => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the peer was cut off (its membership was revoked or expired)",
            )),
            Poll::Pending => Ok(()),
        }
    }
}

impl futures::AsyncRead for CutStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl futures::AsyncWrite for CutStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    /// TLS takes the slices as one stream of records: a frame's head and
    /// its chunk's bytes, written from where they are, share records.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}

impl std::fmt::Debug for DirectStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectStream")
            .field("peer", &self.peer)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// Why a direct connection could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirectError {
    /// The TCP connection failed.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The TLS handshake failed (among others: the peer is not who it was
    /// meant to be, or did not expect this node).
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// The dial took longer than [`DIAL_TIMEOUT`].
    #[error("timed out")]
    Timeout,
}

/// This node's end of the rank data plane: its listener, its certificate,
/// and the peers it expects.
pub struct DirectPlane {
    local: PeerId,
    /// The listener's address.
    addr: std::net::SocketAddr,
    alpn: Vec<u8>,
    /// The ALPN protocol of lanes.
    lane_alpn: Vec<u8>,
    /// Lanes to open beside each direct connection, and to take.
    lanes: std::sync::atomic::AtomicU8,
    /// This node's certificate and key.
    own: Arc<verifier::OwnCert>,
    server: Arc<rustls::ServerConfig>,
    /// The peers it expects, since when (shared with the listener's
    /// certificate verifier, which refuses any other in the handshake).
    expected: Arc<Mutex<BTreeMap<PeerId, Instant>>>,
    /// Peers cut off, since when: not expected again for [`EXPECT_KEPT`].
    cut_off: Mutex<BTreeMap<PeerId, Instant>>,
    /// The connections made, by peer, each with what ends it (pruned of
    /// connections gone as new ones come).
    cuts: Mutex<Vec<(PeerId, watch::Sender<bool>)>>,
    inbound: Mutex<Option<mpsc::Sender<DirectStream>>>,
    /// Connections accepted, refused and dialed (for tests and the
    /// status page).
    stats: Mutex<DirectStats>,
    /// The listener's task.
    listener: Mutex<Option<tokio::task::AbortHandle>>,
}

/// What the plane counted since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectStats {
    /// Inbound connections authenticated and handed to the node.
    pub accepted: u64,
    /// Inbound connections refused: failed handshake, unexpected peer,
    /// too many handshakes, or nobody accepting.
    pub refused: u64,
    /// Dials that succeeded.
    pub dialed: u64,
    /// Dials that failed.
    pub dial_failed: u64,
}

impl std::fmt::Debug for DirectPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectPlane")
            .field("local", &self.local)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl DirectPlane {
    /// Listens on `ip`, a port chosen by the OS, as `key`'s peer, for
    /// network `network`; serves the listener on the current runtime.
    pub async fn start(key: &Keypair, ip: IpAddr, network: &str) -> Result<Arc<Self>, String> {
        let (cert, private) = libp2p::tls::certificate::generate(key).map_err(|e| e.to_string())?;
        let alpn = format!("/zorilla/{network}/ranks-direct/1").into_bytes();
        let lane_alpn = format!("/zorilla/{network}/ranks-lane/1").into_bytes();
        let local = key.public().to_peer_id();
        let own = Arc::new(verifier::OwnCert::new(cert, &private).map_err(|e| e.to_string())?);
        let expected = Arc::new(Mutex::new(BTreeMap::new()));
        let mut server = rustls::ServerConfig::builder_with_provider(verifier::provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(Arc::new(verifier::PeerVerifier::expected(
                local,
                expected.clone(),
            )))
            .with_cert_resolver(own.clone());
        server.alpn_protocols = vec![alpn.clone(), lane_alpn.clone()];
        // No session tickets: every connection proves its peer afresh.
        server.send_tls13_tickets = 0;
        let listener = TcpListener::bind((ip, 0))
            .await
            .map_err(|e| format!("cannot listen on {ip}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let plane = Arc::new(DirectPlane {
            local,
            addr,
            alpn,
            lane_alpn,
            lanes: std::sync::atomic::AtomicU8::new(DEFAULT_LANES),
            own,
            server: Arc::new(server),
            expected,
            cut_off: Mutex::new(BTreeMap::new()),
            cuts: Mutex::new(Vec::new()),
            inbound: Mutex::new(None),
            stats: Mutex::new(DirectStats::default()),
            listener: Mutex::new(None),
        });
        let task = tokio::spawn(serve(Arc::downgrade(&plane), listener));
        *lock(&plane.listener) = Some(task.abort_handle());
        Ok(plane)
    }

    /// Stops listening: peers' dials fail from now on (and their messages
    /// go over libp2p). Connections made stay.
    pub fn close(&self) {
        if let Some(task) = lock(&self.listener).take() {
            task.abort();
        }
    }

    /// Where the listener is, as the node offers it to its peers: its
    /// port, and its address unless it listens on all of the machine's.
    pub fn offer(&self) -> crate::streams::protocol::Offer {
        let ip = self.addr.ip();
        crate::streams::protocol::Offer {
            port: self.addr.port(),
            ip: (!ip.is_unspecified()).then_some(ip),
        }
    }

    /// Lanes opened beside each direct connection, and taken beside each
    /// connection from a peer (0: none).
    pub fn lanes(&self) -> u8 {
        self.lanes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets [`lanes`](Self::lanes) (at most [`MAX_LANES`]).
    pub fn set_lanes(&self, lanes: u8) {
        self.lanes
            .store(lanes.min(MAX_LANES), std::sync::atomic::Ordering::Relaxed);
    }

    /// What the plane counted so far.
    pub fn stats(&self) -> DirectStats {
        *lock(&self.stats)
    }

    /// Lets `peer` connect for [`EXPECT_KEPT`] from now (unless it was cut
    /// off within that time).
    pub fn expect(&self, peer: PeerId) {
        if lock(&self.cut_off)
            .get(&peer)
            .is_some_and(|at| at.elapsed() < EXPECT_KEPT)
        {
            return;
        }
        let mut expected = lock(&self.expected);
        make_room(&mut expected, &peer, MAX_EXPECTED, |at| *at);
        expected.insert(peer, Instant::now());
    }

    /// Cuts `peer` off: every direct connection to and from it ends now,
    /// and it is not expected for [`EXPECT_KEPT`] (a closed grid's
    /// membership gate revoked it, or its credential expired: it may carry
    /// nothing more here).
    pub fn cut(&self, peer: &PeerId) {
        lock(&self.expected).remove(peer);
        {
            let mut cut_off = lock(&self.cut_off);
            make_room(&mut cut_off, peer, MAX_EXPECTED, |at| *at);
            cut_off.insert(*peer, Instant::now());
        }
        lock(&self.cuts).retain(|(p, tx)| {
            if p == peer {
                tx.send_replace(true);
                false
            } else {
                !tx.is_closed()
            }
        });
    }

    /// `stream`, to or from `peer`, made to end when `peer` is cut off.
    fn cuttable(&self, peer: PeerId, role: Role, stream: TlsStream<TcpStream>) -> DirectStream {
        let (tx, mut rx) = watch::channel(false);
        {
            let mut cuts = lock(&self.cuts);
            cuts.retain(|(_, tx)| !tx.is_closed());
            cuts.push((peer, tx));
        }
        let cut = Box::pin(async move {
            // A plane dropped cuts nothing: the connection lives on.
            if rx.wait_for(|cut| *cut).await.is_err() {
                std::future::pending::<()>().await;
            }
        });
        DirectStream {
            peer,
            role,
            stream: CutStream { inner: stream, cut },
        }
    }

    fn expects(&self, peer: &PeerId) -> bool {
        lock(&self.expected)
            .get(peer)
            .is_some_and(|at| at.elapsed() < EXPECT_KEPT)
    }

    /// Routes authenticated inbound connections to a queue of `capacity`
    /// from now on (a full queue closes new ones).
    pub fn accept(&self, capacity: usize) -> mpsc::Receiver<DirectStream> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        *lock(&self.inbound) = Some(tx);
        rx
    }

    /// Connects to `peer` at `addr`; fails unless the other end proves to
    /// be `peer` and takes this node.
    pub async fn dial(&self, peer: PeerId, addr: SocketAddr) -> Result<DirectStream, DirectError> {
        self.dial_as(peer, addr, Role::Primary).await
    }

    /// [`dial`](Self::dial)s a lane (see the module docs).
    pub async fn dial_lane(
        &self,
        peer: PeerId,
        addr: SocketAddr,
    ) -> Result<DirectStream, DirectError> {
        self.dial_as(peer, addr, Role::Lane).await
    }

    async fn dial_as(
        &self,
        peer: PeerId,
        addr: SocketAddr,
        role: Role,
    ) -> Result<DirectStream, DirectError> {
        let result = tokio::time::timeout(DIAL_TIMEOUT, self.dial_inner(peer, addr, role))
            .await
            .unwrap_or(Err(DirectError::Timeout));
        let mut stats = lock(&self.stats);
        match &result {
            Ok(_) => stats.dialed += 1,
            Err(_) => stats.dial_failed += 1,
        }
        result
    }

    async fn dial_inner(
        &self,
        peer: PeerId,
        addr: SocketAddr,
        role: Role,
    ) -> Result<DirectStream, DirectError> {
        let mut config = rustls::ClientConfig::builder_with_provider(verifier::provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| DirectError::Handshake(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier::PeerVerifier::only(peer)))
            .with_client_cert_resolver(self.own.clone());
        config.alpn_protocols = vec![match role {
            Role::Primary => self.alpn.clone(),
            Role::Lane => self.lane_alpn.clone(),
        }];
        config.resumption = rustls::client::Resumption::disabled();
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| DirectError::Connect(e.to_string()))?;
        // Small messages go at once (the protocol batches its own writes).
        let _ = tcp.set_nodelay(true);
        // The name is not checked (the verifier checks the peer id).
        let name = ServerName::try_from("zorilla").expect("a valid DNS name");
        let mut stream = TlsConnector::from(Arc::new(config))
            .connect(name, TcpStream(tcp))
            .await
            .map_err(|e| DirectError::Handshake(e.to_string()))?;
        // In TLS 1.3 the client is done before the server has checked its
        // certificate: the server's word that it took this node.
        let mut welcome = [0; 1];
        stream
            .read_exact(&mut welcome)
            .await
            .map_err(|e| DirectError::Handshake(format!("refused by the peer: {e}")))?;
        if welcome != WELCOME {
            return Err(DirectError::Handshake("refused by the peer".into()));
        }
        Ok(self.cuttable(peer, role, stream.into()))
    }
}

impl Drop for DirectPlane {
    fn drop(&mut self) {
        self.close();
    }
}

/// Accepts connections until the plane is dropped: handshakes (bounded in
/// number and time), then hands the expected peers' connections on.
async fn serve(plane: std::sync::Weak<DirectPlane>, listener: TcpListener) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let accepted = listener.accept().await;
        let Some(plane) = plane.upgrade() else {
            return;
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of descriptors, say: wait rather than spin.
                tracing::debug!("rank data plane: accept failed: {e}");
                drop(plane);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = handshakes.clone().try_acquire_owned() else {
            lock(&plane.stats).refused += 1;
            continue;
        };
        let acceptor = TlsAcceptor::from(plane.server.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tcp.set_nodelay(true);
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&plane, acceptor, tcp)).await {
                Ok(Ok(stream)) => {
                    let tx = lock(&plane.inbound).clone();
                    // Counted before the node can see it.
                    let mut stats = lock(&plane.stats);
                    let delivered = tx.is_some_and(|tx| tx.try_send(stream).is_ok());
                    if delivered {
                        stats.accepted += 1;
                    } else {
                        stats.refused += 1;
                    }
                }
                Ok(Err(e)) => {
                    tracing::debug!("rank data plane: refused a connection: {e}");
                    lock(&plane.stats).refused += 1;
                }
                Err(_) => {
                    tracing::debug!("rank data plane: a handshake timed out");
                    lock(&plane.stats).refused += 1;
                }
            }
        });
    }
}

/// The server's handshake: the client's certificate proves its peer id,
/// which must be one this node expects.
async fn handshake(
    plane: &DirectPlane,
    acceptor: TlsAcceptor,
    tcp: tokio::net::TcpStream,
) -> Result<DirectStream, String> {
    let mut stream = acceptor
        .accept(TcpStream(tcp))
        .await
        .map_err(|e| e.to_string())?;
    let (_, conn) = stream.get_ref();
    let peer = match conn.peer_certificates() {
        Some([cert]) => verifier::peer_of(cert).map_err(|e| e.to_string())?,
        _ => return Err("not exactly one client certificate".into()),
    };
    if peer == plane.local || !plane.expects(&peer) {
        return Err(format!("{peer} was not offered a connection"));
    }
    let role = match conn.alpn_protocol() {
        Some(p) if p == plane.alpn.as_slice() => Role::Primary,
        Some(p) if p == plane.lane_alpn.as_slice() => Role::Lane,
        _ => return Err("no known ALPN protocol".into()),
    };
    stream
        .write_all(&WELCOME)
        .await
        .map_err(|e| e.to_string())?;
    stream.flush().await.map_err(|e| e.to_string())?;
    Ok(plane.cuttable(peer, role, stream.into()))
}

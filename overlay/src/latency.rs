//! Latency emulation, so that locality can be shown with real nodes on one
//! machine (the kernel here has no netem).
//!
//! A [`Topology`] names *sites*, the RTT within each site, the RTT between
//! pairs of sites (with a default for unlisted pairs), and which site each
//! listen port belongs to. A node started with [`LatencyEmulation`] wraps
//! every TCP connection it **dials** in a stream that delays each chunk
//! written by half the RTT between the two sites and each chunk read by the
//! other half. The RTT is looked up for every chunk, so a test can change
//! it on open connections ([`SharedTopology::set_rtt`]), as when a route
//! changes or a link gets congested. Only the dialer delays, so every round trip on the connection
//! (whichever side starts it: ping, noise handshake, flood, rpc) takes the
//! emulated RTT extra, once, without the two sides having to agree.
//!
//! **How a node learns the remote's site**: from the address it dials. Peers
//! advertise their listen addresses (identify, peer exchange), so the dialed
//! address is the remote's listen address, and the topology maps listen
//! addresses to sites, by IP address (`[hosts]`) or by port (`[ports]`).
//! Hosts suit separate processes best: all of 127.0.0.0/8 is loopback, so
//! each site can get its own addresses (127.0.1.x, 127.0.2.x, ...) and the
//! nodes still listen on port 0, with no port chosen in advance that someone
//! else could take first. With port 0 and one address, each node registers
//! its actual listen port under its own site in a [`SharedTopology`] when it
//! starts listening, which works for all nodes of one process. An address
//! the topology does not know is not delayed.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures::channel::mpsc as fmpsc;
use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, StreamExt};
use libp2p::Multiaddr;
use libp2p::multiaddr::Protocol;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

/// One site of a [`Topology`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// The site's name.
    pub name: String,
    /// RTT between two nodes of this site, in milliseconds.
    pub rtt_within_ms: u64,
}

/// The RTT between two sites.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteLink {
    /// One site.
    pub a: String,
    /// The other site.
    pub b: String,
    /// RTT between nodes of the two sites, in milliseconds.
    pub rtt_ms: u64,
}

/// Sites, the RTTs between them, and which listen address or port is in
/// which site (an address listed under `[hosts]` wins over its port).
///
/// As a TOML file:
/// ```toml
/// default_rtt_ms = 100          # between sites not listed in [[links]]
/// [[sites]]
/// name = "amsterdam"
/// rtt_within_ms = 2
/// [[sites]]
/// name = "delft"
/// rtt_within_ms = 2
/// [[links]]
/// a = "amsterdam"
/// b = "delft"
/// rtt_ms = 10
/// [hosts]
/// "127.0.1.1" = "amsterdam"
/// "127.0.2.1" = "delft"
/// [ports]
/// 4001 = "amsterdam"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// RTT between sites that no link lists, in milliseconds.
    #[serde(default)]
    pub default_rtt_ms: u64,
    /// The sites.
    #[serde(default)]
    pub sites: Vec<Site>,
    /// RTTs between pairs of sites.
    #[serde(default)]
    pub links: Vec<SiteLink>,
    /// Listen IP address (as a string, as TOML keys are) to site name.
    #[serde(default)]
    pub hosts: BTreeMap<String, String>,
    /// Listen port (as a string, as TOML keys are) to site name.
    #[serde(default)]
    pub ports: BTreeMap<String, String>,
}

/// A topology that does not make sense.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The file is not valid TOML of the right shape.
    #[error("topology is not valid TOML: {0}")]
    Parse(String),
    /// A site is named twice.
    #[error("site {0:?} is defined twice")]
    DuplicateSite(String),
    /// A link or port names a site that is not defined.
    #[error("unknown site {0:?}")]
    UnknownSite(String),
    /// A port key is not a port number.
    #[error("{0:?} is not a port number")]
    BadPort(String),
    /// A host key is not an IP address.
    #[error("{0:?} is not an IP address")]
    BadHost(String),
}

impl Topology {
    /// Parses and checks a topology file's contents.
    pub fn from_toml_str(text: &str) -> Result<Self, TopologyError> {
        let topology: Topology =
            toml::from_str(text).map_err(|e| TopologyError::Parse(e.to_string()))?;
        topology.validate()?;
        Ok(topology)
    }

    /// Checks that every name refers to a defined site, every host key is an
    /// IP address and every port key is a port.
    pub fn validate(&self) -> Result<(), TopologyError> {
        let mut names = std::collections::BTreeSet::new();
        for site in &self.sites {
            if !names.insert(site.name.as_str()) {
                return Err(TopologyError::DuplicateSite(site.name.clone()));
            }
        }
        let known = |name: &String| {
            if names.contains(name.as_str()) {
                Ok(())
            } else {
                Err(TopologyError::UnknownSite(name.clone()))
            }
        };
        for link in &self.links {
            known(&link.a)?;
            known(&link.b)?;
        }
        for (port, site) in &self.ports {
            port.parse::<u16>()
                .map_err(|_| TopologyError::BadPort(port.clone()))?;
            known(site)?;
        }
        for (host, site) in &self.hosts {
            host.parse::<std::net::IpAddr>()
                .map_err(|_| TopologyError::BadHost(host.clone()))?;
            known(site)?;
        }
        Ok(())
    }

    /// The RTT between nodes of sites `a` and `b`; `None` if either is not a
    /// site.
    pub fn rtt(&self, a: &str, b: &str) -> Option<Duration> {
        let site_a = self.sites.iter().find(|s| s.name == a)?;
        self.sites.iter().find(|s| s.name == b)?;
        let ms = if a == b {
            site_a.rtt_within_ms
        } else {
            self.links
                .iter()
                .find(|l| (l.a == a && l.b == b) || (l.a == b && l.b == a))
                .map_or(self.default_rtt_ms, |l| l.rtt_ms)
        };
        Some(Duration::from_millis(ms))
    }

    /// The site of the node listening on `port`.
    pub fn site_of_port(&self, port: u16) -> Option<&str> {
        self.ports.get(&port.to_string()).map(String::as_str)
    }

    /// The site of the node listening on `ip`.
    pub fn site_of_host(&self, ip: std::net::IpAddr) -> Option<&str> {
        self.hosts.get(&ip.to_string()).map(String::as_str)
    }

    /// The site of the node listening at `addr`: by its IP address, else by
    /// its TCP port.
    pub fn site_of_addr(&self, addr: &Multiaddr) -> Option<&str> {
        let mut by_port = None;
        for protocol in addr.iter() {
            match protocol {
                Protocol::Ip4(ip) => {
                    if let Some(site) = self.site_of_host(ip.into()) {
                        return Some(site);
                    }
                }
                Protocol::Ip6(ip) => {
                    if let Some(site) = self.site_of_host(ip.into()) {
                        return Some(site);
                    }
                }
                Protocol::Tcp(port) => by_port = self.site_of_port(port),
                _ => {}
            }
        }
        by_port
    }
}

/// A [`Topology`] shared by the nodes of one process, to which each node
/// adds its own listen ports (see the [module documentation](self)). Sites
/// can also be cut off ([`isolate`](Self::isolate)): their connections stall
/// without closing, like a machine that froze or a cable pulled, which is
/// what ping timeouts are for.
#[derive(Debug, Clone, Default)]
pub struct SharedTopology {
    topology: Arc<RwLock<Topology>>,
    isolated: Arc<RwLock<BTreeSet<String>>>,
}

impl SharedTopology {
    /// Shares `topology`.
    pub fn new(topology: Topology) -> Self {
        SharedTopology {
            topology: Arc::new(RwLock::new(topology)),
            isolated: Arc::default(),
        }
    }

    /// Records that `port` is in `site`.
    pub fn assign_port(&self, port: u16, site: &str) {
        let mut topology = self.topology.write().unwrap_or_else(|e| e.into_inner());
        topology.ports.insert(port.to_string(), site.to_string());
    }

    /// A copy of the current topology.
    pub fn snapshot(&self) -> Topology {
        self.topology
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Cuts `site` off: traffic between it and other sites stalls (on
    /// connections made with emulation) until [`heal`](Self::heal).
    pub fn isolate(&self, site: &str) {
        let mut isolated = self.isolated.write().unwrap_or_else(|e| e.into_inner());
        isolated.insert(site.to_string());
    }

    /// Sets the RTT between sites `a` and `b` (within site `a` if they are
    /// the same), in whole milliseconds. Connections already open between
    /// the two sites take the new delay for every byte sent from now on.
    pub fn set_rtt(&self, a: &str, b: &str, rtt: Duration) -> Result<(), TopologyError> {
        let mut topology = self.topology.write().unwrap_or_else(|e| e.into_inner());
        for site in [a, b] {
            if !topology.sites.iter().any(|s| s.name == site) {
                return Err(TopologyError::UnknownSite(site.to_string()));
            }
        }
        let ms = u64::try_from(rtt.as_millis()).unwrap_or(u64::MAX);
        if a == b {
            if let Some(site) = topology.sites.iter_mut().find(|s| s.name == a) {
                site.rtt_within_ms = ms;
            }
            return Ok(());
        }
        let link = topology
            .links
            .iter_mut()
            .find(|l| (l.a == a && l.b == b) || (l.a == b && l.b == a));
        match link {
            Some(link) => link.rtt_ms = ms,
            None => topology.links.push(SiteLink {
                a: a.to_string(),
                b: b.to_string(),
                rtt_ms: ms,
            }),
        }
        Ok(())
    }

    /// Ends an [`isolate`](Self::isolate).
    pub fn heal(&self, site: &str) {
        let mut isolated = self.isolated.write().unwrap_or_else(|e| e.into_inner());
        isolated.remove(site);
    }

    /// Whether traffic between sites `a` and `b` is cut.
    pub fn is_cut(&self, a: &str, b: &str) -> bool {
        let isolated = self.isolated.read().unwrap_or_else(|e| e.into_inner());
        a != b && (isolated.contains(a) || isolated.contains(b))
    }

    /// The emulated RTT from a node of `site` to the node listening at
    /// `addr`, if the topology knows the address or its port.
    pub fn rtt_to(&self, site: &str, addr: &Multiaddr) -> Option<Duration> {
        self.route_to(site, addr).map(|(_, rtt)| rtt)
    }

    /// The site of the node listening at `addr` and the RTT to it from a
    /// node of `site`.
    pub(crate) fn route_to(&self, site: &str, addr: &Multiaddr) -> Option<(String, Duration)> {
        let topology = self.topology.read().unwrap_or_else(|e| e.into_inner());
        let remote = topology.site_of_addr(addr)?;
        Some((remote.to_string(), topology.rtt(site, remote)?))
    }
}

/// The two ends of an emulated connection: where its delay comes from.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// The topology.
    pub(crate) topology: SharedTopology,
    /// The dialer's site.
    pub(crate) local: String,
    /// The listener's site.
    pub(crate) remote: String,
}

/// How long each direction of a delayed connection waits, and whether it
/// is cut.
#[derive(Debug, Clone)]
pub(crate) enum Delay {
    /// Half the RTT between the route's sites, as the topology says now;
    /// stalled while the route is cut.
    Route(Route),
    /// A fixed one-way delay, never cut (tests of the stream itself).
    #[cfg(test)]
    Fixed(Duration),
}

impl Delay {
    /// The one-way delay for a chunk sent or received now.
    fn one_way(&self) -> Duration {
        match self {
            Delay::Route(route) => {
                let topology = route
                    .topology
                    .topology
                    .read()
                    .unwrap_or_else(|e| e.into_inner());
                topology
                    .rtt(&route.local, &route.remote)
                    .unwrap_or_default()
                    / 2
            }
            #[cfg(test)]
            Delay::Fixed(one_way) => *one_way,
        }
    }

    /// Waits while the route is cut.
    async fn wait_open(&self) {
        match self {
            Delay::Route(route) => {
                while route.topology.is_cut(&route.local, &route.remote) {
                    tokio::time::sleep(CUT_POLL).await;
                }
            }
            #[cfg(test)]
            Delay::Fixed(_) => {}
        }
    }
}

/// How often a stalled connection looks whether its cut has healed.
const CUT_POLL: Duration = Duration::from_millis(50);

/// Latency emulation for one node: the shared topology and the node's site.
#[derive(Debug, Clone)]
pub struct LatencyEmulation {
    /// The topology.
    pub topology: SharedTopology,
    /// This node's site; its listen ports are registered under it.
    pub site: String,
}

/// How many chunks may wait in each direction of a delayed connection: the
/// bound that gives the delaying tasks back-pressure.
const CHUNKS_IN_FLIGHT: usize = 64;
const READ_CHUNK: usize = 16 * 1024;

/// A connection as the transport hands it on: direct, or delayed.
pub(crate) enum MaybeDelayed<S> {
    /// No emulated latency on this connection.
    Direct(S),
    /// Emulated latency.
    Delayed(Delayed),
}

impl<S> MaybeDelayed<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    /// Wraps `stream`, delaying each direction as `delay` says (looked up
    /// anew for every chunk); without a delay, leaves the stream as it is.
    pub(crate) fn new(stream: S, delay: Option<Delay>) -> Self {
        let Some(delay) = delay else {
            return MaybeDelayed::Direct(stream);
        };
        let read_delay = delay.clone();
        let write_delay = delay.clone();
        let (mut read_half, mut write_half) = stream.split();
        let (in_tx, in_rx) = mpsc::channel::<(Instant, io::Result<Vec<u8>>)>(CHUNKS_IN_FLIGHT);
        let (out_tx, mut out_rx) = fmpsc::channel::<Outgoing>(CHUNKS_IN_FLIGHT);

        // Reader: stamp each chunk with the time it may be handed on.
        tokio::spawn(async move {
            let mut buf = vec![0u8; READ_CHUNK];
            loop {
                let read = tokio::select! {
                    read = read_half.read(&mut buf) => read,
                    // The connection was dropped: stop reading.
                    () = in_tx.closed() => break,
                };
                tokio::select! {
                    () = read_delay.wait_open() => {}
                    () = in_tx.closed() => break,
                }
                let due = Instant::now() + read_delay.one_way();
                let (chunk, last) = match read {
                    Ok(0) => (Ok(Vec::new()), true),
                    Ok(n) => (Ok(buf[..n].to_vec()), false),
                    Err(e) => (Err(e), true),
                };
                if in_tx.send((due, chunk)).await.is_err() || last {
                    break;
                }
            }
        });
        // Writer: send each chunk when it is due, in order: chunks are
        // pipelined rather than delays summed, and a chunk due before the
        // one ahead of it (the RTT dropped) goes right after it.
        tokio::spawn(async move {
            while let Some(item) = out_rx.next().await {
                match item {
                    Outgoing::Data(due, bytes) => {
                        tokio::time::sleep_until(due).await;
                        write_delay.wait_open().await;
                        if write_half.write_all(&bytes).await.is_err()
                            || write_half.flush().await.is_err()
                        {
                            return;
                        }
                    }
                    Outgoing::Close => break,
                }
            }
            let _ = write_half.close().await;
        });
        MaybeDelayed::Delayed(Delayed {
            delay,
            incoming: in_rx,
            pending: None,
            current: None,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            outgoing: out_tx,
            closing: false,
        })
    }
}

enum Outgoing {
    Data(Instant, Vec<u8>),
    Close,
}

/// The delayed form of a connection; the IO happens in two tasks.
pub(crate) struct Delayed {
    delay: Delay,
    incoming: mpsc::Receiver<(Instant, io::Result<Vec<u8>>)>,
    pending: Option<io::Result<Vec<u8>>>,
    current: Option<(Vec<u8>, usize)>,
    sleep: Pin<Box<Sleep>>,
    outgoing: fmpsc::Sender<Outgoing>,
    closing: bool,
}

fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "delayed connection closed")
}

impl Delayed {
    fn poll_read(&mut self, cx: &mut Context<'_>, out: &mut [u8]) -> Poll<io::Result<usize>> {
        loop {
            if let Some((buf, pos)) = &mut self.current {
                let n = out.len().min(buf.len() - *pos);
                out[..n].copy_from_slice(&buf[*pos..*pos + n]);
                *pos += n;
                if *pos == buf.len() {
                    self.current = None;
                }
                return Poll::Ready(Ok(n));
            }
            if self.pending.is_none() {
                match ready!(self.incoming.poll_recv(cx)) {
                    None => return Poll::Ready(Ok(0)),
                    Some((due, chunk)) => {
                        self.sleep.as_mut().reset(due);
                        self.pending = Some(chunk);
                    }
                }
            }
            ready!(self.sleep.as_mut().poll(cx));
            match self.pending.take() {
                Some(Ok(bytes)) if bytes.is_empty() => return Poll::Ready(Ok(0)),
                Some(Ok(bytes)) => self.current = Some((bytes, 0)),
                Some(Err(e)) => return Poll::Ready(Err(e)),
                None => {}
            }
        }
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.closing {
            return Poll::Ready(Err(broken()));
        }
        ready!(self.outgoing.poll_ready(cx)).map_err(|_| broken())?;
        let due = Instant::now() + self.delay.one_way();
        self.outgoing
            .start_send(Outgoing::Data(due, buf.to_vec()))
            .map_err(|_| broken())?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.closing {
            return Poll::Ready(Ok(()));
        }
        // If the writer is gone already there is nothing left to close.
        if ready!(self.outgoing.poll_ready(cx)).is_ok() {
            let _ = self.outgoing.start_send(Outgoing::Close);
        }
        self.closing = true;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for MaybeDelayed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeDelayed::Direct(s) => Pin::new(s).poll_read(cx, buf),
            MaybeDelayed::Delayed(d) => d.poll_read(cx, buf),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for MaybeDelayed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeDelayed::Direct(s) => Pin::new(s).poll_write(cx, buf),
            MaybeDelayed::Delayed(d) => d.poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeDelayed::Direct(s) => Pin::new(s).poll_flush(cx),
            // Data handed to the writer task is as good as sent: it goes out
            // when due, in order, and waiting for that here would add the
            // delay to every flush rather than once per chunk.
            MaybeDelayed::Delayed(_) => Poll::Ready(Ok(())),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeDelayed::Direct(s) => Pin::new(s).poll_close(cx),
            MaybeDelayed::Delayed(d) => d.poll_close(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_files_parse_and_are_checked() {
        let text = r#"
            default_rtt_ms = 100
            [[sites]]
            name = "a"
            rtt_within_ms = 2
            [[sites]]
            name = "b"
            rtt_within_ms = 3
            [[links]]
            a = "a"
            b = "b"
            rtt_ms = 40
            [hosts]
            "127.0.1.1" = "a"
            [ports]
            4001 = "a"
            4002 = "b"
        "#;
        let topology = Topology::from_toml_str(text).unwrap();
        assert_eq!(topology.rtt("a", "a"), Some(Duration::from_millis(2)));
        assert_eq!(topology.rtt("b", "a"), Some(Duration::from_millis(40)));
        assert_eq!(topology.site_of_port(4002), Some("b"));
        let shared = SharedTopology::new(topology);
        let addr: Multiaddr = "/ip4/127.0.0.1/tcp/4002".parse().unwrap();
        assert_eq!(shared.rtt_to("a", &addr), Some(Duration::from_millis(40)));
        // The host wins over the port.
        let addr: Multiaddr = "/ip4/127.0.1.1/tcp/4002".parse().unwrap();
        assert_eq!(shared.rtt_to("b", &addr), Some(Duration::from_millis(40)));
        assert_eq!(shared.rtt_to("a", &addr), Some(Duration::from_millis(2)));
        let unknown: Multiaddr = "/ip4/127.0.3.1/tcp/9".parse().unwrap();
        assert_eq!(shared.rtt_to("a", &unknown), None);
        assert!(matches!(
            Topology::from_toml_str(
                "[[sites]]\nname = \"a\"\nrtt_within_ms = 1\n[hosts]\n\"localhost\" = \"a\""
            ),
            Err(TopologyError::BadHost(_))
        ));

        assert!(matches!(
            Topology::from_toml_str("[ports]\n4001 = \"nowhere\""),
            Err(TopologyError::UnknownSite(_))
        ));
        assert!(matches!(
            Topology::from_toml_str(
                "[[sites]]\nname = \"a\"\nrtt_within_ms = 1\n[ports]\nx = \"a\""
            ),
            Err(TopologyError::BadPort(_))
        ));
        assert!(Topology::from_toml_str("sites = 3").is_err());
    }

    #[tokio::test]
    async fn a_delayed_stream_delays_each_direction_and_keeps_order() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut buf = [0u8; 5];
            socket.read_exact(&mut buf).await.unwrap();
            socket.write_all(&buf).await.unwrap();
        });
        let socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        let compat = TokioCompat(socket);
        let mut stream = MaybeDelayed::new(compat, Some(Delay::Fixed(Duration::from_millis(50))));
        let start = std::time::Instant::now();
        stream.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        stream.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");
        assert!(
            start.elapsed() >= Duration::from_millis(100),
            "{:?}",
            start.elapsed()
        );
        server.await.unwrap();
    }

    /// Echoes `bytes` through a stream delayed as `delay` says; returns the
    /// round trip time.
    async fn echo_time(stream: &mut MaybeDelayed<TokioCompat>, bytes: &[u8]) -> Duration {
        let start = std::time::Instant::now();
        stream.write_all(bytes).await.unwrap();
        let mut buf = vec![0u8; bytes.len()];
        stream.read_exact(&mut buf).await.unwrap();
        assert_eq!(buf, bytes);
        start.elapsed()
    }

    #[tokio::test]
    async fn an_open_connection_takes_a_new_rtt_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let (mut read, mut write) = socket.split();
            tokio::io::copy(&mut read, &mut write).await.unwrap();
        });
        let topology = SharedTopology::new(
            Topology::from_toml_str(
                "[[sites]]\nname = \"a\"\nrtt_within_ms = 1\n\
                 [[sites]]\nname = \"b\"\nrtt_within_ms = 1\n\
                 [[links]]\na = \"a\"\nb = \"b\"\nrtt_ms = 20",
            )
            .unwrap(),
        );
        let socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        let route = Route {
            topology: topology.clone(),
            local: "a".into(),
            remote: "b".into(),
        };
        let mut stream = MaybeDelayed::new(TokioCompat(socket), Some(Delay::Route(route)));
        let before = echo_time(&mut stream, b"one").await;
        assert!(
            before >= Duration::from_millis(20) && before < Duration::from_millis(150),
            "{before:?}"
        );
        // Either way round names the same link.
        topology
            .set_rtt("b", "a", Duration::from_millis(150))
            .unwrap();
        assert_eq!(
            topology.snapshot().rtt("a", "b"),
            Some(Duration::from_millis(150))
        );
        let after = echo_time(&mut stream, b"two").await;
        assert!(after >= Duration::from_millis(150), "{after:?}");
        topology
            .set_rtt("a", "b", Duration::from_millis(2))
            .unwrap();
        let back = echo_time(&mut stream, b"three").await;
        assert!(back < Duration::from_millis(100), "{back:?}");

        assert!(matches!(
            topology.set_rtt("a", "nowhere", Duration::from_millis(5)),
            Err(TopologyError::UnknownSite(_))
        ));
        topology
            .set_rtt("b", "b", Duration::from_millis(7))
            .unwrap();
        assert_eq!(
            topology.snapshot().rtt("b", "b"),
            Some(Duration::from_millis(7))
        );
        drop(stream);
        server.await.unwrap();
    }

    /// Minimal tokio-to-futures IO adapter for the test.
    struct TokioCompat(tokio::net::TcpStream);
    impl AsyncRead for TokioCompat {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            let mut rb = tokio::io::ReadBuf::new(buf);
            ready!(tokio::io::AsyncRead::poll_read(
                Pin::new(&mut self.0),
                cx,
                &mut rb
            ))?;
            Poll::Ready(Ok(rb.filled().len()))
        }
    }
    impl AsyncWrite for TokioCompat {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            tokio::io::AsyncWrite::poll_write(Pin::new(&mut self.0), cx, buf)
        }
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            tokio::io::AsyncWrite::poll_flush(Pin::new(&mut self.0), cx)
        }
        fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            tokio::io::AsyncWrite::poll_shutdown(Pin::new(&mut self.0), cx)
        }
    }
}

//! What goes over the wire: the frames of our two protocols and the codec
//! that reads and writes them.
//!
//! Both protocols run over libp2p's request-response machinery, one stream
//! per message, so a frame is simply the whole stream: CBOR (ciborium) up to
//! the end of the stream, never more than the configured cap. A frame that is
//! too large or does not decode fails the stream with an
//! [`io::ErrorKind::InvalidData`] error, which the event loop counts against
//! the sending peer.
//!
//! # Memory
//!
//! A frame has no length prefix: the codec reads a stream as its bytes
//! arrive, at most [`READ_CHUNK`] at a time and never more than the cap, so
//! a stream's buffer is at most about twice what has arrived (64 bytes for
//! a stream that has sent nothing). All inbound requests being
//! read at once, over every connection and both protocols, share one
//! [`ReadBudget`] ([`MAX_INBOUND_REQUEST_BYTES`], or twice the frame cap if
//! that is more): a request that would take more fails as a transport
//! error (not counted against its sender, who may be innocent), so the
//! buffers of inbound requests never exceed the budget whoever sends them.
//! Noise only proves a peer id, which anyone can make, so every peer gets
//! the same treatment, strangers and neighbours alike. Per connection,
//! libp2p's request-response runs at most [`MAX_STREAMS_PER_CONNECTION`]
//! streams per protocol at once (inbound and outbound together) and drops
//! inbound streams above that unread; each read ends with the request
//! timeout. Responses are read without the budget: they answer our own
//! requests, of which there are as many as we chose to send, each at most
//! the cap.
//!
//! Versioning is in the protocol names (`/zorilla/<network>/flood/1`,
//! `/zorilla/<network>/rpc/4`): a change to these types that old nodes cannot
//! read gets a new number, and libp2p's protocol negotiation keeps old and
//! new nodes from misreading each other.

use std::io;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use libp2p::{Multiaddr, PeerId, StreamProtocol};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use zorilla_core::advert::FloodHeader;
use zorilla_core::flood::FloodId;
use zorilla_core::vivaldi::{Coord, Position};

/// The flood protocol's name on network `network`.
pub(crate) fn flood_protocol(network: &str) -> String {
    format!("/zorilla/{network}/flood/1")
}

/// The ranks stream protocol's name on network `network`. Version 3: a
/// new channel's initial credit is zorilla-core's `INITIAL_WINDOW` (16 KiB)
/// instead of 4 MiB, credit counts each message's overhead, and a sender
/// asks whenever it is short of credit with everything acknowledged.
pub(crate) fn ranks_protocol(network: &str) -> String {
    format!("/zorilla/{network}/ranks/5")
}

/// The request-response protocol's name on network `network`. Version 4:
/// the node's requests name their concern first (`PeerRpc::Member(..)`,
/// `PeerRpc::File(..)`, ...: zorilla-node's `wire`). Version 3:
/// peers exchange network coordinates ([`RpcRequest::Coordinates`]).
/// Version 2: the scheduling messages name the member's hold they are
/// about (zorilla-core's `HoldId`).
pub(crate) fn rpc_protocol(network: &str) -> String {
    format!("/zorilla/{network}/rpc/4")
}

/// The identify protocol version of network `network`: peers announcing
/// another one belong to another grid and are refused.
pub(crate) fn identify_version(network: &str) -> String {
    format!("/zorilla/{network}/1")
}

/// One copy of a flood, as sent from a node to one of its neighbours.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FloodFrame {
    /// Which flood this copy belongs to.
    pub(crate) id: FloodId,
    /// The node that started the flood (the job's home): the receiver looks
    /// up its own RTT to it for the latency budget.
    pub(crate) origin: PeerId,
    /// TTL, latency budget and path RTT of this copy.
    pub(crate) header: FloodHeader,
    /// The application's payload (the node's CBOR-encoded advert).
    #[serde(with = "serde_bytes")]
    pub(crate) payload: Vec<u8>,
    /// The other peers the sender sent this flood to, each by its
    /// [`peer_digest`]: the receiver sends them no copy, since theirs came
    /// straight from the sender (the flood router's rule 4, as the
    /// simulator does). At most [`MAX_FLOOD_RECIPIENTS`]; a frame without
    /// it (an earlier node's) names none. Digests rather than peer ids:
    /// 9 bytes of CBOR each instead of 40, so the list saves more frames
    /// than it costs bytes. A sender can keep a receiver from passing the
    /// flood to a peer by naming it, as it could by not forwarding at all;
    /// the peer's other links still bring it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) also: Vec<u64>,
}

/// A short name of a peer in flood frames: the last 8 bytes of its id (of
/// its public key, or of the key's hash), which differ between the few
/// peers a node links to but for a chance of about 2^-58.
pub(crate) fn peer_digest(peer: &PeerId) -> u64 {
    let bytes = peer.to_bytes();
    let mut last = [0u8; 8];
    let n = bytes.len().min(8);
    last[8 - n..].copy_from_slice(&bytes[bytes.len() - n..]);
    u64::from_be_bytes(last)
}

/// The most peers a flood frame names as the sender's other recipients:
/// more than any node's links (a sender with more names none).
pub(crate) const MAX_FLOOD_RECIPIENTS: usize = 64;

/// The flood protocol's answer: only an acknowledgement, because
/// request-response streams need one. It carries nothing so that a flood
/// costs one frame per link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FloodAck;

/// A peer and the addresses it listens on, as exchanged by peer exchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PeerRecord {
    /// The peer.
    pub(crate) peer: PeerId,
    /// Where it listens.
    pub(crate) addrs: Vec<Multiaddr>,
}

/// A node's network coordinate and error, as it tells a peer: checked when
/// decoded (every component finite and within zorilla-core's
/// `vivaldi::MAX_COMPONENT_MS`, the error in `0..=1`), so that one out of
/// range is a malformed frame, counted against its sender.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "CoordinateFields", into = "CoordinateFields")]
pub(crate) struct CoordinateFrame(pub(crate) Position);

/// [`CoordinateFrame`]'s fields on the wire (milliseconds; the error a
/// fraction).
#[derive(Serialize, Deserialize)]
struct CoordinateFields {
    x: f64,
    y: f64,
    height: f64,
    error: f64,
}

impl TryFrom<CoordinateFields> for CoordinateFrame {
    type Error = String;

    fn try_from(f: CoordinateFields) -> Result<Self, String> {
        let position = Position {
            coord: Coord {
                x: f.x,
                y: f.y,
                height: f.height,
            },
            error: f.error,
        };
        match position.check() {
            Ok(()) => Ok(CoordinateFrame(position)),
            Err(why) => Err(format!("network coordinate refused: {why}")),
        }
    }
}

impl From<CoordinateFrame> for CoordinateFields {
    fn from(CoordinateFrame(p): CoordinateFrame) -> Self {
        CoordinateFields {
            x: p.coord.x,
            y: p.coord.y,
            height: p.coord.height,
            error: p.error,
        }
    }
}

/// A request on the rpc protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum RpcRequest {
    /// Peer exchange: "which peers do you know?"
    Peers,
    /// "You are (`true`) or are no longer (`false`) my neighbour": links
    /// are used in both directions, so the chosen side forwards floods to
    /// the chooser too and keeps the connection open.
    Link(bool),
    /// An opaque request of the application (the node).
    App(#[serde(with = "serde_bytes")] Vec<u8>),
    /// "Here is my network coordinate; what is yours?" (answered with
    /// [`RpcResponse::Coordinates`]).
    Coordinates(CoordinateFrame),
}

/// A response on the rpc protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum RpcResponse {
    /// Peer exchange: some peers the responder knows.
    Peers(Vec<PeerRecord>),
    /// The application's opaque answer.
    App(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Acknowledges a [`RpcRequest::Link`].
    Done,
    /// The responder's network coordinate, answering
    /// [`RpcRequest::Coordinates`].
    Coordinates(CoordinateFrame),
}

/// Encodes `value` as CBOR.
pub(crate) fn encode<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    ciborium::into_writer(value, &mut buf)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    Ok(buf)
}

/// Decodes one CBOR value that must fill all of `buf`.
pub(crate) fn decode<T: DeserializeOwned>(buf: &[u8]) -> io::Result<T> {
    crate::cbor::check_lengths(buf)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("malformed frame: {e}")))?;
    let mut reader = buf;
    let value = ciborium::from_reader(&mut reader)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("malformed frame: {e}")))?;
    if !reader.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("malformed frame: {} bytes after the value", reader.len()),
        ));
    }
    Ok(value)
}

/// The most bytes one read of a stream asks for: a stream's buffer grows
/// by at most this much beyond what has arrived.
pub(crate) const READ_CHUNK: usize = 8 * 1024;
/// The first read of a stream asks for this many bytes; each next one for
/// as many as have come, up to [`READ_CHUNK`].
const FIRST_READ: usize = 64;
/// The most bytes of inbound requests being read at once, over all
/// connections and both protocols (see the module doc): 32 MiB, room for
/// 32 requests of the default 1 MiB cap at once.
pub(crate) const MAX_INBOUND_REQUEST_BYTES: usize = 32 * 1024 * 1024;
/// Streams of one protocol open at once on one connection (libp2p's
/// request-response default, made explicit): inbound streams above it are
/// dropped unread.
pub(crate) const MAX_STREAMS_PER_CONNECTION: usize = 100;

/// Bytes of buffer that the inbound requests being read may hold together,
/// shared by every codec of a node (clones share the count).
#[derive(Debug, Clone)]
pub(crate) struct ReadBudget {
    used: Arc<AtomicUsize>,
    max: usize,
}

impl ReadBudget {
    /// A budget of `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        ReadBudget {
            used: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    /// Takes `n` bytes, if that many are left.
    fn take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= self.max)
            })
            .is_ok()
    }

    /// Bytes held now.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// Bytes taken from a budget, given back when dropped (when the request
/// has been decoded, or its read failed or was abandoned).
struct Held {
    budget: Option<ReadBudget>,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

/// Reads a whole stream of at most `max` bytes, growing the buffer as bytes
/// arrive; its capacity is taken from `budget` (if any) before it is
/// allocated, and held until the returned [`Held`] is dropped.
async fn read_capped<T: AsyncRead + Unpin + Send>(
    io: &mut T,
    max: usize,
    budget: Option<&ReadBudget>,
) -> io::Result<(Vec<u8>, Held)> {
    let mut held = Held {
        budget: budget.cloned(),
        bytes: 0,
    };
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let len = buf.len();
        // Small reads while little has come (an idle stream holds 64
        // bytes), up to READ_CHUNK. One byte more than allowed tells
        // "exactly at the cap" from "over it".
        let want = (max + 1 - len).min(len.clamp(FIRST_READ, READ_CHUNK));
        if buf.capacity() < len + want {
            // Growing by half of what has arrived at least (so that a large
            // frame is not copied once per chunk), but never past the cap:
            // a reader holds at most 2 x its bytes + FIRST_READ, and the
            // read that finds the end reserves little beyond them.
            let doubled = buf
                .capacity()
                .saturating_mul(2)
                .min(len.saturating_add(len / 2))
                .min(max + 1);
            let target = (len + want).max(doubled);
            let more = target - buf.capacity();
            if let Some(budget) = budget {
                if !budget.take(more) {
                    return Err(io::Error::new(
                        io::ErrorKind::OutOfMemory,
                        "inbound requests hold all the memory allowed them; \
                         this one is dropped",
                    ));
                }
                held.bytes += more;
            }
            buf.reserve_exact(target - len);
        }
        buf.resize(len + want, 0);
        let n = io.read(&mut buf[len..]).await?;
        buf.truncate(len + n);
        if n == 0 {
            break;
        }
        if buf.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("oversized frame: more than {max} bytes"),
            ));
        }
    }
    Ok((buf, held))
}

async fn write_capped<T: AsyncWrite + Unpin + Send>(
    io: &mut T,
    buf: io::Result<Vec<u8>>,
    max: usize,
) -> io::Result<()> {
    let buf = buf?;
    if buf.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("frame of {} bytes exceeds the cap of {max}", buf.len()),
        ));
    }
    io.write_all(&buf).await?;
    io.flush().await
}

/// An inbound request as the codec hands it on: decoded, or why not.
///
/// libp2p's request-response only logs a request that fails to read and
/// does not say from whom, so the codec turns a bad frame into a request of
/// its own kind: the event loop then knows the sender and counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Checked<T> {
    /// A well-formed request.
    Valid(T),
    /// A malformed or oversized frame, and what was wrong with it.
    Invalid(String),
}

/// A request-response codec for CBOR frames with a size cap.
pub(crate) struct CborCodec<Req, Resp> {
    max: usize,
    /// Shared by the inbound requests of every connection.
    budget: Option<ReadBudget>,
    // fn() keeps the codec Send and Sync whatever the message types are.
    _types: PhantomData<fn() -> (Req, Resp)>,
}

impl<Req, Resp> CborCodec<Req, Resp> {
    /// A codec that refuses frames of more than `max` bytes, and reads
    /// inbound requests within `budget` (if any).
    pub(crate) fn new(max: usize, budget: Option<ReadBudget>) -> Self {
        CborCodec {
            max,
            budget,
            _types: PhantomData,
        }
    }
}

impl<Req, Resp> Clone for CborCodec<Req, Resp> {
    fn clone(&self) -> Self {
        CborCodec::new(self.max, self.budget.clone())
    }
}

impl<Req, Resp> libp2p::request_response::Codec for CborCodec<Req, Resp>
where
    Req: Serialize + DeserializeOwned + Send,
    Resp: Serialize + DeserializeOwned + Send,
{
    type Protocol = StreamProtocol;
    type Request = Checked<Req>;
    type Response = Resp;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Checked<Req>>
    where
        T: AsyncRead + Unpin + Send,
    {
        let checked = match read_capped(io, self.max, self.budget.as_ref()).await {
            // The buffer's budget is given back once it is decoded.
            Ok((buf, _held)) => decode(&buf),
            Err(e) => Err(e),
        };
        match checked {
            Ok(request) => Ok(Checked::Valid(request)),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(Checked::Invalid(e.to_string())),
            // Transport errors are nobody's misbehaviour.
            Err(e) => Err(e),
        }
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Resp>
    where
        T: AsyncRead + Unpin + Send,
    {
        let (buf, _held) = read_capped(io, self.max, None).await?;
        if buf.is_empty() {
            // The responder closed the stream without answering (its
            // application dropped the request, or it refused ours as
            // malformed): a failed request, not a malformed frame to count
            // against it.
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "no response: the peer closed the stream without answering",
            ));
        }
        decode(&buf)
    }

    async fn write_request<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Checked<Req>,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        // Encoded before the await: the message need not be Sync.
        let buf = match req {
            Checked::Valid(req) => encode(&req),
            Checked::Invalid(reason) => Err(io::Error::new(io::ErrorKind::InvalidInput, reason)),
        };
        write_capped(io, buf, self.max).await
    }

    async fn write_response<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        res: Resp,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        let buf = encode(&res);
        write_capped(io, buf, self.max).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use zorilla_core::advert::JobId;

    #[test]
    fn payloads_larger_than_ciboriums_scratch_buffer_round_trip() {
        for len in [0, 4095, 4096, 4097, 64 * 1024, 900 * 1024] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let buf = encode(&RpcRequest::App(payload.clone())).unwrap();
            match decode::<RpcRequest>(&buf).unwrap() {
                RpcRequest::App(back) => assert_eq!(back, payload, "{len} bytes"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn flood_frames_round_trip_and_payload_is_a_byte_string() {
        let frame = FloodFrame {
            id: FloodId {
                job: JobId(7),
                seq: 2,
            },
            origin: PeerId::random(),
            header: FloodHeader {
                seq: 2,
                ttl: 3,
                latency_budget: Some(Duration::from_millis(40)),
                path_rtt: Duration::from_millis(3),
            },
            payload: vec![200; 1000],
            also: Vec::new(),
        };
        let buf = encode(&frame).unwrap();
        // 1000 payload bytes as integers >= 24 would take 2000 bytes.
        assert!(buf.len() < 1200, "{} bytes", buf.len());
        assert_eq!(decode::<FloodFrame>(&buf).unwrap(), frame);
        // The sender's other recipients go with a copy; a frame without
        // them (as earlier nodes send) reads as naming none.
        let with_others = FloodFrame {
            also: vec![
                peer_digest(&PeerId::random()),
                peer_digest(&PeerId::random()),
            ],
            ..frame.clone()
        };
        let buf = encode(&with_others).unwrap();
        assert_eq!(decode::<FloodFrame>(&buf).unwrap(), with_others);
    }

    #[test]
    fn peer_digests_tell_peers_apart_and_stay_the_same() {
        let peers: Vec<PeerId> = (0..1000).map(|_| PeerId::random()).collect();
        let digests: std::collections::BTreeSet<u64> = peers.iter().map(peer_digest).collect();
        assert_eq!(digests.len(), peers.len());
        assert_eq!(peer_digest(&peers[0]), peer_digest(&peers[0].clone()));
    }

    #[test]
    fn garbage_and_trailing_bytes_are_errors_not_panics() {
        for garbage in [
            &b""[..],
            b"\xff\xff\xff",
            b"\x9f\x9f\x9f\x9f",
            b"hello world",
        ] {
            let err = decode::<RpcRequest>(garbage).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        }
        let mut buf = encode(&RpcRequest::Peers).unwrap();
        buf.push(0);
        assert!(decode::<RpcRequest>(&buf).is_err());
    }

    #[test]
    fn coordinates_round_trip_and_out_of_range_ones_do_not_decode() {
        let ours = CoordinateFrame(Position {
            coord: Coord {
                x: -12.5,
                y: 40.0,
                height: 0.7,
            },
            error: 0.25,
        });
        let request = RpcRequest::Coordinates(ours);
        assert_eq!(
            decode::<RpcRequest>(&encode(&request).unwrap()).unwrap(),
            request
        );
        let answer = RpcResponse::Coordinates(ours);
        assert_eq!(
            decode::<RpcResponse>(&encode(&answer).unwrap()).unwrap(),
            answer
        );
        // The wire shape, as another implementation writes it:
        // {"Coordinates": {"x": 1.5, "y": 0.0, "height": 1.0, "error": 0.5}}
        // (half-precision floats), and with a NaN for x.
        let written = b"\xa1\x6bCoordinates\xa4\x61x\xf9\x3e\x00\x61y\xf9\x00\x00\x66height\xf9\x3c\x00\x65error\xf9\x38\x00";
        let RpcRequest::Coordinates(CoordinateFrame(read)) = decode(written).unwrap() else {
            panic!("not a coordinate");
        };
        assert_eq!(
            (read.coord.x, read.coord.height, read.error),
            (1.5, 1.0, 0.5)
        );
        let nan = b"\xa1\x6bCoordinates\xa4\x61x\xf9\x7e\x00\x61y\xf9\x00\x00\x66height\xf9\x3c\x00\x65error\xf9\x38\x00";
        let err = decode::<RpcRequest>(nan).unwrap_err();
        assert!(
            err.to_string().contains("network coordinate refused"),
            "{err}"
        );
        let max = zorilla_core::vivaldi::MAX_COMPONENT_MS;
        let bad = [
            (f64::NAN, 1.0, 1.0, 0.5),
            (1.0, f64::INFINITY, 1.0, 0.5),
            (max * 2.0, 1.0, 1.0, 0.5),
            (1.0, 1.0, -1.0, 0.5),
            (1.0, 1.0, 1.0, 1.5),
            (1.0, 1.0, 1.0, f64::NAN),
        ];
        // The variant as a peer could send it, with any numbers.
        #[derive(Serialize)]
        enum Raw {
            Coordinates(CoordinateFields),
        }
        for (x, y, height, error) in bad {
            let raw = Raw::Coordinates(CoordinateFields {
                x,
                y,
                height,
                error,
            });
            let err = decode::<RpcRequest>(&encode(&raw).unwrap()).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            assert!(
                err.to_string().contains("network coordinate refused"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_cap_is_enforced_on_both_sides() {
        futures::executor::block_on(async {
            let mut codec = CborCodec::<RpcRequest, RpcResponse>::new(64, None);
            let proto = StreamProtocol::new("/test/1");
            let mut out = futures::io::Cursor::new(Vec::new());
            let big = RpcRequest::App(vec![1; 100]);
            use libp2p::request_response::Codec;
            assert!(
                codec
                    .write_request(&proto, &mut out, Checked::Valid(big))
                    .await
                    .is_err()
            );
            let small = Checked::Valid(RpcRequest::App(vec![1; 10]));
            codec
                .write_request(&proto, &mut out, small.clone())
                .await
                .unwrap();
            let mut input = futures::io::Cursor::new(out.into_inner());
            assert_eq!(codec.read_request(&proto, &mut input).await.unwrap(), small);

            let oversized = encode(&RpcRequest::App(vec![1; 100])).unwrap();
            let mut input = futures::io::Cursor::new(oversized);
            let read = codec.read_request(&proto, &mut input).await.unwrap();
            assert!(matches!(read, Checked::Invalid(reason) if reason.contains("oversized")));
            let mut input = futures::io::Cursor::new(b"\xff\x00junk".to_vec());
            let read = codec.read_request(&proto, &mut input).await.unwrap();
            assert!(matches!(read, Checked::Invalid(reason) if reason.contains("malformed")));
        });
    }

    /// Gives out its bytes a few at a time, as a slow peer does.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut [u8],
        ) -> std::task::Poll<io::Result<usize>> {
            let n = self.step.min(buf.len()).min(self.data.len() - self.at);
            let at = self.at;
            buf[..n].copy_from_slice(&self.data[at..at + n]);
            self.at += n;
            std::task::Poll::Ready(Ok(n))
        }
    }

    #[test]
    fn buffers_grow_with_what_arrives_and_within_the_budget() {
        futures::executor::block_on(async {
            let budget = ReadBudget::new(64 * 1024);
            // A slow sender: the buffer stays within twice what came.
            let mut slow = Trickle {
                data: vec![7; 10_000],
                at: 0,
                step: 100,
            };
            let (buf, held) = read_capped(&mut slow, 1 << 20, Some(&budget))
                .await
                .unwrap();
            assert_eq!(buf.len(), 10_000);
            assert!(buf.capacity() <= 2 * 10_000 + 64, "{}", buf.capacity());
            assert_eq!(budget.used(), held.bytes);
            assert!(held.bytes >= buf.capacity());
            drop(held);
            assert_eq!(budget.used(), 0);
            // Two reads at once share the budget: the second one that
            // would pass it fails as a transport error, not bad data.
            let mut first = Trickle {
                data: vec![1; 40 * 1024],
                at: 0,
                step: 4096,
            };
            let (_, first_held) = read_capped(&mut first, 1 << 20, Some(&budget))
                .await
                .unwrap();
            let mut second = Trickle {
                data: vec![2; 40 * 1024],
                at: 0,
                step: 4096,
            };
            let err = read_capped(&mut second, 1 << 20, Some(&budget))
                .await
                .err()
                .unwrap();
            assert_eq!(err.kind(), io::ErrorKind::OutOfMemory);
            // The failed read gave its share back.
            assert_eq!(budget.used(), first_held.bytes);
            drop(first_held);
            assert_eq!(budget.used(), 0);
        });
    }

    #[test]
    fn an_omitted_response_is_no_malformed_frame() {
        futures::executor::block_on(async {
            use libp2p::request_response::Codec;
            let mut codec = CborCodec::<RpcRequest, RpcResponse>::new(64, None);
            let proto = StreamProtocol::new("/test/1");
            // Only InvalidData counts against the responder.
            let mut empty = futures::io::Cursor::new(Vec::new());
            let err = codec.read_response(&proto, &mut empty).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
            let mut garbage = futures::io::Cursor::new(b"\xff".to_vec());
            let err = codec.read_response(&proto, &mut garbage).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        });
    }
}

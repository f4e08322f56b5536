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
//! Versioning is in the protocol names (`/zorilla/<network>/flood/1`,
//! `/zorilla/<network>/rpc/1`): a change to these types that old nodes cannot
//! read gets a new number, and libp2p's protocol negotiation keeps old and
//! new nodes from misreading each other.

use std::io;
use std::marker::PhantomData;

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use libp2p::{Multiaddr, PeerId, StreamProtocol};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use zorilla_core::advert::FloodHeader;
use zorilla_core::flood::FloodId;

/// The flood protocol's name on network `network`.
pub(crate) fn flood_protocol(network: &str) -> String {
    format!("/zorilla/{network}/flood/1")
}

/// The request-response protocol's name on network `network`.
pub(crate) fn rpc_protocol(network: &str) -> String {
    format!("/zorilla/{network}/rpc/1")
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
}

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

/// A request on the rpc protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum RpcRequest {
    /// Peer exchange: "which peers do you know?"
    Peers,
    /// "You are (`true`) or are no longer (`false`) my neighbour": links
    /// are used in both directions, so the chosen side forwards floods to
    /// the chooser too and keeps the connection open.
    Link(bool),
    /// An opaque request of the application (the node).
    App(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// A response on the rpc protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum RpcResponse {
    /// Peer exchange: some peers the responder knows.
    Peers(Vec<PeerRecord>),
    /// The application's opaque answer.
    App(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Acknowledges a [`RpcRequest::Link`].
    Done,
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

/// Reads a whole stream of at most `max` bytes.
async fn read_capped<T: AsyncRead + Unpin + Send>(io: &mut T, max: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    // One byte more than allowed tells "exactly at the cap" from "over it".
    io.take(max as u64 + 1).read_to_end(&mut buf).await?;
    if buf.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("oversized frame: more than {max} bytes"),
        ));
    }
    Ok(buf)
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
    // fn() keeps the codec Send and Sync whatever the message types are.
    _types: PhantomData<fn() -> (Req, Resp)>,
}

impl<Req, Resp> CborCodec<Req, Resp> {
    /// A codec that refuses frames of more than `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        CborCodec {
            max,
            _types: PhantomData,
        }
    }
}

impl<Req, Resp> Clone for CborCodec<Req, Resp> {
    fn clone(&self) -> Self {
        CborCodec::new(self.max)
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
        let checked = match read_capped(io, self.max).await {
            Ok(buf) => decode(&buf),
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
        let buf = read_capped(io, self.max).await?;
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
        };
        let buf = encode(&frame).unwrap();
        // 1000 payload bytes as integers >= 24 would take 2000 bytes.
        assert!(buf.len() < 1200, "{} bytes", buf.len());
        assert_eq!(decode::<FloodFrame>(&buf).unwrap(), frame);
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
    fn the_cap_is_enforced_on_both_sides() {
        futures::executor::block_on(async {
            let mut codec = CborCodec::<RpcRequest, RpcResponse>::new(64);
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

    #[test]
    fn an_omitted_response_is_no_malformed_frame() {
        futures::executor::block_on(async {
            use libp2p::request_response::Codec;
            let mut codec = CborCodec::<RpcRequest, RpcResponse>::new(64);
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

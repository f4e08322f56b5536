//! Entry points for the fuzz harness (`overlay/tests/fuzz.rs`), not an API:
//! the overlay's decoders of bytes from peers, by name, and valid encodings
//! of random values of the (private) frame types for the harness to mutate.
//!
//! Each [`Decoder`] goes through the code the overlay runs on a real
//! stream, so whatever checks it makes run under the fuzzer too.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::io::Cursor;
use libp2p::StreamProtocol;
use libp2p::multiaddr::Protocol;
use libp2p::request_response::Codec;
use zorilla_core::advert::{FloodHeader, JobId};
use zorilla_core::channel::{
    Ack, CHUNK_BYTES, ChannelId, Chunk, Inbound, Outbox, RankReceiver, Received,
};
use zorilla_core::flood::FloodId;
use zorilla_core::vivaldi::{Coord, MIN_HEIGHT_MS, Position};

use crate::membership::gate::Frame as MembershipFrame;
use crate::membership::{Credential, GridKey, Revocation, RevocationTarget};
use crate::streams::protocol::{self, Frame, Refusal};
use crate::wire::{
    self, CborCodec, Checked, CoordinateFrame, FloodAck, FloodFrame, PeerRecord, ReadBudget,
    RpcRequest, RpcResponse,
};
use crate::{Multiaddr, PeerId};

/// The frame cap of the stream decoders here: small enough that mutated
/// samples cross it.
pub const STREAM_CAP: usize = 4096;

/// A decoder of bytes from peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoder {
    /// A flood frame, as the flood protocol reads a request stream
    /// (`read_capped`, then CBOR).
    FloodStream,
    /// The flood protocol's acknowledgement, read from a response stream.
    FloodAckStream,
    /// An rpc request (peer exchange, links, the node's requests), read
    /// from a request stream.
    RpcRequestStream,
    /// An rpc response (peer records, the node's answers), read from a
    /// response stream.
    RpcResponseStream,
    /// A flood frame's CBOR alone.
    FloodFrame,
    /// An rpc request's CBOR alone.
    RpcRequest,
    /// An rpc response's CBOR alone.
    RpcResponse,
    /// The ranks stream (messages between workers): frame after frame, as
    /// a node's link reads them, each chunk taken in by its channel's
    /// receiving end and each acknowledgement by the sending side.
    RanksStream,
    /// A membership credential (a peer's hello), decoded and checked
    /// against its own grid key: every signature and link.
    Credential,
    /// A revocation, decoded and its signature checked.
    Revocation,
    /// A frame of the membership protocol's CBOR.
    MembershipFrame,
}

impl Decoder {
    /// Every decoder.
    pub const ALL: [Decoder; 11] = [
        Decoder::FloodStream,
        Decoder::FloodAckStream,
        Decoder::RpcRequestStream,
        Decoder::RpcResponseStream,
        Decoder::FloodFrame,
        Decoder::RpcRequest,
        Decoder::RpcResponse,
        Decoder::RanksStream,
        Decoder::Credential,
        Decoder::Revocation,
        Decoder::MembershipFrame,
    ];
}

fn read_request<Req, Resp>(bytes: &[u8]) -> Result<(), String>
where
    Req: serde::Serialize + serde::de::DeserializeOwned + Send,
    Resp: serde::Serialize + serde::de::DeserializeOwned + Send,
{
    // Inbound requests are read within a budget, as the overlay reads them.
    let budget = ReadBudget::new(crate::wire::MAX_INBOUND_REQUEST_BYTES);
    let mut codec = CborCodec::<Req, Resp>::new(STREAM_CAP, Some(budget));
    let proto = StreamProtocol::new("/fuzz/1");
    let mut io = Cursor::new(bytes);
    match futures::executor::block_on(codec.read_request(&proto, &mut io)) {
        Ok(Checked::Valid(_)) => Ok(()),
        Ok(Checked::Invalid(why)) => Err(why),
        Err(e) => Err(e.to_string()),
    }
}

fn read_response<Req, Resp>(bytes: &[u8]) -> Result<(), String>
where
    Req: serde::Serialize + serde::de::DeserializeOwned + Send,
    Resp: serde::Serialize + serde::de::DeserializeOwned + Send,
{
    let mut codec = CborCodec::<Req, Resp>::new(STREAM_CAP, None);
    let proto = StreamProtocol::new("/fuzz/1");
    let mut io = Cursor::new(bytes);
    futures::executor::block_on(codec.read_response(&proto, &mut io))
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Runs decoder `d` over `bytes` as the overlay would; returns whether the
/// value decoded, and why not.
pub fn decode(d: Decoder, bytes: &[u8]) -> Result<(), String> {
    let cbor = |r: std::io::Result<()>| r.map_err(|e| e.to_string());
    match d {
        Decoder::FloodStream => read_request::<FloodFrame, FloodAck>(bytes),
        Decoder::FloodAckStream => read_response::<FloodFrame, FloodAck>(bytes),
        Decoder::RpcRequestStream => read_request::<RpcRequest, RpcResponse>(bytes),
        Decoder::RpcResponseStream => read_response::<RpcRequest, RpcResponse>(bytes),
        Decoder::FloodFrame => cbor(wire::decode::<FloodFrame>(bytes).map(drop)),
        Decoder::RpcRequest => cbor(wire::decode::<RpcRequest>(bytes).map(drop)),
        Decoder::RpcResponse => cbor(wire::decode::<RpcResponse>(bytes).map(drop)),
        Decoder::RanksStream => read_ranks_stream(bytes),
        Decoder::Credential => {
            let credential = Credential::from_bytes(bytes).map_err(|e| e.to_string())?;
            let grid = credential.body().grid;
            credential
                .verify(&grid, 0, &|_, _| false)
                .map(drop)
                .map_err(|e| e.to_string())
        }
        Decoder::Revocation => Revocation::from_bytes(bytes, &fuzz_grid().public())
            .map(drop)
            .map_err(|e| e.to_string()),
        Decoder::MembershipFrame => cbor(wire::decode::<MembershipFrame>(bytes).map(drop)),
    }
}

/// The channel the sending side of [`read_ranks_stream`] has messages on,
/// so that acknowledgements for it reach real state.
const SENT_ON: ChannelId = ChannelId {
    job: 7,
    from: 1,
    from_incarnation: 2,
    to: 3,
    to_incarnation: 4,
};

/// The channels one fuzzed stream may open: a node refuses data for ranks
/// that are not its own, so a stream cannot open many.
const STREAM_CHANNELS: usize = 64;

fn read_ranks_stream(bytes: &[u8]) -> Result<(), String> {
    let mut outbox = Outbox::new();
    for len in [3, 0, 100] {
        outbox.push(SENT_ON, vec![1; len]);
    }
    while outbox.next_chunk(CHUNK_BYTES).is_some() {}
    // One receiving rank, as the link keeps it: its channels and the
    // policy that lends them credit.
    let mut rank: RankReceiver<ChannelId> = RankReceiver::default();
    let mut inbound: BTreeMap<ChannelId, Inbound> = BTreeMap::new();
    let raise = |inbound: &mut BTreeMap<ChannelId, Inbound>,
                 rank: &RankReceiver<ChannelId>,
                 raised: Vec<ChannelId>| {
        for channel in raised {
            if let Some(c) = inbound.get_mut(&channel) {
                c.raise_limit(rank.credit(&channel));
            }
        }
    };
    let mut at = 0;
    while let Some((frame, used)) = protocol::decode(&bytes[at..]).map_err(|e| e.to_string())? {
        at += used;
        match frame {
            Frame::Data(chunk) => {
                let id = chunk.channel;
                if inbound.len() >= STREAM_CHANNELS && !inbound.contains_key(&id) {
                    return Err("data for more channels than the node's ranks".into());
                }
                let channel = inbound.entry(id).or_default();
                let start = channel.completed();
                let whole = chunk.bytes.len() as u64;
                // As the node takes chunks: a message in one chunk is not
                // copied into one of its own.
                let received = channel
                    .on_chunk_in_place(chunk)
                    .map_err(|e| e.to_string())?;
                match received {
                    // The worker reads at once, which returns credit.
                    Received::Complete(_) | Received::Whole => {
                        let len = match received {
                            Received::Complete(message) => message.len() as u64,
                            _ => whole,
                        };
                        channel.consumed(len);
                        let mut raised = rank.consumed(&id, len);
                        raised.push(id);
                        raise(&mut inbound, &rank, raised);
                    }
                    Received::Asked { total } => {
                        let raised = rank.asked(id, start, total);
                        raise(&mut inbound, &rank, raised);
                    }
                    // (Nothing is lent here.)
                    Received::Partial | Received::Duplicate | Received::Lent { .. } => {}
                }
            }
            Frame::Ack(ack) => {
                outbox.on_ack(ack).map_err(|e| e.to_string())?;
            }
            Frame::Refuse(channel, _) => {
                outbox.close(channel);
            }
            // A sender takes an offer or lanes or not; nothing to keep.
            Frame::Offer(_) | Frame::Lanes { .. } | Frame::Lane(_) => {}
        }
    }
    if at < bytes.len() {
        return Err("the stream ends inside a frame".into());
    }
    Ok(())
}

/// A valid encoding of a random value of what decoder `d` reads, from
/// `seed`.
pub fn sample(d: Decoder, seed: u64) -> Vec<u8> {
    let g = &mut Gen(seed);
    let bytes = match d {
        Decoder::FloodStream | Decoder::FloodFrame => wire::encode(&flood_frame(g)),
        Decoder::FloodAckStream => wire::encode(&FloodAck),
        Decoder::RpcRequestStream | Decoder::RpcRequest => wire::encode(&rpc_request(g)),
        Decoder::RpcResponseStream | Decoder::RpcResponse => wire::encode(&rpc_response(g)),
        Decoder::RanksStream => Ok(ranks_stream(g)),
        Decoder::Credential => Ok(credential(g).to_bytes()),
        Decoder::Revocation => Ok(fuzz_grid()
            .revoke(RevocationTarget::Peer(peer(g)), g.u64())
            .to_bytes()),
        Decoder::MembershipFrame => wire::encode(&match g.below(4) {
            0 => MembershipFrame::Hello(serde_bytes::ByteBuf::from(credential(g).to_bytes())),
            1 => MembershipFrame::Welcome,
            2 => MembershipFrame::Refused("it expired".into()),
            _ => MembershipFrame::Revocations(vec![serde_bytes::ByteBuf::from(
                fuzz_grid()
                    .revoke(RevocationTarget::Peer(peer(g)), u64::MAX)
                    .to_bytes(),
            )]),
        }),
    };
    bytes.expect("samples encode")
}

/// A well-formed flood frame (job `job`, TTL 1, no latency budget, a
/// 6-byte payload, an origin drawn from `job`) naming `recipients` other
/// recipients of its sender: what a hostile peer may send to test the
/// bound on that list ([`crate::wire::MAX_FLOOD_RECIPIENTS`]).
pub fn flood_frame_naming(job: u64, recipients: usize) -> Vec<u8> {
    let g = &mut Gen(job);
    let frame = FloodFrame {
        id: FloodId {
            job: JobId(job),
            seq: 0,
        },
        origin: peer(g),
        header: FloodHeader {
            seq: 0,
            ttl: 1,
            latency_budget: None,
            path_rtt: Duration::ZERO,
        },
        payload: b"advert".to_vec(),
        also: (0..recipients).map(|_| g.u64()).collect(),
    };
    wire::encode(&frame).expect("a flood frame encodes")
}

/// A seeded generator (SplitMix64): samples are reproducible from the seed
/// proptest prints.
struct Gen(u64);

impl Gen {
    fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.u64() % n.max(1)
    }
    /// Mostly small numbers, sometimes the extremes.
    fn int(&mut self) -> u64 {
        match self.below(6) {
            0 => 0,
            1 => u64::MAX,
            2 => self.u64(),
            _ => self.below(1000),
        }
    }
    fn len(&mut self) -> usize {
        let most = if self.below(8) == 0 { 64 } else { 4 };
        self.below(most) as usize
    }
    fn bytes(&mut self) -> Vec<u8> {
        let n = if self.below(16) == 0 {
            // Past ciborium's 4096-byte scratch buffer.
            4000 + self.below(200)
        } else {
            self.len() as u64 * 8
        };
        (0..n).map(|_| self.u64() as u8).collect()
    }
    fn duration(&mut self) -> Duration {
        Duration::new(self.int(), (self.u64() % 1_000_000_000) as u32)
    }
}

fn peer(g: &mut Gen) -> PeerId {
    // A SHA-256 multihash: any 32 bytes make a valid peer id.
    let mut bytes = vec![0x12, 0x20];
    bytes.extend((0..32).map(|_| g.u64() as u8));
    PeerId::from_bytes(&bytes).expect("a sha2-256 multihash is a peer id")
}

fn addr(g: &mut Gen) -> Multiaddr {
    let ip = Protocol::Ip4((g.u64() as u32).into());
    let tcp = Protocol::Tcp(g.u64() as u16);
    match g.below(3) {
        0 => Multiaddr::empty().with(ip).with(tcp),
        1 => Multiaddr::empty()
            .with(Protocol::Ip6(
                ((u128::from(g.u64()) << 64) | u128::from(g.u64())).into(),
            ))
            .with(tcp)
            .with(Protocol::P2p(peer(g))),
        _ => Multiaddr::empty()
            .with(Protocol::Dns4("example.invalid".into()))
            .with(tcp),
    }
}

fn flood_frame(g: &mut Gen) -> FloodFrame {
    FloodFrame {
        id: FloodId {
            job: JobId(g.int()),
            seq: g.int() as u32,
        },
        origin: peer(g),
        header: FloodHeader {
            seq: g.int() as u32,
            ttl: g.int() as u8,
            latency_budget: (g.below(2) == 0).then(|| g.duration()),
            path_rtt: g.duration(),
        },
        also: (0..g.below(4)).map(|_| g.int()).collect(),
        payload: g.bytes(),
    }
}

fn rpc_request(g: &mut Gen) -> RpcRequest {
    match g.below(4) {
        0 => RpcRequest::Peers,
        1 => RpcRequest::Link(g.below(2) == 0),
        2 => RpcRequest::Coordinates(coordinates(g)),
        _ => RpcRequest::App(g.bytes()),
    }
}

/// A valid network coordinate (mutations make out-of-range ones).
fn coordinates(g: &mut Gen) -> CoordinateFrame {
    let mut ms = || (g.below(2001) as f64 - 1000.0) / 2.0;
    let (x, y, height) = (ms(), ms(), ms().abs() + MIN_HEIGHT_MS);
    CoordinateFrame(Position {
        coord: Coord { x, y, height },
        error: g.below(101) as f64 / 100.0,
    })
}

fn rpc_response(g: &mut Gen) -> RpcResponse {
    match g.below(4) {
        0 => RpcResponse::Peers(
            (0..g.len())
                .map(|_| PeerRecord {
                    peer: peer(g),
                    addrs: (0..g.len()).map(|_| addr(g)).collect(),
                })
                .collect(),
        ),
        1 => RpcResponse::App(g.bytes()),
        2 => RpcResponse::Coordinates(coordinates(g)),
        _ => RpcResponse::Done,
    }
}

/// A stream of valid frames: the messages of a few channels cut into
/// chunks in order (now and then an ask for a large one), acknowledgements
/// of what [`read_ranks_stream`]'s sender sent, and refusals.
fn ranks_stream(g: &mut Gen) -> Vec<u8> {
    let mut out = Vec::new();
    let channels: Vec<ChannelId> = (0..1 + g.below(3))
        .map(|i| ChannelId {
            job: g.below(3),
            from: i as u32,
            from_incarnation: g.below(2) as u32,
            to: g.below(2) as u32,
            to_incarnation: g.int() as u32,
        })
        .collect();
    let mut next_seq = vec![0u64; channels.len()];
    // A channel that asked for a large message sends only that one next.
    let mut asked = vec![false; channels.len()];
    for _ in 0..g.len() + 1 {
        let pick = g.below(channels.len() as u64) as usize;
        let channel = channels[pick];
        match g.below(6) {
            0 => protocol::encode(
                &Frame::Ack(Ack {
                    channel: SENT_ON,
                    next: g.below(4),
                    limit: g.int(),
                }),
                &mut out,
            ),
            1 => {
                protocol::encode(&Frame::Refuse(channel, Refusal::NotHere), &mut out);
                if g.below(4) == 0 {
                    protocol::encode(
                        &Frame::Lanes {
                            ticket: g.int(),
                            count: 2,
                        },
                        &mut out,
                    );
                }
            }
            _ if asked[pick] => {}
            2 => {
                // An ask for a message larger than the window, and its
                // first bytes if nobody else asked (only one such message
                // is granted at a time).
                let first = !asked.contains(&true);
                asked[pick] = true;
                let total = zorilla_core::channel::MAX_WINDOW + 1 + g.below(1000);
                let seq = next_seq[pick];
                let ask = Chunk {
                    channel,
                    seq,
                    offset: 0,
                    total,
                    bytes: &[],
                };
                protocol::encode(&Frame::Data(ask), &mut out);
                if !first {
                    continue;
                }
                let bytes = g.bytes();
                let part = Chunk {
                    channel,
                    seq,
                    offset: 0,
                    total,
                    bytes: &bytes,
                };
                protocol::encode(&Frame::Data(part), &mut out);
                // Its last chunk, ahead of the rest (as from a lane of a
                // striped message).
                let last = total / CHUNK_BYTES as u64 * CHUNK_BYTES as u64;
                let tail = vec![7; (total - last) as usize];
                let ahead = Chunk {
                    channel,
                    seq,
                    offset: last,
                    total,
                    bytes: &tail,
                };
                protocol::encode(&Frame::Data(ahead), &mut out);
            }
            _ => {
                let message = g.bytes();
                let seq = next_seq[pick];
                next_seq[pick] += 1;
                let total = message.len() as u64;
                let mut offset = 0;
                let pieces = message.chunks(1 + g.below(64) as usize).collect::<Vec<_>>();
                if pieces.is_empty() {
                    let chunk = Chunk {
                        channel,
                        seq,
                        offset: 0,
                        total: 0,
                        bytes: &[],
                    };
                    protocol::encode(&Frame::Data(chunk), &mut out);
                }
                for bytes in pieces {
                    let chunk = Chunk {
                        channel,
                        seq,
                        offset,
                        total,
                        bytes,
                    };
                    protocol::encode(&Frame::Data(chunk), &mut out);
                    offset += bytes.len() as u64;
                }
            }
        }
    }
    out
}

/// The grid key of the fuzzed revocations: fixed, so that a sample's
/// signature checks.
fn fuzz_grid() -> GridKey {
    let secret = libp2p::identity::ed25519::SecretKey::try_from_bytes([7u8; 32])
        .expect("32 bytes are a secret key");
    GridKey(libp2p::identity::ed25519::Keypair::from(secret))
}

/// A valid credential of the fuzz grid: of the grid key, or through an
/// inviter (signed by its node key), expiring far away.
fn credential(g: &mut Gen) -> Credential {
    let grid = fuzz_grid();
    let member = libp2p::identity::Keypair::generate_ed25519();
    if g.below(2) == 0 {
        grid.issue(member.public().to_peer_id(), u64::MAX, g.below(2) == 0)
    } else {
        let inviter = grid.issue(member.public().to_peer_id(), u64::MAX, true);
        inviter
            .invite(&member, peer(g), u64::MAX)
            .expect("an inviter may invite")
    }
}

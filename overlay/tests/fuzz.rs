//! Fuzzing of the overlay's decoders of bytes from peers: flood frames and
//! their acknowledgements, rpc requests and responses (peer exchange, links,
//! the node's opaque payloads), each as the request-response codec reads a
//! stream (`read_capped`, then CBOR) and as bare CBOR; the ranks stream
//! (messages between workers, through the core's channel ends); closed
//! grids' membership credentials, revocations and membership frames; and
//! the emulated latency topology file.
//!
//! Each decoder gets valid encodings of random values, mutated (bit flips,
//! insertions, deletions, truncation, splices of two encodings, extreme
//! integers, huge declared lengths, deep nesting), and arbitrary bytes. No
//! input may panic, and no decode may hold more than
//! `fuzz_support::bound(input length)` bytes at once (a counting global
//! allocator measures it). `ZORILLA_FUZZ_CASES` sets the inputs per decoder
//! and kind (see BENCHMARKS.md, "Fuzzing").

use zorilla_overlay::Topology;
use zorilla_overlay::fuzz::{self, Decoder};

mod fuzz_support;

#[global_allocator]
static ALLOC: fuzz_support::Counting = fuzz_support::Counting;

fn both(d: Decoder) {
    fuzz_support::run(
        &format!("overlay {d:?} (mutated)"),
        fuzz_support::mutated(move |seed| fuzz::sample(d, seed), false),
        |bytes| fuzz::decode(d, bytes),
    );
    fuzz_support::run(
        &format!("overlay {d:?} (arbitrary bytes)"),
        fuzz_support::arbitrary(false),
        |bytes| fuzz::decode(d, bytes),
    );
}

/// Peer exchange's answer declaring 2^32 - 1 peer records: serde
/// preallocated 1 MiB for it before finding the input short (found by the
/// harness).
#[test]
fn a_huge_declared_peer_list_allocates_nothing_large() {
    let mut bytes = vec![0xa1, 0x65];
    bytes.extend_from_slice(b"Peers");
    bytes.extend_from_slice(&[0x9a, 0xff, 0xff, 0xff, 0xff]);
    for d in [Decoder::RpcResponse, Decoder::RpcResponseStream] {
        let (result, peak) = fuzz_support::peak_during(|| fuzz::decode(d, &bytes));
        let why = result.expect_err("the input is short");
        assert!(why.contains("declares"), "{d:?}: {why}");
        assert!(
            peak <= fuzz_support::bound(bytes.len()),
            "{d:?}: {peak} bytes"
        );
    }
}

#[test]
fn samples_of_every_decoder_decode() {
    for d in Decoder::ALL {
        for seed in 0..200 {
            let bytes = fuzz::sample(d, seed);
            if bytes.len() <= fuzz::STREAM_CAP {
                fuzz::decode(d, &bytes).unwrap_or_else(|e| panic!("{d:?} seed {seed}: {e}"));
            }
        }
    }
}

#[test]
fn flood_streams() {
    both(Decoder::FloodStream);
    both(Decoder::FloodAckStream);
}

#[test]
fn rpc_request_streams() {
    both(Decoder::RpcRequestStream);
}

#[test]
fn rpc_response_streams() {
    both(Decoder::RpcResponseStream);
}

#[test]
fn ranks_streams() {
    both(Decoder::RanksStream);
}

#[test]
fn bare_frames() {
    both(Decoder::FloodFrame);
    both(Decoder::RpcRequest);
    both(Decoder::RpcResponse);
}

const TOPOLOGY: &str = r#"
default_rtt_ms = 100
[[sites]]
name = "amsterdam"
rtt_within_ms = 2
[[sites]]
name = "delft"
rtt_within_ms = 9223372036854775807
[[links]]
a = "amsterdam"
b = "delft"
rtt_ms = 10
[hosts]
"127.0.1.1" = "amsterdam"
"::1" = "delft"
[ports]
4001 = "amsterdam"
"#;

#[test]
fn topology_files() {
    use proptest::prelude::*;
    let decode = |bytes: &[u8]| {
        let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
        Topology::from_toml_str(text)
            .map(drop)
            .map_err(|e| e.to_string())
    };
    let deep = prop_oneof![
        Just(Vec::new()),
        Just("[".repeat(5000).into_bytes()),
        Just("{a=".repeat(5000).into_bytes()),
        Just(b"rtt_ms = 1e400\n".to_vec()),
    ];
    decode(TOPOLOGY.as_bytes()).unwrap();
    let inputs = (
        fuzz_support::mutated(|_| TOPOLOGY.as_bytes().to_vec(), false),
        deep,
        any::<prop::sample::Index>(),
    )
        .prop_map(|(mut text, bits, at)| {
            let p = at.index(text.len() + 1);
            text.splice(p..p, bits);
            text
        });
    fuzz_support::run("overlay topology (mutated)", inputs, decode);
    fuzz_support::run(
        "overlay topology (arbitrary bytes)",
        fuzz_support::arbitrary(false),
        decode,
    );
}

#[test]
fn membership_credentials_revocations_and_frames() {
    both(Decoder::Credential);
    both(Decoder::Revocation);
    both(Decoder::MembershipFrame);
}

//! Fuzzing of every decoder of bytes that reach a node from outside: client
//! frames (`Hello`, `Request`, and the `Response`s the CLI reads), the
//! node-to-node rpc (`PeerRpc`, `PeerReply` with its job copies and status
//! views, the core's `Message`s inside), flooded adverts, the records read
//! back from the database, job spec files and the configuration file.
//!
//! Each decoder gets valid encodings of random values, mutated (bit flips,
//! insertions, deletions, truncation, splices of two encodings, extreme
//! integers, huge declared lengths, deep nesting), and arbitrary bytes. No
//! input may panic, and no decode may hold more than
//! `fuzz_support::bound(input length)` bytes at once (a counting global
//! allocator measures it). `ZORILLA_FUZZ_CASES` sets the inputs per decoder
//! and kind (see BENCHMARKS.md, "Fuzzing").

use std::path::Path;

use proptest::prelude::*;
use zorilla_node::config::Config;
use zorilla_node::fuzz::{self, Decoder};
use zorilla_node::jobspec::JobFile;

#[path = "../../overlay/tests/fuzz_support/mod.rs"]
mod fuzz_support;

#[global_allocator]
static ALLOC: fuzz_support::Counting = fuzz_support::Counting;

fn mutated(d: Decoder) {
    fuzz_support::run(
        &format!("node {d:?} (mutated)"),
        fuzz_support::mutated(move |seed| fuzz::sample(d, seed), d.framed()),
        |bytes| fuzz::decode(d, bytes),
    );
}

fn arbitrary(d: Decoder) {
    fuzz_support::run(
        &format!("node {d:?} (arbitrary bytes)"),
        fuzz_support::arbitrary(d.framed()),
        |bytes| fuzz::decode(d, bytes),
    );
}

/// A CBOR header declaring 2^32 - 1 elements: serde preallocated up to
/// 1 MiB per vector for it before finding the input short (found by the
/// harness: a 14-byte frame held 1 MiB).
const HUGE_ARRAY: [u8; 5] = [0x9a, 0xff, 0xff, 0xff, 0xff];

fn cbor_map(key: &str, value: &[u8]) -> Vec<u8> {
    let mut out = vec![0xa1, 0x60 | key.len() as u8];
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(value);
    out
}

#[test]
fn huge_declared_arrays_allocate_nothing_large() {
    // What the check in front of every decoder prevents: ciborium and
    // serde alone hold a mebibyte for these 5 bytes.
    let (result, unchecked) = fuzz_support::peak_during(|| {
        ciborium::from_reader::<Vec<u32>, _>(&HUGE_ARRAY[..]).map(drop)
    });
    assert!(result.is_err());
    assert!(unchecked >= 1 << 20, "{unchecked} bytes");

    let mut frame = vec![0; 4];
    frame.extend(cbor_map("Jobs", &HUGE_ARRAY));
    fuzz_support::fix_frame_length(&mut frame);
    // Response::Jobs(<2^32 - 1 job statuses>) as the CLI reads it, and a
    // peer's PeerRpc::Sched(Message::Grant { ranks: <2^32 - 1> }).
    let mut grant = cbor_map("Grant", &[0xa2, 0x63]);
    grant.extend_from_slice(b"job");
    grant.push(0x01);
    grant.extend_from_slice(&[0x65]);
    grant.extend_from_slice(b"ranks");
    grant.extend_from_slice(&HUGE_ARRAY);
    let inputs = [
        (Decoder::Response, frame),
        (Decoder::PeerRpc, cbor_map("Sched", &grant)),
        (Decoder::StoredJob, HUGE_ARRAY.to_vec()),
    ];
    for (d, bytes) in inputs {
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
            fuzz::decode(d, &bytes).unwrap_or_else(|e| panic!("{d:?} seed {seed}: {e}"));
        }
    }
}

#[test]
fn hello_frames() {
    mutated(Decoder::Hello);
    arbitrary(Decoder::Hello);
}

#[test]
fn request_frames() {
    mutated(Decoder::Request);
    arbitrary(Decoder::Request);
}

#[test]
fn response_frames() {
    mutated(Decoder::Response);
    arbitrary(Decoder::Response);
}

#[test]
fn peer_rpcs() {
    mutated(Decoder::PeerRpc);
    arbitrary(Decoder::PeerRpc);
}

#[test]
fn peer_replies() {
    mutated(Decoder::PeerReply);
    arbitrary(Decoder::PeerReply);
}

#[test]
fn adverts() {
    mutated(Decoder::Advert);
    arbitrary(Decoder::Advert);
}

#[test]
fn stored_jobs() {
    mutated(Decoder::StoredJob);
    arbitrary(Decoder::StoredJob);
}

#[test]
fn stored_logs() {
    mutated(Decoder::StoredLog);
    arbitrary(Decoder::StoredLog);
}

// ----- TOML: job specs and the configuration -----

/// A valid job spec using every field a rigid job may give, some values
/// odd: the sample the mutations start from, so that a mutated input gets
/// past the first check as often as a mutation leaves it valid.
const JOB_SPEC: &str = r#"
module = "../wasm/nqueens.wasm"
args = ["14", "", "é"]
workers = 16
strategy = "spread"
cores = 1
memory_mib = 16777216
disk_mib = 0
wall_time_secs = 600
cpu_time_secs = 300
lifetime_secs = 120
on_worker_lost = "replace"
inputs = ["data/board.txt"]
outputs = "results"
"#;

/// A configuration using every field.
const CONFIG: &str = r#"
state_dir = "/var/lib/zorilla"
network = "physics-lab"
listen = ["/ip4/0.0.0.0/tcp/4001"]
client = "127.0.0.1:4100"
peers = ["/ip4/192.0.2.7/tcp/4001"]
mdns = true
max_connections = 128
cores = 4
memory_mib = 8192
disk_mib = 10000
max_jobs = 16
max_workers_per_job = 8
deny = ["12D3KooWAbc"]
topology = "sites.toml"
site = "amsterdam"
web = "[::1]:8080"
token = "long-random-secret"
max_clients = 128
"#;

/// TOML text: the sample, mutated. Deep nesting and huge numbers are
/// spelled in TOML here.
fn toml_inputs(sample: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let toml_bits = prop_oneof![
        Just("[".repeat(5000).into_bytes()),
        Just("{a=".repeat(5000).into_bytes()),
        Just(b"x = 99999999999999999999999999999\n".to_vec()),
        Just(b"cores = -1\n".to_vec()),
        Just(b"workers = 1e400\n".to_vec()),
        Just(b"\"\\u{110000}\"".to_vec()),
        Just(b"[[inputs]]\n".to_vec()),
        Just(b"a.b.c.d.e.f = 1\n".to_vec()),
        Just(b"'''".to_vec()),
        Just(b"\n\xff\xfe\n".to_vec()),
    ];
    (
        fuzz_support::mutated(move |_| sample.as_bytes().to_vec(), false),
        prop::option::of((any::<prop::sample::Index>(), toml_bits)),
    )
        .prop_map(|(mut text, insert)| {
            if let Some((at, bits)) = insert {
                let p = at.index(text.len() + 1);
                text.splice(p..p, bits);
            }
            text
        })
}

thread_local! {
    static SPEC_DIR: tempfile::TempDir = tempfile::tempdir().expect("a temporary directory");
}

/// A job spec as `zorilla submit` reads it: from a file, then checked.
fn decode_spec(bytes: &[u8]) -> Result<(), String> {
    let path = SPEC_DIR.with(|d| d.path().join("job.toml"));
    std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
    let file = JobFile::load(&path).map_err(|e| e.to_string())?;
    file.request().map(drop).map_err(|e| e.to_string())
}

fn decode_config(bytes: &[u8]) -> Result<(), String> {
    // The node reads its file with read_to_string: not UTF-8 is an error
    // before the parser.
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    Config::from_toml(text, Path::new("zorilla.toml"))
        .map(drop)
        .map_err(|e| e.to_string())
}

#[test]
fn job_specs() {
    decode_spec(JOB_SPEC.as_bytes()).unwrap();
    let malleable = "min_workers = 4\nmax_workers = 16\n";
    decode_spec(JOB_SPEC.replace("workers = 16\n", malleable).as_bytes())
        .expect("the malleable variant");
    assert!(
        decode_spec(
            JOB_SPEC
                .replace("workers = 16\n", &format!("workers = 16\n{malleable}"))
                .as_bytes()
        )
        .is_err(),
        "workers and min_workers both given"
    );
    let stats = fuzz_support::run(
        "node job spec (mutated)",
        toml_inputs(JOB_SPEC),
        decode_spec,
    );
    // Mutations of a valid sample: a share of them still decode (200 of
    // 3,000 when written), so the checks after the parser are fuzzed too;
    // from the invalid sample of before, 499 of 400,000 did.
    assert!(
        stats.decoded * 50 >= stats.inputs,
        "only {} of {} mutated job specs decoded: the sample or the mutator no longer \
         reaches the checks after the parser",
        stats.decoded,
        stats.inputs
    );
    fuzz_support::run(
        "node job spec (arbitrary bytes)",
        fuzz_support::arbitrary(false),
        decode_spec,
    );
}

#[test]
fn configuration_files() {
    decode_config(CONFIG.as_bytes()).unwrap();
    fuzz_support::run("node config (mutated)", toml_inputs(CONFIG), decode_config);
    fuzz_support::run(
        "node config (arbitrary bytes)",
        fuzz_support::arbitrary(false),
        decode_config,
    );
}

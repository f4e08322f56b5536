//! `docs/protocol.md` and the node say the same: every example conversation
//! in the document (its ```` ```session ```` blocks) is played against a
//! real node, byte for byte as a client in another language would send it,
//! and every answer must match what the document shows.
//!
//! In a block, `> VALUE` is a frame the client sends and `< VALUE` one the
//! node answers, each written as JSON for the CBOR it stands for (a map is
//! a JSON object, a text a string). Each block is one connection. Strings
//! of the form `<...>` stand for what JSON cannot spell or what differs
//! between runs:
//!
//! - `<any>`: any value; `<text>`: any text;
//! - `<job>`: a job id (an integer), the same one throughout a block;
//! - `<module:NAME>`: the bytes of `examples/wasm/NAME.wasm`;
//! - `<bytes:TEXT>`: a byte string holding TEXT;
//! - in a text, `…` stands for any text (the document cuts a long message
//!   short).
//!
//! A map in an answer must have exactly the keys the document shows, unless
//! the document writes `"…": "<any>"` among them. A line `# wait: <job>
//! final` makes the test ask for the job's status until it is final
//! (outside the block's frames). Other `#` lines are comments.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use ciborium::Value;
use common::TestNode;
use serde_json::Value as Json;

/// The token of the node the examples run against (the examples' hellos
/// carry it).
const TOKEN: &str = "doc-example-token-0123";

/// One conversation of the document.
struct Session {
    /// Where it starts in the document (line number), for messages.
    line: usize,
    steps: Vec<(usize, Step)>,
}

enum Step {
    Send(Json),
    Expect(Json),
    WaitFinal,
}

fn sessions(doc: &str) -> Vec<Session> {
    let mut out = Vec::new();
    let mut current: Option<Session> = None;
    for (i, line) in doc.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim();
        match &mut current {
            None if trimmed == "```session" => {
                current = Some(Session {
                    line: n,
                    steps: Vec::new(),
                });
            }
            None => {}
            Some(_) if trimmed == "```" => out.extend(current.take()),
            Some(session) => {
                let parse = |text: &str| {
                    serde_json::from_str::<Json>(text)
                        .unwrap_or_else(|e| panic!("docs/protocol.md:{n}: not JSON: {e}"))
                };
                if let Some(value) = trimmed.strip_prefix("> ") {
                    session.steps.push((n, Step::Send(parse(value))));
                } else if let Some(value) = trimmed.strip_prefix("< ") {
                    session.steps.push((n, Step::Expect(parse(value))));
                } else if trimmed == "# wait: <job> final" {
                    session.steps.push((n, Step::WaitFinal));
                } else {
                    assert!(
                        trimmed.is_empty() || trimmed.starts_with('#'),
                        "docs/protocol.md:{n}: a session line starts with >, < or #"
                    );
                }
            }
        }
    }
    assert!(
        current.is_none(),
        "docs/protocol.md: a session block is not closed"
    );
    out
}

/// The CBOR a documented request stands for.
fn to_cbor(json: &Json, job: Option<u64>, examples: &Path) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => Value::Integer(n.as_u64().expect("whole numbers").into()),
        Json::String(s) => {
            if s == "<job>" {
                return Value::Integer(job.expect("<job> before a job was submitted").into());
            }
            if let Some(name) = s.strip_prefix("<module:").and_then(|r| r.strip_suffix('>')) {
                let path = examples.join("wasm").join(format!("{name}.wasm"));
                return Value::Bytes(std::fs::read(&path).expect("an example module"));
            }
            if let Some(text) = s.strip_prefix("<bytes:").and_then(|r| r.strip_suffix('>')) {
                return Value::Bytes(text.as_bytes().to_vec());
            }
            Value::Text(s.clone())
        }
        Json::Array(items) => {
            Value::Array(items.iter().map(|v| to_cbor(v, job, examples)).collect())
        }
        Json::Object(map) => Value::Map(
            map.iter()
                .map(|(k, v)| (Value::Text(k.clone()), to_cbor(v, job, examples)))
                .collect(),
        ),
    }
}

/// Whether `got` is what the document shows; binds `<job>`.
fn matches(doc: &Json, got: &Value, job: &mut Option<u64>) -> Result<(), String> {
    let mismatch = || Err(format!("the document shows {doc}, the node sent {got:?}"));
    match (doc, got) {
        (Json::String(s), _) if s == "<any>" => Ok(()),
        (Json::String(s), Value::Text(_)) if s == "<text>" => Ok(()),
        (Json::String(s), Value::Integer(i)) if s == "<job>" => {
            let i = u64::try_from(*i).map_err(|_| "a job id out of range".to_string())?;
            match job {
                Some(bound) if *bound != i => mismatch(),
                _ => {
                    *job = Some(i);
                    Ok(())
                }
            }
        }
        (Json::String(s), Value::Bytes(b)) => {
            match s.strip_prefix("<bytes:").and_then(|r| r.strip_suffix('>')) {
                Some(text) if text.as_bytes() == b.as_slice() => Ok(()),
                _ => mismatch(),
            }
        }
        (Json::String(s), Value::Text(t)) if elided(s, t) => Ok(()),
        (Json::Null, Value::Null) => Ok(()),
        (Json::Bool(a), Value::Bool(b)) if a == b => Ok(()),
        (Json::Number(n), Value::Integer(i))
            if n.as_u64().map(i128::from) == Some(i128::from(*i)) =>
        {
            Ok(())
        }
        (Json::Array(items), Value::Array(values)) if items.len() == values.len() => items
            .iter()
            .zip(values)
            .try_for_each(|(d, g)| matches(d, g, job)),
        (Json::Object(map), Value::Map(entries)) => {
            let open = map.get("…").is_some_and(|v| v == "<any>");
            let mut got: BTreeMap<String, &Value> = BTreeMap::new();
            for (k, v) in entries {
                let key = match k {
                    Value::Text(t) => t.clone(),
                    Value::Integer(i) => i128::from(*i).to_string(),
                    other => return Err(format!("a map key {other:?}")),
                };
                got.insert(key, v);
            }
            for (k, d) in map.iter().filter(|(k, _)| *k != "…") {
                let g = got.remove(k).ok_or_else(|| {
                    format!("the document shows key {k:?}, the node sent {got:?}")
                })?;
                matches(d, g, job).map_err(|e| format!("{k}: {e}"))?;
            }
            if !open && !got.is_empty() {
                return Err(format!(
                    "the node sent keys the document does not show: {:?}",
                    got.keys()
                ));
            }
            Ok(())
        }
        _ => mismatch(),
    }
}

/// Whether `text` is `shown` with each `…` standing for any text.
fn elided(shown: &str, text: &str) -> bool {
    let mut parts = shown.split('…');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty(); // no `…`: the whole text
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

fn send(stream: &mut TcpStream, value: &Value) {
    let mut body = Vec::new();
    ciborium::into_writer(value, &mut body).unwrap();
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    stream.write_all(&frame).unwrap();
}

fn receive(stream: &mut TcpStream) -> Value {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).expect("an answer frame");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream
        .read_exact(&mut body)
        .expect("the whole answer frame");
    ciborium::from_reader(body.as_slice()).expect("CBOR from the node")
}

/// Asks for the job's status on a connection of its own until its phase is
/// final.
async fn wait_final(node: &TestNode, job: u64) {
    let mut client =
        zorilla_node::client::Client::connect_with(node.client.as_str(), Some(TOKEN), "doc-wait")
            .await
            .unwrap();
    common::wait_for(
        &mut client,
        job,
        Duration::from_secs(60),
        "a final phase",
        |s| s.phase.is_terminal(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_conversation_in_the_protocol_document_is_what_the_node_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("docs/protocol.md")).unwrap();
    let sessions = sessions(&doc);
    assert!(sessions.len() >= 3, "the document's example conversations");
    let dir = tempfile::tempdir().unwrap();
    let extra = ["--token".to_string(), TOKEN.to_string()];
    let node = TestNode::start_with(
        &dir.path().join("n0"),
        "protocol-doc",
        None,
        1,
        "127.0.0.1",
        &extra,
    );
    let examples = root.join("examples");
    for session in &sessions {
        let mut stream = TcpStream::connect(node.client.as_str()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(70)))
            .unwrap();
        let mut job = None;
        let started = Instant::now();
        for (line, step) in &session.steps {
            match step {
                Step::Send(json) => send(&mut stream, &to_cbor(json, job, &examples)),
                Step::Expect(json) => {
                    let got = receive(&mut stream);
                    if let Err(e) = matches(json, &got, &mut job) {
                        panic!(
                            "docs/protocol.md:{line} (the session at line {}): {e}",
                            session.line
                        );
                    }
                }
                Step::WaitFinal => wait_final(&node, job.expect("a job to wait for")).await,
            }
        }
        assert!(started.elapsed() < Duration::from_secs(120));
    }
}

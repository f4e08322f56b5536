//! A tiny HTTP/1.0 client for the tests (loopback only; no chunking, no
//! keep-alive), an event-stream reader, and the check that hostile strings
//! were escaped. Used by this crate's tests and, through `#[path]`, by the
//! node's (`node/tests/web.rs`, `node/tests/browser.rs`).

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn content_type(&self) -> &str {
        self.header("content-type").unwrap_or("")
    }
}

fn request_text(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> String {
    let mut req = format!("GET {path} HTTP/1.0\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req
}

/// GET with extra headers, to the end of the response (HTTP/1.0: no chunking).
pub async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    let fut = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(request_text(addr, path, headers).as_bytes())
            .await
            .unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        parse(&raw)
    };
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .unwrap_or_else(|_| panic!("GET {path} timed out"))
}

/// GET.
pub async fn get(addr: SocketAddr, path: &str) -> Response {
    get_with(addr, path, &[]).await
}

fn parse(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Response {
        status,
        headers,
        body: body.to_string(),
    }
}

/// An open event stream.
pub struct EventStream {
    pub status: u16,
    pub head: String,
    stream: TcpStream,
    buf: String,
}

impl EventStream {
    pub async fn open(addr: SocketAddr, path: &str) -> Self {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(request_text(addr, path, &[]).as_bytes())
            .await
            .unwrap();
        let mut buf = String::new();
        let mut chunk = [0u8; 4096];
        while !buf.contains("\r\n\r\n") {
            let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
                .await
                .expect("response head in time")
                .unwrap();
            assert!(n > 0, "connection closed before the head: {buf}");
            buf.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
        let (head, rest) = buf.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        Self {
            status,
            head: head.to_string(),
            buf: rest.to_string(),
            stream,
        }
    }

    /// The data of the next `update` event (data lines joined by newlines).
    pub async fn next_update(&mut self) -> String {
        let mut chunk = [0u8; 8192];
        loop {
            while let Some((event, rest)) = self.buf.split_once("\n\n") {
                let event = event.to_string();
                self.buf = rest.to_string();
                if event.lines().any(|l| l == "event: update") {
                    return event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data: ").or(l.strip_prefix("data:")))
                        .collect::<Vec<_>>()
                        .join("\n");
                }
            }
            let n = tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut chunk))
                .await
                .expect("an update in time")
                .unwrap();
            assert!(n > 0, "event stream closed");
            self.buf.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    }
}

/// Asserts that no hostile string appears unescaped.
pub fn assert_escaped(what: &str, body: &str) {
    for bad in [
        "<script>alert",
        "<img src=x",
        "<svg onload",
        "\"><img",
        "'><svg",
    ] {
        assert!(!body.contains(bad), "{what}: unescaped {bad:?} in:\n{body}");
    }
}

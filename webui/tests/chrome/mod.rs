//! Headless Chromium through chromedriver (WebDriver, `fantoccini`) for
//! the browser tests: finding the binaries (the test FAILS with how to
//! install them when they are missing), starting chromedriver, opening a
//! session, polling the page with a deadline, screenshots. Used by this
//! crate's `browser.rs` and, through `#[path]`, by the node's
//! `node/tests/browser.rs`.

#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

pub const INSTALL: &str = "the browser test needs headless Chromium and chromedriver: \
                       apt-get install -y chromium chromium-driver \
                       (or set ZORILLA_CHROMIUM / ZORILLA_CHROMEDRIVER to the binaries)";

/// A binary named by an environment variable, else the first of `names` on
/// the `PATH` or in /usr/bin.
pub fn find_binary(var: &str, names: &[&str]) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "{var}={} is not a file; {INSTALL}",
            p.display()
        );
        return p;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.push("/usr/bin".into());
    dirs.push("/usr/lib/chromium".into());
    for name in names {
        for dir in &dirs {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!("{} not found; {INSTALL}", names.join(" or "));
}

/// Kills chromedriver (and so the browser it started) when dropped.
pub struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts chromedriver on a free port. The port is picked before
/// chromedriver binds it, so another process may take it first: then
/// chromedriver exits and is started again on another port.
pub async fn start_driver(chromedriver: &Path, log: &Path) -> (Driver, String) {
    for _attempt in 0..5 {
        let port = free_port();
        let log_file = std::fs::File::create(log).unwrap();
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}; {INSTALL}", chromedriver.display()));
        let mut driver = Driver(child);
        let url = format!("http://127.0.0.1:{port}");
        // Ready when its /status answers.
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if driver_ready(addr).await {
                return (driver, url);
            }
            if driver.0.try_wait().unwrap().is_some() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready; see {}",
                log.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    panic!(
        "chromedriver exited five times at start; see {}",
        log.display()
    );
}

/// Whether chromedriver's `/status` says it is ready.
pub async fn driver_ready(addr: std::net::SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let req = format!("GET /status HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    read.is_ok() && String::from_utf8_lossy(&out).contains("\"ready\": true")
        || String::from_utf8_lossy(&out).contains("\"ready\":true")
}

/// Polls a script until it returns `true`, for at most 20 s.
pub async fn wait_until(client: &Client, what: &str, script: &str) -> anyhow::Result<()> {
    wait_until_within(client, what, script, Duration::from_secs(20)).await
}

/// Polls a script until it returns `true`, for at most `within`.
pub async fn wait_until_within(
    client: &Client,
    what: &str,
    script: &str,
    within: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        if client.execute(script, vec![]).await? == json!(true) {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Saves a screenshot of the page as `dir/name` (a PNG).
pub async fn save_screenshot(client: &Client, dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let png = client.screenshot().await?;
    anyhow::ensure!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
    let path = dir.join(name);
    std::fs::write(&path, png)?;
    Ok(path)
}

/// A browser session: headless Chromium `chromium` with its profile in
/// `profile`, through the chromedriver at `driver_url` (whose log is shown
/// if the session cannot start).
pub async fn session(
    chromium: &Path,
    driver_url: &str,
    profile: &Path,
    driver_log: &Path,
) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--disable-extensions",
                "--hide-scrollbars",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(driver_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "no browser session: {e}; chromedriver log:\n{}",
                std::fs::read_to_string(driver_log).unwrap_or_default()
            )
        })
}

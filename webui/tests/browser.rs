//! A real browser over the web interface: headless Chromium, driven through
//! chromedriver (WebDriver) with `fantoccini`. It opens the overview served
//! over the fake node, waits until the live stream is connected, has the fake
//! node announce a newly submitted job (with a hostile name), and checks that
//! the job appears without a reload and that its name did not run as markup.
//! Screenshots of the overview, the peers page and a job page (phone width)
//! are saved in `$ZORILLA_SCREENSHOT_DIR`, else in
//! `$TMPDIR/zorilla-webui-screenshots` (overwritten each run); the test
//! prints their paths.
//!
//! Needs Debian's `chromium` and `chromium-driver` (or `ZORILLA_CHROMIUM` and
//! `ZORILLA_CHROMEDRIVER` naming the binaries). Without them the test FAILS:
//! it never passes silently.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use zorilla_webui::model::JobPhase;

const INSTALL: &str = "the browser test needs headless Chromium and chromedriver: \
                       apt-get install -y chromium chromium-driver \
                       (or set ZORILLA_CHROMIUM / ZORILLA_CHROMEDRIVER to the binaries)";

/// A binary named by an environment variable, else the first of `names` on
/// the `PATH` or in /usr/bin.
fn find_binary(var: &str, names: &[&str]) -> PathBuf {
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
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts chromedriver on a free port. The port is picked before
/// chromedriver binds it, so another process may take it first: then
/// chromedriver exits and is started again on another port.
async fn start_driver(chromedriver: &Path, log: &Path) -> (Driver, String) {
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
async fn driver_ready(addr: std::net::SocketAddr) -> bool {
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

/// Polls a script until it returns `true`.
async fn wait_until(client: &Client, what: &str, script: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
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

async fn save_screenshot(client: &Client, dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let png = client.screenshot().await?;
    anyhow::ensure!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
    let path = dir.join(name);
    std::fs::write(&path, png)?;
    Ok(path)
}

async fn scenario(client: &Client, fake: &Fake, base: &str, shots: &Path) -> anyhow::Result<()> {
    client.set_window_size(1000, 900).await?;
    client.goto(&format!("{base}/")).await?;
    anyhow::ensure!(client.title().await?.contains("alpha"), "overview title");
    // The live stream is connected once the script says so.
    wait_until(
        client,
        "the live stream",
        "return (document.getElementById('live')||{}).textContent.startsWith('live')",
    )
    .await?;
    // Mark the document: a reload would lose the mark.
    client
        .execute(
            "window.zorillaMark = 42; window.pwned = 0; return true",
            vec![],
        )
        .await?;
    let hostile = "new job <img src=x onerror=window.pwned=1>";
    fake.submit(job("job-browser", hostile, JobPhase::Scheduling, ME));
    // The new job appears without a reload, its name as text.
    wait_until(
        client,
        "the new job on the overview",
        "var l = document.querySelector('#home-jobs a[href=\"/jobs/job-browser\"]');
         return !!l && l.textContent.indexOf('<img src=x') >= 0",
    )
    .await?;
    let state = client
        .execute(
            "return [window.zorillaMark, window.pwned, document.querySelectorAll('#home-jobs img').length]",
            vec![],
        )
        .await?;
    anyhow::ensure!(
        state == json!([42, 0, 0]),
        "expected no reload and no injected markup, got {state}"
    );
    let shot = save_screenshot(client, shots, "overview.png").await?;
    println!("screenshot: {}", shot.display());

    // The job page: live too, and readable at phone width.
    client.set_window_size(390, 844).await?;
    client.goto(&format!("{base}/jobs/job-1")).await?;
    client.find(Locator::Css("#workers")).await?;
    wait_until(
        client,
        "the job page's live stream",
        "return (document.getElementById('live')||{}).textContent.startsWith('live')",
    )
    .await?;
    let overflow = client
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth + 1",
            vec![],
        )
        .await?;
    anyhow::ensure!(
        overflow == json!(true),
        "the job page scrolls sideways on a phone"
    );
    println!(
        "screenshot: {}",
        save_screenshot(client, shots, "job-phone.png")
            .await?
            .display()
    );

    // A remote view of a peer, through the (fake) overlay.
    client.set_window_size(1000, 900).await?;
    client.goto(&format!("{base}/peers/{FAR}")).await?;
    anyhow::ensure!(
        client.title().await?.contains("far-node"),
        "remote view title"
    );
    client.find(Locator::Css("p.remote")).await?;

    // The peers page with its picture.
    client.set_window_size(1000, 1000).await?;
    client.goto(&format!("{base}/peers")).await?;
    let circles = client
        .find_all(Locator::Css("svg#neighbourhood circle.peer"))
        .await?;
    anyhow::ensure!(circles.len() == 3, "{} peers drawn", circles.len());
    println!(
        "screenshot: {}",
        save_screenshot(client, shots, "peers.png").await?.display()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_overview_in_headless_chromium() {
    let chromium = find_binary("ZORILLA_CHROMIUM", &["chromium", "chromium-browser"]);
    let chromedriver = find_binary("ZORILLA_CHROMEDRIVER", &["chromedriver"]);
    let work = tempfile::tempdir().unwrap();
    let shots = std::env::var_os("ZORILLA_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("zorilla-webui-screenshots"));
    std::fs::create_dir_all(&shots).unwrap();
    let driver_log = work.path().join("chromedriver.log");
    let (driver, driver_url) = start_driver(&chromedriver, &driver_log).await;

    let fake = Fake::new();
    let addr = start(fake.clone()).await;
    let base = format!("http://{addr}");

    let profile = work.path().join("profile");
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
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "no browser session: {e}; chromedriver log:\n{}",
                std::fs::read_to_string(&driver_log).unwrap_or_default()
            )
        });
    let outcome = tokio::time::timeout(
        Duration::from_secs(90),
        scenario(&client, &fake, &base, &shots),
    )
    .await;
    let _ = client.close().await;
    drop(driver);
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("browser test: {e:#}"),
        Err(_) => panic!("browser test took over 90 s"),
    }
}

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

mod chrome;
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrome::*;
use common::*;
use fantoccini::{Client, Locator};
use serde_json::json;
use zorilla_webui::model::JobPhase;

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

    let client = session(
        &chromium,
        &driver_url,
        &work.path().join("profile"),
        &driver_log,
    )
    .await;
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

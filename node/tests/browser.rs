//! A real browser on a real grid: three `zorilla-node` processes on
//! 127.0.0.1 and headless Chromium driven through chromedriver
//! (`fantoccini`). The browser opens the first node's overview; a job is
//! submitted through the client library (its argument is markup); the test
//! waits, with a deadline, until the live update shows the job running
//! without a reload and with its name as text; then it follows the job's
//! page live until the job is cancelled, opens a remote view of another
//! node through the first, and the peers page with its picture.
//! Then it opens the grid view with the job's placement drawn (the nodes
//! on their two sites, every node running one worker, the home marked).
//! Screenshots go to `target/tmp/zorilla-node-browser/` (overwritten each
//! run); the test prints their paths. With `ZORILLA_DOC_SCREENSHOTS` set it
//! also copies those of the pages into `docs/screenshots/` (see
//! [`DOC_SCREENSHOTS`]): the README shows them.
//!
//! Needs Debian's `chromium` and `chromium-driver` (or `ZORILLA_CHROMIUM`
//! and `ZORILLA_CHROMEDRIVER` naming the binaries). Without them the test
//! FAILS, saying how to install them: it never passes silently.

#[path = "../../webui/tests/chrome/mod.rs"]
mod chrome;

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrome::*;
use common::*;
use fantoccini::{Client, Locator};
use serde_json::json;
use zorilla_node::protocol::{JobPhase, JobRequest};

const HOSTILE_ARG: &str = "<script>window.pwned=1</script><img src=x onerror=window.pwned=2>";

/// Up to this long for anything that crosses the grid.
const GRID_WAIT: Duration = Duration::from_secs(30);

async fn live(browser: &Client) -> anyhow::Result<()> {
    wait_until(
        browser,
        "the live stream",
        "return (document.getElementById('live')||{}).textContent.startsWith('live')",
    )
    .await
}

/// Marks the document: a reload would lose the mark.
async fn mark(browser: &Client) -> anyhow::Result<()> {
    browser
        .execute(
            "window.zorillaMark = 42; window.pwned = 0; return true",
            vec![],
        )
        .await?;
    Ok(())
}

/// Checks that the document was not reloaded and no markup from the job ran.
async fn unmarked(browser: &Client, what: &str) -> anyhow::Result<()> {
    let state = browser
        .execute(
            "return [window.zorillaMark, window.pwned, \
             document.querySelectorAll('main script, main img').length]",
            vec![],
        )
        .await?;
    anyhow::ensure!(
        state == json!([42, 0, 0]),
        "{what}: expected no reload and no injected markup, got {state}"
    );
    Ok(())
}

async fn scenario(browser: &Client, grid: &Grid, shots: &Path) -> anyhow::Result<()> {
    let (n0, n1) = (&grid.nodes[0], &grid.nodes[1]);
    let base = format!("http://{}", n0.web);
    let mut client = n0.client().await;

    // The overview of a real node, live.
    browser.set_window_size(1000, 900).await?;
    browser.goto(&format!("{base}/")).await?;
    let source = browser.source().await?;
    anyhow::ensure!(source.contains(&n0.peer), "the overview shows the node id");
    live(browser).await?;
    mark(browser).await?;

    // A job of three idle workers (they wait until cancelled), one per node.
    let request = JobRequest {
        min_workers: 3,
        max_workers: 3,
        strategy: zorilla_core::advert::Strategy::Spread,
        lifetime_secs: 30,
        args: vec![HOSTILE_ARG.into()],
        ..JobRequest::default()
    };
    let job = client.submit(request, wasm("idle"), vec![]).await?;
    let id = format!("{job:016x}");

    // It appears, then runs, on the open page: no reload, name as text.
    wait_until_within(
        browser,
        "the job running on the overview",
        &format!(
            "var l = document.querySelector('#home-jobs a[href=\"/jobs/{id}\"]');
             if (!l || l.textContent.indexOf('<script>window.pwned=1') < 0) return false;
             var p = l.parentNode.querySelector('.phase');
             return !!p && p.textContent === 'running' &&
                    document.getElementById('workers-running').textContent === '1'"
        ),
        GRID_WAIT,
    )
    .await?;
    unmarked(browser, "overview").await?;
    println!(
        "screenshot: {}",
        save_screenshot(browser, shots, "overview.png")
            .await?
            .display()
    );

    // The job's page: three workers running on three nodes, their output
    // arriving live.
    browser.goto(&format!("{base}/jobs/{id}")).await?;
    live(browser).await?;
    mark(browser).await?;
    wait_until_within(
        browser,
        "three running workers and their output",
        "var rows = document.querySelectorAll('#workers tbody tr');
         var running = document.querySelectorAll('#workers .worker.running');
         var log = document.getElementById('log');
         return rows.length === 3 && running.length === 3 && !!log &&
                (log.textContent.match(/idle rank \\d of 3/g) || []).length === 3",
        GRID_WAIT,
    )
    .await?;
    let nodes = browser
        .execute(
            "var s = {}; document.querySelectorAll('#workers tbody tr').forEach(function (r) {
                 s[r.cells[0].textContent] = 1; }); return Object.keys(s).length",
            vec![],
        )
        .await?;
    anyhow::ensure!(nodes == json!(3), "workers on {nodes} nodes, wanted 3");
    println!(
        "screenshot: {}",
        save_screenshot(browser, shots, "job-running.png")
            .await?
            .display()
    );

    // The grid view with the job's placement: the three nodes, each
    // running one of its workers, the home marked; the job's name (markup)
    // as text.
    browser.set_window_size(1000, 1000).await?;
    browser.goto(&format!("{base}/grid?job={id}")).await?;
    live(browser).await?;
    mark(browser).await?;
    wait_until_within(
        browser,
        "the grid view with the job on three nodes",
        "var boxes = document.querySelectorAll('svg#grid-picture rect.gridnode');
         var placed = document.querySelectorAll('svg#grid-picture rect.gridnode.placed');
         var rows = document.querySelectorAll('#grid tbody tr.placed');
         var p = document.getElementById('placement');
         var bands = document.querySelectorAll('svg#grid-picture text.bandlabel');
         return boxes.length === 3 && placed.length === 3 && rows.length === 3 &&
                bands.length === 2 && bands[0].textContent === 'amsterdam' &&
                document.querySelectorAll('svg#grid-picture rect.gridnode.silent').length === 0 &&
                !!p && p.textContent.indexOf('3 workers on 3 nodes') >= 0 &&
                document.querySelectorAll('#grid .homebadge').length === 1",
        GRID_WAIT,
    )
    .await?;
    let cores = browser
        .execute(
            "return document.querySelectorAll('svg#grid-picture rect.core.used').length",
            vec![],
        )
        .await?;
    anyhow::ensure!(cores == json!(3), "{cores} cores drawn in use, wanted 3");
    unmarked(browser, "grid view").await?;
    println!(
        "screenshot: {}",
        save_screenshot(browser, shots, "grid-job.png")
            .await?
            .display()
    );

    // Cancelled through the client: the open page follows.
    browser.set_window_size(1000, 900).await?;
    browser.goto(&format!("{base}/jobs/{id}")).await?;
    live(browser).await?;
    mark(browser).await?;
    let status = client.cancel(job).await?;
    anyhow::ensure!(status.phase == JobPhase::Cancelled, "{status:?}");
    wait_until_within(
        browser,
        "the job page showing the cancel",
        "var p = document.getElementById('phase');
         return !!p && p.textContent === 'cancelled' &&
                document.querySelectorAll('#workers .worker.running').length === 0",
        GRID_WAIT,
    )
    .await?;
    unmarked(browser, "job page").await?;
    println!(
        "screenshot: {}",
        save_screenshot(browser, shots, "job-cancelled.png")
            .await?
            .display()
    );

    // Another node's overview, through this one's overlay.
    browser.goto(&format!("{base}/peers/{}", n1.peer)).await?;
    browser.find(Locator::Css("p.remote")).await?;
    let shown = browser
        .execute(
            "return document.querySelector('main td.id').textContent",
            vec![],
        )
        .await?;
    anyhow::ensure!(shown == json!(n1.peer), "remote view shows {shown}");
    println!(
        "screenshot: {}",
        save_screenshot(browser, shots, "remote-overview.png")
            .await?
            .display()
    );

    // The peers page: the two other nodes in the picture.
    browser.set_window_size(1000, 1000).await?;
    browser.goto(&format!("{base}/peers")).await?;
    wait_until_within(
        browser,
        "both peers in the picture",
        "return document.querySelectorAll('svg#neighbourhood circle.peer').length === 2",
        GRID_WAIT,
    )
    .await?;
    println!(
        "screenshot: {}",
        save_screenshot(browser, shots, "peers.png")
            .await?
            .display()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_status_page_of_a_real_grid_in_headless_chromium() {
    let chromium = find_binary("ZORILLA_CHROMIUM", &["chromium", "chromium-browser"]);
    let chromedriver = find_binary("ZORILLA_CHROMEDRIVER", &["chromedriver"]);
    // Two sites (labels only, `--site`), so that the grid view groups by them.
    let dir = tempfile::tempdir().unwrap();
    let network = format!("test-browser-{}", std::process::id());
    let mut nodes: Vec<TestNode> = Vec::new();
    for (i, site) in ["amsterdam", "amsterdam", "delft"].into_iter().enumerate() {
        let bootstrap = nodes.first().map(|n| n.listen.clone());
        nodes.push(TestNode::start_with(
            &dir.path().join(format!("n{i}")),
            &network,
            bootstrap.as_deref(),
            1,
            "127.0.0.1",
            &["--site".into(), site.into()],
        ));
    }
    let grid = Grid {
        nodes,
        hosts: None,
        _dir: dir,
        network,
    };
    wait_for_neighbours(&grid.nodes, 2, GRID_WAIT).await;
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("zorilla-node-browser");
    std::fs::create_dir_all(&shots).unwrap();
    let work = tempfile::tempdir().unwrap();
    let driver_log = work.path().join("chromedriver.log");
    let (driver, driver_url) = start_driver(&chromedriver, &driver_log).await;
    let browser = session(
        &chromium,
        &driver_url,
        &work.path().join("profile"),
        &driver_log,
    )
    .await;
    let outcome =
        tokio::time::timeout(Duration::from_secs(150), scenario(&browser, &grid, &shots)).await;
    let _ = browser.close().await;
    drop(driver);
    let logs = || {
        grid.nodes
            .iter()
            .map(|n| format!("--- {}:\n{}", n.peer, n.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("browser test: {e:#}\n{}", logs()),
        Err(_) => panic!("browser test took over 150 s\n{}", logs()),
    }
    if std::env::var_os(DOC_SCREENSHOTS).is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/screenshots");
        std::fs::create_dir_all(&docs).unwrap();
        for name in DOCUMENTED {
            std::fs::copy(shots.join(name), docs.join(name)).unwrap();
            println!("kept in docs: {}", docs.join(name).display());
        }
    }
}

/// Set (to anything), the test also copies its screenshots of the pages
/// into `docs/screenshots/`, where the README shows them:
/// `ZORILLA_DOC_SCREENSHOTS=1 cargo test --workspace --test browser`.
const DOC_SCREENSHOTS: &str = "ZORILLA_DOC_SCREENSHOTS";
/// The screenshots kept in `docs/screenshots/`.
const DOCUMENTED: [&str; 4] = [
    "overview.png",
    "job-running.png",
    "grid-job.png",
    "peers.png",
];

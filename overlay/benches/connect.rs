//! Connection set-up with and without the membership gate: how long a new
//! node takes from dialing a node to having it as an identified peer (TCP,
//! noise, yamux, then in a closed grid the membership exchange, then
//! identify), in an open grid and in a closed one, measured in the same
//! run with the two interleaved so that both see the same machine.
//!
//! `cargo bench -p zorilla-overlay --bench connect`; `ZORILLA_BENCH_SHORT`
//! makes fewer rounds.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use zorilla_overlay::identity;
use zorilla_overlay::membership::credential::unix_now;
use zorilla_overlay::membership::{GridConfig, GridKey};
use zorilla_overlay::{Event, Overlay, OverlayConfig, OverlayHandle};

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

/// A node's configuration, closed if `grid` is given (with a credential
/// for the identity it gets in `dir`).
fn config(
    network: &str,
    dir: &std::path::Path,
    grid: Option<&GridKey>,
) -> anyhow::Result<OverlayConfig> {
    let key = identity::load_or_create(dir)?;
    Ok(OverlayConfig {
        state_dir: Some(dir.to_owned()),
        grid: grid.map(|g| {
            GridConfig::new(
                g.public(),
                g.issue(key.public().to_peer_id(), unix_now() + 3600, false),
            )
        }),
        ..OverlayConfig::local(network)
    })
}

/// Starts a dialer of `listener` and times it until the listener is an
/// identified peer.
async fn connect_once(
    mut config: OverlayConfig,
    listener: &OverlayHandle,
) -> anyhow::Result<Duration> {
    config.bootstrap = listener.listen_addrs().await?;
    let target = listener.local_peer_id();
    let start = Instant::now();
    let (handle, mut events) = Overlay::start(config).await?;
    let took = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = events.recv().await {
            if let Event::PeerConnected { peer } = event
                && peer == target
            {
                return Ok(start.elapsed());
            }
        }
        bail!("the overlay stopped")
    })
    .await
    .context("no connection within 30 s")??;
    handle.shutdown().await;
    Ok(took)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn run() -> anyhow::Result<()> {
    let rounds = if std::env::var_os("ZORILLA_BENCH_SHORT").is_some() {
        8
    } else {
        50
    };
    let dir = tempfile::tempdir()?;
    let grid = GridKey::generate();
    let open_net = format!("bench-open-{}", std::process::id());
    let closed_net = format!("bench-closed-{}", std::process::id());
    let (open, _open_events) =
        Overlay::start(config(&open_net, &dir.path().join("open"), None)?).await?;
    let (closed, _closed_events) = Overlay::start(config(
        &closed_net,
        &dir.path().join("closed"),
        Some(&grid),
    )?)
    .await?;
    // The events of the two listeners are not read: they must not stall.
    let drain = |mut events: tokio::sync::mpsc::Receiver<Event>| {
        tokio::spawn(async move { while events.recv().await.is_some() {} })
    };
    drain(_open_events);
    drain(_closed_events);

    let (mut open_times, mut closed_times) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let d = dir.path().join(format!("open-{i}"));
        open_times.push(connect_once(config(&open_net, &d, None)?, &open).await?);
        let d = dir.path().join(format!("closed-{i}"));
        closed_times.push(connect_once(config(&closed_net, &d, Some(&grid))?, &closed).await?);
    }
    open_times.sort();
    closed_times.sort();
    let median = |t: &[Duration]| t[t.len() / 2];
    let p90 = |t: &[Duration]| t[(t.len() * 9 / 10).min(t.len() - 1)];
    println!(
        "connection set-up, dial to identified peer, loopback, {rounds} new nodes each, interleaved"
    );
    for (what, t) in [("open grid", &open_times), ("closed grid", &closed_times)] {
        println!(
            "  {what:<12} median {:.2} ms, p90 {:.2} ms, min {:.2} ms",
            ms(median(t)),
            ms(p90(t)),
            ms(t[0])
        );
    }
    let extra = ms(median(&closed_times)) - ms(median(&open_times));
    println!("  the gate adds {extra:.2} ms (median)");
    // For scripts/bench.sh (see sim/src/bin/bench-report.rs).
    println!(
        "RESULT gate.open_connect_median {:.2} ms",
        ms(median(&open_times))
    );
    println!(
        "RESULT gate.closed_connect_median {:.2} ms",
        ms(median(&closed_times))
    );
    println!("RESULT gate.extra_median {extra:.2} ms");
    open.shutdown().await;
    closed.shutdown().await;
    Ok(())
}

//! Prometheus text exposition (format 0.0.4) of a node's state, at `/metrics`:
//! jobs by phase, workers, resources, peers by link, flood and message
//! counters, and a summary of peer RTTs.

use std::fmt::Write as _;

use crate::model::{JobPhase, LinkKind, NodeSnapshot};

/// The content type of the text format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Escapes a label value (backslash, double quote, newline).
fn label(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The `q`-quantile of sorted values (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Renders the snapshot.
pub(crate) fn render(snap: &NodeSnapshot) -> String {
    let mut out = String::with_capacity(4096);
    let o = &snap.overview;
    let c = &snap.counters;

    head(
        &mut out,
        "zorilla_node_info",
        "gauge",
        "Who this node is (always 1).",
    );
    let _ = writeln!(
        out,
        "zorilla_node_info{{node_id=\"{}\",name=\"{}\",version=\"{}\",network=\"{}\"}} 1",
        label(&o.node_id),
        label(&o.name),
        label(&o.version),
        label(&o.network)
    );
    head(
        &mut out,
        "zorilla_uptime_seconds",
        "gauge",
        "Seconds since the node started.",
    );
    let _ = writeln!(out, "zorilla_uptime_seconds {}", o.uptime_secs);

    head(
        &mut out,
        "zorilla_jobs",
        "gauge",
        "Jobs this node knows, by phase.",
    );
    for phase in JobPhase::ALL {
        let n = snap.jobs.iter().filter(|j| j.phase == phase).count();
        let _ = writeln!(out, "zorilla_jobs{{phase=\"{}\"}} {n}", phase.as_str());
    }
    head(
        &mut out,
        "zorilla_home_jobs",
        "gauge",
        "Jobs this node is the home of.",
    );
    let _ = writeln!(out, "zorilla_home_jobs {}", o.home_jobs.len());
    head(
        &mut out,
        "zorilla_workers_running",
        "gauge",
        "Workers running on this node.",
    );
    let _ = writeln!(out, "zorilla_workers_running {}", o.workers_running);
    head(
        &mut out,
        "zorilla_workers_started_total",
        "counter",
        "Workers started on this node.",
    );
    let _ = writeln!(out, "zorilla_workers_started_total {}", c.workers_started);
    head(
        &mut out,
        "zorilla_pending_adverts",
        "gauge",
        "Adverts this node holds.",
    );
    let _ = writeln!(out, "zorilla_pending_adverts {}", snap.pending.len());

    head(
        &mut out,
        "zorilla_cores",
        "gauge",
        "CPU cores offered and in use.",
    );
    let _ = writeln!(
        out,
        "zorilla_cores{{state=\"offered\"}} {}",
        o.offered.cores
    );
    let _ = writeln!(out, "zorilla_cores{{state=\"in_use\"}} {}", o.in_use.cores);
    head(
        &mut out,
        "zorilla_memory_bytes",
        "gauge",
        "Memory offered and in use.",
    );
    let _ = writeln!(
        out,
        "zorilla_memory_bytes{{state=\"offered\"}} {}",
        o.offered.memory_bytes
    );
    let _ = writeln!(
        out,
        "zorilla_memory_bytes{{state=\"in_use\"}} {}",
        o.in_use.memory_bytes
    );
    head(
        &mut out,
        "zorilla_disk_bytes",
        "gauge",
        "Disk offered and in use.",
    );
    let _ = writeln!(
        out,
        "zorilla_disk_bytes{{state=\"offered\"}} {}",
        o.offered.disk_bytes
    );
    let _ = writeln!(
        out,
        "zorilla_disk_bytes{{state=\"in_use\"}} {}",
        o.in_use.disk_bytes
    );

    head(
        &mut out,
        "zorilla_peers",
        "gauge",
        "Known peers, by link kind.",
    );
    for link in [LinkKind::Near, LinkKind::Far, LinkKind::None] {
        let n = snap.peers.iter().filter(|p| p.link == link).count();
        let _ = writeln!(out, "zorilla_peers{{link=\"{}\"}} {n}", link.as_str());
    }
    head(
        &mut out,
        "zorilla_peers_connected",
        "gauge",
        "Peers with an open connection.",
    );
    let _ = writeln!(
        out,
        "zorilla_peers_connected {}",
        snap.peers.iter().filter(|p| p.connected).count()
    );

    head(
        &mut out,
        "zorilla_floods_sent_total",
        "counter",
        "Floods sent as a home.",
    );
    let _ = writeln!(out, "zorilla_floods_sent_total {}", c.floods_sent);
    head(
        &mut out,
        "zorilla_floods_forwarded_total",
        "counter",
        "Floods forwarded for others.",
    );
    let _ = writeln!(out, "zorilla_floods_forwarded_total {}", c.floods_forwarded);
    head(
        &mut out,
        "zorilla_messages_total",
        "counter",
        "Overlay messages, by direction.",
    );
    let _ = writeln!(
        out,
        "zorilla_messages_total{{direction=\"sent\"}} {}",
        c.messages_sent
    );
    let _ = writeln!(
        out,
        "zorilla_messages_total{{direction=\"received\"}} {}",
        c.messages_received
    );

    let mut rtts: Vec<f64> = snap
        .peers
        .iter()
        .filter_map(|p| p.rtt_ms)
        .filter(|r| r.is_finite())
        .map(|ms| ms / 1e3)
        .collect();
    rtts.sort_by(f64::total_cmp);
    head(
        &mut out,
        "zorilla_peer_rtt_seconds",
        "summary",
        "Measured RTT to known peers.",
    );
    for q in [0.5, 0.9, 0.99] {
        let _ = writeln!(
            out,
            "zorilla_peer_rtt_seconds{{quantile=\"{q}\"}} {}",
            quantile(&rtts, q)
        );
    }
    let _ = writeln!(
        out,
        "zorilla_peer_rtt_seconds_sum {}",
        rtts.iter().sum::<f64>()
    );
    let _ = writeln!(out, "zorilla_peer_rtt_seconds_count {}", rtts.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), r#"a\"b\\c\nd"#);
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 2.0);
        assert_eq!(quantile(&v, 0.99), 4.0);
        assert!(quantile(&[], 0.5).is_nan());
    }
}

//! The picture of a node's neighbourhood: an SVG with the node in the centre
//! and each peer at a distance proportional to its RTT, near and far links
//! drawn differently. Peers are spread by angle in the order of their ids, so
//! the picture is stable between updates. At most [`MAX_DRAWN`] peers are
//! drawn (the closest); the table below the picture lists them all.
//!
//! Also the grid view's picture ([`grid`]): the nodes in bands by site or
//! distance, their cores, and where a job's workers are.

use maud::{Markup, html};

use crate::escape;
use crate::model::{GridGroup, GridNode, GridView, LinkKind, NodeOverview, PeerInfo};

/// The most peers drawn.
pub(crate) const MAX_DRAWN: usize = 64;

const SIZE: f64 = 400.0;
const CENTRE: f64 = SIZE / 2.0;
/// Radius of the innermost position (RTT 0) and of the outermost (the
/// largest RTT); peers without an RTT sit just outside.
const R_MIN: f64 = 28.0;
const R_MAX: f64 = 165.0;
const R_UNKNOWN: f64 = 185.0;

/// The SVG element.
pub(crate) fn neighbourhood(node: &NodeOverview, peers: &[PeerInfo]) -> Markup {
    let mut drawn: Vec<&PeerInfo> = peers.iter().collect();
    drawn.sort_by(|a, b| {
        a.rtt_ms
            .unwrap_or(f64::MAX)
            .total_cmp(&b.rtt_ms.unwrap_or(f64::MAX))
    });
    drawn.truncate(MAX_DRAWN);
    drawn.sort_by(|a, b| a.peer_id.cmp(&b.peer_id));
    let max_rtt = drawn
        .iter()
        .filter_map(|p| p.rtt_ms)
        .filter(|r| r.is_finite())
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let n = drawn.len().max(1) as f64;
    let placed: Vec<(&PeerInfo, f64, f64)> = drawn
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let r = match p.rtt_ms {
                Some(ms) if ms.is_finite() && ms >= 0.0 => R_MIN + (R_MAX - R_MIN) * ms / max_rtt,
                _ => R_UNKNOWN,
            };
            // Half a step off the vertical, to keep clear of the ring labels.
            let angle = std::f64::consts::TAU * (i as f64 + 0.5) / n - std::f64::consts::FRAC_PI_2;
            (*p, CENTRE + r * angle.cos(), CENTRE + r * angle.sin())
        })
        .collect();
    html! {
        svg #neighbourhood xmlns="http://www.w3.org/2000/svg" viewBox="0 0 400 400" role="img"
            aria-label=(format!("Neighbourhood of {}: {} peers by RTT", node.name, peers.len())) {
            @for frac in [0.25, 0.5, 0.75, 1.0] {
                @let r = R_MIN + (R_MAX - R_MIN) * frac;
                circle.ring cx=(CENTRE) cy=(CENTRE) r=(fmt(r)) {}
                text.ringlabel x=(fmt(CENTRE + 3.0)) y=(fmt(CENTRE - r - 2.0)) {
                    (format!("{:.0} ms", max_rtt * frac))
                }
            }
            @for (p, x, y) in &placed {
                @if p.link != LinkKind::None {
                    line.(p.link.as_str()) x1=(CENTRE) y1=(CENTRE) x2=(fmt(*x)) y2=(fmt(*y)) {}
                }
            }
            @for (p, x, y) in &placed {
                a href=(format!("/peers/{}", escape::path_segment(&p.peer_id))) {
                    circle.peer.(p.link.as_str()).connected[p.connected] cx=(fmt(*x)) cy=(fmt(*y)) r="7" {
                        title {
                            (p.name.as_deref().unwrap_or(&p.peer_id))
                            (match p.rtt_ms { Some(ms) => format!(" · {ms:.1} ms"), None => String::new() })
                            " · " (p.link.as_str())
                            @if !p.connected { " · not connected" }
                        }
                    }
                }
            }
            circle.me cx=(CENTRE) cy=(CENTRE) r="16" { title { (node.name) } }
            text.me x=(CENTRE) y=(fmt(CENTRE + 3.0)) text-anchor="middle" { "me" }
        }
    }
}

fn fmt(v: f64) -> String {
    format!("{v:.1}")
}

/// The most nodes the grid picture draws (the table lists them all).
pub(crate) const MAX_GRID_DRAWN: usize = 300;
/// The most cores drawn in a node's box; more are counted.
const MAX_CORES_DRAWN: u32 = 18;

const GRID_WIDTH: f64 = 760.0;
const BOX_W: f64 = 112.0;
const BOX_H: f64 = 72.0;
const GAP: f64 = 10.0;
const BAND_HEAD: f64 = 24.0;
const COLUMNS: usize = 6;

/// The grid picture: a band per group, a box per node with its cores (in
/// use filled, free hollow), the nodes running the shown job's workers
/// with a thick border and their count, the job's home marked, nodes that
/// did not answer dashed. Each box links to the node's remote view.
pub(crate) fn grid(view: &GridView) -> Markup {
    let mut bands: Vec<(&GridGroup, Vec<&GridNode>, f64, f64)> = Vec::new();
    let mut y = 0.0;
    let mut left = MAX_GRID_DRAWN;
    for g in &view.groups {
        let nodes: Vec<&GridNode> = g.nodes.iter().take(left).collect();
        left -= nodes.len();
        if nodes.is_empty() {
            continue;
        }
        let rows = nodes.len().div_ceil(COLUMNS) as f64;
        let height = BAND_HEAD + rows * (BOX_H + GAP);
        bands.push((g, nodes, y, height));
        y += height + GAP;
    }
    let total = y.max(40.0);
    let drawn: usize = bands.iter().map(|b| b.1.len()).sum();
    html! {
        svg #grid-picture xmlns="http://www.w3.org/2000/svg"
            viewBox=(format!("0 0 {GRID_WIDTH} {}", fmt(total))) role="img"
            aria-label=(format!("The grid: {drawn} nodes in {} groups", bands.len())) {
            @for (g, nodes, top, height) in &bands {
                g.gridgroup {
                    rect.band x="0" y=(fmt(*top)) width=(GRID_WIDTH) height=(fmt(*height)) rx="6" {}
                    text.bandlabel x="10" y=(fmt(top + 16.0)) { (g.label) }
                    text.bandnote x=(fmt(GRID_WIDTH - 10.0)) y=(fmt(top + 16.0)) text-anchor="end" {
                        (band_note(nodes))
                    }
                    @for (i, n) in nodes.iter().enumerate() {
                        @let x = GAP + (i % COLUMNS) as f64 * (BOX_W + GAP);
                        @let y = top + BAND_HEAD + (i / COLUMNS) as f64 * (BOX_H + GAP);
                        (node_box(n, x, y))
                    }
                }
            }
        }
    }
}

/// What a band says of its nodes: cores free of offered, and the RTT range.
fn band_note(nodes: &[&GridNode]) -> String {
    let (free, offered) =
        nodes
            .iter()
            .filter_map(|n| n.summary.as_ref())
            .fold((0u64, 0u64), |(f, o), s| {
                (
                    f + u64::from(s.free_cores()),
                    o + u64::from(s.offered_cores),
                )
            });
    let rtts: Vec<f64> = nodes
        .iter()
        .filter(|n| !n.this_node)
        .filter_map(|n| n.rtt_ms)
        .filter(|r| r.is_finite())
        .collect();
    let range = match (
        rtts.iter().copied().reduce(f64::min),
        rtts.iter().copied().reduce(f64::max),
    ) {
        (Some(lo), Some(hi)) if hi - lo >= 0.05 => format!(" · {lo:.1}-{hi:.1} ms"),
        (Some(lo), _) => format!(" · {lo:.1} ms"),
        _ => String::new(),
    };
    format!("{free} of {offered} cores free{range}")
}

fn node_box(n: &GridNode, x: f64, y: f64) -> Markup {
    let href = if n.this_node {
        "/".to_string()
    } else {
        format!("/peers/{}", escape::path_segment(&n.node_id))
    };
    let name = match &n.summary {
        Some(s) => clip(&s.name, 17),
        None => clip(&n.node_id, 17),
    };
    // The end of the id tells apart nodes of one name (machines named
    // alike, or several nodes on one machine).
    let tail: String = {
        let chars: Vec<char> = n.node_id.chars().collect();
        chars[chars.len().saturating_sub(6)..].iter().collect()
    };
    let note = if n.this_node {
        "this node".to_string()
    } else {
        match n.rtt_ms {
            Some(ms) => format!("{ms:.1} ms · {tail}"),
            None => format!("no RTT · {tail}"),
        }
    };
    let title = match &n.summary {
        Some(s) => format!(
            "{} ({}) · {} of {} cores in use · {} workers",
            s.name, n.node_id, s.used_cores, s.offered_cores, s.workers_running
        ),
        None => format!(
            "{} · no answer: {}",
            n.node_id,
            n.no_answer.as_deref().unwrap_or("unknown")
        ),
    };
    html! {
        a href=(href) {
            rect.gridnode.me[n.this_node].silent[n.summary.is_none()].placed[n.job_ranks > 0]
                x=(fmt(x)) y=(fmt(y)) width=(BOX_W) height=(BOX_H) rx="5" data-node=(n.node_id) {
                title { (title) }
            }
            text.nodename x=(fmt(x + 6.0)) y=(fmt(y + 14.0)) { (name) }
            text.nodenote x=(fmt(x + 6.0)) y=(fmt(y + 26.0)) { (note) }
            @if n.job_home {
                text.homemark x=(fmt(x + BOX_W - 6.0)) y=(fmt(y + 26.0)) text-anchor="end" { "home" }
            }
            @match &n.summary {
                Some(s) => {
                    @for c in 0..s.offered_cores.min(MAX_CORES_DRAWN) {
                        rect.core.used[c < s.used_cores]
                            x=(fmt(x + 6.0 + f64::from(c % 9) * 11.0))
                            y=(fmt(y + 33.0 + f64::from(c / 9) * 11.0))
                            width="8" height="8" {}
                    }
                    @if s.offered_cores > MAX_CORES_DRAWN {
                        text.nodenote x=(fmt(x + BOX_W - 6.0)) y=(fmt(y + 41.0)) text-anchor="end" {
                            "+" (s.offered_cores - MAX_CORES_DRAWN)
                        }
                    }
                }
                None => {
                    text.nodenote x=(fmt(x + 6.0)) y=(fmt(y + 44.0)) { "no answer" }
                }
            }
            @if n.job_ranks > 0 {
                text.ranks x=(fmt(x + 6.0)) y=(fmt(y + BOX_H - 7.0)) {
                    (n.job_ranks) @if n.job_ranks == 1 { " worker" } @else { " workers" }
                }
            }
        }
    }
}

/// At most `max` characters of `s`, an ellipsis marking a cut.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let head: String = s.chars().take(max - 1).collect();
        format!("{head}…")
    }
}

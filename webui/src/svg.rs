//! The picture of a node's neighbourhood: an SVG with the node in the centre
//! and each peer at a distance proportional to its RTT, near and far links
//! drawn differently. Peers are spread by angle in the order of their ids, so
//! the picture is stable between updates. At most [`MAX_DRAWN`] peers are
//! drawn (the closest); the table below the picture lists them all.

use maud::{Markup, html};

use crate::escape;
use crate::model::{LinkKind, NodeOverview, PeerInfo};

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

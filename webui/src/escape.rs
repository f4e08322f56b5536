//! Escaping of what goes into a URL: the pages, the neighbourhood picture
//! and the live-update routes all link to jobs and peers by ids that came
//! from the network. (HTML escaping is maud's; metric labels are escaped in
//! `metrics`.)

use std::fmt::Write as _;

/// Percent-encodes one path segment (everything but RFC 3986 unreserved).
pub(crate) fn path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

//! The HTML pages, rendered on the server with `maud`, which escapes every
//! interpolated string by default (text and attribute values alike). Nothing
//! here writes unescaped text: the only `PreEscaped` values are the constant
//! markup this module builds itself.
//!
//! Each page is a [`layout`] around a body; the body alone is what the live
//! updates send, so a browser with JavaScript swaps the `<main>` contents
//! and a browser without it sees the same tables on reload.

use maud::{DOCTYPE, Markup, html};

use crate::model::{
    AddressInfo, GridAccess, GridView, Grouping, JobDetail, JobRole, JobSummary, NodeOverview,
    NodeSnapshot, PeerInfo, PendingAdvert, Resources, WorkerInfo,
};
use crate::{MAX_LOG_LINE_BYTES, MAX_LOG_LINES};
use crate::{escape, svg};

/// Which page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum View {
    /// `/`
    Overview,
    /// `/peers`
    Peers,
    /// `/jobs`
    Jobs,
    /// `/jobs/{id}`
    Job(String),
    /// `/pending`
    Pending,
    /// `/grid`, `/grid?job=ID`: this node's only (no remote scope).
    Grid(Option<String>),
}

impl View {
    /// The page's path below its scope's base.
    pub(crate) fn path(&self) -> String {
        match self {
            Self::Overview => "/".into(),
            Self::Peers => "/peers".into(),
            Self::Jobs => "/jobs".into(),
            Self::Job(id) => format!("/jobs/{}", escape::path_segment(id)),
            Self::Pending => "/pending".into(),
            Self::Grid(None) => "/grid".into(),
            Self::Grid(Some(job)) => format!("/grid?job={}", escape::path_segment(job)),
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::Overview => "Overview",
            Self::Peers => "Peers",
            Self::Jobs => "Jobs",
            Self::Job(_) => "Job",
            Self::Pending => "Pending queue",
            Self::Grid(_) => "Grid",
        }
    }
}

/// Whose pages: this node's, or a peer's seen through the overlay.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    /// The peer for a remote view.
    pub(crate) remote: Option<String>,
}

impl Scope {
    /// This node.
    pub(crate) fn local() -> Self {
        Self { remote: None }
    }

    /// The prefix of this scope's page links.
    fn base(&self) -> String {
        match &self.remote {
            None => String::new(),
            Some(peer) => format!("/peers/{}", escape::path_segment(peer)),
        }
    }

    /// The link to a view in this scope.
    pub(crate) fn href(&self, view: &View) -> String {
        let base = self.base();
        match (view, base.is_empty()) {
            (View::Overview, false) => base,
            _ => format!("{base}{}", view.path()),
        }
    }
}

/// The link to a peer's remote view.
fn peer_href(peer: &str) -> String {
    format!("/peers/{}", escape::path_segment(peer))
}

/// A long id shortened for display (the full id goes in a `title`).
fn short(id: &str) -> String {
    let n = id.chars().count();
    if n <= 16 {
        id.to_string()
    } else {
        let head: String = id.chars().take(8).collect();
        let tail: String = id.chars().skip(n - 6).collect();
        format!("{head}…{tail}")
    }
}

/// Bytes in binary units.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A duration in seconds, in the two largest units.
pub(crate) fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

fn rtt(ms: Option<f64>) -> String {
    match ms {
        Some(ms) => format!("{ms:.1} ms"),
        None => "–".into(),
    }
}

/// A node id with its remote-view link (or "this node").
fn node_link(id: &str, me: &str) -> Markup {
    html! {
        @if id == me {
            span.id title=(id) { "this node" }
        } @else {
            a.id href=(peer_href(id)) title=(id) { (short(id)) }
        }
    }
}

/// A whole page: head, navigation, the body in `<main>`, and the live-update
/// hook (`data-live`, used by `/static/live.js`).
pub(crate) fn layout(
    scope: &Scope,
    view: &View,
    node: &NodeOverview,
    live: Option<&str>,
    body: Markup,
) -> Markup {
    let mut tabs = vec![View::Overview, View::Peers, View::Jobs, View::Pending];
    // The grid is gathered by this node: no remote view of it.
    if scope.remote.is_none() {
        tabs.push(View::Grid(None));
    }
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (view.title()) " · " (node.name) " · Zorilla" }
                link rel="stylesheet" href="/static/style.css";
                @if live.is_some() {
                    script src="/static/live.js" defer {}
                }
            }
            body {
                header {
                    div.brand {
                        a href="/" { "Zorilla" }
                        " · "
                        strong { (node.name) }
                        " "
                        span.id title=(node.node_id) { (short(&node.node_id)) }
                    }
                    @if let Some(peer) = &scope.remote {
                        p.remote {
                            "Remote view of " span.id title=(peer) { (short(peer)) }
                            " through the overlay. "
                            a href="/" { "Back to this node" }
                        }
                    }
                    nav {
                        @for tab in &tabs {
                            @let current = std::mem::discriminant(tab) == std::mem::discriminant(view)
                                || (matches!(view, View::Job(_)) && *tab == View::Jobs);
                            a.current[current] href=(scope.href(tab)) { (tab.title()) }
                        }
                    }
                }
                main #content data-live=[live] {
                    (body)
                }
                footer {
                    @if live.is_some() {
                        span #live { "static page" }
                        " · "
                    }
                    "zorilla-node " (node.version)
                    " · " a href="/metrics" { "metrics" }
                    " · " a href=(format!("/api{}", api_path(scope, view))) { "JSON" }
                }
            }
        }
    }
}

/// The JSON route mirroring a page (below `/api`).
fn api_path(scope: &Scope, view: &View) -> String {
    let page = match view {
        View::Overview => "/overview".to_string(),
        other => other.path(),
    };
    format!("{}{page}", scope.base())
}

/// The body of a view, from the data it shows.
pub(crate) fn body(
    scope: &Scope,
    view: &View,
    snap: &NodeSnapshot,
    job: Option<&JobDetail>,
) -> Markup {
    match view {
        View::Overview => overview(scope, &snap.overview, &snap.jobs),
        View::Peers => peers(&snap.overview, &snap.peers),
        View::Jobs => jobs(scope, &snap.overview, &snap.jobs),
        View::Job(id) => match job {
            Some(job) => job_detail(scope, &snap.overview, job),
            None => not_found_body(&format!("No job {id} on this node.")),
        },
        View::Pending => pending(scope, &snap.overview, &snap.pending),
        // Rendered by `grid` from a gathered view, never from a snapshot.
        View::Grid(_) => not_found_body("The grid view is shown by this node only."),
    }
}

/// The body of a 404 or error page.
pub(crate) fn not_found_body(message: &str) -> Markup {
    html! {
        h1 { "Not found" }
        p { (message) }
    }
}

/// A minimal page for errors, where no node data is at hand.
pub(crate) fn error_page(title: &str, message: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Zorilla" }
                link rel="stylesheet" href="/static/style.css";
            }
            body {
                header { div.brand { a href="/" { "Zorilla" } } }
                main {
                    h1 { (title) }
                    p { (message) }
                }
            }
        }
    }
}

fn resources_row(label: &str, r: Resources) -> Markup {
    html! {
        tr {
            th { (label) }
            td.num { (r.cores) }
            td.num { (bytes(r.memory_bytes)) }
            td.num { (bytes(r.disk_bytes)) }
        }
    }
}

/// The node's own addresses, and whether others can reach it there (for
/// this node only: a remote view has none).
fn addresses(addresses: &[AddressInfo]) -> Markup {
    html! {
        @if !addresses.is_empty() {
            h2 { "Addresses" }
            div.scroll {
                table #addresses {
                    thead { tr { th { "Address" } th { "Reachable from other hosts" } th { "Why" } } }
                    tbody {
                        @for a in addresses {
                            tr {
                                td { code { (a.address) } }
                                td { @if a.reachable { "yes" } @else { "no" } }
                                td { (a.why) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn overview(scope: &Scope, node: &NodeOverview, jobs: &[JobSummary]) -> Markup {
    html! {
        h1 { (node.name) }
        @if let Some(problem) = &node.problem {
            p.problem #problem { (problem) }
        }
        div.scroll {
            table.kv {
                tr { th { "Node id" } td.id { (node.node_id) } }
                tr { th { "Version" } td { (node.version) } }
                tr { th { "Uptime" } td { (duration(node.uptime_secs)) } }
                tr { th { "Network" } td { (node.network) } }
                @match &node.grid {
                    Some(GridAccess::Open) => tr {
                        th { "Who may join" }
                        td #grid-access { "Anyone who can reach this node: an open grid (no grid key)." }
                    },
                    Some(GridAccess::Closed { fingerprint, expires_unix }) => tr {
                        th { "Who may join" }
                        td #grid-access {
                            "Only nodes with a credential of grid key " code { (fingerprint) }
                            ". This node's credential expires in "
                            (duration(expires_unix.saturating_sub(unix_now())))
                            " (at " (expires_unix) ", Unix seconds)."
                        }
                    },
                    None => {}
                }
                tr {
                    th { "Listening on" }
                    td {
                        @for addr in &node.listen_addresses {
                            code { (addr) } br;
                        }
                    }
                }
                tr { th { "Workers running" } td #workers-running { (node.workers_running) } }
                @if let Some(p) = &node.position {
                    tr {
                        th { "Network coordinates" }
                        td #position {
                            code { (coordinates(&p.coordinates)) }
                            " ms, relative error " (format!("{:.2}", p.error))
                        }
                    }
                }
            }
        }
        (addresses(&node.addresses))
        h2 { "Resources" }
        div.scroll {
            table {
                thead { tr { th {} th { "Cores" } th { "Memory" } th { "Disk" } } }
                tbody {
                    (resources_row("Offered", node.offered))
                    (resources_row("In use", node.in_use))
                }
            }
        }
        p #cpu-speed {
            "CPU speed " (node.cpu_speed)
            @if let Some(source) = &node.cpu_speed_source { ", " (source) }
            " (1000 is the reference; homes prefer idle, then faster nodes among equally near offers)."
        }
        @if !node.creditors.is_empty() {
            h2 { "Favours" }
            p {
                "Nodes that ran more for this node's jobs than it ran for theirs: their \
                 jobs get this node's freed cores first, in proportion (core seconds of \
                 this machine)."
            }
            div.scroll {
                table #creditors {
                    thead { tr { th { "Node" } th { "Balance" } } }
                    tbody {
                        @for c in &node.creditors {
                            tr {
                                td { a.id href=(peer_href(&c.node_id)) title=(c.node_id) { (short(&c.node_id)) } }
                                td.num { (c.balance_core_secs) " core s" }
                            }
                        }
                    }
                }
            }
        }
        @if !node.avoided.is_empty() {
            h2 { "Nodes avoided (" (node.avoided.len()) ")" }
            p {
                "Each gave results that a majority of a replicated job's runs disagreed \
                 with: this node grants it no worker of its jobs any more."
            }
            ul #avoided {
                @for id in &node.avoided {
                    li { a.id href=(peer_href(id)) title=(id) { (short(id)) } }
                }
            }
        }
        h2 { "Jobs this node is home to (" (node.home_jobs.len()) ")" }
        @if node.home_jobs.is_empty() {
            p.empty { "None." }
        } @else {
            ul #home-jobs {
                @for id in &node.home_jobs {
                    @let summary = jobs.iter().find(|j| &j.id == id);
                    li {
                        a href=(scope.href(&View::Job(id.clone()))) {
                            @match summary {
                                Some(j) => { (j.name) }
                                None => { (id) }
                            }
                        }
                        @if let Some(j) = summary {
                            " " span.(format!("phase {}", j.phase.as_str())) { (j.phase.as_str()) }
                            " " (j.workers_joined) "/" (j.workers_needed) " workers"
                        }
                    }
                }
            }
        }
    }
}

fn peers(node: &NodeOverview, peers: &[PeerInfo]) -> Markup {
    let mut sorted: Vec<&PeerInfo> = peers.iter().collect();
    sorted.sort_by(|a, b| PeerInfo::display_order(a, b));
    let has_coords = peers.iter().any(|p| p.coordinates.is_some());
    html! {
        h1 { "Peers (" (peers.len()) ")" }
        figure.graph {
            (svg::neighbourhood(node, peers))
            figcaption {
                "This node in the centre, peers at a distance proportional to RTT. "
                span.key-near { "— near link" } " · "
                span.key-far { "- - far link" } " · "
                span.key-none { "● known, no link" } " · hollow: not connected."
            }
        }
        div.scroll {
            table #peers {
                thead {
                    tr {
                        th { "Peer" } th { "Name" } th { "RTT" } th { "Link" } th { "Connected" }
                        @if has_coords { th { "Coordinates" } }
                    }
                }
                tbody {
                    @for p in &sorted {
                        tr {
                            td { a.id href=(peer_href(&p.peer_id)) title=(p.peer_id) { (short(&p.peer_id)) } }
                            td { @if let Some(name) = &p.name { (name) } }
                            td.num { (rtt(p.rtt_ms)) }
                            td { span.(format!("link {}", p.link.as_str())) { (p.link.as_str()) } }
                            td { @if p.connected { "yes" } @else { "no" } }
                            @if has_coords {
                                td {
                                    @if let Some(c) = &p.coordinates {
                                        code { (coordinates(c)) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Network coordinates as the pages write them: `x, y, height`.
fn coordinates(c: &[f64]) -> String {
    c.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn jobs(scope: &Scope, node: &NodeOverview, jobs: &[JobSummary]) -> Markup {
    html! {
        h1 { "Jobs (" (jobs.len()) ")" }
        @if jobs.is_empty() {
            p.empty { "No jobs." }
        } @else {
            div.scroll {
                table #jobs {
                    thead {
                        tr {
                            th { "Job" } th { "Phase" } th { "Workers" } th { "Home" }
                            th { "Owner" } th { "Strategy" } th { "Radius" } th { "Age" } th { "Why pending" }
                        }
                    }
                    tbody {
                        @for j in jobs {
                            tr {
                                td {
                                    a href=(scope.href(&View::Job(j.id.clone()))) title=(j.id) { (j.name) }
                                    @if j.role == JobRole::Participant { " " small { "(participant)" } }
                                }
                                td { span.(format!("phase {}", j.phase.as_str())) { (j.phase.as_str()) } }
                                td.num { (j.workers_joined) "/" (j.workers_needed) }
                                td { (node_link(&j.home, &node.node_id)) }
                                td.id { (owner(j)) }
                                td { (j.strategy) }
                                td.num { (j.flood_radius) }
                                td.num { (duration(j.age_secs)) }
                                td { @if let Some(why) = &j.pending_reason { (why) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Whose a job is, as the pages write it.
fn owner(job: &JobSummary) -> &str {
    job.owner
        .as_deref()
        .unwrap_or("nobody (submitted without a user key)")
}

/// Cuts a log line to [`MAX_LOG_LINE_BYTES`] on a character boundary.
fn cut(text: &str) -> &str {
    if text.len() <= MAX_LOG_LINE_BYTES {
        return text;
    }
    let mut end = MAX_LOG_LINE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn job_detail(scope: &Scope, node: &NodeOverview, job: &JobDetail) -> Markup {
    let j = &job.summary;
    // Workers grouped per node, nodes in order of their ids.
    let mut workers: Vec<&WorkerInfo> = job.workers.iter().collect();
    workers.sort_by(|a, b| a.node.cmp(&b.node).then(a.index.cmp(&b.index)));
    let skip = job.log_tail.len().saturating_sub(MAX_LOG_LINES);
    html! {
        h1 { (j.name) }
        div.scroll {
            table.kv {
                tr { th { "Job id" } td.id { (j.id) } }
                tr { th { "Phase" } td { span.(format!("phase {}", j.phase.as_str())) #phase { (j.phase.as_str()) } } }
                tr { th { "Workers" } td { (j.workers_joined) "/" (j.workers_needed) } }
                tr { th { "Home" } td { (node_link(&j.home, &node.node_id)) } }
                tr { th { "Owner" } td.id #owner { (owner(j)) } }
                tr { th { "Strategy" } td { (j.strategy) } }
                tr { th { "Flood radius" } td { (j.flood_radius) } }
                tr { th { "Age" } td { (duration(j.age_secs)) } }
                @if let Some(why) = &j.pending_reason {
                    tr { th { "Why pending" } td { (why) } }
                }
            }
        }
        @if scope.remote.is_none() {
            p { a #placement-link href=(View::Grid(Some(j.id.clone())).path()) { "Where its workers run on the grid, and how far" } }
        }
        h2 { "Workers (" (workers.len()) ")" }
        @if workers.is_empty() {
            p.empty { "No workers yet." }
        } @else {
            div.scroll {
                table #workers {
                    thead { tr { th { "Node" } th { "Worker" } th { "State" } th { "Exit" } th { "How it ended" } } }
                    tbody {
                        @for w in &workers {
                            tr {
                                td { (node_link(&w.node, &node.node_id)) }
                                td.num { (w.index) }
                                td { span.(format!("worker {}", w.state.as_str())) { (w.state.as_str()) } }
                                td.num { @if let Some(code) = w.exit_code { (code) } }
                                td { @if let Some(ended) = &w.ended { (ended) } }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Log (last " (job.log_tail.len().min(MAX_LOG_LINES)) " lines)" }
        @if job.log_tail.is_empty() {
            p.empty { "No output yet." }
        } @else {
            pre #log {
                @for line in job.log_tail.iter().skip(skip) {
                    span.t { (format!("{:8.3}", line.at_secs)) }
                    " "
                    span.w { @match line.worker { Some(w) => { "[" (w) "]" } None => { "[home]" } } }
                    " " (cut(&line.text)) "\n"
                }
            }
        }
    }
}

fn pending(scope: &Scope, node: &NodeOverview, adverts: &[PendingAdvert]) -> Markup {
    html! {
        h1 { "Pending queue (" (adverts.len()) ")" }
        p { "Adverts of jobs looking for workers that this node holds, and when they expire." }
        @if adverts.is_empty() {
            p.empty { "No adverts held." }
        } @else {
            div.scroll {
                table #pending {
                    thead { tr { th { "Job" } th { "Home" } th { "Workers wanted" } th { "Expires in" } } }
                    tbody {
                        @for a in adverts {
                            tr {
                                td { a href=(scope.href(&View::Job(a.job_id.clone()))) title=(a.job_id) { (a.job_name) } }
                                td { (node_link(&a.home, &node.node_id)) }
                                td.num { (a.workers_wanted) }
                                td.num { (duration(a.expires_in_secs)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The grid view's body: the picture, the job's placement and the table.
pub(crate) fn grid(view: &GridView) -> Markup {
    let nodes: usize = view.groups.iter().map(|g| g.nodes.len()).sum();
    let me = view
        .groups
        .iter()
        .flat_map(|g| g.nodes.iter())
        .find(|n| n.this_node)
        .map(|n| n.node_id.clone())
        .unwrap_or_default();
    let grouped = match view.grouped_by {
        Grouping::Site => "by the site each node says it is at",
        Grouping::Distance => "by RTT from this node (no node names a site)",
    };
    html! {
        h1 { "Grid (" (nodes) " nodes)" }
        p #grid-asked {
            "The nodes this node knows, grouped " (grouped) ", each as it describes itself. "
            "Asked " (view.asked) " of " (view.known_peers) " known peers (the nearest"
            @if view.job.is_some() { ", the job's nodes first" }
            "; at most " (view.limit) ", the node's " code { "grid_view_peers" } "); "
            (view.answered) " answered. Answers are at most a few seconds old."
        }
        @if let Some(job) = &view.job {
            section #placement {
                h2 {
                    "Where job "
                    @if job.name.is_empty() { (job.id) } @else { (job.name) }
                    " runs"
                }
                p {
                    @if job.ranks == 0 {
                        "No node of this view runs workers of it (from " (job.source) ")."
                    } @else {
                        (job.ranks) " workers on " (job.nodes) " nodes, by " (job.source) ". "
                    }
                    @if let Some(home) = &job.home {
                        " Its home: " (node_link(home, &me)) ". "
                        @if *home == me {
                            "Distances are RTTs from this node, the home that placed the workers: "
                            "the nearest nodes with free cores get them first."
                        } @else {
                            "Distances are RTTs from this node, not from the home that placed the "
                            "workers: the home's own grid view shows its distances."
                        }
                    }
                }
            }
        }
        figure.grid {
            (svg::grid(view))
            figcaption {
                "Each box a node: its cores, "
                span.key-used { "■ in use" } " and "
                span.key-free { "□ free" } "; "
                @if view.job.is_some() {
                    span.key-placed { "thick border: runs workers of the job" } ", "
                }
                "dashed: did not answer. RTTs as this node measured them."
            }
        }
        div.scroll {
            table #grid {
                thead {
                    tr {
                        th { @match view.grouped_by { Grouping::Site => "Site", Grouping::Distance => "Distance" } }
                        th { "Node" } th { "Name" } th { "RTT" } th { "Cores used" } th { "Cores free" }
                        th { "Workers" } th { "Jobs (workers here)" }
                        @if view.job.is_some() { th { "Workers of the job" } }
                    }
                }
                tbody {
                    @for g in &view.groups {
                        @for n in &g.nodes {
                            tr.placed[n.job_ranks > 0] data-node=(n.node_id) {
                                td { (g.label) }
                                td { (node_link(&n.node_id, &me)) }
                                @match &n.summary {
                                    Some(s) => {
                                        td { (s.name) }
                                        td.num { @if n.this_node { "–" } @else { (rtt(n.rtt_ms)) } }
                                        td.num.used { (s.used_cores) " of " (s.offered_cores) }
                                        td.num.free { (s.free_cores()) }
                                        td.num { (s.workers_running) }
                                        td {
                                            @for (i, j) in s.jobs.iter().enumerate() {
                                                @if i > 0 { ", " }
                                                a href=(View::Grid(Some(j.id.clone())).path()) title=(j.id) { (j.name) }
                                                " ×" (j.ranks)
                                            }
                                        }
                                    }
                                    None => {
                                        td.silent { "no answer: " (n.no_answer.as_deref().unwrap_or("unknown")) }
                                        td.num { (rtt(n.rtt_ms)) }
                                        td.num {} td.num {} td.num {} td {}
                                    }
                                }
                                @if view.job.is_some() {
                                    td.num.ranks {
                                        @if n.job_ranks > 0 { (n.job_ranks) }
                                        @if n.job_home { " " span.homebadge { "home" } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The style sheet, served at `/static/style.css`.
pub(crate) const STYLE: &str = r#"
:root { color-scheme: light dark; --fg:#1d232a; --bg:#fbfbf8; --mut:#667; --line:#d8d8d0; --acc:#0b6e4f; --far:#3a5fcd; }
@media (prefers-color-scheme: dark) { :root { --fg:#e6e6e0; --bg:#15181b; --mut:#99a; --line:#333a40; --acc:#4fc196; --far:#8aa4ff; } }
* { box-sizing: border-box; }
body { margin:0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--fg); background:var(--bg); }
header { padding:.6rem 1rem; border-bottom:1px solid var(--line); }
.brand a { color:var(--acc); font-weight:700; text-decoration:none; }
nav { display:flex; flex-wrap:wrap; gap:.3rem; margin-top:.4rem; }
nav a { padding:.25rem .6rem; border-radius:.3rem; text-decoration:none; color:var(--fg); border:1px solid var(--line); }
nav a.current { background:var(--acc); color:var(--bg); border-color:var(--acc); }
main { padding: .5rem 1rem 1rem; max-width: 72rem; }
h1 { font-size:1.35rem; margin:.6rem 0; overflow-wrap:anywhere; }
h2 { font-size:1.1rem; margin:1.2rem 0 .4rem; }
.scroll { overflow-x:auto; }
table { border-collapse:collapse; min-width: 50%; }
th, td { text-align:left; padding:.3rem .6rem; border-bottom:1px solid var(--line); vertical-align:top; }
thead th { color:var(--mut); font-weight:600; }
table.kv th { color:var(--mut); font-weight:600; white-space:nowrap; }
td.num { text-align:right; font-variant-numeric: tabular-nums; white-space:nowrap; }
.id, code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size:.9em; overflow-wrap:anywhere; }
.phase, .worker, .link { padding:.05rem .4rem; border-radius:.7rem; font-size:.85em; border:1px solid var(--line); white-space:nowrap; }
.running, .near { color:var(--acc); border-color:var(--acc); }
.scheduling, .starting { color:#b8860b; border-color:#b8860b; }
.failed, .lost { color:#c0392b; border-color:#c0392b; }
.far { color:var(--far); border-color:var(--far); }
.empty, figcaption, footer, .remote { color:var(--mut); }
.problem { color:#c0392b; font-weight:600; border:1px solid #c0392b; border-radius:.3rem; padding:.3rem .5rem; }
.remote { background: rgba(58,95,205,.1); padding:.3rem .5rem; border-radius:.3rem; }
pre#log { background: rgba(127,127,127,.1); padding:.5rem; overflow-x:auto; font-size:.85em; max-height: 32rem; }
pre#log .t, pre#log .w { color:var(--mut); }
footer { padding: .5rem 1rem 1.5rem; font-size:.85em; }
figure.graph { margin: 0 0 1rem; }
figure.graph svg { width:100%; max-width: 26rem; height:auto; display:block; }
svg .ring { fill:none; stroke:var(--line); }
svg .ringlabel { fill:var(--mut); font-size:9px; }
svg line.near { stroke:var(--acc); stroke-width:2; }
svg line.far { stroke:var(--far); stroke-width:1.5; stroke-dasharray:5 4; }
svg circle.peer { stroke-width:2; fill:var(--bg); }
svg circle.peer.connected { fill:currentColor; }
svg circle.peer.near { color:var(--acc); stroke:var(--acc); }
svg circle.peer.far { color:var(--far); stroke:var(--far); }
svg circle.peer.none { color:var(--mut); stroke:var(--mut); }
svg circle.me { fill:var(--fg); }
svg text.me { fill:var(--bg); font-size:9px; }
figure.grid svg { width:100%; max-width: 48rem; height:auto; display:block; }
svg rect.band { fill: rgba(127,127,127,.07); stroke: var(--line); }
svg .bandlabel { fill: var(--fg); font-size: 12px; font-weight: 600; }
svg .bandnote { fill: var(--mut); font-size: 10px; }
svg rect.gridnode { fill: var(--bg); stroke: var(--mut); stroke-width: 1; }
svg rect.gridnode.me { stroke: var(--fg); stroke-width: 2; }
svg rect.gridnode.silent { stroke-dasharray: 4 3; fill: none; }
svg rect.gridnode.placed { stroke: var(--acc); stroke-width: 3.5; }
svg .nodename { fill: var(--fg); font-size: 11px; }
svg .nodenote { fill: var(--mut); font-size: 9.5px; }
svg rect.core { stroke: var(--mut); stroke-width: 1; fill: none; }
svg rect.core.used { fill: var(--far); stroke: var(--far); }
svg .ranks { fill: var(--acc); font-size: 11px; font-weight: 700; }
svg .homemark { fill: #b8860b; font-size: 10px; font-weight: 700; }
tr.placed td { background: rgba(11,110,79,.08); }
td.silent { color: #c0392b; }
.homebadge { color:#b8860b; border:1px solid #b8860b; border-radius:.7rem; padding:0 .35rem; font-size:.85em; }
.key-used { color:var(--far); } .key-free { color:var(--mut); } .key-placed { color:var(--acc); font-weight:600; }
.key-near { color:var(--acc); } .key-far { color:var(--far); } .key-none { color:var(--mut); }
"#;

/// The live-update script, served at `/static/live.js`: it opens the
/// event stream named by `main[data-live]` and swaps in each rendering.
pub(crate) const SCRIPT: &str = r#"(function () {
  "use strict";
  var main = document.getElementById("content");
  var url = main && main.getAttribute("data-live");
  var state = document.getElementById("live");
  if (!url || !window.EventSource) { return; }
  var source = new EventSource(url);
  function toEnd() {
    var log = document.getElementById("log");
    if (log) { log.scrollTop = log.scrollHeight; }
  }
  toEnd();
  source.addEventListener("update", function (e) {
    main.innerHTML = e.data;
    toEnd();
    if (state) { state.textContent = "live · updated " + new Date().toLocaleTimeString(); }
  });
  source.onopen = function () { if (state) { state.textContent = "live"; } };
  source.onerror = function () { if (state) { state.textContent = "reconnecting…"; } };
})();
"#;

/// Seconds since the Unix epoch (credentials' expiries are in them).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

//! What the tool prints: job descriptions, tables, progress and JSON.

use std::io::Write;

use indicatif::{ProgressBar, ProgressStyle};
use zorilla_core::advert::{JobId, Strategy};
use zorilla_node::protocol::{JobPhase, JobStatus, NodeInfo, PeerEntry};

/// Writes to stdout; a closed pipe (`zorilla list | head`) is not an
/// error worth a panic.
pub(crate) fn out(text: &str) {
    let _ = std::io::stdout().write_all(text.as_bytes());
}

pub(crate) fn print_json<T: serde::Serialize>(value: &T) {
    match serde_json::to_value(value) {
        Ok(mut value) => {
            hex_job_ids(&mut value);
            out(&format!("{value:#}\n"));
        }
        Err(e) => eprintln!("zorilla: cannot print JSON: {e}"),
    }
}

/// Job ids as the CLI shows and takes them (16 hex digits), not as the
/// protocol's integers.
pub(crate) fn hex_job_ids(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Array(items) => items.iter_mut().for_each(hex_job_ids),
        serde_json::Value::Object(map) => {
            if let Some(id) = map.get("job").and_then(serde_json::Value::as_u64) {
                map.insert("job".into(), JobId(id).to_string().into());
            }
            if let Some(running) = map.get_mut("running").and_then(|r| r.as_object_mut()) {
                let renamed = std::mem::take(running)
                    .into_iter()
                    .map(|(k, v)| match k.parse::<u64>() {
                        Ok(id) => (JobId(id).to_string(), v),
                        Err(_) => (k, v),
                    })
                    .collect();
                *running = renamed;
            }
        }
        _ => {}
    }
}

pub(crate) fn show_progress(bar: &ProgressBar, status: &JobStatus) {
    let style = |template: &str| {
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ")
    };
    match status.phase {
        JobPhase::Scheduling => {
            let needed = status.request.min_workers.max(1);
            bar.set_style(style(
                "{spinner} {elapsed:>4} scheduling [{bar:20}] {pos}/{len} joined  {wide_msg}",
            ));
            bar.set_length(u64::from(needed));
            let joined = status
                .pending
                .as_ref()
                .map_or(status.ranks.len() as u32, |p| p.granted);
            bar.set_position(u64::from(joined.min(needed)));
            let msg = status
                .pending
                .as_ref()
                .map(|p| {
                    format!(
                        "radius {} · {} nodes answered · {} offered",
                        p.radius, p.nodes_answered, p.workers_offered
                    )
                })
                .unwrap_or_default();
            bar.set_message(msg);
        }
        _ if status.tasks.is_some() => {
            let tasks = status.tasks.clone().unwrap_or_default();
            bar.set_style(style(
                "{spinner} {elapsed:>4} tasks      [{bar:20}] {pos}/{len} ended   {wide_msg}",
            ));
            bar.set_length(u64::from(tasks.count.max(1)));
            bar.set_position(u64::from(tasks.done.saturating_add(tasks.failed)));
            bar.set_message(format!(
                "{} running on {} nodes, {} failed",
                tasks.running,
                nodes_of(status).len(),
                tasks.failed
            ));
        }
        _ => {
            let total = status.ranks.len().max(1) as u64;
            let ended = status
                .ranks
                .values()
                .filter(|r| r.outcome.is_some())
                .count() as u64;
            bar.set_style(style(
                "{spinner} {elapsed:>4} running    [{bar:20}] {pos}/{len} done    {wide_msg}",
            ));
            bar.set_length(total);
            bar.set_position(ended);
            bar.set_message(format!(
                "{} running on {} nodes",
                status.running_workers(),
                nodes_of(status).len()
            ));
        }
    }
}

/// One line on where a job stands, for when there is no progress bar.
pub(crate) fn progress_line(status: &JobStatus) -> String {
    match status.phase {
        JobPhase::Scheduling => format!(
            "scheduling, {}/{} workers joined",
            status.pending.as_ref().map_or(0, |p| p.granted),
            status.request.min_workers
        ),
        JobPhase::Running if status.tasks.is_some() => {
            let t = status.tasks.clone().unwrap_or_default();
            format!(
                "running, tasks: {} done, {} failed, {} running on {} nodes, {} waiting",
                t.done,
                t.failed,
                t.running,
                nodes_of(status).len(),
                t.waiting
            )
        }
        JobPhase::Running => format!(
            "running, {} workers on {} nodes",
            status.running_workers(),
            nodes_of(status).len()
        ),
        other => phase_name(other).to_string(),
    }
}

pub(crate) fn nodes_of(status: &JobStatus) -> std::collections::BTreeMap<&str, Vec<u32>> {
    let mut nodes: std::collections::BTreeMap<&str, Vec<u32>> = Default::default();
    for (rank, r) in &status.ranks {
        nodes.entry(r.node.as_str()).or_default().push(*rank);
    }
    nodes
}

pub(crate) fn phase_name(phase: JobPhase) -> &'static str {
    match phase {
        JobPhase::Scheduling => "scheduling",
        JobPhase::Running => "running",
        JobPhase::Completed => "completed",
        JobPhase::Cancelled => "cancelled",
        JobPhase::Failed => "failed",
    }
}

pub(crate) fn short_peer(peer: &str) -> &str {
    // Peer ids share their first characters; the tail tells them apart.
    &peer[peer.len().saturating_sub(8)..]
}

/// Where a job's workers ran, one line per node.
pub(crate) fn placement(status: &JobStatus) -> String {
    let mut out = String::new();
    for (node, ranks) in nodes_of(status) {
        let ranks: Vec<String> = ranks.iter().map(u32::to_string).collect();
        out.push_str(&format!(
            "  node …{}: ranks {}\n",
            short_peer(node),
            ranks.join(",")
        ));
    }
    out
}

pub(crate) fn age(status: &JobStatus) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if status.submitted_unix == 0 {
        return "-".into();
    }
    let secs = now.saturating_sub(status.submitted_unix);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..86400 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{:02}h", secs / 86400, secs % 86400 / 3600),
    }
}

pub(crate) fn describe(status: &JobStatus) -> String {
    let r = &status.request;
    let workers = if r.min_workers == r.max_workers {
        format!("{}", r.max_workers)
    } else {
        format!("{}..{}", r.min_workers, r.max_workers)
    };
    let strategy = match r.strategy {
        Strategy::Spread => "spread",
        Strategy::Concentrate => "concentrate",
    };
    let mut out = format!(
        "job       {}\nphase     {}\nreason    {}\nworkers   {} placed of {workers} ({} running), {strategy}, \
         {} core(s) and {} MiB each\nage       {}\nargs      {}\n",
        JobId(status.job),
        phase_name(status.phase),
        status.reason,
        status.ranks.len(),
        status.running_workers(),
        r.cores,
        r.memory_mib,
        age(status),
        r.args.join(" ")
    );
    if let Some(t) = &status.tasks {
        out.push_str(&format!(
            "tasks     {} in all: {} waiting, {} running, {} done, {} failed{}\n",
            t.count,
            t.waiting,
            t.running,
            t.done,
            t.failed,
            r.tasks
                .as_ref()
                .filter(|t| t.retries > 0)
                .map(|t| format!(" (a failed task runs again up to {} times)", t.retries))
                .unwrap_or_default()
        ));
        if r.spot_checks() > 0 {
            out.push_str(&format!(
                "checks    {}% of the tasks run again on another node: {} settled, {} to settle\n",
                r.spot_checks(),
                t.checked,
                t.checking
            ));
            for node in &t.caught {
                out.push_str(&format!(
                    "  caught  node {node}: gave results two other nodes disagreed with (its tasks ran again; avoided)\n"
                ));
            }
        }
        for (task, failed) in &t.failed_tasks {
            out.push_str(&format!(
                "  failed {task:>4}  node …{}  {}\n",
                short_peer(&failed.node),
                failed.outcome.as_deref().unwrap_or("failed")
            ));
        }
        if (t.failed as usize) > t.failed_tasks.len() {
            out.push_str(&format!(
                "  ... and {} more failed tasks\n",
                t.failed as usize - t.failed_tasks.len()
            ));
        }
    }
    if let Some(seed) = r.deterministic {
        out.push_str(&format!(
            "results   deterministic, seed {seed}: the same bits in every run, on every node\n"
        ));
    }
    if r.replicas > 1 {
        out.push_str(&format!(
            "replicas  {} runs on distinct nodes, their results compared; the majority's \
             are kept (worker w is rank w % {} of run w / {})\n",
            r.replicas, r.max_workers, r.max_workers
        ));
    }
    if r.priority != 0 {
        out.push_str(&format!(
            "priority  {} among your jobs waiting for cores\n",
            r.priority
        ));
    }
    if let Some(home) = &status.home {
        out.push_str(&format!("home      node {home}\n"));
    }
    if let Some(from) = &status.moved_from {
        out.push_str(&format!(
            "moved     here from node {from}, its first home, which was lost\n"
        ));
    }
    if let Some(p) = &status.pending {
        out.push_str(&format!(
            "pending   {} of {} workers granted; {} floods, radius {}{}; {} nodes answered, \
             {} offers for {} workers\n",
            p.granted,
            p.needed,
            p.floods,
            p.radius,
            p.budget_ms
                .map(|b| format!(", up to {b} ms from home"))
                .unwrap_or_default(),
            p.nodes_answered,
            p.offers,
            p.workers_offered
        ));
        for (reason, n) in &p.declines {
            out.push_str(&format!("          {n} declined: {reason}\n"));
        }
        for (reason, n) in &p.refusals {
            out.push_str(&format!("          {n} offers refused: {reason}\n"));
        }
        if p.apart > 0 {
            out.push_str(&format!(
                "          {} workers offered by nodes the other ranks cannot reach directly \
                 (behind another NAT)\n",
                p.apart
            ));
        }
    }
    if !status.ranks.is_empty() {
        out.push_str(if status.tasks.is_some() {
            "tasks running\n"
        } else {
            "ranks\n"
        });
        for (rank, r) in &status.ranks {
            out.push_str(&format!(
                "  {rank:>4}  node …{}  {}\n",
                short_peer(&r.node),
                r.outcome.as_deref().unwrap_or("running")
            ));
        }
    }
    out
}

pub(crate) fn list_table(jobs: &[JobStatus]) -> String {
    if jobs.is_empty() {
        return "no jobs on this node\n".into();
    }
    let mut out = format!(
        "{:<16}  {:<10}  {:>9}  {:>7}  {}\n",
        "JOB", "PHASE", "WORKERS", "AGE", "REASON"
    );
    for job in jobs {
        let workers = match &job.tasks {
            // An array: tasks ended of all.
            Some(t) => format!("{}/{}t", t.done.saturating_add(t.failed), t.count),
            None => format!("{}/{}", job.ranks.len(), job.request.max_workers),
        };
        let mut reason = job.reason.clone();
        if reason.chars().count() > 60 {
            reason = reason.chars().take(59).collect::<String>() + "…";
        }
        out.push_str(&format!(
            "{:<16}  {:<10}  {:>9}  {:>7}  {}\n",
            JobId(job.job),
            phase_name(job.phase),
            workers,
            age(job),
            reason
        ));
    }
    out
}

pub(crate) fn describe_node(info: &NodeInfo) -> String {
    let jobs: Vec<String> = info
        .jobs
        .iter()
        .map(|(phase, n)| format!("{n} {}", phase_name(*phase)))
        .collect();
    let workers: usize = info.running.values().map(Vec::len).sum();
    let disk = match &info.disk_problem {
        Some(reason) => format!("disk        cannot be written ({reason}): takes no jobs\n"),
        None => String::new(),
    };
    let text = format!(
        "peer        {}\nversion     {}\nnetwork     {}\nuptime      {} s\nlisten      {}\n\
         offers      {} cores, {} MiB memory, {} MiB disk\nworkers     {} running ({} jobs)\n\
         home to     {}\nneighbours  {} ({} peers measured)\nmessages    {} sent\n",
        info.peer,
        info.version,
        info.network,
        info.uptime_secs,
        info.listen.join(" "),
        info.cores,
        info.memory_mib,
        info.disk_mib,
        workers,
        info.running.len(),
        if jobs.is_empty() {
            "no jobs".into()
        } else {
            jobs.join(", ")
        },
        info.neighbours,
        info.peers_measured,
        info.messages_sent
    );
    let grid = match &info.grid {
        None => "grid        open: anyone who can reach this node may join (no grid key)\n".into(),
        Some(g) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            format!(
                "grid        closed: only nodes with a credential of grid key {}\n\
                 credential  expires in {} days (at {} Unix seconds)\n",
                g.fingerprint,
                g.expires_unix.saturating_sub(now) / 86_400,
                g.expires_unix
            )
        }
    };
    text + &grid + &disk
}

pub(crate) fn peers_table(peers: &[PeerEntry]) -> String {
    if peers.is_empty() {
        return "no peers known yet\n".into();
    }
    let mut out = format!(
        "{:<52}  {:>9}  {:<5}  {:<9}  {}\n",
        "PEER", "RTT", "LINK", "CONNECTED", "ADDRESS"
    );
    for p in peers {
        let rtt = p
            .rtt_us
            .map_or("-".to_string(), |us| format!("{:.2} ms", us as f64 / 1e3));
        out.push_str(&format!(
            "{:<52}  {:>9}  {:<5}  {:<9}  {}\n",
            p.peer,
            rtt,
            p.link.as_deref().unwrap_or("-"),
            if p.connected { "yes" } else { "no" },
            p.addrs.first().map_or("-", String::as_str)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use zorilla_node::protocol::{JobPhase, JobRequest};

    fn status(request: JobRequest) -> JobStatus {
        JobStatus {
            job: 1,
            phase: JobPhase::Scheduling,
            reason: "waiting".into(),
            ranks: Default::default(),
            request,
            pending: None,
            submitted_unix: 0,
            home: None,
            moved_from: None,
            owner: None,
            tasks: None,
        }
    }

    #[test]
    fn a_jobs_seed_and_priority_are_shown_when_it_has_them() {
        let plain = describe(&status(JobRequest::default()));
        assert!(
            !plain.contains("deterministic") && !plain.contains("priority"),
            "{plain}"
        );
        let seeded = describe(&status(JobRequest {
            deterministic: Some(7),
            priority: -2,
            ..JobRequest::default()
        }));
        assert!(
            seeded.contains("results   deterministic, seed 7:"),
            "{seeded}"
        );
        assert!(seeded.contains("priority  -2 among your jobs"), "{seeded}");
        assert!(!seeded.contains("replicas"), "{seeded}");
        let replicated = describe(&status(JobRequest {
            deterministic: Some(0),
            replicas: 3,
            ..JobRequest::default()
        }));
        assert!(
            replicated.contains("replicas  3 runs on distinct nodes"),
            "{replicated}"
        );
    }

    #[test]
    fn a_spot_checked_arrays_checks_and_caught_nodes_are_shown() {
        let request = JobRequest {
            deterministic: Some(0),
            tasks: Some(zorilla_node::protocol::Tasks {
                count: 10,
                retries: 0,
                args_file: None,
                spot_checks: 20,
            }),
            ..JobRequest::default()
        };
        let mut checked = status(request);
        checked.tasks = Some(zorilla_node::protocol::TaskStatus {
            count: 10,
            done: 9,
            checked: 3,
            checking: 1,
            caught: vec!["12D3KooWliar".into()],
            ..Default::default()
        });
        let text = describe(&checked);
        assert!(
            text.contains(
                "checks    20% of the tasks run again on another node: 3 settled, 1 to settle"
            ) && text.contains("caught  node 12D3KooWliar"),
            "{text}"
        );
        let mut plain = checked.clone();
        if let Some(t) = &mut plain.request.tasks {
            t.spot_checks = 0;
        }
        assert!(!describe(&plain).contains("checks"));
    }
}

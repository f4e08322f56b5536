//! The views the status is served from, as the loop and the overlay
//! poller publish them, and what differs between two of them (which pages
//! changed). Ages and expiry times are kept as instants and computed when
//! read, so that an unchanged view compares equal.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use zorilla_core::vivaldi::{Coord, Position};
use zorilla_overlay::OverlayStats;
use zorilla_webui::Change;
use zorilla_webui::model::{
    AddressInfo, Creditor, JobRole, JobSummary, PeerInfo, PendingAdvert, Resources, WorkerInfo,
};

/// What the loop publishes.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct LoopView {
    pub(super) in_use: Resources,
    pub(super) workers_running: u32,
    pub(super) workers_started: u64,
    /// Every job shown: home and participant, those under way first.
    pub(super) jobs: Vec<JobEntry>,
    pub(super) pending: Vec<PendingEntry>,
    /// Why the disk cannot be written, while it cannot.
    pub(super) disk_problem: Option<String>,
    /// The largest favour balances (see `zorilla_core::favours`).
    pub(super) creditors: Vec<Creditor>,
    /// The nodes the scheduler avoids (see `zorilla_core::runs`).
    pub(super) avoided: Vec<String>,
}

/// A job as the pages list it (home or participant).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct JobEntry {
    /// With `age_secs` 0: ages are computed when read.
    pub(super) summary: JobSummary,
    /// Submitted (home) or first seen (participant), ms since the Unix epoch.
    pub(super) since_ms: u64,
    pub(super) workers: Vec<WorkerInfo>,
}

impl JobEntry {
    pub(super) fn summary_at(&self, now_ms: u64) -> JobSummary {
        JobSummary {
            age_secs: now_ms.saturating_sub(self.since_ms) / 1000,
            ..self.summary.clone()
        }
    }
}

/// An advert this node holds, as the pending page lists it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PendingEntry {
    /// With `expires_in_secs` 0: computed when read.
    pub(super) advert: PendingAdvert,
    pub(super) expires_at: Instant,
}

/// What the overlay poller publishes.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct NetView {
    pub(super) peers: Vec<PeerInfo>,
    pub(super) listen: Vec<String>,
    /// Our addresses with what we believe of each.
    pub(super) addresses: Vec<AddressInfo>,
    pub(super) stats: OverlayStats,
    /// Our network coordinate (`None` until the poller first read it).
    pub(super) position: Option<Position>,
}

/// A change, ordered so that a set holds each once.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum ChangeKey {
    Node,
    Jobs,
    Job(String),
    Pending,
}

impl From<ChangeKey> for Change {
    fn from(key: ChangeKey) -> Change {
        match key {
            ChangeKey::Node => Change::Node,
            ChangeKey::Jobs => Change::Jobs,
            ChangeKey::Job(id) => Change::Job(id),
            ChangeKey::Pending => Change::Pending,
        }
    }
}

/// A network coordinate as the pages show it: `[x, y, height]`, in ms.
pub(super) fn coordinates(c: &Coord) -> Vec<f64> {
    vec![c.x, c.y, c.height]
}

/// What differs between two views, as the pages see it.
pub(super) fn diff(old: &LoopView, new: &LoopView) -> BTreeSet<ChangeKey> {
    let mut out = BTreeSet::new();
    if old.in_use != new.in_use
        || old.workers_running != new.workers_running
        || old.disk_problem != new.disk_problem
        || old.creditors != new.creditors
        || old.avoided != new.avoided
    {
        out.insert(ChangeKey::Node);
    }
    // Compared in place, without copies: a view holds up to MAX_JOBS jobs.
    fn listed(v: &LoopView) -> impl Iterator<Item = (&JobSummary, u64)> {
        v.jobs.iter().map(|j| (&j.summary, j.since_ms))
    }
    fn home(v: &LoopView) -> impl Iterator<Item = &String> {
        v.jobs
            .iter()
            .filter(|j| j.summary.role == JobRole::Home)
            .map(|j| &j.summary.id)
    }
    if !listed(old).eq(listed(new)) {
        out.insert(ChangeKey::Jobs);
        if !home(old).eq(home(new)) {
            out.insert(ChangeKey::Node);
        }
    }
    let before: BTreeMap<&str, &JobEntry> = old
        .jobs
        .iter()
        .map(|j| (j.summary.id.as_str(), j))
        .collect();
    // A job new to the view has no page open yet (its page was a "not
    // found"), so only jobs shown before are announced: the first view of
    // a long history does not flood every subscriber.
    for job in &new.jobs {
        if before
            .get(job.summary.id.as_str())
            .is_some_and(|old| *old != job)
        {
            out.insert(ChangeKey::Job(job.summary.id.clone()));
        }
    }
    if !old
        .pending
        .iter()
        .map(|p| &p.advert)
        .eq(new.pending.iter().map(|p| &p.advert))
    {
        out.insert(ChangeKey::Pending);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use zorilla_webui::model::{JobPhase, WorkerState};

    #[test]
    fn diffs_name_the_pages_that_changed() {
        let entry = |id: &str, phase: JobPhase| JobEntry {
            summary: JobSummary {
                id: id.into(),
                name: id.into(),
                role: JobRole::Home,
                phase,
                workers_joined: 0,
                workers_needed: 1,
                home: "me".into(),
                owner: None,
                strategy: "spread".into(),
                flood_radius: 0,
                age_secs: 0,
                pending_reason: None,
            },
            since_ms: 1,
            workers: Vec::new(),
        };
        let old = LoopView {
            jobs: vec![entry("a", JobPhase::Running)],
            ..LoopView::default()
        };
        assert!(diff(&old, &old).is_empty());
        let mut new = old.clone();
        new.jobs[0].workers.push(WorkerInfo {
            node: "n".into(),
            index: 0,
            state: WorkerState::Running,
            exit_code: None,
            ended: None,
        });
        assert_eq!(
            diff(&old, &new),
            BTreeSet::from([ChangeKey::Job("a".into())])
        );
        new.jobs.push(entry("b", JobPhase::Scheduling));
        new.workers_running = 1;
        assert_eq!(
            diff(&old, &new),
            BTreeSet::from([ChangeKey::Node, ChangeKey::Jobs, ChangeKey::Job("a".into())])
        );
    }
}

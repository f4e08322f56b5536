//! Between the replicas of a job (its primary and its copies): the core's
//! [`zorilla_core::replica::Msg`] of the job's log (see `node::replicas`).

use serde::{Deserialize, Serialize};
use zorilla_core::limits::{self, MAX_WORKERS};
use zorilla_core::node::Failure;
use zorilla_overlay::PeerId;

use super::job_copy::JobCopy;
use crate::validate::{self, Invalid, MAX_OUTCOME_BYTES};

/// A message between the replicas of a job (the core's
/// [`zorilla_core::replica::Msg`] of its [`zorilla_core::node::JobEntry`]
/// log).
pub(crate) type ReplicaMsg =
    zorilla_core::replica::Msg<PeerId, zorilla_core::node::JobEntry<PeerId>>;

/// A replica message of `job`. `copy` goes with an append that may reach a
/// node that does not hold the job yet (an extra copy, or one that fell
/// behind), so that any copy can become the job's home.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReplicaRpc {
    pub(crate) job: u64,
    pub(crate) msg: Box<ReplicaMsg>,
    pub(crate) copy: Option<Box<JobCopy>>,
}

impl ReplicaRpc {
    /// Checks the message ([`check_msg`]) and the copy.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        check_msg(&self.msg)?;
        match &self.copy {
            Some(copy) => copy.check(),
            None => Ok(()),
        }
    }
}

/// Checks a message between a job's replicas: at most
/// [`replica::MAX_ENTRIES_PER_APPEND`] entries of at most [`MAX_WORKERS`]
/// ranks each, at most [`replica::MAX_COPIES`] copies, indices within
/// [`replica::MAX_LOG`], and every event's ranks and words within their
/// maxima.
fn check_msg(msg: &ReplicaMsg) -> Result<(), Invalid> {
    use zorilla_core::node::{EndReason, JobEntry, JobEvent, RankOutcome};
    use zorilla_core::replica::{self, Msg};
    let index = |field: &'static str, i: u64| limits::at_most(field, i, replica::MAX_LOG);
    let outcome = |o: &RankOutcome| match o {
        RankOutcome::Failed(Failure::Trapped(why) | Failure::NotStarted(why)) => {
            limits::at_most("outcome length in bytes", why.len(), MAX_OUTCOME_BYTES)
        }
        _ => Ok(()),
    };
    let signature = |sig: &replica::Signature| {
        limits::at_most("signature bytes", sig.0.len(), replica::MAX_SIGNATURE)
    };
    let mandate = |m: &Option<replica::Mandate<_>>| -> Result<(), Invalid> {
        if let Some(m) = m {
            limits::at_most("votes", m.votes.len(), replica::MAX_COPIES)?;
            for (vote, sig) in m.votes.values() {
                signature(sig)?;
                if let replica::Vote::Stood { len, .. } = vote {
                    index("voter's log length", *len)?;
                }
            }
        }
        Ok(())
    };
    match msg {
        Msg::Append {
            after,
            entries,
            copies,
            end,
            mandate: m,
            ..
        } => {
            mandate(m)?;
            index("append index", *after)?;
            index("log end", *end)?;
            limits::at_most("entries", entries.len(), replica::MAX_ENTRIES_PER_APPEND)?;
            if let Some(copies) = copies {
                limits::at_most("copies", copies.len(), replica::MAX_COPIES)?;
            }
            for (_, entry) in entries {
                match entry {
                    JobEntry::Submitted { spec, .. } => {
                        limits::at_most("workers", spec.workers.max, MAX_WORKERS)?;
                        limits::one_to("runs", spec.runs, zorilla_core::runs::MAX_RUNS)?;
                        if let Some(tasks) = &spec.tasks {
                            limits::at_most("tasks", tasks.count, limits::MAX_TASKS)?;
                            limits::at_most("retries", tasks.retries, limits::MAX_TASK_RETRIES)?;
                            limits::at_most("spot_checks", tasks.spot_checks, 100)?;
                        }
                    }
                    JobEntry::Event(event) => match event {
                        JobEvent::Granted {
                            ranks, replaced, ..
                        } => validate::placement(ranks.iter(), replaced)?,
                        JobEvent::WorkersLost { ranks, .. } => {
                            validate::placement(ranks.iter(), &[])?
                        }
                        JobEvent::RankEnded {
                            rank: r,
                            outcome: o,
                            ..
                        } => {
                            validate::rank("rank", *r)?;
                            outcome(o)?;
                        }
                        JobEvent::Ended { reason, .. } => match reason {
                            EndReason::Expired { why } => limits::at_most(
                                "reason length in bytes",
                                why.len(),
                                MAX_OUTCOME_BYTES,
                            )?,
                            EndReason::RankFailed { outcome: o, .. } => outcome(o)?,
                            EndReason::WorkersLost { ranks, .. } => {
                                validate::placement(ranks.iter(), &[])?
                            }
                            EndReason::Stalled { waiting, replaced } => {
                                validate::placement(waiting.iter(), replaced)?
                            }
                            EndReason::TasksFailed {
                                task, outcome: o, ..
                            } => {
                                validate::rank("task", *task)?;
                                outcome(o)?;
                            }
                            EndReason::RunsKept {
                                dissenters, failed, ..
                            } => {
                                limits::at_most(
                                    "dissenters",
                                    dissenters.len(),
                                    MAX_WORKERS as usize,
                                )?;
                                if let Some((rank, _, o)) = failed {
                                    validate::rank("rank", *rank)?;
                                    outcome(o)?;
                                }
                            }
                            EndReason::RunsDisagreed { ends, .. } => {
                                let max = usize::from(zorilla_core::runs::MAX_RUNS);
                                limits::at_most("runs", ends.len(), max)?;
                                for end in ends {
                                    limits::at_most(
                                        "run's nodes",
                                        end.nodes.len(),
                                        MAX_WORKERS as usize,
                                    )?;
                                }
                            }
                            EndReason::TasksDone { caught, .. } => {
                                limits::at_most("caught", caught.len(), MAX_WORKERS as usize)?
                            }
                            EndReason::Completed { .. }
                            | EndReason::RunsLost { .. }
                            | EndReason::Cancelled => {}
                        },
                        JobEvent::Checkpointed {
                            rank: r,
                            checkpoint,
                            ..
                        } => {
                            validate::rank("checkpoint rank", *r)?;
                            limits::at_most(
                                "checkpoint holders",
                                checkpoint.holders.len(),
                                zorilla_core::checkpoint::MAX_REPLICAS,
                            )?;
                            validate::generation(checkpoint.generation)?;
                        }
                        JobEvent::RolledBack { stopped, .. } => {
                            validate::placement(stopped.iter(), &[])?
                        }
                        JobEvent::Rejected { .. }
                        | JobEvent::Started { .. }
                        | JobEvent::Full { .. } => {}
                    },
                }
            }
        }
        Msg::Ack { index: i, .. } => index("acknowledged index", *i)?,
        Msg::Standing { len, sig, .. } => {
            index("log length", *len)?;
            signature(sig)?;
        }
        Msg::Alive { mandate: m, .. } => mandate(m)?,
        Msg::Absent { sig, .. } => signature(sig)?,
    }
    Ok(())
}

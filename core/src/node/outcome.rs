//! How a job's worker ended: as the node that ran it reports it
//! ([`WorkerEnd`], with the trap or limit of a [`Failure`]), and as the
//! home records it ([`RankOutcome`], with why a rank counts as lost,
//! [`LostReason`]); each reads as the sentence users see.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::liveness::LostCause;

/// How a worker ended, as the node that ran it reports it to the home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkerEnd {
    /// The worker's program ended by itself with this exit status.
    Exited(i32),
    /// The worker was stopped by a trap or a limit, or could not start.
    Failed(Failure),
    /// The worker was cancelled (its job ended, or its node stopped).
    Cancelled,
}

/// Why a worker failed other than by its exit status: which trap or
/// which limit (with the limit's figure), or why it could not start.
/// Words are made of it only where users read them ([`fmt::Display`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Failure {
    /// The program crashed: the trap, as the runtime says it
    /// ("unreachable instruction executed in function nqueens::solve").
    Trapped(String),
    /// Its memory would have grown beyond its limit (MiB).
    OutOfMemory {
        /// The limit in force, in MiB.
        limit_mib: u64,
    },
    /// It used up its CPU time.
    CpuLimit {
        /// The limit in force.
        limit: Duration,
    },
    /// It ran past its wall-clock time.
    TimeLimit {
        /// The limit in force.
        limit: Duration,
    },
    /// It wrote more than its output limit to stdout and stderr.
    OutputLimit {
        /// The limit in force, in MiB.
        limit_mib: u64,
    },
    /// It kept more than its disk limit in `/outputs`.
    DiskLimit {
        /// The limit in force, in MiB.
        limit_mib: u64,
    },
    /// A native worker tried to run more processes and threads at once
    /// than its limit.
    ProcessLimit {
        /// The limit in force.
        limit: u32,
    },
    /// It could not start; why (the module was refused, its files could
    /// not be fetched, ...).
    NotStarted(String),
}

impl fmt::Display for Failure {
    /// The end of a sentence about the worker ("rank 3 ...").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Trapped(trap) => write!(f, "crashed: {trap}"),
            Failure::OutOfMemory { limit_mib } => {
                write!(f, "used its memory limit of {limit_mib} MiB")
            }
            Failure::CpuLimit { limit } => {
                write!(f, "stopped: used its CPU-time limit of {}", Human(*limit))
            }
            Failure::TimeLimit { limit } => {
                write!(
                    f,
                    "stopped: ran past its wall-clock limit of {}",
                    Human(*limit)
                )
            }
            Failure::OutputLimit { limit_mib } => {
                write!(
                    f,
                    "stopped: wrote more than its {limit_mib} MiB output limit"
                )
            }
            Failure::DiskLimit { limit_mib } => {
                write!(f, "stopped: wrote more than its {limit_mib} MiB disk limit")
            }
            Failure::ProcessLimit { limit } => write!(
                f,
                "stopped: tried to run more than its limit of {limit} processes and threads"
            ),
            Failure::NotStarted(why) => write!(f, "could not start: {why}"),
        }
    }
}

/// A limit's duration as people write it: "90 ms", "10 s", "5 min", "2 h".
struct Human(Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs();
        if self.0.subsec_nanos() != 0 || secs == 0 {
            write!(f, "{} ms", self.0.as_millis())
        } else if secs.is_multiple_of(3600) {
            write!(f, "{} h", secs / 3600)
        } else if secs.is_multiple_of(60) {
            write!(f, "{} min", secs / 60)
        } else {
            write!(f, "{secs} s")
        }
    }
}

/// Why the home counts a rank as lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LostReason {
    /// The node failed or left the grid.
    Left,
    /// The node gave the ranks back: its hold had run out when the grant
    /// came, or it preempted their workers for a job of a node it owes
    /// favours (see [`crate::favours`]).
    Withdrawn,
    /// The node no longer runs the rank, by the home's liveness checks.
    Liveness(LostCause),
    /// The home stopped the rank's worker to roll the whole job back to a
    /// common checkpoint (another rank was lost).
    RolledBack,
}

impl fmt::Display for LostReason {
    /// The end of a sentence about the node ("node X ...").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::Left => f.write_str("failed or left"),
            LostReason::Withdrawn => f.write_str(
                "gave the rank back (its hold had run out, or it preempted the worker \
                 for a job of a node it owes favours)",
            ),
            LostReason::Liveness(cause) => cause.fmt(f),
            LostReason::RolledBack => {
                f.write_str("was stopped to roll the job back to a common checkpoint")
            }
        }
    }
}

/// What became of a rank, as its home records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RankOutcome {
    /// Its worker exited with this status.
    Exited(i32),
    /// Its worker was stopped by a trap or a limit, or could not start.
    Failed(Failure),
    /// Its worker was cancelled.
    Cancelled,
    /// Its node was lost (the rank waits to be replaced, or its job
    /// failed).
    Lost(LostReason),
    /// A job array's task whose spot check found three runs on three
    /// nodes giving three different results (see
    /// [`TaskProgress`](super::TaskProgress)): none can be believed.
    Disputed,
}

impl From<WorkerEnd> for RankOutcome {
    fn from(end: WorkerEnd) -> Self {
        match end {
            WorkerEnd::Exited(code) => RankOutcome::Exited(code),
            WorkerEnd::Failed(why) => RankOutcome::Failed(why),
            WorkerEnd::Cancelled => RankOutcome::Cancelled,
        }
    }
}

impl RankOutcome {
    /// Whether this outcome counts towards completion.
    pub fn is_success(&self) -> bool {
        *self == RankOutcome::Exited(0)
    }

    /// The outcome in words, for the rank on `node`: "exited with status
    /// 0", "lost: node X failed or left", ... (what users read in a job's
    /// status).
    pub fn display<'a, P: fmt::Display>(&'a self, node: &'a P) -> impl fmt::Display + 'a {
        OutcomeText {
            outcome: self,
            node,
        }
    }
}

struct OutcomeText<'a, P> {
    outcome: &'a RankOutcome,
    node: &'a P,
}

impl<P: fmt::Display> fmt::Display for OutcomeText<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.outcome {
            RankOutcome::Exited(code) => write!(f, "exited with status {code}"),
            RankOutcome::Failed(failure) => failure.fmt(f),
            RankOutcome::Cancelled => f.write_str("was cancelled"),
            RankOutcome::Lost(reason) => write!(f, "lost: node {} {reason}", self.node),
            RankOutcome::Disputed => f.write_str(
                "gave a result that two other nodes' runs of the task both differed from, \
                 and from each other",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_reads_as_a_sentence_with_its_figure() {
        let cases = [
            (
                Failure::Trapped(
                    "unreachable instruction executed in function nqueens::solve".into(),
                ),
                "crashed: unreachable instruction executed in function nqueens::solve",
            ),
            (
                Failure::OutOfMemory { limit_mib: 64 },
                "used its memory limit of 64 MiB",
            ),
            (
                Failure::CpuLimit {
                    limit: Duration::from_secs(90),
                },
                "stopped: used its CPU-time limit of 90 s",
            ),
            (
                Failure::TimeLimit {
                    limit: Duration::from_secs(7200),
                },
                "stopped: ran past its wall-clock limit of 2 h",
            ),
            (
                Failure::TimeLimit {
                    limit: Duration::from_millis(1500),
                },
                "stopped: ran past its wall-clock limit of 1500 ms",
            ),
            (
                Failure::OutputLimit { limit_mib: 64 },
                "stopped: wrote more than its 64 MiB output limit",
            ),
            (
                Failure::DiskLimit { limit_mib: 10 },
                "stopped: wrote more than its 10 MiB disk limit",
            ),
            (
                Failure::NotStarted("module refused: not WebAssembly".into()),
                "could not start: module refused: not WebAssembly",
            ),
        ];
        for (failure, sentence) in cases {
            assert_eq!(failure.to_string(), sentence);
            assert_eq!(
                RankOutcome::Failed(failure).display(&"N").to_string(),
                sentence
            );
        }
    }
}

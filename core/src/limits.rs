//! The documented maxima of everything a client or a peer can set: job
//! sizes, durations, counts, and the fields of the scheduling messages.
//!
//! One place, so that the node's decoders, the job spec files, the core's
//! own checks and the documentation agree. Each value is far above what a
//! real job needs, and low enough that all arithmetic on it is safe (no
//! `now + lifetime` can overflow for a node that ran less than
//! `u64::MAX - MAX_LIFETIME` seconds) and that the largest valid job copy
//! (its request, file list and placement) fits one overlay message many
//! times over its needs (see the node's `wire` tests).
//!
//! Values coming from outside are checked against these when they are
//! decoded: [`crate::node::JobSpec::validate`] for a submitted job, and
//! [`check_message`] for a scheduling message from a peer. A value out of
//! range is refused with a [`LimitError`] naming the field, the value and
//! the maximum; the core additionally uses saturating arithmetic on times,
//! so that a value that slipped through cannot panic it either.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::advert::{Advert, FloodHeader, Message};
use crate::resources::{Machine, Resources};

/// The most workers one job may ask for: 10,000. A job's placement (one
/// peer id per rank, about 60 bytes in CBOR) then stays under 600 KiB, well
/// within one overlay message (1 MiB), with room for its request.
pub const MAX_WORKERS: u32 = 10_000;

/// The most tasks one job array may have: 10,000. A task's index is its
/// rank at the home, and ranks stay below [`MAX_WORKERS`] everywhere a
/// peer's message names one; a larger sweep is several arrays.
pub const MAX_TASKS: u32 = MAX_WORKERS;

/// The most times a failed task of a job array runs again: 10.
pub const MAX_TASK_RETRIES: u8 = 10;

/// The most cores one worker may ask for: 1,024 (a large machine has a few
/// hundred; a worker runs on one thread anyway).
pub const MAX_CORES: u32 = 1024;

/// The most memory one worker may ask for: 16 TiB in MiB (16,777,216). A
/// WebAssembly worker can use at most 4 GiB; larger requests only reserve
/// a node's memory. Times [`MAX_WORKERS`] it stays far below `u64::MAX`.
pub const MAX_MEMORY_MIB: u64 = 16 << 20;

/// The most disk one worker may ask for: 1 PiB in MiB (1,073,741,824).
pub const MAX_DISK_MIB: u64 = 1 << 30;

/// The longest a job may wait for its workers: 30 days. It is also the
/// longest an advert may say it stays valid ([`MAX_ADVERT_EXPIRY`]).
pub const MAX_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);

/// The longest a worker may run (wall clock): 365 days.
pub const MAX_WALL_TIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest an advert may say it stays valid: [`MAX_LIFETIME`], since a
/// home never advertises a job for longer than its lifetime.
pub const MAX_ADVERT_EXPIRY: Duration = MAX_LIFETIME;

/// The largest round-trip time, distance to a home, path RTT or latency
/// budget a message may carry: 60 s. No link of a working grid is that
/// slow; a path of 255 hops of it still sums to less than 5 hours.
pub const MAX_RTT: Duration = Duration::from_secs(60);

/// The most cores a node may say it has: 65,536 (the largest machines
/// have a few thousand).
pub const MAX_NODE_CORES: u32 = 1 << 16;

/// The highest CPU speed figure a node may state: a million, a thousand
/// times the reference machine's
/// ([`REFERENCE_SPEED`](crate::resources::REFERENCE_SPEED)). Speeds are
/// relative scores; bounding them keeps a hostile node from claiming
/// an absurd one, and keeps any sum or product of them safe.
pub const MAX_SPEED: u32 = 1_000_000;

/// The most arguments a job may give its workers: 256.
pub const MAX_ARGS: usize = 256;

/// The most bytes all arguments of a job may take together: 64 KiB.
pub const MAX_ARGS_BYTES: usize = 64 * 1024;

/// The most input files a job may have: 128.
pub const MAX_INPUTS: usize = 128;

/// The longest name of an input or output file, in bytes: 255, what
/// common file systems allow for one path component.
pub const MAX_FILE_NAME_BYTES: usize = 255;

/// Why a value from outside was refused: the field, what it was, and the
/// allowed range. Displays as one sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{field} is {value}, but must be {range}")]
pub struct LimitError {
    /// The field, as the user or the protocol names it.
    pub field: String,
    /// The value given, in words.
    pub value: String,
    /// The allowed range, in words.
    pub range: String,
}

impl LimitError {
    fn new(field: &'static str, value: impl std::fmt::Display, range: impl Into<String>) -> Self {
        LimitError {
            field: field.to_string(),
            value: value.to_string(),
            range: range.into(),
        }
    }
}

/// Checks that `value` is at most `max`.
pub fn at_most<T: PartialOrd + std::fmt::Display>(
    field: &'static str,
    value: T,
    max: T,
) -> Result<(), LimitError> {
    if value > max {
        return Err(LimitError::new(field, value, format!("at most {max}")));
    }
    Ok(())
}

/// Checks that `value` is between 1 and `max`.
pub fn one_to<T: PartialOrd + std::fmt::Display + From<u8>>(
    field: &'static str,
    value: T,
    max: T,
) -> Result<(), LimitError> {
    if value < T::from(1) || value > max {
        return Err(LimitError::new(field, value, format!("from 1 to {max}")));
    }
    Ok(())
}

/// Checks that duration `value` is at most `max`.
pub fn duration_at_most(
    field: &'static str,
    value: Duration,
    max: Duration,
) -> Result<(), LimitError> {
    if value > max {
        return Err(LimitError::new(
            field,
            seconds(value),
            format!("at most {}", seconds(max)),
        ));
    }
    Ok(())
}

/// A duration in seconds, as a user writes it: "30 s", "0.25 s".
fn seconds(d: Duration) -> String {
    match d.subsec_nanos() {
        0 => format!("{} s", d.as_secs()),
        nanos => {
            let fraction = format!("{nanos:09}");
            format!("{}.{} s", d.as_secs(), fraction.trim_end_matches('0'))
        }
    }
}

/// Checks what one worker asks for: at most [`MAX_CORES`],
/// [`MAX_MEMORY_MIB`] and [`MAX_DISK_MIB`].
pub fn check_resources(per_worker: &Resources) -> Result<(), LimitError> {
    at_most("cores", per_worker.cores, MAX_CORES)?;
    at_most("memory_mib", per_worker.memory_mib, MAX_MEMORY_MIB)?;
    at_most("disk_mib", per_worker.disk_mib, MAX_DISK_MIB)
}

/// Checks what an offering node says of its machine: at most
/// [`MAX_NODE_CORES`] cores, no more busy than it has, a speed from 1 to
/// [`MAX_SPEED`], and a residue (cores left after the offer) no more than
/// its cores.
pub fn check_machine(machine: &Machine, residue: &Resources) -> Result<(), LimitError> {
    at_most("node cores", machine.cores, MAX_NODE_CORES)?;
    at_most("busy cores", machine.busy, machine.cores)?;
    at_most("cores left", residue.cores, machine.cores)?;
    one_to("CPU speed", machine.speed, MAX_SPEED)
}

/// Checks a flood header that came from a peer: latency budget and path
/// RTT at most [`MAX_RTT`] (the TTL is a byte, and the flood router caps
/// what it forwards).
pub fn check_flood_header(header: &FloodHeader) -> Result<(), LimitError> {
    if let Some(budget) = header.latency_budget {
        duration_at_most("latency budget", budget, MAX_RTT)?;
    }
    duration_at_most("path RTT", header.path_rtt, MAX_RTT)
}

/// Checks an advert that came from a peer: its resources, worker count
/// (`1 <= min <= max <= MAX_WORKERS`), expiry and flood header.
pub fn check_advert<P>(advert: &Advert<P>) -> Result<(), LimitError> {
    check_resources(&advert.per_worker)?;
    one_to("max workers", advert.workers.max, MAX_WORKERS)?;
    one_to("min workers", advert.workers.min, advert.workers.max)?;
    duration_at_most("advert expiry", advert.expires_in, MAX_ADVERT_EXPIRY)?;
    check_flood_header(&advert.flood)
}

/// Checks a scheduling message that came from a peer: every count at most
/// [`MAX_WORKERS`] (a grant's ranks too, each below it), every duration
/// at most [`MAX_RTT`] or [`MAX_ADVERT_EXPIRY`].
pub fn check_message<P>(msg: &Message<P>) -> Result<(), LimitError> {
    match msg {
        Message::Advert(advert) => check_advert(advert),
        // The residue's memory and disk are what the offering node has
        // left, which the home only reports; its cores and the machine's
        // figures rank offers (`check_machine`).
        Message::Offer {
            workers,
            distance,
            residue,
            machine,
            ..
        } => {
            one_to("offered workers", *workers, MAX_WORKERS)?;
            duration_at_most("distance", *distance, MAX_RTT)?;
            check_machine(machine, residue)
        }
        Message::Grant {
            ranks, placement, ..
        } => {
            one_to("granted ranks", ranks.len(), MAX_WORKERS as usize)?;
            for rank in ranks {
                at_most("rank", *rank, MAX_WORKERS - 1)?;
            }
            check_placement(placement.keys().copied(), &[])
        }
        Message::Placement {
            placement,
            replaced,
            ..
        } => check_placement(placement.keys().copied(), replaced),
        Message::Decline { .. } | Message::Withdraw { .. } | Message::Refuse { .. } => Ok(()),
    }
}

/// A job's placement from its home: at most [`MAX_WORKERS`] ranks and
/// replaced ranks, each below it.
fn check_placement(
    ranks: impl ExactSizeIterator<Item = u32>,
    replaced: &[u32],
) -> Result<(), LimitError> {
    at_most("placed ranks", ranks.len(), MAX_WORKERS as usize)?;
    for rank in ranks {
        at_most("placed rank", rank, MAX_WORKERS - 1)?;
    }
    at_most("replaced ranks", replaced.len(), MAX_WORKERS as usize)?;
    for rank in replaced {
        at_most("replaced rank", *rank, MAX_WORKERS - 1)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::advert::{HoldId, JobId, Phase, Placed, Strategy, WorkerCount};

    fn advert(expires_in: Duration) -> Advert<u32> {
        Advert {
            job: JobId(1),
            home: 0,
            per_worker: Resources::new(1, 64, 0),
            workers: WorkerCount::rigid(1),
            strategy: Strategy::Spread,
            expires_in,
            flood: FloodHeader {
                seq: 0,
                ttl: 3,
                latency_budget: None,
                path_rtt: Duration::ZERO,
            },
            owner: None,
            kind: crate::advert::WorkKind::Wasm,
            priority: 0,
            preemptible: false,
        }
    }

    #[test]
    fn extreme_adverts_are_refused_with_a_sentence() {
        assert_eq!(check_advert(&advert(MAX_ADVERT_EXPIRY)), Ok(()));
        let err = check_advert(&advert(Duration::from_secs(u64::MAX - 1))).unwrap_err();
        assert_eq!(err.field, "advert expiry");
        assert!(err.to_string().starts_with("advert expiry is "), "{err}");
        let mut a = advert(Duration::from_secs(1));
        a.workers = WorkerCount { min: 3, max: 2 };
        assert!(check_advert(&a).is_err());
        a.workers = WorkerCount::rigid(u32::MAX);
        assert!(check_advert(&a).is_err());
        let mut a = advert(Duration::from_secs(1));
        a.flood.path_rtt = Duration::MAX;
        assert!(check_advert(&a).is_err());
    }

    #[test]
    fn extreme_messages_are_refused() {
        let offer = |workers, distance| Message::<u32>::Offer {
            hold: HoldId(0),
            job: JobId(1),
            workers,
            distance,
            residue: Resources::ZERO,
            machine: Machine::default(),
        };
        assert_eq!(check_message(&offer(4, Duration::from_millis(3))), Ok(()));
        assert!(check_message(&offer(u32::MAX, Duration::ZERO)).is_err());
        assert!(check_message(&offer(0, Duration::ZERO)).is_err());
        assert!(check_message(&offer(1, Duration::MAX)).is_err());
        let machine = |cores, busy, speed, left| Message::<u32>::Offer {
            hold: HoldId(0),
            job: JobId(1),
            workers: 1,
            distance: Duration::ZERO,
            residue: Resources::new(left, u64::MAX, u64::MAX),
            machine: Machine {
                cores,
                busy,
                speed,
                reach: crate::resources::Reachability::Unknown,
            },
        };
        assert_eq!(check_message(&machine(64, 63, 1, 0)), Ok(()));
        assert_eq!(
            check_message(&machine(MAX_NODE_CORES, 0, MAX_SPEED, MAX_NODE_CORES)),
            Ok(())
        );
        let field = |msg| check_message(&msg).unwrap_err().field;
        assert_eq!(field(machine(u32::MAX, 0, 1000, 0)), "node cores");
        assert_eq!(field(machine(8, 9, 1000, 0)), "busy cores");
        assert_eq!(field(machine(8, 0, 1000, 9)), "cores left");
        assert_eq!(field(machine(8, 0, 0, 0)), "CPU speed");
        assert_eq!(field(machine(8, 0, u32::MAX, 0)), "CPU speed");
        let grant = |ranks: Vec<u32>| Message::<u32>::Grant {
            hold: HoldId(0),
            job: JobId(1),
            ranks,
            incarnation: u32::MAX,
            placement: BTreeMap::new(),
        };
        assert_eq!(check_message(&grant(vec![0, 9_999])), Ok(()));
        assert!(check_message(&grant(vec![u32::MAX])).is_err());
        assert!(check_message(&grant(vec![])).is_err());
        assert!(check_message(&grant(vec![0; MAX_WORKERS as usize + 1])).is_err());
        let placed = Placed {
            node: 1u32,
            incarnation: 0,
        };
        let placement = |ranks: Vec<u32>, replaced: Vec<u32>| Message::<u32>::Placement {
            job: JobId(1),
            phase: Phase::Running,
            placement: ranks.into_iter().map(|r| (r, placed)).collect(),
            replaced,
        };
        assert_eq!(
            check_message(&placement(vec![0, 9_999], vec![9_999])),
            Ok(())
        );
        assert!(check_message(&placement(vec![MAX_WORKERS], vec![])).is_err());
        assert!(check_message(&placement(vec![], vec![u32::MAX])).is_err());
    }
}

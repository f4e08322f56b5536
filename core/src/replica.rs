//! A job's replicated state: its primary and its copies (issue 16).
//!
//! Every change to a job goes through its **primary** (the home), which
//! numbers it in a log under an [`Epoch`] and pushes it to the job's
//! **copies**. A copy keeps the primary's lease alive by hearing from it
//! (entries or heartbeats). When a copy's lease runs out, the copies that
//! can still reach each other exchange their [`Standing`](Msg::Standing)
//! (how far their log goes) for a short window, and each picks the same
//! successor among those it heard: the most up-to-date log (the epoch of its
//! last entry, then its length), ties broken by a rendezvous hash of the job
//! and the peer. The successor takes the next term, but only if more than
//! half the copies it knows stood: the primary's answer to a standing (it
//! is sent one too) ends the election when it lives.
//!
//! Messages between nodes are not ordered. So a copy takes a set of copies
//! only from an append at least as new as the one it took its set from
//! (their `version`), and the primary repeats the notice to a copy it
//! dropped until that copy acknowledges it: a copy that missed it would
//! stand, alone or with others dropped likewise, for a job it no longer
//! follows.
//!
//! **Epochs are believed only with proof.** A copy stands with a
//! [`Standing`](Msg::Standing) it signs (a node without a replica answers
//! with an [`Absent`](Msg::Absent) it signs), and the winner of an election
//! carries the signed words of more than half the copies it was elected by
//! (its [`Mandate`]) in every message that announces its epoch. A replica
//! adopts a newer epoch only from a mandate it checks against what it knows
//! of the epoch replaced: the voters are that epoch's copies, their
//! signatures hold, they are more than half of those copies, and the new
//! primary is the one they elect. Anything else is refused
//! ([`Action::Refused`]) and the driver counts it as misbehaviour: a node
//! of the grid, or a node of the job, cannot make itself the job's home by
//! naming itself primary under a higher term. A new copy starts in the
//! job's first epoch, whose primary the driver knows from the job itself
//! (the node derives a job's id from its first home), so it believes a
//! later epoch, and the node that invites it, only by the chain of
//! mandates from there. Signatures are the driver's
//! ([`Signer`]): the node signs with its peer key, the simulator with a
//! stand-in. A replica that missed a whole election (it does not know the
//! epoch the mandate replaced) cannot check it and stays where it is until
//! the primary now in charge places it again.
//!
//! An epoch names its primary, so there is **at most one primary per epoch**
//! by construction, and epochs are totally ordered: when two primaries meet
//! (a partition healed, an old home restarted), the one of the lower epoch
//! learns it is a copy and never acts on its stale state again. Entries
//! that a primary of a lower epoch had appended and its successor lacks are
//! handed back to the driver ([`Action::Dropped`]) so that it can propose
//! them again to the primary now in charge: nothing accepted is lost.
//!
//! An entry is [committed](Action::Committed) once `copies_to_ack` copies
//! hold it: the driver acknowledges a worker's end only then, so an output
//! survives the loss of the home, and sends a grant only then, so a
//! successor knows every worker the home started.
//!
//! This module is a sans-IO state machine: time and messages in, messages
//! and events out. It knows nothing of what an entry means (the home's rank
//! table replays them); the driver decides which nodes hold copies
//! ([`Replica::set_copies`]).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{PeerKey, Time};

/// The most entries a job's log holds; a proposal beyond it is refused.
pub const MAX_LOG: u64 = 1 << 16;
/// The most entries one [`Msg::Append`] carries.
pub const MAX_ENTRIES_PER_APPEND: usize = 256;
/// The most copies a job has.
pub const MAX_COPIES: usize = 16;
/// How many heartbeats repeat the notice to a dropped copy that has not
/// acknowledged it.
const DROP_NOTICES: u8 = 5;

/// Who is primary, and since when: a term and the peer that took it.
/// Ordered by term, then by peer, so two primaries never share an epoch.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Epoch<P> {
    /// How many times the job changed primary.
    pub term: u64,
    /// The primary of this epoch.
    pub primary: P,
}

/// A replica's signed word in the election after an epoch: how far its
/// log goes, or that it holds no replica of the job.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Vote<P> {
    /// It stood for election: the epoch of its last entry and its log's
    /// length.
    Stood {
        /// The epoch of its last entry.
        last: Option<Epoch<P>>,
        /// Its log's length.
        len: u64,
    },
    /// It holds no replica (see [`Msg::Absent`]).
    Absent,
}

/// What a replica signs (the driver's [`Signer`] encodes it).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum Statement<'a, P> {
    /// A copy's vote in the election after `replaced`.
    Vote {
        /// The job.
        job: u64,
        /// The epoch whose primary is taken for gone.
        replaced: &'a Epoch<P>,
        /// The vote.
        vote: &'a Vote<P>,
    },
    /// A primary's word that `copies` are the job's copies in its epoch
    /// (the `version`th set it gave): a mandate shows it, so that whoever
    /// checks the votes knows whose votes count.
    Roster {
        /// The job.
        job: u64,
        /// The primary's epoch.
        epoch: &'a Epoch<P>,
        /// Which set of the epoch.
        version: u64,
        /// The copies.
        copies: &'a BTreeSet<P>,
    },
}

/// The most elections a job's chain of mandates holds: a job changes home
/// at most this many times (a copy holds no election past it).
pub const MAX_TERMS: u64 = 32;

/// The largest signature accepted (an ed25519 signature is 64 bytes).
pub const MAX_SIGNATURE: usize = 128;

/// A signature made by the driver's [`Signer`]; longer than
/// [`MAX_SIGNATURE`] it is never valid.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature(#[serde(with = "serde_bytes")] pub Vec<u8>);

impl std::fmt::Debug for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signature({} bytes)", self.0.len())
    }
}

/// Signs this node's statements and checks others': the node with its
/// peer key (a peer id names its public key), the simulator with a
/// stand-in.
pub trait Signer<P>: std::fmt::Debug + Send + Sync {
    /// This node's signature of `statement`.
    fn sign(&self, statement: &Statement<'_, P>) -> Signature;
    /// Whether `signature` is `signer`'s of `statement`.
    fn verify(&self, signer: &P, statement: &Statement<'_, P>, signature: &Signature) -> bool;
}

/// A stand-in [`Signer`] for the simulator and tests, where every node is
/// played by the same program: a signature is a hash of the ballot under a
/// key derived from the signer. It is not cryptography (any holder can make
/// any node's signature); it only lets forged or misattributed votes be
/// told from real ones, as the node's ed25519 signatures do.
#[derive(Debug, Clone)]
pub struct StandInSigner<P> {
    me: P,
}

impl<P> StandInSigner<P> {
    /// The signer of `me`.
    pub fn new(me: P) -> Self {
        StandInSigner { me }
    }
}

impl<P: PeerKey + Hash + Send + Sync> StandInSigner<P> {
    fn tag(signer: &P, statement: &Statement<'_, P>) -> Signature {
        let key = crate::rendezvous(&"zorilla stand-in signature", signer);
        let tag = crate::rendezvous(&key, statement);
        Signature(tag.to_le_bytes().to_vec())
    }
}

impl<P: PeerKey + Hash + Send + Sync> Signer<P> for StandInSigner<P> {
    fn sign(&self, statement: &Statement<'_, P>) -> Signature {
        Self::tag(&self.me, statement)
    }

    fn verify(&self, signer: &P, statement: &Statement<'_, P>, signature: &Signature) -> bool {
        Self::tag(signer, statement) == *signature
    }
}

/// The proof that a primary was elected: the copies of the epoch it
/// replaced, signed by that epoch's primary, and the signed votes of more
/// than half of them (at most [`MAX_COPIES`]), with the mandate of the
/// replaced epoch in turn (back to the job's first epoch, which needs
/// none), so that a replica that missed elections checks the chain from an
/// epoch it knows. The epoch it proves is the next term, its primary the
/// winner the votes elect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(serialize = "P: Serialize", deserialize = "P: Deserialize<'de> + Ord"))]
pub struct Mandate<P> {
    /// The epoch whose primary was taken for gone.
    pub replaced: Epoch<P>,
    /// Its copies, as its primary last set them ...
    pub copies: BTreeSet<P>,
    /// ... the `version`th time ...
    pub version: u64,
    /// ... and its signature of them ([`Statement::Roster`]).
    pub roster: Signature,
    /// Each voter's vote and signature.
    pub votes: BTreeMap<P, (Vote<P>, Signature)>,
    /// The mandate of the replaced epoch (none if it was the first).
    pub before: Option<Box<Mandate<P>>>,
}

/// Why a replica message was refused: the driver counts it as the
/// sender's misbehaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A newer epoch without a mandate (a first term names the job's first
    /// home, so it never needs one and never differs).
    NoMandate,
    /// A mandate for another term than the next, or whose votes elect
    /// another node.
    BadMandate,
    /// A mandate whose votes are not more than half of the replaced
    /// epoch's copies as this replica knows them. Not counted as
    /// misbehaviour: an honest winner that missed a change of the copies
    /// while the primary died can hold one.
    TooFewVotes,
    /// A vote whose signature does not hold.
    BadSignature,
}

impl Refusal {
    /// Whether only a node that lies sends what was refused (the driver
    /// counts it as an offence).
    pub fn is_misbehaviour(self) -> bool {
        self != Refusal::TooFewVotes
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::NoMandate => "it names a newer primary of the job without the votes that elected it",
            Refusal::BadMandate => {
                "its votes for a newer primary of the job are for another term or elect another node"
            }
            Refusal::TooFewVotes => {
                "its votes for a newer primary of the job are not a majority of the job's copies"
            }
            Refusal::BadSignature => "its vote in the job's election is not signed by its sender",
        })
    }
}

/// Timing of the lease and the election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How often the primary is heard from when it has nothing to append.
    pub heartbeat: Duration,
    /// How long a copy waits without hearing from the primary.
    pub lease: Duration,
    /// How long a copy collects others' standings before it picks.
    pub election: Duration,
}

impl Default for Timing {
    /// A new primary acts within about 2 s of the home's death: the lease,
    /// then the election window.
    fn default() -> Self {
        Timing {
            heartbeat: Duration::from_millis(400),
            lease: Duration::from_millis(1500),
            election: Duration::from_millis(300),
        }
    }
}

/// A message between the replicas of one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "P: Serialize, E: Serialize",
    deserialize = "P: Deserialize<'de> + Ord, E: Deserialize<'de>"
))]
pub enum Msg<P, E> {
    /// From the primary: entries (none: a heartbeat).
    Append {
        /// The primary's epoch.
        epoch: Epoch<P>,
        /// The entries follow this index (0: the log's start).
        after: u64,
        /// The epoch that appended entry `after` (`None` at the start).
        after_epoch: Option<Epoch<P>>,
        /// The entries, each with the epoch that appended it.
        entries: Vec<(Epoch<P>, E)>,
        /// The job's copies, when they changed or the copy is behind.
        copies: Option<BTreeSet<P>>,
        /// The primary's signature of them ([`Statement::Roster`]), which
        /// a copy shows in its mandate if it wins the next election.
        roster: Option<Signature>,
        /// How many times the primary changed the copies in this epoch: a
        /// copy never takes an older set than it holds from an append that
        /// overtook this one.
        version: u64,
        /// The primary's log length when it sent this: what a copy holds
        /// beyond it from an older epoch is not the job's.
        end: u64,
        /// The votes that elected the primary (none in the job's first
        /// epoch), with the copies, so that a copy adopts its epoch.
        mandate: Option<Mandate<P>>,
    },
    /// From a copy, about an append.
    Ack {
        /// The copy's epoch.
        epoch: Epoch<P>,
        /// Matched: the copy holds the log up to here. Not matched: send
        /// from after here.
        index: u64,
        /// Whether the copy's log matched at the append's `after`.
        matched: bool,
    },
    /// From a copy whose lease ran out, for the election after `epoch`.
    Standing {
        /// The epoch whose primary is taken for gone.
        epoch: Epoch<P>,
        /// The epoch of the copy's last entry.
        last: Option<Epoch<P>>,
        /// The copy's log length.
        len: u64,
        /// The copy's signature of its vote ([`Statement::Vote`]).
        sig: Signature,
    },
    /// To a replica that is behind or stood for election: the primary of
    /// `epoch` is alive (this replica heard from it within its lease).
    Alive {
        /// The epoch in charge.
        epoch: Epoch<P>,
        /// The votes that elected its primary (none in the first epoch).
        mandate: Option<Mandate<P>>,
    },
    /// From a node that holds no replica of the job, to one that stood for
    /// election in `epoch` ([`Replica::answer_without_replica`]): a copy
    /// the primary named but never reached, or one that lost its state.
    /// It follows no primary, so it counts toward the candidate's majority
    /// (it never wins: it has no log). A node whose copy the primary
    /// dropped does not send it (for a while): its word would let another
    /// copy that missed its drop win.
    Absent {
        /// The epoch of the standing answered.
        epoch: Epoch<P>,
        /// The node's signature of its vote ([`Statement::Vote`]).
        sig: Signature,
    },
}

impl<P, E> Msg<P, E> {
    /// The epoch the message was sent in.
    pub fn epoch(&self) -> &Epoch<P> {
        match self {
            Msg::Append { epoch, .. }
            | Msg::Ack { epoch, .. }
            | Msg::Standing { epoch, .. }
            | Msg::Alive { epoch, .. }
            | Msg::Absent { epoch, .. } => epoch,
        }
    }
}

/// What the driver does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action<P, E> {
    /// Send `msg` to `to`.
    Send {
        /// The replica to send to.
        to: P,
        /// What to send.
        msg: Msg<P, E>,
    },
    /// The log grew on a copy (it applies them to its view of the job).
    Appended {
        /// The index of the first new entry.
        from: u64,
        /// The new entries, in order.
        entries: Vec<E>,
    },
    /// Entries up to `index` are held by enough copies.
    Committed {
        /// The highest committed index.
        index: u64,
    },
    /// This replica is now the primary (the job's state is the log as it
    /// stands: the driver acts on it from now on).
    BecamePrimary {
        /// Its epoch.
        epoch: Epoch<P>,
    },
    /// This replica was primary and learnt of a newer epoch: it is a copy.
    SteppedDown {
        /// The epoch in charge.
        epoch: Epoch<P>,
    },
    /// Entries this replica held that the primary now in charge lacks:
    /// the driver proposes again those it still needs.
    Dropped {
        /// The entries, in order.
        entries: Vec<E>,
    },
    /// A message of `from` was refused: the driver counts it as
    /// misbehaviour.
    Refused {
        /// The sender.
        from: P,
        /// Why.
        why: Refusal,
    },
}

/// Why a proposal was not appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposeError<P> {
    /// This replica is not the primary.
    NotPrimary {
        /// The primary, as far as this replica knows.
        primary: P,
    },
    /// The log is full ([`MAX_LOG`]).
    Full,
}

impl<P: std::fmt::Debug> std::fmt::Display for ProposeError<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProposeError::NotPrimary { primary } => {
                write!(f, "this node is not the job's primary ({primary:?} is)")
            }
            ProposeError::Full => write!(f, "the job's log is full ({MAX_LOG} entries)"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Role<P> {
    Primary,
    Copy,
    /// Collecting standings until `until`; what each peer said.
    Candidate {
        until: Time,
        /// The signed votes heard, this replica's own among them.
        heard: BTreeMap<P, (Vote<P>, Signature)>,
    },
}

/// One replica of one job's state.
#[derive(Debug, Clone)]
pub struct Replica<P, E> {
    job: u64,
    me: P,
    signer: std::sync::Arc<dyn Signer<P>>,
    /// The proof of `epoch` (none in the first epoch).
    mandate: Option<Mandate<P>>,
    /// The primary's signature of the copies (see [`Msg::Append`]).
    roster: Option<Signature>,
    /// The epoch before this one, as this replica knew it: a mandate that
    /// replaced it is checked too (a rival winner of the same election).
    left: Option<Epoch<P>>,
    timing: Timing,
    epoch: Epoch<P>,
    role: Role<P>,
    /// The replicas besides the primary.
    copies: BTreeSet<P>,
    /// The version of `copies` (see [`Msg::Append`]'s `version`).
    copies_version: u64,
    /// Primary: copies it dropped that have not acknowledged the notice
    /// yet, with how many more heartbeats repeat it (a lost or overtaken
    /// notice would leave a copy that takes itself for one).
    unnotified: BTreeMap<P, u8>,
    /// Entries, index `i` at position `i - 1`, with the epoch that
    /// appended them.
    log: Vec<(Epoch<P>, E)>,
    /// Primary: how far each copy holds the log, and where to send from.
    progress: BTreeMap<P, Progress>,
    /// How many copies must hold an entry for it to be committed.
    copies_to_ack: usize,
    committed: u64,
    /// Copy: when its lease started (the primary last heard from, or
    /// another copy vouching for it). Primary: when it last sent to every
    /// copy.
    heard: Time,
    /// Copy: when the primary itself was last heard from (only this lets it
    /// vouch for the primary to others).
    heard_primary: Time,
    /// The winner of the last election this replica lost, until its first
    /// append comes (so that its loss starts the next election at once).
    expected: Option<P>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Progress {
    /// The copy holds the log up to here.
    matched: u64,
    /// The next index to send.
    next: u64,
    /// When the copy last answered in this epoch (or was placed).
    answered: Time,
}

impl Progress {
    /// A copy the primary knows nothing of yet: it is sent the log from
    /// its start (at most [`MAX_ENTRIES_PER_APPEND`] entries at a time), so
    /// that a copy made at a job's grant holds the job after one message
    /// rather than after a round trip that finds where it is. A copy that
    /// holds more already says so in its ack.
    fn fresh(at: Time) -> Self {
        Progress {
            matched: 0,
            next: 1,
            answered: at,
        }
    }
}

impl<P: PeerKey + Hash, E: Clone> Replica<P, E> {
    /// The job's first primary (its home), with no copies yet; `signer`
    /// signs its votes and checks others'.
    pub fn primary(
        job: u64,
        me: P,
        now: Time,
        timing: Timing,
        signer: std::sync::Arc<dyn Signer<P>>,
    ) -> Self {
        let mut replica = Replica::copy(job, me.clone(), me, now, timing, signer);
        replica.role = Role::Primary;
        replica
    }

    /// A copy of `job`, whose first primary (the home that accepted it) is
    /// `first`: the copy starts in the job's first epoch, and a later one
    /// is adopted only with its mandate, checked from there. The driver
    /// makes sure `first` is the job's (the node binds a job's id to its
    /// first home), so a node that invites a copy cannot make it follow an
    /// epoch of its own.
    pub fn copy(
        job: u64,
        me: P,
        first: P,
        now: Time,
        timing: Timing,
        signer: std::sync::Arc<dyn Signer<P>>,
    ) -> Self {
        Replica {
            job,
            me,
            signer,
            mandate: None,
            roster: None,
            left: None,
            timing,
            epoch: Epoch {
                term: 0,
                primary: first,
            },
            role: Role::Copy,
            copies: BTreeSet::new(),
            copies_version: 0,
            unnotified: BTreeMap::new(),
            log: Vec::new(),
            progress: BTreeMap::new(),
            copies_to_ack: 1,
            committed: 0,
            heard: now,
            heard_primary: now,
            expected: None,
        }
    }

    /// The epoch this replica follows (or leads).
    pub fn epoch(&self) -> &Epoch<P> {
        &self.epoch
    }

    /// Whether this replica is the primary.
    pub fn is_primary(&self) -> bool {
        self.role == Role::Primary
    }

    /// Who this replica takes for the primary.
    pub fn primary_peer(&self) -> &P {
        &self.epoch.primary
    }

    /// The log's length.
    pub fn len(&self) -> u64 {
        self.log.len() as u64
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.log.is_empty()
    }

    /// The highest index known to be held by enough copies (on the
    /// primary; a copy learns nothing of it).
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// On the primary, the highest index every copy holds (the log's
    /// length when it has no copies); 0 on a copy.
    pub fn held_by_every_copy(&self) -> u64 {
        if self.role != Role::Primary {
            return 0;
        }
        self.progress
            .values()
            .map(|p| p.matched)
            .min()
            .unwrap_or_else(|| self.len())
    }

    /// The entries in order.
    pub fn entries(&self) -> impl Iterator<Item = &E> {
        self.log.iter().map(|(_, e)| e)
    }

    /// Whether the primary dropped this copy from the job (the job's copies
    /// as it last heard them leave it out): it will never stand for
    /// election, and its driver may forget it.
    pub fn is_dropped(&self) -> bool {
        self.role == Role::Copy && !self.copies.is_empty() && !self.copies.contains(&self.me)
    }

    /// The job's copies, as this replica knows them.
    pub fn copies(&self) -> &BTreeSet<P> {
        &self.copies
    }

    /// Primary: the nodes that hold copies (at most [`MAX_COPIES`]; this
    /// node is never its own copy), and how many of them must hold an
    /// entry before it is committed (at least one while there are copies).
    pub fn set_copies(
        &mut self,
        copies: impl IntoIterator<Item = P>,
        copies_to_ack: usize,
    ) -> Vec<Action<P, E>> {
        if self.role != Role::Primary {
            return Vec::new();
        }
        let copies: BTreeSet<P> = copies
            .into_iter()
            .filter(|p| *p != self.me)
            .take(MAX_COPIES)
            .collect();
        self.copies_to_ack = copies_to_ack.max(1);
        // A copy dropped from the job hears so (the new copies, without
        // it), so that it never stands for election when the primary's
        // heartbeats stop coming (see `stand`).
        let mut out = Vec::new();
        let dropped: Vec<P> = self.copies.difference(&copies).cloned().collect();
        self.progress.retain(|p, _| copies.contains(p));
        // A copy placed now counts as answering from the last heartbeat
        // (within one of now): it has had no chance to answer yet.
        let placed = self.heard;
        for p in &copies {
            self.progress
                .entry(p.clone())
                .or_insert(Progress::fresh(placed));
        }
        self.copies = copies;
        self.copies_version = self.copies_version.saturating_add(1);
        self.sign_roster();
        self.unnotified.retain(|p, _| !self.copies.contains(p));
        for p in &dropped {
            if self.unnotified.len() < MAX_COPIES {
                self.unnotified.insert(p.clone(), DROP_NOTICES);
            }
        }
        out.extend(dropped.into_iter().map(|p| self.dropped_notice(p)));
        for p in self.copies.clone() {
            self.send_append(&p, true, &mut out);
        }
        self.advance_commit(&mut out);
        out
    }

    /// Primary: signs the copies as they are now ([`Statement::Roster`]).
    fn sign_roster(&mut self) {
        self.roster = Some(self.signer.sign(&Statement::Roster {
            job: self.job,
            epoch: &self.epoch,
            version: self.copies_version,
            copies: &self.copies,
        }));
    }

    /// Primary: an append with no entries that names the job's copies, to
    /// a replica that is not among them (it takes itself for dropped).
    fn dropped_notice(&self, to: P) -> Action<P, E> {
        Action::Send {
            to,
            msg: Msg::Append {
                epoch: self.epoch.clone(),
                after: 0,
                after_epoch: None,
                entries: Vec::new(),
                copies: Some(self.copies.clone()),
                roster: self.roster.clone(),
                version: self.copies_version,
                end: self.len(),
                mandate: self.mandate.clone(),
            },
        }
    }

    /// Primary: appends `entry`; its index.
    pub fn propose(
        &mut self,
        entry: E,
        out: &mut Vec<Action<P, E>>,
    ) -> Result<u64, ProposeError<P>> {
        if self.role != Role::Primary {
            return Err(ProposeError::NotPrimary {
                primary: self.epoch.primary.clone(),
            });
        }
        if self.len() >= MAX_LOG {
            return Err(ProposeError::Full);
        }
        self.log.push((self.epoch.clone(), entry));
        let index = self.len();
        for p in self.copies.clone() {
            // A copy with an append in flight gets this entry with the
            // others proposed meanwhile when it acknowledges (or with the
            // next heartbeat): a burst of entries (a job's grants) costs
            // each copy a few appends, not one per entry.
            let idle = self
                .progress
                .get(&p)
                .is_none_or(|g| g.matched.saturating_add(1) >= g.next);
            if idle {
                self.send_append(&p, false, out);
            }
        }
        self.advance_commit(out);
        Ok(index)
    }

    /// Time passes: heartbeats, an expired lease, an election's end.
    pub fn tick(&mut self, now: Time) -> Vec<Action<P, E>> {
        let mut out = Vec::new();
        match &self.role {
            Role::Primary => {
                if now.saturating_sub(self.heard) >= self.timing.heartbeat {
                    self.heard = now;
                    let lease = self.timing.lease;
                    for p in self.copies.clone() {
                        // A copy silent for a lease may have lost its
                        // replica (its node restarted): the heartbeat names
                        // the copies, which invites it again, and so lets
                        // this primary hear it.
                        let silent = self
                            .progress
                            .get(&p)
                            .is_some_and(|g| g.answered.saturating_add(lease) <= now);
                        self.send_append(&p, silent, &mut out);
                    }
                    for p in self.unnotified.keys() {
                        out.push(self.dropped_notice(p.clone()));
                    }
                    self.unnotified.retain(|_, left| {
                        *left = left.saturating_sub(1);
                        *left > 0
                    });
                }
            }
            Role::Copy => {
                if now.saturating_sub(self.heard) >= self.timing.lease {
                    self.stand(now, &mut out);
                }
            }
            Role::Candidate { until, .. } => {
                if now >= *until {
                    self.elect(now, &mut out);
                }
            }
        }
        out
    }

    /// The driver learnt that `peer` is gone (it does not answer the
    /// node's probes). A copy whose primary is gone does not wait for the
    /// lease. (A copy gone still counts in the majority an election needs:
    /// a winner must show the votes of more than half the copies, and
    /// nobody can check another node's word that a copy is gone.)
    pub fn peer_gone(&mut self, now: Time, peer: &P) -> Vec<Action<P, E>> {
        let mut out = Vec::new();
        let awaited = *peer == self.epoch.primary || self.expected.as_ref() == Some(peer);
        if self.role == Role::Copy && awaited {
            self.stand(now, &mut out);
        }
        out
    }

    /// Primary: whether more than half of the job's replicas (this one
    /// among them) were heard within the lease at `now`. A primary out of
    /// touch may be the one cut off: its copies may be electing another
    /// primary, so what it decides alone (that a worker is lost, that the
    /// job failed) may be the minority's view. Not a primary: true (it
    /// decides nothing).
    pub fn in_touch(&self, now: Time) -> bool {
        if self.role != Role::Primary {
            return true;
        }
        let lease = self.timing.lease;
        let heard = self
            .progress
            .values()
            .filter(|p| p.answered.saturating_add(lease) > now)
            .count();
        2 * (heard + 1) > self.copies.len() + 1
    }

    /// A message from `from`.
    pub fn on_message(&mut self, now: Time, from: P, msg: Msg<P, E>) -> Vec<Action<P, E>> {
        let mut out = Vec::new();
        if from == self.me {
            return out;
        }
        let theirs = msg.epoch().clone();
        if theirs < self.epoch {
            // A stale replica (an old primary come back, a copy that missed
            // an election): tell it of the epoch now in charge. The
            // primary sends a copy what it misses, which says the same.
            if matches!(msg, Msg::Alive { .. } | Msg::Absent { .. }) {
                return out;
            }
            if self.role == Role::Primary && self.progress.contains_key(&from) {
                self.send_append(&from, true, &mut out);
            } else {
                out.push(self.alive_to(from));
            }
            return out;
        }
        if matches!(msg, Msg::Absent { .. }) && theirs != self.epoch {
            // It echoes a standing of this replica's epoch, or is nonsense.
            return out;
        }
        if theirs > self.epoch {
            // Only the new primary's append, or an answer vouching for it,
            // carries the proof of a newer epoch; anything else about one
            // waits for that.
            let mandate = match &msg {
                Msg::Append { mandate, .. } if from == theirs.primary => mandate.as_ref(),
                Msg::Alive { mandate, .. } => mandate.as_ref(),
                _ => return out,
            };
            let checked = match mandate {
                None => Err(Some(Refusal::NoMandate)),
                Some(mandate) => self.proves(&theirs, mandate, 0),
            };
            match checked {
                Ok(()) => {
                    let mandate = mandate.cloned();
                    self.adopt(now, theirs.clone(), &mut out);
                    self.mandate = mandate;
                }
                Err(Some(why)) => {
                    out.push(Action::Refused { from, why });
                    return out;
                }
                // Not checkable here: the replica missed the election.
                Err(None) => return out,
            }
        }
        if self.role == Role::Primary
            && theirs == self.epoch
            && let Some(progress) = self.progress.get_mut(&from)
        {
            progress.answered = now;
        }
        match msg {
            Msg::Append {
                after,
                after_epoch,
                entries,
                copies,
                roster,
                version,
                end,
                ..
            } => {
                let copies = copies.map(|c| (version, c, roster));
                let appended =
                    self.on_append(now, from, after, after_epoch, entries, copies, &mut out);
                if appended {
                    self.drop_beyond(end, &mut out);
                }
            }
            Msg::Ack { index, matched, .. } => self.on_ack(from, index, matched, &mut out),
            Msg::Standing { last, len, sig, .. } => {
                self.on_standing(now, from, Vote::Stood { last, len }, sig, &mut out);
            }
            Msg::Alive { .. } => {
                // Another replica hears from the primary: wait for it.
                if let Role::Candidate { .. } = self.role {
                    self.role = Role::Copy;
                    self.heard = now;
                }
            }
            Msg::Absent { sig, .. } => {
                let named = self.copies.contains(&from);
                if named && matches!(self.role, Role::Candidate { .. }) {
                    let vote = Vote::Absent;
                    if !self.signed(&from, &vote, &sig) {
                        out.push(Action::Refused {
                            from,
                            why: Refusal::BadSignature,
                        });
                    } else if let Role::Candidate { heard, .. } = &mut self.role {
                        heard.insert(from, (vote, sig));
                    }
                }
            }
        }
        out
    }

    /// Whether `sig` is `voter`'s of `vote` in the election after this
    /// replica's epoch.
    fn signed(&self, voter: &P, vote: &Vote<P>, sig: &Signature) -> bool {
        let statement = Statement::Vote {
            job: self.job,
            replaced: &self.epoch,
            vote,
        };
        sig.0.len() <= MAX_SIGNATURE && self.signer.verify(voter, &statement, sig)
    }

    /// Whether `mandate` proves `epoch`: the epoch it replaced is this
    /// replica's own (or one an earlier mandate in the chain proves from
    /// it), the replaced primary signed the copies it shows, and more than
    /// half of those copies signed votes that elect `epoch`'s primary.
    /// `Err(None)` if the chain never reaches this replica's epoch (it
    /// cannot tell; nothing is adopted).
    fn proves(
        &self,
        epoch: &Epoch<P>,
        mandate: &Mandate<P>,
        depth: u64,
    ) -> Result<(), Option<Refusal>> {
        let replaced = &mandate.replaced;
        if depth > MAX_TERMS
            || replaced.term.checked_add(1) != Some(epoch.term)
            || mandate.votes.len() > MAX_COPIES
            || mandate.copies.len() > MAX_COPIES
        {
            return Err(Some(Refusal::BadMandate));
        }
        if *replaced != self.epoch && Some(replaced) != self.left.as_ref() {
            match &mandate.before {
                Some(before) if *replaced > self.epoch => {
                    self.proves(replaced, before, depth + 1)?
                }
                // A chain from the first epoch that never met this
                // replica's: another history, or one it cannot check.
                _ => return Err(None),
            }
        }
        let valid = |signer: &P, statement: &Statement<'_, P>, sig: &Signature| {
            sig.0.len() <= MAX_SIGNATURE && self.signer.verify(signer, statement, sig)
        };
        let roster = Statement::Roster {
            job: self.job,
            epoch: replaced,
            version: mandate.version,
            copies: &mandate.copies,
        };
        if !valid(&replaced.primary, &roster, &mandate.roster) {
            return Err(Some(Refusal::BadSignature));
        }
        for (voter, (vote, sig)) in &mandate.votes {
            if !mandate.copies.contains(voter) {
                return Err(Some(Refusal::BadMandate));
            }
            let statement = Statement::Vote {
                job: self.job,
                replaced,
                vote,
            };
            if !valid(voter, &statement, sig) {
                return Err(Some(Refusal::BadSignature));
            }
        }
        if mandate.votes.len() <= mandate.copies.len() / 2 {
            return Err(Some(Refusal::TooFewVotes));
        }
        if winner(self.job, &mandate.votes).as_ref() != Some(&epoch.primary) {
            return Err(Some(Refusal::BadMandate));
        }
        Ok(())
    }

    /// What a node that holds no replica of `job` answers a message of
    /// it: a standing hears that it is absent (see [`Msg::Absent`]), signed
    /// by `signer`; anything else, nothing.
    pub fn answer_without_replica(
        job: u64,
        msg: &Msg<P, E>,
        signer: &dyn Signer<P>,
    ) -> Option<Msg<P, E>> {
        match msg {
            Msg::Standing { epoch, .. } => Some(Msg::Absent {
                epoch: epoch.clone(),
                sig: signer.sign(&Statement::Vote {
                    job,
                    replaced: epoch,
                    vote: &Vote::Absent,
                }),
            }),
            _ => None,
        }
    }

    /// Whether this replica heard from the primary itself within a lease.
    fn lease_alive(&self, now: Time) -> bool {
        now.saturating_sub(self.heard_primary) < self.timing.lease
    }

    fn alive_to(&self, to: P) -> Action<P, E> {
        Action::Send {
            to,
            msg: self.alive(),
        }
    }

    /// What tells a stale replica of the epoch this one follows: the epoch
    /// with its mandate, so that the stale one can check it.
    pub fn alive(&self) -> Msg<P, E> {
        Msg::Alive {
            epoch: self.epoch.clone(),
            mandate: self.mandate.clone(),
        }
    }

    /// A newer epoch: this replica follows it.
    fn adopt(&mut self, now: Time, epoch: Epoch<P>, out: &mut Vec<Action<P, E>>) {
        let was_primary = self.role == Role::Primary;
        // The epoch left behind checks a rival mandate of the same election
        // (two candidates that heard different majorities).
        self.left = Some(std::mem::replace(&mut self.epoch, epoch.clone()));
        self.copies.clear();
        self.roster = None;
        self.mandate = None;
        self.role = Role::Copy;
        self.heard = now;
        self.progress.clear();
        self.unnotified.clear();
        self.committed = 0;
        self.expected = None;
        // Whether this replica is a copy in the new epoch, and of what
        // others, only the new primary's appends say.
        self.copies_version = 0;
        if was_primary {
            out.push(Action::SteppedDown { epoch });
        }
    }

    /// The lease ran out: tell the other copies how up to date this log is,
    /// and collect theirs.
    fn stand(&mut self, now: Time, out: &mut Vec<Action<P, E>>) {
        if !self.copies.contains(&self.me) {
            // Not a copy in this epoch (an old primary that came back, a
            // copy the primary dropped): not a candidate either. It waits
            // for the primary to place it again.
            self.heard = now;
            return;
        }
        let vote = Vote::Stood {
            last: self.last_epoch(),
            len: self.len(),
        };
        let sig = self.signer.sign(&Statement::Vote {
            job: self.job,
            replaced: &self.epoch,
            vote: &vote,
        });
        let mut heard = BTreeMap::new();
        heard.insert(self.me.clone(), (vote, sig.clone()));
        self.role = Role::Candidate {
            until: now.saturating_add(self.timing.election),
            heard,
        };
        let msg = Msg::Standing {
            epoch: self.epoch.clone(),
            last: self.last_epoch(),
            len: self.len(),
            sig,
        };
        // The primary hears it too: if it lives (its heartbeats were lost,
        // or this copy was dropped by a message that overtook the one that
        // placed it), its answer ends the election before it is won.
        let primary = std::iter::once(&self.epoch.primary);
        for p in self.copies.iter().chain(primary) {
            if *p != self.me {
                out.push(Action::Send {
                    to: p.clone(),
                    msg: msg.clone(),
                });
            }
        }
    }

    /// The epoch of the last entry held: its primary wrote it (a new
    /// primary names the home it took the job over from by it).
    pub fn last_epoch(&self) -> Option<Epoch<P>> {
        self.log.last().map(|(e, _)| e.clone())
    }

    fn on_standing(
        &mut self,
        now: Time,
        from: P,
        vote: Vote<P>,
        sig: Signature,
        out: &mut Vec<Action<P, E>>,
    ) {
        if self.role == Role::Primary {
            // The primary is alive: its append (a heartbeat, or what the
            // copy misses) says so; one it dropped hears the copies
            // without it, and never stands again.
            if self.copies.contains(&from) {
                self.send_append(&from, true, out);
            } else {
                out.push(self.dropped_notice(from));
            }
            return;
        }
        let too_long = matches!(vote, Vote::Stood { len, .. } if len > MAX_LOG);
        if !self.copies.contains(&from) || too_long {
            return;
        }
        if !self.signed(&from, &vote, &sig) {
            out.push(Action::Refused {
                from,
                why: Refusal::BadSignature,
            });
            return;
        }
        let alive = self.lease_alive(now);
        match &mut self.role {
            Role::Primary => {}
            Role::Copy if alive => out.push(self.alive_to(from)),
            Role::Copy => {
                self.stand(now, out);
                if let Role::Candidate { heard, .. } = &mut self.role {
                    heard.insert(from, (vote, sig));
                }
            }
            Role::Candidate { heard, .. } => {
                heard.insert(from, (vote, sig));
            }
        }
    }

    /// The election's window closed: the best log among those heard wins.
    fn elect(&mut self, now: Time, out: &mut Vec<Action<P, E>>) {
        let Role::Candidate { heard, .. } = std::mem::replace(&mut self.role, Role::Copy) else {
            return;
        };
        self.heard = now;
        // More than half the copies this replica knows must have stood or
        // said they hold none, and signed it: a copy that missed that the
        // primary dropped it (the copies it names live but do not answer
        // it) never takes over, nor does one cut off alone; it tries again
        // after another lease. Copies found gone count too: a mandate
        // proves its majority to nodes that cannot check who was gone.
        if heard.len() <= self.copies.len() / 2 {
            return;
        }
        // Without the primary's signature of the copies, or past the last
        // term a chain of mandates holds, no win could be proven.
        let Some(roster) = self.roster.clone() else {
            return;
        };
        if self.epoch.term >= MAX_TERMS {
            return;
        }
        let winner = winner(self.job, &heard).unwrap_or_else(|| self.me.clone());
        if winner != self.me {
            // Wait for the winner's first append (a lease): if it never
            // comes, the next election goes without it.
            self.expected = Some(winner);
            return;
        }
        let next = Epoch {
            term: self.epoch.term.saturating_add(1),
            primary: self.me.clone(),
        };
        let replaced = std::mem::replace(&mut self.epoch, next);
        let old = replaced.primary.clone();
        self.left = Some(replaced.clone());
        self.mandate = Some(Mandate {
            replaced,
            copies: self.copies.clone(),
            version: self.copies_version,
            roster,
            votes: heard,
            before: self.mandate.take().map(Box::new),
        });
        self.role = Role::Primary;
        self.expected = None;
        // The old primary is no copy of this epoch until it comes back and
        // the driver places it again.
        self.copies.remove(&self.me);
        self.copies.remove(&old);
        self.copies_version = self.copies_version.saturating_add(1);
        self.sign_roster();
        self.progress = self
            .copies
            .iter()
            .map(|p| (p.clone(), Progress::fresh(now)))
            .collect();
        // What is committed is learnt again from the copies' acks.
        self.committed = 0;
        out.push(Action::BecamePrimary {
            epoch: self.epoch.clone(),
        });
        for p in self.copies.clone() {
            self.send_append(&p, true, out);
        }
        self.advance_commit(out);
    }

    /// Primary: sends `to` what it lacks from its next index (a heartbeat if
    /// nothing), with the copies if `with_copies` or it is behind.
    fn send_append(&mut self, to: &P, with_copies: bool, out: &mut Vec<Action<P, E>>) {
        let len = self.len();
        let Some(progress) = self.progress.get(to).copied() else {
            return;
        };
        let next = progress.next.clamp(1, len + 1);
        let after = next - 1;
        let after_epoch = (after > 0).then(|| self.log[(after - 1) as usize].0.clone());
        let end = len.min(after + MAX_ENTRIES_PER_APPEND as u64);
        let entries: Vec<(Epoch<P>, E)> = self.log[after as usize..end as usize].to_vec();
        if let Some(p) = self.progress.get_mut(to) {
            p.next = end + 1;
        }
        // A copy that has not acknowledged in this epoch may not know the
        // copies yet (it adopted the epoch from another message).
        let copies = (with_copies || progress.matched == 0 || progress.matched < after)
            .then(|| self.copies.clone());
        let mandate = copies.as_ref().and(self.mandate.clone());
        let roster = copies.as_ref().and(self.roster.clone());
        out.push(Action::Send {
            to: to.clone(),
            msg: Msg::Append {
                epoch: self.epoch.clone(),
                after,
                after_epoch,
                entries,
                copies,
                roster,
                version: self.copies_version,
                end: len,
                mandate,
            },
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn on_append(
        &mut self,
        now: Time,
        from: P,
        after: u64,
        after_epoch: Option<Epoch<P>>,
        entries: Vec<(Epoch<P>, E)>,
        copies: Option<(u64, BTreeSet<P>, Option<Signature>)>,
        out: &mut Vec<Action<P, E>>,
    ) -> bool {
        if from != self.epoch.primary || self.role == Role::Primary {
            return false;
        }
        // Hearing from the primary of this epoch renews its lease, and
        // ends any election this replica took part in.
        self.role = Role::Copy;
        self.heard = now;
        self.heard_primary = now;
        self.expected = None;
        if let Some((version, copies, roster)) = copies
            && version >= self.copies_version
        {
            self.copies = copies.into_iter().take(MAX_COPIES).collect();
            self.copies_version = version;
            self.roster = roster;
        }
        let ack = |index: u64, matched: bool, epoch: &Epoch<P>| Action::Send {
            to: from.clone(),
            msg: Msg::Ack {
                epoch: epoch.clone(),
                index,
                matched,
            },
        };
        // Does this log hold the primary's at `after`?
        let holds = match after {
            0 => true,
            a if a > self.len() => false,
            a => Some(&self.log[(a - 1) as usize].0) == after_epoch.as_ref(),
        };
        if entries.len() > MAX_ENTRIES_PER_APPEND {
            out.push(ack(after.min(self.len()), false, &self.epoch));
            return false;
        }
        if !holds {
            // Ask from before the run of entries of the epoch that differs
            // (none of them can be the primary's at these indices): always
            // before `after`, so the primary's next try goes back.
            let from_index = if after > self.len() {
                self.len()
            } else {
                let differs = &self.log[(after - 1) as usize].0;
                self.log[..after as usize]
                    .iter()
                    .position(|(e, _)| e == differs)
                    .unwrap_or(0) as u64
            };
            out.push(ack(from_index, false, &self.epoch));
            return false;
        }
        if after.saturating_add(entries.len() as u64) > MAX_LOG {
            return false;
        }
        // Keep what matches, drop what differs, append the rest.
        let mut index = after;
        let mut new = Vec::new();
        let mut first_new = None;
        for (epoch, entry) in entries {
            index += 1;
            let i = (index - 1) as usize;
            if i < self.log.len() {
                if self.log[i].0 == epoch {
                    continue;
                }
                let dropped: Vec<E> = self.log.drain(i..).map(|(_, e)| e).collect();
                out.push(Action::Dropped { entries: dropped });
            }
            first_new.get_or_insert(index);
            self.log.push((epoch, entry.clone()));
            new.push(entry);
        }
        if let Some(from_index) = first_new {
            out.push(Action::Appended {
                from: from_index,
                entries: new,
            });
        }
        out.push(ack(index, true, &self.epoch));
        true
    }

    /// A copy's entries past the primary's `end` that an older epoch
    /// appended can never be the job's (the primary appends only in its
    /// own epoch): they are handed back. Entries of this epoch past `end`
    /// stay (the append was overtaken by a later one).
    fn drop_beyond(&mut self, end: u64, out: &mut Vec<Action<P, E>>) {
        let from = (end as usize..self.log.len()).find(|i| self.log[*i].0 != self.epoch);
        if let Some(from) = from {
            let entries: Vec<E> = self.log.drain(from..).map(|(_, e)| e).collect();
            out.push(Action::Dropped { entries });
        }
    }

    fn on_ack(&mut self, from: P, index: u64, matched: bool, out: &mut Vec<Action<P, E>>) {
        if self.role != Role::Primary {
            return;
        }
        // A dropped copy acknowledges its notice (it acknowledges nothing
        // else: it is sent nothing else).
        self.unnotified.remove(&from);
        let len = self.len();
        let Some(progress) = self.progress.get_mut(&from) else {
            return;
        };
        let index = index.min(len);
        if matched {
            progress.matched = progress.matched.max(index);
            progress.next = progress.next.max(index + 1);
            if progress.next <= len {
                self.send_append(&from, false, out);
            }
            self.advance_commit(out);
        } else {
            // The copy's log differs: send from where it says it may match
            // (always further back, so this ends).
            let back = index.min(progress.next.saturating_sub(2));
            progress.next = back + 1;
            progress.matched = progress.matched.min(back);
            self.send_append(&from, true, out);
        }
    }

    /// Primary: the highest index that `copies_to_ack` copies hold (all of
    /// them when fewer).
    fn advance_commit(&mut self, out: &mut Vec<Action<P, E>>) {
        if self.role != Role::Primary {
            return;
        }
        let mut held: Vec<u64> = self.progress.values().map(|p| p.matched).collect();
        held.sort_unstable_by(|a, b| b.cmp(a));
        let need = self.copies_to_ack.min(held.len());
        let index = if need == 0 {
            // No copies: nothing survives this node, but nothing waits
            // for a copy that does not exist either.
            self.len()
        } else {
            held[need - 1]
        };
        if index > self.committed {
            self.committed = index;
            out.push(Action::Committed { index });
        }
    }
}

/// The node that `votes` elect: of those that stood, the one with the most
/// up-to-date log (the epoch of its last entry, then its length), ties
/// broken by a rendezvous hash of the job and the peer.
fn winner<P: PeerKey + Hash>(job: u64, votes: &BTreeMap<P, (Vote<P>, Signature)>) -> Option<P> {
    votes
        .iter()
        .filter_map(|(p, (vote, _))| match vote {
            Vote::Stood { last, len } => Some((p, last, *len)),
            Vote::Absent => None,
        })
        .max_by_key(|(p, last, len)| ((*last).clone(), *len, crate::rendezvous(&job, *p)))
        .map(|(p, _, _)| p.clone())
}

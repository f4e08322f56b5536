//! A job as its home hands it to the other nodes of the job: the copy that
//! travels with a grant or a replica's invitation ([`JobCopy`]), and the
//! job's state a member asks for ([`JobInfo`]). Both are checked as the
//! home itself checked the submission.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zorilla_overlay::PeerId;

use crate::protocol::{JobPhase, JobRequest};
use crate::store::FileRef;
use crate::validate::{self, Invalid};

/// Where a rank runs (the core's [`zorilla_core::advert::Placed`]).
pub(crate) type Placed = zorilla_core::advert::Placed<PeerId>;

/// A job's state, as the home hands it to nodes running its workers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobInfo {
    pub(crate) id: u64,
    pub(crate) home: PeerId,
    pub(crate) phase: JobPhase,
    pub(crate) request: JobRequest,
    pub(crate) module: FileRef,
    pub(crate) inputs: Vec<FileRef>,
    pub(crate) ranks: BTreeMap<u32, Placed>,
}

impl JobInfo {
    /// Checks a job's state as its home sent it: the request, the input
    /// names and the placement, as the home itself checked them.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        validate::request(&self.request)?;
        validate::input_names(self.inputs.iter().map(|f| f.name.as_str()))?;
        validate::placement(self.ranks.keys(), &[])
    }
}

/// What a member needs of a job to start its workers, besides the grant:
/// what to run and with what limits, and the files to fetch (by hash, from
/// the home or another node of the job). It travels with the grant
/// ([`super::sched::SchedRpc::Grant`]), so a member starts without asking
/// the home.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobCopy {
    pub(crate) request: JobRequest,
    pub(crate) module: FileRef,
    pub(crate) inputs: Vec<FileRef>,
    /// When the job was accepted, seconds since the Unix epoch (what a
    /// node that takes the job over shows).
    #[serde(default)]
    pub(crate) submitted_unix: u64,
    /// The user who owns the job (a node that takes the job over keeps it
    /// that user's).
    #[serde(default)]
    pub(crate) owner: Option<crate::owner::UserId>,
    /// The owner's signature of the submission: a node checks it before
    /// it runs a worker of the job.
    #[serde(default)]
    pub(crate) owner_proof: Option<crate::owner::SubmitProof>,
    /// The job's first home and the nonce its id was made from: a node
    /// takes a grant or an invitation to hold a copy only if they give the
    /// job's id (see [`crate::origin`]).
    #[serde(default)]
    pub(crate) origin: Option<crate::origin::JobOrigin>,
}

impl JobCopy {
    /// The job's first home, if the copy's origin makes `job`'s id (see
    /// [`crate::origin`]).
    pub(crate) fn first_home(&self, job: u64) -> Option<PeerId> {
        self.origin.and_then(|o| o.first_home(job))
    }

    /// Checks a job's copy as its home sent it: the request and the input
    /// names, as the home itself checked them.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        validate::request(&self.request)?;
        validate::input_names(self.inputs.iter().map(|f| f.name.as_str()))
    }
}

//! Zorilla's grid simulator (`zorilla-sim`).
//!
//! [`sim`] runs thousands of simulated nodes, each with the real sans-IO
//! core of `zorilla-core`, over a latency model read from a [`scenario`]
//! file; [`report`] turns runs into the human summary, CSV and SVG plot that
//! `zorilla-sim` writes, and measures locality against an oracle;
//! [`generate`] makes random scenarios and [`random`] runs many of them
//! side by side (`zorilla-sim --random N`), also on heterogeneous
//! machines whose workers run by work, CPU speed and the multi-core
//! desktop grids paper's contention model, for job turnaround
//! (`zorilla-sim --hetero N`); [`sweep`] is the P2P-MPI co-allocation
//! sweep, one job of `n` workers against the paper's algorithms;
//! [`fairshare`] measures the Network of Favors' fair sharing among
//! contributors, free riders and fresh identities against first come,
//! first served (`zorilla-sim --fairshare N`), and
//! [`fairshare::preemption`] what preempting strangers' long jobs does
//! for contributors (`zorilla-sim --preemption N`), and
//! [`fairshare::arrays`] many users' job arrays on generated topologies
//! with contention, each user's share against its contribution
//! (`zorilla-sim --arrays N`); [`spotcheck`] how often a job array's spot
//! checks catch a node that lies about a share of its results, and what
//! they cost (`zorilla-sim --spot-checks N`).

pub mod fairshare;
pub mod generate;
pub mod random;
pub mod report;
pub mod scenario;
pub mod sim;
pub mod spotcheck;
pub mod sweep;

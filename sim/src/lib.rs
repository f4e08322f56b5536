//! Zorilla's grid simulator (`zorilla-sim`).
//!
//! [`sim`] runs thousands of simulated nodes, each with the real sans-IO
//! core of `zorilla-core`, over a latency model read from a [`scenario`]
//! file; [`report`] turns runs into the human summary, CSV and SVG plot that
//! `zorilla-sim` writes, and measures locality against an oracle.

pub mod report;
pub mod scenario;
pub mod sim;
pub mod sweep;

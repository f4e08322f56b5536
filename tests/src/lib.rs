//! Zorilla grid simulator.

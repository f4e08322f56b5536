//! The Zorilla node.

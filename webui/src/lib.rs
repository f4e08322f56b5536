//! Status page of a Zorilla node.

//! zorilla-sim
fn main() {}

//! The libp2p overlay of Zorilla.

//! The embedded simulated control plane; it knows nothing of the harness.
pub mod apiserver;

//! The simulated kubelet (being written).

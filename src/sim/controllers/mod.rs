//! The simulated kube-controller-manager and scheduler (being written).

//! The embedded simulated control plane: an API server, controllers, kubelets that run
//! pods as local processes, and the faults the conformance features inject. It knows
//! nothing of the harness.
//!
//! - [`apiserver`]: the Kubernetes API (HTTPS, auth, RBAC, watch, audit).
//! - [`cluster`]: the whole simulated cluster behind one handle.
//! - [`controllers`]: garbage collector, deployment, namespace, node lifecycle, scheduler.
//! - [`kubelet`]: one per simulated node; runs containers as processes, heartbeats.
//! - [`faults`]: API fault rules (reject, delay) and the log of every fault.
//! - [`proxy`]: the per-pod and per-node TCP proxy where network faults act.

pub mod apiserver;
pub mod cluster;
pub mod controllers;
pub mod faults;
pub mod kubelet;
pub mod plain_http;
pub mod proxy;

/// An error and its causes on one line (`a: b: c`), for logs and failure messages.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

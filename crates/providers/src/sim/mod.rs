//! The embedded simulated control plane: an API server, controllers, kubelets that run
//! pods as local processes, and the faults the conformance features inject. It knows
//! nothing of the harness.
//!
//! - [`apiserver`]: the Kubernetes API (HTTPS, auth, RBAC, watch, audit).
//! - [`SimCluster`]: the whole simulated cluster behind one handle, assembled from them.
//! - [`in_process`]: how the nodes and controllers reach the API server of the same process.
//! - [`controllers`]: garbage collector, deployment, namespace, node lifecycle, scheduler.
//! - [`kubelet`]: one per simulated node; runs containers as processes, heartbeats.
//! - [`faults`]: API fault rules (reject, delay) and the log of every fault.
//! - [`proxy`]: the per-pod and per-node TCP proxy where network faults act.

mod assembly;
pub mod in_process;

pub use assembly::{ClusterError, Nodes, SimCluster, SimClusterConfig};

pub use sim_apiserver as apiserver;
pub use sim_apiserver::faults;
pub use sim_controllers as controllers;
pub use sim_node as kubelet;
pub use sim_node::proxy;

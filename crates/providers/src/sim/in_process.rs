//! How the simulator's nodes and controllers reach the simulated API server of the same
//! process. They are clients of any API server; these adapters give them the simulated
//! one, with the two in-process hooks only it has: the kubelets hand it their container
//! logs, and it attributes each request to the pod whose IP sent it.

pub use super::controllers::in_process::{controller_access, start_controllers};
pub use super::kubelet::upstream::SimulatedUpstream;

//! The `local` provider's parts: the real Kubernetes binaries and a real control plane
//! (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) run as local processes.

pub mod binaries;
pub mod control_plane;
pub mod provider;

pub use binaries::{Binaries, BinariesError};
pub use control_plane::{ControlPlane, ControlPlaneConfig, ControlPlaneError, ControllersRun};
pub use provider::LocalProvider;

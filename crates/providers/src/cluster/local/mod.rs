//! The `local` provider's parts: the real Kubernetes binaries, a real control plane (etcd,
//! kube-apiserver, kube-controller-manager, kube-scheduler) run as local processes with our
//! kubelet as its nodes, and the run's one plane shared by its scenarios.

pub mod binaries;
pub mod cluster;
pub mod control_plane;
pub mod pinned;
pub mod provider;
pub mod provision;
pub mod versions;

pub use binaries::{Binaries, BinariesError};
pub use cluster::LocalCluster;
pub use control_plane::{ControlPlane, ControlPlaneConfig, ControlPlaneError, ControllersRun};
pub use provider::{LocalRun, LocalShare};
pub use versions::{KubernetesVersion, LocalOptions, VersionError};

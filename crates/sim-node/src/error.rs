//! The kubelet's own error: what starting a `Kubelet` and carrying out its faults can fail
//! with. The crate root re-exports it.

use std::path::PathBuf;

use super::proxy::ProxyError;
use super::upstream::UpstreamError;

/// Errors of the kubelet and its faults.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// The node's proxy could not be started.
    #[error("cannot start the api proxy of node {node}")]
    Proxy {
        /// The node.
        node: String,
        /// The cause.
        #[source]
        source: ProxyError,
    },
    /// Its pods' proxies could not be made ready to inspect requests.
    #[error("cannot make the pod proxies of node {node} inspect requests")]
    Inspect {
        /// The node.
        node: String,
        /// The cause.
        #[source]
        source: crate::inspect::InspectError,
    },
    /// The kubelet's API client could not be built.
    #[error("cannot build the api client of node {node}")]
    Client {
        /// The node.
        node: String,
        /// The cause.
        #[source]
        source: UpstreamError,
    },
    /// The kubelet's HTTPS endpoint (logs, for a real API server) could not be started.
    #[error("cannot start the kubelet endpoint of node {node}")]
    Endpoint {
        /// The node.
        node: String,
        /// The cause.
        #[source]
        source: super::server::ServerError,
    },
    /// The node's working directory could not be created.
    #[error("cannot create the work directory {path}")]
    WorkDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The Node could not be registered.
    #[error("cannot register node {node}")]
    Register {
        /// The node.
        node: String,
        /// The cause.
        #[source]
        source: super::node::NodeError,
    },
    /// No such pod runs on this node.
    #[error("pod {namespace}/{pod} does not run on node {node}")]
    NoSuchPod {
        /// Namespace.
        namespace: String,
        /// Pod name.
        pod: String,
        /// This node.
        node: String,
    },
    /// The pod has no such container.
    #[error("pod {namespace}/{pod} has no container {container:?}")]
    NoSuchContainer {
        /// Namespace.
        namespace: String,
        /// Pod name.
        pod: String,
        /// The container asked for.
        container: String,
    },
    /// The container is not running (waiting for a restart, or finished).
    #[error("container {container} of pod {namespace}/{pod} is not running")]
    NotRunning {
        /// Namespace.
        namespace: String,
        /// Pod name.
        pod: String,
        /// The container.
        container: String,
    },
    /// The pod has ended, is being deleted, or was evicted already: nothing to evict.
    #[error("pod {namespace}/{pod} has ended, is being deleted or was evicted already")]
    Ended {
        /// Namespace.
        namespace: String,
        /// Pod name.
        pod: String,
    },
    /// Clock skew needs libfaketime, which is not installed.
    #[error(
        "clock skew needs libfaketime, which is not installed: apt-get install faketime (Debian/Ubuntu package `faketime`)"
    )]
    NoFaketime,
    /// The pod's faketime file could not be written.
    #[error("cannot write the clock offset of pod {namespace}/{pod}")]
    Skew {
        /// Namespace.
        namespace: String,
        /// Pod name.
        pod: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

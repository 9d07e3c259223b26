//! A whole simulated cluster behind one handle: the API server, a kubelet per node, the
//! controllers and the scheduler, and the faults that act on them. What `opconform sim`
//! runs and what each scenario on the simulator gets.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, PostParams};

use super::apiserver::{ApiServer, ApiServerConfig, ApiServerError, ServerHandle};
use super::controllers::{ControllerConfig, Controllers, ControllersError};
use super::faults::{Cut, FaultError, FaultTarget, HoldScope, NodeFault, PodFault};
use super::in_process::{SimulatedUpstream, start_controllers};
use super::kubelet::oci::Isolation;
use super::kubelet::{ImageMap, Kubelet, KubeletConfig, KubeletError};
use super::proxy::Mode;

/// Errors of the simulated cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The API server did not start.
    #[error("the simulated api server did not start")]
    ApiServer(#[source] ApiServerError),
    /// A kubelet did not start.
    #[error("the kubelet of node {node} did not start")]
    Kubelet {
        /// The node.
        node: String,
        /// The cause.
        #[source]
        source: KubeletError,
    },
    /// The controllers did not start.
    #[error("the simulated controllers did not start")]
    Controllers(#[source] ControllersError),
    /// The default StorageClass could not be created.
    #[error("cannot create the default storage class")]
    StorageClass(#[source] kube::Error),
    /// The working directory could not be made.
    #[error("cannot create the cluster's working directory")]
    WorkDir(#[source] std::io::Error),
    /// The nodes did not become Ready in time.
    #[error("{ready} of {wanted} nodes became Ready within {within:?}")]
    NodesNotReady {
        /// Ready nodes.
        ready: usize,
        /// Nodes started.
        wanted: usize,
        /// The bound.
        within: Duration,
    },
}

/// How to build a simulated cluster.
#[derive(Debug, Clone)]
pub struct SimClusterConfig {
    /// API server settings (its name names the cluster).
    pub apiserver: ApiServerConfig,
    /// Number of worker nodes.
    pub nodes: u8,
    /// Which images run as local executables.
    pub images: ImageMap,
    /// Controller periods (node grace, GC delay, …).
    pub controllers: ControllerConfig,
    /// Kubelet heartbeat period.
    pub heartbeat_interval: Duration,
    /// libfaketime for the skew fault; found automatically when installed.
    pub faketime_library: Option<PathBuf>,
    /// Where node and pod directories go (a fresh temporary directory when unset).
    pub work_dir: Option<PathBuf>,
    /// How every node runs its pods; `None` lets each kubelet find out
    /// ([`Isolation::detect`]: containers of runc or crun as root, else host processes).
    /// Set to compare the two paths on one machine (`opconform bench`'s pod start rows).
    pub isolation: Option<Isolation>,
    /// The registries (`host[:port]`) whose unmapped images the kubelets pull (see
    /// [`KubeletConfig::registries`]); none by default, so every unmapped image that the
    /// local Docker engine does not have ([`KubeletConfig::docker_engine`]) is a stand-in.
    pub registries: Vec<String>,
    /// Whether the cluster has kind's default StorageClass `standard` (provisioner
    /// `rancher.io/local-path`, `WaitForFirstConsumer`, reclaim policy Delete), so that claims
    /// naming no class get it and are provisioned on the node their pod goes to. On by
    /// default; off where the simulator is compared with a control plane that has none.
    pub default_storage_class: bool,
}

impl Default for SimClusterConfig {
    fn default() -> Self {
        Self {
            apiserver: ApiServerConfig::default(),
            nodes: 3,
            images: ImageMap::new(),
            controllers: ControllerConfig::default(),
            heartbeat_interval: Duration::from_secs(10),
            faketime_library: super::kubelet::find_faketime(),
            work_dir: None,
            isolation: None,
            registries: Vec::new(),
            default_storage_class: true,
        }
    }
}

impl SimClusterConfig {
    /// Short periods so scenarios observe node failures in seconds instead of minutes.
    pub fn fast() -> Self {
        Self {
            controllers: ControllerConfig::fast(),
            heartbeat_interval: Duration::from_millis(500),
            ..Self::default()
        }
    }
}

/// A process-wide id for each simulated cluster, 1..=250, starting at a random point so
/// that two processes on one machine rarely pick the same; it becomes the third octet of
/// every pod IP of the cluster (two clusters with the same pod IPs would share ports).
fn next_cluster_id() -> u8 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        rand::random::<u32>() % 250,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    (NEXT.fetch_add(1, Ordering::SeqCst) % 250 + 1) as u8
}

/// The kubelets of a cluster's nodes, the target of pod and node faults (crash, evict,
/// hold/release, partition/repair, delay, skew) whichever API server they serve.
pub struct Nodes {
    kubelets: Mutex<Vec<Kubelet>>,
}

impl Nodes {
    /// The nodes these kubelets run.
    pub fn new(kubelets: Vec<Kubelet>) -> Self {
        Self {
            kubelets: Mutex::new(kubelets),
        }
    }

    /// Node names.
    pub fn names(&self) -> Vec<String> {
        self.kubelets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|k| k.node_name().to_string())
            .collect()
    }

    /// Every live pod process on every node.
    pub fn pids(&self) -> Vec<u32> {
        self.kubelets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flat_map(Kubelet::pids)
            .collect()
    }

    /// Stops every kubelet, killing every pod process.
    pub async fn shutdown(&self) {
        let kubelets =
            std::mem::take(&mut *self.kubelets.lock().unwrap_or_else(|p| p.into_inner()));
        for kubelet in kubelets {
            kubelet.shutdown().await;
        }
    }

    fn with_pod<T>(
        &self,
        namespace: &str,
        pod: &str,
        act: impl FnOnce(&Kubelet) -> Result<T, KubeletError>,
    ) -> Result<T, FaultError> {
        let kubelets = self.kubelets.lock().unwrap_or_else(|p| p.into_inner());
        let kubelet = kubelets
            .iter()
            .find(|k| k.pod_ip(namespace, pod).is_some())
            .ok_or_else(|| {
                FaultError::NoTarget(format!("pod {namespace}/{pod} is not running on any node"))
            })?;
        act(kubelet).map_err(|e| FaultError::Unsupported(crate::error_chain(&e)))
    }
}

fn mode(cut: Cut) -> Mode {
    match cut {
        Cut::Drop => Mode::Drop,
        Cut::Hang => Mode::Hang,
        Cut::HangResponses => Mode::HangResponses,
    }
}

impl FaultTarget for Nodes {
    fn pod(&self, namespace: &str, pod: &str, fault: &PodFault) -> Result<(), FaultError> {
        self.with_pod(namespace, pod, |k| match fault {
            PodFault::Crash { container } => k.crash(namespace, pod, container.as_deref()),
            PodFault::Evict { message } => k.evict_pod(namespace, pod, message),
            PodFault::Hold => k.hold_pod(namespace, pod),
            PodFault::Release => k.release_pod(namespace, pod),
            PodFault::Partition { cut } => k.partition_pod(namespace, pod, mode(*cut)),
            PodFault::Repair => k
                .partition_pod(namespace, pod, Mode::Pass)
                .and_then(|()| k.delay_pod(namespace, pod, Duration::ZERO)),
            PodFault::Delay { millis } => {
                k.delay_pod(namespace, pod, Duration::from_millis(*millis))
            }
            PodFault::Skew { seconds } => {
                k.skew_pod(namespace, pod, chrono::Duration::seconds(*seconds))
            }
        })
    }

    fn node(&self, node: &str, fault: &NodeFault) -> Result<(), FaultError> {
        let kubelets = self.kubelets.lock().unwrap_or_else(|p| p.into_inner());
        let kubelet = kubelets
            .iter()
            .find(|k| k.node_name() == node)
            .ok_or_else(|| FaultError::NoTarget(format!("node {node}")))?;
        match fault {
            NodeFault::Hold {
                scope: HoldScope::Node,
            } => kubelet.hold_node(),
            NodeFault::Hold {
                scope: HoldScope::Kubelet,
            } => kubelet.hold_kubelet(),
            NodeFault::Release => kubelet.release_node(),
            NodeFault::Partition { cut } => kubelet.partition_node(mode(*cut)),
            NodeFault::Repair => kubelet.partition_node(Mode::Pass),
        }
        Ok(())
    }
}

/// A running simulated cluster. Dropping it stops everything and kills every pod process.
pub struct SimCluster {
    server: ApiServer,
    nodes: Arc<Nodes>,
    controllers: Option<Controllers>,
    _dir: Option<tempfile::TempDir>,
    ready_after: Duration,
}

impl SimCluster {
    /// Starts the API server, the nodes and the controllers, and waits until every node is
    /// Ready (bounded by 30 s).
    ///
    /// # Errors
    /// When any part fails to start or the nodes do not become Ready.
    pub async fn start(config: SimClusterConfig) -> Result<Self, ClusterError> {
        let begin = Instant::now();
        let (dir, work_dir) = match &config.work_dir {
            Some(path) => {
                std::fs::create_dir_all(path).map_err(ClusterError::WorkDir)?;
                (None, path.clone())
            }
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("opconform-sim-")
                    .tempdir()
                    .map_err(ClusterError::WorkDir)?;
                let path = dir.path().to_path_buf();
                (Some(dir), path)
            }
        };
        let cluster_id = next_cluster_id();
        let server = ApiServer::start(config.apiserver.clone())
            .await
            .map_err(ClusterError::ApiServer)?;
        let handle = server.handle();
        if config.default_storage_class {
            create_default_storage_class(&server).await?;
        }
        let starts = (1..=config.nodes).map(|index| {
            let name = format!("worker-{index}");
            let mut kc = KubeletConfig::new(&name, index, work_dir.join(&name));
            // Pod IPs 127.<100+node>.<cluster>.N: clusters in one process never share one.
            kc.pod_ip_prefix = [100 + index, cluster_id];
            kc.images = config.images.clone();
            kc.heartbeat_interval = config.heartbeat_interval;
            kc.faketime_library = config.faketime_library.clone();
            kc.registries = config.registries.clone();
            if let Some(isolation) = &config.isolation {
                kc.isolation = isolation.clone();
            }
            let handle = handle.clone();
            async move {
                Kubelet::start(Arc::new(SimulatedUpstream(handle)), kc)
                    .await
                    .map_err(|source| ClusterError::Kubelet { node: name, source })
            }
        });
        let kubelets = futures::future::try_join_all(starts).await?;
        let nodes = Arc::new(Nodes::new(kubelets));
        handle.state().set_fault_target(nodes.clone());
        // The controllers (the scheduler above all) start from a view with every node Ready.
        wait_for_ready_nodes(&server, config.nodes as usize).await?;
        let mut controller_config = config.controllers.clone();
        if controller_config.local_volumes.is_none() {
            controller_config.local_volumes = Some(work_dir.join("local-path-provisioner"));
        }
        let controllers = start_controllers(&handle, controller_config)
            .await
            .map_err(ClusterError::Controllers)?;
        Ok(Self {
            server,
            nodes,
            controllers: Some(controllers),
            _dir: dir,
            ready_after: begin.elapsed(),
        })
    }
}

/// kind's default StorageClass, as its node image's `default-storage.yaml` makes it.
async fn create_default_storage_class(server: &ApiServer) -> Result<(), ClusterError> {
    let client = server
        .admin_client()
        .await
        .map_err(ClusterError::ApiServer)?;
    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "standard",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": super::controllers::persistent_volume::LOCAL_PATH_PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }))
    .map_err(|e| ClusterError::StorageClass(kube::Error::SerdeError(e)))?;
    Api::<StorageClass>::all(client)
        .create(&PostParams::default(), &class)
        .await
        .map_err(ClusterError::StorageClass)?;
    Ok(())
}

async fn wait_for_ready_nodes(server: &ApiServer, wanted: usize) -> Result<(), ClusterError> {
    let within = Duration::from_secs(30);
    let client = server
        .admin_client()
        .await
        .map_err(ClusterError::ApiServer)?;
    let nodes: Api<Node> = Api::all(client);
    let deadline = tokio::time::Instant::now() + within;
    let mut ticker = tokio::time::interval(Duration::from_millis(10));
    loop {
        ticker.tick().await;
        let ready = nodes
            .list(&ListParams::default())
            .await
            .map(|l| l.items.iter().filter(|n| is_ready(n)).count())
            .unwrap_or(0);
        if ready >= wanted {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(ClusterError::NodesNotReady {
                ready,
                wanted,
                within,
            });
        }
    }
}

impl SimCluster {
    /// The API server.
    pub fn server(&self) -> &ApiServer {
        &self.server
    }

    /// A cloneable handle to the API server.
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// How long start-up took until every node was Ready.
    pub fn ready_after(&self) -> Duration {
        self.ready_after
    }

    /// Node names.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.names()
    }

    /// Every live pod process on every node.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.pids()
    }

    /// Applies a pod fault and logs it in the cluster's fault log.
    ///
    /// # Errors
    /// When the pod runs nowhere or the fault cannot be done here.
    pub fn pod_fault(
        &self,
        namespace: &str,
        pod: &str,
        fault: &PodFault,
    ) -> Result<(), FaultError> {
        self.server
            .state()
            .faults
            .apply_pod(self.nodes.as_ref(), namespace, pod, fault)
    }

    /// Applies a node fault and logs it in the cluster's fault log.
    ///
    /// # Errors
    /// When the node does not exist.
    pub fn node_fault(&self, node: &str, fault: &NodeFault) -> Result<(), FaultError> {
        self.server
            .state()
            .faults
            .apply_node(self.nodes.as_ref(), node, fault)
    }

    /// Stops the controllers and kubelets (killing every pod process) and the API server.
    pub async fn shutdown(mut self) {
        if let Some(controllers) = self.controllers.take() {
            controllers.shutdown().await;
        }
        self.nodes.shutdown().await;
        self.server.shutdown();
    }
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

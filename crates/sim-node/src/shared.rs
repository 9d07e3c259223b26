//! What the kubelet's tasks share: its settings, API client and proxy, the pods it runs,
//! the node's hold, partition and stop state, the pool of pod IPs, and the ConfigMaps and
//! Secrets its pods read. The `Kubelet`
//! (crate root) builds it; the pod workers, container tasks and the kubelet's endpoint
//! read it.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use sim_apiserver::faults::{FaultError, FaultTarget, NodeFault, PodFault};
use tokio::sync::watch;

use super::config::KubeletConfig;
use super::objects::Watched;
use super::proxy::{Mode, Proxy};
use super::runtime::{PodRuntime, lock};
use super::upstream::Upstream;

/// Pod IPs in use on this node, handed out round-robin so a freed IP is not reused soon.
pub(crate) struct IpPool {
    pub(crate) prefix: [u8; 2],
    pub(crate) next: u8,
    pub(crate) used: BTreeSet<u8>,
}

impl IpPool {
    fn allocate(&mut self) -> Option<Ipv4Addr> {
        for _ in 0..254 {
            let candidate = self.next;
            self.next = if self.next >= 254 { 1 } else { self.next + 1 };
            if self.used.insert(candidate) {
                return Some(Ipv4Addr::new(
                    127,
                    self.prefix[0],
                    self.prefix[1],
                    candidate,
                ));
            }
        }
        None
    }

    fn release(&mut self, ip: Ipv4Addr) {
        self.used.remove(&ip.octets()[3]);
    }
}

/// What of a node a hold stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Held {
    /// Nothing: the kubelet works.
    #[default]
    No,
    /// The kubelet alone: its loops stop (no heartbeats, no status, no pod syncs), its pods
    /// run on and reach the API server.
    Kubelet,
    /// The kubelet and every pod process.
    Node,
}

/// What the kubelet's tasks share.
pub(crate) struct Shared {
    pub(crate) config: KubeletConfig,
    pub(crate) server: Arc<dyn Upstream>,
    pub(crate) client: kube::Client,
    /// The reviews of the callers of the kubelet's endpoint, and their caches.
    pub(crate) reviews: super::server::auth::Reviews,
    pub(crate) proxy: Proxy,
    pub(crate) pods: Mutex<HashMap<String, Arc<PodRuntime>>>,
    pub(crate) node_mode: Mutex<Mode>,
    pub(crate) held: watch::Sender<Held>,
    pub(crate) stopping: watch::Sender<bool>,
    pub(crate) ips: Mutex<IpPool>,
    pub(crate) sequence: AtomicU64,
    /// The images pulled from registries, by the reference pulled (what
    /// `imagePullPolicy: IfNotPresent` and `Never` find present).
    pub(crate) pulled: Mutex<HashMap<String, oci_image::Image>>,
    /// How the pods' proxies inspect requests, when the kubelet has request rules.
    pub(crate) inspection: Option<super::inspect::NodeInspection>,
    /// The ConfigMaps the pods' volumes and environments read, watched.
    pub(crate) config_maps: Watched<ConfigMap>,
    /// The Secrets the pods' volumes and environments read, watched.
    pub(crate) secrets: Watched<Secret>,
}

impl Shared {
    /// The CA bundle a pod trusts: the API server's, and the node's proxy CA when the
    /// pod's proxy terminates its TLS.
    pub(crate) fn pod_ca_pem(&self) -> String {
        let mut pem = self.server.ca_pem();
        if let Some(inspection) = &self.inspection {
            if !pem.ends_with('\n') {
                pem.push('\n');
            }
            pem.push_str(inspection.ca_pem());
        }
        pem
    }

    /// Waits while the kubelet is held (a held kubelet does nothing).
    pub(crate) async fn gate(&self) {
        let mut held = self.held.subscribe();
        let _ = held.wait_for(|h| *h == Held::No).await;
    }

    /// [`Shared::gate`] as a reusable closure (for probe loops).
    pub(crate) fn gate_fn(
        self: &Arc<Self>,
    ) -> impl Fn() -> BoxFuture<'static, ()> + Send + Sync + 'static {
        let weak = Arc::downgrade(self);
        move || {
            let weak = weak.clone();
            Box::pin(async move {
                if let Some(shared) = weak.upgrade() {
                    let mut held = shared.held.subscribe();
                    drop(shared);
                    let _ = held.wait_for(|h| *h == Held::No).await;
                }
            })
        }
    }

    /// Whether the whole node is held (its pods frozen too).
    pub(crate) fn node_held(&self) -> bool {
        *self.held.borrow() == Held::Node
    }

    /// Whether the kubelet is shutting down.
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// The partition mode the whole node is in (new pod proxies start in it).
    pub(crate) fn node_mode(&self) -> Mode {
        *lock(&self.node_mode)
    }

    pub(crate) fn allocate_ip(&self) -> Option<Ipv4Addr> {
        lock(&self.ips).allocate()
    }

    pub(crate) fn release_ip(&self, ip: Ipv4Addr) {
        lock(&self.ips).release(ip);
    }

    pub(crate) fn next_sequence(&self) -> u64 {
        self.sequence.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn register(&self, pod: Arc<PodRuntime>) {
        lock(&self.pods).insert(pod.uid.clone(), pod);
    }

    pub(crate) fn unregister(&self, uid: &str) {
        lock(&self.pods).remove(uid);
    }

    pub(crate) fn all_pods(&self) -> Vec<Arc<PodRuntime>> {
        lock(&self.pods).values().cloned().collect()
    }

    /// The pod called `namespace/name` on this node (the newest, should a terminating
    /// pod and its successor share the name).
    pub(crate) fn find(&self, namespace: &str, name: &str) -> Option<Arc<PodRuntime>> {
        lock(&self.pods)
            .values()
            .filter(|p| p.namespace == namespace && p.name == name)
            .max_by_key(|p| p.sequence)
            .cloned()
    }

    pub(crate) fn kill_everything(&self) {
        for pod in self.all_pods() {
            pod.kill_all();
        }
    }
}

/// The pods of a node, as what the request rules hold: a rule holds the pod that sent the
/// request, which runs on the node whose pod proxy judged it.
struct NodePods(Weak<Shared>);

impl Shared {
    /// This node's pods as the target of the request rules' holds.
    pub(crate) fn pods_as_fault_target(self: &Arc<Self>) -> Arc<dyn FaultTarget> {
        Arc::new(NodePods(Arc::downgrade(self)))
    }
}

impl FaultTarget for NodePods {
    fn pod(&self, namespace: &str, pod: &str, fault: &PodFault) -> Result<(), FaultError> {
        let shared = self.0.upgrade().ok_or_else(|| {
            FaultError::NoTarget(format!("pod {namespace}/{pod}: its kubelet stopped"))
        })?;
        let runtime = shared.find(namespace, pod).ok_or_else(|| {
            FaultError::NoTarget(format!("pod {namespace}/{pod} is not running on this node"))
        })?;
        match fault {
            PodFault::Hold => runtime.hold(),
            PodFault::Release => runtime.release(shared.node_held()),
            other => {
                return Err(FaultError::Unsupported(format!(
                    "a pod's proxy holds and releases its pod, nothing else ({other:?})"
                )));
            }
        }
        Ok(())
    }

    fn node(&self, node: &str, _fault: &NodeFault) -> Result<(), FaultError> {
        Err(FaultError::Unsupported(format!(
            "a pod's proxy acts on its pod, not on node {node}"
        )))
    }
}

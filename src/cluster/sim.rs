//! The sim provider: a fresh embedded simulated cluster for each scenario, with the
//! operator image mapped to the built operator binary. It can do every fault.

use std::path::Path;

use async_trait::async_trait;
use kube::Client;
use tokio::sync::broadcast;

use super::{DEFAULT_OPERATOR_IMAGE, Placement, Provider, ProviderError};
use crate::sim::apiserver::audit::AuditEvent;
use crate::sim::cluster::{SimCluster, SimClusterConfig};
use crate::sim::faults::{Faults, NodeFault, PodFault, RequestMatch, reason_for_code};

/// The namespace the operator manifests name.
pub const OPERATOR_NAMESPACE: &str = "memcached-operator-system";

/// A scenario's own simulated cluster.
pub struct SimProvider {
    cluster: SimCluster,
    client: Client,
}

impl SimProvider {
    /// Starts a cluster with `config`.
    ///
    /// # Errors
    /// When the cluster does not start or no client can be built for it.
    pub async fn start(config: SimClusterConfig) -> Result<Self, ProviderError> {
        let cluster = SimCluster::start(config)
            .await
            .map_err(|e| ProviderError::SimStart(Box::new(e)))?;
        let client = match cluster.server().admin_client().await {
            Ok(client) => client,
            Err(e) => {
                cluster.shutdown().await;
                return Err(ProviderError::Client(Box::new(e)));
            }
        };
        Ok(Self { cluster, client })
    }

    /// The simulated cluster.
    pub fn cluster(&self) -> &SimCluster {
        &self.cluster
    }
}

#[async_trait]
impl Provider for SimProvider {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn client(&self) -> Client {
        self.client.clone()
    }

    fn namespace(&self, logical: &str) -> String {
        logical.to_string()
    }

    fn placement(&self) -> Placement {
        Placement {
            namespace: OPERATOR_NAMESPACE.into(),
            suffix: String::new(),
            image: DEFAULT_OPERATOR_IMAGE.into(),
            watch_namespaces: Vec::new(),
            labels: Default::default(),
        }
    }

    fn faults(&self) -> std::sync::Arc<Faults> {
        self.cluster.server().state().faults.clone()
    }

    fn audit(&self) -> Option<broadcast::Receiver<AuditEvent>> {
        Some(self.cluster.server().state().audit.subscribe())
    }

    async fn pod_fault(
        &self,
        namespace: &str,
        pod: &str,
        fault: &PodFault,
    ) -> Result<(), ProviderError> {
        Ok(self.cluster.pod_fault(namespace, pod, fault)?)
    }

    async fn node_fault(&self, node: &str, fault: &NodeFault) -> Result<(), ProviderError> {
        Ok(self.cluster.node_fault(node, fault)?)
    }

    async fn reject(
        &self,
        matches: RequestMatch,
        code: u16,
        message: &str,
    ) -> Result<u64, ProviderError> {
        Ok(self.cluster.server().state().faults.reject(
            matches,
            code,
            reason_for_code(code),
            message,
        )?)
    }

    async fn allow(&self, id: u64) -> Result<(), ProviderError> {
        self.cluster.server().state().faults.allow(id)?;
        Ok(())
    }

    async fn keep_artifacts(&self, _dir: &Path) {
        // Pod logs, events and locks are kept by the step library through the API.
    }

    fn simulated(&self) -> Option<&SimCluster> {
        Some(&self.cluster)
    }

    async fn teardown(self: Box<Self>) {
        self.cluster.shutdown().await;
    }
}

//! The sim provider: a fresh embedded simulated cluster for each scenario, with the
//! operator image mapped to the built operator binary. It can do every fault.
//!
//! The simulator speaks the harness's fault vocabulary itself; the scenario's fault log is
//! the simulator's, which also holds what its API server and kubelets record as they carry
//! faults out ([`SimRules`]).

use std::path::Path;

use async_trait::async_trait;
use kube::Client;
use tokio::sync::broadcast;

use super::sim_parts::SimRules;
use super::{Placement, Provider, ProviderError};
use crate::audit::{AuditFeed, AuditRecord};
use crate::fault::{FaultLog, NodeFault, PodFault, RequestMatch, RequestRules};
use crate::sim::apiserver::ServerHandle;
use crate::sim::apiserver::audit::AuditEvent;
use crate::sim::faults::reason_for_code;
use crate::sim::{SimCluster, SimClusterConfig};

/// The live audit of a simulated API server, as the harness reads it: its events turned
/// into records, caught up with by reading how many it has made.
///
/// # Panics
/// Outside a Tokio runtime (it spawns the task that turns events into records).
pub fn audit_feed(server: &ServerHandle) -> AuditFeed {
    let state = server.state().clone();
    let mut live = state.audit.subscribe();
    let (tx, records) = broadcast::channel(65_536);
    tokio::spawn(async move {
        loop {
            match live.recv().await {
                Ok(event) => {
                    if tx.send(record_of(event)).is_err() {
                        return;
                    }
                }
                // The recorder notes the gap: the numbers skip.
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    AuditFeed::counted(records, move || state.audit.last_seq())
}

/// The harness's record of an event of the simulator's audit.
pub fn record_of(event: AuditEvent) -> AuditRecord {
    AuditRecord {
        time: event.time,
        seq: event.seq,
        user: event.user,
        pod: event.pod,
        verb: event.verb,
        api_group: event.api_group,
        resource: event.resource,
        subresource: event.subresource,
        namespace: event.namespace,
        name: event.name,
        code: event.code,
    }
}

/// A scenario's own simulated cluster.
pub struct SimProvider {
    cluster: SimCluster,
    client: Client,
    /// The API server's request rules and the cluster's fault log.
    rules: SimRules,
    /// Where the operator under test goes: as its own manifests say.
    placement: Placement,
}

impl SimProvider {
    /// Starts a cluster with the simulator's fast timings whose kubelets run `images` (the
    /// operator under test's: see [`super::operator_image`]), the operator placed as
    /// `placement` says (its own manifests' namespace and image:
    /// [`crate::subject::Subject::own_placement`]).
    ///
    /// # Errors
    /// When the cluster does not start or no client can be built for it.
    pub async fn running(
        placement: Placement,
        images: crate::sim::kubelet::ImageMap,
    ) -> Result<Self, ProviderError> {
        let mut provider = Self::start(SimClusterConfig {
            images,
            ..SimClusterConfig::fast()
        })
        .await?;
        provider.placement = placement;
        Ok(provider)
    }

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
        Ok(Self {
            rules: SimRules::new(cluster.server().state().faults.clone()),
            cluster,
            client,
            placement: Placement::bundled(),
        })
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
        self.placement.clone()
    }

    fn faults(&self) -> FaultLog {
        FaultLog::kept_in(std::sync::Arc::new(self.rules.clone()))
    }

    fn audit(&self) -> Option<AuditFeed> {
        Some(audit_feed(self.cluster.server()))
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
        Ok(self
            .rules
            .reject(matches, code, reason_for_code(code), message)?)
    }

    async fn allow(&self, id: u64) -> Result<(), ProviderError> {
        self.rules.allow(id)?;
        Ok(())
    }

    async fn keep_artifacts(&self, _dir: &Path) {
        // Pod logs, events and locks are kept by the step library through the API.
    }

    fn request_rules(&self) -> Option<&dyn RequestRules> {
        Some(&self.rules)
    }

    fn pod_ips_reachable(&self) -> bool {
        true
    }

    async fn teardown(self: Box<Self>) {
        self.cluster.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_line_of_the_simulators_audit_log_reads_as_the_record_its_event_becomes() {
        let event = AuditEvent {
            time: "2026-01-01T00:00:01.5Z".parse().unwrap(),
            seq: 9,
            user: "system:serviceaccount:ops:op".into(),
            groups: vec!["system:serviceaccounts".into()],
            impersonated_by: Some("admin".into()),
            source_ip: "10.0.0.7".into(),
            pod: Some(crate::sim::apiserver::audit::PodRef {
                namespace: "ops".into(),
                name: "op-1".into(),
                uid: "u-1".into(),
            }),
            verb: "patch".into(),
            api_group: String::new(),
            resource: "pods".into(),
            subresource: "status".into(),
            namespace: "ops".into(),
            name: "op-1".into(),
            request_uri: "/api/v1/namespaces/ops/pods/op-1/status".into(),
            user_agent: "op/1".into(),
            code: 200,
        };
        let line = serde_json::to_string(&event).unwrap();
        assert_eq!(
            crate::cluster::audit_log::parse_sim_line(&line),
            Some(record_of(event))
        );
    }

    #[test]
    fn the_log_of_a_simulated_cluster_shows_what_the_simulator_and_the_harness_recorded() {
        let faults = SimRules::default();
        let id = faults
            .reject(RequestMatch::default(), 503, "ServiceUnavailable", "down")
            .unwrap();
        let log = FaultLog::kept_in(Arc::new(faults.clone()));
        log.record("delete", "lock ops/lock", "by hand");
        faults.allow(id).unwrap();
        assert_eq!(log.events(), faults.log());
        let verbs: Vec<String> = log.events().into_iter().map(|e| e.verb).collect();
        assert_eq!(verbs, ["reject", "delete", "allow"]);
        assert_eq!(log.events()[1].detail, "by hand");
    }
}

//! The sim provider: a fresh embedded simulated cluster for each scenario, with the
//! operator image mapped to the built operator binary. It can do every fault.
//!
//! The harness's fault vocabulary ([`crate::fault`]) is translated here, and only here,
//! into the simulator's own (`sim::faults`); the scenario's fault log is the simulator's,
//! which also holds what its API server and kubelets record as they carry faults out.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use kube::Client;
use tokio::sync::broadcast;

use super::{Placement, Provider, ProviderError};
use crate::audit::{AuditFeed, AuditRecord, PodRef};
use crate::fault::{Cut, Milestone, NodeFault, PodFault, RequestMatch, RequestRules};
use crate::fault::{FaultError, FaultEvent, FaultLog, FaultStore};
use crate::sim::apiserver::ServerHandle;
use crate::sim::apiserver::audit::AuditEvent;
use crate::sim::cluster::{Nodes, SimCluster, SimClusterConfig};
use crate::sim::faults::{self as simulated, FaultTarget as _, reason_for_code};
use crate::sim::kubelet::ImageMap;

/// Whether our kubelets can skew a pod's clock here: they preload libfaketime (the Debian
/// package `faketime`) into its processes.
pub fn can_skew_clocks() -> bool {
    crate::sim::kubelet::find_faketime().is_some()
}

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
        pod: event.pod.map(|p| PodRef {
            namespace: p.namespace,
            name: p.name,
            uid: p.uid,
        }),
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
    /// Where the operator under test goes: as its own manifests say.
    placement: Placement,
}

impl SimProvider {
    /// Starts a cluster with the simulator's fast timings whose kubelets run `binary` for
    /// the containers of the operator under test, placed as `placement` says (its own
    /// manifests' namespace and image: [`crate::subject::Subject::own_placement`]).
    ///
    /// # Errors
    /// When the cluster does not start or no client can be built for it.
    pub async fn running(placement: Placement, binary: &Path) -> Result<Self, ProviderError> {
        let mut images = ImageMap::new();
        images.insert(&placement.image, binary);
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
        FaultLog::kept_in(self.cluster.server().state().faults.clone())
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
        self.cluster
            .pod_fault(namespace, pod, &fault.into())
            .map_err(FaultError::from)?;
        Ok(())
    }

    async fn node_fault(&self, node: &str, fault: &NodeFault) -> Result<(), ProviderError> {
        self.cluster
            .node_fault(node, &fault.into())
            .map_err(FaultError::from)?;
        Ok(())
    }

    async fn reject(
        &self,
        matches: RequestMatch,
        code: u16,
        message: &str,
    ) -> Result<u64, ProviderError> {
        let faults = &self.cluster.server().state().faults;
        Ok(faults
            .reject(matches.into(), code, reason_for_code(code), message)
            .map_err(FaultError::from)?)
    }

    async fn allow(&self, id: u64) -> Result<(), ProviderError> {
        let faults = &self.cluster.server().state().faults;
        faults.allow(id).map_err(FaultError::from)?;
        Ok(())
    }

    async fn keep_artifacts(&self, _dir: &Path) {
        // Pod logs, events and locks are kept by the step library through the API.
    }

    fn request_rules(&self) -> Option<&dyn RequestRules> {
        Some(self.cluster.server().state().faults.as_ref())
    }

    fn pod_ips_reachable(&self) -> bool {
        true
    }

    async fn teardown(self: Box<Self>) {
        self.cluster.shutdown().await;
    }
}

/// The simulator's request rules, which its API server judges (sim) and which our kubelet's
/// pod proxies judge (local).
impl RequestRules for simulated::Faults {
    fn hold_sender(
        &self,
        matches: RequestMatch,
        span: Duration,
        after: Option<RequestMatch>,
    ) -> u64 {
        simulated::Faults::hold_sender(self, matches.into(), span, after.map(Into::into))
    }

    fn defer_until(
        &self,
        matches: RequestMatch,
        until: RequestMatch,
        milestone: Milestone,
        limit: Duration,
    ) -> u64 {
        simulated::Faults::defer_until(self, matches.into(), until.into(), milestone.into(), limit)
    }

    fn deferral_timed_out(&self, serve_detail: &str) -> bool {
        serve_detail.starts_with(simulated::DEFER_TIMED_OUT)
    }
}

/// Carries out a pod fault on simulated kubelets (the local provider's nodes), without
/// logging it.
///
/// # Errors
/// When no node runs the pod, or the fault cannot be done.
pub(crate) fn pod_fault_on(
    nodes: &Nodes,
    namespace: &str,
    pod: &str,
    fault: &PodFault,
) -> Result<(), FaultError> {
    Ok(nodes.pod(namespace, pod, &fault.into())?)
}

/// Carries out a node fault on simulated kubelets (the local provider's nodes), without
/// logging it.
///
/// # Errors
/// When the node does not exist.
pub(crate) fn node_fault_on(
    nodes: &Nodes,
    node: &str,
    fault: &NodeFault,
) -> Result<(), FaultError> {
    Ok(nodes.node(node, &fault.into())?)
}

/// The simulator's fault log is the scenario's: it holds what the API server and kubelets
/// record as they carry faults out, and what the harness records beside them.
impl FaultStore for simulated::Faults {
    fn record(&self, verb: &str, target: &str, detail: &str) {
        simulated::Faults::record(self, verb, target, detail);
    }

    fn events(&self) -> Vec<FaultEvent> {
        self.log().into_iter().map(FaultEvent::from).collect()
    }
}

impl From<RequestMatch> for simulated::RequestMatch {
    fn from(m: RequestMatch) -> Self {
        Self {
            verbs: m.verbs,
            group: m.group,
            resource: m.resource,
            subresource: m.subresource,
            namespace: m.namespace,
            name: m.name,
            pod: m.pod,
            user: m.user,
        }
    }
}

impl From<Milestone> for simulated::Milestone {
    fn from(milestone: Milestone) -> Self {
        match milestone {
            Milestone::Arrived => Self::Arrived,
            Milestone::Answered => Self::Answered,
        }
    }
}

impl From<Cut> for simulated::Cut {
    fn from(cut: Cut) -> Self {
        match cut {
            Cut::Drop => Self::Drop,
            Cut::Hang => Self::Hang,
            Cut::HangResponses => Self::HangResponses,
        }
    }
}

impl From<&PodFault> for simulated::PodFault {
    fn from(fault: &PodFault) -> Self {
        match fault.clone() {
            PodFault::Crash { container } => Self::Crash { container },
            PodFault::Evict { message } => Self::Evict { message },
            PodFault::Hold => Self::Hold,
            PodFault::Release => Self::Release,
            PodFault::Partition { cut } => Self::Partition { cut: cut.into() },
            PodFault::Repair => Self::Repair,
            PodFault::Delay { millis } => Self::Delay { millis },
            PodFault::Skew { seconds } => Self::Skew { seconds },
        }
    }
}

impl From<&NodeFault> for simulated::NodeFault {
    fn from(fault: &NodeFault) -> Self {
        match *fault {
            NodeFault::Hold => Self::Hold,
            NodeFault::Release => Self::Release,
            NodeFault::Partition { cut } => Self::Partition { cut: cut.into() },
            NodeFault::Repair => Self::Repair,
        }
    }
}

impl From<simulated::FaultError> for FaultError {
    fn from(e: simulated::FaultError) -> Self {
        match e {
            simulated::FaultError::NoRule(id) => Self::NoRule(id),
            simulated::FaultError::NotAnErrorCode(code) => Self::NotAnErrorCode(code),
            simulated::FaultError::NoTarget(target) => Self::NoTarget(target),
            simulated::FaultError::Unsupported(what) => Self::Unsupported(what),
        }
    }
}

impl From<simulated::FaultEvent> for FaultEvent {
    fn from(e: simulated::FaultEvent) -> Self {
        Self {
            time: e.time,
            verb: e.verb,
            target: e.target,
            detail: e.detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::fault;

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
            crate::cluster::audit::parse_sim_line(&line),
            Some(record_of(event))
        );
    }

    /// Every pod fault of the vocabulary, with the simulator's fault it means.
    fn pod_faults() -> Vec<(PodFault, simulated::PodFault)> {
        vec![
            (
                PodFault::Crash { container: None },
                simulated::PodFault::Crash { container: None },
            ),
            (
                PodFault::Crash {
                    container: Some("manager".into()),
                },
                simulated::PodFault::Crash {
                    container: Some("manager".into()),
                },
            ),
            (
                PodFault::Evict {
                    message: fault::LOW_ON_MEMORY.into(),
                },
                simulated::PodFault::Evict {
                    message: simulated::LOW_ON_MEMORY.into(),
                },
            ),
            (PodFault::Hold, simulated::PodFault::Hold),
            (PodFault::Release, simulated::PodFault::Release),
            (
                PodFault::Partition { cut: Cut::Drop },
                simulated::PodFault::Partition {
                    cut: simulated::Cut::Drop,
                },
            ),
            (
                PodFault::Partition { cut: Cut::Hang },
                simulated::PodFault::Partition {
                    cut: simulated::Cut::Hang,
                },
            ),
            (
                PodFault::Partition {
                    cut: Cut::HangResponses,
                },
                simulated::PodFault::Partition {
                    cut: simulated::Cut::HangResponses,
                },
            ),
            (PodFault::Repair, simulated::PodFault::Repair),
            (
                PodFault::Delay { millis: 200 },
                simulated::PodFault::Delay { millis: 200 },
            ),
            (
                PodFault::Skew { seconds: -30 },
                simulated::PodFault::Skew { seconds: -30 },
            ),
        ]
    }

    /// Every node fault of the vocabulary, with the simulator's fault it means.
    fn node_faults() -> Vec<(NodeFault, simulated::NodeFault)> {
        let mut faults = vec![
            (NodeFault::Hold, simulated::NodeFault::Hold),
            (NodeFault::Release, simulated::NodeFault::Release),
            (NodeFault::Repair, simulated::NodeFault::Repair),
        ];
        for (cut, meant) in [
            (Cut::Drop, simulated::Cut::Drop),
            (Cut::Hang, simulated::Cut::Hang),
            (Cut::HangResponses, simulated::Cut::HangResponses),
        ] {
            faults.push((
                NodeFault::Partition { cut },
                simulated::NodeFault::Partition { cut: meant },
            ));
        }
        faults
    }

    /// A target that carries out every fault (so the simulator logs it).
    struct Accepts;

    impl simulated::FaultTarget for Accepts {
        fn pod(
            &self,
            _: &str,
            _: &str,
            _: &simulated::PodFault,
        ) -> Result<(), simulated::FaultError> {
            Ok(())
        }

        fn node(&self, _: &str, _: &simulated::NodeFault) -> Result<(), simulated::FaultError> {
            Ok(())
        }
    }

    #[test]
    fn every_pod_fault_maps_to_the_simulator_fault_it_means() {
        for (fault, meant) in pod_faults() {
            assert_eq!(simulated::PodFault::from(&fault), meant, "{fault:?}");
        }
    }

    #[test]
    fn every_node_fault_maps_to_the_simulator_fault_it_means() {
        for (fault, meant) in node_faults() {
            assert_eq!(simulated::NodeFault::from(&fault), meant, "{fault:?}");
        }
    }

    #[test]
    fn the_vocabulary_describes_each_fault_as_the_simulator_logs_it() {
        let log = simulated::Faults::new();
        for (fault, _) in pod_faults() {
            log.apply_pod(&Accepts, "ops", "op-1", &(&fault).into())
                .unwrap();
            let logged = log.log().pop().unwrap();
            assert_eq!(
                (logged.verb.as_str(), logged.detail),
                (fault.verb(), fault.detail()),
                "{fault:?}"
            );
            assert_eq!(logged.target, "pod ops/op-1");
        }
        for (fault, _) in node_faults() {
            log.apply_node(&Accepts, "worker-1", &(&fault).into())
                .unwrap();
            let logged = log.log().pop().unwrap();
            assert_eq!(
                (logged.verb.as_str(), logged.detail),
                (fault.verb(), fault.detail()),
                "{fault:?}"
            );
            assert_eq!(logged.target, "node worker-1");
        }
    }

    #[test]
    fn a_request_match_keeps_every_field_in_the_simulator_rule() {
        let m = RequestMatch {
            verbs: vec!["update".into(), "patch".into()],
            group: Some("coordination.k8s.io".into()),
            resource: Some("leases".into()),
            subresource: Some(String::new()),
            namespace: Some("ops".into()),
            name: Some("lock".into()),
            pod: Some("ops/op-1".into()),
            user: Some("system:serviceaccount:ops:op".into()),
        };
        let meant = simulated::RequestMatch {
            verbs: m.verbs.clone(),
            group: m.group.clone(),
            resource: m.resource.clone(),
            subresource: m.subresource.clone(),
            namespace: m.namespace.clone(),
            name: m.name.clone(),
            pod: m.pod.clone(),
            user: m.user.clone(),
        };
        assert_eq!(simulated::RequestMatch::from(m.clone()), meant);
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            serde_json::to_value(&meant).unwrap(),
            "remembered refusals read the same"
        );
    }

    #[tokio::test]
    async fn a_deferral_let_go_by_its_limit_reads_as_timed_out_and_one_let_go_in_time_does_not() {
        let faults = simulated::Faults::new();
        let writes_of = |pod: &str| RequestMatch {
            verbs: vec!["update".into()],
            resource: Some("leases".into()),
            pod: Some(format!("ops/{pod}")),
            ..RequestMatch::default()
        };
        let pod = |name: &str| crate::sim::apiserver::audit::PodRef {
            namespace: "ops".into(),
            name: name.into(),
            uid: name.into(),
        };
        let (b, c) = (pod("b"), pod("c"));
        let write = |from| simulated::RequestFacts {
            verb: "update",
            resource: "leases",
            pod: Some(from),
            ..Default::default()
        };
        for (milestone, limit) in [
            (Milestone::Arrived, Duration::from_millis(20)),
            (Milestone::Answered, Duration::from_secs(10)),
        ] {
            RequestRules::defer_until(&faults, writes_of("c"), writes_of("b"), milestone, limit);
        }
        // B's write never comes: C's first is let go by its limit.
        let simulated::Verdict::Defer(first) = faults.verdict(&write(&c)) else {
            panic!("the first rule holds C's write");
        };
        faults.defer(first, "update leases").await;
        let timed_out = faults.log().pop().unwrap().detail;
        assert!(faults.deferral_timed_out(&timed_out), "{timed_out}");
        // B's write was answered before C's next one: that one goes at once.
        drop(faults.arrived(&write(&b)));
        let simulated::Verdict::Defer(second) = faults.verdict(&write(&c)) else {
            panic!("the second rule holds C's next write");
        };
        faults.defer(second, "update leases").await;
        let in_time = faults.log().pop().unwrap().detail;
        assert!(!faults.deferral_timed_out(&in_time), "{in_time}");
    }

    #[test]
    fn the_simulator_errors_keep_their_messages() {
        let errors = [
            simulated::FaultError::NoRule(7),
            simulated::FaultError::NotAnErrorCode(200),
            simulated::FaultError::NoTarget("pod ops/gone".into()),
            simulated::FaultError::Unsupported("skew needs libfaketime".into()),
        ];
        for e in errors {
            let said = e.to_string();
            assert_eq!(FaultError::from(e).to_string(), said);
        }
    }

    #[test]
    fn the_log_of_a_simulated_cluster_shows_what_the_simulator_and_the_harness_recorded() {
        let faults = Arc::new(simulated::Faults::new());
        let id = faults
            .reject(
                simulated::RequestMatch::default(),
                503,
                "ServiceUnavailable",
                "down",
            )
            .unwrap();
        let log = FaultLog::kept_in(faults.clone());
        log.record("delete", "lock ops/lock", "by hand");
        faults.allow(id).unwrap();
        let from_simulator: Vec<FaultEvent> =
            faults.log().into_iter().map(FaultEvent::from).collect();
        assert_eq!(log.events(), from_simulator);
        let verbs: Vec<String> = log.events().into_iter().map(|e| e.verb).collect();
        assert_eq!(verbs, ["reject", "delete", "allow"]);
        assert_eq!(log.events()[1].detail, "by hand");
    }
}

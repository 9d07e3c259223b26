//! The local provider: one real control plane and three nodes run by our kubelet
//! ([`LocalCluster`]) for a whole run, shared by its scenarios as kind's cluster is.
//! [`LocalRun`] starts them for the first scenario and stops them when the run ends; each
//! scenario gets a [`LocalShare`] — namespaces and cluster-scoped names of its own
//! (`opconform-xxxxxx-…`), its own fault log — whose teardown deletes exactly what the
//! scenario made.
//!
//! | fault | on local | undo |
//! |---|---|---|
//! | pod crash, evict | the kubelet: SIGKILL; eviction as node pressure does it | — |
//! | pod hold | the kubelet: SIGSTOP | release: SIGCONT |
//! | pod partition, delay | the pod's API proxy: drop, hang, hang responses, latency | repair |
//! | pod skew | libfaketime preloaded into the pod's processes | skew by 0 |
//! | node hold | the kubelet and its pods freeze; or the kubelet alone (its pods run on, the **real** node lifecycle controller marks the node NotReady) | release |
//! | node partition | the node's and its pods' proxies cut: heartbeats stop, and the **real** node lifecycle controller marks it NotReady, taints it and evicts | repair |
//! | reject | a ValidatingAdmissionPolicy and binding ([`crate::cluster::admission`]), as on kind | allow: both deleted |
//! | hold a request's sender, defer a request, commit it whatever its pod does, lose its answer | the pod's API proxy, which terminates the pod's TLS (the pod trusts its node's proxy CA) and judges each request by the request rules | the rule fires once; disarm |
//!
//! The audit of writes is kube-apiserver's own JSON audit log (the kind policy), followed
//! as a file; requests are attributed to pods by their bound ServiceAccount tokens, else by
//! their source address (each pod's proxy connects from the pod's IP).
//!
//! # Caveats
//! - The nodes are the run's: a scenario that freezes or cuts a node (`@disruptive`) must
//!   run alone. Teardown undoes the node faults still in force, and the next share waits
//!   until every node is Ready and free of the node lifecycle controller's taints.
//! - The request rules of the pods' proxies are the run's too: a scenario that sets them
//!   (`@request-rules`) runs alone, and its teardown removes every rule.
//! - The operator's CustomResourceDefinitions are installed once, before the controllers
//!   start, and never deleted while the run lasts.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;

use super::LocalCluster;
use super::cluster::{NODES, NODES_READY_WITHIN, wait_for_ready_nodes};
use crate::audit::AuditFeed;
use crate::cluster::audit_log::{
    PodsByIp, followed_or_warned, kube_apiserver_lines, watch_pod_addresses,
};
use crate::cluster::shared::{SCENARIO_LABEL, delete_labelled, shared_placement};
use crate::cluster::sim_parts::SimRules;
use crate::cluster::{Placement, Provider, ProviderError, admission, random_name};
use crate::fault::{
    FaultEvent, FaultLog, FaultStore, NodeFault, PodFault, RequestMatch, RequestRules,
};
use crate::sim::faults::FaultTarget as _;

/// The run's control plane, once asked for.
enum State {
    /// No scenario has asked for it yet.
    Idle,
    /// Running.
    Up(Arc<LocalCluster>),
    /// Its start failed (the first error, for every later scenario).
    Failed(String),
    /// The run ended.
    Finished,
}

/// One run on `local`: starts the control plane once, hands out scenario shares, and
/// stops it at the end.
pub struct LocalRun {
    state: tokio::sync::Mutex<State>,
}

impl Default for LocalRun {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalRun {
    /// A run with nothing started yet.
    pub fn new() -> Self {
        Self {
            state: tokio::sync::Mutex::new(State::Idle),
        }
    }

    /// The run of this process.
    pub fn global() -> &'static LocalRun {
        static RUN: std::sync::OnceLock<LocalRun> = std::sync::OnceLock::new();
        RUN.get_or_init(LocalRun::new)
    }

    /// A scenario's share of the run's control plane, which `start` starts for the first
    /// scenario (later ones wait for it, and get the same error when it failed); waits
    /// until every node is Ready and untainted.
    ///
    /// # Errors
    /// `start`'s error, [`ProviderError::Local`] when it failed for an earlier scenario or
    /// the run has ended, or when the nodes do not become Ready.
    pub async fn share<E>(
        &self,
        start: impl std::future::Future<Output = Result<LocalCluster, E>>,
    ) -> Result<LocalShare, E>
    where
        E: std::error::Error + From<ProviderError>,
    {
        let plane = {
            let mut state = self.state.lock().await;
            match &*state {
                State::Up(plane) => plane.clone(),
                State::Failed(e) => {
                    return Err(ProviderError::Local(
                        format!("the run's control plane did not start earlier: {e}").into(),
                    )
                    .into());
                }
                State::Finished => {
                    return Err(ProviderError::Local("the run on local has ended".into()).into());
                }
                State::Idle => match start.await {
                    Ok(plane) => {
                        let plane = Arc::new(plane);
                        *state = State::Up(plane.clone());
                        plane
                    }
                    Err(e) => {
                        *state = State::Failed(crate::error_chain(&e));
                        return Err(e);
                    }
                },
            }
        };
        wait_for_ready_nodes(&plane.client, NODES.into(), NODES_READY_WITHIN).await?;
        Ok(LocalShare::new(plane))
    }

    /// Stops the control plane and its nodes (once every share is gone). Safe to call
    /// more than once.
    pub async fn finish(&self) {
        let previous = std::mem::replace(&mut *self.state.lock().await, State::Finished);
        let State::Up(plane) = previous else {
            return;
        };
        match Arc::try_unwrap(plane) {
            Ok(plane) => plane.shutdown().await,
            // Dropping the last reference kills the processes all the same.
            Err(_) => eprintln!(
                "opconform: the local control plane is stopped while a scenario still holds it"
            ),
        }
    }
}

/// A scenario's fault log: what its share records, and what the run's request rules
/// record while the scenario runs (rules are set only by scenarios that run alone).
struct ScenarioFaults {
    own: FaultLog,
    rules: SimRules,
    /// How many events the rules' log had when the scenario began.
    from: usize,
}

impl FaultStore for ScenarioFaults {
    fn record(&self, verb: &str, target: &str, detail: &str) {
        self.own.record(verb, target, detail);
    }

    fn events(&self) -> Vec<FaultEvent> {
        let mut events = self.own.events();
        events.extend(self.rules.log().into_iter().skip(self.from));
        // Stable: events of one store stay in the order they were recorded.
        events.sort_by_key(|e| e.time);
        events
    }
}

/// Node faults of a share still in force (to undo at teardown).
#[derive(Debug, Default)]
struct NodesInForce {
    held: BTreeSet<String>,
    cut: BTreeSet<String>,
}

/// A scenario's share of the run's control plane and nodes.
pub struct LocalShare {
    plane: Arc<LocalCluster>,
    prefix: String,
    faults: FaultLog,
    rejects: admission::Rejects,
    nodes_in_force: std::sync::Mutex<NodesInForce>,
    tasks: std::sync::Mutex<Vec<tokio::task::AbortHandle>>,
}

impl LocalShare {
    fn new(plane: Arc<LocalCluster>) -> Self {
        let prefix = random_name("opconform");
        let labels = shared_placement(&prefix, &plane.image).labels;
        let faults = FaultLog::kept_in(Arc::new(ScenarioFaults {
            own: FaultLog::new(),
            rules: plane.request_rules.clone(),
            from: plane.request_rules.log().len(),
        }));
        Self {
            rejects: admission::Rejects::new(plane.client.clone(), &prefix, labels),
            plane,
            prefix,
            faults,
            nodes_in_force: std::sync::Mutex::default(),
            tasks: std::sync::Mutex::default(),
        }
    }

    /// The scenario's name prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn in_force(&self) -> std::sync::MutexGuard<'_, NodesInForce> {
        self.nodes_in_force
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Releases and repairs the nodes this scenario froze or cut, and removes the request
    /// rules it set.
    fn undo_in_force(&self) {
        let in_force = std::mem::take(&mut *self.in_force());
        let undo = |node: &str, fault: NodeFault| match self.plane.nodes.node(node, &fault) {
            Ok(()) => self
                .faults
                .record(fault.verb(), &format!("node {node}"), "teardown"),
            Err(e) => eprintln!(
                "opconform: teardown of {}: {} of node {node} failed: {}",
                self.prefix,
                fault.verb(),
                crate::error_chain(&e)
            ),
        };
        for node in &in_force.held {
            undo(node, NodeFault::Release);
        }
        for node in &in_force.cut {
            undo(node, NodeFault::Repair);
        }
        let rules = &self.plane.request_rules;
        for rule in rules.rules() {
            let _ = rules.allow(rule.id);
        }
    }
}

#[async_trait]
impl Provider for LocalShare {
    fn name(&self) -> &'static str {
        "local"
    }

    fn client(&self) -> Client {
        self.plane.client.clone()
    }

    fn namespace(&self, logical: &str) -> String {
        format!("{}-{logical}", self.prefix)
    }

    fn placement(&self) -> Placement {
        shared_placement(&self.prefix, &self.plane.image)
    }

    fn faults(&self) -> FaultLog {
        self.faults.clone()
    }

    fn audit(&self) -> Option<AuditFeed> {
        let pods = PodsByIp::default();
        let api: Api<Pod> = Api::namespaced(self.client(), &self.placement().namespace);
        let task = watch_pod_addresses(api, pods.clone());
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task.abort_handle());
        followed_or_warned(
            self.plane.control_plane().audit_log(),
            kube_apiserver_lines(pods),
        )
    }

    fn request_rules(&self) -> Option<&dyn RequestRules> {
        Some(&self.plane.request_rules)
    }

    async fn pod_fault(
        &self,
        namespace: &str,
        pod: &str,
        fault: &PodFault,
    ) -> Result<(), ProviderError> {
        self.plane.nodes.pod(namespace, pod, fault)?;
        self.faults.record(
            fault.verb(),
            &format!("pod {namespace}/{pod}"),
            &fault.detail(),
        );
        Ok(())
    }

    async fn node_fault(&self, node: &str, fault: &NodeFault) -> Result<(), ProviderError> {
        self.plane.nodes.node(node, fault)?;
        {
            let mut in_force = self.in_force();
            match fault {
                NodeFault::Hold { .. } => in_force.held.insert(node.to_string()),
                NodeFault::Release => in_force.held.remove(node),
                NodeFault::Partition { .. } => in_force.cut.insert(node.to_string()),
                NodeFault::Repair => in_force.cut.remove(node),
            };
        }
        self.faults
            .record(fault.verb(), &format!("node {node}"), &fault.detail());
        Ok(())
    }

    async fn reject(
        &self,
        matches: RequestMatch,
        code: u16,
        message: &str,
    ) -> Result<u64, ProviderError> {
        self.rejects
            .reject(matches, code, message, &self.faults)
            .await
    }

    async fn allow(&self, id: u64) -> Result<(), ProviderError> {
        self.rejects.allow(id, &self.faults).await
    }

    fn pod_ips_reachable(&self) -> bool {
        true
    }

    async fn keep_artifacts(&self, dir: &Path) {
        // The components' logs and the audit log, shared with the run's other scenarios;
        // pod logs, events and locks are kept by the step library through the API.
        self.plane
            .control_plane()
            .keep_logs(&dir.join("control-plane"));
        let text = format!(
            "scenario prefix: {}\nThe control plane and its nodes are the run's: its logs hold every scenario's requests.\n",
            self.prefix
        );
        if let Err(e) = crate::report::write(&dir.join("local.txt"), &text) {
            eprintln!("opconform: {}", crate::error_chain(&e));
        }
    }

    async fn teardown(self: Box<Self>) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
        self.undo_in_force();
        self.rejects.remove_all().await;
        delete_labelled(&self.plane.client, SCENARIO_LABEL, &self.prefix).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenarios_fault_log_holds_its_own_faults_and_the_rules_events_since_it_began() {
        let rules = SimRules::default();
        rules.record("defer", "rule 1: an earlier scenario's", "");
        let log = FaultLog::kept_in(Arc::new(ScenarioFaults {
            own: FaultLog::new(),
            rules: rules.clone(),
            from: rules.log().len(),
        }));
        log.record("hold", "pod ns/a", "");
        rules.record("serve", "rule 2: this scenario's", "");
        log.record("release", "pod ns/a", "");
        let seen: Vec<(String, String)> = log
            .events()
            .into_iter()
            .map(|e| (e.verb, e.target))
            .collect();
        assert_eq!(
            seen,
            [
                ("hold".to_string(), "pod ns/a".to_string()),
                ("serve".to_string(), "rule 2: this scenario's".to_string()),
                ("release".to_string(), "pod ns/a".to_string()),
            ]
        );
    }
}

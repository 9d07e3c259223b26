//! The pod garbage collector: force-deletes (grace 0) pods bound to a node that no longer
//! exists once it has been missing for the quarantine time, terminating pods on a node that
//! is out of service (not Ready and tainted `node.kubernetes.io/out-of-service`), and the
//! oldest terminated pods beyond the threshold. Follows upstream's `pkg/controller/podgc`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

use super::informer::{AbortOnDrop, Cache, Change};
use super::queue::Queue;
use super::support::{
    is_conflict, is_deleting, is_not_found, is_terminal, node_ready, now, taints,
};

/// The taint that marks a node as out of service.
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// Settings (see [`super::ControllerConfig`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// How long a node must be missing before its pods go.
    pub(crate) quarantine: Duration,
    /// Terminated pods kept; 0 keeps all.
    pub(crate) terminated_threshold: usize,
}

/// Errors of one collection (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Work {
    /// Pods bound to this node, if it is (still) missing.
    Orphaned(String),
    /// Terminating pods on this node, if it is out of service.
    OutOfService(String),
    /// Terminated pods beyond the threshold.
    Terminated,
}

struct Controller {
    client: Client,
    nodes: Cache<Node>,
    pods: Cache<Pod>,
    settings: Settings,
    queue: Queue<Work>,
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

fn out_of_service(node: &Node) -> bool {
    node_ready(node) != Some("True")
        && taints(node)
            .iter()
            .any(|t| t.key == OUT_OF_SERVICE && t.effect == "NoExecute")
}

/// Subscribes the collector to the shared caches and starts its worker.
pub(crate) fn start(
    client: Client,
    nodes: &Cache<Node>,
    pods: &Cache<Pod>,
    settings: Settings,
) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        client,
        nodes: nodes.clone(),
        pods: pods.clone(),
        settings,
        queue: Queue::new(),
    });
    let c = controller.clone();
    pods.subscribe(move |change| {
        let Change::Applied { new, .. } = change else {
            return;
        };
        if let Some(node) = node_name(new) {
            match c.nodes.get("", node) {
                None => c
                    .queue
                    .add_after(Work::Orphaned(node.to_string()), c.settings.quarantine),
                Some(n) if is_deleting(&new.metadata) && out_of_service(&n) => {
                    c.queue.add(Work::OutOfService(node.to_string()));
                }
                Some(_) => {}
            }
        }
        if is_terminal(new) && c.settings.terminated_threshold > 0 {
            c.queue.add(Work::Terminated);
        }
    });
    let c = controller.clone();
    nodes.subscribe(move |change| {
        let name = change.object().metadata.name.clone().unwrap_or_default();
        match change {
            Change::Deleted(_) => c
                .queue
                .add_after(Work::Orphaned(name), c.settings.quarantine),
            Change::Applied { new, .. } if out_of_service(new) => {
                c.queue.add(Work::OutOfService(name))
            }
            Change::Applied { .. } => {}
        }
    });
    AbortOnDrop::spawn(async move { controller.run().await })
}

impl Controller {
    async fn run(self: Arc<Self>) {
        self.nodes.wait_ready().await;
        self.pods.wait_ready().await;
        loop {
            let work = self.queue.next().await;
            let result = match &work {
                Work::Orphaned(node) => self.orphaned(node).await,
                Work::OutOfService(node) => self.out_of_service(node).await,
                Work::Terminated => self.terminated().await,
            };
            match result {
                Ok(()) => self.queue.forget(&work),
                Err(error) => {
                    tracing::debug!(?work, error = %super::support::error_chain(&error), "pod gc failed; retrying");
                    self.queue.add_rate_limited(work.clone());
                }
            }
            self.queue.done(&work);
        }
    }

    fn pods_on(&self, node: &str) -> Vec<Arc<Pod>> {
        self.pods.filter(|p| node_name(p) == Some(node))
    }

    async fn orphaned(&self, node: &str) -> Result<(), Error> {
        if self.nodes.get("", node).is_some() {
            return Ok(());
        }
        let pods = self.pods_on(node);
        if pods.is_empty() {
            return Ok(());
        }
        // The cache may lag: ask the server before deleting anything.
        let nodes: Api<Node> = Api::all(self.client.clone());
        if nodes.get_opt(node).await?.is_some() {
            return Ok(());
        }
        for pod in pods {
            tracing::info!(pod = %super::informer::name_of(pod.as_ref()), node, "node is gone; force-deleting its pod");
            self.force_delete(&pod, "DeletionByPodGC", "PodGC: node no longer exists")
                .await?;
        }
        Ok(())
    }

    async fn out_of_service(&self, node: &str) -> Result<(), Error> {
        let Some(n) = self.nodes.get("", node) else {
            return Ok(());
        };
        if !out_of_service(&n) {
            return Ok(());
        }
        for pod in self
            .pods_on(node)
            .into_iter()
            .filter(|p| is_deleting(&p.metadata))
        {
            tracing::info!(pod = %super::informer::name_of(pod.as_ref()), node, "node is out of service; force-deleting its terminating pod");
            self.force_delete(&pod, "DeletionByPodGC", "PodGC: node is out of service")
                .await?;
        }
        Ok(())
    }

    async fn terminated(&self) -> Result<(), Error> {
        let threshold = self.settings.terminated_threshold;
        let mut terminated = self.pods.filter(is_terminal);
        if threshold == 0 || terminated.len() <= threshold {
            return Ok(());
        }
        terminated.sort_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
        });
        let excess = terminated.len() - threshold;
        for pod in terminated.into_iter().take(excess) {
            self.force_delete(&pod, "", "").await?;
        }
        Ok(())
    }

    /// Marks the pod Failed with a DisruptionTarget condition (unless already terminal),
    /// then deletes it with grace 0 and a UID precondition.
    async fn force_delete(&self, pod: &Pod, reason: &str, message: &str) -> Result<(), Error> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        if !is_terminal(pod) && !reason.is_empty() {
            let mut updated = pod.clone();
            let status = updated.status.get_or_insert_with(Default::default);
            status.phase = Some("Failed".into());
            let conditions = status.conditions.get_or_insert_with(Vec::new);
            conditions.retain(|c| c.type_ != "DisruptionTarget");
            conditions.push(PodCondition {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
                reason: Some(reason.into()),
                message: Some(message.into()),
                last_transition_time: Some(now()),
                ..PodCondition::default()
            });
            match api
                .replace_status(&name, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if is_conflict(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

//! The taint eviction controller: deletes pods bound to a node with a NoExecute taint they
//! do not tolerate at once, and pods that tolerate it for `tolerationSeconds` when that
//! time has passed since the taint's `timeAdded`. The delete is the normal graceful one:
//! on an unreachable node nobody completes it, so the pod stays Terminating, as in a real
//! cluster. Follows upstream's `pkg/controller/tainteviction`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

use super::informer::{AbortOnDrop, Cache, Change, ObjectKey};
use super::queue::Queue;
use super::support::{
    is_conflict, is_deleting, is_not_found, now, plus_seconds, taints, tolerates, tolerations,
    until,
};

/// Errors of one eviction (the pod is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
}

struct Controller {
    client: Client,
    nodes: Cache<Node>,
    pods: Cache<Pod>,
    queue: Queue<ObjectKey>,
}

fn no_execute(node: &Node) -> Vec<Taint> {
    taints(node)
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .cloned()
        .collect()
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// Subscribes the controller to the shared caches and starts its worker.
pub(crate) fn start(client: Client, nodes: &Cache<Node>, pods: &Cache<Pod>) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        client,
        nodes: nodes.clone(),
        pods: pods.clone(),
        queue: Queue::new(),
    });
    let c = controller.clone();
    nodes.subscribe(move |change| {
        if let Change::Applied { old, new } = change {
            let before = old.as_deref().map(no_execute).unwrap_or_default();
            let after = no_execute(new);
            if before == after {
                return;
            }
            let name = new.metadata.name.clone().unwrap_or_default();
            for pod in c.pods.filter(|p| node_name(p) == Some(name.as_str())) {
                c.queue.add(ObjectKey::of(pod.as_ref()));
            }
        }
    });
    let c = controller.clone();
    pods.subscribe(move |change| {
        if let Change::Applied { old, new } = change {
            let relevant = match old {
                None => true,
                Some(old) => {
                    node_name(old) != node_name(new) || tolerations(old) != tolerations(new)
                }
            };
            if relevant && node_name(new).is_some() {
                c.queue.add(ObjectKey::of(new.as_ref()));
            }
        }
    });
    AbortOnDrop::spawn(async move { controller.run().await })
}

/// When a pod must go, given a node's NoExecute taints: `Some(now)` for an untolerated
/// taint, the earliest `timeAdded + tolerationSeconds` otherwise, `None` when it
/// tolerates them all for ever.
fn eviction_time(pod: &Pod, taints: &[Taint], now: Timestamp) -> Option<Timestamp> {
    let mut earliest: Option<Timestamp> = None;
    for taint in taints {
        let Some(toleration) = tolerations(pod).iter().find(|t| tolerates(t, taint)) else {
            return Some(now);
        };
        let Some(seconds) = toleration.toleration_seconds else {
            continue;
        };
        let added = taint.time_added.as_ref().map_or(now, |t| t.0);
        let at = plus_seconds(&added, seconds.max(0));
        earliest = Some(earliest.map_or(at, |e| e.min(at)));
    }
    earliest
}

impl Controller {
    async fn run(self: Arc<Self>) {
        self.nodes.wait_ready().await;
        self.pods.wait_ready().await;
        loop {
            let key = self.queue.next().await;
            let outcome = self.check(&key).await;
            if let Some(error) = self.queue.settle(&key, outcome) {
                tracing::debug!(pod = %key, error = %super::support::error_chain(&error), "eviction failed; retrying");
            }
        }
    }

    async fn check(&self, key: &ObjectKey) -> Result<Option<Duration>, Error> {
        let Some(pod) = self.pods.get(&key.namespace, &key.name) else {
            return Ok(None);
        };
        if is_deleting(&pod.metadata) {
            return Ok(None);
        }
        let Some(node) = node_name(&pod).and_then(|n| self.nodes.get("", n)) else {
            return Ok(None);
        };
        let taints = no_execute(&node);
        if taints.is_empty() {
            return Ok(None);
        }
        let now = Timestamp::now();
        let Some(at) = eviction_time(&pod, &taints, now) else {
            return Ok(None);
        };
        if at > now {
            // Look again when it is due (a little after, so the time has surely passed).
            return Ok(Some(until(&at) + Duration::from_millis(50)));
        }
        self.evict(&pod).await?;
        Ok(None)
    }

    /// Adds the DisruptionTarget condition, then deletes the pod gracefully.
    async fn evict(&self, pod: &Pod) -> Result<(), Error> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        tracing::info!(pod = %format!("{namespace}/{name}"), node = ?node_name(pod), "evicting pod from a NoExecute-tainted node");
        let mut updated = pod.clone();
        let conditions = updated
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != "DisruptionTarget");
        conditions.push(PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("DeletionByTaintManager".into()),
            message: Some("Taint manager: deleting due to NoExecute taint".into()),
            last_transition_time: Some(now()),
            ..PodCondition::default()
        });
        match api
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(()),
            // The condition is informative; the deletion is what matters.
            Err(e) if is_conflict(&e) => {}
            Err(e) => return Err(e.into()),
        }
        let params = DeleteParams {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(tolerations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [], "tolerations": tolerations}})).unwrap()
    }

    fn taint(added: i64) -> Taint {
        serde_json::from_value(
            json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
            "timeAdded": Timestamp::from_second(added).unwrap().to_string()}),
        )
        .unwrap()
    }

    #[test]
    fn an_untolerated_taint_evicts_at_once() {
        let now = Timestamp::from_second(1_000).unwrap();
        assert_eq!(
            eviction_time(&pod(json!([])), &[taint(990)], now),
            Some(now)
        );
    }

    #[test]
    fn toleration_seconds_count_from_the_taints_time_added() {
        let now = Timestamp::from_second(1_000).unwrap();
        let p = pod(
            json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}]),
        );
        assert_eq!(
            eviction_time(&p, &[taint(999)], now),
            Some(Timestamp::from_second(1_001).unwrap())
        );
    }

    #[test]
    fn a_toleration_without_seconds_tolerates_for_ever() {
        let now = Timestamp::from_second(1_000).unwrap();
        let p = pod(json!([{"operator": "Exists"}]));
        assert_eq!(eviction_time(&p, &[taint(999)], now), None);
    }
}

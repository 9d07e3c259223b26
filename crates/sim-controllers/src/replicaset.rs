//! The ReplicaSet controller: keeps `spec.replicas` active pods per ReplicaSet (pods named
//! `<rs>-<5 random chars>` with a controller reference to it), adopts and releases pods by
//! selector, and reports `status.replicas`, `fullyLabeledReplicas`, `readyReplicas`,
//! `availableReplicas` and `observedGeneration`, following upstream's `replica_set.go`.
//!
//! # Guarantees
//! - Expectations, as upstream: after creating or deleting pods, a ReplicaSet is not
//!   managed again until the watch has shown those changes, so a lagging cache never
//!   makes it create or delete twice.
//! - Scale-down deletes unscheduled pods first, then pending, then not-ready ones, then
//!   pods doubled up on a node, then the most recently ready, then the newest.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

use super::expectations::Expectations;
use super::informer::{AbortOnDrop, Cache, Change, ObjectKey};
use super::queue::Queue;
use super::support::{
    available_at, controller_of, controller_ref, is_active, is_available, is_conflict, is_deleting,
    is_not_found, is_ready, now, phase, pod_condition, selects,
};

/// Most pods created or deleted in one sync (upstream's `BurstReplicas`).
const BURST_REPLICAS: usize = 500;
/// Errors of one ReplicaSet sync (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
    /// Some pods could not be created or deleted.
    #[error("{failed} of {attempted} pod {verb}s failed")]
    Pods {
        /// `create` or `delete`.
        verb: &'static str,
        /// How many failed.
        failed: usize,
        /// How many were attempted.
        attempted: usize,
        /// The first failure.
        #[source]
        first: kube::Error,
    },
}

struct Controller {
    client: Client,
    replicasets: Cache<ReplicaSet>,
    pods: Cache<Pod>,
    queue: Queue<ObjectKey>,
    expectations: Expectations,
}

/// Subscribes the controller to the shared caches and starts its worker.
pub(crate) fn start(
    client: Client,
    replicasets: &Cache<ReplicaSet>,
    pods: &Cache<Pod>,
) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        client,
        replicasets: replicasets.clone(),
        pods: pods.clone(),
        queue: Queue::new(),
        expectations: Expectations::default(),
    });
    let c = controller.clone();
    replicasets.subscribe(move |change| c.queue.add(ObjectKey::of(change.object().as_ref())));
    let c = controller.clone();
    pods.subscribe(move |change| c.pod_changed(change));
    AbortOnDrop::spawn(async move { controller.run().await })
}

fn labels(meta: &ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

/// The spec's replica count (defaulted to 1 by the server).
pub(crate) fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

impl Controller {
    /// The ReplicaSet a controller reference points at, if cached with that UID.
    fn resolve(&self, namespace: &str, meta: &ObjectMeta) -> Option<ObjectKey> {
        let r = controller_of(meta)?;
        if r.kind != "ReplicaSet" || !r.api_version.starts_with("apps/") {
            return None;
        }
        let rs = self.replicasets.get(namespace, &r.name)?;
        (rs.metadata.uid.as_deref() == Some(r.uid.as_str()))
            .then(|| ObjectKey::new(namespace, &r.name))
    }

    /// ReplicaSets in the pod's namespace whose selector matches it (for adoption).
    fn selecting(&self, pod: &Pod) -> Vec<ObjectKey> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let pod_labels = labels(&pod.metadata);
        self.replicasets
            .list_in(namespace)
            .iter()
            .filter(|rs| selects(rs.spec.as_ref().map(|s| &s.selector), &pod_labels))
            .map(|rs| ObjectKey::of(rs.as_ref()))
            .collect()
    }

    fn pod_changed(&self, change: &Change<Pod>) {
        let pod = change.object();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        match change {
            Change::Applied { old: None, new } => {
                if let Some(key) = self.resolve(&namespace, &new.metadata) {
                    self.expectations.creation_observed(&key);
                    if is_deleting(&new.metadata) {
                        self.expectations.deletion_observed(&key, &uid);
                    }
                    self.queue.add(key);
                } else if controller_of(&new.metadata).is_none() {
                    for key in self.selecting(new) {
                        self.queue.add(key);
                    }
                }
            }
            Change::Applied {
                old: Some(old),
                new,
            } => {
                let key = self.resolve(&namespace, &new.metadata);
                let old_key = self.resolve(&namespace, &old.metadata);
                if let Some(key) = &key
                    && is_deleting(&new.metadata)
                {
                    self.expectations.deletion_observed(key, &uid);
                }
                if old_key != key
                    && let Some(old_key) = old_key
                {
                    self.queue.add(old_key);
                }
                match key {
                    Some(key) => self.queue.add(key),
                    None => {
                        if controller_of(&new.metadata).is_none()
                            && (old.metadata.labels != new.metadata.labels
                                || controller_of(&old.metadata).is_some())
                        {
                            for key in self.selecting(new) {
                                self.queue.add(key);
                            }
                        }
                    }
                }
            }
            Change::Deleted(old) => {
                if let Some(key) = self.resolve(&namespace, &old.metadata) {
                    self.expectations.deletion_observed(&key, &uid);
                    self.queue.add(key);
                }
            }
        }
    }

    async fn run(self: Arc<Self>) {
        self.replicasets.wait_ready().await;
        self.pods.wait_ready().await;
        loop {
            let key = self.queue.next().await;
            let outcome = self.sync(&key).await;
            if let Some(error) = self.queue.settle(&key, outcome) {
                tracing::debug!(replicaset = %key, error = %super::support::error_chain(&error), "replicaset sync failed; retrying");
            }
        }
    }

    async fn sync(&self, key: &ObjectKey) -> Result<Option<Duration>, Error> {
        let Some(rs) = self.replicasets.get(&key.namespace, &key.name) else {
            self.expectations.forget(key);
            return Ok(None);
        };
        let satisfied = self.expectations.satisfied(key);
        let active: Vec<Arc<Pod>> = self
            .pods
            .list_in(&key.namespace)
            .into_iter()
            .filter(|p| is_active(p))
            .collect();
        let owned = self.claim(&rs, active).await?;
        let manage = if satisfied && !is_deleting(&rs.metadata) {
            self.manage(key, &rs, &owned).await
        } else {
            Ok(())
        };
        let status = calculate_status(&rs, &owned, manage.as_ref().err());
        self.update_status(&rs, status).await?;
        manage?;
        let min_ready = rs
            .spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0);
        let next_available = owned
            .iter()
            .filter_map(|p| available_at(p, min_ready))
            .filter(|at| *at > Timestamp::now())
            .min();
        Ok(next_available.map(|at| super::support::until(&at) + Duration::from_millis(100)))
    }

    /// Upstream's `ClaimPods`: pods controlled by this ReplicaSet that it still selects,
    /// plus orphans it selects (adopted); controlled pods it no longer selects are released.
    async fn claim(&self, rs: &ReplicaSet, active: Vec<Arc<Pod>>) -> Result<Vec<Arc<Pod>>, Error> {
        let rs_uid = rs.metadata.uid.clone().unwrap_or_default();
        let selector = rs.spec.as_ref().map(|s| &s.selector);
        let mut owned = Vec::new();
        let mut fresh_checked: Option<bool> = None;
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            rs.metadata.namespace.as_deref().unwrap_or_default(),
        );
        for pod in active {
            let matches = selects(selector, &labels(&pod.metadata));
            match controller_of(&pod.metadata) {
                Some(r) if r.uid == rs_uid => {
                    if matches {
                        owned.push(pod);
                    } else if !is_deleting(&rs.metadata) {
                        let refs: Vec<_> = pod
                            .metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .filter(|r| r.uid != rs_uid)
                            .collect();
                        let patch = json!({"metadata": {
                            "ownerReferences": if refs.is_empty() { serde_json::Value::Null } else { json!(refs) },
                            "resourceVersion": pod.metadata.resource_version,
                            "uid": pod.metadata.uid,
                        }});
                        match api
                            .patch(
                                pod.metadata.name.as_deref().unwrap_or_default(),
                                &PatchParams::default(),
                                &Patch::Merge(patch),
                            )
                            .await
                        {
                            Ok(_) => {}
                            Err(e) if is_not_found(&e) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                None if matches && !is_deleting(&rs.metadata) => {
                    // Adopt, after checking with a live read that the owner is not going.
                    let can_adopt = match fresh_checked {
                        Some(ok) => ok,
                        None => {
                            let rs_api: Api<ReplicaSet> = Api::namespaced(
                                self.client.clone(),
                                rs.metadata.namespace.as_deref().unwrap_or_default(),
                            );
                            let fresh = rs_api
                                .get_opt(rs.metadata.name.as_deref().unwrap_or_default())
                                .await?;
                            let ok = fresh.is_some_and(|f| {
                                f.metadata.uid == rs.metadata.uid && !is_deleting(&f.metadata)
                            });
                            fresh_checked = Some(ok);
                            ok
                        }
                    };
                    if !can_adopt {
                        continue;
                    }
                    let mut refs: Vec<_> =
                        pod.metadata.owner_references.clone().unwrap_or_default();
                    refs.push(controller_ref("apps/v1", "ReplicaSet", &rs.metadata));
                    let patch = json!({"metadata": {
                        "ownerReferences": refs,
                        "resourceVersion": pod.metadata.resource_version,
                        "uid": pod.metadata.uid,
                    }});
                    match api
                        .patch(
                            pod.metadata.name.as_deref().unwrap_or_default(),
                            &PatchParams::default(),
                            &Patch::Merge(patch),
                        )
                        .await
                    {
                        Ok(adopted) => owned.push(Arc::new(adopted)),
                        Err(e) if is_not_found(&e) || is_conflict(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                _ => {}
            }
        }
        Ok(owned)
    }

    /// Creates or deletes pods so that `spec.replicas` are active.
    async fn manage(
        &self,
        key: &ObjectKey,
        rs: &ReplicaSet,
        owned: &[Arc<Pod>],
    ) -> Result<(), Error> {
        let wanted = usize::try_from(spec_replicas(rs)).unwrap_or(0);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
        if owned.len() < wanted {
            let count = (wanted - owned.len()).min(BURST_REPLICAS);
            self.expectations.expect(
                key,
                i64::try_from(count).unwrap_or(i64::MAX),
                HashSet::new(),
            );
            let pod = pod_from_template(rs);
            let params = PostParams::default();
            // Slow start: batches of 1, 2, 4, … stop at the first batch with a failure.
            let mut created = 0;
            let mut batch = 1;
            let mut failure: Option<(usize, kube::Error)> = None;
            while created < count {
                let size = batch.min(count - created);
                let results = join_all((0..size).map(|_| api.create(&params, &pod))).await;
                let mut failed = 0;
                for result in results {
                    if let Err(e) = result {
                        failed += 1;
                        self.expectations.creation_observed(key);
                        if failure.is_none() {
                            failure = Some((0, e));
                        }
                    }
                }
                created += size;
                if failed > 0 {
                    if let Some((n, _)) = failure.as_mut() {
                        *n += failed;
                    }
                    break;
                }
                batch *= 2;
            }
            for _ in created..count {
                self.expectations.creation_observed(key);
            }
            if let Some((failed, first)) = failure {
                return Err(Error::Pods {
                    verb: "create",
                    failed,
                    attempted: created,
                    first,
                });
            }
            tracing::debug!(replicaset = %key, count, "created pods");
        } else if owned.len() > wanted {
            let count = (owned.len() - wanted).min(BURST_REPLICAS);
            let related = self.related_pods(rs);
            let victims = pods_to_delete(owned, &related, count);
            let uids: HashSet<String> = victims
                .iter()
                .filter_map(|p| p.metadata.uid.clone())
                .collect();
            self.expectations.expect(key, 0, uids);
            let results = join_all(victims.iter().map(|pod| {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: pod.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                let api = api.clone();
                let name = pod.metadata.name.clone().unwrap_or_default();
                async move { api.delete(&name, &params).await }
            }))
            .await;
            let mut failure: Option<(usize, kube::Error)> = None;
            for (pod, result) in victims.iter().zip(results) {
                match result {
                    Ok(_) => {}
                    Err(e) => {
                        self.expectations.deletion_observed(
                            key,
                            pod.metadata.uid.as_deref().unwrap_or_default(),
                        );
                        if !is_not_found(&e) {
                            match failure.as_mut() {
                                Some((n, _)) => *n += 1,
                                None => failure = Some((1, e)),
                            }
                        }
                    }
                }
            }
            if let Some((failed, first)) = failure {
                return Err(Error::Pods {
                    verb: "delete",
                    failed,
                    attempted: count,
                    first,
                });
            }
            tracing::debug!(replicaset = %key, count, "deleted pods");
        }
        Ok(())
    }

    /// Active pods of this ReplicaSet and of its siblings (same controller), for ranking
    /// pods doubled up on a node.
    fn related_pods(&self, rs: &ReplicaSet) -> Vec<Arc<Pod>> {
        let namespace = rs.metadata.namespace.as_deref().unwrap_or_default();
        let mut uids: HashSet<String> = rs.metadata.uid.iter().cloned().collect();
        if let Some(owner) = controller_of(&rs.metadata) {
            for sibling in self.replicasets.list_in(namespace) {
                if controller_of(&sibling.metadata).is_some_and(|r| r.uid == owner.uid)
                    && let Some(uid) = &sibling.metadata.uid
                {
                    uids.insert(uid.clone());
                }
            }
        }
        self.pods
            .list_in(namespace)
            .into_iter()
            .filter(|p| {
                is_active(p) && controller_of(&p.metadata).is_some_and(|r| uids.contains(&r.uid))
            })
            .collect()
    }

    async fn update_status(&self, rs: &ReplicaSet, status: ReplicaSetStatus) -> Result<(), Error> {
        let generation = rs.metadata.generation;
        let mut status = status;
        status.observed_generation = generation;
        if rs.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let api: Api<ReplicaSet> = Api::namespaced(
            self.client.clone(),
            rs.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let name = rs.metadata.name.clone().unwrap_or_default();
        let mut updated = rs.clone();
        updated.status = Some(status.clone());
        match api
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) if is_conflict(&e) => {
                // One retry on a fresh copy, as upstream does.
                let Some(mut fresh) = api.get_opt(&name).await? else {
                    return Ok(());
                };
                if fresh.metadata.uid != rs.metadata.uid {
                    return Ok(());
                }
                status.observed_generation = fresh.metadata.generation;
                fresh.status = Some(status);
                api.replace_status(&name, &PostParams::default(), &fresh)
                    .await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// A pod for a ReplicaSet (upstream's `GetPodFromTemplate`).
fn pod_from_template(rs: &ReplicaSet) -> Pod {
    let template = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!(
                "{}-",
                rs.metadata.name.as_deref().unwrap_or_default()
            )),
            namespace: rs.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![controller_ref("apps/v1", "ReplicaSet", &rs.metadata)]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    }
}

fn max_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0))
        .unwrap_or(0)
}

fn phase_rank(pod: &Pod) -> u8 {
    match phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    }
}

fn deletion_cost(pod: &Pod) -> i64 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("controller.kubernetes.io/pod-deletion-cost"))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The `count` pods to delete first (upstream's `ActivePodsWithRanks` order).
fn pods_to_delete(owned: &[Arc<Pod>], related: &[Arc<Pod>], count: usize) -> Vec<Arc<Pod>> {
    let node_of = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for p in related {
        let node = node_of(p);
        if !node.is_empty() {
            *per_node.entry(node).or_default() += 1;
        }
    }
    let ready_since = |p: &Pod| {
        pod_condition(p, "Ready")
            .filter(|c| c.status == "True")
            .and_then(|c| c.last_transition_time.clone())
    };
    let mut ranked: Vec<Arc<Pod>> = owned.to_vec();
    ranked.sort_by(|a, b| {
        let assigned = |p: &Pod| !node_of(p).is_empty();
        let rank = |p: &Pod| per_node.get(&node_of(p)).copied().unwrap_or(0);
        assigned(a)
            .cmp(&assigned(b))
            .then(phase_rank(a).cmp(&phase_rank(b)))
            .then(is_ready(a).cmp(&is_ready(b)))
            .then(deletion_cost(a).cmp(&deletion_cost(b)))
            .then(rank(b).cmp(&rank(a)))
            // Ready for less time first: the later transition first.
            .then(ready_since(b).cmp(&ready_since(a)))
            .then(max_restarts(b).cmp(&max_restarts(a)))
            // Newer first.
            .then(
                b.metadata
                    .creation_timestamp
                    .cmp(&a.metadata.creation_timestamp),
            )
            .then(b.metadata.name.cmp(&a.metadata.name))
    });
    ranked.truncate(count);
    ranked
}

/// Upstream's `calculateStatus` (observedGeneration is set by the caller).
fn calculate_status(
    rs: &ReplicaSet,
    owned: &[Arc<Pod>],
    manage_error: Option<&Error>,
) -> ReplicaSetStatus {
    let mut status = rs.status.clone().unwrap_or_default();
    let template_labels = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let min_ready = rs
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0);
    let now_ts = Timestamp::now();
    let mut fully_labeled = 0;
    let mut ready = 0;
    let mut available = 0;
    for pod in owned {
        let pod_labels = labels(&pod.metadata);
        if template_labels
            .iter()
            .all(|(k, v)| pod_labels.get(k) == Some(v))
        {
            fully_labeled += 1;
        }
        if is_ready(pod) {
            ready += 1;
            if is_available(pod, min_ready, &now_ts) {
                available += 1;
            }
        }
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let has_failure = conditions.iter().any(|c| c.type_ == "ReplicaFailure");
    match manage_error {
        Some(error) if !has_failure => {
            let wanted = spec_replicas(rs);
            let reason = if (owned.len() as i64) < i64::from(wanted) {
                "FailedCreate"
            } else {
                "FailedDelete"
            };
            conditions.push(ReplicaSetCondition {
                type_: "ReplicaFailure".into(),
                status: "True".into(),
                reason: Some(reason.into()),
                message: Some(super::support::error_chain(error)),
                last_transition_time: Some(now()),
            });
        }
        None if has_failure => conditions.retain(|c| c.type_ != "ReplicaFailure"),
        _ => {}
    }
    if conditions.is_empty() {
        status.conditions = None;
    }
    let nz = |n: i32| (n != 0).then_some(n);
    status.replicas = i32::try_from(owned.len()).unwrap_or(i32::MAX);
    status.fully_labeled_replicas = nz(fully_labeled);
    status.ready_replicas = nz(ready);
    status.available_replicas = nz(available);
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(
        name: &str,
        node: Option<&str>,
        phase: &str,
        ready: Option<&str>,
        created: &str,
    ) -> Arc<Pod> {
        let mut conditions = vec![];
        if let Some(since) = ready {
            conditions
                .push(json!({"type": "Ready", "status": "True", "lastTransitionTime": since}));
        }
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "creationTimestamp": created},
                "spec": {"containers": [{"name": "c", "image": "i"}], "nodeName": node},
                "status": {"phase": phase, "conditions": conditions},
            }))
            .unwrap(),
        )
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn scale_down_takes_unscheduled_then_not_ready_then_the_newest() {
        let pods = vec![
            pod(
                "old-ready",
                Some("n1"),
                "Running",
                Some("2024-01-01T00:00:10Z"),
                "2024-01-01T00:00:00Z",
            ),
            pod(
                "new-ready",
                Some("n2"),
                "Running",
                Some("2024-01-01T00:00:10Z"),
                "2024-01-01T00:00:05Z",
            ),
            pod(
                "not-ready",
                Some("n3"),
                "Running",
                None,
                "2024-01-01T00:00:00Z",
            ),
            pod("unscheduled", None, "Pending", None, "2024-01-01T00:00:00Z"),
        ];
        assert_eq!(
            names(&pods_to_delete(&pods, &pods, 3)),
            vec!["unscheduled", "not-ready", "new-ready"]
        );
    }

    #[test]
    fn a_pod_doubled_up_on_a_node_goes_before_a_lone_one() {
        let pods = vec![
            pod(
                "alone",
                Some("n1"),
                "Running",
                Some("2024-01-01T00:00:10Z"),
                "2024-01-01T00:00:05Z",
            ),
            pod(
                "pair-a",
                Some("n2"),
                "Running",
                Some("2024-01-01T00:00:10Z"),
                "2024-01-01T00:00:00Z",
            ),
            pod(
                "pair-b",
                Some("n2"),
                "Running",
                Some("2024-01-01T00:00:10Z"),
                "2024-01-01T00:00:01Z",
            ),
        ];
        assert_eq!(names(&pods_to_delete(&pods, &pods, 1)), vec!["pair-b"]);
    }
}

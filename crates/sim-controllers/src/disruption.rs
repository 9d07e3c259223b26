//! The disruption controller: writes the status of every PodDisruptionBudget as
//! kube-controller-manager does — the pods its selector picks (`expectedPods`), the Ready
//! ones not being deleted nor recently evicted (`currentHealthy`), how many must stay
//! (`desiredHealthy`), the difference (`disruptionsAllowed`), the evictions still awaited
//! (`disruptedPods`, each kept two minutes, then forgotten with a `NotDeleted` Warning
//! Event on the pod), `observedGeneration` and the
//! `DisruptionAllowed` condition (`SufficientPods`, `InsufficientPods`, or `SyncFailed` with
//! the error when the count cannot be made). Follows upstream's
//! `pkg/controller/disruption`.
//!
//! `minAvailable` as an integer counts the selected pods; a percentage, and
//! `maxUnavailable` either way, count the scale of the pods' controllers (ReplicationControllers,
//! Deployments through their ReplicaSets, ReplicaSets, StatefulSets), rounded up.
//!
//! # Caveats
//! - Controllers of other kinds that have a `scale` subresource (custom resources) are not
//!   looked up: their pods fail the sync (`found no controllers for pod …`).
//! - The stale `DisruptionTarget` conditions of pods that were not deleted after all are not
//!   reset.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, OwnerReference, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};

use super::deployment::scaled_value;
use super::events::{EventType, Recorder};
use super::informer::{AbortOnDrop, Cache, ObjectKey};
use super::queue::Queue;
use super::support::{controller_of, is_deleting, is_not_found, is_ready, now, selects, until};

/// How long an eviction's pod is not counted healthy while its deletion is awaited
/// (`DeletionTimeout`).
const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);

/// Errors of one budget's sync (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
}

/// Why the pods cannot be counted; written into the `SyncFailed` condition as kube's
/// error text.
#[derive(Debug, thiserror::Error, PartialEq)]
enum CountError {
    #[error("found no controllers for pod {0:?}")]
    NoController(String),
    #[error("invalid value for IntOrString: invalid value {0:?}")]
    Invalid(String),
}

/// The listers the controller reads.
#[derive(Clone)]
pub(crate) struct Listers {
    pub(crate) budgets: Cache<PodDisruptionBudget>,
    pub(crate) pods: Cache<Pod>,
    pub(crate) replication_controllers: Cache<ReplicationController>,
    pub(crate) replicasets: Cache<ReplicaSet>,
    pub(crate) deployments: Cache<Deployment>,
    pub(crate) statefulsets: Cache<StatefulSet>,
}

struct Controller {
    client: Client,
    listers: Listers,
    queue: Queue<ObjectKey>,
    recorder: Recorder,
}

/// Whether a budget's selector picks `labels`: a missing selector picks nothing, an empty
/// one every pod of the namespace (`metav1.LabelSelectorAsSelector`).
fn picks(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    match selector {
        None => false,
        Some(s)
            if s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                && s.match_expressions.as_deref().is_none_or(<[_]>::is_empty) =>
        {
            true
        }
        Some(s) => selects(Some(s), labels),
    }
}

fn labels(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata.labels.clone().unwrap_or_default()
}

/// Subscribes the controller to the caches and starts its worker.
pub(crate) fn start(client: Client, listers: Listers) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        // Upstream's disruption controller records as `controllermanager`.
        recorder: Recorder::new(client.clone(), "controllermanager"),
        client,
        listers: listers.clone(),
        queue: Queue::new(),
    });
    let c = controller.clone();
    listers.budgets.subscribe(move |change| {
        c.queue.add(ObjectKey::of(change.object().as_ref()));
    });
    let c = controller.clone();
    listers.pods.subscribe(move |change| {
        let pod = change.object();
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let labels = labels(pod);
        for budget in c.listers.budgets.list_in(namespace) {
            let selector = budget.spec.as_ref().and_then(|s| s.selector.as_ref());
            if picks(selector, &labels) {
                c.queue.add(ObjectKey::of(budget.as_ref()));
            }
        }
    });
    AbortOnDrop::spawn(async move { controller.run().await })
}

/// A budget's counts: `(expectedPods, desiredHealthy)`.
fn expected_and_desired(
    budget: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    scale: impl Fn(&[Arc<Pod>]) -> Result<i32, CountError>,
) -> Result<(i32, i32), CountError> {
    let spec = budget.spec.clone().unwrap_or_default();
    let scaled = |value: &IntOrString, total: i32| {
        scaled_value(value, total, true).ok_or_else(|| match value {
            IntOrString::String(s) => CountError::Invalid(s.clone()),
            IntOrString::Int(n) => CountError::Invalid(n.to_string()),
        })
    };
    if let Some(max_unavailable) = &spec.max_unavailable {
        let expected = scale(pods)?;
        let desired = (expected - scaled(max_unavailable, expected)?).max(0);
        Ok((expected, desired))
    } else if let Some(min_available) = &spec.min_available {
        match min_available {
            IntOrString::Int(n) => Ok((i32::try_from(pods.len()).unwrap_or(i32::MAX), *n)),
            IntOrString::String(_) => {
                let expected = scale(pods)?;
                Ok((expected, scaled(min_available, expected)?))
            }
        }
    } else {
        Ok((0, 0))
    }
}

/// Whether an owner reference names `kind` in one of `groups`.
fn names(reference: &OwnerReference, kind: &str, groups: &[&str]) -> bool {
    let group = reference
        .api_version
        .rsplit_once('/')
        .map_or("", |(group, _)| group);
    reference.kind == kind && groups.contains(&group)
}

impl Controller {
    async fn run(self: Arc<Self>) {
        let l = &self.listers;
        l.budgets.wait_ready().await;
        l.pods.wait_ready().await;
        l.replication_controllers.wait_ready().await;
        l.replicasets.wait_ready().await;
        l.deployments.wait_ready().await;
        l.statefulsets.wait_ready().await;
        loop {
            let key = self.queue.next().await;
            let outcome = self.sync(&key).await;
            if let Some(error) = self.queue.settle(&key, outcome) {
                tracing::debug!(budget = %key, error = %super::support::error_chain(&error), "disruption budget sync failed; retrying");
            }
        }
    }

    /// The scale of one pod's controller: its uid and replicas, if it is one of the kinds
    /// looked up and still the pod's controller.
    fn controller_scale(
        &self,
        namespace: &str,
        reference: &OwnerReference,
    ) -> Option<(String, i32)> {
        let l = &self.listers;
        let same = |uid: &Option<String>| uid.as_deref() == Some(reference.uid.as_str());
        if names(reference, "ReplicationController", &[""]) {
            let rc = l.replication_controllers.get(namespace, &reference.name)?;
            same(&rc.metadata.uid).then_some(())?;
            let replicas = rc.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            return Some((reference.uid.clone(), replicas));
        }
        if names(reference, "ReplicaSet", &["apps", "extensions"]) {
            let rs = l.replicasets.get(namespace, &reference.name)?;
            same(&rs.metadata.uid).then_some(())?;
            match controller_of(&rs.metadata) {
                Some(owner) if owner.kind == "Deployment" => {
                    if !names(owner, "Deployment", &["apps", "extensions"]) {
                        return None;
                    }
                    let deployment = l.deployments.get(namespace, &owner.name)?;
                    (deployment.metadata.uid.as_deref() == Some(owner.uid.as_str()))
                        .then_some(())?;
                    let replicas = deployment
                        .spec
                        .as_ref()
                        .and_then(|s| s.replicas)
                        .unwrap_or(1);
                    return Some((owner.uid.clone(), replicas));
                }
                _ => {
                    let replicas = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    return Some((reference.uid.clone(), replicas));
                }
            }
        }
        if names(reference, "StatefulSet", &["apps"]) {
            let set = l.statefulsets.get(namespace, &reference.name)?;
            same(&set.metadata.uid).then_some(())?;
            let replicas = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            return Some((reference.uid.clone(), replicas));
        }
        None
    }

    /// The summed scale of the pods' controllers (`getExpectedScale`).
    fn expected_scale(&self, pods: &[Arc<Pod>]) -> Result<i32, CountError> {
        let mut scales: HashMap<String, i32> = HashMap::new();
        for pod in pods {
            // Pods without a controller count for nothing here.
            let Some(reference) = controller_of(&pod.metadata) else {
                continue;
            };
            if scales.contains_key(&reference.uid) {
                continue;
            }
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            let (uid, scale) = self.controller_scale(namespace, reference).ok_or_else(|| {
                CountError::NoController(pod.metadata.name.clone().unwrap_or_default())
            })?;
            scales.insert(uid, scale);
        }
        Ok(scales.values().sum())
    }

    async fn sync(&self, key: &ObjectKey) -> Result<Option<Duration>, Error> {
        let Some(budget) = self.listers.budgets.get(&key.namespace, &key.name) else {
            return Ok(None);
        };
        let selector = budget.spec.as_ref().and_then(|s| s.selector.as_ref());
        let pods = self.listers.pods.filter(|p| {
            p.metadata.namespace.as_deref() == Some(&key.namespace) && picks(selector, &labels(p))
        });
        let counts = expected_and_desired(&budget, &pods, |pods| self.expected_scale(pods));
        let (expected, desired) = match counts {
            Ok(counts) => counts,
            Err(error) => return self.fail_safe(&budget, &error).await.map(|()| None),
        };
        let now_ts = Timestamp::now();
        let (disrupted, recheck, overdue) = awaited_evictions(&budget, &pods, now_ts);
        for pod in overdue {
            // Upstream names the budget's namespace twice.
            let message = format!(
                "Pod was expected by PDB {0}/{0} to be deleted but it wasn't",
                key.namespace
            );
            self.recorder.record(
                "v1",
                "Pod",
                &pod.metadata,
                EventType::Warning,
                "NotDeleted",
                &message,
            );
        }
        let healthy = pods
            .iter()
            .filter(|p| {
                !is_deleting(&p.metadata)
                    && !p
                        .metadata
                        .name
                        .as_ref()
                        .is_some_and(|n| disrupted.contains_key(n))
                    && is_ready(p)
            })
            .count();
        let healthy = i32::try_from(healthy).unwrap_or(i32::MAX);
        let allowed = if expected <= 0 {
            0
        } else {
            (healthy - desired).max(0)
        };
        let generation = budget.metadata.generation.unwrap_or_default();
        let old = budget.status.clone().unwrap_or_default();
        let disrupted = (!disrupted.is_empty()).then_some(disrupted);
        let condition_current = condition_up_to_date(&old, generation);
        if old.current_healthy == healthy
            && old.desired_healthy == desired
            && old.expected_pods == expected
            && old.disruptions_allowed == allowed
            && old.disrupted_pods.clone().filter(|m| !m.is_empty()) == disrupted
            && old.observed_generation == Some(generation)
            && condition_current
        {
            return Ok(recheck);
        }
        let mut status = PodDisruptionBudgetStatus {
            current_healthy: healthy,
            desired_healthy: desired,
            expected_pods: expected,
            disruptions_allowed: allowed,
            disrupted_pods: disrupted,
            observed_generation: Some(generation),
            conditions: old.conditions.clone(),
        };
        let (state, reason) = if allowed > 0 {
            ("True", "SufficientPods")
        } else {
            ("False", "InsufficientPods")
        };
        set_condition(&mut status, state, reason, "", generation);
        self.write_status(&budget, status).await?;
        Ok(recheck)
    }

    /// `failSafe`: no disruption allowed, and the reason in the condition.
    async fn fail_safe(
        &self,
        budget: &PodDisruptionBudget,
        error: &CountError,
    ) -> Result<(), Error> {
        let mut status = budget.status.clone().unwrap_or_default();
        status.disruptions_allowed = 0;
        let generation = status.observed_generation.unwrap_or_default();
        set_condition(
            &mut status,
            "False",
            "SyncFailed",
            &error.to_string(),
            generation,
        );
        self.write_status(budget, status).await
    }

    async fn write_status(
        &self,
        budget: &PodDisruptionBudget,
        status: PodDisruptionBudgetStatus,
    ) -> Result<(), Error> {
        let mut updated = budget.clone();
        updated.status = Some(status);
        let namespace = budget.metadata.namespace.clone().unwrap_or_default();
        let name = budget.metadata.name.clone().unwrap_or_default();
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), &namespace);
        match api
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The evictions still awaited among `pods` (each for [`DELETION_TIMEOUT`] after it was
/// granted), when the first of them runs out, and the pods whose eviction ran out without
/// their deletion (`buildDisruptedPodMap`).
fn awaited_evictions(
    budget: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    now: Timestamp,
) -> (BTreeMap<String, Time>, Option<Duration>, Vec<Arc<Pod>>) {
    let mut kept = BTreeMap::new();
    let mut overdue = Vec::new();
    let mut first: Option<Timestamp> = None;
    let recorded = budget
        .status
        .as_ref()
        .and_then(|s| s.disrupted_pods.clone())
        .unwrap_or_default();
    for pod in pods {
        if is_deleting(&pod.metadata) {
            continue;
        }
        let Some(name) = pod.metadata.name.as_ref() else {
            continue;
        };
        let Some(at) = recorded.get(name) else {
            continue;
        };
        let expires = at.0.checked_add(DELETION_TIMEOUT).unwrap_or(at.0);
        if expires < now {
            overdue.push(pod.clone());
        } else {
            first = Some(first.map_or(expires, |f| f.min(expires)));
            kept.insert(name.clone(), at.clone());
        }
    }
    (kept, first.map(|f| until(&f)), overdue)
}

/// Whether the `DisruptionAllowed` condition matches the allowed count
/// (`ConditionsAreUpToDate`).
fn condition_up_to_date(status: &PodDisruptionBudgetStatus, generation: i64) -> bool {
    let Some(condition) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionAllowed")
    else {
        return false;
    };
    if status.observed_generation != Some(generation) {
        return false;
    }
    if status.disruptions_allowed > 0 {
        condition.status == "True" && condition.reason == "SufficientPods"
    } else {
        condition.status == "False" && condition.reason == "InsufficientPods"
    }
}

/// `meta.SetStatusCondition` of `DisruptionAllowed`: the transition time moves only when
/// the status changes.
fn set_condition(
    status: &mut PodDisruptionBudgetStatus,
    state: &str,
    reason: &str,
    message: &str,
    generation: i64,
) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let fresh = Condition {
        type_: "DisruptionAllowed".into(),
        status: state.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(generation),
        last_transition_time: now(),
    };
    match conditions
        .iter_mut()
        .find(|c| c.type_ == "DisruptionAllowed")
    {
        Some(existing) => {
            if existing.status != fresh.status {
                existing.status = fresh.status;
                existing.last_transition_time = fresh.last_transition_time;
            }
            existing.reason = fresh.reason;
            existing.message = fresh.message;
            existing.observed_generation = fresh.observed_generation;
        }
        None => conditions.push(fresh),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn budget(spec: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({"metadata": {"name": "b"}, "spec": spec})).unwrap()
    }

    fn pods(n: usize) -> Vec<Arc<Pod>> {
        (0..n)
            .map(|i| {
                Arc::new(
                    serde_json::from_value(json!({"metadata": {"name": format!("p{i}")}})).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn an_integer_min_available_counts_the_selected_pods() {
        let counts = expected_and_desired(&budget(json!({"minAvailable": 2})), &pods(3), |_| {
            panic!("no scale is needed")
        });
        assert_eq!(counts, Ok((3, 2)));
    }

    #[test]
    fn percentages_and_max_unavailable_count_the_controllers_scale_rounded_up() {
        let four = |_: &[Arc<Pod>]| Ok(4);
        assert_eq!(
            expected_and_desired(&budget(json!({"minAvailable": "50%"})), &pods(1), four),
            Ok((4, 2))
        );
        assert_eq!(
            expected_and_desired(&budget(json!({"maxUnavailable": "30%"})), &pods(1), four),
            Ok((4, 2))
        );
        assert_eq!(
            expected_and_desired(&budget(json!({"maxUnavailable": 9})), &pods(1), four),
            Ok((4, 0))
        );
    }

    #[test]
    fn an_eviction_is_awaited_two_minutes_then_reported_overdue() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let budget: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "b"},
            "status": {"disruptedPods": {"p0": "2026-01-01T00:09:00Z", "p1": "2026-01-01T00:07:00Z"},
                       "currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0,
                       "expectedPods": 0}}))
        .unwrap();
        let (kept, recheck, overdue) = awaited_evictions(&budget, &pods(2), now);
        assert_eq!(kept.keys().collect::<Vec<_>>(), vec!["p0"]);
        assert!(recheck.is_some());
        let overdue: Vec<_> = overdue.iter().map(|p| p.metadata.name.clone()).collect();
        assert_eq!(overdue, vec![Some("p1".to_string())]);
    }

    #[test]
    fn an_empty_selector_picks_every_pod_and_a_missing_one_none() {
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        assert!(picks(Some(&LabelSelector::default()), &labels));
        assert!(!picks(None, &labels));
    }
}

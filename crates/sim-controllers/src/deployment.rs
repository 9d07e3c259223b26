//! The Deployment controller: a ReplicaSet per pod-template hash (`<deploy>-<hash>`,
//! label `pod-template-hash`, controller reference to the Deployment), proportional
//! scaling, RollingUpdate (maxSurge rounded up, maxUnavailable rounded down) and Recreate,
//! the `deployment.kubernetes.io/revision` annotation, revisionHistoryLimit cleanup, and
//! the status fields and conditions `kubectl rollout status` and `kubectl wait
//! --for=condition=Available` read. It follows upstream's `pkg/controller/deployment`
//! (`sync.go`, `rolling.go`, `recreate.go`, `progress.go`, `util/deployment_util.go`).
//!
//! # Guarantees
//! Beyond upstream, which reads ReplicaSet statuses that may lag their specs:
//! - a new ReplicaSet is scaled up only while the pods that may still exist (per
//!   ReplicaSet the larger of `spec.replicas` and `status.replicas`) stay within
//!   `replicas + maxSurge`;
//! - old ReplicaSets are scaled down counting per ReplicaSet at most `spec.replicas`
//!   available pods, so a status that still counts pods being deleted never lets the
//!   availability fall below `replicas - maxUnavailable`.
//!
//! # Caveats
//! - No rollback annotation (`deprecated.deployment.rollback.to`), no Events.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec,
};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::informer::{AbortOnDrop, Cache, Change, ObjectKey};
use super::queue::Queue;
use super::replicaset::spec_replicas;
use super::support::{
    canonical_json, controller_of, controller_ref, fnv32a, is_conflict, is_deleting, is_not_found,
    is_terminal, now, safe_encode, seconds_between, selects, without_nulls,
};

/// The revision of a ReplicaSet, copied to its Deployment.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// Earlier revisions a ReplicaSet had (after rollbacks).
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's replicas when a ReplicaSet was last scaled.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// The Deployment's replicas + maxSurge when a ReplicaSet was last scaled.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// The label with the pod-template hash.
pub const HASH_LABEL: &str = "pod-template-hash";

const REVISION_HISTORY_CHARS: usize = 2000;

const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
const RS_UPDATED: &str = "ReplicaSetUpdated";
const TIMED_OUT: &str = "ProgressDeadlineExceeded";
const FAILED_RS_CREATE: &str = "ReplicaSetCreateError";
const PAUSED: &str = "DeploymentPaused";
const RESUMED: &str = "DeploymentResumed";
const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

/// Errors of one Deployment sync (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
    /// The ReplicaSet name of the template hash is taken by another ReplicaSet; the
    /// collision count was raised and the next sync uses a new hash.
    #[error("replicaset {name} exists with another template (hash collision)")]
    HashCollision {
        /// The ReplicaSet name.
        name: String,
    },
}

struct Controller {
    client: Client,
    deployments: Cache<Deployment>,
    replicasets: Cache<ReplicaSet>,
    pods: Cache<Pod>,
    queue: Queue<ObjectKey>,
}

/// Subscribes the controller to the shared caches and starts its worker.
pub(crate) fn start(
    client: Client,
    deployments: &Cache<Deployment>,
    replicasets: &Cache<ReplicaSet>,
    pods: &Cache<Pod>,
) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        client,
        deployments: deployments.clone(),
        replicasets: replicasets.clone(),
        pods: pods.clone(),
        queue: Queue::new(),
    });
    let c = controller.clone();
    deployments.subscribe(move |change| c.queue.add(ObjectKey::of(change.object().as_ref())));
    let c = controller.clone();
    replicasets.subscribe(move |change| c.replicaset_changed(change));
    let c = controller.clone();
    pods.subscribe(move |change| c.pod_changed(change));
    AbortOnDrop::spawn(async move { controller.run().await })
}

// ---------------------------------------------------------------------------------------
// Pure helpers (upstream's deployment_util.go).

fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn spec(d: &Deployment) -> DeploymentSpecView<'_> {
    DeploymentSpecView(d)
}

/// Read access to the parts of a Deployment's spec the controller uses.
struct DeploymentSpecView<'a>(&'a Deployment);

impl DeploymentSpecView<'_> {
    fn selector(&self) -> Option<&LabelSelector> {
        self.0.spec.as_ref().map(|s| &s.selector)
    }

    fn template(&self) -> PodTemplateSpec {
        self.0
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default()
    }

    fn is_recreate(&self) -> bool {
        self.strategy_type() == "Recreate"
    }

    fn strategy_type(&self) -> &str {
        self.0
            .spec
            .as_ref()
            .and_then(|s| s.strategy.as_ref())
            .and_then(|s| s.type_.as_deref())
            .unwrap_or("RollingUpdate")
    }

    fn is_rolling(&self) -> bool {
        self.strategy_type() == "RollingUpdate"
    }

    fn rolling(&self) -> (Option<IntOrString>, Option<IntOrString>) {
        let ru = self
            .0
            .spec
            .as_ref()
            .and_then(|s| s.strategy.as_ref())
            .and_then(|s| s.rolling_update.as_ref());
        (
            ru.and_then(|r| r.max_surge.clone()),
            ru.and_then(|r| r.max_unavailable.clone()),
        )
    }

    fn paused(&self) -> bool {
        self.0.spec.as_ref().and_then(|s| s.paused).unwrap_or(false)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.0
            .spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }

    /// `progressDeadlineSeconds`, unless unset or MaxInt32 (no deadline).
    fn progress_deadline(&self) -> Option<i32> {
        self.0
            .spec
            .as_ref()
            .and_then(|s| s.progress_deadline_seconds)
            .filter(|s| *s != i32::MAX)
    }

    /// `revisionHistoryLimit`, unless unset or MaxInt32 (keep all).
    fn revision_history_limit(&self) -> Option<i32> {
        self.0
            .spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .filter(|s| *s != i32::MAX)
    }
}

/// `intstr.GetScaledValueFromIntOrPercent`: an int as is, `"N%"` of `total` rounded up or
/// down; `None` for anything else.
pub(crate) fn scaled_value(value: &IntOrString, total: i32, round_up: bool) -> Option<i32> {
    match value {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(s) => {
            let percent: i64 = s.strip_suffix('%')?.parse().ok()?;
            let product = percent * i64::from(total);
            let scaled = if round_up {
                (product + 99).div_euclid(100)
            } else {
                product.div_euclid(100)
            };
            i32::try_from(scaled).ok()
        }
    }
}

/// `ResolveFenceposts`: maxSurge rounded up, maxUnavailable rounded down; both zero
/// becomes maxUnavailable 1.
pub(crate) fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    desired: i32,
) -> (i32, i32) {
    let zero = IntOrString::Int(0);
    let surge = scaled_value(max_surge.unwrap_or(&zero), desired, true).unwrap_or(0);
    let mut unavailable =
        scaled_value(max_unavailable.unwrap_or(&zero), desired, false).unwrap_or(0);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

fn max_surge(d: &Deployment) -> i32 {
    if !spec(d).is_rolling() {
        return 0;
    }
    let (surge, unavailable) = spec(d).rolling();
    resolve_fenceposts(surge.as_ref(), unavailable.as_ref(), replicas(d)).0
}

fn max_unavailable(d: &Deployment) -> i32 {
    if !spec(d).is_rolling() || replicas(d) == 0 {
        return 0;
    }
    let (surge, unavailable) = spec(d).rolling();
    let (_, u) = resolve_fenceposts(surge.as_ref(), unavailable.as_ref(), replicas(d));
    u.min(replicas(d))
}

fn template_without_hash(template: &PodTemplateSpec) -> Value {
    let mut value = without_nulls(&serde_json::to_value(template).unwrap_or(Value::Null));
    if let Some(labels) = value
        .get_mut("metadata")
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut)
    {
        labels.remove(HASH_LABEL);
        if labels.is_empty()
            && let Some(m) = value.get_mut("metadata").and_then(Value::as_object_mut)
        {
            m.remove("labels");
        }
    }
    value
}

/// `EqualIgnoreHash`: templates equal apart from the `pod-template-hash` label.
pub(crate) fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    template_without_hash(a) == template_without_hash(b)
}

/// `ComputeHash`: FNV-1a over the template (and the collision count), safe-encoded.
pub(crate) fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = canonical_json(&template_without_hash(template)).into_bytes();
    if let Some(count) = collision_count {
        bytes.extend_from_slice(&count.to_le_bytes());
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn revision(rs: &ReplicaSet) -> i64 {
    annotation(&rs.metadata, REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn max_revision(rss: &[ReplicaSet]) -> i64 {
    rss.iter().map(revision).max().unwrap_or(0)
}

fn rs_template(rs: &ReplicaSet) -> PodTemplateSpec {
    rs.spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default()
}

fn status_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map_or(0, |s| s.replicas)
}

fn status_ready(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

fn status_available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

/// Available pods of a ReplicaSet as far as scaling down is concerned: never more than
/// its spec (its status may still count pods being deleted).
fn safe_available(rs: &ReplicaSet) -> i32 {
    status_available(rs).min(spec_replicas(rs))
}

/// Pods of a ReplicaSet that may exist: the larger of spec and status.
fn possible_pods(rs: &ReplicaSet) -> i32 {
    spec_replicas(rs).max(status_replicas(rs))
}

fn sum(rss: &[&ReplicaSet], f: impl Fn(&ReplicaSet) -> i32) -> i32 {
    rss.iter().map(|rs| f(rs)).sum()
}

/// Oldest first (creation time, then name).
fn by_creation(rss: &mut [ReplicaSet]) {
    rss.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
            .then(a.metadata.name.cmp(&b.metadata.name))
    });
}

/// `FindNewReplicaSet`: the oldest ReplicaSet whose template equals the Deployment's.
fn find_new(d: &Deployment, rss: &[ReplicaSet]) -> Option<ReplicaSet> {
    let mut sorted = rss.to_vec();
    by_creation(&mut sorted);
    let template = spec(d).template();
    sorted
        .into_iter()
        .find(|rs| equal_ignore_hash(&rs_template(rs), &template))
}

fn condition<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

fn new_condition(type_: &str, status: &str, reason: &str, message: String) -> DeploymentCondition {
    let t = now();
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(t.clone()),
        last_transition_time: Some(t),
    }
}

/// `SetDeploymentCondition`: nothing if status and reason are unchanged; the transition
/// time kept if only the reason changes; the condition moves to the end.
fn set_condition(status: &mut DeploymentStatus, mut c: DeploymentCondition) {
    if let Some(current) = condition(status, &c.type_) {
        if current.status == c.status && current.reason == c.reason {
            return;
        }
        if current.status == c.status {
            c.last_transition_time = current.last_transition_time.clone();
        }
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|x| x.type_ != c.type_);
    conditions.push(c);
}

fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != type_);
        if conditions.is_empty() {
            status.conditions = None;
        }
    }
}

/// `DeploymentComplete`.
fn complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let r = replicas(d);
    status.updated_replicas.unwrap_or(0) == r
        && status.replicas.unwrap_or(0) == r
        && status.available_replicas.unwrap_or(0) == r
        && status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// `DeploymentProgressing`: more updated, ready or available pods, or fewer old ones.
fn progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let v = |x: Option<i32>| x.unwrap_or(0);
    let old_old = v(old.replicas) - v(old.updated_replicas);
    let new_old = v(new.replicas) - v(new.updated_replicas);
    v(new.updated_replicas) > v(old.updated_replicas)
        || new_old < old_old
        || v(new.ready_replicas) > v(old.ready_replicas)
        || v(new.available_replicas) > v(old.available_replicas)
}

/// `DeploymentTimedOut`.
fn timed_out(d: &Deployment, status: &DeploymentStatus) -> bool {
    let Some(deadline) = spec(d).progress_deadline() else {
        return false;
    };
    let Some(c) = condition(status, "Progressing") else {
        return false;
    };
    match c.reason.as_deref() {
        Some(NEW_RS_AVAILABLE) => false,
        Some(TIMED_OUT) => true,
        _ => c.last_update_time.as_ref().is_some_and(|from| {
            seconds_between(&from.0, &k8s_openapi::jiff::Timestamp::now()) > f64::from(deadline)
        }),
    }
}

fn nz(n: i32) -> Option<i32> {
    (n != 0).then_some(n)
}

/// `calculateStatus`.
fn calculate_status(
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    d: &Deployment,
) -> DeploymentStatus {
    let available = sum(all, status_available);
    let total = sum(all, spec_replicas);
    let unavailable = (total - available).max(0);
    let old = d.status.clone().unwrap_or_default();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: nz(sum(all, status_replicas)),
        updated_replicas: nz(new_rs.map_or(0, status_replicas)),
        ready_replicas: nz(sum(all, status_ready)),
        available_replicas: nz(available),
        unavailable_replicas: nz(unavailable),
        collision_count: old.collision_count,
        conditions: old.conditions.clone(),
        terminating_replicas: None,
    };
    if available >= replicas(d) - max_unavailable(d) {
        set_condition(
            &mut status,
            new_condition(
                "Available",
                "True",
                MIN_AVAILABLE,
                "Deployment has minimum availability.".into(),
            ),
        );
    } else {
        set_condition(
            &mut status,
            new_condition(
                "Available",
                "False",
                MIN_UNAVAILABLE,
                "Deployment does not have minimum availability.".into(),
            ),
        );
    }
    status
}

/// `getReplicaSetFraction` (rounded as `integer.RoundToInt32`).
fn fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    if replicas(d) == 0 {
        return -spec_replicas(rs);
    }
    let max_replicas = replicas(d) + max_surge(d);
    let mut before: i32 = annotation(&rs.metadata, MAX_REPLICAS)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if before == 0 {
        before = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        if before == 0 {
            return 0;
        }
    }
    let size = f64::from(spec_replicas(rs)) * f64::from(max_replicas) / f64::from(before);
    size.round() as i32 - spec_replicas(rs)
}

/// `GetProportion`.
fn proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if spec_replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let f = fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        f.min(allowed)
    } else {
        f.max(allowed)
    }
}

// ---------------------------------------------------------------------------------------

impl Controller {
    fn deployment_of(&self, namespace: &str, meta: &ObjectMeta) -> Option<ObjectKey> {
        let r = controller_of(meta)?;
        if r.kind != "Deployment" || !r.api_version.starts_with("apps/") {
            return None;
        }
        let d = self.deployments.get(namespace, &r.name)?;
        (d.metadata.uid.as_deref() == Some(r.uid.as_str()))
            .then(|| ObjectKey::new(namespace, &r.name))
    }

    fn replicaset_changed(&self, change: &Change<ReplicaSet>) {
        let rs = change.object();
        let namespace = rs.metadata.namespace.clone().unwrap_or_default();
        let key = self.deployment_of(&namespace, &rs.metadata);
        if let Change::Applied { old: Some(old), .. } = change
            && let Some(old_key) = self.deployment_of(&namespace, &old.metadata)
            && Some(&old_key) != key.as_ref()
        {
            self.queue.add(old_key);
        }
        match key {
            Some(key) => self.queue.add(key),
            None if controller_of(&rs.metadata).is_none()
                && matches!(change, Change::Applied { .. }) =>
            {
                let labels = rs.metadata.labels.clone().unwrap_or_default();
                for d in self.deployments.list_in(&namespace) {
                    if selects(spec(&d).selector(), &labels) {
                        self.queue.add(ObjectKey::of(d.as_ref()));
                    }
                }
            }
            None => {}
        }
    }

    fn pod_changed(&self, change: &Change<Pod>) {
        let relevant = match change {
            Change::Deleted(_) => true,
            Change::Applied {
                old: Some(old),
                new,
            } => {
                is_terminal(old) != is_terminal(new)
                    || is_deleting(&old.metadata) != is_deleting(&new.metadata)
            }
            Change::Applied { old: None, .. } => false,
        };
        if !relevant {
            return;
        }
        let pod = change.object();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let Some(r) = controller_of(&pod.metadata) else {
            return;
        };
        if let Some(rs) = self.replicasets.get(&namespace, &r.name)
            && rs.metadata.uid.as_deref() == Some(r.uid.as_str())
            && let Some(key) = self.deployment_of(&namespace, &rs.metadata)
        {
            self.queue.add(key);
        }
    }

    async fn run(self: Arc<Self>) {
        self.deployments.wait_ready().await;
        self.replicasets.wait_ready().await;
        self.pods.wait_ready().await;
        loop {
            let key = self.queue.next().await;
            let result = match self.deployments.get(&key.namespace, &key.name) {
                None => Ok(None),
                Some(d) => {
                    let mut sync = Sync::new(self.as_ref(), (*d).clone());
                    sync.run().await
                }
            };
            if let Some(error) = self.queue.settle(&key, result) {
                tracing::debug!(deployment = %key, error = %super::support::error_chain(&error), "deployment sync failed; retrying");
            }
        }
    }
}

/// One sync of one Deployment: the working copy and the API handles.
struct Sync<'a> {
    c: &'a Controller,
    d: Deployment,
    deployments: Api<Deployment>,
    replicasets: Api<ReplicaSet>,
    /// The Deployment's ReplicaSets, kept up to date with every write of this sync.
    rss: Vec<ReplicaSet>,
    requeue: Option<Duration>,
}

impl<'a> Sync<'a> {
    fn new(c: &'a Controller, d: Deployment) -> Self {
        let namespace = d.metadata.namespace.clone().unwrap_or_default();
        Self {
            deployments: Api::namespaced(c.client.clone(), &namespace),
            replicasets: Api::namespaced(c.client.clone(), &namespace),
            c,
            d,
            rss: Vec::new(),
            requeue: None,
        }
    }

    fn name(&self) -> String {
        self.d.metadata.name.clone().unwrap_or_default()
    }

    fn namespace(&self) -> String {
        self.d.metadata.namespace.clone().unwrap_or_default()
    }

    /// Records a ReplicaSet as written, so later steps of this sync see it.
    fn remember(&mut self, rs: &ReplicaSet) {
        match self
            .rss
            .iter_mut()
            .find(|x| x.metadata.uid == rs.metadata.uid)
        {
            Some(x) => *x = rs.clone(),
            None => self.rss.push(rs.clone()),
        }
    }

    /// `syncDeployment`.
    async fn run(&mut self) -> Result<Option<Duration>, Error> {
        let selector_empty = spec(&self.d).selector().is_none_or(|s| {
            s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
        });
        if selector_empty {
            tracing::warn!(deployment = %self.name(), "selector is empty; nothing to do");
            let mut status = self.d.status.clone().unwrap_or_default();
            if status.observed_generation < self.d.metadata.generation {
                status.observed_generation = self.d.metadata.generation;
                self.d.status = Some(status);
                self.update_status().await?;
            }
            return Ok(None);
        }
        self.rss = self.claim_replicasets().await?;
        if is_deleting(&self.d.metadata) {
            self.sync_status_only().await?;
            return Ok(None);
        }
        self.check_paused_conditions().await?;
        if spec(&self.d).paused() || self.is_scaling_event().await? {
            self.sync().await?;
            return Ok(self.requeue);
        }
        if spec(&self.d).is_recreate() {
            self.rollout_recreate().await?;
        } else {
            self.rollout_rolling().await?;
        }
        Ok(self.requeue)
    }

    /// ReplicaSets this Deployment controls (adopting orphans it selects, releasing the
    /// ones it no longer selects), as upstream's `ClaimReplicaSets`.
    async fn claim_replicasets(&mut self) -> Result<Vec<ReplicaSet>, Error> {
        let uid = self.d.metadata.uid.clone().unwrap_or_default();
        let selector = spec(&self.d).selector().cloned();
        let mut owned = Vec::new();
        let mut can_adopt: Option<bool> = None;
        for rs in self.c.replicasets.list_in(&self.namespace()) {
            let labels = rs.metadata.labels.clone().unwrap_or_default();
            let matches = selects(selector.as_ref(), &labels);
            match controller_of(&rs.metadata) {
                Some(r) if r.uid == uid => {
                    if matches {
                        owned.push((*rs).clone());
                    } else if !is_deleting(&self.d.metadata) {
                        self.set_owner_refs(&rs, |refs| refs.retain(|r| r.uid != uid))
                            .await?;
                    }
                }
                None if matches && !is_deleting(&self.d.metadata) && !is_deleting(&rs.metadata) => {
                    let ok = match can_adopt {
                        Some(ok) => ok,
                        None => {
                            let fresh = self.deployments.get_opt(&self.name()).await?;
                            let ok = fresh.is_some_and(|f| {
                                f.metadata.uid == self.d.metadata.uid && !is_deleting(&f.metadata)
                            });
                            can_adopt = Some(ok);
                            ok
                        }
                    };
                    if ok {
                        let owner = controller_ref("apps/v1", "Deployment", &self.d.metadata);
                        if let Some(adopted) =
                            self.set_owner_refs(&rs, |refs| refs.push(owner)).await?
                        {
                            owned.push(adopted);
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(owned)
    }

    async fn set_owner_refs(
        &self,
        rs: &ReplicaSet,
        edit: impl FnOnce(&mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>),
    ) -> Result<Option<ReplicaSet>, Error> {
        let mut refs = rs.metadata.owner_references.clone().unwrap_or_default();
        edit(&mut refs);
        let list = if refs.is_empty() {
            Value::Null
        } else {
            json!(refs)
        };
        let patch = json!({"metadata": {
            "ownerReferences": list,
            "resourceVersion": rs.metadata.resource_version,
            "uid": rs.metadata.uid,
        }});
        let name = rs.metadata.name.clone().unwrap_or_default();
        match self
            .replicasets
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(rs) => Ok(Some(rs)),
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Pods of the Deployment's ReplicaSets, by ReplicaSet UID.
    fn pod_map(&self) -> HashMap<String, Vec<Arc<Pod>>> {
        let mut map: HashMap<String, Vec<Arc<Pod>>> = self
            .rss
            .iter()
            .filter_map(|rs| rs.metadata.uid.clone())
            .map(|uid| (uid, Vec::new()))
            .collect();
        let selector = spec(&self.d).selector().cloned();
        for pod in self.c.pods.list_in(&self.namespace()) {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            if !selects(selector.as_ref(), &labels) {
                continue;
            }
            if let Some(r) = controller_of(&pod.metadata)
                && let Some(pods) = map.get_mut(&r.uid)
            {
                pods.push(pod.clone());
            }
        }
        map
    }

    /// Writes the working copy's status (and revision annotation).
    async fn update_status(&mut self) -> Result<(), Error> {
        let name = self.name();
        let wanted = annotation(&self.d.metadata, REVISION).map(str::to_string);
        let mut updated = self
            .deployments
            .replace_status(&name, &PostParams::default(), &self.d)
            .await?;
        if annotation(&updated.metadata, REVISION) != wanted.as_deref() {
            // kube-apiserver keeps metadata changes sent to deployments/status (only spec
            // and labels are reset), which is how upstream writes the revision without
            // bumping the generation. A server that drops them gets the annotation on the
            // main resource instead.
            let patch = json!({"metadata": {"annotations": {REVISION: wanted}}});
            updated = self
                .deployments
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
        }
        self.d = updated;
        Ok(())
    }

    /// `getAllReplicaSetsAndSyncRevision`: the new ReplicaSet (created if asked) and all
    /// old ones.
    async fn all_replicasets(
        &mut self,
        create: bool,
    ) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), Error> {
        let existing_new = find_new(&self.d, &self.rss);
        let old: Vec<ReplicaSet> = self
            .rss
            .iter()
            .filter(|rs| {
                existing_new
                    .as_ref()
                    .is_none_or(|n| n.metadata.uid != rs.metadata.uid)
            })
            .cloned()
            .collect();
        let new_rs = self.new_replicaset(existing_new, &old, create).await?;
        Ok((new_rs, old))
    }

    /// `getNewReplicaSet`.
    async fn new_replicaset(
        &mut self,
        existing: Option<ReplicaSet>,
        old: &[ReplicaSet],
        create: bool,
    ) -> Result<Option<ReplicaSet>, Error> {
        let new_revision = (max_revision(old) + 1).to_string();
        if let Some(existing) = existing {
            let mut copy = existing.clone();
            let annotations_changed = self.set_new_rs_annotations(&mut copy, &new_revision, true);
            let min_ready = spec(&self.d).min_ready_seconds();
            let min_ready_changed = copy
                .spec
                .as_ref()
                .and_then(|s| s.min_ready_seconds)
                .unwrap_or(0)
                != min_ready;
            let mut rs = existing;
            if annotations_changed || min_ready_changed {
                if let Some(s) = copy.spec.as_mut() {
                    s.min_ready_seconds = Some(min_ready).filter(|m| *m != 0);
                }
                rs = self
                    .replicasets
                    .replace(
                        copy.metadata.name.as_deref().unwrap_or_default(),
                        &PostParams::default(),
                        &copy,
                    )
                    .await?;
                self.remember(&rs);
            }
            let rs_revision = annotation(&rs.metadata, REVISION)
                .unwrap_or_default()
                .to_string();
            let mut needs_update = self.set_deployment_revision(&rs_revision);
            let mut status = self.d.status.clone().unwrap_or_default();
            if spec(&self.d).progress_deadline().is_some()
                && condition(&status, "Progressing").is_none()
            {
                let message = format!(
                    "Found new replica set {:?}",
                    rs.metadata.name.as_deref().unwrap_or_default()
                );
                set_condition(
                    &mut status,
                    new_condition("Progressing", "True", FOUND_NEW_RS, message),
                );
                self.d.status = Some(status);
                needs_update = true;
            }
            if needs_update {
                self.update_status().await?;
            }
            return Ok(Some(rs));
        }
        if !create {
            return Ok(None);
        }
        let collision_count = self.d.status.as_ref().and_then(|s| s.collision_count);
        let mut template = spec(&self.d).template();
        let hash = template_hash(&template, collision_count);
        let meta = template.metadata.get_or_insert_with(Default::default);
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(HASH_LABEL.into(), hash.clone());
        let mut selector = spec(&self.d).selector().cloned().unwrap_or_default();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(HASH_LABEL.into(), hash.clone());
        let name = format!("{}-{hash}", self.name());
        let mut new_rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.namespace()),
                owner_references: Some(vec![controller_ref(
                    "apps/v1",
                    "Deployment",
                    &self.d.metadata,
                )]),
                labels: meta.labels.clone(),
                ..ObjectMeta::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: Some(spec(&self.d).min_ready_seconds()).filter(|m| *m != 0),
                selector,
                template: Some(template),
            }),
            status: None,
        };
        let mut all: Vec<&ReplicaSet> = old.iter().collect();
        all.push(&new_rs);
        let count = self.new_rs_new_replicas(&all, &new_rs);
        if let Some(s) = new_rs.spec.as_mut() {
            s.replicas = Some(count);
        }
        self.set_new_rs_annotations(&mut new_rs, &new_revision, false);
        let created = match self
            .replicasets
            .create(&PostParams::default(), &new_rs)
            .await
        {
            Ok(rs) => {
                tracing::debug!(deployment = %self.name(), replicaset = %name, count, "created new replica set");
                Some((rs, false))
            }
            Err(e) if super::support::code(&e) == Some(409) => {
                let theirs = self.replicasets.get_opt(&name).await?;
                match theirs {
                    Some(rs)
                        if controller_of(&rs.metadata)
                            .is_some_and(|r| Some(&r.uid) == self.d.metadata.uid.as_ref())
                            && equal_ignore_hash(&rs_template(&rs), &spec(&self.d).template()) =>
                    {
                        Some((rs, true))
                    }
                    _ => {
                        let mut status = self.d.status.clone().unwrap_or_default();
                        status.collision_count = Some(status.collision_count.unwrap_or(0) + 1);
                        self.d.status = Some(status);
                        self.update_status().await?;
                        return Err(Error::HashCollision { name });
                    }
                }
            }
            Err(e) => {
                if spec(&self.d).progress_deadline().is_some() {
                    let mut status = self.d.status.clone().unwrap_or_default();
                    let message = format!("Failed to create new replica set {name:?}: {e}");
                    set_condition(
                        &mut status,
                        new_condition("Progressing", "False", FAILED_RS_CREATE, message),
                    );
                    self.d.status = Some(status);
                    let _ = self.update_status().await;
                }
                return Err(e.into());
            }
        };
        let Some((rs, already_existed)) = created else {
            return Ok(None);
        };
        self.remember(&rs);
        let mut needs_update = self.set_deployment_revision(&new_revision);
        if !already_existed && spec(&self.d).progress_deadline().is_some() {
            let mut status = self.d.status.clone().unwrap_or_default();
            let message = format!("Created new replica set {name:?}");
            set_condition(
                &mut status,
                new_condition("Progressing", "True", NEW_RS_CREATED, message),
            );
            self.d.status = Some(status);
            needs_update = true;
        }
        if needs_update {
            self.update_status().await?;
        }
        Ok(Some(rs))
    }

    fn set_deployment_revision(&mut self, revision: &str) -> bool {
        let annotations = self
            .d
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        if annotations.get(REVISION).map(String::as_str) == Some(revision) {
            return false;
        }
        annotations.insert(REVISION.into(), revision.into());
        true
    }

    /// `SetNewReplicaSetAnnotations`.
    fn set_new_rs_annotations(
        &self,
        rs: &mut ReplicaSet,
        new_revision: &str,
        exists: bool,
    ) -> bool {
        let mut changed = false;
        let skip = [
            "kubectl.kubernetes.io/last-applied-configuration",
            REVISION,
            REVISION_HISTORY,
            DESIRED_REPLICAS,
            MAX_REPLICAS,
            "deprecated.deployment.rollback.to",
        ];
        let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
        for (k, v) in self.d.metadata.annotations.iter().flatten() {
            if skip.contains(&k.as_str()) || annotations.get(k) == Some(v) {
                continue;
            }
            annotations.insert(k.clone(), v.clone());
            changed = true;
        }
        let old_revision = annotations.get(REVISION).cloned();
        let old_number: i64 = match old_revision.as_deref() {
            None | Some("") => 0,
            Some(r) => match r.parse() {
                Ok(n) => n,
                Err(_) => return changed,
            },
        };
        let new_number: i64 = new_revision.parse().unwrap_or(0);
        if old_number < new_number {
            annotations.insert(REVISION.into(), new_revision.into());
            changed = true;
            if let Some(previous) = old_revision.filter(|r| !r.is_empty()) {
                let history = annotations
                    .get(REVISION_HISTORY)
                    .cloned()
                    .unwrap_or_default();
                let mut revisions: Vec<&str> =
                    history.split(',').filter(|r| !r.is_empty()).collect();
                revisions.push(&previous);
                while revisions.join(",").len() > REVISION_HISTORY_CHARS && revisions.len() > 1 {
                    revisions.remove(0);
                }
                annotations.insert(REVISION_HISTORY.into(), revisions.join(","));
            }
        }
        if !exists && self.set_replicas_annotations(rs) {
            changed = true;
        }
        changed
    }

    /// `SetReplicasAnnotations`.
    fn set_replicas_annotations(&self, rs: &mut ReplicaSet) -> bool {
        let desired = replicas(&self.d).to_string();
        let max = (replicas(&self.d) + max_surge(&self.d)).to_string();
        let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
        let mut changed = false;
        for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
            if annotations.get(k) != Some(&v) {
                annotations.insert(k.into(), v);
                changed = true;
            }
        }
        changed
    }

    /// `NewRSNewReplicas`, counting pods that may still exist (see the module docs).
    fn new_rs_new_replicas(&self, all: &[&ReplicaSet], new_rs: &ReplicaSet) -> i32 {
        let wanted = replicas(&self.d);
        if spec(&self.d).is_recreate() {
            return wanted;
        }
        let max_total = wanted + max_surge(&self.d);
        let current = sum(all, possible_pods);
        if current >= max_total {
            return spec_replicas(new_rs);
        }
        let up = (max_total - current)
            .min(wanted - spec_replicas(new_rs))
            .max(0);
        spec_replicas(new_rs) + up
    }

    /// `scaleReplicaSet`: sets the size and the replicas annotations.
    async fn scale(
        &mut self,
        rs: &ReplicaSet,
        new_scale: i32,
    ) -> Result<(bool, ReplicaSet), Error> {
        let size_changed = spec_replicas(rs) != new_scale;
        let mut copy = rs.clone();
        let annotations_changed = self.set_replicas_annotations(&mut copy);
        if !size_changed && !annotations_changed {
            return Ok((false, rs.clone()));
        }
        if let Some(s) = copy.spec.as_mut() {
            s.replicas = Some(new_scale);
        }
        let name = copy.metadata.name.clone().unwrap_or_default();
        let updated = self
            .replicasets
            .replace(&name, &PostParams::default(), &copy)
            .await?;
        self.remember(&updated);
        if size_changed {
            tracing::debug!(
                deployment = %self.name(),
                replicaset = %name,
                from = spec_replicas(rs),
                to = new_scale,
                "scaled replica set"
            );
        }
        Ok((size_changed, updated))
    }

    /// `scaleReplicaSetAndRecordEvent`.
    async fn scale_and_record(
        &mut self,
        rs: &ReplicaSet,
        new_scale: i32,
    ) -> Result<(bool, ReplicaSet), Error> {
        if spec_replicas(rs) == new_scale {
            return Ok((false, rs.clone()));
        }
        self.scale(rs, new_scale).await
    }

    /// `isScalingEvent`.
    async fn is_scaling_event(&mut self) -> Result<bool, Error> {
        let (new_rs, old) = self.all_replicasets(false).await?;
        let wanted = replicas(&self.d).to_string();
        Ok(old
            .iter()
            .chain(new_rs.iter())
            .filter(|rs| spec_replicas(rs) > 0)
            .any(|rs| annotation(&rs.metadata, DESIRED_REPLICAS).is_some_and(|d| d != wanted)))
    }

    /// `sync`: scaling (and cleanup when paused), then status.
    async fn sync(&mut self) -> Result<(), Error> {
        let (new_rs, old) = self.all_replicasets(false).await?;
        let (new_rs, old) = self.scale_all(new_rs, old).await?;
        if spec(&self.d).paused() {
            self.cleanup(&old).await?;
        }
        let all: Vec<&ReplicaSet> = old.iter().chain(new_rs.iter()).collect();
        let status = calculate_status(&all, new_rs.as_ref(), &self.d);
        self.write_status_if_changed(status).await
    }

    async fn sync_status_only(&mut self) -> Result<(), Error> {
        let (new_rs, old) = self.all_replicasets(false).await?;
        let all: Vec<&ReplicaSet> = old.iter().chain(new_rs.iter()).collect();
        let status = calculate_status(&all, new_rs.as_ref(), &self.d);
        self.write_status_if_changed(status).await
    }

    async fn write_status_if_changed(&mut self, status: DeploymentStatus) -> Result<(), Error> {
        if self.d.status.as_ref() == Some(&status) {
            return Ok(());
        }
        self.d.status = Some(status);
        self.update_status().await
    }

    /// `scale`: proportional scaling of the active ReplicaSets.
    async fn scale_all(
        &mut self,
        new_rs: Option<ReplicaSet>,
        mut old: Vec<ReplicaSet>,
    ) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), Error> {
        let wanted = replicas(&self.d);
        // One active (or, with none active, the newest) ReplicaSet takes everything.
        old.sort_by(|a, b| {
            b.metadata
                .creation_timestamp
                .cmp(&a.metadata.creation_timestamp)
        });
        let active: Vec<&ReplicaSet> = old
            .iter()
            .chain(new_rs.iter())
            .filter(|rs| spec_replicas(rs) > 0)
            .collect();
        let single = match active.len() {
            0 => new_rs.clone().or_else(|| old.first().cloned()),
            1 => Some(active[0].clone()),
            _ => None,
        };
        if let Some(target) = single {
            if spec_replicas(&target) != wanted {
                let (_, updated) = self.scale_and_record(&target, wanted).await?;
                return Ok(replace_in(new_rs, old, updated));
            }
            return Ok((new_rs, old));
        }
        // A saturated new ReplicaSet: scale every old one down.
        if let Some(n) = &new_rs
            && spec_replicas(n) == wanted
            && annotation(&n.metadata, DESIRED_REPLICAS) == Some(wanted.to_string().as_str())
            && status_available(n) == wanted
        {
            let mut result = (new_rs.clone(), old.clone());
            for rs in old.iter().filter(|rs| spec_replicas(rs) > 0) {
                let (_, updated) = self.scale_and_record(rs, 0).await?;
                result = replace_in(result.0, result.1, updated);
            }
            return Ok(result);
        }
        if !spec(&self.d).is_rolling() {
            return Ok((new_rs, old));
        }
        let mut all: Vec<ReplicaSet> = old
            .iter()
            .chain(new_rs.iter())
            .filter(|rs| spec_replicas(rs) > 0)
            .cloned()
            .collect();
        let all_replicas: i32 = all.iter().map(spec_replicas).sum();
        let allowed = if wanted > 0 {
            wanted + max_surge(&self.d)
        } else {
            0
        };
        let to_add = allowed - all_replicas;
        if to_add > 0 {
            // Larger first; newer first among equals.
            all.sort_by(|a, b| {
                spec_replicas(b).cmp(&spec_replicas(a)).then(
                    b.metadata
                        .creation_timestamp
                        .cmp(&a.metadata.creation_timestamp),
                )
            });
        } else if to_add < 0 {
            // Larger first; older first among equals.
            all.sort_by(|a, b| {
                spec_replicas(b).cmp(&spec_replicas(a)).then(
                    a.metadata
                        .creation_timestamp
                        .cmp(&b.metadata.creation_timestamp),
                )
            });
        }
        let mut added = 0;
        let mut sizes: Vec<i32> = Vec::new();
        for rs in &all {
            if to_add != 0 {
                let p = proportion(rs, &self.d, to_add, added);
                sizes.push(spec_replicas(rs) + p);
                added += p;
            } else {
                sizes.push(spec_replicas(rs));
            }
        }
        let mut result = (new_rs, old);
        for (i, rs) in all.iter().enumerate() {
            let mut size = sizes[i];
            if i == 0 && to_add != 0 {
                size = (size + to_add - added).max(0);
            }
            let (_, updated) = self.scale(rs, size).await?;
            result = replace_in(result.0, result.1, updated);
        }
        Ok(result)
    }

    /// `checkPausedConditions`.
    async fn check_paused_conditions(&mut self) -> Result<(), Error> {
        if spec(&self.d).progress_deadline().is_none() {
            return Ok(());
        }
        let mut status = self.d.status.clone().unwrap_or_default();
        let reason = condition(&status, "Progressing").and_then(|c| c.reason.clone());
        if reason.as_deref() == Some(TIMED_OUT) {
            return Ok(());
        }
        let paused_exists = reason.as_deref() == Some(PAUSED);
        let paused = spec(&self.d).paused();
        let c = if paused && !paused_exists {
            new_condition(
                "Progressing",
                "Unknown",
                PAUSED,
                "Deployment is paused".into(),
            )
        } else if !paused && paused_exists {
            new_condition(
                "Progressing",
                "Unknown",
                RESUMED,
                "Deployment is resumed".into(),
            )
        } else {
            return Ok(());
        };
        set_condition(&mut status, c);
        self.d.status = Some(status);
        self.update_status().await
    }

    /// `rolloutRolling`.
    async fn rollout_rolling(&mut self) -> Result<(), Error> {
        let (new_rs, old) = self.all_replicasets(true).await?;
        let Some(mut new_rs) = new_rs else {
            return Ok(());
        };
        let mut old = old;
        // Scale up, if we can.
        let wanted = replicas(&self.d);
        let mut scaled_up = false;
        if spec_replicas(&new_rs) > wanted {
            let (scaled, updated) = self.scale_and_record(&new_rs, wanted).await?;
            scaled_up = scaled;
            new_rs = updated;
        } else if spec_replicas(&new_rs) < wanted {
            let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&new_rs)).collect();
            let count = self.new_rs_new_replicas(&all, &new_rs);
            let (scaled, updated) = self.scale_and_record(&new_rs, count).await?;
            scaled_up = scaled;
            new_rs = updated;
        }
        if scaled_up {
            return self.sync_rollout_status(&old, Some(&new_rs)).await;
        }
        // Scale down, if we can.
        let scaled_down = self.reconcile_old(&mut old, &new_rs).await?;
        if scaled_down {
            return self.sync_rollout_status(&old, Some(&new_rs)).await;
        }
        let current: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&new_rs)).collect();
        let status = calculate_status(&current, Some(&new_rs), &self.d);
        if complete(&self.d, &status) {
            self.cleanup(&old).await?;
        }
        self.sync_rollout_status(&old, Some(&new_rs)).await
    }

    /// `reconcileOldReplicaSets`.
    async fn reconcile_old(
        &mut self,
        old: &mut [ReplicaSet],
        new_rs: &ReplicaSet,
    ) -> Result<bool, Error> {
        let old_pods: i32 = old.iter().map(spec_replicas).sum();
        if old_pods == 0 {
            return Ok(false);
        }
        let all_pods = old_pods + spec_replicas(new_rs);
        let wanted = replicas(&self.d);
        let min_available = wanted - max_unavailable(&self.d);
        let new_unavailable = spec_replicas(new_rs) - safe_available(new_rs);
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        // Unhealthy replicas first: scaling them down does not lower availability.
        by_creation(old);
        let mut cleaned = 0;
        for rs in old.iter_mut() {
            if cleaned >= max_scaled_down {
                break;
            }
            let size = spec_replicas(rs);
            if size == 0 || size == status_available(rs) {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(size - status_available(rs).min(size));
            let (_, updated) = self.scale_and_record(rs, size - down).await?;
            *rs = updated;
            cleaned += down;
        }
        // Then healthy ones, as far as maxUnavailable allows.
        let available: i32 = old.iter().map(safe_available).sum::<i32>() + safe_available(new_rs);
        let mut scaled = 0;
        if available > min_available {
            let total = available - min_available;
            for rs in old.iter_mut() {
                if scaled >= total {
                    break;
                }
                let size = spec_replicas(rs);
                if size == 0 {
                    continue;
                }
                let down = size.min(total - scaled);
                let (_, updated) = self.scale_and_record(rs, size - down).await?;
                *rs = updated;
                scaled += down;
            }
        }
        Ok(cleaned + scaled > 0)
    }

    /// `rolloutRecreate`.
    async fn rollout_recreate(&mut self) -> Result<(), Error> {
        let (mut new_rs, mut old) = self.all_replicasets(false).await?;
        let mut scaled_down = false;
        for rs in old.iter_mut() {
            if spec_replicas(rs) != 0 {
                let (scaled, updated) = self.scale_and_record(rs, 0).await?;
                scaled_down |= scaled;
                *rs = updated;
            }
        }
        if scaled_down {
            return self.sync_rollout_status(&old, new_rs.as_ref()).await;
        }
        // Wait until no old pod is left running (terminating ones included).
        let pod_map = self.pod_map();
        let new_uid = new_rs.as_ref().and_then(|rs| rs.metadata.uid.clone());
        let old_running = old.iter().map(status_replicas).sum::<i32>() > 0
            || pod_map.iter().any(|(uid, pods)| {
                Some(uid) != new_uid.as_ref() && pods.iter().any(|p| !is_terminal(p))
            });
        if old_running {
            return self.sync_rollout_status(&old, new_rs.as_ref()).await;
        }
        if new_rs.is_none() {
            let (created, all_old) = self.all_replicasets(true).await?;
            new_rs = created;
            old = all_old;
        }
        if let Some(rs) = new_rs.as_mut() {
            let (_, updated) = self.scale_and_record(rs, replicas(&self.d)).await?;
            *rs = updated;
        }
        let current: Vec<&ReplicaSet> = old.iter().chain(new_rs.iter()).collect();
        let status = calculate_status(&current, new_rs.as_ref(), &self.d);
        if complete(&self.d, &status) {
            self.cleanup(&old).await?;
        }
        self.sync_rollout_status(&old, new_rs.as_ref()).await
    }

    /// `cleanupDeployment`: deletes the oldest unused ReplicaSets beyond
    /// revisionHistoryLimit.
    async fn cleanup(&self, old: &[ReplicaSet]) -> Result<(), Error> {
        let Some(limit) = spec(&self.d).revision_history_limit() else {
            return Ok(());
        };
        let mut cleanable: Vec<&ReplicaSet> =
            old.iter().filter(|rs| !is_deleting(&rs.metadata)).collect();
        let excess = cleanable.len() as i64 - i64::from(limit);
        if excess <= 0 {
            return Ok(());
        }
        cleanable.sort_by(|a, b| {
            revision(a).cmp(&revision(b)).then(
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp),
            )
        });
        for rs in cleanable
            .into_iter()
            .take(usize::try_from(excess).unwrap_or(0))
        {
            let observed = rs
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            if status_replicas(rs) != 0
                || spec_replicas(rs) != 0
                || rs.metadata.generation.unwrap_or(0) > observed
            {
                continue;
            }
            let name = rs.metadata.name.clone().unwrap_or_default();
            tracing::debug!(deployment = %self.name(), replicaset = %name, "deleting old replica set");
            match self
                .replicasets
                .delete(&name, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// `syncRolloutStatus`: status, Available and Progressing conditions; schedules the
    /// check of the progress deadline.
    async fn sync_rollout_status(
        &mut self,
        old: &[ReplicaSet],
        new_rs: Option<&ReplicaSet>,
    ) -> Result<(), Error> {
        let all: Vec<&ReplicaSet> = old.iter().chain(new_rs).collect();
        let mut status = calculate_status(&all, new_rs, &self.d);
        let deadline = spec(&self.d).progress_deadline();
        if deadline.is_none() {
            remove_condition(&mut status, "Progressing");
        }
        let current = self
            .d
            .status
            .as_ref()
            .and_then(|s| condition(s, "Progressing"))
            .cloned();
        let is_complete = status.replicas == status.updated_replicas
            && current.as_ref().and_then(|c| c.reason.as_deref()) == Some(NEW_RS_AVAILABLE);
        if deadline.is_some() && !is_complete {
            let rs_name = new_rs.and_then(|rs| rs.metadata.name.clone());
            if complete(&self.d, &status) {
                let message = match &rs_name {
                    Some(n) => format!("ReplicaSet {n:?} has successfully progressed."),
                    None => format!("Deployment {:?} has successfully progressed.", self.name()),
                };
                set_condition(
                    &mut status,
                    new_condition("Progressing", "True", NEW_RS_AVAILABLE, message),
                );
            } else if progressing(&self.d, &status) {
                let message = match &rs_name {
                    Some(n) => format!("ReplicaSet {n:?} is progressing."),
                    None => format!("Deployment {:?} is progressing.", self.name()),
                };
                let mut c = new_condition("Progressing", "True", RS_UPDATED, message);
                if let Some(current) = &current {
                    if current.status == "True" {
                        c.last_transition_time = current.last_transition_time.clone();
                    }
                    remove_condition(&mut status, "Progressing");
                }
                set_condition(&mut status, c);
            } else if timed_out(&self.d, &status) {
                let message = match &rs_name {
                    Some(n) => format!("ReplicaSet {n:?} has timed out progressing."),
                    None => format!("Deployment {:?} has timed out progressing.", self.name()),
                };
                set_condition(
                    &mut status,
                    new_condition("Progressing", "False", TIMED_OUT, message),
                );
            }
        }
        // ReplicaFailure of the ReplicaSets, newest first.
        let failure = new_rs.into_iter().chain(old.iter()).find_map(|rs| {
            rs.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "ReplicaFailure")
                .cloned()
        });
        match failure {
            Some(f) => set_condition(
                &mut status,
                DeploymentCondition {
                    type_: "ReplicaFailure".into(),
                    status: f.status,
                    reason: f.reason,
                    message: f.message,
                    last_update_time: f.last_transition_time.clone(),
                    last_transition_time: f.last_transition_time,
                },
            ),
            None => remove_condition(&mut status, "ReplicaFailure"),
        }
        if self.d.status.as_ref() == Some(&status) {
            self.requeue_stuck(&status);
            return Ok(());
        }
        self.d.status = Some(status);
        self.update_status().await
    }

    /// `requeueStuckDeployment`: look again when the progress deadline passes.
    fn requeue_stuck(&mut self, status: &DeploymentStatus) {
        let Some(deadline) = spec(&self.d).progress_deadline() else {
            return;
        };
        let Some(current) = self
            .d
            .status
            .as_ref()
            .and_then(|s| condition(s, "Progressing"))
        else {
            return;
        };
        if complete(&self.d, status) || current.reason.as_deref() == Some(TIMED_OUT) {
            return;
        }
        let Some(from) = current.last_update_time.as_ref() else {
            return;
        };
        let due = super::support::plus_seconds(&from.0, i64::from(deadline));
        let after = super::support::until(&due);
        self.requeue = Some(after.max(Duration::from_secs(1)) + Duration::from_secs(1));
    }
}

/// Replaces the ReplicaSet with `updated`'s UID in the new one or the old list.
fn replace_in(
    new_rs: Option<ReplicaSet>,
    mut old: Vec<ReplicaSet>,
    updated: ReplicaSet,
) -> (Option<ReplicaSet>, Vec<ReplicaSet>) {
    if new_rs
        .as_ref()
        .is_some_and(|n| n.metadata.uid == updated.metadata.uid)
    {
        return (Some(updated), old);
    }
    for rs in old.iter_mut() {
        if rs.metadata.uid == updated.metadata.uid {
            *rs = updated;
            break;
        }
    }
    (new_rs, old)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surge_rounds_up_and_unavailable_rounds_down() {
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(
            resolve_fenceposts(Some(&pct("25%")), Some(&pct("25%")), 3),
            (1, 0)
        );
        assert_eq!(
            resolve_fenceposts(Some(&pct("25%")), Some(&pct("25%")), 10),
            (3, 2)
        );
        assert_eq!(
            resolve_fenceposts(Some(&IntOrString::Int(0)), Some(&IntOrString::Int(0)), 3),
            (0, 1)
        );
        assert_eq!(scaled_value(&pct("x"), 3, true), None);
    }

    #[test]
    fn the_template_hash_ignores_its_own_label_and_changes_with_collisions() {
        let t: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i:1"}]}
        }))
        .unwrap();
        let mut labelled = t.clone();
        labelled
            .metadata
            .as_mut()
            .unwrap()
            .labels
            .as_mut()
            .unwrap()
            .insert(HASH_LABEL.into(), "x".into());
        assert!(equal_ignore_hash(&t, &labelled));
        assert_eq!(template_hash(&t, None), template_hash(&labelled, None));
        assert_ne!(template_hash(&t, None), template_hash(&t, Some(1)));
        assert!(
            template_hash(&t, None)
                .chars()
                .all(|c| "456789bcdf".contains(c))
        );
    }

    #[test]
    fn a_condition_keeps_its_transition_time_when_only_the_reason_changes() {
        let mut status = DeploymentStatus::default();
        let mut first = new_condition("Progressing", "True", NEW_RS_CREATED, "a".into());
        first.last_transition_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap(),
        ));
        set_condition(&mut status, first.clone());
        set_condition(
            &mut status,
            new_condition("Progressing", "True", NEW_RS_AVAILABLE, "b".into()),
        );
        let c = condition(&status, "Progressing").unwrap();
        assert_eq!(c.reason.as_deref(), Some(NEW_RS_AVAILABLE));
        assert_eq!(c.last_transition_time, first.last_transition_time);
    }
}

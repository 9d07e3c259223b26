//! Memcached reconcile: a Deployment per CR, size enforced, status, a registry entry, the finalizer; the four results.
//!
//! [`reconcile_memcached`] is the decision logic over a [`ClusterApi`] (the Kubernetes
//! API in production, an in-memory fake in tests). [`reconcile`] and
//! [`error_policy`] adapt it to kube-runtime's `Controller`: they count every outcome in
//! the controller-runtime metrics, log one structured line per reconcile, emit a
//! Warning Event `ReconcileError` on failure and schedule retries with per-object
//! exponential backoff ([`crate::backoff`]). [`run`] wires the Controller: triggers
//! are generation changes (or the start of deletion) of a Memcached, any change of a
//! Deployment it owns or of one of its pods (the status lists them), and the resync
//! period — never its own status writes.

use std::collections::BTreeMap;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, Container, ContainerPort, Pod, PodSecurityContext, PodSpec,
    PodTemplateSpec, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use crate::backoff::ItemBackoff;
use crate::clock::Clock;
use crate::crd::{Condition, FINALIZER, Memcached, MemcachedStatus};
use crate::events::{EventRecord, Recorder};
use crate::leader::{GuardError, WriteGuard};
use crate::metrics::{Metrics, ReconcileResult};

/// The controller name in metrics and logs.
pub const CONTROLLER_NAME: &str = "memcached";
/// The registry ConfigMap in the operator's namespace.
pub const REGISTRY_CONFIGMAP: &str = "memcached-registry";
/// The memcached image every Deployment runs.
pub const MEMCACHED_IMAGE: &str = "memcached:1.6-alpine";
/// memcached's port.
pub const MEMCACHED_PORT: i32 = 11211;

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The write guard refused a write: leadership is not current.
    #[error("reconcile aborted before writing")]
    Guard(#[source] GuardError),
    /// An API request failed.
    #[error("failed to {action}")]
    Api {
        /// What was being done, e.g. "create deployment".
        action: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The object lacks a namespace or uid.
    #[error("memcached object is missing metadata.{0}")]
    MissingMetadata(&'static str),
    /// A registry entry could not be encoded.
    #[error("failed to encode the registry entry")]
    Encode(#[source] serde_json::Error),
}

impl Error {
    /// The variant name, for metrics and logs.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Guard(_) => "Guard",
            Error::Api { .. } => "Api",
            Error::MissingMetadata(_) => "MissingMetadata",
            Error::Encode(_) => "Encode",
        }
    }
}

fn api(action: &'static str) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Api { action, source }
}

/// How a successful reconcile ends (the error result is `Err`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing more to do until something changes.
    Done,
    /// Run again soon, through the per-object rate limiter.
    Requeue,
    /// Run again after a fixed delay (the resync period).
    RequeueAfter(Duration),
}

/// The API operations a reconcile makes. Production: [`KubeCluster`].
pub trait ClusterApi: Send + Sync + 'static {
    /// A fresh read of a Memcached.
    fn get_memcached(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Memcached>, kube::Error>> + Send;
    /// Adds (`true`) or removes (`false`) our finalizer on a fresh copy, guarded by its resourceVersion.
    fn set_finalizer(
        &self,
        ns: &str,
        name: &str,
        present: bool,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Reads a Deployment.
    fn get_deployment(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Deployment>, kube::Error>> + Send;
    /// Creates a Deployment.
    fn create_deployment(
        &self,
        ns: &str,
        d: &Deployment,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Sets a Deployment's replicas.
    fn scale_deployment(
        &self,
        ns: &str,
        name: &str,
        replicas: i32,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Lists pods by label selector.
    fn list_pods(
        &self,
        ns: &str,
        selector: &str,
    ) -> impl Future<Output = Result<Vec<Pod>, kube::Error>> + Send;
    /// Writes a Memcached's status.
    fn update_status(
        &self,
        ns: &str,
        name: &str,
        status: &MemcachedStatus,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Reads the registry ConfigMap.
    fn get_registry(&self) -> impl Future<Output = Result<Option<ConfigMap>, kube::Error>> + Send;
    /// Sets (`Some`) or removes (`None`) one registry key, creating the ConfigMap when needed.
    fn set_registry_entry(
        &self,
        key: &str,
        value: Option<&str>,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

/// Everything a reconcile needs besides the object.
pub struct Context<A> {
    /// The API.
    pub api: A,
    /// Event recorder.
    pub recorder: Recorder,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Checked before every write.
    pub guard: WriteGuard,
    /// Per-object backoff, keyed `namespace/name`.
    pub backoff: ItemBackoff<String>,
    /// `--resync-period`.
    pub resync: Option<Duration>,
    /// Time for condition timestamps.
    pub clock: Arc<dyn Clock>,
}

impl<A> Context<A> {
    fn check(&self) -> Result<(), Error> {
        self.guard.check().map_err(Error::Guard)
    }

    async fn event(&self, mc: &Memcached, ev: EventRecord) {
        if self.guard.check().is_ok() {
            self.recorder.publish(&mc.object_ref(&()), &ev).await;
        }
    }
}

/// The labels of a Memcached's Deployment and pods.
#[must_use]
pub fn labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app".to_owned(), "memcached".to_owned()),
        ("memcached_cr".to_owned(), name.to_owned()),
    ])
}

/// The label selector for a Memcached's pods.
#[must_use]
pub fn selector(name: &str) -> String {
    format!("app=memcached,memcached_cr={name}")
}

/// The Memcached whose pod this is, by its `memcached_cr` label: a pod's change (it
/// starts, becomes ready, terminates, goes) changes the status that lists it.
#[must_use]
pub fn memcached_of_pod(pod: &Pod) -> Option<reflector::ObjectRef<Memcached>> {
    let name = pod.labels().get("memcached_cr")?;
    let mc = reflector::ObjectRef::new(name);
    Some(match pod.namespace() {
        Some(ns) => mc.within(&ns),
        None => mc,
    })
}

/// The registry key of a Memcached: `<namespace>.<name>` (namespaces have no dots).
#[must_use]
pub fn registry_key(ns: &str, name: &str) -> String {
    format!("{ns}.{name}")
}

/// The registry value of a Memcached: `{"size":N,"nodes":[…]}`.
///
/// # Errors
/// [`Error::Encode`] (not expected).
pub fn registry_value(size: i32, nodes: &[String]) -> Result<String, Error> {
    serde_json::to_string(&json!({ "size": size, "nodes": nodes })).map_err(Error::Encode)
}

/// The Deployment a Memcached should have.
///
/// # Errors
/// [`Error::MissingMetadata`] without a namespace or uid (needed for the owner reference).
pub fn desired_deployment(mc: &Memcached) -> Result<Deployment, Error> {
    let name = mc.name_any();
    let ns = mc.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    let owner = mc
        .controller_owner_ref(&())
        .ok_or(Error::MissingMetadata("uid"))?;
    let labels = labels(&name);
    Ok(Deployment {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(ns),
            labels: Some(labels.clone()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(mc.size()),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    containers: vec![Container {
                        name: "memcached".into(),
                        image: Some(MEMCACHED_IMAGE.into()),
                        command: Some(
                            ["memcached", "-m", "64", "-o", "modern", "-v"]
                                .map(String::from)
                                .to_vec(),
                        ),
                        ports: Some(vec![ContainerPort {
                            container_port: MEMCACHED_PORT,
                            name: Some("memcached".into()),
                            ..ContainerPort::default()
                        }]),
                        security_context: Some(SecurityContext {
                            run_as_non_root: Some(true),
                            run_as_user: Some(1001),
                            allow_privilege_escalation: Some(false),
                            capabilities: Some(Capabilities {
                                drop: Some(vec!["ALL".into()]),
                                ..Capabilities::default()
                            }),
                            ..SecurityContext::default()
                        }),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    })
}

fn condition(
    previous: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        observed_generation: generation,
        last_transition_time,
        reason: reason.into(),
        message,
    }
}

/// The status a Memcached should show, from its Deployment and pods.
///
/// `nodes` are the names of the pods that are not terminating, sorted. Conditions keep their `lastTransitionTime`
/// while their status is unchanged:
/// - `Available`: all `size` replicas available (`MinimumReplicasAvailable`), else `MinimumReplicasUnavailable`.
/// - `Progressing`: the Deployment has not caught up with `size` (`Scaling`), else `ReconcileComplete`.
/// - `Degraded`: the Deployment reports `ReplicaFailure` or `ProgressDeadlineExceeded`, else `AsExpected`.
#[must_use]
pub fn compute_status(
    mc: &Memcached,
    deploy: &Deployment,
    pods: &[Pod],
    now: &Time,
) -> MemcachedStatus {
    let mut nodes: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    nodes.sort();
    let size = mc.size();
    let generation = mc.metadata.generation;
    let previous = mc
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let st = deploy.status.clone().unwrap_or_default();
    let available = st.available_replicas.unwrap_or(0);
    let ready = st.ready_replicas.unwrap_or(0);
    let updated = st.updated_replicas.unwrap_or(0);
    let total = st.replicas.unwrap_or(0);
    let observed_current = match (st.observed_generation, deploy.metadata.generation) {
        (Some(o), Some(g)) => o >= g,
        _ => true,
    };
    let caught_up = observed_current && updated >= size && ready >= size && total == size;
    let deploy_conditions = st.conditions.unwrap_or_default();
    let failure = deploy_conditions.iter().find_map(|c| {
        if c.type_ == "ReplicaFailure" && c.status == "True" {
            Some(("ReplicaFailure", c.message.clone().unwrap_or_default()))
        } else if c.type_ == "Progressing"
            && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
        {
            Some((
                "ProgressDeadlineExceeded",
                c.message.clone().unwrap_or_default(),
            ))
        } else {
            None
        }
    });
    let conditions = vec![
        condition(
            previous,
            "Available",
            available >= size,
            if available >= size {
                "MinimumReplicasAvailable"
            } else {
                "MinimumReplicasUnavailable"
            },
            format!("{available}/{size} memcached pods available"),
            generation,
            now,
        ),
        condition(
            previous,
            "Progressing",
            !caught_up,
            if caught_up {
                "ReconcileComplete"
            } else {
                "Scaling"
            },
            format!("{ready}/{size} ready, {updated} updated, {total} total"),
            generation,
            now,
        ),
        match failure {
            Some((reason, message)) => {
                condition(previous, "Degraded", true, reason, message, generation, now)
            }
            None => condition(
                previous,
                "Degraded",
                false,
                "AsExpected",
                String::new(),
                generation,
                now,
            ),
        },
    ];
    MemcachedStatus { nodes, conditions }
}

/// One reconcile of one Memcached.
///
/// # Errors
/// Any API error, or [`Error::Guard`] when a write was refused; nothing after the
/// failing step is done.
pub async fn reconcile_memcached<A: ClusterApi>(
    mc: &Memcached,
    ctx: &Context<A>,
) -> Result<Outcome, Error> {
    let ns = mc.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    let name = mc.name_any();

    if mc.is_deleting() {
        if mc.has_finalizer() {
            ctx.check()?;
            let registry = ctx
                .api
                .get_registry()
                .await
                .map_err(api("read the registry"))?;
            let key = registry_key(&ns, &name);
            if registry
                .as_ref()
                .and_then(|r| r.data.as_ref())
                .is_some_and(|d| d.contains_key(&key))
            {
                ctx.check()?;
                ctx.api
                    .set_registry_entry(&key, None)
                    .await
                    .map_err(api("remove the registry entry"))?;
            }
            ctx.event(
                mc,
                EventRecord::normal(
                    "Finalized",
                    "Finalize",
                    format!("removed {key} from the registry"),
                ),
            )
            .await;
            ctx.check()?;
            ctx.api
                .set_finalizer(&ns, &name, false)
                .await
                .map_err(api("remove the finalizer"))?;
        }
        return Ok(Outcome::Done);
    }

    if !mc.has_finalizer() {
        // The cached object may lag our own earlier write: decide on a fresh read.
        let Some(fresh) = ctx
            .api
            .get_memcached(&ns, &name)
            .await
            .map_err(api("get memcached"))?
        else {
            tracing::info!(namespace = %ns, name = %name, "memcached not found; nothing to do");
            return Ok(Outcome::Done);
        };
        if !fresh.has_finalizer() && !fresh.is_deleting() {
            ctx.check()?;
            ctx.api
                .set_finalizer(&ns, &name, true)
                .await
                .map_err(api("add the finalizer"))?;
        }
    }

    let Some(deploy) = ctx
        .api
        .get_deployment(&ns, &name)
        .await
        .map_err(api("get deployment"))?
    else {
        let desired = desired_deployment(mc)?;
        ctx.check()?;
        ctx.api
            .create_deployment(&ns, &desired)
            .await
            .map_err(api("create deployment"))?;
        ctx.event(
            mc,
            EventRecord::normal("Created", "Reconcile", format!("created deployment {name}")),
        )
        .await;
        return Ok(Outcome::Requeue);
    };

    let size = mc.size();
    let replicas = deploy.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    if replicas != size {
        ctx.check()?;
        ctx.api
            .scale_deployment(&ns, &name, size)
            .await
            .map_err(api("scale deployment"))?;
        ctx.event(
            mc,
            EventRecord::normal(
                "Scaled",
                "Reconcile",
                format!("scaled deployment {name} from {replicas} to {size}"),
            ),
        )
        .await;
        return Ok(Outcome::Requeue);
    }

    let pods = ctx
        .api
        .list_pods(&ns, &selector(&name))
        .await
        .map_err(api("list pods"))?;
    let status = compute_status(mc, &deploy, &pods, &Time(ctx.clock.wall()));
    if mc.status.as_ref() != Some(&status) {
        ctx.check()?;
        ctx.api
            .update_status(&ns, &name, &status)
            .await
            .map_err(api("update status"))?;
    }

    let key = registry_key(&ns, &name);
    let value = registry_value(size, &status.nodes)?;
    let registry = ctx
        .api
        .get_registry()
        .await
        .map_err(api("read the registry"))?;
    let current = registry
        .as_ref()
        .and_then(|r| r.data.as_ref())
        .and_then(|d| d.get(&key));
    if current != Some(&value) {
        ctx.check()?;
        ctx.api
            .set_registry_entry(&key, Some(&value))
            .await
            .map_err(api("write the registry entry"))?;
    }

    Ok(ctx.resync.map_or(Outcome::Done, Outcome::RequeueAfter))
}

/// Maps a successful outcome to its metric label and the Controller's next action,
/// applying the per-object backoff as controller-runtime does (requeue goes through the
/// rate limiter; done and requeue-after reset it).
pub fn action_for(
    outcome: Outcome,
    backoff: &ItemBackoff<String>,
    key: &String,
) -> (ReconcileResult, Action) {
    match outcome {
        Outcome::Done => {
            backoff.forget(key);
            (ReconcileResult::Success, Action::await_change())
        }
        Outcome::Requeue => (ReconcileResult::Requeue, Action::requeue(backoff.when(key))),
        Outcome::RequeueAfter(d) => {
            backoff.forget(key);
            (ReconcileResult::RequeueAfter, Action::requeue(d))
        }
    }
}

fn object_key(mc: &Memcached) -> String {
    format!("{}/{}", mc.namespace().unwrap_or_default(), mc.name_any())
}

/// kube-runtime reconciler: [`reconcile_memcached`] plus metrics, one log line and the error Event.
///
/// # Errors
/// The reconcile error, after it was counted, logged and (unless the write guard
/// refused) reported as a Warning Event `ReconcileError`.
pub async fn reconcile<A: ClusterApi>(
    mc: Arc<Memcached>,
    ctx: Arc<Context<A>>,
) -> Result<Action, Error> {
    let started = tokio::time::Instant::now();
    let key = object_key(&mc);
    let result = reconcile_memcached(&mc, &ctx).await;
    let took = started.elapsed();
    let ns = mc.namespace().unwrap_or_default();
    let name = mc.name_any();
    match result {
        Ok(outcome) => {
            let (label, action) = action_for(outcome, &ctx.backoff, &key);
            ctx.metrics.observe_reconcile(CONTROLLER_NAME, label, took);
            tracing::info!(
                controller = CONTROLLER_NAME, namespace = %ns, name = %name,
                generation = mc.metadata.generation.unwrap_or(0), result = label.label(),
                requeue_after_ms = requeue_ms(outcome, &ctx.backoff, &key),
                took_ms = took.as_millis() as u64, "reconciled"
            );
            Ok(action)
        }
        Err(error) => {
            ctx.metrics
                .observe_reconcile(CONTROLLER_NAME, ReconcileResult::Error, took);
            tracing::warn!(
                controller = CONTROLLER_NAME, namespace = %ns, name = %name,
                generation = mc.metadata.generation.unwrap_or(0), result = "error",
                error_kind = error.kind(), error = %error_chain(&error),
                took_ms = took.as_millis() as u64, "reconciled"
            );
            if !matches!(error, Error::Guard(_)) {
                ctx.event(
                    &mc,
                    EventRecord::warning("ReconcileError", "Reconcile", error_chain(&error)),
                )
                .await;
            }
            Err(error)
        }
    }
}

fn requeue_ms(outcome: Outcome, backoff: &ItemBackoff<String>, key: &String) -> u64 {
    match outcome {
        Outcome::Done => 0,
        Outcome::Requeue => {
            let n = backoff.failures(key).saturating_sub(1);
            crate::backoff::exponential(crate::backoff::BASE_DELAY, crate::backoff::MAX_DELAY, n)
                .as_millis() as u64
        }
        Outcome::RequeueAfter(d) => d.as_millis() as u64,
    }
}

/// An error and its causes, joined with ": ".
#[must_use]
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        // Many errors (kube's among them) already print their cause: do not repeat it.
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = c.source();
    }
    s
}

/// kube-runtime error policy: requeue after the object's next backoff delay.
pub fn error_policy<A: ClusterApi>(
    mc: Arc<Memcached>,
    _error: &Error,
    ctx: Arc<Context<A>>,
) -> Action {
    Action::requeue(ctx.backoff.when(&object_key(&mc)))
}

/// The trigger predicate for Memcached: its generation, and whether deletion started.
///
/// Status writes change neither, so they never trigger a reconcile.
#[must_use]
pub fn spec_or_deletion(mc: &Memcached) -> Option<u64> {
    let mut h = DefaultHasher::new();
    (
        mc.metadata.generation,
        mc.metadata.deletion_timestamp.is_some(),
    )
        .hash(&mut h);
    Some(h.finish())
}

/// [`ClusterApi`] over the Kubernetes API; the registry lives in `registry_namespace`.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    registry_namespace: String,
}

impl KubeCluster {
    /// The API through `client`, keeping the registry in `registry_namespace`.
    #[must_use]
    pub fn new(client: Client, registry_namespace: &str) -> Self {
        Self {
            client,
            registry_namespace: registry_namespace.into(),
        }
    }

    fn registry(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.registry_namespace)
    }
}

impl ClusterApi for KubeCluster {
    async fn get_memcached(&self, ns: &str, name: &str) -> Result<Option<Memcached>, kube::Error> {
        Api::<Memcached>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
    }

    async fn set_finalizer(&self, ns: &str, name: &str, present: bool) -> Result<(), kube::Error> {
        let api = Api::<Memcached>::namespaced(self.client.clone(), ns);
        let Some(mut mc) = api.get_opt(name).await? else {
            return Ok(());
        };
        let finalizers = mc.metadata.finalizers.get_or_insert_with(Vec::new);
        let has = finalizers.iter().any(|f| f == FINALIZER);
        match (present, has) {
            (true, false) => finalizers.push(FINALIZER.into()),
            (false, true) => finalizers.retain(|f| f != FINALIZER),
            _ => return Ok(()),
        }
        match api.replace(name, &PostParams::default(), &mc).await {
            Ok(_) => Ok(()),
            // Removing the last finalizer can complete the deletion.
            Err(kube::Error::Api(s)) if s.is_not_found() && !present => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn get_deployment(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<Deployment>, kube::Error> {
        Api::<Deployment>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
    }

    async fn create_deployment(&self, ns: &str, d: &Deployment) -> Result<(), kube::Error> {
        Api::<Deployment>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), d)
            .await
            .map(|_| ())
    }

    async fn scale_deployment(
        &self,
        ns: &str,
        name: &str,
        replicas: i32,
    ) -> Result<(), kube::Error> {
        let patch = json!({ "spec": { "replicas": replicas } });
        Api::<Deployment>::namespaced(self.client.clone(), ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }

    async fn list_pods(&self, ns: &str, selector: &str) -> Result<Vec<Pod>, kube::Error> {
        let list = Api::<Pod>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default().labels(selector))
            .await?;
        Ok(list.items)
    }

    async fn update_status(
        &self,
        ns: &str,
        name: &str,
        status: &MemcachedStatus,
    ) -> Result<(), kube::Error> {
        let patch = json!({ "status": status });
        Api::<Memcached>::namespaced(self.client.clone(), ns)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }

    async fn get_registry(&self) -> Result<Option<ConfigMap>, kube::Error> {
        self.registry().get_opt(REGISTRY_CONFIGMAP).await
    }

    async fn set_registry_entry(&self, key: &str, value: Option<&str>) -> Result<(), kube::Error> {
        let api = self.registry();
        let patch = json!({ "data": { key: value } });
        match api
            .patch(
                REGISTRY_CONFIGMAP,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                let Some(value) = value else { return Ok(()) };
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(REGISTRY_CONFIGMAP.into()),
                        namespace: Some(self.registry_namespace.clone()),
                        labels: Some(BTreeMap::from([(
                            "app.kubernetes.io/name".to_owned(),
                            "memcached-operator".to_owned(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    data: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
                    ..ConfigMap::default()
                };
                match api.create(&PostParams::default(), &cm).await {
                    Ok(_) => Ok(()),
                    // Someone created it meanwhile: the retry will patch it.
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// Which namespaces to watch (`--watch-namespace`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchNamespaces {
    /// Every namespace.
    All,
    /// These namespaces, watched together (one watch each).
    Some(Vec<String>),
}

impl WatchNamespaces {
    /// Parses `""` (all), `"a"` or `"a,b,c"`.
    #[must_use]
    pub fn parse(s: &str) -> Self {
        let mut v: Vec<String> = s
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect();
        v.sort();
        v.dedup();
        if v.is_empty() {
            WatchNamespaces::All
        } else {
            WatchNamespaces::Some(v)
        }
    }
}

/// Runs the Memcached controller until `stop` resolves, then lets in-flight reconciles finish.
///
/// One kube-runtime `Controller` per watched namespace (each with its own cache), all
/// sharing `ctx` (and so the backoff and metrics). `max_concurrent` applies to each.
pub async fn run<F>(
    client: Client,
    ctx: Arc<Context<KubeCluster>>,
    namespaces: &WatchNamespaces,
    max_concurrent: u16,
    stop: F,
) where
    F: Future<Output = ()> + Send + Sync + 'static,
{
    let stop = futures::future::FutureExt::shared(Box::pin(stop));
    let scopes: Vec<Option<String>> = match namespaces {
        WatchNamespaces::All => vec![None],
        WatchNamespaces::Some(v) => v.iter().cloned().map(Some).collect(),
    };
    ctx.metrics
        .register_controller(CONTROLLER_NAME, max_concurrent);
    let mut readers = Vec::new();
    let mut runs = Vec::new();
    for scope in scopes {
        let (mc_api, deploy_api, pod_api) = match &scope {
            None => (
                Api::<Memcached>::all(client.clone()),
                Api::<Deployment>::all(client.clone()),
                Api::<Pod>::all(client.clone()),
            ),
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
        };
        let (reader, writer) = reflector::store();
        readers.push(reader.clone());
        let trigger = watcher(mc_api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .applied_objects()
            .predicate_filter(spec_or_deletion, Default::default());
        let metrics = ctx.metrics.clone();
        let known = reader.clone();
        let run = Controller::for_stream(trigger, reader)
            .owns(
                deploy_api,
                watcher::Config::default().labels("app=memcached"),
            )
            .watches(
                pod_api,
                watcher::Config::default().labels("app=memcached"),
                move |pod| memcached_of_pod(&pod).filter(|mc| known.get(mc).is_some()),
            )
            .with_config(ControllerConfig::default().concurrency(max_concurrent))
            .graceful_shutdown_on(stop.clone())
            .run(reconcile, error_policy, ctx.clone())
            .for_each(move |res| {
                observe_controller_result(&metrics, res);
                std::future::ready(())
            });
        runs.push(run);
    }
    // kube-runtime holds its runner until the cache is ready; a cache that never filled
    // (API unreachable) has no reconcile in flight, so there is nothing to wait for.
    let unready_at_stop = async {
        stop.clone().await;
        let ready = readers
            .iter()
            .all(|r| futures::FutureExt::now_or_never(r.wait_until_ready()).is_some());
        if ready {
            std::future::pending::<()>().await;
        }
        tracing::info!(
            controller = CONTROLLER_NAME,
            "stopping before the cache was ready"
        );
    };
    tokio::select! {
        _ = futures::future::join_all(runs) => {}
        () = unready_at_stop => {}
    }
}

type ControllerResult = Result<
    (reflector::ObjectRef<Memcached>, Action),
    kube::runtime::controller::Error<Error, watcher::Error>,
>;

/// Logs what the Controller reports besides reconcile results (those are logged by [`reconcile`]).
fn observe_controller_result(metrics: &Metrics, res: ControllerResult) {
    use kube::runtime::controller::Error as CtlError;
    match res {
        Ok(_) | Err(CtlError::ReconcilerFailed(..)) => {}
        Err(CtlError::ObjectNotFound(obj)) => {
            metrics.observe_reconcile(CONTROLLER_NAME, ReconcileResult::Success, Duration::ZERO);
            tracing::info!(
                controller = CONTROLLER_NAME,
                object = %obj,
                result = "success",
                "memcached not found; nothing to do"
            );
        }
        Err(e) => {
            tracing::warn!(
                controller = CONTROLLER_NAME,
                error = %error_chain(&e),
                "controller error",
            )
        }
    }
}

#[cfg(test)]
mod tests;

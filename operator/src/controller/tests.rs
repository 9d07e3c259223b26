//! Reconcile tests over an in-memory cluster: the four results, the finalizer, status, the registry, the write guard.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::clock::{FakeClock, lock};
use crate::events::MemorySink;
use crate::leader::Leadership;
use crate::leader::fake::{api_error, unavailable};

/// An in-memory cluster with an op log and injectable failures.
#[derive(Default)]
struct FakeCluster {
    memcacheds: Mutex<HashMap<String, Memcached>>,
    deployments: Mutex<HashMap<String, Deployment>>,
    pods: Mutex<Vec<Pod>>,
    registry: Mutex<Option<ConfigMap>>,
    writes: Mutex<Vec<String>>,
    failures: Mutex<HashMap<&'static str, VecDeque<kube::Error>>>,
}

impl FakeCluster {
    fn with(mc: &Memcached) -> Self {
        let f = FakeCluster::default();
        lock(&f.memcacheds).insert(mc.name_any(), mc.clone());
        f
    }
    fn fail_next(&self, op: &'static str, e: kube::Error) {
        lock(&self.failures).entry(op).or_default().push_back(e);
    }
    fn fail(&self, op: &'static str) -> Result<(), kube::Error> {
        match lock(&self.failures)
            .get_mut(op)
            .and_then(VecDeque::pop_front)
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
    fn write(&self, w: String) {
        lock(&self.writes).push(w);
    }
    fn writes(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.writes))
    }
    fn add_pod(&self, name: &str, cr: &str) {
        lock(&self.pods).push(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels(cr)),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        });
    }
    fn set_deploy_status(&self, name: &str, status: DeploymentStatus) {
        if let Some(d) = lock(&self.deployments).get_mut(name) {
            d.status = Some(status);
        }
    }
    fn registry_entry(&self, key: &str) -> Option<String> {
        lock(&self.registry)
            .as_ref()
            .and_then(|r| r.data.as_ref())
            .and_then(|d| d.get(key).cloned())
    }
    fn memcached(&self, name: &str) -> Memcached {
        lock(&self.memcacheds)[name].clone()
    }
}

impl ClusterApi for FakeCluster {
    async fn get_memcached(&self, _ns: &str, name: &str) -> Result<Option<Memcached>, kube::Error> {
        self.fail("get_memcached")?;
        Ok(lock(&self.memcacheds).get(name).cloned())
    }
    async fn set_finalizer(&self, _ns: &str, name: &str, present: bool) -> Result<(), kube::Error> {
        self.fail("set_finalizer")?;
        self.write(format!(
            "{} finalizer",
            if present { "add" } else { "remove" }
        ));
        if let Some(mc) = lock(&self.memcacheds).get_mut(name) {
            mc.metadata.finalizers = present.then(|| vec![FINALIZER.to_owned()]);
        }
        Ok(())
    }
    async fn get_deployment(
        &self,
        _ns: &str,
        name: &str,
    ) -> Result<Option<Deployment>, kube::Error> {
        self.fail("get_deployment")?;
        Ok(lock(&self.deployments).get(name).cloned())
    }
    async fn create_deployment(&self, _ns: &str, d: &Deployment) -> Result<(), kube::Error> {
        self.fail("create_deployment")?;
        self.write("create deployment".into());
        lock(&self.deployments).insert(d.name_any(), d.clone());
        Ok(())
    }
    async fn scale_deployment(
        &self,
        _ns: &str,
        name: &str,
        replicas: i32,
    ) -> Result<(), kube::Error> {
        self.fail("scale_deployment")?;
        self.write(format!("scale deployment to {replicas}"));
        if let Some(d) = lock(&self.deployments).get_mut(name) {
            d.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
        }
        Ok(())
    }
    async fn list_pods(&self, _ns: &str, selector: &str) -> Result<Vec<Pod>, kube::Error> {
        self.fail("list_pods")?;
        let cr = selector.rsplit('=').next().unwrap_or_default().to_owned();
        Ok(lock(&self.pods)
            .iter()
            .filter(|p| p.labels().get("memcached_cr") == Some(&cr))
            .cloned()
            .collect())
    }
    async fn update_status(
        &self,
        _ns: &str,
        name: &str,
        status: &MemcachedStatus,
    ) -> Result<(), kube::Error> {
        self.fail("update_status")?;
        self.write("update status".into());
        if let Some(mc) = lock(&self.memcacheds).get_mut(name) {
            mc.status = Some(status.clone());
        }
        Ok(())
    }
    async fn get_registry(&self) -> Result<Option<ConfigMap>, kube::Error> {
        self.fail("get_registry")?;
        Ok(lock(&self.registry).clone())
    }
    async fn set_registry_entry(&self, key: &str, value: Option<&str>) -> Result<(), kube::Error> {
        self.fail("set_registry_entry")?;
        self.write(format!(
            "{} registry {key}",
            if value.is_some() { "set" } else { "remove" }
        ));
        let mut r = lock(&self.registry);
        let data = r
            .get_or_insert_with(ConfigMap::default)
            .data
            .get_or_insert_with(BTreeMap::new);
        match value {
            Some(v) => data.insert(key.into(), v.into()),
            None => data.remove(key),
        };
        Ok(())
    }
}

struct Harness {
    ctx: Arc<Context<FakeCluster>>,
    events: MemorySink,
}

impl Harness {
    fn new(mc: &Memcached) -> Self {
        Self::with_guard(mc, WriteGuard::off())
    }
    fn with_guard(mc: &Memcached, guard: WriteGuard) -> Self {
        let events = MemorySink::new();
        let ctx = Arc::new(Context {
            api: FakeCluster::with(mc),
            recorder: Recorder::new(Arc::new(events.clone())),
            metrics: Metrics::new(),
            guard,
            backoff: ItemBackoff::default(),
            resync: None,
            clock: Arc::new(FakeClock::new()),
        });
        ctx.metrics.register_controller(CONTROLLER_NAME, 1);
        Harness { ctx, events }
    }
    fn api(&self) -> &FakeCluster {
        &self.ctx.api
    }
    /// Reconciles the stored object through the kube-runtime adapter, as the Controller would.
    async fn reconcile(&self, name: &str) -> Result<Action, Error> {
        let mc = self.api().memcached(name);
        let res = reconcile(Arc::new(mc.clone()), self.ctx.clone()).await;
        match res {
            Ok(a) => Ok(a),
            Err(e) => {
                let a = error_policy(Arc::new(mc), &e, self.ctx.clone());
                assert!(a != Action::await_change());
                Err(e)
            }
        }
    }
    fn count(&self, r: ReconcileResult) -> u64 {
        self.ctx.metrics.reconcile_total(CONTROLLER_NAME, r)
    }
    /// Drives the deployment to a ready state with pods, as the cluster would.
    fn roll_out(&self, name: &str, size: i32) {
        for i in 0..size {
            self.api()
                .add_pod(&format!("{name}-pod-{}", size - i), name);
        }
        self.api().set_deploy_status(name, ready_status(size));
    }
}

fn ready_status(n: i32) -> DeploymentStatus {
    DeploymentStatus {
        replicas: Some(n),
        ready_replicas: Some(n),
        available_replicas: Some(n),
        updated_replicas: Some(n),
        ..DeploymentStatus::default()
    }
}

fn now() -> Time {
    Time(Timestamp::from_second(1_767_225_600).unwrap())
}

// ---- the desired Deployment ----

#[test]
fn the_desired_deployment_runs_memcached_with_size_replicas_owned_by_the_cr() {
    let mc = Memcached::test();
    let d = desired_deployment(&mc).unwrap();
    assert_eq!(d.metadata.name.as_deref(), Some("test"));
    assert_eq!(d.metadata.namespace.as_deref(), Some("default"));
    let owner = &d.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Memcached", "test", Some(true))
    );
    assert_eq!(owner.api_version, "cache.example.com/v1alpha1");
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(3));
    let expected = labels("test");
    assert_eq!(spec.selector.match_labels.as_ref(), Some(&expected));
    assert_eq!(expected["app"], "memcached");
    assert_eq!(expected["memcached_cr"], "test");
    let pod = spec.template.spec.unwrap();
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("memcached:1.6-alpine"));
    assert_eq!(
        c.command.as_deref().unwrap(),
        ["memcached", "-m", "64", "-o", "modern", "-v"]
    );
    assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 11211);
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(
        (sc.run_as_non_root, sc.allow_privilege_escalation),
        (Some(true), Some(false))
    );
    assert_eq!(spec.template.metadata.unwrap().labels, Some(expected));
}

#[test]
fn a_deployment_cannot_be_built_for_an_object_without_a_uid() {
    let mut mc = Memcached::test();
    mc.metadata.uid = None;
    assert!(matches!(
        desired_deployment(&mc),
        Err(Error::MissingMetadata("uid"))
    ));
}

// ---- the four results ----

#[tokio::test]
async fn a_new_memcached_gets_the_finalizer_and_a_deployment_then_requeues() {
    let h = Harness::new(&Memcached::test());
    let action = h.reconcile("test").await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_millis(5)));
    assert_eq!(h.api().writes(), ["add finalizer", "create deployment"]);
    assert!(h.api().memcached("test").has_finalizer());
    assert_eq!(h.count(ReconcileResult::Requeue), 1);
    assert_eq!(h.events.reasons(), ["Created"]);
}

#[tokio::test]
async fn a_size_change_scales_the_deployment_then_requeues() {
    let h = Harness::new(&Memcached::test().finalized());
    h.reconcile("test").await.unwrap();
    h.api().writes();
    lock(&h.api().memcacheds).insert("test".into(), Memcached::test().finalized().with_size(5));
    let action = h.reconcile("test").await.unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_millis(10)),
        "requeue goes through the rate limiter"
    );
    assert_eq!(h.api().writes(), ["scale deployment to 5"]);
    assert_eq!(h.count(ReconcileResult::Requeue), 2);
    assert_eq!(h.events.reasons(), ["Created", "Scaled"]);
}

#[tokio::test]
async fn a_steady_memcached_gets_its_status_and_registry_entry_and_is_done() {
    let h = Harness::new(&Memcached::test().finalized());
    h.reconcile("test").await.unwrap();
    h.roll_out("test", 3);
    h.api().writes();
    let action = h.reconcile("test").await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(
        h.api().writes(),
        ["update status", "set registry default.test"]
    );
    let status = h.api().memcached("test").status.unwrap();
    assert_eq!(
        status.nodes,
        ["test-pod-1", "test-pod-2", "test-pod-3"],
        "sorted"
    );
    assert_eq!(
        h.api().registry_entry("default.test").unwrap(),
        r#"{"nodes":["test-pod-1","test-pod-2","test-pod-3"],"size":3}"#
    );
    assert_eq!(h.count(ReconcileResult::Success), 1);
    // Nothing changed: nothing is written.
    assert_eq!(h.reconcile("test").await.unwrap(), Action::await_change());
    assert!(h.api().writes().is_empty());
}

#[tokio::test]
async fn with_a_resync_period_a_done_reconcile_requeues_after_it() {
    let mc = Memcached::test().finalized();
    let mut h = Harness::new(&mc);
    Arc::get_mut(&mut h.ctx).unwrap().resync = Some(Duration::from_secs(600));
    h.reconcile("test").await.unwrap();
    h.roll_out("test", 3);
    assert_eq!(
        h.reconcile("test").await.unwrap(),
        Action::requeue(Duration::from_secs(600))
    );
    assert_eq!(h.count(ReconcileResult::RequeueAfter), 1);
}

#[tokio::test]
async fn an_api_error_is_returned_counted_reported_and_retried_with_growing_backoff() {
    let h = Harness::new(&Memcached::test().finalized());
    h.reconcile("test").await.unwrap();
    h.api().fail_next("list_pods", unavailable());
    h.api().fail_next("list_pods", unavailable());
    let err = h.reconcile("test").await.unwrap_err();
    assert!(matches!(
        err,
        Error::Api {
            action: "list pods",
            ..
        }
    ));
    assert_eq!(
        error_chain(&err).split(": ").next(),
        Some("failed to list pods")
    );
    assert!(h.reconcile("test").await.is_err());
    assert_eq!(h.count(ReconcileResult::Error), 2);
    assert_eq!(
        h.events.reasons(),
        ["Created", "ReconcileError", "ReconcileError"]
    );
    let warning = &h.events.events()[1].1;
    assert_eq!(warning.type_, crate::events::EventType::Warning);
    assert!(
        warning.message.contains("failed to list pods"),
        "{}",
        warning.message
    );
    // Backoff: the create's requeue counted 5 ms, the errors 10 ms and 20 ms; a success resets it.
    assert_eq!(h.ctx.backoff.failures(&"default/test".to_owned()), 3);
    h.reconcile("test").await.unwrap();
    assert_eq!(h.ctx.backoff.failures(&"default/test".to_owned()), 0);
}

#[tokio::test]
async fn the_error_policy_requeues_after_five_milliseconds_doubling() {
    let h = Harness::new(&Memcached::test());
    let mc = Arc::new(Memcached::test());
    let e = Error::MissingMetadata("namespace");
    let delays: Vec<_> = (0..4)
        .map(|_| error_policy(mc.clone(), &e, h.ctx.clone()))
        .collect();
    assert_eq!(
        delays,
        [5, 10, 20, 40].map(|ms| Action::requeue(Duration::from_millis(ms)))
    );
}

#[test]
fn done_and_requeue_after_reset_the_backoff_and_requeue_does_not() {
    let b = ItemBackoff::default();
    let k = "ns/a".to_owned();
    assert_eq!(
        action_for(Outcome::Requeue, &b, &k),
        (
            ReconcileResult::Requeue,
            Action::requeue(Duration::from_millis(5))
        )
    );
    assert_eq!(
        action_for(Outcome::Requeue, &b, &k).1,
        Action::requeue(Duration::from_millis(10))
    );
    assert_eq!(
        action_for(Outcome::Done, &b, &k),
        (ReconcileResult::Success, Action::await_change())
    );
    assert_eq!(b.failures(&k), 0);
    b.when(&k);
    assert_eq!(
        action_for(Outcome::RequeueAfter(Duration::from_secs(60)), &b, &k),
        (
            ReconcileResult::RequeueAfter,
            Action::requeue(Duration::from_secs(60))
        )
    );
    assert_eq!(b.failures(&k), 0);
}

#[tokio::test]
async fn a_memcached_deleted_before_its_first_reconcile_is_done() {
    let h = Harness::new(&Memcached::test());
    lock(&h.api().memcacheds).clear();
    let mc = Memcached::test();
    assert_eq!(
        reconcile_memcached(&mc, &h.ctx).await.unwrap(),
        Outcome::Done
    );
    assert!(h.api().writes().is_empty());
}

#[tokio::test]
async fn a_deleted_deployment_is_recreated() {
    let h = Harness::new(&Memcached::test().finalized());
    h.reconcile("test").await.unwrap();
    h.roll_out("test", 3);
    h.reconcile("test").await.unwrap();
    lock(&h.api().deployments).clear();
    h.api().writes();
    assert_eq!(
        h.reconcile("test").await.unwrap(),
        Action::requeue(Duration::from_millis(5))
    );
    assert_eq!(h.api().writes(), ["create deployment"]);
}

// ---- the finalizer ----

#[tokio::test]
async fn deletion_removes_the_registry_entry_records_finalized_and_removes_the_finalizer() {
    let h = Harness::new(&Memcached::test().finalized());
    h.reconcile("test").await.unwrap();
    h.roll_out("test", 3);
    h.reconcile("test").await.unwrap();
    assert!(h.api().registry_entry("default.test").is_some());
    let deleting = h.api().memcached("test").deleting();
    lock(&h.api().memcacheds).insert("test".into(), deleting);
    h.api().writes();
    assert_eq!(h.reconcile("test").await.unwrap(), Action::await_change());
    assert_eq!(
        h.api().writes(),
        ["remove registry default.test", "remove finalizer"]
    );
    assert!(h.api().registry_entry("default.test").is_none());
    assert!(!h.api().memcached("test").has_finalizer());
    assert_eq!(
        h.events.reasons().last().map(String::as_str),
        Some("Finalized")
    );
}

#[tokio::test]
async fn a_failed_cleanup_keeps_the_finalizer_and_returns_the_error() {
    let h = Harness::new(&Memcached::test().finalized());
    h.reconcile("test").await.unwrap();
    h.roll_out("test", 3);
    h.reconcile("test").await.unwrap();
    let deleting = h.api().memcached("test").deleting();
    lock(&h.api().memcacheds).insert("test".into(), deleting);
    h.api().writes();
    h.api().fail_next(
        "set_registry_entry",
        api_error(403, "Forbidden", "configmaps is forbidden"),
    );
    let err = h.reconcile("test").await.unwrap_err();
    assert!(matches!(
        err,
        Error::Api {
            action: "remove the registry entry",
            ..
        }
    ));
    assert!(h.api().memcached("test").has_finalizer());
    assert!(h.api().writes().is_empty());
    // The retry succeeds.
    h.reconcile("test").await.unwrap();
    assert!(!h.api().memcached("test").has_finalizer());
}

#[tokio::test]
async fn a_deleting_memcached_without_our_finalizer_is_left_alone() {
    let h = Harness::new(&Memcached::test().deleting());
    assert_eq!(h.reconcile("test").await.unwrap(), Action::await_change());
    assert!(h.api().writes().is_empty());
}

#[tokio::test]
async fn a_stale_cached_object_does_not_add_the_finalizer_twice() {
    let h = Harness::new(&Memcached::test().finalized());
    // The cache still shows the object without the finalizer; the API has it.
    let stale = Memcached::test();
    assert_eq!(
        reconcile_memcached(&stale, &h.ctx).await.unwrap(),
        Outcome::Requeue
    );
    assert_eq!(h.api().writes(), ["create deployment"]);
}

// ---- the write guard ----

#[tokio::test]
async fn a_replica_that_does_not_lead_writes_nothing_and_records_no_event() {
    let leadership = Leadership::new("lock", Metrics::new());
    let guard = WriteGuard::leading(
        leadership,
        Arc::new(FakeClock::new()),
        Some(Duration::from_secs(10)),
    );
    let h = Harness::with_guard(&Memcached::test(), guard);
    let err = h.reconcile("test").await.unwrap_err();
    assert!(matches!(err, Error::Guard(GuardError::NotLeading)));
    assert!(h.api().writes().is_empty());
    assert!(h.events.events().is_empty());
    assert_eq!(h.count(ReconcileResult::Error), 1);
}

#[tokio::test]
async fn a_leader_past_its_renew_deadline_aborts_before_the_first_write() {
    let clock = FakeClock::new();
    let leadership = Leadership::new("lock", Metrics::new());
    leadership.start(clock.now());
    let guard = WriteGuard::leading(
        leadership,
        Arc::new(clock.clone()),
        Some(Duration::from_secs(10)),
    );
    let h = Harness::with_guard(&Memcached::test().finalized(), guard);
    h.reconcile("test").await.unwrap();
    clock.advance(Duration::from_secs(10));
    lock(&h.api().memcacheds).insert("test".into(), Memcached::test().finalized().with_size(1));
    h.api().writes();
    let err = h.reconcile("test").await.unwrap_err();
    assert!(matches!(err, Error::Guard(GuardError::NotConfirmed { .. })));
    assert!(h.api().writes().is_empty());
}

// ---- status ----

fn deployment_with(status: DeploymentStatus) -> Deployment {
    Deployment {
        status: Some(status),
        ..Deployment::default()
    }
}

fn cond<'a>(s: &'a MemcachedStatus, t: &str) -> &'a Condition {
    s.conditions.iter().find(|c| c.type_ == t).unwrap()
}

#[test]
fn a_fully_rolled_out_memcached_is_available_complete_and_not_degraded() {
    let s = compute_status(
        &Memcached::test(),
        &deployment_with(ready_status(3)),
        &[],
        &now(),
    );
    assert_eq!(
        (
            cond(&s, "Available").status.as_str(),
            cond(&s, "Available").reason.as_str()
        ),
        ("True", "MinimumReplicasAvailable")
    );
    assert_eq!(
        (
            cond(&s, "Progressing").status.as_str(),
            cond(&s, "Progressing").reason.as_str()
        ),
        ("False", "ReconcileComplete")
    );
    assert_eq!(
        (
            cond(&s, "Degraded").status.as_str(),
            cond(&s, "Degraded").reason.as_str()
        ),
        ("False", "AsExpected")
    );
    assert!(
        s.conditions
            .iter()
            .all(|c| c.observed_generation == Some(1))
    );
}

#[test]
fn a_scaling_memcached_is_progressing_and_unavailable() {
    let s = compute_status(
        &Memcached::test(),
        &deployment_with(ready_status(1)),
        &[],
        &now(),
    );
    assert_eq!(
        (
            cond(&s, "Available").status.as_str(),
            cond(&s, "Available").reason.as_str()
        ),
        ("False", "MinimumReplicasUnavailable")
    );
    assert_eq!(
        (
            cond(&s, "Progressing").status.as_str(),
            cond(&s, "Progressing").reason.as_str()
        ),
        ("True", "Scaling")
    );
}

#[test]
fn a_replica_failure_or_missed_progress_deadline_is_degraded() {
    let mut st = ready_status(1);
    st.conditions = Some(vec![DeploymentCondition {
        type_: "ReplicaFailure".into(),
        status: "True".into(),
        message: Some("exceeded quota".into()),
        ..DeploymentCondition::default()
    }]);
    let s = compute_status(&Memcached::test(), &deployment_with(st), &[], &now());
    let d = cond(&s, "Degraded");
    assert_eq!(
        (d.status.as_str(), d.reason.as_str(), d.message.as_str()),
        ("True", "ReplicaFailure", "exceeded quota")
    );

    let mut st = ready_status(1);
    st.conditions = Some(vec![DeploymentCondition {
        type_: "Progressing".into(),
        status: "False".into(),
        reason: Some("ProgressDeadlineExceeded".into()),
        ..DeploymentCondition::default()
    }]);
    let s = compute_status(&Memcached::test(), &deployment_with(st), &[], &now());
    assert_eq!(cond(&s, "Degraded").reason, "ProgressDeadlineExceeded");
}

#[test]
fn a_condition_keeps_its_transition_time_while_its_status_is_unchanged() {
    let first = compute_status(
        &Memcached::test(),
        &deployment_with(ready_status(3)),
        &[],
        &now(),
    );
    let later = Time(Timestamp::from_second(1_767_225_900).unwrap());
    let mc = Memcached::test().with_status(first.clone());
    let same = compute_status(&mc, &deployment_with(ready_status(3)), &[], &later);
    assert_eq!(same, first, "no change, so no status write");
    let scaled = compute_status(&mc, &deployment_with(ready_status(2)), &[], &later);
    assert_eq!(cond(&scaled, "Available").last_transition_time, later);
    assert_eq!(cond(&scaled, "Degraded").last_transition_time, now());
}

// ---- triggers ----

#[test]
fn status_writes_do_not_change_the_trigger_but_spec_changes_and_deletion_do() {
    let mc = Memcached::test();
    let with_status = mc.clone().with_status(MemcachedStatus {
        nodes: vec!["a".into()],
        conditions: vec![],
    });
    assert_eq!(spec_or_deletion(&mc), spec_or_deletion(&with_status));
    assert_eq!(
        spec_or_deletion(&mc),
        spec_or_deletion(&mc.clone().finalized())
    );
    assert_ne!(
        spec_or_deletion(&mc),
        spec_or_deletion(&mc.clone().with_size(4))
    );
    assert_ne!(
        spec_or_deletion(&mc),
        spec_or_deletion(&mc.clone().deleting())
    );
}

#[test]
fn watch_namespaces_parse_empty_one_or_a_set() {
    assert_eq!(WatchNamespaces::parse(""), WatchNamespaces::All);
    assert_eq!(WatchNamespaces::parse(" , "), WatchNamespaces::All);
    assert_eq!(
        WatchNamespaces::parse("a"),
        WatchNamespaces::Some(vec!["a".into()])
    );
    assert_eq!(
        WatchNamespaces::parse("b, a,b"),
        WatchNamespaces::Some(vec!["a".into(), "b".into()])
    );
}

#[test]
fn the_registry_key_is_namespace_dot_name() {
    assert_eq!(registry_key("ns", "cache"), "ns.cache");
    assert_eq!(
        registry_value(2, &["a".into(), "b".into()]).unwrap(),
        r#"{"nodes":["a","b"],"size":2}"#
    );
}

fn memcached_pod(name: &str, terminating: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            labels: Some(labels("cache")),
            deletion_timestamp: terminating.then(now),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

#[test]
fn the_status_lists_the_pods_that_are_not_terminating() {
    let pods = [
        memcached_pod("cache-new-b", false),
        memcached_pod("cache-old-a", true),
        memcached_pod("cache-new-a", false),
    ];
    let s = compute_status(
        &Memcached::test(),
        &deployment_with(ready_status(2)),
        &pods,
        &now(),
    );
    assert_eq!(s.nodes, ["cache-new-a", "cache-new-b"]);
}

#[test]
fn a_pod_maps_to_the_memcached_named_by_its_label_in_its_namespace() {
    let mc = memcached_of_pod(&memcached_pod("cache-x", false)).unwrap();
    assert_eq!(
        (mc.name.as_str(), mc.namespace.as_deref()),
        ("cache", Some("ns"))
    );
    assert!(memcached_of_pod(&Pod::default()).is_none());
}

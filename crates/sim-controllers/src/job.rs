//! The Job controller: runs a Job's pods to `completions` with `parallelism` at a time, in
//! the NonIndexed and Indexed completion modes, counts finished pods through the
//! `batch.kubernetes.io/job-tracking` finalizer, and finishes the Job with the conditions,
//! counters and Events of upstream's `pkg/controller/job` (Kubernetes 1.34).
//!
//! # Guarantees
//! - The Job's pods are those its selector matches: orphans are adopted (controller
//!   reference and tracking finalizer added), its pods it no longer matches released.
//! - A pod is counted once: it is listed in `status.uncountedTerminatedPods` before its
//!   finalizer is removed, and moved to `succeeded`/`failed` after.
//! - A finished Job gets its interim condition first (`SuccessCriteriaMet`,
//!   `FailureTarget`), then, once no pod is uncounted or terminating, `Complete` or
//!   `Failed` with the same reason and message.
//! - Failures: `backoffLimit` (with restart counts under `restartPolicy: OnFailure`),
//!   `activeDeadlineSeconds`, and `podFailurePolicy` (FailJob, Ignore, Count on exit codes
//!   and pod conditions); a failed pod is replaced after the pod-failure back-off
//!   ([`Settings`]: 10 s doubling, at most 6 min upstream).
//! - `suspend` deletes the active pods (uncounted) and keeps the `Suspended` condition;
//!   resuming resets `startTime`.
//! - An Indexed Job's `successPolicy` ends it as succeeded once a rule matches; its
//!   remaining pods are deleted, uncounted. With `backoffLimitPerIndex`, each index
//!   counts its failures in its pods' annotations and backs off on its own; an index past
//!   its limit (or failed by a FailIndex rule) is listed in `failedIndexes`, and
//!   `maxFailedIndexes` or failed indexes with no index left to run fail the Job.
//!
//! # Caveats
//! - No metrics; Jobs managed by another controller (`spec.managedBy`) are left alone.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::batch::v1::{
    Job, JobCondition, JobStatus, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    SuccessPolicy, UncountedTerminatedPods,
};
use k8s_openapi::api::core::v1::{
    ContainerStatus, EnvVar, EnvVarSource, ObjectFieldSelector, Pod, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::events::{EventType, Recorder};
use super::expectations::Expectations;
use super::informer::{AbortOnDrop, Cache, Change, ObjectKey};
use super::queue::Queue;
use super::support::{
    api_message, controller_of, controller_ref, has_finalizer, is_active, is_conflict, is_deleting,
    is_not_found, is_ready, is_terminal, now, phase, plus_seconds, selects,
};

/// The finalizer that keeps a pod until the controller has counted it.
pub(crate) const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The annotation and label of an Indexed Job's pod that carry its index.
pub(crate) const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The annotation of an Indexed Job's pod with the failures its index had before it.
const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// The annotation with the failures of the index that a podFailurePolicy ignored.
const INDEX_IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";
/// The environment variable an Indexed Job's containers read their index from.
const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
/// The value of `spec.managedBy` that names this controller.
const MANAGED_BY_JOB_CONTROLLER: &str = "kubernetes.io/job-controller";
/// Most pods listed in `uncountedTerminatedPods` at a time (upstream's
/// `MaxUncountedPods`), which keeps the status small and one sync's finalizer removals
/// bounded.
const MAX_UNCOUNTED_PODS: usize = 500;
/// Most pods created or deleted in one sync (upstream's `MaxPodCreateDeletePerSync`).
const MAX_POD_CREATE_DELETE_PER_SYNC: usize = 500;
/// How long pod events and status-only Job updates wait before a sync, so that one sync
/// sees them together (upstream's `SyncJobBatchPeriod`).
const SYNC_JOB_BATCH_PERIOD: Duration = Duration::from_secs(1);
/// The longest a name given to `generateName` may be (63 less the 5 random characters).
const MAX_GENERATED_NAME_LENGTH: usize = 58;

/// The pod-failure back-off (see [`super::ControllerConfig`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// The delay before a failed pod is replaced (upstream's `DefaultJobPodFailureBackOff`,
    /// 10 s); it doubles with each further failure since the last success.
    pub(crate) pod_failure_backoff: Duration,
    /// The longest such delay (`MaxJobPodFailureBackOff`, 6 min).
    pub(crate) max_pod_failure_backoff: Duration,
}

/// Errors of one Job sync (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
    /// Some pods could not be created, deleted or released from the finalizer.
    #[error("{failed} pod {verb}s failed")]
    Pods {
        /// `create`, `delete` or `finalizer removal`.
        verb: &'static str,
        /// How many failed.
        failed: usize,
        /// The first failure.
        #[source]
        first: kube::Error,
    },
}

/// The pods whose finalizer removal was sent and not yet seen, per Job (upstream's
/// `finalizerExpectations`): they must not be counted twice meanwhile.
#[derive(Default)]
struct FinalizerExpectations(Mutex<HashMap<ObjectKey, HashSet<String>>>);

impl FinalizerExpectations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, HashSet<String>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn expected(&self, key: &ObjectKey) -> HashSet<String> {
        self.lock().get(key).cloned().unwrap_or_default()
    }

    fn expect(&self, key: &ObjectKey, uid: &str) {
        self.lock()
            .entry(key.clone())
            .or_default()
            .insert(uid.to_string());
    }

    fn observed(&self, key: &ObjectKey, uid: &str) {
        let mut all = self.lock();
        if let Some(uids) = all.get_mut(key) {
            uids.remove(uid);
            if uids.is_empty() {
                all.remove(key);
            }
        }
    }

    fn forget(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }
}

/// Failures since the last success and the time of the latest (upstream's
/// `backoffRecord`), which decide how long a failed pod's replacement waits.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct BackoffRecord {
    failures_after_last_success: u32,
    last_failure_time: Option<Timestamp>,
}

impl BackoffRecord {
    /// The record after `succeeded` and `failed` pods newly finished (upstream's
    /// `newBackoffRecord`).
    fn after(&self, succeeded: &[Arc<Pod>], failed: &[Arc<Pod>]) -> BackoffRecord {
        let mut failed_times: Vec<Timestamp> = failed.iter().map(|p| finished_time(p)).collect();
        failed_times.sort();
        if succeeded.is_empty() {
            let Some(last) = failed_times.last() else {
                return self.clone();
            };
            return BackoffRecord {
                failures_after_last_success: self.failures_after_last_success
                    + u32::try_from(failed_times.len()).unwrap_or(u32::MAX),
                last_failure_time: Some(*last),
            };
        }
        let last_success = succeeded.iter().map(|p| finished_time(p)).max();
        let mut record = BackoffRecord::default();
        for failed_at in failed_times.iter().rev() {
            if Some(*failed_at) <= last_success {
                break;
            }
            record.last_failure_time.get_or_insert(*failed_at);
            record.failures_after_last_success += 1;
        }
        record
    }

    /// How long from `now` until a pod may be created again (upstream's
    /// `getRemainingTimeForFailuresCount`).
    pub(crate) fn remaining(&self, settings: &Settings, now: &Timestamp) -> Duration {
        let Some(last) = self
            .last_failure_time
            .filter(|_| self.failures_after_last_success > 0)
        else {
            return Duration::ZERO;
        };
        let mut backoff = settings.pod_failure_backoff;
        for _ in 1..self.failures_after_last_success {
            backoff = backoff.saturating_mul(2);
            if backoff >= settings.max_pod_failure_backoff {
                backoff = settings.max_pod_failure_backoff;
                break;
            }
        }
        let elapsed = now.duration_since(last);
        let elapsed = if elapsed.is_negative() {
            Duration::ZERO
        } else {
            elapsed.unsigned_abs()
        };
        backoff.saturating_sub(elapsed)
    }
}

/// When a pod finished: its containers' latest finish, else its Ready=False transition,
/// else its deletion, else its creation (upstream's `getFinishedTime`).
fn finished_time(pod: &Pod) -> Timestamp {
    let status = pod.status.as_ref();
    let containers: Vec<&ContainerStatus> = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .collect();
    let finishes: Option<Vec<Timestamp>> = containers
        .iter()
        .map(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .and_then(|t| t.finished_at.as_ref())
                .map(|t| t.0)
        })
        .collect();
    if let Some(latest) = finishes.and_then(|f| f.into_iter().max()) {
        return latest;
    }
    if let Some(t) = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready" && c.status == "False"))
        .and_then(|c| c.last_transition_time.as_ref())
    {
        return t.0;
    }
    if let Some(deleted) = &pod.metadata.deletion_timestamp {
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        return plus_seconds(&deleted.0, -grace);
    }
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map_or_else(Timestamp::now, |t| t.0)
}

struct Controller {
    client: Client,
    jobs: Cache<Job>,
    pods: Cache<Pod>,
    queue: Queue<ObjectKey>,
    expectations: Expectations,
    finalizers: FinalizerExpectations,
    backoffs: Mutex<HashMap<ObjectKey, BackoffRecord>>,
    recorder: Recorder,
    settings: Settings,
}

/// Subscribes the controller to the shared caches and starts its worker.
pub(crate) fn start(
    client: Client,
    jobs: &Cache<Job>,
    pods: &Cache<Pod>,
    settings: Settings,
) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        recorder: Recorder::new(client.clone(), "job-controller"),
        client,
        jobs: jobs.clone(),
        pods: pods.clone(),
        queue: Queue::new(),
        expectations: Expectations::default(),
        finalizers: FinalizerExpectations::default(),
        backoffs: Mutex::new(HashMap::new()),
        settings,
    });
    let c = controller.clone();
    jobs.subscribe(move |change| c.job_changed(change));
    let c = controller.clone();
    pods.subscribe(move |change| c.pod_changed(change));
    AbortOnDrop::spawn(async move { controller.run().await })
}

/// The Job a pod's controller reference names, as a key.
fn job_of(pod: &Pod) -> Option<ObjectKey> {
    let r = controller_of(&pod.metadata)?;
    (r.kind == "Job" && r.api_version.starts_with("batch/")).then(|| {
        ObjectKey::new(
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            &r.name,
        )
    })
}

fn uid_of(meta: &ObjectMeta) -> String {
    meta.uid.clone().unwrap_or_default()
}

impl Controller {
    /// A new, deleted or respecified Job is synced at once; a status-only change after
    /// the batch period (upstream's `updateJob`).
    fn job_changed(&self, change: &Change<Job>) {
        let key = ObjectKey::of(change.object().as_ref());
        match change {
            Change::Applied {
                old: Some(old),
                new,
            } if !is_finished(new) && old.metadata.generation == new.metadata.generation => {
                self.queue.add_after(key, SYNC_JOB_BATCH_PERIOD);
            }
            _ => self.queue.add(key),
        }
        if let Change::Applied {
            old: Some(old),
            new,
        } = change
            && let Some(start) = new.status.as_ref().and_then(|s| s.start_time.as_ref())
            && let Some(deadline) = spec_of(new).active_deadline_seconds
            && spec_of(old).active_deadline_seconds != Some(deadline)
        {
            let key = ObjectKey::of(new.as_ref());
            let at = plus_seconds(&start.0, deadline);
            self.queue
                .add_after(key, until_from(&Timestamp::now(), &at));
        }
    }

    fn pod_changed(&self, change: &Change<Pod>) {
        let pod = change.object();
        let Some(key) = job_of(pod) else {
            // An orphan: the Jobs whose selector matches it may adopt it.
            if let Change::Applied { new, .. } = change
                && controller_of(&new.metadata).is_none()
            {
                let namespace = new.metadata.namespace.as_deref().unwrap_or_default();
                let labels = new.metadata.labels.clone().unwrap_or_default();
                for job in self.jobs.list_in(namespace) {
                    if selects(spec_of(&job).selector.as_ref(), &labels) {
                        self.queue
                            .add_after(ObjectKey::of(job.as_ref()), SYNC_JOB_BATCH_PERIOD);
                    }
                }
            }
            return;
        };
        let uid = uid_of(&pod.metadata);
        match change {
            Change::Applied { old: None, new } => {
                self.expectations.creation_observed(&key);
                if is_deleting(&new.metadata) {
                    self.expectations.deletion_observed(&key, &uid);
                }
                if !has_finalizer(&new.metadata, TRACKING_FINALIZER) {
                    self.finalizers.observed(&key, &uid);
                }
            }
            Change::Applied { new, .. } => {
                if is_deleting(&new.metadata) {
                    self.expectations.deletion_observed(&key, &uid);
                }
                if !has_finalizer(&new.metadata, TRACKING_FINALIZER) {
                    self.finalizers.observed(&key, &uid);
                }
            }
            Change::Deleted(_) => {
                self.expectations.deletion_observed(&key, &uid);
                self.finalizers.observed(&key, &uid);
            }
        }
        self.queue.add_after(key, SYNC_JOB_BATCH_PERIOD);
    }

    async fn run(self: Arc<Self>) {
        self.jobs.wait_ready().await;
        self.pods.wait_ready().await;
        loop {
            let key = self.queue.next().await;
            let outcome = self.sync(&key).await;
            if let Some(error) = self.queue.settle(&key, outcome) {
                tracing::debug!(job = %key, error = %super::support::error_chain(&error), "job sync failed; retrying");
            }
        }
    }

    fn pods_api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Removes the tracking finalizer from `pods`; true for each pod that no longer has it.
    async fn remove_finalizers(
        &self,
        key: &ObjectKey,
        pods: &[Arc<Pod>],
    ) -> (Vec<bool>, Option<Error>) {
        let api = self.pods_api(&key.namespace);
        for pod in pods {
            self.finalizers.expect(key, &uid_of(&pod.metadata));
        }
        let patch = json!({"metadata": {
            "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]
        }});
        let results = join_all(pods.iter().map(|pod| {
            let api = api.clone();
            let patch = patch.clone();
            let name = pod.metadata.name.clone().unwrap_or_default();
            async move {
                api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
                    .await
            }
        }))
        .await;
        let mut done = Vec::new();
        let mut failure: Option<(usize, kube::Error)> = None;
        for (pod, result) in pods.iter().zip(results) {
            match result {
                Ok(_) => done.push(true),
                Err(e) if is_not_found(&e) => {
                    self.finalizers.observed(key, &uid_of(&pod.metadata));
                    done.push(true);
                }
                Err(e) => {
                    self.finalizers.observed(key, &uid_of(&pod.metadata));
                    done.push(false);
                    match failure.as_mut() {
                        Some((n, _)) => *n += 1,
                        None => failure = Some((1, e)),
                    }
                }
            }
        }
        let error = failure.map(|(failed, first)| Error::Pods {
            verb: "finalizer removal",
            failed,
            first,
        });
        (done, error)
    }

    /// Releases the pods that still carry the tracking finalizer although their Job is
    /// gone or finished (upstream's orphan-pod handling).
    async fn release_pods(&self, key: &ObjectKey, live_uid: Option<&str>) -> Result<(), Error> {
        let held: Vec<Arc<Pod>> = self
            .pods
            .list_in(&key.namespace)
            .into_iter()
            .filter(|p| has_finalizer(&p.metadata, TRACKING_FINALIZER))
            .filter(|p| {
                controller_of(&p.metadata).is_some_and(|r| {
                    r.kind == "Job" && r.name == key.name && live_uid.is_none_or(|uid| uid == r.uid)
                })
            })
            .collect();
        if held.is_empty() {
            return Ok(());
        }
        match self.remove_finalizers(key, &held).await.1 {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn sync(&self, key: &ObjectKey) -> Result<Option<Duration>, Error> {
        let Some(shared) = self.jobs.get(&key.namespace, &key.name) else {
            self.expectations.forget(key);
            self.finalizers.forget(key);
            self.backoffs_lock().remove(key);
            self.release_pods(key, None).await?;
            return Ok(None);
        };
        if shared
            .spec
            .as_ref()
            .and_then(|s| s.managed_by.as_deref())
            .is_some_and(|m| m != MANAGED_BY_JOB_CONTROLLER)
        {
            return Ok(None);
        }
        let mut job = (*shared).clone();
        if is_finished(&job) {
            self.backoffs_lock().remove(key);
            self.release_pods(key, job.metadata.uid.as_deref()).await?;
            return Ok(None);
        }
        let mode = spec_of(&job).completion_mode.clone();
        if mode
            .as_deref()
            .is_some_and(|m| m != "NonIndexed" && m != "Indexed")
        {
            self.event(
                &job,
                EventType::Warning,
                "UnknownCompletionMode",
                "Skipped Job sync because completion mode is unknown",
            );
            return Ok(None);
        }
        let satisfied = self.expectations.satisfied(key);
        let job_uid = uid_of(&job.metadata);
        let candidates: Vec<Arc<Pod>> = self
            .pods
            .list_in(&key.namespace)
            .into_iter()
            .filter(|p| controller_of(&p.metadata).is_none_or(|r| r.uid == job_uid))
            .collect();
        let pods = self.claim_pods(&job, candidates).await?;
        let now_ts = Timestamp::now();
        let mut sync = JobSync::new(&job, pods, self.finalizers.expected(key));
        let status = job.status.get_or_insert_with(JobStatus::default);
        let mut uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
        normalize_uncounted(&mut uncounted);
        status.uncounted_terminated_pods = Some(uncounted);

        let mut active = i32::try_from(sync.active.len()).unwrap_or(i32::MAX);
        let (new_succeeded, new_failed) = sync.new_finished_pods(&job);
        let counted_failed =
            non_ignored_failed_count(spec_of(&job).pod_failure_policy.as_ref(), &new_failed);
        let status = job.status.clone().unwrap_or_default();
        sync.succeeded = status.succeeded.unwrap_or(0)
            + count(new_succeeded.len())
            + count(sync.uncounted_succeeded.len());
        sync.failed =
            status.failed.unwrap_or(0) + counted_failed + count(sync.uncounted_failed.len());

        if status.start_time.is_none() && !is_suspended(&job) {
            job.status.get_or_insert_with(JobStatus::default).start_time = Some(now());
        }
        let previous_backoff = self.backoffs_lock().get(key).cloned().unwrap_or_default();
        sync.new_backoff = previous_backoff.after(&new_succeeded, &new_failed);

        let mut requeue_after: Option<Duration> = None;
        let backoff_limit = spec_of(&job).backoff_limit.unwrap_or(6);
        sync.finished = find_condition(&job, "SuccessCriteriaMet")
            .filter(|c| c.status == "True")
            .cloned();
        if sync.finished.is_none() {
            if let Some(target) =
                find_condition(&job, "FailureTarget").filter(|c| c.status == "True")
            {
                sync.finished = Some(condition(
                    "Failed",
                    target.reason.as_deref().unwrap_or_default(),
                    target.message.as_deref().unwrap_or_default(),
                ));
            } else if let Some(message) = fail_job_message(&job, &sync.pods) {
                sync.finished = Some(condition("FailureTarget", "PodFailurePolicy", &message));
            }
        }
        if sync.finished.is_none() {
            if sync.failed > backoff_limit || past_backoff_limit_on_failure(&job, &sync.pods) {
                sync.finished = Some(condition(
                    "FailureTarget",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                ));
            } else if let Some(left) = active_deadline_left(&job, &now_ts) {
                if left.is_zero() {
                    sync.finished = Some(condition(
                        "FailureTarget",
                        "DeadlineExceeded",
                        "Job was active longer than specified deadline",
                    ));
                } else {
                    requeue_after = Some(left);
                }
            }
        }
        if is_indexed(&job) {
            let completions = spec_of(&job).completions.unwrap_or(0);
            let previous = parse_indexes(
                status.completed_indexes.as_deref().unwrap_or_default(),
                completions,
            );
            let mut succeeded = previous.clone();
            for pod in &sync.pods {
                if phase(pod) == "Succeeded"
                    && has_finalizer(&pod.metadata, TRACKING_FINALIZER)
                    && let Some(ix) = valid_index(pod, completions)
                {
                    succeeded.insert(ix);
                }
            }
            sync.succeeded = count(succeeded.len());
            if has_backoff_limit_per_index(&job) {
                let failed = failed_indexes(&job, &sync.pods);
                if sync.finished.is_none() {
                    let max = spec_of(&job).max_failed_indexes;
                    if max.is_some_and(|m| count(failed.len()) > m) {
                        sync.finished = Some(condition(
                            "FailureTarget",
                            "MaxFailedIndexesExceeded",
                            "Job has exceeded the specified maximal number of failed indexes",
                        ));
                    } else if !failed.is_empty()
                        && count(failed.len() + succeeded.len()) >= completions
                    {
                        sync.finished = Some(condition(
                            "FailureTarget",
                            "FailedIndexes",
                            "Job has failed indexes",
                        ));
                    }
                }
                sync.delayed_deletion = delayed_deletions(&job, &sync, &succeeded, &failed);
                sync.failed_indexes = Some(failed);
            }
            if sync.finished.is_none()
                && let Some(policy) = spec_of(&job).success_policy.as_ref()
                && let Some(message) = match_success_policy(policy, completions, &succeeded)
            {
                sync.finished = Some(condition("SuccessCriteriaMet", "SuccessPolicy", &message));
            }
            sync.previous_succeeded_indexes = previous;
            sync.succeeded_indexes = succeeded;
        }

        let mut suspend_changed = false;
        let mut manage_error = None;
        if sync.finished.is_some() {
            let (deleted_ready, deleted, error) = self.delete_active_pods(key, &sync.active).await;
            if deleted != active || !satisfied {
                sync.finished = None;
            }
            active -= deleted;
            sync.terminating += deleted;
            sync.ready -= deleted_ready;
            manage_error = error;
        } else {
            let mut manage_called = false;
            if satisfied && !is_deleting(&job.metadata) {
                let (now_active, after, error) = self.manage(key, &job, &mut sync).await;
                active = now_active;
                if let Some(after) = after {
                    requeue_after = Some(requeue_after.map_or(after, |r| r.min(after)));
                }
                manage_error = error;
                manage_called = true;
            }
            let complete = match spec_of(&job).completions {
                None => sync.succeeded > 0 && active == 0,
                Some(completions) => sync.succeeded >= completions && active == 0,
            };
            if complete {
                sync.finished = Some(condition(
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                ));
            } else if manage_called {
                let suspended = is_suspended(&job);
                let conditions = job
                    .status
                    .get_or_insert_with(JobStatus::default)
                    .conditions
                    .get_or_insert_with(Vec::new);
                if suspended {
                    if ensure_condition(
                        conditions,
                        "Suspended",
                        "True",
                        "JobSuspended",
                        "Job suspended",
                    ) {
                        suspend_changed = true;
                        self.event(&job, EventType::Normal, "Suspended", "Job suspended");
                    }
                } else if ensure_condition(
                    conditions,
                    "Suspended",
                    "False",
                    "JobResumed",
                    "Job resumed",
                ) {
                    suspend_changed = true;
                    self.event(&job, EventType::Normal, "Resumed", "Job resumed");
                    job.status.get_or_insert_with(JobStatus::default).start_time = Some(now());
                }
                if job
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(Vec::is_empty)
                {
                    job.status.get_or_insert_with(JobStatus::default).conditions = None;
                }
            }
        }

        let status = job.status.get_or_insert_with(JobStatus::default);
        let needs_update = suspend_changed
            || active != status.active.unwrap_or(0)
            || Some(sync.ready) != status.ready
            || Some(sync.terminating) != status.terminating;
        status.active = nonzero(active);
        status.ready = Some(sync.ready);
        status.terminating = Some(sync.terminating);
        self.track_status_and_remove_finalizers(key, job, sync, needs_update)
            .await?;
        match manage_error {
            Some(e) => Err(e),
            None => Ok(requeue_after),
        }
    }

    /// Upstream's `getPodsForJob` with `ClaimPods`: the Job's pods that its selector
    /// matches, orphans it matches adopted (controller reference and tracking finalizer
    /// added, after a live read shows the Job is not going), its pods it no longer
    /// matches released (both removed).
    async fn claim_pods(
        &self,
        job: &Job,
        candidates: Vec<Arc<Pod>>,
    ) -> Result<Vec<Arc<Pod>>, Error> {
        let job_uid = uid_of(&job.metadata);
        let selector = spec_of(job).selector.as_ref();
        let namespace = job.metadata.namespace.clone().unwrap_or_default();
        let api = self.pods_api(&namespace);
        let mut owned = Vec::new();
        let mut can_adopt: Option<bool> = None;
        for pod in candidates {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            let matches = selects(selector, &labels);
            let name = pod.metadata.name.clone().unwrap_or_default();
            if controller_of(&pod.metadata).is_some() {
                if matches {
                    owned.push(pod);
                } else if !is_deleting(&job.metadata) {
                    let patch = json!({"metadata": {
                        "ownerReferences": [{"$patch": "delete", "uid": job_uid}],
                        "uid": pod.metadata.uid,
                        "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER],
                    }});
                    match api
                        .patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if is_not_found(&e) || super::support::code(&e) == Some(422) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                continue;
            }
            if is_deleting(&job.metadata) || !matches || is_deleting(&pod.metadata) {
                continue;
            }
            let allowed = match can_adopt {
                Some(allowed) => allowed,
                None => {
                    let jobs: Api<Job> = Api::namespaced(self.client.clone(), &namespace);
                    let fresh = jobs
                        .get_opt(job.metadata.name.as_deref().unwrap_or_default())
                        .await?;
                    let allowed = fresh.is_some_and(|f| {
                        f.metadata.uid == job.metadata.uid && !is_deleting(&f.metadata)
                    });
                    can_adopt = Some(allowed);
                    allowed
                }
            };
            if !allowed {
                continue;
            }
            let patch = json!({"metadata": {
                "ownerReferences": [controller_ref("batch/v1", "Job", &job.metadata)],
                "uid": pod.metadata.uid,
                "finalizers": [TRACKING_FINALIZER],
            }});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => continue,
                Err(e) => return Err(e.into()),
            }
            let mut adopted = (*pod).clone();
            let finalizers = adopted.metadata.finalizers.get_or_insert_with(Vec::new);
            if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
                finalizers.push(TRACKING_FINALIZER.into());
            }
            owned.push(Arc::new(adopted));
        }
        Ok(owned)
    }

    /// Whether the API server holds an orphan the Job's selector matches that the pod
    /// cache has not shown yet (a consistent read before creating pods). The pods and
    /// Jobs reach the simulated controller manager over separate watches, so a pod created
    /// just before its Job can arrive after it; kube-controller-manager's informers see it
    /// first in practice. Creating pods meanwhile would make one too many, and deleting
    /// the surplus after the adoption could delete the orphan: the sync waits for the
    /// cache instead (the orphan's arrival queues the Job again).
    async fn has_unseen_orphans(&self, job: &Job) -> Result<bool, kube::Error> {
        let selector = spec_of(job).selector.as_ref();
        let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
        let live = self
            .pods_api(namespace)
            .list(&ListParams::default())
            .await?;
        Ok(live.items.iter().any(|pod| {
            controller_of(&pod.metadata).is_none()
                && !is_deleting(&pod.metadata)
                && selects(selector, &pod.metadata.labels.clone().unwrap_or_default())
                && self
                    .pods
                    .get(namespace, pod.metadata.name.as_deref().unwrap_or_default())
                    .is_none_or(|cached| cached.metadata.uid != pod.metadata.uid)
        }))
    }

    fn backoffs_lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, BackoffRecord>> {
        self.backoffs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn event(&self, job: &Job, type_: EventType, reason: &str, message: &str) {
        self.recorder
            .record("batch/v1", "Job", &job.metadata, type_, reason, message);
    }

    /// Upstream's `manageJob`: deletes pods of a suspended Job or beyond what is wanted,
    /// else creates the missing ones once the pod-failure back-off allows. Returns the
    /// active count, when to look again, and the error of a create or delete.
    async fn manage(
        &self,
        key: &ObjectKey,
        job: &Job,
        sync: &mut JobSync,
    ) -> (i32, Option<Duration>, Option<Error>) {
        let mut active = count(sync.active.len());
        let spec = spec_of(job);
        let parallelism = spec.parallelism.unwrap_or(1);
        if is_suspended(job) {
            let victims = pods_for_removal(job, &sync.active, sync.active.len());
            let (ready, removed, error) = self.delete_job_pods(key, job, &victims).await;
            active -= removed;
            sync.terminating += removed;
            sync.ready -= ready;
            return (active, None, error);
        }
        let want = match spec.completions {
            None if sync.succeeded > 0 => active,
            None => parallelism,
            Some(completions) => (completions - sync.succeeded).clamp(0, parallelism),
        };
        let surplus = usize::try_from(active - want).unwrap_or(0);
        let mut victims = pods_for_removal(job, &sync.active, surplus);
        victims.truncate(MAX_POD_CREATE_DELETE_PER_SYNC);
        if !victims.is_empty() {
            let (ready, removed, error) = self.delete_job_pods(key, job, &victims).await;
            active -= removed;
            sync.terminating += removed;
            sync.ready -= ready;
            return (active, None, error);
        }
        let terminating = if only_replace_failed_pods(job) {
            sync.terminating
        } else {
            0
        };
        let diff = want - terminating - active;
        if diff <= 0 {
            return (active, None, None);
        }
        let per_index = has_backoff_limit_per_index(job);
        let remaining = if per_index {
            Duration::ZERO
        } else {
            sync.new_backoff
                .remaining(&self.settings, &Timestamp::now())
        };
        if !remaining.is_zero() {
            return (0, Some(remaining.max(SYNC_JOB_BATCH_PERIOD)), None);
        }
        let mut diff = usize::try_from(diff)
            .unwrap_or(0)
            .min(MAX_POD_CREATE_DELETE_PER_SYNC);
        let mut indexes: Vec<i32> = Vec::new();
        if is_indexed(job) {
            let completions = spec.completions.unwrap_or(0);
            let mut non_pending = sync.succeeded_indexes.clone();
            non_pending.extend(sync.active.iter().filter_map(|p| completion_index(p)));
            if only_replace_failed_pods(job) {
                non_pending.extend(
                    sync.pods
                        .iter()
                        .filter(|p| is_deleting(&p.metadata) && !is_terminal(p))
                        .filter_map(|p| completion_index(p)),
                );
            }
            if let Some(failed) = &sync.failed_indexes {
                non_pending.extend(failed.iter().copied());
            }
            indexes = first_pending_indexes(&non_pending, diff, completions);
            if per_index {
                let now = Timestamp::now();
                let waits: Vec<(i32, Duration)> = indexes
                    .iter()
                    .map(|ix| {
                        let wait = sync.delayed_deletion.get(ix).map_or(Duration::ZERO, |p| {
                            index_backoff(p).remaining(&self.settings, &now)
                        });
                        (*ix, wait)
                    })
                    .collect();
                indexes = waits
                    .iter()
                    .filter(|(_, wait)| wait.is_zero())
                    .map(|(ix, _)| *ix)
                    .collect();
                if indexes.is_empty()
                    && let Some(wait) = waits.iter().map(|(_, w)| *w).min()
                {
                    return (0, Some(wait.max(SYNC_JOB_BATCH_PERIOD)), None);
                }
            }
            diff = indexes.len();
        }
        if diff == 0 {
            return (active, None, None);
        }
        match self.has_unseen_orphans(job).await {
            Ok(true) => return (active, Some(SYNC_JOB_BATCH_PERIOD), None),
            Ok(false) => {}
            Err(e) => return (active, None, Some(e.into())),
        }
        self.expectations
            .expect(key, i64::try_from(diff).unwrap_or(i64::MAX), HashSet::new());
        active += count(diff);
        let template = pod_template(job);
        let api = self.pods_api(&key.namespace);
        let params = PostParams::default();
        let mut created = 0;
        let mut batch = 1;
        let mut failure: Option<(usize, kube::Error)> = None;
        let mut next_index = indexes.into_iter();
        while created < diff {
            let size = batch.min(diff - created);
            let pods: Vec<Pod> = (0..size)
                .map(|_| {
                    let index = next_index.next();
                    let mut pod = pod_for(job, &template, index);
                    if per_index && let Some(ix) = index {
                        let (failures, ignored) =
                            new_index_failure_counts(job, sync.delayed_deletion.get(&ix));
                        let annotations = pod
                            .metadata
                            .annotations
                            .get_or_insert_with(Default::default);
                        annotations.insert(INDEX_FAILURE_COUNT.into(), failures.to_string());
                        if ignored > 0 {
                            annotations
                                .insert(INDEX_IGNORED_FAILURE_COUNT.into(), ignored.to_string());
                        }
                    }
                    pod
                })
                .collect();
            let results = join_all(pods.iter().map(|p| api.create(&params, p))).await;
            let mut failed = 0;
            for result in results {
                match result {
                    Ok(pod) => self.event(
                        job,
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("Created pod: {}", pod.metadata.name.unwrap_or_default()),
                    ),
                    Err(e) => {
                        failed += 1;
                        self.expectations.creation_observed(key);
                        active -= 1;
                        self.event(
                            job,
                            EventType::Warning,
                            "FailedCreate",
                            &format!("Error creating: {}", api_message(&e)),
                        );
                        match failure.as_mut() {
                            Some((n, _)) => *n += 1,
                            None => failure = Some((1, e)),
                        }
                    }
                }
            }
            created += size;
            if failed > 0 {
                break;
            }
            batch *= 2;
        }
        for _ in created..diff {
            self.expectations.creation_observed(key);
            active -= 1;
        }
        let error = failure.map(|(failed, first)| Error::Pods {
            verb: "create",
            failed,
            first,
        });
        (active, None, error)
    }

    /// Upstream's `deleteJobPods`: each pod released from the finalizer first (so it is
    /// not counted as failed), then deleted. Returns the ready and all pods deleted.
    async fn delete_job_pods(
        &self,
        key: &ObjectKey,
        job: &Job,
        victims: &[Arc<Pod>],
    ) -> (i32, i32, Option<Error>) {
        let uids: HashSet<String> = victims.iter().map(|p| uid_of(&p.metadata)).collect();
        self.expectations.expect(key, 0, uids);
        let api = self.pods_api(&key.namespace);
        let results = join_all(victims.iter().map(|pod| {
            let api = api.clone();
            async move {
                let name = pod.metadata.name.clone().unwrap_or_default();
                if has_finalizer(&pod.metadata, TRACKING_FINALIZER) {
                    let patch = json!({"metadata": {
                        "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]
                    }});
                    match api
                        .patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(e),
                    }
                }
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => Ok(true),
                    Err(e) if is_not_found(&e) => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }))
        .await;
        self.count_deletions(key, job, victims, results)
    }

    /// Upstream's `deleteActivePods` for a finishing Job: DELETE only, the finalizer kept
    /// so that the pods are counted as failed.
    async fn delete_active_pods(
        &self,
        key: &ObjectKey,
        pods: &[Arc<Pod>],
    ) -> (i32, i32, Option<Error>) {
        let api = self.pods_api(&key.namespace);
        let results = join_all(pods.iter().map(|pod| {
            let api = api.clone();
            async move {
                let name = pod.metadata.name.clone().unwrap_or_default();
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => Ok(true),
                    Err(e) if is_not_found(&e) => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }))
        .await;
        let Some(job) = self.jobs.get(&key.namespace, &key.name) else {
            return (0, count(pods.len()), None);
        };
        self.count_deletions(key, &job, pods, results)
    }

    fn count_deletions(
        &self,
        key: &ObjectKey,
        job: &Job,
        pods: &[Arc<Pod>],
        results: Vec<Result<bool, kube::Error>>,
    ) -> (i32, i32, Option<Error>) {
        let mut ready = 0;
        let mut deleted = 0;
        let mut failure: Option<(usize, kube::Error)> = None;
        for (pod, result) in pods.iter().zip(results) {
            match result {
                Ok(found) => {
                    deleted += 1;
                    if is_ready(pod) {
                        ready += 1;
                    }
                    if found {
                        self.event(
                            job,
                            EventType::Normal,
                            "SuccessfulDelete",
                            &format!(
                                "Deleted pod: {}",
                                pod.metadata.name.as_deref().unwrap_or_default()
                            ),
                        );
                    }
                }
                Err(e) => {
                    self.expectations
                        .deletion_observed(key, &uid_of(&pod.metadata));
                    self.event(
                        job,
                        EventType::Warning,
                        "FailedDelete",
                        &format!("Error deleting: {}", api_message(&e)),
                    );
                    match failure.as_mut() {
                        Some((n, _)) => *n += 1,
                        None => failure = Some((1, e)),
                    }
                }
            }
        }
        let error = failure.map(|(failed, first)| Error::Pods {
            verb: "delete",
            failed,
            first,
        });
        (ready, deleted, error)
    }

    /// Upstream's `trackJobStatusAndRemoveFinalizers`: lists newly finished pods as
    /// uncounted, writes the interim condition, removes the finalizers, moves the pods to
    /// the counters and, when nothing is left uncounted or terminating, finishes the Job.
    async fn track_status_and_remove_finalizers(
        &self,
        key: &ObjectKey,
        mut job: Job,
        mut sync: JobSync,
        mut needs_flush: bool,
    ) -> Result<(), Error> {
        let indexed = is_indexed(&job);
        let completions = spec_of(&job).completions.unwrap_or(0);
        if indexed {
            sync.pods
                .sort_by_key(|p| completion_index(p).unwrap_or(i32::MAX));
        }
        let mut with_finalizer: HashSet<String> = sync
            .pods
            .iter()
            .filter(|p| has_finalizer(&p.metadata, TRACKING_FINALIZER))
            .map(|p| uid_of(&p.metadata))
            .filter(|uid| !sync.expected_removals.contains(uid))
            .collect();
        let status = job.status.get_or_insert_with(JobStatus::default);
        if clean_uncounted(status, &with_finalizer) {
            needs_flush = true;
        }
        let policy = spec_of(&job).pod_failure_policy.clone();
        let mut to_release: Vec<Arc<Pod>> = Vec::new();
        let mut new_succeeded_indexes: Vec<i32> = Vec::new();
        let finishing_as_failure = sync
            .finished
            .as_ref()
            .is_some_and(|c| c.type_ != "SuccessCriteriaMet");
        let mut reached_max_uncounted = false;
        for pod in &sync.pods {
            let uid = uid_of(&pod.metadata);
            if !has_finalizer(&pod.metadata, TRACKING_FINALIZER)
                || sync.expected_removals.contains(&uid)
            {
                continue;
            }
            let failed = is_pod_failed(pod, &job);
            if !(is_deleting(&job.metadata)
                || sync.finished.is_some()
                || phase(pod) == "Succeeded"
                || failed)
            {
                continue;
            }
            // Upstream's `canRemoveFinalizer`: a failed pod waits for its replacement.
            if !(is_deleting(&job.metadata) || sync.finished.is_some() || phase(pod) == "Succeeded")
                && completion_index(pod)
                    .and_then(|ix| sync.delayed_deletion.get(&ix))
                    .is_some_and(|kept| kept.metadata.uid == pod.metadata.uid)
            {
                continue;
            }
            to_release.push(pod.clone());
            let status = job.status.get_or_insert_with(JobStatus::default);
            let uncounted = status
                .uncounted_terminated_pods
                .get_or_insert_with(UncountedTerminatedPods::default);
            if phase(pod) == "Succeeded" && !sync.uncounted_failed.contains(&uid) {
                if indexed {
                    if let Some(ix) = valid_index(pod, completions)
                        && !sync.previous_succeeded_indexes.contains(&ix)
                    {
                        new_succeeded_indexes.push(ix);
                    }
                } else if !sync.uncounted_succeeded.contains(&uid) {
                    needs_flush = true;
                    uncounted.succeeded.get_or_insert_with(Vec::new).push(uid);
                }
            } else if (failed || finishing_as_failure)
                && !sync.uncounted_failed.contains(&uid)
                && (!indexed || valid_index(pod, completions).is_some())
            {
                let counts = policy
                    .as_ref()
                    .is_none_or(|p| match_pod_failure_policy(p, pod).counts);
                if counts {
                    needs_flush = true;
                    uncounted.failed.get_or_insert_with(Vec::new).push(uid);
                }
            }
            let listed = new_succeeded_indexes.len()
                + uncounted.succeeded.as_ref().map_or(0, Vec::len)
                + uncounted.failed.as_ref().map_or(0, Vec::len);
            if listed >= MAX_UNCOUNTED_PODS {
                // The rest waits for the next sync, which the writes below bring about.
                reached_max_uncounted = true;
                break;
            }
        }
        let status = job.status.get_or_insert_with(JobStatus::default);
        if indexed {
            sync.succeeded_indexes.extend(new_succeeded_indexes);
            let text = format_indexes(&sync.succeeded_indexes);
            let text = (!text.is_empty()).then_some(text);
            if text != status.completed_indexes {
                needs_flush = true;
            }
            status.succeeded = nonzero(count(sync.succeeded_indexes.len()));
            status.completed_indexes = text;
            let failed = sync.failed_indexes.as_ref().map(format_indexes);
            if failed != status.failed_indexes {
                status.failed_indexes = failed;
                needs_flush = true;
            }
        }
        let mut finished = sync.finished.take();
        if let Some(target) = finished.as_ref().filter(|c| c.type_ == "FailureTarget") {
            status
                .conditions
                .get_or_insert_with(Vec::new)
                .push(target.clone());
            needs_flush = true;
            finished = Some(condition(
                "Failed",
                target.reason.as_deref().unwrap_or_default(),
                target.message.as_deref().unwrap_or_default(),
            ));
        }
        if let Some(met) = finished
            .as_ref()
            .filter(|c| c.type_ == "SuccessCriteriaMet")
            .cloned()
        {
            let conditions = status.conditions.get_or_insert_with(Vec::new);
            if !conditions.iter().any(|c| c.type_ == "SuccessCriteriaMet") {
                conditions.push(met.clone());
                needs_flush = true;
            }
            finished = Some(condition(
                "Complete",
                met.reason.as_deref().unwrap_or_default(),
                met.message.as_deref().unwrap_or_default(),
            ));
        }

        // Flush what is uncounted before any finalizer goes.
        if needs_flush {
            job = self.update_status(&job).await?;
            self.backoffs_lock()
                .insert(key.clone(), sync.new_backoff.clone());
            needs_flush = false;
        }
        let mut release_error = None;
        if !to_release.is_empty() {
            let (done, error) = self.remove_finalizers(key, &to_release).await;
            for (pod, removed) in to_release.iter().zip(done) {
                if removed {
                    with_finalizer.remove(&uid_of(&pod.metadata));
                }
            }
            release_error = error;
        }
        let status = job.status.get_or_insert_with(JobStatus::default);
        if clean_uncounted(status, &with_finalizer) {
            needs_flush = true;
        }
        if let Some(error) = release_error {
            if needs_flush {
                self.update_status(&job).await?;
            }
            return Err(error);
        }
        let uncounted_left = status.uncounted_terminated_pods.as_ref().is_some_and(|u| {
            u.succeeded.as_ref().is_some_and(|s| !s.is_empty())
                || u.failed.as_ref().is_some_and(|f| !f.is_empty())
        });
        let enacted = match &finished {
            Some(cond) if !reached_max_uncounted && !uncounted_left && sync.terminating == 0 => {
                let conditions = status.conditions.get_or_insert_with(Vec::new);
                ensure_condition(
                    conditions,
                    &cond.type_,
                    &cond.status,
                    cond.reason.as_deref().unwrap_or_default(),
                    cond.message.as_deref().unwrap_or_default(),
                );
                if cond.type_ == "Complete" {
                    status.completion_time = cond.last_transition_time.clone();
                }
                true
            }
            _ => false,
        };
        if enacted || needs_flush {
            let job = self.update_status(&job).await?;
            if enacted && let Some(cond) = &finished {
                self.record_finished(&job, cond);
            }
        }
        Ok(())
    }

    fn record_finished(&self, job: &Job, finished: &JobCondition) {
        if finished.type_ == "Complete" {
            let succeeded = job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
            if spec_of(job).completions.is_some_and(|c| succeeded > c) {
                self.event(
                    job,
                    EventType::Warning,
                    "TooManySucceededPods",
                    "Too many succeeded pods running after completion count reached",
                );
            }
            self.event(job, EventType::Normal, "Completed", "Job completed");
        } else {
            self.event(
                job,
                EventType::Warning,
                finished.reason.as_deref().unwrap_or_default(),
                finished.message.as_deref().unwrap_or_default(),
            );
        }
    }

    /// Writes the Job's status (`UpdateStatus`) and returns what the server stored.
    async fn update_status(&self, job: &Job) -> Result<Job, Error> {
        let api: Api<Job> = Api::namespaced(
            self.client.clone(),
            job.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let name = job.metadata.name.clone().unwrap_or_default();
        let mut job = job.clone();
        if let Some(status) = job.status.as_mut() {
            let mut uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
            normalize_uncounted(&mut uncounted);
            status.uncounted_terminated_pods = Some(uncounted);
        }
        match api
            .replace_status(&name, &PostParams::default(), &job)
            .await
        {
            Ok(stored) => Ok(stored),
            Err(e) if is_conflict(&e) => Err(e.into()),
            Err(e) => Err(e.into()),
        }
    }
}

/// What one sync knows about a Job's pods.
struct JobSync {
    pods: Vec<Arc<Pod>>,
    active: Vec<Arc<Pod>>,
    ready: i32,
    terminating: i32,
    succeeded: i32,
    failed: i32,
    uncounted_succeeded: HashSet<String>,
    uncounted_failed: HashSet<String>,
    expected_removals: HashSet<String>,
    previous_succeeded_indexes: BTreeSet<i32>,
    succeeded_indexes: BTreeSet<i32>,
    /// With `backoffLimitPerIndex`: the failed indexes.
    failed_indexes: Option<BTreeSet<i32>>,
    /// With `backoffLimitPerIndex`: per pending index, the failed pod kept (with its
    /// finalizer) until its replacement carries its failure count.
    delayed_deletion: HashMap<i32, Arc<Pod>>,
    new_backoff: BackoffRecord,
    finished: Option<JobCondition>,
}

impl JobSync {
    fn new(job: &Job, pods: Vec<Arc<Pod>>, expected_removals: HashSet<String>) -> Self {
        let active: Vec<Arc<Pod>> = pods.iter().filter(|p| is_active(p)).cloned().collect();
        let uncounted = job
            .status
            .as_ref()
            .and_then(|s| s.uncounted_terminated_pods.clone())
            .unwrap_or_default();
        let terminating = count(
            pods.iter()
                .filter(|p| is_deleting(&p.metadata) && !is_terminal(p))
                .count(),
        );
        Self {
            ready: count(active.iter().filter(|p| is_ready(p)).count()),
            active,
            pods,
            terminating,
            succeeded: 0,
            failed: 0,
            uncounted_succeeded: uncounted.succeeded.into_iter().flatten().collect(),
            uncounted_failed: uncounted.failed.into_iter().flatten().collect(),
            expected_removals,
            previous_succeeded_indexes: BTreeSet::new(),
            succeeded_indexes: BTreeSet::new(),
            failed_indexes: None,
            delayed_deletion: HashMap::new(),
            new_backoff: BackoffRecord::default(),
            finished: None,
        }
    }

    /// Upstream's `getNewFinishedPods`: pods with the finalizer, not listed as uncounted,
    /// that succeeded or failed.
    fn new_finished_pods(&self, job: &Job) -> (Vec<Arc<Pod>>, Vec<Arc<Pod>>) {
        let completions = spec_of(job).completions.unwrap_or(0);
        let candidates = |uncounted: &HashSet<String>| {
            self.pods
                .iter()
                .filter(|p| {
                    let uid = uid_of(&p.metadata);
                    has_finalizer(&p.metadata, TRACKING_FINALIZER)
                        && !uncounted.contains(&uid)
                        && !self.expected_removals.contains(&uid)
                        && (!is_indexed(job) || valid_index(p, completions).is_some())
                })
                .cloned()
                .collect::<Vec<_>>()
        };
        let succeeded = candidates(&self.uncounted_succeeded)
            .into_iter()
            .filter(|p| phase(p) == "Succeeded")
            .collect();
        let failed = candidates(&self.uncounted_failed)
            .into_iter()
            .filter(|p| is_pod_failed(p, job))
            .collect();
        (succeeded, failed)
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn nonzero(n: i32) -> Option<i32> {
    (n != 0).then_some(n)
}

fn spec_of(job: &Job) -> &k8s_openapi::api::batch::v1::JobSpec {
    static EMPTY: std::sync::LazyLock<k8s_openapi::api::batch::v1::JobSpec> =
        std::sync::LazyLock::new(Default::default);
    job.spec.as_ref().unwrap_or(&EMPTY)
}

/// Empty lists of uncounted pods are left out, as Go's `omitempty` leaves them.
fn normalize_uncounted(uncounted: &mut UncountedTerminatedPods) {
    if uncounted.succeeded.as_ref().is_some_and(Vec::is_empty) {
        uncounted.succeeded = None;
    }
    if uncounted.failed.as_ref().is_some_and(Vec::is_empty) {
        uncounted.failed = None;
    }
}

/// Upstream's `cleanUncountedPodsWithoutFinalizers`: uncounted pods that no longer carry
/// the finalizer move to the counters. True when anything moved.
fn clean_uncounted(status: &mut JobStatus, with_finalizer: &HashSet<String>) -> bool {
    let uncounted = status
        .uncounted_terminated_pods
        .get_or_insert_with(UncountedTerminatedPods::default);
    let mut changed = false;
    let mut moved_succeeded = 0;
    if let Some(list) = uncounted.succeeded.as_mut() {
        let before = list.len();
        list.retain(|uid| with_finalizer.contains(uid));
        moved_succeeded = before - list.len();
    }
    let mut moved_failed = 0;
    if let Some(list) = uncounted.failed.as_mut() {
        let before = list.len();
        list.retain(|uid| with_finalizer.contains(uid));
        moved_failed = before - list.len();
    }
    normalize_uncounted(uncounted);
    if moved_succeeded > 0 {
        status.succeeded = nonzero(status.succeeded.unwrap_or(0) + count(moved_succeeded));
        changed = true;
    }
    if moved_failed > 0 {
        status.failed = nonzero(status.failed.unwrap_or(0) + count(moved_failed));
        changed = true;
    }
    changed
}

/// Whether the Job has a true `Complete` or `Failed` condition.
pub(crate) fn is_finished(job: &Job) -> bool {
    finish_time(job).is_some()
}

/// When the Job finished: its true `Complete` or `Failed` condition's transition time.
pub(crate) fn finish_time(job: &Job) -> Option<Timestamp> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or_else(Timestamp::now, |t| t.0)
        })
}

fn is_suspended(job: &Job) -> bool {
    spec_of(job).suspend == Some(true)
}

fn is_indexed(job: &Job) -> bool {
    spec_of(job).completion_mode.as_deref() == Some("Indexed")
}

/// Upstream's `onlyReplaceFailedPods`: terminating pods are not replaced.
fn only_replace_failed_pods(job: &Job) -> bool {
    let spec = spec_of(job);
    spec.pod_replacement_policy.as_deref() == Some("Failed") || spec.pod_failure_policy.is_some()
}

/// Upstream's `isPodFailed`: Failed, or (unless only failed pods are replaced) deleted
/// before it succeeded.
fn is_pod_failed(pod: &Pod, job: &Job) -> bool {
    if phase(pod) == "Failed" {
        return true;
    }
    if only_replace_failed_pods(job) {
        return false;
    }
    is_deleting(&pod.metadata) && phase(pod) != "Succeeded"
}

fn find_condition<'a>(job: &'a Job, type_: &str) -> Option<&'a JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// A true condition of now.
fn condition(type_: &str, reason: &str, message: &str) -> JobCondition {
    condition_with(type_, "True", reason, message)
}

fn condition_with(type_: &str, status: &str, reason: &str, message: &str) -> JobCondition {
    let at = now();
    JobCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: (!reason.is_empty()).then(|| reason.to_string()),
        message: (!message.is_empty()).then(|| message.to_string()),
        last_probe_time: Some(at.clone()),
        last_transition_time: Some(at),
    }
}

/// Upstream's `ensureJobConditionStatus`: sets the condition (a new one only when its
/// status is not False). True when anything changed.
fn ensure_condition(
    conditions: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> bool {
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status != status
            || existing.reason.as_deref().unwrap_or_default() != reason
            || existing.message.as_deref().unwrap_or_default() != message
        {
            *existing = condition_with(type_, status, reason, message);
            return true;
        }
        return false;
    }
    if status != "False" {
        conditions.push(condition_with(type_, status, reason, message));
        return true;
    }
    false
}

/// How long the Job may still be active under `activeDeadlineSeconds` (zero when past;
/// `None` without a deadline, a start time, or while suspended).
fn active_deadline_left(job: &Job, now: &Timestamp) -> Option<Duration> {
    let seconds = spec_of(job).active_deadline_seconds?;
    let start = job.status.as_ref()?.start_time.as_ref()?;
    if is_suspended(job) {
        return None;
    }
    Some(until_from(now, &plus_seconds(&start.0, seconds)))
}

fn until_from(now: &Timestamp, at: &Timestamp) -> Duration {
    let d = at.duration_since(*now);
    if d.is_negative() || d.is_zero() {
        Duration::ZERO
    } else {
        d.unsigned_abs()
    }
}

/// Upstream's `pastBackoffLimitOnFailure`: under `restartPolicy: OnFailure`, the restarts
/// of pending and running pods reach `backoffLimit`.
fn past_backoff_limit_on_failure(job: &Job, pods: &[Arc<Pod>]) -> bool {
    let restart_policy = spec_of(job)
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref());
    if restart_policy != Some("OnFailure") {
        return false;
    }
    let restarts: i32 = pods
        .iter()
        .filter(|p| matches!(phase(p), "Running" | "Pending"))
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .map(|c| c.restart_count)
        .sum();
    let limit = spec_of(job).backoff_limit.unwrap_or(6);
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

/// The outcome of a failed pod under a `podFailurePolicy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PolicyMatch {
    /// The FailJob message, when a FailJob rule matched.
    pub(crate) fail_job: Option<String>,
    /// Whether the failure counts towards `backoffLimit` (false for Ignore).
    pub(crate) counts: bool,
    /// The action of the matching rule, if one matched.
    pub(crate) action: Option<String>,
}

/// Upstream's `matchPodFailurePolicy`: the first rule whose exit codes or pod conditions
/// match the failed pod decides.
pub(crate) fn match_pod_failure_policy(policy: &PodFailurePolicy, pod: &Pod) -> PolicyMatch {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    for (index, rule) in policy.rules.iter().enumerate() {
        let action = rule.action.as_str();
        let message = if let Some(requirement) = &rule.on_exit_codes {
            let Some(container) = matching_container(
                status.container_statuses.as_deref().unwrap_or_default(),
                requirement,
            )
            .or_else(|| {
                matching_container(
                    status
                        .init_container_statuses
                        .as_deref()
                        .unwrap_or_default(),
                    requirement,
                )
            }) else {
                continue;
            };
            let code = container
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map_or(0, |t| t.exit_code);
            format!(
                "Container {} for pod {namespace}/{name} failed with exit code {code} matching {action} rule at index {index}",
                container.name
            )
        } else if let Some(patterns) = &rule.on_pod_conditions {
            let Some(found) = status.conditions.iter().flatten().find(|c| {
                patterns
                    .iter()
                    .any(|p| p.type_ == c.type_ && p.status == c.status)
            }) else {
                continue;
            };
            format!(
                "Pod {namespace}/{name} has condition {} matching {action} rule at index {index}",
                found.type_
            )
        } else {
            continue;
        };
        match action {
            "Ignore" => {
                return PolicyMatch {
                    fail_job: None,
                    counts: false,
                    action: Some(action.into()),
                };
            }
            "Count" => {
                return PolicyMatch {
                    fail_job: None,
                    counts: true,
                    action: Some(action.into()),
                };
            }
            "FailJob" => {
                return PolicyMatch {
                    fail_job: Some(message),
                    counts: true,
                    action: Some(action.into()),
                };
            }
            "FailIndex" => {
                return PolicyMatch {
                    fail_job: None,
                    counts: true,
                    action: Some(action.into()),
                };
            }
            _ => {}
        }
    }
    PolicyMatch {
        fail_job: None,
        counts: true,
        action: None,
    }
}

fn matching_container<'a>(
    statuses: &'a [ContainerStatus],
    requirement: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<&'a ContainerStatus> {
    statuses.iter().find(|c| {
        let Some(terminated) = c.state.as_ref().and_then(|s| s.terminated.as_ref()) else {
            return false;
        };
        if requirement
            .container_name
            .as_ref()
            .is_some_and(|n| *n != c.name)
        {
            return false;
        }
        let code = terminated.exit_code;
        code != 0
            && match requirement.operator.as_str() {
                "In" => requirement.values.contains(&code),
                "NotIn" => !requirement.values.contains(&code),
                _ => false,
            }
    })
}

fn has_backoff_limit_per_index(job: &Job) -> bool {
    is_indexed(job) && spec_of(job).backoff_limit_per_index.is_some()
}

fn annotation_count(pod: &Pod, name: &str) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(name))
        .and_then(|v| v.parse().ok())
        .filter(|n: &i32| *n >= 0)
        .unwrap_or(0)
}

/// Upstream's `isIndexFailed`: a counted failure of a pod whose index has failed
/// `backoffLimitPerIndex` times before, or a FailIndex rule.
fn is_index_failed(job: &Job, pod: &Pod) -> bool {
    if !is_pod_failed(pod, job) {
        return false;
    }
    let counted = match spec_of(job).pod_failure_policy.as_ref() {
        Some(policy) => {
            let matched = match_pod_failure_policy(policy, pod);
            if matched.action.as_deref() == Some("FailIndex") {
                return true;
            }
            matched.counts
        }
        None => true,
    };
    counted
        && annotation_count(pod, INDEX_FAILURE_COUNT)
            >= spec_of(job).backoff_limit_per_index.unwrap_or(i32::MAX)
}

/// Upstream's `calculateFailedIndexes`: the failed indexes of the status and those of
/// pods not counted yet.
fn failed_indexes(job: &Job, pods: &[Arc<Pod>]) -> BTreeSet<i32> {
    let completions = spec_of(job).completions.unwrap_or(0);
    let mut failed = job
        .status
        .as_ref()
        .and_then(|s| s.failed_indexes.as_deref())
        .map(|text| parse_indexes(text, completions))
        .unwrap_or_default();
    for pod in pods {
        if has_finalizer(&pod.metadata, TRACKING_FINALIZER)
            && let Some(ix) = valid_index(pod, completions)
            && is_index_failed(job, pod)
        {
            failed.insert(ix);
        }
    }
    failed
}

/// Upstream's `getPodsWithDelayedDeletionPerIndex`: per index neither succeeded, failed
/// nor active, its latest failed pod not counted yet.
fn delayed_deletions(
    job: &Job,
    sync: &JobSync,
    succeeded: &BTreeSet<i32>,
    failed: &BTreeSet<i32>,
) -> HashMap<i32, Arc<Pod>> {
    let completions = spec_of(job).completions.unwrap_or(0);
    let active: HashSet<i32> = sync
        .active
        .iter()
        .filter_map(|p| completion_index(p))
        .collect();
    let absolute = |p: &Pod| {
        annotation_count(p, INDEX_FAILURE_COUNT) + annotation_count(p, INDEX_IGNORED_FAILURE_COUNT)
    };
    let mut kept: HashMap<i32, Arc<Pod>> = HashMap::new();
    for pod in &sync.pods {
        let uid = uid_of(&pod.metadata);
        if !has_finalizer(&pod.metadata, TRACKING_FINALIZER)
            || sync.expected_removals.contains(&uid)
            || !is_pod_failed(pod, job)
        {
            continue;
        }
        let Some(ix) = valid_index(pod, completions) else {
            continue;
        };
        if succeeded.contains(&ix) || failed.contains(&ix) || active.contains(&ix) {
            continue;
        }
        match kept.get(&ix) {
            Some(last)
                if !(absolute(last) <= absolute(pod)
                    && finished_time(pod) >= finished_time(last)) => {}
            _ => {
                kept.insert(ix, pod.clone());
            }
        }
    }
    kept
}

/// Upstream's `getNewIndexFailureCounts`: the failure counts a replacement of `replaced`
/// starts with.
fn new_index_failure_counts(job: &Job, replaced: Option<&Arc<Pod>>) -> (i32, i32) {
    let Some(replaced) = replaced else {
        return (0, 0);
    };
    let mut failures = annotation_count(replaced, INDEX_FAILURE_COUNT);
    let mut ignored = annotation_count(replaced, INDEX_IGNORED_FAILURE_COUNT);
    let counts = spec_of(job)
        .pod_failure_policy
        .as_ref()
        .is_none_or(|p| match_pod_failure_policy(p, replaced).counts);
    if counts {
        failures += 1;
    } else {
        ignored += 1;
    }
    (failures, ignored)
}

/// The back-off of an index whose last failed pod is `last` (upstream's
/// `getRemainingTimePerIndex`).
fn index_backoff(last: &Pod) -> BackoffRecord {
    let failures = annotation_count(last, INDEX_FAILURE_COUNT)
        + annotation_count(last, INDEX_IGNORED_FAILURE_COUNT)
        + 1;
    BackoffRecord {
        failures_after_last_success: u32::try_from(failures).unwrap_or(1),
        last_failure_time: Some(finished_time(last)),
    }
}

/// Upstream's `getFailJobMessage`: the message of the first failed pod a FailJob rule
/// matches.
fn fail_job_message(job: &Job, pods: &[Arc<Pod>]) -> Option<String> {
    let policy = spec_of(job).pod_failure_policy.as_ref()?;
    pods.iter()
        .filter(|p| is_pod_failed(p, job))
        .find_map(|p| match_pod_failure_policy(policy, p).fail_job)
}

/// Failed pods less those an Ignore rule matches (upstream's `nonIgnoredFailedPodsCount`).
fn non_ignored_failed_count(policy: Option<&PodFailurePolicy>, failed: &[Arc<Pod>]) -> i32 {
    count(
        failed
            .iter()
            .filter(|p| policy.is_none_or(|policy| match_pod_failure_policy(policy, p).counts))
            .count(),
    )
}

/// A pod's completion index from its annotation, if it is a number.
fn completion_index(pod: &Pod) -> Option<i32> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(COMPLETION_INDEX)?
        .parse::<i32>()
        .ok()
        .filter(|ix| *ix >= 0)
}

fn valid_index(pod: &Pod, completions: i32) -> Option<i32> {
    completion_index(pod).filter(|ix| *ix < completions)
}

/// Upstream's `matchSuccessPolicy`: the first rule whose `succeededIndexes` have all
/// succeeded (or `succeededCount` of them), or whose `succeededCount` alone is reached,
/// gives the `SuccessCriteriaMet` message.
pub(crate) fn match_success_policy(
    policy: &SuccessPolicy,
    completions: i32,
    succeeded: &BTreeSet<i32>,
) -> Option<String> {
    if succeeded.is_empty() {
        return None;
    }
    for (index, rule) in policy.rules.iter().enumerate() {
        let matched = match &rule.succeeded_indexes {
            Some(text) => {
                let required = parse_indexes(text, completions);
                if required.is_empty() {
                    continue;
                }
                let contains = required.intersection(succeeded).count();
                contains == required.len()
                    || rule
                        .succeeded_count
                        .is_some_and(|n| contains >= usize::try_from(n).unwrap_or(usize::MAX))
            }
            None => rule
                .succeeded_count
                .is_some_and(|n| succeeded.len() >= usize::try_from(n).unwrap_or(usize::MAX)),
        };
        if matched {
            return Some(format!("Matched rules at index {index}"));
        }
    }
    None
}

/// Parses `completedIndexes` ("1,3-5,7"), keeping what is below `completions`.
pub(crate) fn parse_indexes(text: &str, completions: i32) -> BTreeSet<i32> {
    let mut set = BTreeSet::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<i32>(), b.parse::<i32>()),
            None => (part.parse::<i32>(), part.parse::<i32>()),
        };
        let (Ok(first), Ok(last)) = (first, last) else {
            continue;
        };
        for ix in first..=last.min(completions - 1) {
            set.insert(ix);
        }
    }
    set
}

/// Writes indexes as `completedIndexes` does: three or more consecutive numbers as
/// `first-last`, the rest separated by commas.
pub(crate) fn format_indexes(indexes: &BTreeSet<i32>) -> String {
    let mut runs: Vec<(i32, i32)> = Vec::new();
    for &ix in indexes {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == ix => *last = ix,
            _ => runs.push((ix, ix)),
        }
    }
    runs.iter()
        .map(|&(first, last)| match last - first {
            0 => first.to_string(),
            1 => format!("{first},{last}"),
            _ => format!("{first}-{last}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The `count` lowest indexes below `completions` that are not in `non_pending`.
pub(crate) fn first_pending_indexes(
    non_pending: &BTreeSet<i32>,
    count: usize,
    completions: i32,
) -> Vec<i32> {
    (0..completions)
        .filter(|ix| !non_pending.contains(ix))
        .take(count)
        .collect()
}

/// Upstream's `activePodsForRemoval`: an Indexed Job's pods with an index out of range or
/// repeated first, then in `controller.ActivePods` order (unscheduled, pending, not ready,
/// newest first).
fn pods_for_removal(job: &Job, active: &[Arc<Pod>], at_least: usize) -> Vec<Arc<Pod>> {
    let mut remove: Vec<Arc<Pod>> = Vec::new();
    let mut left: Vec<Arc<Pod>> = Vec::new();
    if is_indexed(job) {
        let completions = spec_of(job).completions.unwrap_or(0);
        let mut seen = HashSet::new();
        let mut by_index: Vec<Arc<Pod>> = active.to_vec();
        by_index.sort_by_key(|p| completion_index(p));
        for pod in by_index {
            match valid_index(&pod, completions) {
                Some(ix) if seen.insert(ix) => left.push(pod),
                _ => remove.push(pod),
            }
        }
    } else {
        left = active.to_vec();
    }
    if remove.len() < at_least {
        let node = |p: &Pod| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default()
        };
        let phase_rank = |p: &Pod| match phase(p) {
            "Pending" => 0,
            "Unknown" => 1,
            "Running" => 2,
            _ => 3,
        };
        left.sort_by(|a, b| {
            (!node(a).is_empty())
                .cmp(&!node(b).is_empty())
                .then(phase_rank(a).cmp(&phase_rank(b)))
                .then(is_ready(a).cmp(&is_ready(b)))
                .then(
                    b.metadata
                        .creation_timestamp
                        .cmp(&a.metadata.creation_timestamp),
                )
        });
        let more = at_least - remove.len();
        remove.extend(left.into_iter().take(more));
    }
    remove.truncate(at_least);
    remove
}

/// The Job's pod template with the tracking finalizer and, for an Indexed Job, the
/// `JOB_COMPLETION_INDEX` variable in every container and init container.
fn pod_template(job: &Job) -> PodTemplateSpec {
    let mut template = spec_of(job).template.clone();
    if is_indexed(job)
        && let Some(spec) = template.spec.as_mut()
    {
        let env = EnvVar {
            name: COMPLETION_INDEX_ENV.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: format!("metadata.labels['{COMPLETION_INDEX}']"),
                }),
                ..EnvVarSource::default()
            }),
        };
        for container in spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(spec.containers.iter_mut())
        {
            let vars = container.env.get_or_insert_with(Vec::new);
            if !vars.iter().any(|v| v.name == COMPLETION_INDEX_ENV) {
                vars.push(env.clone());
            }
        }
    }
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    let finalizers = meta.finalizers.get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(TRACKING_FINALIZER.into());
    }
    template
}

/// A pod of the Job from its template, for `index` when the Job is Indexed (upstream's
/// `GetPodFromTemplate` with the index's annotation, label, host name and name prefix).
fn pod_for(job: &Job, template: &PodTemplateSpec, index: Option<i32>) -> Pod {
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let meta = template.metadata.clone().unwrap_or_default();
    let mut spec = template.spec.clone();
    let mut labels = meta.labels;
    let mut annotations = meta.annotations;
    let generate_name = match index {
        Some(ix) => {
            annotations
                .get_or_insert_with(Default::default)
                .insert(COMPLETION_INDEX.into(), ix.to_string());
            labels
                .get_or_insert_with(Default::default)
                .insert(COMPLETION_INDEX.into(), ix.to_string());
            if let Some(spec) = spec.as_mut() {
                spec.hostname = Some(format!("{job_name}-{ix}"));
            }
            indexed_generate_name(&job_name, ix)
        }
        None => format!("{job_name}-"),
    };
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: job.metadata.namespace.clone(),
            labels,
            annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![controller_ref("batch/v1", "Job", &job.metadata)]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// `<job>-<index>-`, the Job's name cut so that the whole fits a generated name.
pub(crate) fn indexed_generate_name(job_name: &str, index: i32) -> String {
    let suffix = format!("-{index}-");
    let keep = MAX_GENERATED_NAME_LENGTH
        .saturating_sub(suffix.len())
        .min(job_name.len());
    format!("{}{suffix}", &job_name[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Arc<Pod> {
        Arc::new(serde_json::from_value(value).unwrap())
    }

    fn failed_with(code: i32, finished: &str) -> Arc<Pod> {
        pod(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": "Failed", "containerStatuses": [{
                "name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": code, "finishedAt": finished}}
            }]}
        }))
    }

    fn settings() -> Settings {
        Settings {
            pod_failure_backoff: Duration::from_secs(10),
            max_pod_failure_backoff: Duration::from_secs(360),
        }
    }

    #[test]
    fn completed_indexes_compress_three_or_more_consecutive_numbers() {
        let set: BTreeSet<i32> = [1, 3, 4, 5, 7, 9, 10].into_iter().collect();
        assert_eq!(format_indexes(&set), "1,3-5,7,9,10");
        assert_eq!(parse_indexes("1,3-5,7,9,10", 10), [1, 3, 4, 5, 7, 9].into());
        assert_eq!(format_indexes(&BTreeSet::new()), "");
    }

    #[test]
    fn a_success_policy_rule_matches_its_indexes_or_its_count() {
        let policy: SuccessPolicy = serde_json::from_value(json!({"rules": [
            {"succeededIndexes": "0-2", "succeededCount": 2},
            {"succeededCount": 3}
        ]}))
        .unwrap();
        let set = |v: &[i32]| v.iter().copied().collect::<BTreeSet<i32>>();
        assert_eq!(match_success_policy(&policy, 5, &set(&[0, 4])), None);
        assert_eq!(
            match_success_policy(&policy, 5, &set(&[0, 2])).as_deref(),
            Some("Matched rules at index 0")
        );
        assert_eq!(
            match_success_policy(&policy, 5, &set(&[0, 3, 4])).as_deref(),
            Some("Matched rules at index 1")
        );
        assert_eq!(match_success_policy(&policy, 5, &BTreeSet::new()), None);
    }

    #[test]
    fn an_index_fails_once_its_counted_failures_reach_the_limit_per_index() {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "pi", "namespace": "ns"},
            "spec": {"completionMode": "Indexed", "completions": 2, "backoffLimitPerIndex": 1,
                "podReplacementPolicy": "Failed",
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
        }))
        .unwrap();
        let failed = |count: &str| {
            pod(json!({"metadata": {"name": "p", "annotations": {
                COMPLETION_INDEX: "0", INDEX_FAILURE_COUNT: count}},
                "status": {"phase": "Failed"}}))
        };
        assert!(!is_index_failed(&job, &failed("0")));
        assert!(is_index_failed(&job, &failed("1")));
        assert_eq!(new_index_failure_counts(&job, Some(&failed("0"))), (1, 0));
        assert_eq!(new_index_failure_counts(&job, None), (0, 0));
        assert_eq!(
            index_backoff(&failed("1")).failures_after_last_success,
            2,
            "the index's back-off counts the failure being replaced"
        );
    }

    #[test]
    fn pending_indexes_are_the_lowest_not_succeeded_nor_active() {
        let taken: BTreeSet<i32> = [0, 2].into_iter().collect();
        assert_eq!(first_pending_indexes(&taken, 2, 5), vec![1, 3]);
        assert_eq!(first_pending_indexes(&taken, 9, 3), vec![1]);
    }

    #[test]
    fn the_backoff_doubles_from_its_base_and_stops_at_its_cap() {
        let failed = Timestamp::from_second(1_000).unwrap();
        let record = |failures| BackoffRecord {
            failures_after_last_success: failures,
            last_failure_time: Some(failed),
        };
        let at = |s: i64| Timestamp::from_second(1_000 + s).unwrap();
        assert_eq!(
            record(1).remaining(&settings(), &at(4)),
            Duration::from_secs(6)
        );
        assert_eq!(
            record(3).remaining(&settings(), &at(0)),
            Duration::from_secs(40)
        );
        assert_eq!(
            record(10).remaining(&settings(), &at(0)),
            Duration::from_secs(360)
        );
        assert_eq!(record(1).remaining(&settings(), &at(11)), Duration::ZERO);
        assert_eq!(record(0).remaining(&settings(), &at(0)), Duration::ZERO);
    }

    #[test]
    fn a_success_resets_the_failures_before_it() {
        let before = failed_with(1, "2026-01-01T00:00:01Z");
        let after = failed_with(1, "2026-01-01T00:00:09Z");
        let success = pod(
            json!({"metadata": {"name": "s"}, "status": {"phase": "Succeeded",
            "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"terminated": {"exitCode": 0,
            "finishedAt": "2026-01-01T00:00:05Z"}}}]}}),
        );
        let record = BackoffRecord {
            failures_after_last_success: 4,
            last_failure_time: None,
        }
        .after(&[success], &[before, after]);
        assert_eq!(record.failures_after_last_success, 1);
        assert_eq!(
            record.last_failure_time,
            Some("2026-01-01T00:00:09Z".parse().unwrap())
        );
    }

    #[test]
    fn a_fail_job_rule_on_an_exit_code_names_the_container_and_the_rule() {
        let policy: PodFailurePolicy = serde_json::from_value(json!({"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
        ]}))
        .unwrap();
        let matched = match_pod_failure_policy(&policy, &failed_with(42, "2026-01-01T00:00:00Z"));
        assert_eq!(
            matched.fail_job.as_deref(),
            Some(
                "Container c for pod ns/p failed with exit code 42 matching FailJob rule at index 1"
            )
        );
        let other = match_pod_failure_policy(&policy, &failed_with(1, "2026-01-01T00:00:00Z"));
        assert_eq!(
            other,
            PolicyMatch {
                fail_job: None,
                counts: true,
                action: None
            }
        );
    }

    #[test]
    fn an_ignore_rule_on_a_disruption_does_not_count_the_failure() {
        let policy: PodFailurePolicy = serde_json::from_value(json!({"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
        ]}))
        .unwrap();
        let disrupted = pod(
            json!({"metadata": {"name": "p"}, "status": {"phase": "Failed",
            "conditions": [{"type": "DisruptionTarget", "status": "True"}]}}),
        );
        assert!(!match_pod_failure_policy(&policy, &disrupted).counts);
        assert_eq!(non_ignored_failed_count(Some(&policy), &[disrupted]), 0);
    }

    #[test]
    fn an_indexed_name_prefix_cuts_the_job_name_to_fit() {
        assert_eq!(indexed_generate_name("pi", 3), "pi-3-");
        let long = "j".repeat(70);
        let prefix = indexed_generate_name(&long, 12);
        assert_eq!(prefix.len(), MAX_GENERATED_NAME_LENGTH);
        assert!(prefix.ends_with("-12-"));
    }

    #[test]
    fn an_indexed_pod_carries_its_index_and_the_tracking_finalizer() {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "pi", "namespace": "ns", "uid": "u"},
            "spec": {"completionMode": "Indexed", "completions": 3, "template": {
                "metadata": {"labels": {"job-name": "pi"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        }))
        .unwrap();
        let pod = pod_for(&job, &pod_template(&job), Some(2));
        let value = serde_json::to_value(&pod).unwrap();
        assert_eq!(value["metadata"]["generateName"], "pi-2-");
        assert_eq!(value["metadata"]["annotations"][COMPLETION_INDEX], "2");
        assert_eq!(value["metadata"]["labels"][COMPLETION_INDEX], "2");
        assert_eq!(value["metadata"]["finalizers"], json!([TRACKING_FINALIZER]));
        assert_eq!(value["spec"]["hostname"], "pi-2");
        assert_eq!(
            value["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
            format!("metadata.labels['{COMPLETION_INDEX}']")
        );
        assert_eq!(value["metadata"]["ownerReferences"][0]["kind"], "Job");
    }

    #[test]
    fn a_suspended_condition_is_only_added_true_and_updated_on_change() {
        let mut conditions = Vec::new();
        assert!(!ensure_condition(
            &mut conditions,
            "Suspended",
            "False",
            "JobResumed",
            "Job resumed"
        ));
        assert!(ensure_condition(
            &mut conditions,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended"
        ));
        assert!(!ensure_condition(
            &mut conditions,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended"
        ));
        assert!(ensure_condition(
            &mut conditions,
            "Suspended",
            "False",
            "JobResumed",
            "Job resumed"
        ));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].status, "False");
    }
}

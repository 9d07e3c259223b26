//! The CronJob controller: creates a CronJob's Jobs at the times of its schedule, as
//! upstream's `pkg/controller/cronjob` (the v2 controller of Kubernetes 1.34) does — Jobs
//! named `<cronjob>-<scheduled minutes since the epoch>`, `concurrencyPolicy`,
//! `startingDeadlineSeconds`, `suspend`, the history limits, `status.active`,
//! `lastScheduleTime` and `lastSuccessfulTime`, and the controller's Events.
//!
//! Time is read from a [`Clock`], which tests can move forward.
//!
//! A schedule is parsed and its times computed by [`sim_apiserver::cron_schedule`], the
//! robfig/cron parser the API server validates it with, so a schedule is refused in the
//! same words on both sides. It runs in its CronJob's `timeZone` (or its own `TZ=`), loaded
//! from the host's zoneinfo as kube-controller-manager's `time.LoadLocation` loads it
//! ([`sim_apiserver::time_zone`]), with robfig/cron's arithmetic across daylight-saving
//! changes: a time the clocks skip is not run that day, a time they repeat runs twice. A
//! zone the host does not have is refused with upstream's `UnknownTimeZone` Event.
//!
//! # Caveats
//! - A schedule without a zone runs in UTC: upstream's runs in kube-controller-manager's
//!   local zone, which is UTC in the containers it usually runs in.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use sim_apiserver::cron_schedule::{self, Schedule};
use sim_apiserver::time_zone;
use tokio::sync::watch;

use super::events::{EventType, Recorder};
use super::informer::{AbortOnDrop, Cache, Change, ObjectKey};
use super::queue::Queue;
use super::support::{code, controller_of, controller_ref, is_deleting, is_not_found};

/// The annotation of a Job with the time it was scheduled for.
const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// How long after a scheduled time the CronJob is looked at (upstream's
/// `nextScheduleDelta`).
const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);

/// The time the controller goes by: the real time plus an offset that tests can move
/// forward ([`Clock::advance`]), upon which every CronJob is looked at again.
#[derive(Clone)]
pub struct Clock {
    offset: Arc<Mutex<SignedDuration>>,
    moved: watch::Sender<u64>,
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clock")
            .field("offset", &*self.lock())
            .finish()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self {
            offset: Arc::default(),
            moved: watch::channel(0).0,
        }
    }
}

impl Clock {
    fn lock(&self) -> std::sync::MutexGuard<'_, SignedDuration> {
        self.offset.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Now, as the controller sees it.
    pub fn now(&self) -> Timestamp {
        Timestamp::now()
            .checked_add(*self.lock())
            .unwrap_or_else(|_| Timestamp::now())
    }

    /// Moves the controller's time forward by `by`.
    pub fn advance(&self, by: Duration) {
        {
            let mut offset = self.lock();
            *offset = offset.saturating_add(SignedDuration::try_from(by).unwrap_or_default());
        }
        self.moved.send_modify(|n| *n += 1);
    }
}

/// Errors of one CronJob sync (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
    /// A Job that should have been replaced could not be deleted.
    #[error("could not replace job {0}")]
    Replace(String),
}

/// The civil date of days since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Upstream's `mostRecentScheduleTime`: the earliest time considered, the most recent
/// scheduled time not after `now` (if any), and how many were missed.
fn most_recent_schedule_time(
    cj: &CronJob,
    now: &Timestamp,
    schedule: &Schedule,
    with_starting_deadline: bool,
) -> Result<(Timestamp, Option<Timestamp>, u64), String> {
    let mut earliest = cj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .or(cj.metadata.creation_timestamp.as_ref())
        .map_or(*now, |t| t.0);
    if with_starting_deadline && let Some(deadline) = spec_of(cj).starting_deadline_seconds {
        let limit = now
            .checked_sub(SignedDuration::from_secs(deadline))
            .unwrap_or(*now);
        if limit > earliest {
            earliest = limit;
        }
    }
    let Some(t1) = schedule.next(&earliest) else {
        return Ok((earliest, None, 0));
    };
    let Some(t2) = schedule.next(&t1) else {
        return Ok((earliest, (t1 <= *now).then_some(t1), 0));
    };
    if *now < t1 {
        return Ok((earliest, None, 0));
    }
    if *now < t2 {
        return Ok((earliest, Some(t1), 0));
    }
    let between = t2.as_second() - t1.as_second();
    if between < 1 {
        return Err("time difference between two schedules is less than 1 second".into());
    }
    let elapsed = now.as_second() - t1.as_second();
    let missed = elapsed / between + 1;
    let potential = Timestamp::from_second(t1.as_second() + (missed - 2) * between).unwrap_or(t1);
    let mut most_recent = None;
    let mut t = schedule.next(&potential);
    while let Some(at) = t {
        if at > *now {
            break;
        }
        most_recent = Some(at);
        t = schedule.next(&at);
    }
    Ok((earliest, most_recent, u64::try_from(missed).unwrap_or(0)))
}

/// Upstream's `nextScheduleTimeDuration`: how long until the CronJob is looked at again.
pub(crate) fn next_schedule_in(cj: &CronJob, now: &Timestamp, schedule: &Schedule) -> Duration {
    let from = match most_recent_schedule_time(cj, now, schedule, false) {
        Err(_) => *now,
        Ok((_, Some(recent), _)) => recent,
        Ok((earliest, None, 0)) => earliest,
        Ok((_, None, _)) => *now,
    };
    let Some(next) = schedule.next(&from) else {
        return Duration::from_secs(3600);
    };
    let d = next.duration_since(*now);
    let d = if d.is_negative() {
        Duration::ZERO
    } else {
        d.unsigned_abs()
    };
    d + NEXT_SCHEDULE_DELTA
}

fn spec_of(cj: &CronJob) -> &k8s_openapi::api::batch::v1::CronJobSpec {
    static EMPTY: std::sync::LazyLock<k8s_openapi::api::batch::v1::CronJobSpec> =
        std::sync::LazyLock::new(Default::default);
    cj.spec.as_ref().unwrap_or(&EMPTY)
}

/// The Job's true `Complete` or `Failed` condition type, if it has finished.
fn finished_as(job: &Job) -> Option<&str> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| c.type_.as_str())
}

/// The Job's name for a scheduled time: `<cronjob>-<minutes since the epoch>`.
pub(crate) fn job_name(cj: &CronJob, scheduled: &Timestamp) -> String {
    format!(
        "{}-{}",
        cj.metadata.name.as_deref().unwrap_or_default(),
        scheduled.as_second().div_euclid(60)
    )
}

/// Upstream's `getJobFromTemplate2`.
fn job_from_template(cj: &CronJob, scheduled: &Timestamp) -> Job {
    let template = spec_of(cj).job_template.clone();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    let zone = time_zone::load(spec_of(cj).time_zone.as_deref().unwrap_or_default())
        .unwrap_or(TimeZone::UTC);
    annotations.insert(SCHEDULED_TIMESTAMP.into(), rfc3339_in(&zone, scheduled));
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(cj, scheduled)),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![controller_ref("batch/v1", "CronJob", &cj.metadata)]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    }
}

fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        field_path: None,
    }
}

struct Controller {
    client: Client,
    cronjobs: Cache<CronJob>,
    jobs: Cache<Job>,
    queue: Queue<ObjectKey>,
    recorder: Recorder,
    clock: Clock,
}

/// Subscribes the controller to the shared caches and starts its worker.
pub(crate) fn start(
    client: Client,
    cronjobs: &Cache<CronJob>,
    jobs: &Cache<Job>,
    clock: Clock,
) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        recorder: Recorder::new(client.clone(), "cronjob-controller"),
        client,
        cronjobs: cronjobs.clone(),
        jobs: jobs.clone(),
        queue: Queue::new(),
        clock,
    });
    let c = controller.clone();
    cronjobs.subscribe(move |change| c.cronjob_changed(change));
    let c = controller.clone();
    jobs.subscribe(move |change| c.job_changed(change));
    AbortOnDrop::spawn(async move { controller.run().await })
}

impl Controller {
    fn cronjob_changed(&self, change: &Change<CronJob>) {
        let key = ObjectKey::of(change.object().as_ref());
        if let Change::Applied {
            old: Some(old),
            new,
        } = change
        {
            let (before, after) = (spec_of(old), spec_of(new));
            if before.schedule != after.schedule || before.time_zone != after.time_zone {
                match cron_schedule::parse(&schedule_text(new)) {
                    Ok(schedule) => {
                        let after = next_schedule_in(new, &self.clock.now(), &schedule);
                        self.queue.add_after(key, after);
                    }
                    Err(error) => self.event(
                        new,
                        EventType::Warning,
                        "UnParseableCronJobSchedule",
                        &format!(
                            "unparseable schedule for cronjob: {}: {error}",
                            after.schedule
                        ),
                    ),
                }
                return;
            }
        }
        if !matches!(change, Change::Deleted(_)) {
            self.queue.add(key);
        }
    }

    fn job_changed(&self, change: &Change<Job>) {
        let job = change.object();
        if let Change::Applied {
            old: Some(old),
            new,
        } = change
            && old.metadata.resource_version == new.metadata.resource_version
        {
            return;
        }
        let Some(r) = controller_of(&job.metadata).filter(|r| r.kind == "CronJob") else {
            return;
        };
        let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
        if let Some(cj) = self.cronjobs.get(namespace, &r.name)
            && cj.metadata.uid.as_deref() == Some(r.uid.as_str())
        {
            self.queue.add(ObjectKey::new(namespace, &r.name));
        }
    }

    fn event(&self, cj: &CronJob, type_: EventType, reason: &str, message: &str) {
        self.recorder
            .record("batch/v1", "CronJob", &cj.metadata, type_, reason, message);
    }

    async fn run(self: Arc<Self>) {
        self.cronjobs.wait_ready().await;
        self.jobs.wait_ready().await;
        let mut moved = self.clock.moved.subscribe();
        loop {
            let key = tokio::select! {
                key = self.queue.next() => key,
                Ok(()) = moved.changed() => {
                    for cj in self.cronjobs.list() {
                        self.queue.add(ObjectKey::of(cj.as_ref()));
                    }
                    continue;
                }
            };
            let outcome = self.sync(&key).await;
            if let Some(error) = self.queue.settle(&key, outcome) {
                tracing::debug!(cronjob = %key, error = %super::support::error_chain(&error), "cronjob sync failed; retrying");
            }
        }
    }

    fn jobs_api(&self, namespace: &str) -> Api<Job> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn sync(&self, key: &ObjectKey) -> Result<Option<Duration>, Error> {
        let Some(shared) = self.cronjobs.get(&key.namespace, &key.name) else {
            return Ok(None);
        };
        let jobs: Vec<Arc<Job>> = self
            .jobs
            .list_in(&key.namespace)
            .into_iter()
            .filter(|j| controller_of(&j.metadata).is_some_and(|r| r.name == key.name))
            .collect();
        let mut cj = (*shared).clone();
        let cleaned = self.cleanup_finished_jobs(&mut cj, &jobs).await;
        let (requeue, synced, sync_error) = match self.sync_cronjob(&mut cj, &jobs).await {
            Ok((requeue, updated)) => (requeue, updated, None),
            Err((updated, error)) => (None, updated, Some(error)),
        };
        if cleaned || synced {
            let api: Api<CronJob> = Api::namespaced(self.client.clone(), &key.namespace);
            if let Some(status) = cj.status.as_mut()
                && status.active.as_ref().is_some_and(Vec::is_empty)
            {
                status.active = None;
            }
            api.replace_status(&key.name, &PostParams::default(), &cj)
                .await?;
        }
        if requeue.is_some() {
            return Ok(requeue);
        }
        match sync_error {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    fn in_active(cj: &CronJob, uid: &str) -> bool {
        cj.status
            .as_ref()
            .and_then(|s| s.active.as_ref())
            .is_some_and(|a| a.iter().any(|r| r.uid.as_deref() == Some(uid)))
    }

    fn remove_active(cj: &mut CronJob, uid: &str) {
        if let Some(active) = cj.status.as_mut().and_then(|s| s.active.as_mut()) {
            active.retain(|r| r.uid.as_deref() != Some(uid));
        }
    }

    /// Upstream's `syncCronJob`: reconciles the active list with the Jobs, then creates
    /// the Job of the most recent unmet scheduled time. Returns when to look again and
    /// whether the status changed (also with an error).
    async fn sync_cronjob(
        &self,
        cj: &mut CronJob,
        jobs: &[Arc<Job>],
    ) -> Result<(Option<Duration>, bool), (bool, Error)> {
        let now = self.clock.now();
        let namespace = cj.metadata.namespace.clone().unwrap_or_default();
        let api = self.jobs_api(&namespace);
        let mut updated = false;
        let mut children = HashSet::new();
        for job in jobs {
            let uid = job.metadata.uid.clone().unwrap_or_default();
            children.insert(uid.clone());
            let found = Self::in_active(cj, &uid);
            let finished = finished_as(job);
            if !found && finished.is_none() {
                let cronjobs: Api<CronJob> = Api::namespaced(self.client.clone(), &namespace);
                let fresh = cronjobs
                    .get(cj.metadata.name.as_deref().unwrap_or_default())
                    .await
                    .map_err(|e| (updated, e.into()))?;
                if Self::in_active(&fresh, &uid) {
                    *cj = fresh;
                    continue;
                }
                self.event(
                    cj,
                    EventType::Warning,
                    "UnexpectedJob",
                    &format!(
                        "Saw a job that the controller did not create or forgot: {}",
                        job.metadata.name.as_deref().unwrap_or_default()
                    ),
                );
            } else if let Some(condition) = finished {
                if found {
                    Self::remove_active(cj, &uid);
                    self.event(
                        cj,
                        EventType::Normal,
                        "SawCompletedJob",
                        &format!(
                            "Saw completed job: {}, condition: {condition}",
                            job.metadata.name.as_deref().unwrap_or_default()
                        ),
                    );
                    updated = true;
                }
                if condition == "Complete" {
                    let completed = job.status.as_ref().and_then(|s| s.completion_time.clone());
                    let status = cj.status.get_or_insert_with(Default::default);
                    let later = match (&status.last_successful_time, &completed) {
                        (None, _) => true,
                        (Some(last), Some(at)) => at.0 > last.0,
                        (Some(_), None) => false,
                    };
                    if later {
                        status.last_successful_time = completed;
                        updated = true;
                    }
                }
            }
        }
        let active: Vec<ObjectReference> = cj
            .status
            .as_ref()
            .and_then(|s| s.active.clone())
            .unwrap_or_default();
        for r in active {
            let uid = r.uid.clone().unwrap_or_default();
            if children.contains(&uid) {
                continue;
            }
            match api.get(r.name.as_deref().unwrap_or_default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {
                    self.event(
                        cj,
                        EventType::Normal,
                        "MissingJob",
                        &format!(
                            "Active job went missing: {}",
                            r.name.as_deref().unwrap_or_default()
                        ),
                    );
                    Self::remove_active(cj, &uid);
                    updated = true;
                }
                Err(e) => return Err((updated, e.into())),
            }
        }
        if is_deleting(&cj.metadata) {
            return Ok((None, updated));
        }
        if let Some(zone) = spec_of(cj).time_zone.as_deref()
            && let Err(error) = time_zone::load(zone)
        {
            self.event(
                cj,
                EventType::Warning,
                "UnknownTimeZone",
                &format!("invalid timeZone: {zone:?}: {error}"),
            );
            return Ok((None, updated));
        }
        if spec_of(cj).suspend == Some(true) {
            return Ok((None, updated));
        }
        let text = schedule_text(cj);
        if text.contains("TZ") {
            self.event(
                cj,
                EventType::Warning,
                "UnsupportedSchedule",
                &format!("CRON_TZ or TZ used in schedule {text:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details"),
            );
        }
        let schedule = match cron_schedule::parse(&text) {
            Ok(s) => s,
            Err(error) => {
                self.event(
                    cj,
                    EventType::Warning,
                    "UnparseableSchedule",
                    &format!("unparseable schedule: {:?} : {error}", spec_of(cj).schedule),
                );
                return Ok((None, updated));
            }
        };
        let scheduled = match most_recent_schedule_time(cj, &now, &schedule, true) {
            Err(error) => {
                self.event(
                    cj,
                    EventType::Warning,
                    "InvalidSchedule",
                    &format!("invalid schedule: {} : {error}", spec_of(cj).schedule),
                );
                return Ok((None, updated));
            }
            Ok((_, None, _)) => {
                return Ok((Some(next_schedule_in(cj, &now, &schedule)), updated));
            }
            Ok((_, Some(at), missed)) => {
                if missed > 100 {
                    self.event(
                        cj,
                        EventType::Warning,
                        "TooManyMissedTimes",
                        "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
                    );
                }
                at
            }
        };
        let next = next_schedule_in(cj, &now, &schedule);
        if let Some(deadline) = spec_of(cj).starting_deadline_seconds
            && scheduled
                .checked_add(SignedDuration::from_secs(deadline))
                .is_ok_and(|t| t < now)
        {
            self.event(
                cj,
                EventType::Warning,
                "MissSchedule",
                &format!(
                    "Missed scheduled time to start a job: {}",
                    rfc1123z(&scheduled)
                ),
            );
            return Ok((Some(next), updated));
        }
        let name = job_name(cj, &scheduled);
        let status = cj.status.clone().unwrap_or_default();
        let active = status.active.clone().unwrap_or_default();
        if active
            .iter()
            .any(|r| r.name.as_deref() == Some(name.as_str()))
            || status.last_schedule_time.as_ref().map(|t| t.0) == Some(scheduled)
        {
            return Ok((Some(next), updated));
        }
        let policy = spec_of(cj).concurrency_policy.as_deref().unwrap_or("Allow");
        if policy == "Forbid" && !active.is_empty() {
            self.event(
                cj,
                EventType::Normal,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid",
            );
            return Ok((Some(next), updated));
        }
        if policy == "Replace" {
            for r in &active {
                let job_name = r.name.clone().unwrap_or_default();
                let job = match api.get(&job_name).await {
                    Ok(job) => job,
                    Err(e) => {
                        self.event(
                            cj,
                            EventType::Warning,
                            "FailedGet",
                            &format!("Get job: {}", api_message(&e)),
                        );
                        return Err((updated, e.into()));
                    }
                };
                if !self.delete_job(cj, &job).await {
                    return Err((updated, Error::Replace(format!("{namespace}/{job_name}"))));
                }
                updated = true;
            }
        }
        let request = job_from_template(cj, &scheduled);
        let created = match api.create(&PostParams::default(), &request).await {
            Ok(job) => {
                self.event(
                    cj,
                    EventType::Normal,
                    "SuccessfulCreate",
                    &format!(
                        "Created job {}",
                        job.metadata.name.as_deref().unwrap_or_default()
                    ),
                );
                job
            }
            Err(e) if code(&e) == Some(409) => {
                let job = api.get(&name).await.map_err(|e| (updated, e.into()))?;
                let ours = controller_of(&job.metadata)
                    .is_some_and(|r| Some(r.uid.as_str()) == cj.metadata.uid.as_deref());
                if !ours || Self::in_active(cj, job.metadata.uid.as_deref().unwrap_or_default()) {
                    return Ok((None, updated));
                }
                job
            }
            Err(e) => {
                if !is_namespace_terminating(&e) {
                    self.event(
                        cj,
                        EventType::Warning,
                        "FailedCreate",
                        &format!("Error creating job: {}", api_message(&e)),
                    );
                }
                return Err((updated, e.into()));
            }
        };
        let status = cj.status.get_or_insert_with(Default::default);
        status
            .active
            .get_or_insert_with(Vec::new)
            .push(reference(&created));
        status.last_schedule_time = Some(Time(scheduled));
        Ok((Some(next_schedule_in(cj, &now, &schedule)), true))
    }

    /// Upstream's `cleanupFinishedJobs`: the oldest finished Jobs beyond the history
    /// limits are deleted. True when the status changed.
    async fn cleanup_finished_jobs(&self, cj: &mut CronJob, jobs: &[Arc<Job>]) -> bool {
        let spec = spec_of(cj).clone();
        if spec.successful_jobs_history_limit.is_none() && spec.failed_jobs_history_limit.is_none()
        {
            return false;
        }
        let mut updated = false;
        for (kind, limit) in [
            ("Complete", spec.successful_jobs_history_limit),
            ("Failed", spec.failed_jobs_history_limit),
        ] {
            let Some(limit) = limit else { continue };
            let mut finished: Vec<&Arc<Job>> = jobs
                .iter()
                .filter(|j| finished_as(j) == Some(kind))
                .collect();
            let excess = finished
                .len()
                .saturating_sub(usize::try_from(limit).unwrap_or(0));
            if excess == 0 {
                continue;
            }
            finished.sort_by(|a, b| {
                let start = |j: &Job| j.status.as_ref().and_then(|s| s.start_time.clone());
                match (start(a), start(b)) {
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (x, y) if x == y => a.metadata.name.cmp(&b.metadata.name),
                    (x, y) => x.map(|t| t.0).cmp(&y.map(|t| t.0)),
                }
            });
            for job in finished.into_iter().take(excess) {
                if self.delete_job(cj, job).await {
                    updated = true;
                }
            }
        }
        updated
    }

    /// Deletes a Job with background propagation and drops it from the active list.
    async fn delete_job(&self, cj: &mut CronJob, job: &Job) -> bool {
        let api = self.jobs_api(job.metadata.namespace.as_deref().unwrap_or_default());
        let name = job.metadata.name.clone().unwrap_or_default();
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        if let Err(e) = api.delete(&name, &params).await {
            self.event(
                cj,
                EventType::Warning,
                "FailedDelete",
                &format!("Deleted job: {}", api_message(&e)),
            );
            return false;
        }
        Self::remove_active(cj, job.metadata.uid.as_deref().unwrap_or_default());
        self.event(
            cj,
            EventType::Normal,
            "SuccessfulDelete",
            &format!("Deleted job {name}"),
        );
        true
    }
}

/// The schedule with the CronJob's `timeZone` as a `TZ=` prefix (upstream's
/// `formatSchedule`).
fn schedule_text(cj: &CronJob) -> String {
    let spec = spec_of(cj);
    match spec.time_zone.as_deref() {
        Some(zone) if !spec.schedule.contains("TZ") && time_zone::load(zone).is_ok() => {
            format!("TZ={zone} {}", spec.schedule)
        }
        _ => spec.schedule.clone(),
    }
}

fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

fn is_namespace_terminating(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")),
        _ => false,
    }
}

/// A time as Go's `time.RFC3339` writes it in `zone`: `2026-03-08T03:30:00-04:00`, `Z` for
/// an offset of zero.
fn rfc3339_in(zone: &TimeZone, at: &Timestamp) -> String {
    let wall = zone.to_datetime(*at);
    let offset = zone.to_offset(*at).seconds();
    let suffix = if offset == 0 {
        "Z".to_string()
    } else {
        let sign = if offset < 0 { '-' } else { '+' };
        let minutes = offset.unsigned_abs() / 60;
        format!("{sign}{:02}:{:02}", minutes / 60, minutes % 60)
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{suffix}",
        wall.year(),
        wall.month(),
        wall.day(),
        wall.hour(),
        wall.minute(),
        wall.second()
    )
}

/// A time as Go's `time.RFC1123Z` in UTC: `Mon, 02 Jan 2006 15:04:05 +0000`.
fn rfc1123z(at: &Timestamp) -> String {
    let secs = at.as_second();
    let days = secs.div_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let in_day = secs.rem_euclid(86_400);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]
        [usize::try_from(days.rem_euclid(7)).unwrap_or(0)];
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][usize::try_from(m - 1).unwrap_or(0)];
    format!(
        "{weekday}, {d:02} {month} {y} {:02}:{:02}:{:02} +0000",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn cronjob(created: &str, last: Option<&str>, deadline: Option<i64>) -> CronJob {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "creationTimestamp": created},
            "spec": {"schedule": "*/10 * * * *", "startingDeadlineSeconds": deadline,
                "jobTemplate": {"spec": {"template": {}}}},
            "status": {"lastScheduleTime": last}
        }))
        .unwrap()
    }

    #[test]
    fn the_most_recent_missed_time_is_the_one_started_and_a_deadline_skips_it() {
        let schedule = cron_schedule::parse("*/10 * * * *").unwrap();
        let cj = cronjob("2026-01-01T00:00:30Z", None, None);
        let now = at("2026-01-01T00:35:00Z");
        let (_, recent, missed) = most_recent_schedule_time(&cj, &now, &schedule, true).unwrap();
        assert_eq!(recent, Some(at("2026-01-01T00:30:00Z")));
        assert_eq!(missed, 3);
        let started = cronjob("2026-01-01T00:00:30Z", Some("2026-01-01T00:30:00Z"), None);
        let (_, recent, _) = most_recent_schedule_time(&started, &now, &schedule, true).unwrap();
        assert_eq!(recent, None);
        assert_eq!(
            next_schedule_in(&started, &now, &schedule),
            Duration::from_secs(300) + NEXT_SCHEDULE_DELTA
        );
        let strict = cronjob("2026-01-01T00:00:30Z", None, Some(60));
        let (_, recent, _) = most_recent_schedule_time(&strict, &now, &schedule, true).unwrap();
        assert_eq!(recent, None, "no scheduled time within the last minute");
    }

    #[test]
    fn a_job_is_named_after_its_scheduled_minute_and_carries_the_time() {
        let cj = cronjob("2026-01-01T00:00:00Z", None, None);
        let job = job_from_template(&cj, &at("2026-01-01T00:10:00Z"));
        assert_eq!(job.metadata.name.as_deref(), Some("c-29453770"));
        assert_eq!(
            job.metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP],
            "2026-01-01T00:10:00Z"
        );
        let mut zoned = cj.clone();
        zoned.spec.as_mut().unwrap().time_zone = Some("America/New_York".into());
        let job = job_from_template(&zoned, &at("2026-07-01T13:00:00Z"));
        assert_eq!(
            job.metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP],
            "2026-07-01T09:00:00-04:00"
        );
        assert_eq!(
            rfc1123z(&at("2026-01-01T00:10:00Z")),
            "Thu, 01 Jan 2026 00:10:00 +0000"
        );
    }
}

//! The Job and CronJob controllers against an in-process API server with no nodes: the
//! tests play the kubelet through `pods/status`, with the pod-failure back-off shortened
//! and the CronJob controller's clock moved through [`ControllerConfig`]. What the real kube-controller-manager does with the same Jobs is
//! compared in the harness's `tests/differential/jobs.rs`.

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sim_controllers::ControllerConfig;
use sim_test_support::controllers::Sim;
use sim_test_support::eventually;

fn job(name: &str, spec: Value) -> Job {
    let mut spec = spec;
    spec["template"] = json!({"spec": {"restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox"}]}});
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn with_backoff(base: Duration, max: Duration) -> ControllerConfig {
    ControllerConfig {
        job_pod_failure_backoff: base,
        job_max_pod_failure_backoff: max,
        ..ControllerConfig::fast()
    }
}

/// The Job's pods that are neither finished nor being deleted.
async fn active_pods(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    let selector = format!("batch.kubernetes.io/job-name={job}");
    pods.list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
        })
        .collect()
}

async fn one_active_pod(pods: &Api<Pod>, job: &str, other_than: &[String]) -> Pod {
    eventually("an active pod of the job", || async {
        active_pods(pods, job)
            .await
            .into_iter()
            .find(|p| !other_than.contains(&p.name_any()))
    })
    .await
}

/// Plays the kubelet: the pod failed with `exit_code`, with `conditions` besides.
async fn fail(pods: &Api<Pod>, pod: &Pod, exit_code: i32, conditions: Value) {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    pods.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"phase": "Failed", "conditions": conditions,
            "containerStatuses": [{"name": "c", "image": "busybox", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": exit_code, "finishedAt": now}}}]}}),
        ),
    )
    .await
    .unwrap();
}

async fn failed_with(jobs: &Api<Job>, name: &str) -> Job {
    eventually("the job failed", || async {
        let job = jobs.get(name).await.unwrap();
        let failed = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"));
        failed.then_some(job)
    })
    .await
}

fn reasons(job: &Job) -> Vec<(String, String)> {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.reason.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn a_failed_pod_is_replaced_after_the_back_off_until_the_limit_fails_the_job() {
    let backoff = Duration::from_secs(3);
    let sim = Sim::start_with(&[], with_backoff(backoff, backoff)).await;
    let jobs: Api<Job> = sim.api();
    let pods: Api<Pod> = sim.api();
    jobs.create(
        &PostParams::default(),
        &job("retried", json!({"backoffLimit": 1})),
    )
    .await
    .unwrap();
    let first = one_active_pod(&pods, "retried", &[]).await;
    let failed_at = Instant::now();
    fail(&pods, &first, 1, json!(null)).await;
    let second = one_active_pod(&pods, "retried", &[first.name_any()]).await;
    // The finish time has whole seconds: the replacement waits at least the back-off less
    // one second after the failure was written.
    let waited = failed_at.elapsed();
    assert!(
        waited >= backoff - Duration::from_secs(1),
        "the replacement came {waited:?} after the failure"
    );
    fail(&pods, &second, 1, json!(null)).await;
    let job = failed_with(&jobs, "retried").await;
    assert_eq!(
        reasons(&job),
        [
            ("FailureTarget".into(), "BackoffLimitExceeded".into()),
            ("Failed".into(), "BackoffLimitExceeded".into())
        ]
    );
    let status = job.status.unwrap();
    assert_eq!((status.failed, status.active), (Some(2), None));
    sim.stop().await;
}

#[tokio::test]
async fn an_ignored_disruption_is_not_counted_and_the_next_failure_is() {
    let short = Duration::from_millis(100);
    let sim = Sim::start_with(&[], with_backoff(short, short)).await;
    let jobs: Api<Job> = sim.api();
    let pods: Api<Pod> = sim.api();
    let spec = json!({"backoffLimit": 0, "podFailurePolicy": {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0]}}
    ]}});
    jobs.create(&PostParams::default(), &job("disrupted", spec))
        .await
        .unwrap();
    let first = one_active_pod(&pods, "disrupted", &[]).await;
    let disruption = json!([{"type": "DisruptionTarget", "status": "True",
        "reason": "EvictionByEvictionAPI"}]);
    fail(&pods, &first, 137, disruption).await;
    let second = one_active_pod(&pods, "disrupted", &[first.name_any()]).await;
    let status = jobs.get("disrupted").await.unwrap().status.unwrap();
    assert_eq!(status.failed, None, "an ignored failure is not counted");
    fail(&pods, &second, 1, json!(null)).await;
    let job = failed_with(&jobs, "disrupted").await;
    assert_eq!(
        reasons(&job).last(),
        Some(&("Failed".into(), "BackoffLimitExceeded".into()))
    );
    assert_eq!(job.status.unwrap().failed, Some(1));
    let held: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| {
            p.finalizers()
                .iter()
                .any(|f| f.starts_with("batch.kubernetes.io"))
        })
        .map(|p| p.name_any())
        .collect();
    assert!(held.is_empty(), "pods still tracked: {held:?}");
    sim.stop().await;
}

fn cronjob(name: &str, spec: Value) -> CronJob {
    let mut spec = spec;
    spec["jobTemplate"] = json!({"spec": {"template": {"spec": {"restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox"}]}}}});
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn jobs_of(jobs: &Api<Job>, cronjob: &str) -> Vec<Job> {
    jobs.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|j| {
            j.owner_references()
                .iter()
                .any(|r| r.kind == "CronJob" && r.name == cronjob)
        })
        .collect()
}

#[tokio::test]
async fn a_cronjob_starts_its_jobs_on_the_moved_clock_forbids_overlap_and_keeps_no_history() {
    let config = ControllerConfig::fast();
    let clock = config.cronjob_clock.clone();
    let sim = Sim::start_with(&[], config).await;
    let cronjobs: Api<CronJob> = sim.api();
    let jobs: Api<Job> = sim.api();
    let pods: Api<Pod> = sim.api();
    let spec = json!({"schedule": "*/5 * * * *", "concurrencyPolicy": "Forbid",
        "successfulJobsHistoryLimit": 0});
    cronjobs
        .create(&PostParams::default(), &cronjob("every-five", spec))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(300));
    let first = eventually("the first scheduled job", || async {
        jobs_of(&jobs, "every-five").await.into_iter().next()
    })
    .await;
    let minutes: i64 = first
        .name_any()
        .strip_prefix("every-five-")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        minutes % 5,
        0,
        "named after a scheduled minute: {}",
        first.name_any()
    );
    let status = eventually("the job listed as active", || async {
        let status = cronjobs.get("every-five").await.unwrap().status?;
        (status.active.as_ref()?.len() == 1).then_some(status)
    })
    .await;
    assert_eq!(
        status.last_schedule_time.map(|t| t.0.as_second()),
        Some(minutes * 60)
    );
    // Forbid: the next scheduled time passes while the first job runs.
    clock.advance(Duration::from_secs(300));
    eventually(
        "the controller to see the second scheduled time",
        || async {
            let events: Api<k8s_openapi::api::core::v1::Event> = sim.api();
            let all = events.list(&ListParams::default()).await.unwrap().items;
            all.iter()
                .any(|e| e.reason.as_deref() == Some("JobAlreadyActive"))
                .then_some(())
        },
    )
    .await;
    assert_eq!(jobs_of(&jobs, "every-five").await.len(), 1);
    // The job completes: it leaves the active list, sets lastSuccessfulTime, and goes,
    // since no successful job is kept; the scheduled time it held back then starts.
    let pod = one_active_pod(&pods, &first.name_any(), &[]).await;
    pods.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
    )
    .await
    .unwrap();
    // The held-back run is the most recent scheduled time the controller's clock has
    // passed: five minutes after the first, or later if real time crossed the next
    // five-minute mark meanwhile (the clock is real time plus the moves).
    let held_back = |name: &str| -> bool {
        name.strip_prefix("every-five-")
            .and_then(|m| m.parse::<i64>().ok())
            .is_some_and(|m| m % 5 == 0 && m > minutes && m * 60 <= clock.now().as_second())
    };
    eventually(
        "the completed job replaced by the held-back one",
        || async {
            let status = cronjobs.get("every-five").await.unwrap().status?;
            let gone = jobs.get_opt(&first.name_any()).await.unwrap().is_none();
            let active: Vec<String> = status.active?.into_iter().filter_map(|r| r.name).collect();
            let replaced = matches!(active.as_slice(), [name] if held_back(name));
            (gone && replaced && status.last_successful_time.is_some()).then_some(())
        },
    )
    .await;
    sim.stop().await;
}

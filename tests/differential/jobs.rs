//! The Job and TTL-after-finished controllers judged by kube-controller-manager's: Jobs
//! created on both control planes (neither has nodes, so pods stay Pending until the test
//! plays the kubelet's part through `pods/status`), compared by their pods' metadata and
//! spec, the Job's status and conditions, and the Events the controller wrote.

use serde_json::{Value, json};

use super::{Answer, BATCH, Interaction, JSON, MERGE, NS, Target, normalize, raw_send, support};

/// Generated pod names of the Jobs below: the random suffix becomes `<random>`.
static POD_NAME: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"\b(job-[a-z]+-(?:\d+-)?)[bcdfghjklmnpqrstvwxz2456789]{5}\b").unwrap()
});

/// The CronJob of the interactions below.
const CRONJOB: &str = "job-cron";

/// Jobs of the CronJob below, named after their scheduled minute.
static SCHEDULED_JOB: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| regex::Regex::new(r"\bjob-cron-\d+\b").unwrap());

fn mask_pod_names(value: Value) -> Value {
    match value {
        Value::String(s) => {
            let s = POD_NAME.replace_all(&s, "${1}<random>");
            Value::String(
                SCHEDULED_JOB
                    .replace_all(&s, "job-cron-<minute>")
                    .into_owned(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(mask_pod_names).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, mask_pod_names(v)))
                .collect(),
        ),
        other => other,
    }
}

fn record(t: &Target, asked: String, body: Value) {
    t.record(Answer {
        asked,
        code: 200,
        body: normalize(mask_pod_names(body)),
    });
}

fn job_path(name: &str) -> String {
    format!("{BATCH}/namespaces/{NS}/jobs/{name}")
}

fn job(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["template"] = json!({"spec": {"restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}});
    json!({"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

async fn get(t: &Target, path: &str) -> (u16, Value) {
    let (code, text) = support::raw(&t.admin, "GET", path, JSON, Vec::new()).await;
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The Job's pods (by its `job-name` label), those being deleted included.
async fn pods_of(t: &Target, job: &str) -> Vec<Value> {
    let (_, list) = get(
        t,
        &format!(
            "/api/v1/namespaces/{NS}/pods?labelSelector=batch.kubernetes.io%2Fjob-name%3D{job}"
        ),
    )
    .await;
    let mut pods = list["items"].as_array().cloned().unwrap_or_default();
    pods.sort_by_key(|p| {
        (
            p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                .as_str()
                .map(str::to_owned),
            p["metadata"]["creationTimestamp"]
                .as_str()
                .map(str::to_owned),
            p["metadata"]["name"].as_str().map(str::to_owned),
        )
    });
    pods
}

fn is_active(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_null()
        && !matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        )
}

/// Waits (polling, at most 60 s) until `done` holds for the Job's pods.
async fn wait_for_pods(t: &Target, job: &str, what: &str, done: impl Fn(&[Value]) -> bool) {
    super::poll_until(t, what, || pods_of(t, job), |pods| done(pods)).await;
}

async fn wait_for_active(t: &Target, job: &str, count: usize) {
    wait_for_pods(t, job, &format!("{count} active pods of {job}"), |pods| {
        pods.iter().filter(|p| is_active(p)).count() == count
    })
    .await;
}

/// Waits until the Job's status satisfies `done`.
async fn wait_for_status(t: &Target, job: &str, what: &str, done: impl Fn(&Value) -> bool) {
    super::wait_until(t, &job_path(job), what, |code, body| {
        code == 200 && done(&body["status"])
    })
    .await;
}

fn has_condition(status: &Value, type_: &str) -> bool {
    status["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

/// Records what the controller made of the pods: metadata it sets and the spec.
async fn record_pods(t: &Target, job: &str) {
    let pods: Vec<Value> = pods_of(t, job)
        .await
        .into_iter()
        .map(|p| {
            json!({
                "name": p["metadata"]["name"],
                "generateName": p["metadata"]["generateName"],
                "labels": p["metadata"]["labels"],
                "annotations": p["metadata"]["annotations"],
                "finalizers": p["metadata"]["finalizers"],
                "ownerReferences": p["metadata"]["ownerReferences"],
                "deleting": !p["metadata"]["deletionTimestamp"].is_null(),
                "spec": p["spec"],
                "phase": p["status"]["phase"],
            })
        })
        .collect();
    record(t, format!("the pods of {job}"), json!(pods));
}

async fn record_status(t: &Target, job: &str) {
    let (code, body) = get(t, &job_path(job)).await;
    assert_eq!(code, 200, "{}: GET {job}: {body}", t.name);
    record(
        t,
        format!("the status of {job}"),
        json!({"status": body["status"], "finalizers": body["metadata"]["finalizers"]}),
    );
}

/// The Events about the Job, each as its type, reason, message, count and source, sorted.
async fn events_of(t: &Target, job: &str) -> Vec<Value> {
    let (_, list) = get(t, &format!("/api/v1/namespaces/{NS}/events")).await;
    let mut events: Vec<Value> = list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == job && e["involvedObject"]["kind"] == "Job")
        .map(|e| {
            mask_pod_names(json!({
                "type": e["type"],
                "reason": e["reason"],
                "message": e["message"],
                "count": e["count"],
                "source": e["source"],
                "reportingComponent": e["reportingComponent"],
                "involvedObject": {"apiVersion": e["involvedObject"]["apiVersion"],
                    "kind": e["involvedObject"]["kind"]},
            }))
        })
        .collect();
    events.sort_by_key(|e| e.to_string());
    events
}

/// A CronJob's Events of one reason, as [`events_of`] gives a Job's.
async fn cronjob_events(t: &Target, cronjob: &str, reason: &str) -> Vec<Value> {
    let (_, list) = get(t, &format!("/api/v1/namespaces/{NS}/events")).await;
    list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == cronjob && e["reason"] == reason)
        .map(|e| {
            json!({"type": e["type"], "reason": e["reason"], "message": e["message"],
                "count": e["count"], "source": e["source"],
                "involvedObject": {"apiVersion": e["involvedObject"]["apiVersion"],
                    "kind": e["involvedObject"]["kind"]}})
        })
        .collect()
}

/// Waits until the Job's Events are `count` in all with a `last` among them, and records
/// them.
async fn record_events(t: &Target, job: &str, count: usize, last: &str) {
    let what = format!("{count} events of {job} with {last}");
    let events = super::poll_until(
        t,
        &what,
        || events_of(t, job),
        |events| {
            let total: i64 = events
                .iter()
                .map(|e| e["count"].as_i64().unwrap_or(1))
                .sum();
            usize::try_from(total).unwrap_or(0) >= count
                && events.iter().any(|e| e["reason"] == last)
        },
    )
    .await;
    record(t, format!("the events of {job}"), json!(events));
}

/// Plays the kubelet: the pod's one container terminated with `exit_code`, the pod in
/// `phase`.
async fn finish_pod(t: &Target, pod: &Value, phase: &str, exit_code: i32) {
    let name = pod["metadata"]["name"].as_str().unwrap();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let reason = if exit_code == 0 { "Completed" } else { "Error" };
    raw_send(
        t,
        "PATCH",
        &format!("/api/v1/namespaces/{NS}/pods/{name}/status"),
        json!({"status": {"phase": phase, "containerStatuses": [{
            "name": "c", "image": "busybox", "imageID": "", "ready": false,
            "restartCount": 0, "started": false,
            "state": {"terminated": {"exitCode": exit_code, "reason": reason,
                "startedAt": now, "finishedAt": now}}
        }]}}),
    )
    .await;
}

/// Plays the kubelet: the pod failed an hour ago (so no back-off delays its replacement)
/// with exit code 137 and the `DisruptionTarget` condition an eviction sets.
async fn disrupt_pod(t: &Target, pod: &Value) {
    let name = pod["metadata"]["name"].as_str().unwrap();
    let before = chrono::Utc::now() - chrono::Duration::hours(1);
    let before = before.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    raw_send(
        t,
        "PATCH",
        &format!("/api/v1/namespaces/{NS}/pods/{name}/status"),
        json!({"status": {"phase": "Failed", "conditions": [{"type": "DisruptionTarget",
            "status": "True", "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting", "lastTransitionTime": before}],
            "containerStatuses": [{
            "name": "c", "image": "busybox", "imageID": "", "ready": false,
            "restartCount": 0, "started": false,
            "state": {"terminated": {"exitCode": 137, "reason": "Error",
                "startedAt": before, "finishedAt": before}}
        }]}}),
    )
    .await;
}

/// Plays the kubelet: the pod failed with `exit_code` an hour ago (so no back-off delays
/// its replacement).
async fn fail_pod_long_ago(t: &Target, pod: &Value, exit_code: i32) {
    let name = pod["metadata"]["name"].as_str().unwrap();
    let before = chrono::Utc::now() - chrono::Duration::hours(1);
    let before = before.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    raw_send(
        t,
        "PATCH",
        &format!("/api/v1/namespaces/{NS}/pods/{name}/status"),
        json!({"status": {"phase": "Failed", "containerStatuses": [{
            "name": "c", "image": "busybox", "imageID": "", "ready": false,
            "restartCount": 0, "started": false,
            "state": {"terminated": {"exitCode": exit_code, "reason": "Error",
                "startedAt": before, "finishedAt": before}}
        }]}}),
    )
    .await;
}

/// Plays the kubelet: the pod's container runs again after `restarts` restarts.
async fn restart_pod(t: &Target, pod: &Value, restarts: i32) {
    let name = pod["metadata"]["name"].as_str().unwrap();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    raw_send(
        t,
        "PATCH",
        &format!("/api/v1/namespaces/{NS}/pods/{name}/status"),
        json!({"status": {"phase": "Running", "containerStatuses": [{
            "name": "c", "image": "busybox", "imageID": "", "ready": false,
            "restartCount": restarts, "started": true,
            "state": {"running": {"startedAt": now}}
        }]}}),
    )
    .await;
}

async fn active_pods(t: &Target, job: &str) -> Vec<Value> {
    pods_of(t, job)
        .await
        .into_iter()
        .filter(is_active)
        .collect()
}

async fn create_job(t: &Target, body: Value) {
    super::raw_create(t, &format!("{BATCH}/namespaces/{NS}/jobs"), &body).await;
}

pub(super) fn interactions() -> Vec<Interaction> {
    vec![
        // Made first and looked at last: its first Job comes at the next minute, which the
        // interactions between leave time to reach on both sides.
        interaction!(
            "Jobs: a CronJob of every minute that forbids overlap, made",
            |t| {
                let cronjobs = format!("{BATCH}/namespaces/{NS}/cronjobs");
                super::raw_create(
                    t,
                    &cronjobs,
                    &json!({"apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": CRONJOB, "namespace": NS},
                "spec": {"schedule": "* * * * *", "concurrencyPolicy": "Forbid",
                    "timeZone": "America/New_York",
                    "jobTemplate": {"metadata": {"labels": {"from": "cron"}},
                        "spec": job("unused", json!({}))["spec"]}}}),
                )
                .await;
            }
        ),
        interaction!(
            "Jobs: CronJobs refused for their timeZone or a TZ in their schedule",
            |t| {
                let cronjobs = format!("{BATCH}/namespaces/{NS}/cronjobs");
                let cronjob = |name: &str, schedule: &str, zone: Option<&str>| {
                    json!({"apiVersion": "batch/v1", "kind": "CronJob",
                        "metadata": {"name": name, "namespace": NS},
                        "spec": {"schedule": schedule, "timeZone": zone, "suspend": true,
                            "jobTemplate": {"spec": job("unused", json!({}))["spec"]}}})
                };
                for zone in [
                    "Mars/Olympus",
                    "",
                    "local",
                    "Local",
                    "america/new_york",
                    "Europe/../Paris",
                    "America/Argentina_Buenos_Aires_x",
                ] {
                    t.admin(
                        "POST",
                        &cronjobs,
                        JSON,
                        cronjob("cron-zone", "0 * * * *", Some(zone)),
                    )
                    .await;
                }
                for (name, schedule, zone) in [
                    ("cron-tz", "TZ=UTC 0 * * * *", None),
                    (
                        "cron-tz",
                        "CRON_TZ=Europe/Paris 0 * * * *",
                        Some("Europe/Paris"),
                    ),
                    ("cron-paris", "30 9 * * *", Some("Europe/Paris")),
                ] {
                    t.admin("POST", &cronjobs, JSON, cronjob(name, schedule, zone))
                        .await;
                }
                let path = format!("{cronjobs}/cron-paris");
                for patch in [
                    json!({"spec": {"schedule": "TZ=Asia/Tokyo 30 9 * * *"}}),
                    json!({"spec": {"timeZone": "Asia/Tokio"}}),
                    json!({"spec": {"timeZone": null}}),
                ] {
                    t.admin("PATCH", &path, MERGE, patch).await;
                }
                t.admin("DELETE", &path, JSON, Value::Null).await;
            }
        ),
        interaction!(
            "Jobs: CronJobs accepted or refused for the syntax of their schedule, on create and update",
            |t| {
                let cronjobs = format!("{BATCH}/namespaces/{NS}/cronjobs");
                let cronjob = |schedule: &str| {
                    json!({"apiVersion": "batch/v1", "kind": "CronJob",
                        "metadata": {"name": "cron-syntax", "namespace": NS},
                        "spec": {"schedule": schedule, "suspend": true,
                            "jobTemplate": {"spec": job("unused", json!({}))["spec"]}}})
                };
                let path = format!("{cronjobs}/cron-syntax");
                // Accepted, each deleted before the next.
                for schedule in [
                    "*/15 0-6,22 1,15 * ?",
                    "30 2 * JAN-mar Mon-FRI",
                    "5/10 * * * sun",
                    "@hourly",
                    "@annually",
                    "@every 1h30m",
                    "0 0 ,1 * *",
                ] {
                    t.admin("POST", &cronjobs, JSON, cronjob(schedule)).await;
                    t.admin("DELETE", &path, JSON, Value::Null).await;
                }
                for schedule in [
                    "60 * * * *",
                    "0 24 * * *",
                    "0 0 0 * *",
                    "0 0 32 * *",
                    "0 0 * 13 *",
                    "0 0 * * 7",
                    "5-1 * * * *",
                    "*/0 * * * *",
                    "*/-2 * * * *",
                    "1-2-3 * * * *",
                    "1/2/3 * * * *",
                    "0 0 * foo *",
                    "0 0 * * mon-foo",
                    "99999999999999999999 * * * *",
                    "* * * *",
                    "0 0 * * * *",
                    "   ",
                    "@often",
                    "@every",
                    "@every 1x",
                    "@every 10",
                    "@every h",
                    "TZ=UTC 0 * * * *",
                    "CRON_TZ=Mars/Olympus 0 * * * *",
                    "TZ=UTC * *",
                ] {
                    t.admin("POST", &cronjobs, JSON, cronjob(schedule)).await;
                }
                // An update is held to the syntax, the schedule it keeps too.
                t.admin("POST", &cronjobs, JSON, cronjob("@daily")).await;
                for patch in [
                    json!({"spec": {"schedule": "0 0 * * 8"}}),
                    json!({"spec": {"schedule": "@every 2m"}}),
                    json!({"spec": {"schedule": "0 0 * *"}}),
                ] {
                    t.admin("PATCH", &path, MERGE, patch).await;
                }
                t.admin("DELETE", &path, JSON, Value::Null).await;
            }
        ),
        interaction!(
            "Jobs: a NonIndexed job of 3 completions, 2 at a time, run to completion",
            |t| {
                let name = "job-count";
                create_job(t, job(name, json!({"completions": 3, "parallelism": 2}))).await;
                wait_for_active(t, name, 2).await;
                wait_for_status(t, name, "two active pods", |s| s["active"] == 2).await;
                record_pods(t, name).await;
                record_status(t, name).await;
                let first = active_pods(t, name).await.remove(0);
                finish_pod(t, &first, "Succeeded", 0).await;
                wait_for_status(t, name, "one succeeded, two active", |s| {
                    s["succeeded"] == 1 && s["active"] == 2
                })
                .await;
                record_status(t, name).await;
                for pod in active_pods(t, name).await {
                    finish_pod(t, &pod, "Succeeded", 0).await;
                }
                wait_for_status(t, name, "Complete", |s| has_condition(s, "Complete")).await;
                record_status(t, name).await;
                record_pods(t, name).await;
                record_events(t, name, 4, "Completed").await;
            }
        ),
        interaction!("Jobs: an Indexed job of 3 completions", |t| {
            let name = "job-indexed";
            create_job(
                t,
                job(
                    name,
                    json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed"}),
                ),
            )
            .await;
            wait_for_active(t, name, 3).await;
            wait_for_status(t, name, "three active pods", |s| s["active"] == 3).await;
            record_pods(t, name).await;
            let pods = active_pods(t, name).await;
            finish_pod(t, &pods[1], "Succeeded", 0).await;
            wait_for_status(t, name, "index 1 completed", |s| {
                s["completedIndexes"] == "1" && s["active"] == 2
            })
            .await;
            record_status(t, name).await;
            finish_pod(t, &pods[0], "Succeeded", 0).await;
            finish_pod(t, &pods[2], "Succeeded", 0).await;
            wait_for_status(t, name, "Complete", |s| has_condition(s, "Complete")).await;
            record_status(t, name).await;
            record_pods(t, name).await;
            record_events(t, name, 4, "Completed").await;
        }),
        interaction!("Jobs: an Indexed job ended by its successPolicy", |t| {
            let name = "job-policysuccess";
            create_job(
                t,
                job(
                    name,
                    json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
                        "successPolicy": {"rules": [{"succeededIndexes": "1"}]}}),
                ),
            )
            .await;
            wait_for_active(t, name, 3).await;
            let pods = active_pods(t, name).await;
            finish_pod(t, &pods[1], "Succeeded", 0).await;
            wait_for_status(t, name, "Complete", |s| has_condition(s, "Complete")).await;
            wait_for_pods(t, name, "the other pods gone", |pods| pods.len() == 1).await;
            record_status(t, name).await;
            record_pods(t, name).await;
            record_events(t, name, 6, "Completed").await;
        }),
        interaction!("Jobs: an Indexed job with backoffLimitPerIndex", |t| {
            let name = "job-perindex";
            create_job(
                t,
                job(
                    name,
                    json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed",
                        "backoffLimitPerIndex": 1}),
                ),
            )
            .await;
            wait_for_active(t, name, 2).await;
            let first = active_pods(t, name).await.remove(0);
            fail_pod_long_ago(t, &first, 1).await;
            wait_for_pods(
                t,
                name,
                "index 0 replaced and its failure counted",
                |pods| {
                    pods.len() == 3
                        && pods.iter().filter(|p| is_active(p)).count() == 2
                        && pods
                            .iter()
                            .filter(|p| !is_active(p))
                            .all(|p| p["metadata"]["finalizers"].is_null())
                },
            )
            .await;
            wait_for_status(t, name, "one failure counted", |s| {
                s["failed"] == 1 && s["active"] == 2
            })
            .await;
            record_pods(t, name).await;
            record_status(t, name).await;
            let replacement = active_pods(t, name).await.remove(0);
            fail_pod_long_ago(t, &replacement, 1).await;
            wait_for_status(t, name, "index 0 failed", |s| {
                s["failedIndexes"] == "0" && s["failed"] == 2
            })
            .await;
            record_status(t, name).await;
            let last = active_pods(t, name).await.remove(0);
            finish_pod(t, &last, "Succeeded", 0).await;
            wait_for_status(t, name, "Failed", |s| has_condition(s, "Failed")).await;
            record_status(t, name).await;
            record_pods(t, name).await;
            record_events(t, name, 4, "FailedIndexes").await;
        }),
        interaction!(
            "Jobs: a job with a manual selector adopts an orphan pod",
            |t| {
                let name = "job-adopt";
                let labels = json!({"app": "job-adopt"});
                super::raw_create(
                    t,
                    &format!("/api/v1/namespaces/{NS}/pods"),
                    &json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "job-adopt-orphan", "namespace": NS, "labels": labels},
                    "spec": {"restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}),
                )
                .await;
                let mut body = job(
                    name,
                    json!({"manualSelector": true,
                "selector": {"matchLabels": labels}}),
                );
                body["spec"]["template"]["metadata"] = json!({"labels": labels});
                create_job(t, body).await;
                let orphan = format!("/api/v1/namespaces/{NS}/pods/job-adopt-orphan");
                super::wait_until(t, &orphan, "the orphan adopted", |code, pod| {
                    code == 200 && pod["metadata"]["ownerReferences"].is_array()
                })
                .await;
                wait_for_status(t, name, "one active pod", |s| s["active"] == 1).await;
                let (_, pod) = get(t, &orphan).await;
                record(
                    t,
                    "the adopted pod".into(),
                    json!({"finalizers": pod["metadata"]["finalizers"],
                    "ownerReferences": pod["metadata"]["ownerReferences"]}),
                );
                record_status(t, name).await;
                finish_pod(t, &pod, "Succeeded", 0).await;
                wait_for_status(t, name, "Complete", |s| has_condition(s, "Complete")).await;
                record_status(t, name).await;
                let (_, list) = get(
                    t,
                    &format!("/api/v1/namespaces/{NS}/pods?labelSelector=app%3Djob-adopt"),
                )
                .await;
                let names: Vec<Value> = list["items"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|p| p["metadata"]["name"].clone())
                    .collect();
                record(t, "the pods of the selector".into(), json!(names));
                record_events(t, name, 1, "Completed").await;
            }
        ),
        interaction!("Jobs: a job that exhausts backoffLimit 0", |t| {
            let name = "job-backoff";
            create_job(t, job(name, json!({"backoffLimit": 0}))).await;
            wait_for_active(t, name, 1).await;
            let pod = active_pods(t, name).await.remove(0);
            finish_pod(t, &pod, "Failed", 1).await;
            wait_for_status(t, name, "Failed", |s| has_condition(s, "Failed")).await;
            record_status(t, name).await;
            record_pods(t, name).await;
            record_events(t, name, 2, "BackoffLimitExceeded").await;
        }),
        interaction!("Jobs: a podFailurePolicy FailJob on exit code 42", |t| {
            let name = "job-policy";
            create_job(
                t,
                job(
                    name,
                    json!({"completions": 2, "parallelism": 2, "podFailurePolicy": {"rules": [
                        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
                    ]}}),
                ),
            )
            .await;
            wait_for_active(t, name, 2).await;
            let pod = active_pods(t, name).await.remove(0);
            finish_pod(t, &pod, "Failed", 42).await;
            wait_for_status(t, name, "Failed", |s| has_condition(s, "Failed")).await;
            wait_for_pods(t, name, "the other pod gone", |pods| pods.len() == 1).await;
            record_status(t, name).await;
            record_pods(t, name).await;
            record_events(t, name, 4, "PodFailurePolicy").await;
        }),
        interaction!("Jobs: a podFailurePolicy Ignore on a disruption", |t| {
            let name = "job-ignore";
            create_job(
                t,
                job(
                    name,
                    json!({"backoffLimit": 0, "podFailurePolicy": {"rules": [
                        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
                    ]}}),
                ),
            )
            .await;
            wait_for_active(t, name, 1).await;
            let first = active_pods(t, name).await.remove(0);
            disrupt_pod(t, &first).await;
            wait_for_pods(t, name, "the disrupted pod replaced", |pods| {
                pods.len() == 2
                    && pods.iter().filter(|p| is_active(p)).count() == 1
                    && pods
                        .iter()
                        .all(|p| p["metadata"]["finalizers"].is_null() || is_active(p))
            })
            .await;
            wait_for_status(t, name, "one active pod", |s| s["active"] == 1).await;
            record_status(t, name).await;
            let second = active_pods(t, name).await.remove(0);
            finish_pod(t, &second, "Failed", 1).await;
            wait_for_status(t, name, "Failed", |s| has_condition(s, "Failed")).await;
            record_status(t, name).await;
            record_events(t, name, 3, "BackoffLimitExceeded").await;
        }),
        interaction!(
            "Jobs: a restartPolicy OnFailure job past its backoffLimit in restarts",
            |t| {
                let name = "job-restarts";
                let mut body = job(name, json!({"backoffLimit": 1}));
                body["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
                create_job(t, body).await;
                wait_for_active(t, name, 1).await;
                let pod = active_pods(t, name).await.remove(0);
                restart_pod(t, &pod, 1).await;
                wait_for_status(t, name, "Failed", |s| has_condition(s, "Failed")).await;
                wait_for_pods(t, name, "the pod gone", <[Value]>::is_empty).await;
                record_status(t, name).await;
                record_events(t, name, 3, "BackoffLimitExceeded").await;
            }
        ),
        interaction!("Jobs: a job past its activeDeadlineSeconds", |t| {
            let name = "job-deadline";
            create_job(t, job(name, json!({"activeDeadlineSeconds": 2}))).await;
            wait_for_status(t, name, "Failed", |s| has_condition(s, "Failed")).await;
            wait_for_pods(t, name, "the pod gone", <[Value]>::is_empty).await;
            record_status(t, name).await;
            record_events(t, name, 3, "DeadlineExceeded").await;
        }),
        interaction!("Jobs: a job suspended, resumed and suspended again", |t| {
            let name = "job-suspend";
            create_job(
                t,
                job(
                    name,
                    json!({"completions": 4, "parallelism": 2, "suspend": true}),
                ),
            )
            .await;
            wait_for_status(t, name, "Suspended", |s| has_condition(s, "Suspended")).await;
            record_status(t, name).await;
            let path = job_path(name);
            raw_send(t, "PATCH", &path, json!({"spec": {"suspend": false}})).await;
            wait_for_active(t, name, 2).await;
            wait_for_status(t, name, "resumed with two active pods", |s| {
                s["active"] == 2 && !has_condition(s, "Suspended")
            })
            .await;
            record_status(t, name).await;
            raw_send(t, "PATCH", &path, json!({"spec": {"suspend": true}})).await;
            wait_for_pods(t, name, "the pods gone", <[Value]>::is_empty).await;
            wait_for_status(t, name, "suspended again", |s| {
                has_condition(s, "Suspended") && s["active"].is_null() && s["terminating"] == 0
            })
            .await;
            record_status(t, name).await;
            record_events(t, name, 7, "SuccessfulDelete").await;
        }),
        interaction!(
            "Jobs: a finished job deleted by its ttlSecondsAfterFinished",
            |t| {
                let name = "job-ttl";
                create_job(t, job(name, json!({"ttlSecondsAfterFinished": 0}))).await;
                wait_for_active(t, name, 1).await;
                let pod = active_pods(t, name).await.remove(0);
                finish_pod(t, &pod, "Succeeded", 0).await;
                super::wait_until(t, &job_path(name), "the Job deleted", |code, _| code == 404)
                    .await;
                wait_for_pods(t, name, "its pod collected", <[Value]>::is_empty).await;
                let (code, body) = get(t, &job_path(name)).await;
                t.record(Answer {
                    asked: format!("GET {name}"),
                    code: i64::from(code),
                    body: normalize(body),
                });
            }
        ),
        interaction!(
            "Jobs: a CronJob of every minute that forbids overlap, its first Job",
            |t| {
                let name = CRONJOB;
                let cronjobs = format!("{BATCH}/namespaces/{NS}/cronjobs");
                let path = format!("{cronjobs}/{name}");
                super::wait_until(t, &path, "the first scheduled job", |code, body| {
                    code == 200
                        && body["status"]["active"]
                            .as_array()
                            .is_some_and(|a| a.len() == 1)
                })
                .await;
                let (_, cronjob) = get(t, &path).await;
                record(
                    t,
                    format!("the status of {name}"),
                    cronjob["status"].clone(),
                );
                let job_name = cronjob["status"]["active"][0]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                let (_, job) = get(t, &job_path(&job_name)).await;
                // The scheduled time is written in the CronJob's zone: its offset is compared
                // (the time itself is masked).
                let scheduled = job["metadata"]["annotations"]
                    ["batch.kubernetes.io/cronjob-scheduled-timestamp"]
                    .as_str()
                    .unwrap_or_default();
                record(
                    t,
                    "the scheduled job's time, from its seconds".into(),
                    json!(scheduled.get(17..)),
                );
                record(
                    t,
                    "the scheduled job".into(),
                    json!({"labels": job["metadata"]["labels"],
                    "annotations": job["metadata"]["annotations"],
                    "ownerReferences": job["metadata"]["ownerReferences"],
                    "spec": job["spec"]}),
                );
                let created = super::poll_until(
                    t,
                    &format!("the Job {name} created"),
                    || cronjob_events(t, name, "SuccessfulCreate"),
                    |created| !created.is_empty(),
                )
                .await;
                record(t, format!("the events of {name}"), json!(created));
                let options =
                    serde_json::to_vec(&json!({"propagationPolicy": "Background"})).unwrap();
                let (code, text) = support::raw(&t.admin, "DELETE", &path, JSON, options).await;
                assert_eq!(code, 200, "{}: DELETE {path}: {text}", t.name);
                super::wait_until(t, &path, "the CronJob gone", |code, _| code == 404).await;
            }
        ),
    ]
}

//! Batch reconcile: a Job of busybox pods running the batch's command, `completions`
//! of them succeeding, `parallelism` at a time. The Batch's status follows the Job's:
//! its counts, and `Complete` or `Failed` once the Job's own condition says so.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt as _};
use serde_json::json;

use crate::Context;
use crate::apply::{Result, apply, build, namespaced, owner_reference, write_status};
use crate::crd::{Batch, BatchStatus, Condition};

/// The Job of the batch's pods, run from `image` (a busybox); a pod that fails is not
/// restarted but counted, and the Job's back-off limit (6) decides when it has failed.
///
/// # Errors
/// [`crate::apply::Error::Build`], which the literal JSON below does not give.
pub fn job(batch: &Batch, owner: &OwnerReference, image: &str) -> Result<Job> {
    build(
        "Job",
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": batch.name_any(), "ownerReferences": [owner]},
            "spec": {
                "completions": batch.spec.completions,
                "parallelism": batch.spec.parallelism,
                "template": {
                    "metadata": {"labels": {"app.kubernetes.io/name": "batch",
                                            "app.kubernetes.io/instance": batch.name_any()}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{
                            "name": "batch",
                            "image": image,
                            "command": ["sh", "-c", batch.spec.command]
                        }]
                    }
                }
            }
        }),
    )
}

/// The batch's status as its Job reports it: `Complete` or `Failed` when the Job has
/// that condition True, with its reason and message.
#[must_use]
pub fn status(batch: &Batch, job: &Job) -> BatchStatus {
    let reported = job.status.clone().unwrap_or_default();
    let previous = batch
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let conditions = reported
        .conditions
        .iter()
        .flatten()
        .filter(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| {
            Condition::next(
                previous,
                &c.type_,
                true,
                c.reason.as_deref().unwrap_or(&c.type_),
                c.message.clone().unwrap_or_default(),
                batch.metadata.generation,
            )
        })
        .collect();
    BatchStatus {
        succeeded: reported.succeeded.unwrap_or(0),
        failed: reported.failed.unwrap_or(0),
        conditions,
    }
}

/// Applies the batch's Job and writes its status.
///
/// # Errors
/// When the batch lacks metadata or a request fails.
pub async fn reconcile(batch: Arc<Batch>, context: Arc<Context>) -> Result<Action> {
    let owner = owner_reference(batch.as_ref())?;
    let jobs: Api<Job> = namespaced(&context.client, batch.as_ref())?;
    let wanted = job(&batch, &owner, &context.image)?;
    let job = apply(&jobs, &batch.name_any(), &wanted, "apply Job").await?;
    let batches: Api<Batch> = namespaced(&context.client, batch.as_ref())?;
    write_status(&batches, batch.as_ref(), status(&batch, &job)).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::BatchSpec;

    fn batch() -> Batch {
        Batch::new(
            "count",
            BatchSpec {
                command: "echo done".into(),
                completions: 3,
                parallelism: 2,
            },
        )
    }

    fn reported(status: serde_json::Value) -> Job {
        serde_json::from_value(json!({"metadata": {"name": "count"}, "status": status})).unwrap()
    }

    #[test]
    fn a_batch_is_complete_once_its_job_is_with_the_jobs_counts() {
        let running = status(&batch(), &reported(json!({"active": 2, "succeeded": 1})));
        assert_eq!((running.succeeded, running.conditions.len()), (1, 0));
        let done = status(
            &batch(),
            &reported(json!({"succeeded": 3, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods"}]})),
        );
        assert_eq!(done.succeeded, 3);
        assert_eq!(done.conditions.len(), 1);
        assert_eq!(done.conditions[0].type_, "Complete");
        assert_eq!(done.conditions[0].reason, "CompletionsReached");
    }

    #[test]
    fn a_batch_fails_when_its_job_does() {
        let failed = status(
            &batch(),
            &reported(json!({"failed": 7, "conditions": [
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]})),
        );
        assert_eq!(
            (failed.failed, failed.conditions[0].type_.as_str()),
            (7, "Failed")
        );
    }

    #[test]
    fn the_job_runs_the_command_with_the_batchs_completions_and_parallelism() {
        let owner = OwnerReference::default();
        let job = serde_json::to_value(job(&batch(), &owner, "busybox:1.36").unwrap()).unwrap();
        assert_eq!(job["spec"]["completions"], 3);
        assert_eq!(job["spec"]["parallelism"], 2);
        let container = &job["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["command"], json!(["sh", "-c", "echo done"]));
    }
}

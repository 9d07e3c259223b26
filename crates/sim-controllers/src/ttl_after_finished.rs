//! The TTL-after-finished controller: deletes a finished Job (a true `Complete` or
//! `Failed` condition) once `spec.ttlSecondsAfterFinished` has passed since that
//! condition's transition, with foreground propagation and its uid as precondition, as
//! upstream's `pkg/controller/ttlafterfinished` does.
//!
//! # Guarantees
//! - The decision is made twice, on the cached Job and on a fresh read, so a Job whose
//!   TTL was raised or that was finished again meanwhile is not deleted early.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};

use super::informer::{AbortOnDrop, Cache, ObjectKey};
use super::job::finish_time;
use super::queue::Queue;
use super::support::{is_deleting, is_not_found, plus_seconds};

/// Errors of one cleanup (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
}

struct Controller {
    client: Client,
    jobs: Cache<Job>,
    queue: Queue<ObjectKey>,
}

/// Subscribes the controller to the Jobs' cache and starts its worker.
pub(crate) fn start(client: Client, jobs: &Cache<Job>) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        client,
        jobs: jobs.clone(),
        queue: Queue::new(),
    });
    let c = controller.clone();
    jobs.subscribe(move |change| {
        if let super::informer::Change::Applied { new, .. } = change
            && !is_deleting(&new.metadata)
            && needs_cleanup(new)
        {
            c.queue.add(ObjectKey::of(new.as_ref()));
        }
    });
    AbortOnDrop::spawn(async move { controller.run().await })
}

/// Whether the Job has a TTL and has finished (upstream's `needsCleanup`).
fn needs_cleanup(job: &Job) -> bool {
    ttl_of(job).is_some() && finish_time(job).is_some()
}

fn ttl_of(job: &Job) -> Option<i32> {
    job.spec.as_ref()?.ttl_seconds_after_finished
}

/// How long until the Job expires at `now` (zero when expired); `None` when it is being
/// deleted or needs no cleanup.
pub(crate) fn time_left(job: &Job, now: &Timestamp) -> Option<Duration> {
    if is_deleting(&job.metadata) {
        return None;
    }
    let ttl = ttl_of(job)?;
    let finished = finish_time(job)?;
    let expires = plus_seconds(&finished, i64::from(ttl));
    let left = expires.duration_since(*now);
    Some(if left.is_negative() || left.is_zero() {
        Duration::ZERO
    } else {
        left.unsigned_abs()
    })
}

impl Controller {
    async fn run(self: Arc<Self>) {
        self.jobs.wait_ready().await;
        loop {
            let key = self.queue.next().await;
            let outcome = self.process(&key).await.map(|()| None);
            if let Some(error) = self.queue.settle(&key, outcome) {
                tracing::debug!(job = %key, error = %super::support::error_chain(&error), "ttl cleanup failed; retrying");
            }
        }
    }

    /// Whether `job` has expired; if not, when it will be looked at again.
    fn expired(&self, key: &ObjectKey, job: &Job) -> bool {
        match time_left(job, &Timestamp::now()) {
            None => false,
            Some(left) if left.is_zero() => true,
            Some(left) => {
                self.queue.add_after(key.clone(), left);
                false
            }
        }
    }

    async fn process(&self, key: &ObjectKey) -> Result<(), Error> {
        let Some(job) = self.jobs.get(&key.namespace, &key.name) else {
            return Ok(());
        };
        if !self.expired(key, &job) {
            return Ok(());
        }
        let api: Api<Job> = Api::namespaced(self.client.clone(), &key.namespace);
        let Some(fresh) = api.get_opt(&key.name).await? else {
            return Ok(());
        };
        if !self.expired(key, &fresh) {
            return Ok(());
        }
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: fresh.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&key.name, &params).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(ttl: Option<i32>, finished: Option<(&str, &str)>) -> Job {
        let conditions: Vec<_> = finished
            .map(|(type_, at)| json!({"type": type_, "status": "True", "lastTransitionTime": at}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    #[test]
    fn a_finished_job_expires_its_ttl_after_the_finishing_condition() {
        let now: Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
        let done = job(Some(30), Some(("Complete", "2026-01-01T00:00:00Z")));
        assert_eq!(time_left(&done, &now), Some(Duration::from_secs(20)));
        let failed = job(Some(0), Some(("Failed", "2026-01-01T00:00:00Z")));
        assert_eq!(time_left(&failed, &now), Some(Duration::ZERO));
    }

    #[test]
    fn a_job_without_ttl_or_not_finished_is_kept() {
        let now: Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
        assert_eq!(
            time_left(&job(None, Some(("Complete", "2026-01-01T00:00:00Z"))), &now),
            None
        );
        assert_eq!(time_left(&job(Some(0), None), &now), None);
        assert_eq!(
            time_left(
                &job(
                    Some(0),
                    Some(("SuccessCriteriaMet", "2026-01-01T00:00:00Z"))
                ),
                &now
            ),
            None
        );
    }
}

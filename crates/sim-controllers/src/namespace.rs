//! The namespace controller: a namespace with a deletionTimestamp loses all its content
//! (every namespaced type, finalizers honoured), then its `kubernetes` finalizer through
//! `PUT /api/v1/namespaces/<ns>/finalize`, after which the server removes it. Status
//! conditions are those of upstream's `namespaced_resources_deleter`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, PropagationPolicy};

use super::dynamic::{Hub, ResourceInfo, WeakHub};
use super::informer::{AbortOnDrop, Change};
use super::queue::Queue;
use super::support::{is_conflict, is_not_found, now};

/// The spec finalizer this controller owns.
pub const FINALIZER: &str = "kubernetes";

/// How long to wait before looking again at a namespace whose content is still going
/// when no event arrives (events normally come first).
const RECHECK: Duration = Duration::from_secs(5);

/// Errors of one namespace sync (the namespace is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
    /// Content could not be deleted.
    #[error("content of namespace {namespace} could not be deleted: {detail}")]
    Content {
        /// The namespace.
        namespace: String,
        /// What failed.
        detail: String,
    },
}

struct Controller {
    hub: WeakHub,
    client: Client,
    queue: Queue<String>,
}

/// Subscribes the namespace controller to `hub` and starts its worker.
pub(crate) fn start(hub: &Hub, client: Client) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        hub: hub.downgrade(),
        client,
        queue: Queue::new(),
    });
    let observer = controller.clone();
    hub.subscribe(move |info, change| observer.observe(info, change));
    AbortOnDrop::spawn(async move { controller.run().await })
}

/// What is left in a namespace after a deletion pass.
#[derive(Default)]
struct Remaining {
    /// `resource.group` → count.
    resources: BTreeMap<String, usize>,
    /// finalizer → count of objects carrying it.
    finalizers: BTreeMap<String, usize>,
    /// Deletions that failed.
    failures: Vec<String>,
    /// Latest pod deletion deadline, for the recheck estimate.
    longest_grace: Option<Duration>,
}

impl Controller {
    fn observe(&self, info: &ResourceInfo, change: &Change<DynamicObject>) {
        let object = change.object();
        if info.is("", "namespaces") {
            if let Change::Applied { new, .. } = change
                && new.metadata.deletion_timestamp.is_some()
            {
                self.queue
                    .add(new.metadata.name.clone().unwrap_or_default());
            }
            return;
        }
        if !info.namespaced {
            return;
        }
        let gone =
            matches!(change, Change::Deleted(_)) || object.metadata.deletion_timestamp.is_some();
        let Some(namespace) = object.metadata.namespace.as_deref() else {
            return;
        };
        if !gone {
            return;
        }
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        let terminating = hub
            .cache("", "namespaces")
            .and_then(|c| c.get("", namespace))
            .is_some_and(|ns| ns.metadata.deletion_timestamp.is_some());
        if terminating {
            self.queue.add(namespace.to_string());
        }
    }

    async fn run(self: Arc<Self>) {
        loop {
            let name = self.queue.next().await;
            let Some(hub) = self.hub.upgrade() else {
                return;
            };
            match self.sync(&hub, &name).await {
                Ok(None) => self.queue.forget(&name),
                Ok(Some(after)) => {
                    self.queue.forget(&name);
                    self.queue.add_after(name.clone(), after);
                }
                Err(error) => {
                    tracing::debug!(namespace = %name, error = %super::support::error_chain(&error), "namespace sync failed; retrying");
                    self.queue.add_rate_limited(name.clone());
                }
            }
            self.queue.done(&name);
        }
    }

    /// One pass: delete what is left, then finalize if nothing is. Returns when to look
    /// again if content remains.
    async fn sync(&self, hub: &Hub, name: &str) -> Result<Option<Duration>, Error> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let Some(ns) = namespaces.get_opt(name).await? else {
            return Ok(None);
        };
        if ns.metadata.deletion_timestamp.is_none() {
            return Ok(None);
        }
        let has_ours = ns
            .spec
            .as_ref()
            .and_then(|s| s.finalizers.as_ref())
            .is_some_and(|f| f.iter().any(|x| x == FINALIZER));
        if !has_ours {
            return Ok(None);
        }
        hub.refresh(Duration::from_secs(5)).await;
        let resources: Vec<ResourceInfo> = hub
            .resources()
            .into_iter()
            .filter(|r| {
                r.namespaced
                    && r.supports("list")
                    && (r.supports("delete") || r.supports("deletecollection"))
            })
            .collect();
        let mut remaining = Remaining::default();
        for info in &resources {
            self.delete_content(info, name, &mut remaining).await;
        }
        self.update_conditions(&namespaces, &ns, &remaining).await;
        if !remaining.failures.is_empty() {
            return Err(Error::Content {
                namespace: name.to_string(),
                detail: remaining.failures.join("; "),
            });
        }
        if !remaining.resources.is_empty() {
            let estimate = remaining
                .longest_grace
                .map_or(RECHECK, |g| (g / 2 + Duration::from_secs(1)).min(RECHECK));
            return Ok(Some(estimate));
        }
        let mut finalized = ns.clone();
        if let Some(spec) = finalized.spec.as_mut() {
            spec.finalizers = Some(
                spec.finalizers
                    .iter()
                    .flatten()
                    .filter(|f| *f != FINALIZER)
                    .cloned()
                    .collect(),
            );
        }
        tracing::debug!(namespace = %name, "namespace is empty; finalizing");
        let finalize = namespaces
            .replace_subresource::<Namespace>("finalize", name, &PostParams::default(), &finalized)
            .await;
        match finalize {
            Ok(_) => Ok(None),
            Err(e) if is_not_found(&e) => Ok(None),
            // The server answers with the namespace's final state once it is removed;
            // anything it says that is not an API error means the request went through.
            Err(kube::Error::SerdeError(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn delete_content(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        remaining: &mut Remaining,
    ) {
        let api = info.api(&self.client, namespace);
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        let gr = format!("{}.{}", info.ar.plural, info.ar.group);
        if info.supports("deletecollection") {
            match api.delete_collection(&params, &ListParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return,
                Err(e) => remaining.failures.push(format!("{gr}: {e}")),
            }
        }
        let items = match api.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(e) if is_not_found(&e) => return,
            Err(e) => {
                remaining.failures.push(format!("{gr}: {e}"));
                return;
            }
        };
        if items.is_empty() {
            return;
        }
        *remaining.resources.entry(gr.clone()).or_default() += items.len();
        for item in items {
            if item.metadata.deletion_timestamp.is_none() && info.supports("delete") {
                let name = item.metadata.name.clone().unwrap_or_default();
                match api.delete(&name, &params).await {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) || is_conflict(&e) => {}
                    Err(e) => remaining.failures.push(format!("{gr} {name}: {e}")),
                }
            }
            for finalizer in item.metadata.finalizers.iter().flatten() {
                *remaining.finalizers.entry(finalizer.clone()).or_default() += 1;
            }
            if let Some(deadline) = item.metadata.deletion_timestamp.as_ref() {
                let left = super::support::until(&deadline.0);
                remaining.longest_grace =
                    Some(remaining.longest_grace.map_or(left, |g| g.max(left)));
            }
        }
    }

    async fn update_conditions(&self, api: &Api<Namespace>, ns: &Namespace, remaining: &Remaining) {
        let content_failure = if remaining.failures.is_empty() {
            (
                "False",
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization".to_string(),
            )
        } else {
            (
                "True",
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    remaining.failures.len(),
                    remaining.failures.join(", ")
                ),
            )
        };
        let content_remaining = if remaining.resources.is_empty() {
            (
                "False",
                "ContentRemoved",
                "All content successfully removed".to_string(),
            )
        } else {
            let list: Vec<String> = remaining
                .resources
                .iter()
                .map(|(gr, n)| format!("{gr} has {n} resource instances"))
                .collect();
            (
                "True",
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", list.join(", ")),
            )
        };
        let finalizers_remaining = if remaining.finalizers.is_empty() {
            (
                "False",
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished".to_string(),
            )
        } else {
            let list: Vec<String> = remaining
                .finalizers
                .iter()
                .map(|(f, n)| format!("{f} in {n} resource instances"))
                .collect();
            (
                "True",
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    list.join(", ")
                ),
            )
        };
        let wanted = [
            (
                "NamespaceDeletionDiscoveryFailure",
                (
                    "False",
                    "ResourcesDiscovered",
                    "All resources successfully discovered".to_string(),
                ),
            ),
            (
                "NamespaceDeletionGroupVersionParsingFailure",
                (
                    "False",
                    "ParsedGroupVersions",
                    "All legacy kube types successfully parsed".to_string(),
                ),
            ),
            ("NamespaceDeletionContentFailure", content_failure),
            ("NamespaceContentRemaining", content_remaining),
            ("NamespaceFinalizersRemaining", finalizers_remaining),
        ];
        let mut updated = ns.clone();
        let status = updated.status.get_or_insert_with(Default::default);
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        let mut changed = false;
        for (type_, (state, reason, message)) in wanted {
            match conditions.iter_mut().find(|c| c.type_ == type_) {
                Some(c)
                    if c.status == state
                        && c.reason.as_deref() == Some(reason)
                        && c.message.as_deref() == Some(message.as_str()) => {}
                Some(c) => {
                    if c.status != state {
                        c.last_transition_time = Some(now());
                    }
                    c.status = state.to_string();
                    c.reason = Some(reason.to_string());
                    c.message = Some(message);
                    changed = true;
                }
                None => {
                    conditions.push(NamespaceCondition {
                        type_: type_.to_string(),
                        status: state.to_string(),
                        reason: Some(reason.to_string()),
                        message: Some(message),
                        last_transition_time: Some(now()),
                    });
                    changed = true;
                }
            }
        }
        if !changed {
            return;
        }
        let name = ns.metadata.name.clone().unwrap_or_default();
        if let Err(error) = api
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            tracing::debug!(namespace = %name, %error, "cannot update namespace conditions");
        }
    }
}

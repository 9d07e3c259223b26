//! What kube-controller-manager gives every namespace, for a real API server that has no
//! manager beside it: the service-account controller's `default` ServiceAccount (pods
//! need one to be admitted) and the root CA publisher's `kube-root-ca.crt` ConfigMap
//! (the CA bundle projected into every pod's service-account volume). Both follow
//! upstream: terminating namespaces are left alone, a deleted object is made again, and
//! a `kube-root-ca.crt` whose bundle or description changed is put back.
//!
//! The simulated API server makes both objects itself when a namespace is created, so
//! these run only against other servers ([`super::ControllerConfig::namespace_defaults`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource};

use super::informer::{AbortOnDrop, Cache, Change};
use super::queue::Queue;
use super::support::is_not_found;

/// The ConfigMap the root CA publisher keeps in every namespace.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

/// Its `kubernetes.io/description` annotation, as upstream writes it.
pub use sim_apiserver::state::ROOT_CA_DESCRIPTION;

const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";

/// Errors of one namespace's sync (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
}

fn active(namespace: &Namespace) -> bool {
    namespace.metadata.deletion_timestamp.is_none()
        && namespace
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_none_or(|phase| phase == "Active")
}

/// A create that lost to another writer, or to the namespace's deletion, is done.
fn settled(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 409 || s.code == 403 && s.reason == "Forbidden" && s.message.contains("terminated"))
}

/// A write's outcome: done, also when `finished` says its error means there is nothing
/// left to do.
fn outcome<T>(
    result: Result<T, kube::Error>,
    finished: fn(&kube::Error) -> bool,
) -> Result<(), Error> {
    match result {
        Err(e) if !finished(&e) => Err(e.into()),
        _ => Ok(()),
    }
}

/// Runs `sync` for every namespace that appears, and again with backoff while it fails.
fn run_per_namespace<F, Fut>(
    namespaces: &Cache<Namespace>,
    queue: Arc<Queue<String>>,
    what: &'static str,
    sync: F,
) -> AbortOnDrop
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), Error>> + Send,
{
    let q = queue.clone();
    namespaces.subscribe(move |change| {
        if let Change::Applied { new, .. } = change {
            q.add(new.metadata.name.clone().unwrap_or_default());
        }
    });
    let namespaces = namespaces.clone();
    AbortOnDrop::spawn(async move {
        namespaces.wait_ready().await;
        loop {
            let name = queue.next().await;
            let result = match namespaces.get("", &name) {
                Some(ns) if active(&ns) => sync(name.clone()).await,
                _ => Ok(()),
            };
            match result {
                Ok(()) => queue.forget(&name),
                Err(error) => {
                    tracing::debug!(namespace = %name, error = %super::support::error_chain(&error), "{what} failed; retrying");
                    queue.add_rate_limited(name.clone());
                }
            }
            queue.done(&name);
        }
    })
}

/// The service-account controller: a `default` ServiceAccount in every active namespace.
pub(crate) fn start_service_accounts(client: Client, namespaces: &Cache<Namespace>) -> AbortOnDrop {
    let accounts = Cache::<ServiceAccount>::new();
    let queue = Arc::new(Queue::new());
    let q = queue.clone();
    accounts.subscribe(move |change| {
        if let Change::Deleted(old) = change
            && old.metadata.name.as_deref() == Some("default")
        {
            q.add(old.metadata.namespace.clone().unwrap_or_default());
        }
    });
    let watch = super::informer::spawn(
        Api::<ServiceAccount>::all(client.clone()),
        watcher::Config::default().fields("metadata.name=default"),
        accounts.clone(),
    );
    let worker = run_per_namespace(
        namespaces,
        queue,
        "service account sync",
        move |namespace| {
            let client = client.clone();
            let accounts = accounts.clone();
            async move {
                if accounts.get(&namespace, "default").is_some() {
                    return Ok(());
                }
                let api: Api<ServiceAccount> = Api::namespaced(client, &namespace);
                let account = ServiceAccount {
                    metadata: ObjectMeta {
                        name: Some("default".into()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                match api.create(&PostParams::default(), &account).await {
                    Ok(_) => Ok(()),
                    Err(e) if settled(&e) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
        },
    );
    AbortOnDrop::spawn(async move {
        let _watch = watch;
        worker.join().await;
    })
}

/// The root CA publisher: `kube-root-ca.crt` with `bundle` in every active namespace.
pub(crate) fn start_root_ca_publisher(
    client: Client,
    namespaces: &Cache<Namespace>,
    bundle: String,
) -> AbortOnDrop {
    let maps = Cache::<ConfigMap>::new();
    let queue = Arc::new(Queue::new());
    let q = queue.clone();
    maps.subscribe(move |change| {
        q.add(
            change
                .object()
                .metadata
                .namespace
                .clone()
                .unwrap_or_default(),
        );
    });
    let watch = super::informer::spawn(
        Api::<ConfigMap>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={ROOT_CA_CONFIG_MAP}")),
        maps.clone(),
    );
    let worker = run_per_namespace(namespaces, queue, "root CA publication", move |namespace| {
        let client = client.clone();
        let maps = maps.clone();
        let bundle = bundle.clone();
        async move { publish(&client, &maps, &namespace, &bundle).await }
    });
    AbortOnDrop::spawn(async move {
        let _watch = watch;
        worker.join().await;
    })
}

async fn publish(
    client: &Client,
    maps: &Cache<ConfigMap>,
    namespace: &str,
    bundle: &str,
) -> Result<(), Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let data = BTreeMap::from([("ca.crt".to_string(), bundle.to_string())]);
    let Some(current) = maps.get(namespace, ROOT_CA_CONFIG_MAP) else {
        let map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(ROOT_CA_CONFIG_MAP.into()),
                annotations: Some(BTreeMap::from([(
                    DESCRIPTION_ANNOTATION.to_string(),
                    ROOT_CA_DESCRIPTION.to_string(),
                )])),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        };
        return outcome(api.create(&PostParams::default(), &map).await, settled);
    };
    let described = current
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
        .is_some_and(|d| d == ROOT_CA_DESCRIPTION);
    if current.data.as_ref() == Some(&data) && described {
        return Ok(());
    }
    let mut repaired = (*current).clone();
    repaired.data = Some(data);
    repaired.binary_data = None;
    repaired
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            DESCRIPTION_ANNOTATION.to_string(),
            ROOT_CA_DESCRIPTION.to_string(),
        );
    outcome(
        api.replace(ROOT_CA_CONFIG_MAP, &PostParams::default(), &repaired)
            .await,
        is_not_found,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespace(phase: Option<&str>, deleting: bool) -> Namespace {
        let mut ns = Namespace::default();
        ns.metadata.name = Some("n".into());
        if deleting {
            ns.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ));
        }
        ns.status = phase.map(|p| k8s_openapi::api::core::v1::NamespaceStatus {
            phase: Some(p.into()),
            ..Default::default()
        });
        ns
    }

    #[test]
    fn only_active_namespaces_get_their_defaults() {
        assert!(active(&namespace(None, false)));
        assert!(active(&namespace(Some("Active"), false)));
        assert!(!active(&namespace(Some("Terminating"), false)));
        assert!(!active(&namespace(Some("Active"), true)));
    }
}

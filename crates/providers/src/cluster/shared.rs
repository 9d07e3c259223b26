//! What the providers of a cluster that scenarios share (kubeconfig, kind, local) have in
//! common: where a scenario's objects go on it (its prefixed namespaces and suffixed
//! cluster-scoped names, all carrying its label), removing exactly what it made, and
//! clients from kubeconfig files.

use std::path::Path;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};

use super::{Placement, ProviderError};

/// The label every object a scenario creates on a shared cluster carries.
pub const SCENARIO_LABEL: &str = "opconform.io/scenario";

/// Feature namespaces the operator watches on a shared cluster (mapped by
/// [`super::Provider::namespace`]); a feature that creates objects elsewhere is not reconciled.
pub const WORKLOAD_NAMESPACES: [&str; 3] = ["default", "team-a", "team-b"];

/// A client for the kubeconfig at `path` (else the one `KUBECONFIG` names, else
/// `~/.kube/config`), in `context` (else its current context).
///
/// # Errors
/// When the kubeconfig cannot be read or names no usable context.
pub async fn client_from_kubeconfig(
    path: Option<&Path>,
    context: Option<&str>,
) -> Result<Client, ProviderError> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let client_error = |e: kube::config::KubeconfigError| ProviderError::Client(Box::new(e));
    let config = match path {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(client_error)?;
            kube::Config::from_custom_kubeconfig(file, &options).await
        }
        None => kube::Config::from_kubeconfig(&options).await,
    }
    .map_err(client_error)?;
    Client::try_from(without_retries(config)).map_err(|e| ProviderError::Client(Box::new(e)))
}

/// `config` without kube's default retries of 429, 503 and 504: the harness observes, so
/// it takes every answer as it comes. Retried, the 503 with which the API server's pod
/// proxy says that nothing listens on a replica's port (it just exited) turned into a
/// scrape that timed out, and that replica's exit was never recorded.
pub fn without_retries(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config
}

/// Deletes every cluster-scoped `K` (namespaces delete what is in them) carrying
/// `label=value`; `what` names them in the message of an error, which is reported, not
/// returned: teardown goes on.
pub async fn delete_all_labelled<K>(client: &Client, label: &str, value: &str, what: &str)
where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let selector = ListParams::default().labels(&format!("{label}={value}"));
    let api: Api<K> = Api::all(client.clone());
    if let Err(e) = api
        .delete_collection(&DeleteParams::background(), &selector)
        .await
    {
        eprintln!("opconform: deleting the {what} of {value} failed: {e}");
    }
}

/// Deletes what carries `label=value`: namespaces (and so everything in them) one by one,
/// as kube-apiserver has no delete-collection for them (it answers 405), then every
/// labelled object of every cluster-scoped kind the cluster serves with a delete-collection
/// (ClusterRoles, their bindings, webhook configurations, PriorityClasses… whatever the
/// operator's manifests held). CustomResourceDefinitions are the run's, not a scenario's
/// (see the kubeconfig provider's end of run). Errors are reported, not returned: teardown
/// goes on.
pub async fn delete_labelled(client: &Client, label: &str, value: &str) {
    let selector = ListParams::default().labels(&format!("{label}={value}"));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.list(&selector).await {
        Ok(listed) => {
            for namespace in listed {
                let name = kube::ResourceExt::name_any(&namespace);
                if let Err(e) = namespaces.delete(&name, &DeleteParams::background()).await {
                    eprintln!("opconform: deleting namespace {name} failed: {e}");
                }
            }
        }
        Err(e) => eprintln!("opconform: listing the namespaces of {value} failed: {e}"),
    }
    let discovery = match kube::discovery::Discovery::new(client.clone()).run().await {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "opconform: discovering the cluster-scoped kinds to delete those of {value} \
                 failed ({e}): deleting its ClusterRoles and ClusterRoleBindings only"
            );
            delete_all_labelled::<ClusterRole>(client, label, value, "ClusterRoles").await;
            delete_all_labelled::<ClusterRoleBinding>(client, label, value, "ClusterRoleBindings")
                .await;
            return;
        }
    };
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if caps.scope != kube::discovery::Scope::Cluster
                || !caps.supports_operation(kube::discovery::verbs::DELETE_COLLECTION)
                || matches!(
                    resource.kind.as_str(),
                    "Namespace" | "CustomResourceDefinition"
                )
            {
                continue;
            }
            let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
            if let Err(e) = api
                .delete_collection(&DeleteParams::background(), &selector)
                .await
            {
                eprintln!(
                    "opconform: deleting the {} of {value} failed: {e}",
                    resource.plural
                );
            }
        }
    }
}

/// The placement of a scenario on a shared cluster.
pub fn shared_placement(prefix: &str, image: &str) -> Placement {
    Placement {
        namespace: format!("{prefix}-system"),
        suffix: format!("-{prefix}"),
        image: image.to_string(),
        watch_namespaces: WORKLOAD_NAMESPACES
            .iter()
            .map(|n| format!("{prefix}-{n}"))
            .collect(),
        labels: [(SCENARIO_LABEL.to_string(), prefix.to_string())].into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_placement_prefixes_namespaces_and_suffixes_cluster_names() {
        let p = shared_placement("opconform-abc123", "registry/op:1");
        assert_eq!(p.namespace, "opconform-abc123-system");
        assert_eq!(p.suffix, "-opconform-abc123");
        assert_eq!(p.image, "registry/op:1");
        assert_eq!(
            p.watch_namespaces,
            [
                "opconform-abc123-default",
                "opconform-abc123-team-a",
                "opconform-abc123-team-b"
            ]
        );
    }
}

//! Deploying manifests through the Kubernetes API, the same way on every provider: read
//! multi-document YAML (the operator's `config/`), resolve each document's kind by
//! discovery, server-side apply it (optionally into a namespace), and wait for rollouts
//! with a stated bound, failing with what was last observed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope};
use kube::{Client, ResourceExt as _};
use serde::Deserialize as _;

/// The field manager opconform applies with.
pub const FIELD_MANAGER: &str = "opconform";

/// The CustomResourceDefinitions this process applied, by name: a run on a cluster it
/// does not own removes those that were not there before it ([`crds_applied`]).
static CRDS_APPLIED: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// The names of the CustomResourceDefinitions [`apply_all`] applied in this process.
pub fn crds_applied() -> std::collections::BTreeSet<String> {
    CRDS_APPLIED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Errors of deploying.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// A manifest file or directory could not be read.
    #[error("cannot read manifest {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A document is not valid YAML or lacks apiVersion/kind/metadata.name.
    #[error("manifest {path}, document {index}: {reason}")]
    Document {
        /// The file.
        path: PathBuf,
        /// 1-based document index in the file.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// Manifests could not be rendered (kustomize).
    #[error("cannot render the manifests of {dir}: {reason}")]
    Render {
        /// The directory rendered.
        dir: PathBuf,
        /// What went wrong: the renderer's own error.
        reason: String,
    },
    /// A manifest could not be changed as the operator's profile says.
    #[error("manifest {path}: {reason}")]
    Patch {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Discovery failed.
    #[error("cannot discover the cluster's api resources")]
    Discovery(#[source] Box<kube::Error>),
    /// The cluster does not serve the document's kind.
    #[error("the cluster does not serve {api_version} {kind} (from {path})")]
    UnknownKind {
        /// apiVersion.
        api_version: String,
        /// kind.
        kind: String,
        /// The file.
        path: PathBuf,
    },
    /// The API server refused the apply.
    #[error("applying {kind} {name} from {path} failed")]
    Apply {
        /// Kind.
        kind: String,
        /// Name.
        name: String,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// A rollout did not finish within its bound.
    #[error("deployment {namespace}/{name} did not roll out within {within:?}; last seen: {last}")]
    RolloutTimeout {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The bound.
        within: Duration,
        /// The last observed status.
        last: String,
    },
}

/// One document to apply, with where it came from.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The object.
    pub object: DynamicObject,
    /// Its file.
    pub path: PathBuf,
}

/// Reads every YAML document of `path` (a file, or a directory read recursively in name
/// order), skipping empty documents.
///
/// # Errors
/// Unreadable files, invalid YAML, documents without apiVersion, kind or metadata.name.
pub fn read_manifests(path: &Path) -> Result<Vec<Manifest>, DeployError> {
    let read_err = |source| DeployError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(read_err)?
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        let mut out = Vec::new();
        for entry in entries {
            let is_yaml = entry.extension().is_some_and(|e| e == "yaml" || e == "yml");
            if entry.is_dir() || is_yaml {
                out.extend(read_manifests(&entry)?);
            }
        }
        return Ok(out);
    }
    let text = std::fs::read_to_string(path).map_err(read_err)?;
    parse_manifests(&text, path)
}

/// Parses multi-document YAML.
///
/// # Errors
/// Invalid YAML, documents without apiVersion, kind or metadata.name.
pub fn parse_manifests(text: &str, path: &Path) -> Result<Vec<Manifest>, DeployError> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let index = i + 1;
        let bad = |reason: String| DeployError::Document {
            path: path.to_path_buf(),
            index,
            reason,
        };
        let value = serde_json::Value::deserialize(doc).map_err(|e| bad(e.to_string()))?;
        if value.is_null() {
            continue;
        }
        for field in ["apiVersion", "kind"] {
            if value
                .get(field)
                .and_then(|v| v.as_str())
                .is_none_or(str::is_empty)
            {
                return Err(bad(format!("{field} is missing")));
            }
        }
        if value["metadata"]["name"].as_str().is_none_or(str::is_empty) {
            return Err(bad("metadata.name is missing".into()));
        }
        let object: DynamicObject =
            serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        out.push(Manifest {
            object,
            path: path.to_path_buf(),
        });
    }
    Ok(out)
}

/// The API resource and capabilities the server serves `manifest`'s kind as.
///
/// # Errors
/// A kind the server does not serve.
pub fn resolve(
    discovery: &Discovery,
    manifest: &Manifest,
) -> Result<(ApiResource, ApiCapabilities), DeployError> {
    let types = manifest.object.types.clone().unwrap_or_default();
    let (group, version) = match types.api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), types.api_version.clone()),
    };
    let gvk = kube::core::GroupVersionKind::gvk(&group, &version, &types.kind);
    discovery
        .resolve_gvk(&gvk)
        .ok_or_else(|| DeployError::UnknownKind {
            api_version: types.api_version.clone(),
            kind: types.kind.clone(),
            path: manifest.path.clone(),
        })
}

/// Where [`apply_all`] puts namespaced objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespacing<'a> {
    /// Every namespaced object into this namespace, whatever it names.
    Into(&'a str),
    /// Those that name no namespace into this one, as `kubectl apply -n` does; the others
    /// where they say.
    Default(&'a str),
}

/// Server-side applies manifests in order, namespaced objects as `namespacing` says; CRDs
/// are waited for until Established before later documents are resolved.
///
/// # Errors
/// Unknown kinds, refused applies.
pub async fn apply_all(
    client: &Client,
    manifests: &[Manifest],
    namespacing: Namespacing<'_>,
) -> Result<Vec<DynamicObject>, DeployError> {
    let mut discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|e| DeployError::Discovery(Box::new(e)))?;
    let mut applied = Vec::new();
    for manifest in manifests {
        let resolved = match resolve(&discovery, manifest) {
            Ok(r) => r,
            Err(_) => {
                // A CRD applied earlier may have added the kind: rediscover once.
                discovery = Discovery::new(client.clone())
                    .run()
                    .await
                    .map_err(|e| DeployError::Discovery(Box::new(e)))?;
                resolve(&discovery, manifest)?
            }
        };
        let (resource, caps) = resolved;
        let mut object = manifest.object.clone();
        let name = object.name_any();
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => Api::all_with(client.clone(), &resource),
            Scope::Namespaced => {
                let ns = match namespacing {
                    Namespacing::Into(ns) => ns.to_string(),
                    Namespacing::Default(ns) => object
                        .metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| ns.to_string()),
                };
                object.metadata.namespace = Some(ns.clone());
                Api::namespaced_with(client.clone(), &ns, &resource)
            }
        };
        let result = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
            .map_err(|source| DeployError::Apply {
                kind: resource.kind.clone(),
                name: name.clone(),
                path: manifest.path.clone(),
                source: Box::new(source),
            })?;
        if resource.kind == "CustomResourceDefinition" {
            CRDS_APPLIED
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(name.clone());
            let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
                Api::all(client.clone());
            let established = kube::runtime::wait::await_condition(
                crds,
                &name,
                kube::runtime::wait::conditions::is_crd_established(),
            );
            // Bounded: a CRD that never establishes surfaces as UnknownKind on its first use.
            let _ = tokio::time::timeout(Duration::from_secs(30), established).await;
        }
        applied.push(result);
    }
    Ok(applied)
}

/// Why a Deployment is (not) rolled out, kubectl's `rollout status` rule.
pub fn rollout_complete(d: &Deployment) -> Result<(), String> {
    let generation = d.metadata.generation.unwrap_or(0);
    let spec_replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(status) = &d.status else {
        return Err("no status yet".into());
    };
    if status.observed_generation.unwrap_or(0) < generation {
        return Err(format!(
            "waiting for the controller to observe generation {generation}"
        ));
    }
    let updated = status.updated_replicas.unwrap_or(0);
    let replicas = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if updated < spec_replicas {
        return Err(format!("{updated} of {spec_replicas} updated replicas"));
    }
    if replicas > updated {
        return Err(format!(
            "{} old replicas pending termination",
            replicas - updated
        ));
    }
    if available < updated {
        return Err(format!(
            "{available} of {updated} updated replicas available"
        ));
    }
    Ok(())
}

/// Waits until a Deployment has rolled out (kubectl's rule), bounded by `within`.
///
/// # Errors
/// [`DeployError::RolloutTimeout`] with the last observed state.
pub async fn wait_for_rollout(
    client: &Client,
    namespace: &str,
    name: &str,
    within: Duration,
) -> Result<Deployment, DeployError> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deadline = tokio::time::Instant::now() + within;
    let mut ticker = tokio::time::interval(Duration::from_millis(50));
    loop {
        ticker.tick().await;
        let last = match api.get_opt(name).await {
            Ok(Some(d)) => match rollout_complete(&d) {
                Ok(()) => return Ok(d),
                Err(why) => why,
            },
            Ok(None) => "not found".to_string(),
            Err(e) => format!("error reading it: {e}"),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(DeployError::RolloutTimeout {
                namespace: namespace.to_string(),
                name: name.to_string(),
                within,
                last,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_read_in_order_and_empty_ones_skipped() {
        let text = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: b}\n";
        let m = parse_manifests(text, Path::new("x.yaml")).unwrap();
        let names: Vec<_> = m.iter().map(|m| m.object.name_any()).collect();
        assert_eq!(names, vec!["a", "b"]);
    }

    #[test]
    fn a_document_without_a_kind_is_refused_naming_file_and_index() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nmetadata: {name: b}\n";
        let e = parse_manifests(text, Path::new("config/x.yaml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "manifest config/x.yaml, document 2: kind is missing"
        );
    }

    #[test]
    fn rollout_needs_the_observed_generation_and_all_replicas_available() {
        let mut d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "d", "generation": 2},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}
        })).unwrap();
        assert!(rollout_complete(&d).unwrap_err().contains("generation 2"));
        d.status.as_mut().unwrap().observed_generation = Some(2);
        assert!(rollout_complete(&d).is_ok());
        d.status.as_mut().unwrap().available_replicas = Some(1);
        assert_eq!(
            rollout_complete(&d).unwrap_err(),
            "1 of 2 updated replicas available"
        );
    }
}

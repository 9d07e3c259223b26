//! What both reconcilers share: server-side apply of an owned object, the status write,
//! the owner reference, and the one error a reconcile ends with.

use kube::api::{Patch, PatchParams};
use kube::core::{NamespaceResourceScope, object::HasStatus};
use kube::{Api, Resource, ResourceExt as _};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// The field manager of every write of the operator.
pub const FIELD_MANAGER: &str = "workloads-operator";

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed.
    #[error("failed to {action} {name}")]
    Api {
        /// What was being done, e.g. "apply StatefulSet".
        action: &'static str,
        /// The object's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The custom resource lacks a namespace or uid.
    #[error("the object is missing metadata.{0}")]
    MissingMetadata(&'static str),
    /// An object to apply could not be built from its JSON.
    #[error("cannot build the {kind} to apply")]
    Build {
        /// Its kind.
        kind: &'static str,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// The result of a reconcile.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `value` as a `K` of `kind`.
///
/// # Errors
/// [`Error::Build`] when `value` does not have the shape of a `K`.
pub fn build<K: DeserializeOwned>(kind: &'static str, value: serde_json::Value) -> Result<K> {
    serde_json::from_value(value).map_err(|source| Error::Build { kind, source })
}

/// The API of `K` in the namespace of `owner`.
///
/// # Errors
/// [`Error::MissingMetadata`] when `owner` has no namespace.
pub fn namespaced<K, O>(client: &kube::Client, owner: &O) -> Result<Api<K>>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    O: Resource,
{
    let namespace = owner
        .namespace()
        .ok_or(Error::MissingMetadata("namespace"))?;
    Ok(Api::namespaced(client.clone(), &namespace))
}

/// The controller owner reference to `owner`, which blocks its deletion until the
/// owned object is gone (foreground deletion).
///
/// # Errors
/// [`Error::MissingMetadata`] when `owner` has no uid yet.
pub fn owner_reference<O>(
    owner: &O,
) -> Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>
where
    O: Resource<DynamicType = ()>,
{
    owner
        .controller_owner_ref(&())
        .ok_or(Error::MissingMetadata("uid"))
}

/// Server-side applies `object` (owned by this operator's field manager, conflicts
/// forced) and returns what the server stored.
///
/// # Errors
/// [`Error::Api`] when the server refuses it.
pub async fn apply<K>(api: &Api<K>, name: &str, object: &K, action: &'static str) -> Result<K>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(|source| Error::Api {
        action,
        name: name.into(),
        source,
    })
}

/// Writes `status` to `object`'s status subresource (a merge patch), unless it already
/// says that.
///
/// # Errors
/// [`Error::Api`] when the server refuses it.
pub async fn write_status<K, S>(api: &Api<K>, object: &K, status: S) -> Result<()>
where
    K: Resource + HasStatus<Status = S> + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize + PartialEq,
{
    if object.status() == Some(&status) {
        return Ok(());
    }
    let name = object.name_any();
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .map(drop)
    .map_err(|source| Error::Api {
        action: "write the status of",
        name,
        source,
    })
}
